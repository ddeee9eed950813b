"""Option definitions shared by every command (defined once, as sqlite-utils and pip-tools do)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.broker.config.brokerconf import BrokerConfig, load_config

STORE_PANEL = "Store"
OUTPUT_PANEL = "Output"
GEOMETRY_PANEL = "Geometry (default: broker.conf, else read from the files, else RocketMQ's defaults)"

StoreOpt = Annotated[Optional[Path], typer.Option(
    "--store", "-s", help="Store root directory (storePathRootDir).", rich_help_panel=STORE_PANEL,
    file_okay=False, dir_okay=True)]
BrokerConfOpt = Annotated[Optional[Path], typer.Option(
    "--broker-conf", "-c", help="broker.conf to read store paths and geometry from.", rich_help_panel=STORE_PANEL,
    exists=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output (NDJSON for message streams).",
                                       rich_help_panel=OUTPUT_PANEL)]
HashSlotsOpt = Annotated[Optional[int], typer.Option(
    "--hash-slots", help="Index hash slots per file (maxHashSlotNum; default: from the store's index files, else "
    "5000000; writers never write another geometry beside the files').",
    rich_help_panel=GEOMETRY_PANEL)]
MaxIndexOpt = Annotated[Optional[int], typer.Option(
    "--max-index", help="Index items per file (maxIndexNum; default: from the store's index files, else "
    "20000000).",
    rich_help_panel=GEOMETRY_PANEL)]
CommitLogSizeOpt = Annotated[Optional[int], typer.Option(
    "--commitlog-file-size", help="Commit-log segment size (mappedFileSizeCommitLog; default: from the files, "
    "else 1 GiB).", rich_help_panel=GEOMETRY_PANEL)]
CqSizeOpt = Annotated[Optional[int], typer.Option(
    "--cq-file-size", help="Consume-queue file size (mappedFileSizeConsumeQueue, default 6000000).",
    rich_help_panel=GEOMETRY_PANEL)]
BeginOpt = Annotated[Optional[str], typer.Option(
    "--begin", "-b", help="Start of the time range: epoch milliseconds or ISO-8601 (default: 0).")]
EndOpt = Annotated[Optional[str], typer.Option(
    "--end", "-e", help="End of the time range, inclusive: epoch milliseconds or ISO-8601 (default: no limit).")]


def expand_path(p):
    """`~` and `~user` expanded in a path option (the shell does not expand them after `--opt=` or in quotes)."""
    if p is None:
        return None
    if isinstance(p, Path):
        return Path(os.path.expanduser(p))
    if isinstance(p, str):
        return p if p == "-" else os.path.expanduser(p)
    return p


def build_config(store: Optional[Path], broker_conf: Optional[Path], hash_slots: Optional[int] = None,
                 max_index: Optional[int] = None, commitlog_file_size: Optional[int] = None,
                 cq_file_size: Optional[int] = None) -> BrokerConfig:
    """Defaults < broker.conf < command-line options."""
    from engine.errors import InvalidArgumentError

    if store is None and broker_conf is None:
        raise InvalidArgumentError("no store given: pass --store DIR or --broker-conf FILE")
    store, broker_conf = expand_path(store), expand_path(broker_conf)
    return load_config(
        broker_conf,
        storePathRootDir=str(store) if store is not None else None,
        maxHashSlotNum=hash_slots,
        maxIndexNum=max_index,
        mappedFileSizeCommitLog=commitlog_file_size,
        mappedFileSizeConsumeQueue=cq_file_size,
    )
