"""What recovery refuses to repair (issue 34): a store whose commit log is absent (its directory missing, empty, or
an unmounted volume) while its consume queues point into it. That is no crash to repair: "recovering" it would cut
every queue and quarantine every index file, and the messages are on the volume that is not there. Recover refuses
(exit 2, nothing changed) and doctor reports it as an error with the manual step.

Kept apart from the plan (engine.ops.recovery.planner calls refuse_missing_commitlog once the queues are read)."""
from __future__ import annotations

from engine.broker.config.brokerconf import BrokerConfig
from engine.errors import StoreError


class MissingCommitLogError(StoreError):
    """The store's commit log is not there while its consume queues point into it (exit 2)."""


def missing_commitlog(cfg: BrokerConfig, segments: int, queue_max_phys: int) -> str | None:
    """Why the commit log counts as missing (None when it does not): no commit-log segment, while a consume queue
    holds units pointing up to `queue_max_phys` (offset + size of the furthest valid unit)."""
    if segments or queue_max_phys <= 0:
        return None
    dirs = cfg.commitlog_dirs
    where = ", ".join(str(d) for d in dirs)
    state = "holds no segment file" if all(d.is_dir() for d in dirs) else "is missing"
    return (f"the commit log ({where}) {state}, but consume queues point into it up to offset {queue_max_phys}: "
            "the messages are elsewhere (an unmounted volume, a moved directory, storePathCommitLog pointing "
            "elsewhere); mount or restore it, or give the right --broker-conf")


def refuse_missing_commitlog(cfg: BrokerConfig, segments: int, queue_max_phys: int) -> None:
    """Raise MissingCommitLogError (exit 2) when missing_commitlog says the commit log is missing."""
    why = missing_commitlog(cfg, segments, queue_max_phys)
    if why is not None:
        raise MissingCommitLogError(f"recover refuses this store: {why}; nothing was changed")
