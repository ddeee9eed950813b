"""rmqtool recover: bring a store back to a consistent state after a crash (format §6, §7)."""
from __future__ import annotations

from typing import Callable, Optional

from engine.broker.config.brokerconf import BrokerConfig

#: The note a dry run gives when another process holds the store lock.
LOCKED_NOTE = "the store is locked by another process; the plan may be out of date by the time it runs"


def recover(cfg: BrokerConfig, no_check_crc: bool = False, index_safe: bool = False, dry_run: bool = False,
            full_scan: bool = False, force: bool = False, broker_conf_given: bool = False,
            progress=None, say: Optional[Callable[[str], None]] = None):
    """engine.ops.recovery.recover's plan (done, or only planned with `dry_run`). broker.conf's
    checkCRCOnRecover=false stands for --no-check-crc when a broker.conf is given (`broker_conf_given`), its
    messageIndexSafe=true for --index-safe. A dry run on a store another process holds locked says so first
    (`say`, a line for stderr)."""
    from engine.broker.config.lock import StoreLock
    from engine.ops.recovery import recover as run_recovery

    if broker_conf_given and no_check_crc is False and not cfg.checkCRCOnRecover:
        no_check_crc = True  # broker.conf checkCRCOnRecover=false
    if dry_run and say is not None and cfg.root.is_dir() and StoreLock(cfg.root).is_locked_elsewhere():
        say(LOCKED_NOTE)
    return run_recovery(cfg, check_crc=not no_check_crc, index_safe=index_safe or cfg.messageIndexSafe,
                        dry_run=dry_run, full_scan=full_scan, force=force, progress=progress)
