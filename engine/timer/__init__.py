"""The RocketMQ 5 timer store (RIP-43): timerwheel, timerlog/, config/timercheck, config/timermetrics
(docs/timer-store-format.md; code cites its sections, as in "timer §7").

    layout.py   paths and geometry (precision, roll window, file size, the wheel's fixed slot count)
    codec.py    slots, units, blanks, timercheck, timermetrics
    files.py    the files read-only: the wheel's non-zero slots, the timer-log files, the checkpoint, the metrics
    chain.py    the one slot-chain walker (cycle and bounds protected)
    records.py  the commit-log records units point at, resolved as the broker's dequeue reads them
    store.py    TimerStore: all of it opened together, the broker's start-up readings (valid end, cursor)
    pending.py  which timer messages are pending (the list rule)
    inspect.py  what the files hold
    verify.py   every problem, located, with its severity and what the broker does with it
    repair.py   keeping the timer store consistent when recover cuts or replaces commit-log records;
                what clean's deletions cost pending timer messages

Public surface (for the commands and for `rmqtool doctor`): list_pending, pending_messages, inspect_timer,
verify_timer, TimerReport, TimerFinding.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.timer.inspect import TimerInspection, inspect_timer
    from engine.timer.pending import PendingList, PendingMessage, list_pending
    from engine.timer.verify import ERROR, INFO, WARNING, TimerFinding, TimerReport, verify_timer

__all__ = ["ERROR", "INFO", "WARNING", "PendingList", "PendingMessage", "TimerFinding", "TimerInspection",
           "TimerReport", "inspect_timer", "list_pending", "pending_messages", "verify_timer"]

#: Where each public name lives. Imported when first asked for (PEP 562): a module that needs one submodule of the
#: timer store (recovery needs layout's paths) does not pay for all of them (about 35 ms at every command's start).
_FROM = {**dict.fromkeys(("TimerInspection", "inspect_timer"), "engine.timer.inspect"),
         **dict.fromkeys(("PendingList", "PendingMessage", "list_pending"), "engine.timer.pending"),
         **dict.fromkeys(("ERROR", "INFO", "WARNING", "TimerFinding", "TimerReport", "verify_timer"),
                         "engine.timer.verify")}


def __getattr__(name: str):
    import importlib

    if name in _FROM:
        value = getattr(importlib.import_module(_FROM[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'engine.timer' has no attribute {name!r}")


def pending_messages(cfg) -> list[dict]:
    """The pending timer messages as plain records (the JSON `timer list --json` prints, one dict each)."""
    with list_pending(cfg) as res:
        return [m.as_dict() for m in res]
