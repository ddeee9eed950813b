"""TimerStore: one store's timer files opened together, read-only, with the broker's own readings of them
(timer §7): the timer log's valid end, the live slots, the enqueue cursor into rmq_sys_wheel_timer/0.

Opening never raises on damage: every reader here reports what is wrong, and the operations on top (pending,
inspect, verify, repair) decide what it means.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from engine.broker.config.checkpoint import Checkpoint
from engine.broker.commitlog.log import CommitLog, open_commitlog
from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.consumequeue.offsets import queue_min_offset
from engine.broker.consumequeue.queue import ConsumeQueue
from engine.broker.layout import StoreLayout
from engine.errors import NotAStoreError, StoreError
from engine.timer.codec import UNIT_PRE_SIZE_FOR_MSG, UNIT_SIZE
from engine.timer.files import (CheckpointFile, LogEnd, MetricsFile, TimerLogFiles, WheelFile, read_checkpoint,
                                read_metrics, read_wheel)
from engine.timer.layout import (TIMER_QUEUE_ID, TIMER_TOPIC, WHEEL_SLOTS, TimerGeometry, TimerLayout)
from engine.timer.records import Resolved, resolve, resolve_many

#: reviseQueueOffset looks this many consume-queue units back for the one its last unit's record came from.
REVISE_SEARCH_UNITS = 20000
#: The read buffer of getMessageByCommitOffset: maxMessageSize + 100; a sizePy outside 0..this makes it throw.
READ_BUFFER_EXTRA = 100


@dataclass
class EnqueueCursor:
    """Where the broker's enqueue resumes in rmq_sys_wheel_timer/0 at its next start (timer §7)."""
    offset: int
    how: str
    queue_min: int
    queue_max: int
    throws: str = ""        # why the broker's start-up computation would throw ('' when it does not)


class TimerStore:
    """The timer store of one broker store, read-only. Use as a context manager (closes its files)."""

    def __init__(self, cfg: BrokerConfig, require: bool = True, commitlog_end: int | None = None):
        """commitlog_end: the commit log's end of data as it will be (recovery's plan: the end it leaves, damaged
        records in the middle stepped over), instead of where the log's data ends now."""
        self.cfg = cfg
        self.store_layout = StoreLayout.of(cfg)
        self.layout = TimerLayout(self.store_layout)
        if require:
            self.store_layout.require_store()
            if not self.layout.exists():
                raise NotAStoreError(f"{cfg.root} has no timer store (no timerwheel, timerlog/ or config/timercheck)")
        self.geometry = TimerGeometry.of(cfg)
        self.wheel: WheelFile = read_wheel(self.layout.wheel)
        self.checkpoint: CheckpointFile = read_checkpoint(self.layout.checkpoint)
        self.metrics: MetricsFile = read_metrics(self.layout.metrics, self.layout.rel(self.layout.metrics))
        self.log = TimerLogFiles(self.layout, self.geometry)
        self.commitlog: CommitLog | None = None
        self._cq: ConsumeQueue | None = None
        self._cq_opened = False
        self._cl_end: int | None = commitlog_end
        self._recovered: np.ndarray | None = None
        try:
            self.end: LogEnd = self.log.valid_end(self.checkpoint.cp.lastTimerLogFlushPos)
            self.commitlog = open_commitlog(cfg)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ lifecycle
    def close(self) -> None:
        self.log.close()
        if self.commitlog is not None:
            self.commitlog.close()
        if self._cq is not None:
            self._cq.close()

    def __enter__(self) -> "TimerStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ the commit log
    @property
    def commitlog_end(self) -> int:
        """The commit log's end of data (its last segment walked, from the checkpoint's confirm offset when it
        lies there)."""
        if self._cl_end is None:
            hint = None
            try:
                hint = Checkpoint.load(self.store_layout.checkpoint, strict=False).confirmPhyOffset or None
            except (OSError, StoreError):
                hint = None
            self._cl_end = self.commitlog.find_end(hint)
        return self._cl_end

    def resolve(self, offset: int, size: int, check_crc: bool = False) -> Resolved:
        return resolve(self.commitlog, self.commitlog_end, offset, size, check_crc)

    def resolve_many(self, offsets, sizes, check_crc: bool = False) -> list[Resolved]:
        """resolve() for each (offset, size), read together (records.resolve_many)."""
        return resolve_many(self.commitlog, self.commitlog_end, offsets, sizes, check_crc)

    # ------------------------------------------------------------ the wheel
    @property
    def read_time_ms(self) -> int:
        return self.checkpoint.cp.lastReadTimeMs

    def slot_states(self, slots: np.ndarray | None = None) -> np.ndarray:
        """For each non-zero slot (of the wheel on disk, or `slots`): 'live', 'stale' or 'misplaced' (timer §2)."""
        s = self.wheel.slots if slots is None else slots
        p = self.geometry.precision_ms
        times = s["time"].astype(np.int64)
        placed = (times % WHEEL_SLOTS) == s["index"]
        t_ms = times * p
        live = placed & (times != 0) & (t_ms >= self.read_time_ms) & (t_ms < self.read_time_ms + WHEEL_SLOTS * p)
        out = np.where(live, "live", "stale").astype(object)
        out[~placed & (times != 0)] = "misplaced"
        return out

    def live_slots(self) -> np.ndarray:
        """The slots the broker's dequeue has still to fire, by time, as its start-up leaves them."""
        rec = self.recovered_slots()
        s = rec[self.slot_states(rec) == "live"]
        return s[np.argsort(s["time"], kind="stable")]

    def recovered_slots(self) -> np.ndarray:
        """The wheel's non-zero slots after the broker's start-up recovery (timer §7 steps 3 and 6): every slot
        with units between the walk's start and the valid end points at its last one there (a slot holding another
        time is taken over, first = last); then live slots that still end past the valid end but start before it
        are re-pointed by a second walk from the earliest such start."""
        if self._recovered is None:
            self._recovered = self._recover_wheel()
        return self._recovered

    def _units_between(self, lo: int, hi: int):
        """(positions, slot times) of the units the recovery walk accepts in [lo, hi), a chunk at a time."""
        for seg in self.log.segments:
            if seg.end <= lo or seg.start >= hi:
                continue
            stop, _ = self.log.file_end(seg)
            for first, units in self.log.chunks(seg, upto=min(stop, hi - seg.start)):
                pos = first + np.arange(len(units), dtype=np.int64) * UNIT_SIZE
                sel = pos >= lo
                if not sel.all():
                    pos, units = pos[sel], units[sel]
                if len(pos):
                    yield pos, units["write_ms"].astype(np.int64) + units["delay"].astype(np.int64)

    def _recover_wheel(self) -> np.ndarray:
        p = self.geometry.precision_ms
        rows = {int(r["index"]): [int(r["time"]), int(r["first"]), int(r["last"]), int(r["num"]), int(r["magic"])]
                for r in self.wheel.slots}
        v = self.end.end
        if not self.wheel.exists or self.wheel.length_ok or self.wheel.length == 0:
            for pos, t in self._units_between(self.end.start, v):
                self._apply(rows, pos, t, force=True)
            lo, hi = self.read_time_ms, self.read_time_ms + WHEEL_SLOTS * p
            firsts = [r[1] for i, r in rows.items() if lo <= r[0] * p < hi and r[0] % WHEEL_SLOTS == i and r[2] > v]
            if firsts and min(firsts) < v:
                seg = self.log.queue.find(max(min(firsts), self.log.min_pos))
                start = seg.start if seg is not None else self.log.min_pos
                for pos, t in self._units_between(start, v):
                    self._apply(rows, pos, t, force=False)
        out = np.empty(len(rows), self.wheel.slots.dtype)
        for k, (i, r) in enumerate(sorted(rows.items())):
            out[k] = (i, *r)
        return out

    def _apply(self, rows: dict, pos: np.ndarray, t: np.ndarray, force: bool) -> None:
        """reviseSlot for a chunk of units in log order: per time, its last unit (and its first, for a take-over)."""
        p = self.geometry.precision_ms
        order = np.lexsort((pos, t))
        t_sorted, pos_sorted = t[order], pos[order]
        starts = np.flatnonzero(np.r_[True, t_sorted[1:] != t_sorted[:-1]])
        ends = np.r_[starts[1:], len(t_sorted)]
        for a, b in zip(starts, ends):
            time_ms = int(t_sorted[a])
            idx = (time_ms // p) % WHEEL_SLOTS
            cur = rows.get(idx)
            if cur is not None and cur[0] == time_ms // p:
                cur[2] = int(pos_sorted[b - 1])
            elif force:
                rows[idx] = [time_ms // p, int(pos_sorted[a]), int(pos_sorted[b - 1]),
                             cur[3] if cur else 0, cur[4] if cur else 0]

    # ------------------------------------------------------------ the consume queue of rmq_sys_wheel_timer
    @property
    def timer_queue(self) -> ConsumeQueue | None:
        if not self._cq_opened:
            self._cq_opened = True
            qdir = self.store_layout.consumequeue_dir / TIMER_TOPIC / str(TIMER_QUEUE_ID)
            if qdir.is_dir() and not os.path.islink(qdir):
                try:
                    self._cq = ConsumeQueue(self.cfg.root, TIMER_TOPIC, TIMER_QUEUE_ID, self.cfg.cq_file_size)
                except StoreError:
                    self._cq = None
        return self._cq

    def enqueue_cursor(self) -> EnqueueCursor:
        """TimerMessageStore.recover's currQueueOffset: the queue offset after the record of the timer log's last
        unit (reviseQueueOffset), else the checkpoint's; never past masterTimerQueueOffset; clamped to the queue."""
        cp = self.checkpoint.cp
        cq = self.timer_queue
        qmin = queue_min_offset(cq, self.commitlog.min_offset) if cq is not None else 0
        qmax = cq.max_offset_in_queue if cq is not None else 0
        cur, how, throws = None, "", ""
        raw = self._raw_before_end()
        if raw is not None:
            offset_py, size_py = raw
            if size_py < 0 or size_py > self.cfg.maxMessageSize + READ_BUFFER_EXTRA:
                throws = (f"the 12 bytes before the timer log's valid end {self.end.end} read as sizePy {size_py}: "
                          "the broker's start-up (reviseQueueOffset) throws on it")
            else:
                r = self.resolve(offset_py, size_py)
                if r.record is not None:
                    q = self._revise(r.record.queue_offset, offset_py, size_py)
                    cur, how = q + 1, f"after queue offset {q}, the record of the timer log's last unit"
        if cur is None:
            cur, how = cp.lastTimerQueueOffset, "the checkpoint's lastTimerQueueOffset"
        if cp.masterTimerQueueOffset < cur:
            cur, how = cp.masterTimerQueueOffset, "the checkpoint's masterTimerQueueOffset"
        if cq is not None and cur < qmin:
            cur, how = qmin, f"the queue's min offset (was {how})"
        elif cq is not None and cur > qmax:
            cur, how = qmax, f"the queue's max offset (was {how})"
        return EnqueueCursor(cur, how, qmin, qmax, throws)

    def resumable_cursor(self) -> tuple[int, int] | None:
        """(queue offset after the record of the last unit before the valid end whose record can be read, its
        position): where the enqueue should resume so that no message whose unit was lost is skipped."""
        for seg in reversed(self.log.segments):
            if seg.start >= self.end.end:
                continue
            stop, _ = self.log.file_end(seg)
            for first, units in reversed(list(self.log.chunks(seg, upto=min(stop, self.end.end - seg.start)))):
                for i in range(len(units) - 1, -1, -1):
                    r = self.resolve(int(units["offset_py"][i]), int(units["size_py"][i]))
                    if r.record is not None and r.ok:
                        q = self._revise(r.record.queue_offset, r.record.offset, r.record.size)
                        return q + 1, first + i * UNIT_SIZE
        return None

    def _raw_before_end(self) -> tuple[int, int] | None:
        """(offsetPy, sizePy) as reviseQueueOffset reads them: 24 bytes before the valid end, whatever is there."""
        at = self.end.end - (UNIT_SIZE - UNIT_PRE_SIZE_FOR_MSG)
        if at < 0:
            return None
        seg = self.log.queue.find(at)
        if seg is None:
            return None
        buf = self.log.queue.buffer(seg)
        p = at - seg.start
        if p + 12 > len(buf):
            return None
        return int.from_bytes(buf[p:p + 8], "big", signed=True), int.from_bytes(buf[p + 8:p + 12], "big", signed=True)

    def _revise(self, msg_offset: int, offset_py: int, size_py: int) -> int:
        cq = self.timer_queue
        if cq is None:
            return msg_offset
        q = msg_offset
        for _ in range(REVISE_SEARCH_UNITS):
            if q < 0:
                break
            u = cq.unit(q)
            if u is not None and u[0] == offset_py and u[1] == size_py:
                return q
            q -= 1
        return msg_offset

    def queued_units(self, cursor: int):
        """(queue offset, commit-log offset, size) of the rmq_sys_wheel_timer/0 units the broker has still to
        enqueue, from the cursor to the queue's end, one at a time."""
        cq = self.timer_queue
        if cq is None:
            return
        for q in range(cursor, cq.max_offset_in_queue):
            u = cq.unit(q)
            if u is None:
                return
            yield q, int(u[0]), int(u[1])
