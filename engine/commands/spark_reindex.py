"""rmqtool spark-reindex: rebuild the index files from the commit log, on Spark or in-process."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from engine.broker.config.brokerconf import BrokerConfig
from engine.jobs.framework import DEFAULT_MASTER


def spark_reindex(cfg: BrokerConfig, out: Optional[Path] = None, master: str = DEFAULT_MASTER, dry_run: bool = False,
                  replace: bool = False, spark_conf: Optional[dict] = None, new_geometry: bool = False,
                  progress=None):
    """engine.jobs.broker_index.spark_reindex's ReindexResult."""
    from engine.jobs import broker_index

    return broker_index.spark_reindex(cfg, out=out, master=master, dry_run=dry_run, replace=replace,
                                      spark_conf=spark_conf, new_geometry=new_geometry, progress=progress)
