"""What deleting commit-log segments costs the timer store, by the broker's own rules (timer §8).

The broker's commit-log clean-up (DefaultMessageStore.CleanCommitLogService) deletes segments by age alone: it
never asks the timer store. A timer message keeps its record young by rolling (a message due after the roll
window is re-put every timerRollWindowSlot seconds, 2 days by default, shorter than fileReservedTime's 72 hours),
so a running broker rarely loses one; a store that was stopped for days, or cleaned by hand, can. When a pending
message's record is gone, the dequeue finds nothing when its slot fires and drops it.

The timer log has its own rule (TimerMessageStore, every 30 s): a timer-log file other than the last is deleted
when the unit at its last unit position (TimerLog.getOffsetForLastUnit) points below the commit log's first offset;
the first file that stays (or whose last unit is not a unit) ends the deletion.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from engine.broker.config.brokerconf import BrokerConfig
from engine.timer.codec import UNIT_SIZE, magic_ok
from engine.timer.layout import TimerLayout
from engine.timer.pending import message_at, scan_pending
from engine.timer.store import TimerStore

#: Pending messages a clean plan names one by one (the rest are counted).
MAX_NAMED = 1000


@dataclass
class TimerCleanImpact:
    """What a new commit-log minimum offset means for the timer store."""
    min_offset: int
    pending: int = 0                                   # pending timer messages before the clean-up
    lost: list[dict] = field(default_factory=list)     # pending messages whose record lies below the minimum
    lost_total: int = 0
    markers_lost: int = 0                              # pending delete markers below it (their recalls undone)
    needed_from: int | None = None                     # lowest commit-log offset a pending message still needs
    log_files: list[Path] = field(default_factory=list)  # timer-log files the broker's rule deletes
    log_stop: str = ""

    def as_dict(self) -> dict:
        return {"minCommitLogOffset": self.min_offset, "pendingTimerMessages": self.pending,
                "pendingLost": self.lost_total, "lost": self.lost, "deleteMarkersLost": self.markers_lost,
                "lowestOffsetNeeded": self.needed_from, "timerLogFilesDeleted": [p.name for p in self.log_files],
                "timerLogStoppedBecause": self.log_stop}


def lowest_needed_offset(cfg: BrokerConfig) -> int | None:
    """The lowest commit-log offset a pending timer message (or delete marker) still needs; None without any."""
    if not TimerLayout.of(cfg).exists():
        return None
    with TimerStore(cfg, require=False) as ts:
        res = scan_pending(ts, parallel=True)  # clean's survey: --workers N
        offs = [int(res.rows["offset"].min())] if len(res.rows) else []
        offs += [m.offset for m in res.markers]
        return min(offs) if offs else None


def timer_clean_impact(cfg: BrokerConfig, min_offset: int) -> TimerCleanImpact | None:
    """The pending timer messages a commit log starting at `min_offset` loses, and the timer-log files the broker's
    own rule then deletes. None when the store has no timer store. Reads only."""
    if not TimerLayout.of(cfg).exists():
        return None
    out = TimerCleanImpact(min_offset)
    with TimerStore(cfg, require=False) as ts:
        res = scan_pending(ts, parallel=True)  # clean's survey: --workers N
        out.pending = len(res.rows)
        offs = ([int(res.rows["offset"].min())] if len(res.rows) else []) + [m.offset for m in res.markers]
        out.needed_from = min(offs) if offs else None
        lost = res.rows[res.rows["offset"] < min_offset]
        out.lost_total = len(lost)
        out.lost = [m.as_dict() for m in (message_at(ts, row) for row in lost[:MAX_NAMED]) if m is not None]
        out.markers_lost = sum(1 for m in res.markers if m.offset < min_offset)
        _log_files(ts, min_offset, out)
    return out


def _log_files(ts: TimerStore, min_offset: int, out: TimerCleanImpact) -> None:
    """deleteExpiredFileByOffsetForTimerLog: oldest first, never the last, stop at the first file that stays."""
    segs = ts.log.segments
    at = ts.geometry.offset_for_last_unit
    for seg in segs[:-1]:
        buf = ts.log.queue.buffer(seg)
        if at + UNIT_SIZE > len(buf):
            out.log_stop = f"{seg.path.name} is too short to hold its last unit"
            return
        size = int.from_bytes(buf[at:at + 4], "big", signed=True)
        magic = int.from_bytes(buf[at + 12:at + 16], "big", signed=True)
        if size != UNIT_SIZE or not magic_ok(magic):
            out.log_stop = f"{seg.path.name} has no unit at its last unit position {at}"
            return
        offset_py = int.from_bytes(buf[at + 28:at + 36], "big", signed=True)
        if offset_py >= min_offset:
            out.log_stop = (f"{seg.path.name}'s last unit points at commit-log offset {offset_py} >= {min_offset}")
            return
        out.log_files.append(seg.path)
    if segs:
        out.log_stop = out.log_stop or f"{segs[-1].path.name} is the last timer-log file (never deleted)"
