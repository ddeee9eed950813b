"""rmqtool repair config, consume-queue, timer: the repairs `rmqtool doctor` names beside recover and clean
(engine.ops.repair), each under the store lock, with a dry run and a quarantine. One function per subcommand,
each answering the repair's plan (done, or only planned with `dry_run`)."""
from __future__ import annotations

from typing import Optional

from engine.broker.config.brokerconf import BrokerConfig
from engine.errors import InvalidArgumentError


def config_source(from_bak: bool, from_store: bool, empty: bool) -> str:
    """Where repair config takes the file from (engine.ops.repair's FROM_BAK, FROM_STORE_SOURCE or EMPTY):
    InvalidArgumentError unless exactly one is asked."""
    from engine.ops.repair import EMPTY, FROM_BAK, FROM_STORE_SOURCE

    chosen = [s for s, on in ((FROM_BAK, from_bak), (FROM_STORE_SOURCE, from_store), (EMPTY, empty)) if on]
    if len(chosen) != 1:
        raise InvalidArgumentError("give exactly one of --from-bak, --from-store, --empty")
    return chosen[0]


def config(cfg: BrokerConfig, name: str, source: str, dry_run: bool = False):
    """rmqtool repair config: one config/*.json file repaired from `source` (config_source)."""
    from engine.ops.repair import repair_config

    return repair_config(cfg, name, source, dry_run)


def consume_queue(cfg: BrokerConfig, topic: Optional[str] = None, queue_id: Optional[int] = None,
                  dry_run: bool = False, rebuild: bool = False):
    """rmqtool repair consume-queue: the empty last consume-queue files moved out (of one topic or queue), or with
    `rebuild` one queue's files moved out and dispatched again from the commit log."""
    from engine.ops.repair import repair_consume_queue

    return repair_consume_queue(cfg, topic, queue_id, dry_run, rebuild)


def timer(cfg: BrokerConfig, dry_run: bool = False):
    """rmqtool repair timer: the timer store rebuilt from its timer log."""
    from engine.ops.repair import repair_timer

    return repair_timer(cfg, dry_run)
