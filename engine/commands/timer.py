"""rmqtool timer inspect, list, verify: the RocketMQ 5 timer store (engine.timer), read-only. One function per
subcommand; the exit codes are decided here (3: what the broker will read cannot be resolved, or problems)."""
from __future__ import annotations

from typing import Optional

from engine.broker.config.brokerconf import BrokerConfig

#: Exit codes (docs/output-contract.md).
OK, DAMAGED = 0, 3


def inspect(cfg: BrokerConfig):
    """rmqtool timer inspect: engine.timer.TimerInspection of the store's timer files."""
    from engine.timer import inspect_timer

    return inspect_timer(cfg)


def pending(cfg: BrokerConfig, topic: Optional[str] = None, after: Optional[int] = None,
            before: Optional[int] = None, now_ms: Optional[int] = None):
    """rmqtool timer list: engine.timer.list_pending (a context manager: the PendingList, its messages read as
    it is iterated, sorted by fire time)."""
    from engine.timer import list_pending

    return list_pending(cfg, topic, after, before, now_ms=now_ms)


def pending_exit_code(res) -> int:
    """3 when units the broker will read cannot be resolved, or the list lacks something (res.problems)."""
    return DAMAGED if res.unresolved_total or res.problems else OK


def verify(cfg: BrokerConfig, now: Optional[int] = None, check_crc: bool = True, progress=None):
    """rmqtool timer verify: engine.timer.TimerReport (findings worst first); progress(phase, done, total)."""
    from engine.timer import verify_timer

    return verify_timer(cfg, now=now, check_crc=check_crc, **({"progress": progress} if progress else {}))


def verify_exit_code(rep) -> int:
    """3 when there is an error or a warning (info findings do not count)."""
    return OK if rep.ok else DAMAGED
