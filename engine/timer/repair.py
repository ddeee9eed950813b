"""Keeping the timer store consistent with a commit log that recovery cut or repaired (timer §10), and what the
clean-up's deletions cost pending timer messages (timer §8).

plan_timer_repair() (read-only) works out, given the commit log recovery will leave (its new end and the ranges it
replaces with placeholders or fillers):

1. the cut: the timer log's valid end (the broker's start-up rule, timer §7), moved back over every unit at the
   end whose record recovery removes (the units are appended in commit-log order, so those units are a suffix);
   the bytes from the cut to the last non-zero byte are zeroed and the files after it deleted, as the broker's own
   recovery truncates (a cut at a file start deletes that file instead: the broker's start-up must not read the
   previous file's blank as the last unit, timer §7);
2. the wheel: every slot whose chain reaches the cut points again at its last unit before it (found in the log),
   or is emptied when it has none; num loses the removed units;
3. tombstones: a unit of a live slot before the cut whose record is removed, or is not a timer message, gets
   offsetPy -1: the broker drops it when the slot fires instead of handing its conversion something that makes it
   retry forever (RocketMQ #10668);
4. the checkpoint: lastTimerLogFlushPos no later than the new end, the queue offsets no later than the end of
   rmq_sys_wheel_timer/0 after recovery;
5. what is lost: every pending message (or delete marker) whose record goes, and the recalled messages whose
   delete marker goes (the broker will deliver them).

apply_timer_repair() carries it out, keeping every byte it changes in the quarantine.
"""
from __future__ import annotations

import os
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.layout import segment_name
from engine.broker.commitlog.message import VALID
from engine.fsutil import fsync_dir, write_fully, zero_data
from engine.timer.chain import walk_chain
from engine.timer.codec import (TOMBSTONE_OFFSET, UNIT_PRE_SIZE_FOR_MSG, UNIT_SIZE, Slot, TimerCheckpoint,
                                is_delete)
from engine.timer.layout import SLOT_SIZE, WHEEL_LENGTH, TimerLayout, settle_timer_log_size
from engine.timer.pending import PendingScan, message_at, scan_pending
from engine.timer.records import (EXPIRED, NOT_A_RECORD, NOT_TIMER, PAST_LOG, SIZE_MISMATCH, build_delete_key,
                                  timer_record)
from engine.timer.store import TimerStore

#: What a unit's record may not be for the unit to stay (the broker would stall on it, or find nothing).
_UNUSABLE = (PAST_LOG, NOT_A_RECORD, SIZE_MISMATCH, NOT_TIMER)
#: Lost messages the plan names one by one (the rest are counted).
MAX_LOST_LISTED = 10000


@dataclass
class LostMessage:
    """A pending timer message (or delete marker) whose record recovery removes."""
    what: str                     # "message" or "delete marker"
    why: str
    timer_log_position: int | None
    queue_offset: int | None      # in rmq_sys_wheel_timer/0 when it was not yet enqueued
    commit_log_offset: int
    store_size: int
    slot_time_ms: int | None
    uniq_key: str | None = None
    topic: str | None = None
    fire_at_ms: int | None = None

    def as_dict(self) -> dict:
        return {"what": self.what, "why": self.why, "uniqKey": self.uniq_key, "topic": self.topic,
                "fireAtMs": self.fire_at_ms, "commitLogOffset": self.commit_log_offset, "storeSize": self.store_size,
                "timerLogPosition": self.timer_log_position, "storedQueueOffset": self.queue_offset,
                "slotTimeMs": self.slot_time_ms}


@dataclass
class SlotFix:
    index: int
    before: Slot
    after: Slot | None            # None: the slot is emptied (zeros)

    def as_dict(self) -> dict:
        return {"index": self.index, "time": self.before.time, "before": [self.before.first, self.before.last,
                                                                          self.before.num],
                "after": None if self.after is None else [self.after.first, self.after.last, self.after.num]}


@dataclass
class TimerRepair:
    """What recovery does to the timer store (engine.ops.recovery prints it in its plan)."""
    skipped: str = ""                       # why the timer store is left alone ('' when it is not)
    valid_end_before: int = 0               # the timer log's valid end (the broker's rule)
    data_end_before: int = 0
    cut: int | None = None                  # units from here on are removed
    new_end: int = 0
    units_removed: int = 0
    zero_file: str | None = None            # timer-log file whose tail is zeroed (in-file zero_from..zero_to)
    zero_from: int = 0
    zero_to: int = 0
    files_deleted: list[str] = field(default_factory=list)
    slots: list[SlotFix] = field(default_factory=list)
    tombstones: list[tuple[int, str]] = field(default_factory=list)   # (timer-log position, why)
    checkpoint_before: TimerCheckpoint | None = None
    checkpoint_after: TimerCheckpoint | None = None
    lost: list[LostMessage] = field(default_factory=list)
    lost_total: int = 0
    resurrected: list[str] = field(default_factory=list)   # "<topic>+<uniqKey>" of recalls that are undone
    notes: list[str] = field(default_factory=list)
    pending: PendingScan | None = field(default=None, repr=False)   # the plan's pending scan (no CRCs), for reuse

    @property
    def changed(self) -> bool:
        return bool(self.zero_to > self.zero_from or self.files_deleted or self.slots or self.tombstones
                    or self.checkpoint_after is not None)

    @property
    def quarantine_bytes(self) -> int:
        return (max(0, self.zero_to - self.zero_from) + SLOT_SIZE * len(self.slots) + UNIT_SIZE * len(self.tombstones)
                + (56 if self.checkpoint_after is not None else 0))

    def actions(self) -> list[str]:
        out = []
        if self.zero_to > self.zero_from:
            out.append(f"zero timer-log file {self.zero_file} bytes {self.zero_from}..{self.zero_to} "
                       f"({self.units_removed} unit(s) removed: the timer log ends at {self.new_end})")
        for name in reversed(self.files_deleted):
            out.append(f"delete timer-log file {name}")
        if self.slots:
            emptied = sum(1 for s in self.slots if s.after is None)
            out.append(f"re-point {len(self.slots) - emptied} wheel slot(s) at their last unit before "
                       f"{self.new_end}, empty {emptied}")
        if self.tombstones:
            out.append(f"empty {len(self.tombstones)} timer-log unit(s) of live slots whose records are gone "
                       "(offsetPy -1: the broker drops them)")
        if self.checkpoint_after is not None:
            out.append("write config/timercheck (lastTimerLogFlushPos "
                       f"{self.checkpoint_after.lastTimerLogFlushPos}, queue offsets "
                       f"{self.checkpoint_after.lastTimerQueueOffset}/{self.checkpoint_after.masterTimerQueueOffset})")
        return out

    def as_dict(self) -> dict:
        return {"skipped": self.skipped or None, "validEndBefore": self.valid_end_before,
                "dataEndBefore": self.data_end_before, "cut": self.cut, "newEnd": self.new_end,
                "unitsRemoved": self.units_removed, "zeroFile": self.zero_file, "zeroFrom": self.zero_from,
                "zeroTo": self.zero_to, "filesDeleted": self.files_deleted,
                "slotsChanged": [s.as_dict() for s in self.slots],
                "tombstones": [{"timerLogPosition": p, "why": w} for p, w in self.tombstones],
                "checkpointBefore": self.checkpoint_before.as_dict() if self.checkpoint_before else None,
                "checkpointAfter": self.checkpoint_after.as_dict() if self.checkpoint_after else None,
                "pendingLost": self.lost_total, "lost": [m.as_dict() for m in self.lost],
                "recallsUndone": self.resurrected, "notes": self.notes}


class _Removed:
    """Commit-log offsets recovery removes: at or past `end`, or inside a replaced range."""

    def __init__(self, end: int, ranges: list[tuple[int, int]]):
        self.end = end
        r = sorted(ranges)
        self.starts = np.array([a for a, _ in r], dtype=np.int64)
        self.ends = np.array([b for _, b in r], dtype=np.int64)
        self._starts, self._ends = self.starts.tolist(), self.ends.tolist()

    def mask(self, offsets: np.ndarray) -> np.ndarray:
        offs = offsets.astype(np.int64)
        out = offs >= self.end
        if len(self.starts):
            i = np.searchsorted(self.starts, offs, side="right") - 1
            inside = (i >= 0) & (offs < self.ends[np.maximum(i, 0)])
            out |= inside
        return out

    def __call__(self, offset: int) -> bool:
        """mask() for one offset (asked once per pending unit: no array for it)."""
        if offset >= self.end:
            return True
        i = bisect_right(self._starts, offset) - 1
        return i >= 0 and offset < self._ends[i]


def plan_timer_repair(cfg: BrokerConfig, commitlog_end: int, removed_ranges: list[tuple[int, int]],
                      queue_max_after: int | None) -> TimerRepair | None:
    """The timer store's part of a recovery plan (see the module docstring); None when the store has no timer
    store. Reads only."""
    layout = TimerLayout.of(cfg)
    if not layout.exists():
        return None
    removed = _Removed(commitlog_end, removed_ranges)
    # Records are resolved against the log recovery leaves: the damaged store's own end of data lies at its first
    # damaged record, and every timer message after it would read as past the log and be cut (issue 34 item 1).
    with TimerStore(cfg, require=False, commitlog_end=commitlog_end) as ts:
        rep = TimerRepair(valid_end_before=ts.end.end, data_end_before=ts.end.data_end, new_end=ts.end.end)
        w = ts.wheel
        if w.exists and not w.length_ok:
            rep.skipped = (f"timerwheel is {w.length} bytes, not the broker's {WHEEL_LENGTH}: recover leaves the timer "
                           "store alone (run `rmqtool timer verify`)")
            return rep
        if ts.log.size_note or any(p.kind == "wrong-size" for p in ts.log.problems):
            rep.skipped = "timer-log files have the wrong size: recover leaves the timer store alone"
            return rep
        _plan_cut(ts, rep, removed)
        _plan_slots(ts, rep)
        scan = rep.pending = scan_pending(ts, on_unit=lambda u, res: _tombstone(rep, removed, u, res))
        rep.tombstones.sort()
        _plan_checkpoint(ts, rep, queue_max_after)
        _plan_lost(ts, rep, scan, removed)
        return rep


# ==================================================================== the cut


def _plan_cut(ts: TimerStore, rep: TimerRepair, removed: _Removed) -> None:
    log = ts.log
    segs = log.segments
    if not segs:
        return
    v = ts.end.end
    cut = segs[0].start
    for seg in reversed(segs):
        if seg.start >= v:
            continue
        stop, _ = log.file_end(seg)
        kept = None
        for first, units in reversed(list(log.chunks(seg, upto=min(v - seg.start, stop)))):
            valid = (units["size"] == UNIT_SIZE) & ((units["magic"] | 0xF) == 0xF)
            gone = removed.mask(units["offset_py"]) | (units["offset_py"] == TOMBSTONE_OFFSET)
            for i in np.flatnonzero(valid & ~gone)[::-1]:
                # The last unit left must resolve: the broker's start-up resumes the enqueue after its record
                # (timer §7), so a torn one would make it skip the messages of the units cut after it.
                if ts.resolve(int(units["offset_py"][i]), int(units["size_py"][i])).kind not in _UNUSABLE:
                    kept = first + (int(i) + 1) * UNIT_SIZE
                    break
            if kept is not None:
                break
        if kept is not None:
            cut = kept
            break
    cut_seg = log.queue.find(cut)
    if cut_seg is None:
        return
    at = segs.index(cut_seg)
    if cut == cut_seg.start and at > 0:
        # The file would start empty: it goes, and the previous one ends at its blank (timer §7).
        prev = segs[at - 1]
        rep.new_end = prev.start + log.file_end(prev)[0]
        delete_from = at
    else:
        rep.new_end = cut
        delete_from = at + 1
        lo = cut - cut_seg.start
        stop, why = log.file_end(cut_seg)
        if not (why == "blank" and lo == stop):  # a full file keeps its blank
            hi = log.last_nonzero(cut_seg, lo)
            if hi > lo:
                rep.zero_file, rep.zero_from, rep.zero_to = cut_seg.path.name, lo, hi
    rep.files_deleted = [sg.path.name for sg in segs[delete_from:]]
    rep.units_removed = _count_units(ts, cut, v)
    if cut < v or rep.files_deleted or rep.zero_to > rep.zero_from:
        rep.cut = cut


def _count_units(ts: TimerStore, lo: int, hi: int) -> int:
    n = 0
    for seg in ts.log.segments:
        if seg.end <= lo or seg.start >= hi:
            continue
        for first, units in ts.log.chunks(seg, upto=min(hi - seg.start, seg.readable_len)):
            pos = first + np.arange(len(units), dtype=np.int64) * UNIT_SIZE
            valid = (units["size"] == UNIT_SIZE) & ((units["magic"] | 0xF) == 0xF)
            n += int(np.count_nonzero(valid & (pos >= lo)))
    return n


# ==================================================================== the wheel


def _plan_slots(ts: TimerStore, rep: TimerRepair) -> None:
    """Slots whose chain reaches the new end: their last unit before it, found in the log (timer §2)."""
    end = rep.new_end
    s = ts.wheel.slots
    if not len(s):
        return
    states = ts.slot_states()
    hit = (states != "misplaced") & (s["time"] != 0) & ((s["last"] >= end) | (s["first"] >= end))
    if not np.any(hit):
        return
    p = ts.geometry.precision_ms
    rows = s[hit]
    want = rows["time"].astype(np.int64) * p
    last_pos: dict[int, int] = {}
    first_pos: dict[int, int] = {}
    removed_sign: dict[int, int] = {}
    v = ts.end.end
    for seg in ts.log.segments:
        if seg.start >= max(end, v):
            break
        stop, _ = ts.log.file_end(seg)
        for first, units in ts.log.chunks(seg, upto=stop):
            valid = (units["size"] == UNIT_SIZE) & ((units["magic"] | 0xF) == 0xF)
            t = units["write_ms"].astype(np.int64) + units["delay"].astype(np.int64)
            sel = np.flatnonzero(valid & np.isin(t, want))
            for i in sel:
                pos = first + int(i) * UNIT_SIZE
                ti = int(t[i])
                if pos < end:
                    last_pos[ti] = pos
                    first_pos.setdefault(ti, pos)
                elif pos < v:
                    removed_sign[ti] = removed_sign.get(ti, 0) + (-1 if is_delete(int(units["magic"][i])) else 1)
    for r in rows:
        t_ms = int(r["time"]) * p
        before = Slot(int(r["time"]), int(r["first"]), int(r["last"]), int(r["num"]), int(r["magic"]))
        if t_ms in last_pos:
            first = before.first if before.first < end else first_pos[t_ms]
            counted = [0]
            walk = walk_chain(ts.log, last_pos[t_ms], end,
                              visit=lambda u: counted.__setitem__(0, counted[0] + (-1 if is_delete(u.magic) else 1)))
            num = counted[0] if walk.complete else before.num - removed_sign.get(t_ms, 0)
            after = Slot(before.time, first, last_pos[t_ms], num, before.magic)
        else:
            after = None
        rep.slots.append(SlotFix(int(r["index"]), before, after))


# ==================================================================== tombstones


def _tombstone(rep: TimerRepair, removed: _Removed, u, res) -> None:
    """A unit of a live slot, before the new end, whose record goes or that the broker's dequeue would stall on."""
    if u.pos >= rep.new_end or u.offset_py == TOMBSTONE_OFFSET:
        return
    if removed(u.offset_py):
        rep.tombstones.append((u.pos, f"its record at commit-log offset {u.offset_py} is removed by recover"))
    elif res.kind in _UNUSABLE:
        rep.tombstones.append((u.pos, res.why))


# ==================================================================== checkpoint


def _plan_checkpoint(ts: TimerStore, rep: TimerRepair, queue_max_after: int | None) -> None:
    cpf = ts.checkpoint
    if not cpf.exists or cpf.length < 32:
        if ts.log.segments:
            rep.notes.append("config/timercheck is missing or torn: recover leaves it (run `rmqtool timer verify`)")
        return
    cp = cpf.cp
    new = TimerCheckpoint(**cp.__dict__)
    new.lastTimerLogFlushPos = min(cp.lastTimerLogFlushPos, rep.new_end)
    if queue_max_after is not None:
        new.lastTimerQueueOffset = min(cp.lastTimerQueueOffset, queue_max_after)
        new.masterTimerQueueOffset = min(cp.masterTimerQueueOffset, queue_max_after)
    rep.checkpoint_before = cp
    if new != cp:
        rep.checkpoint_after = new


# ==================================================================== what is lost


def _plan_lost(ts: TimerStore, rep: TimerRepair, res: PendingScan, removed: _Removed) -> None:
    gone = _Gone(rep.new_end, {p for p, _ in rep.tombstones}, removed)
    lost = _lost_messages(ts, res.rows, gone)
    lost_markers: set[tuple[str, int | None]] = set()
    kept_markers: set[tuple[str, int | None]] = set()
    for mk in res.markers:
        why = gone(mk.timer_log_position, mk.offset)
        (lost_markers if why else kept_markers).add((mk.key, mk.fire_at_ms))
        if why:
            lost.append(LostMessage("delete marker", why, mk.timer_log_position, mk.queue_offset, mk.offset, mk.size,
                                    None,
                                    None, mk.key.split("+", 1)[0] if mk.key else None, mk.fire_at_ms))
    for u in res.unresolved:
        if u.kind in (EXPIRED,):
            continue
        why = gone(u.timer_log_position, u.offset_py)
        if why or u.kind in (PAST_LOG, NOT_A_RECORD, SIZE_MISMATCH, NOT_TIMER):
            what = "delete marker" if u.magic is not None and is_delete(u.magic) else "message"
            x = LostMessage(what, why or u.why, u.timer_log_position, u.queue_offset, u.offset_py, u.size_py,
                            u.slot_time_ms)
            _describe(ts, x)
            lost.append(x)
    for row in res.cancelled if lost_markers else ():
        m = message_at(ts, row)
        if m is None:
            continue
        key = (build_delete_key(m.topic, m.uniq_key), m.fire_at_ms)
        if key in lost_markers and key not in kept_markers and not gone(m.timer_log_position, m.commit_log_offset):
            rep.resurrected.append(key[0])
    lost = _one_per_record(lost)
    lost.sort(key=lambda x: (x.fire_at_ms is None, x.fire_at_ms or 0, x.commit_log_offset))
    rep.lost_total = len(lost)
    rep.lost = lost[:MAX_LOST_LISTED]
    _note_lost(rep, lost)


def _one_per_record(lost: list[LostMessage]) -> list[LostMessage]:
    """One entry per message: a message both in the wheel (a timer-log unit) and still to enqueue (a unit of
    rmq_sys_wheel_timer/0 after the timer checkpoint) is one message that loses its record, not two. The wheel's
    entry stays, with what the other knows and it does not."""
    by: dict[tuple[str, int], LostMessage] = {}
    out: list[LostMessage] = []
    for x in lost:
        key = (x.what, x.commit_log_offset)
        first = by.get(key) if x.commit_log_offset >= 0 else None
        if first is None:
            by[key] = x
            out.append(x)
            continue
        keep, other = (first, x) if first.timer_log_position is not None or x.timer_log_position is None else (x, first)
        for name in ("timer_log_position", "queue_offset", "slot_time_ms", "uniq_key", "topic", "fire_at_ms"):
            if getattr(keep, name) is None:
                setattr(keep, name, getattr(other, name))
        if keep is not first:
            out[out.index(first)] = keep
            by[key] = keep
    return out


class _Gone:
    """Why a unit (at timer-log position `pos`, None for one still to enqueue) and its record (at `offset`) do not
    survive recover: after the new end of the timer log, emptied, or its record removed ('' when they do)."""

    def __init__(self, end: int, stones: set[int], removed: _Removed):
        self.end, self.stones, self.removed = end, stones, removed

    def __call__(self, pos: int | None, offset: int) -> str:
        if pos is not None and pos >= self.end:
            return "its timer-log unit is after the new end of the timer log"
        if pos is not None and pos in self.stones:
            return "its unit is emptied: its record is removed or unusable"
        if self.removed(offset):
            return "its record is removed by recover"
        return ""


def _lost_messages(ts: TimerStore, rows: np.ndarray, gone: _Gone) -> list[LostMessage]:
    """The pending messages (scan rows) that do not survive recover, with what their records still say."""
    lost: list[LostMessage] = []
    if not len(rows):
        return lost
    stones = gone.stones
    hit = (rows["pos"] >= gone.end) | np.isin(rows["pos"], np.fromiter(stones, np.int64, len(stones))) | \
        gone.removed.mask(rows["offset"])
    for row in rows[hit]:
        pos = int(row["pos"]) if row["pos"] >= 0 else None
        why = gone(pos, int(row["offset"]))
        m = message_at(ts, row)
        x = LostMessage("message", why, pos, int(row["qoff"]) if pos is None else None, int(row["offset"]),
                        int(row["size"]), int(row["slot"]) if row["slot"] >= 0 else None)
        if m is not None:
            x.uniq_key, x.topic, x.fire_at_ms = m.uniq_key, m.topic, m.fire_at_ms
        lost.append(x)
    return lost


def _note_lost(rep: TimerRepair, lost: list[LostMessage]) -> None:
    if rep.lost_total:
        msgs = sum(1 for x in lost if x.what == "message")
        unread = sum(1 for x in lost if x.what == "message" and x.uniq_key is None)
        rep.notes.append(f"{msgs} pending timer message(s) lose their record and will not be delivered"
                         + (f" ({unread} of them no longer readable)" if unread else "")
                         + (f"; {rep.lost_total - msgs} pending delete marker(s) go with them"
                            if rep.lost_total > msgs else ""))
    if rep.resurrected:
        rep.notes.append(f"{len(rep.resurrected)} recalled timer message(s) lose their delete marker: the broker will "
                         "deliver them")


def _describe(ts: TimerStore, x: LostMessage) -> None:
    """Fill in what the record says when its bytes still decode (past the end recovery keeps, but not zeroed)."""
    if x.commit_log_offset < 0:
        return
    r = ts.commitlog.check_at(x.commit_log_offset, check_crc=False)
    if r.status == VALID and r.record is not None:
        tr = timer_record(r.record, x.commit_log_offset)
        x.uniq_key, x.topic, x.fire_at_ms = tr.uniq_key, tr.real_topic, tr.timer_out_ms


# ==================================================================== apply


def apply_timer_repair(cfg: BrokerConfig, rep: TimerRepair, quarantine) -> None:
    """Carry out the timer part of a recovery plan (the caller holds the store lock): the timer log, the wheel,
    the tombstones, then the checkpoint; every byte changed is kept in `quarantine` first."""
    if rep.skipped or not rep.changed:
        return
    cfg = settle_timer_log_size(cfg)  # the timer-log file size the repair was planned with (TimerGeometry.of)
    layout = TimerLayout.of(cfg)
    log_dir = layout.log_dir
    if rep.zero_to > rep.zero_from and rep.zero_file:
        path = log_dir / rep.zero_file
        quarantine.keep_range(path, rep.zero_from, rep.zero_to - rep.zero_from,
                              f"timer-log units after the new end {rep.new_end}", "zeros")
        fd = os.open(path, os.O_RDWR)
        try:   # over the units written there only: a hole inside the range stays a hole
            zero_data(fd, rep.zero_from, rep.zero_to, path)
            os.fsync(fd)
        finally:
            os.close(fd)
    for name in reversed(rep.files_deleted):
        if (log_dir / name).exists():
            quarantine.keep_file(log_dir / name, f"timer-log file after the new end {rep.new_end}")
    if rep.files_deleted:
        fsync_dir(log_dir)
    if rep.slots:
        for fix in rep.slots:
            quarantine.keep_range(layout.wheel, fix.index * SLOT_SIZE, SLOT_SIZE,
                                  f"wheel slot {fix.index} (time {fix.before.time})",
                                  "the slot re-pointed" if fix.after is not None else "zeros")
        fd = os.open(layout.wheel, os.O_RDWR)
        try:
            for fix in rep.slots:
                data = fix.after.encode() if fix.after is not None else bytes(SLOT_SIZE)
                write_fully(fd, data, fix.index * SLOT_SIZE, layout.wheel, undo=False)
            os.fsync(fd)
        finally:
            os.close(fd)
    for pos, why in rep.tombstones:
        seg = _segment_path(log_dir, pos, cfg.mappedFileSizeTimerLog)
        at = pos % cfg.mappedFileSizeTimerLog
        quarantine.keep_range(seg, at, UNIT_SIZE, f"timer-log unit at {pos}: {why}", "the unit with offsetPy -1")
        _write(seg, at + UNIT_PRE_SIZE_FOR_MSG, TOMBSTONE_OFFSET.to_bytes(8, "big", signed=True))
    if rep.checkpoint_after is not None:
        quarantine.keep_range(layout.checkpoint, 0, 56, "the timer checkpoint before recovery",
                              "the recovered timer checkpoint")
        _write(layout.checkpoint, 0, rep.checkpoint_after.encode())


def _segment_path(log_dir: Path, pos: int, file_size: int) -> Path:
    return log_dir / segment_name(pos - pos % file_size)


def _write(path: Path, pos: int, data: bytes) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        write_fully(fd, data, pos, path, undo=False)
        os.fsync(fd)
    finally:
        os.close(fd)
