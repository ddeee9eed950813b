"""Which timer messages are pending (timer §9): what the broker will still deliver, and when.

The rule, in the broker's terms:
1. The live slots (time >= timercheck.lastReadTimeMs, timer §2) hold the units the dequeue has still to fire.
   Each slot's chain is walked from lastPos (chain.walk_chain: it stops where the broker's walk would go wrong).
2. The units of rmq_sys_wheel_timer/0 the enqueue has still to read (from the enqueue cursor, timer §7) will be
   put in the wheel at the next start: their messages are pending too (state "queued").
3. A unit's record is read as the broker reads it (records.resolve); a unit whose record cannot be read is not
   pending (the broker drops it): it is a problem, reported with the list.
4. A record with TIMER_DEL_UNIQKEY is a delete marker (a recall), never a message. A message is cancelled when a
   pending marker names `<REAL_TOPIC>+<UNIQ_KEY>` and has the same TIMER_OUT_MS: both end in the slot of that
   time, where the dequeue drops the message (a marker's recall handle carries TIMER_OUT_MS + 1, floored again).
5. A rolled unit (magic roll) sits in a nearer slot: its message is re-put and enqueued again when the slot fires;
   its fire time is TIMER_OUT_MS all the same.

Memory: the scan keeps one numpy row per pending message (PENDING_ROW: its fire time, where its unit and record
are) and a summary per live slot; a message's fields are read again from its record when it is listed. Units wait
to be resolved RESOLVE_CHUNK at a time (records.resolve_many reads their records together), then are taken in the
order they were walked.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from engine.broker.layout import StoreLayout
from engine.broker.topics import require_topic
from engine.progress import Progress, no_progress
from engine.timer.chain import ChainWalk, walk_chain
from engine.timer.codec import Slot, TimerUnit, is_delete, is_roll
from engine.timer.records import (BAD_CRC, RESOLVE_CHUNK, Resolved, TimerRecord, build_delete_key,
                                  no_cycle_collection)
from engine.timer.store import EnqueueCursor, TimerStore

WHEEL, ROLLED, QUEUED = "wheel", "rolled", "queued"
_STATES = (WHEEL, ROLLED, QUEUED)
_WHEEL, _ROLLED, _QUEUED = range(3)
#: A unit whose magic and record disagree on being a delete marker (never delivered).
MAGIC_MISMATCH = "magic-mismatch"
#: Problems of one kind a scan keeps in detail (the rest are counted).
MAX_DETAILS = 10000
#: Pending rows a scan keeps as tuples before it turns them into PENDING_ROW (about 200 bytes each).
ROWS_BLOCK = 4096
#: Units of one slot put for another time that a scan names.
MAX_WRONG_SLOT_NOTED = 10

#: One pending message: where its unit and record are (-1: none), its fire time, state, real topic (an index into
#: PendingScan.topics) and a hash of `<REAL_TOPIC>+<UNIQ_KEY>` with its fire time (the cancel key).
PENDING_ROW = np.dtype([("fire", "<i8"), ("offset", "<i8"), ("size", "<i4"), ("pos", "<i8"), ("slot", "<i8"),
                        ("qoff", "<i8"), ("state", "u1"), ("topic", "<i4"), ("key", "<i8")])


@dataclass(slots=True)
class PendingMessage:
    """One pending timer message (the plain record `timer list` prints)."""
    uniq_key: str | None
    topic: str | None             # REAL_TOPIC
    queue_id: int | None          # REAL_QID
    keys: list[str]
    tags: str | None
    fire_at_ms: int               # TIMER_OUT_MS
    roll_times: int               # TIMER_ROLL_TIMES of the record (rolls so far)
    state: str                    # wheel | rolled | queued
    slot_time_ms: int | None      # the slot its unit waits in (None: not in the wheel yet)
    commit_log_offset: int        # the record the unit points at (the latest roll copy for a rolled message)
    store_size: int
    store_timestamp: int
    queue_offset: int             # its queue offset in rmq_sys_wheel_timer/0
    timer_log_position: int | None

    def as_dict(self) -> dict:
        return {"uniqKey": self.uniq_key, "topic": self.topic, "queueId": self.queue_id, "keys": self.keys,
                "tags": self.tags, "fireAtMs": self.fire_at_ms, "rollTimes": self.roll_times, "state": self.state,
                "slotTimeMs": self.slot_time_ms, "commitLogOffset": self.commit_log_offset,
                "storeSize": self.store_size, "storeTimestamp": self.store_timestamp,
                "storedQueueOffset": self.queue_offset, "timerLogPosition": self.timer_log_position}


@dataclass(slots=True)
class Unresolved:
    """A unit the broker will read but cannot use (its message is lost or its dequeue goes wrong)."""
    kind: str                     # records.* kind
    why: str
    slot_time_ms: int | None
    timer_log_position: int | None
    queue_offset: int | None      # for a unit of rmq_sys_wheel_timer/0 still to be enqueued
    offset_py: int
    size_py: int
    magic: int | None


@dataclass(slots=True)
class DeleteMarker:
    key: str
    fire_at_ms: int | None
    timer_log_position: int | None
    queue_offset: int | None
    offset: int                   # its record's commit-log offset
    size: int


@dataclass
class SlotWalk:
    """One live slot (as the broker's start-up leaves it) and how its chain walk went."""
    index: int
    time_ms: int
    first: int
    last: int
    num: int
    walk: ChainWalk
    disk: Slot | None = None      # the slot as the file holds it, when the broker's start-up changes it
    count: int = 0                # units, a delete unit counting -1 (what num should be)
    wrong_slot: list[tuple[int, int]] = field(default_factory=list)  # (position, time) of units put for another time


@dataclass
class PendingScan:
    """What the live chains and the units still to enqueue hold (see the module docstring)."""
    rows: np.ndarray = field(default_factory=lambda: np.empty(0, PENDING_ROW))        # pending, not recalled
    cancelled: np.ndarray = field(default_factory=lambda: np.empty(0, PENDING_ROW))   # recalled
    topics: list = field(default_factory=list)
    markers: list[DeleteMarker] = field(default_factory=list)
    unresolved: list[Unresolved] = field(default_factory=list)
    unresolved_total: int = 0
    slots: list[SlotWalk] = field(default_factory=list)
    cursor: EnqueueCursor | None = None
    crc_damaged: list[int] = field(default_factory=list)   # commit-log offsets of pending records with a bad CRC
    units_walked: int = 0

    def topic_counts(self) -> dict:
        n = np.bincount(self.rows["topic"], minlength=len(self.topics)) if len(self.rows) else []
        return {t: int(c) for t, c in zip(self.topics, n) if t is not None and c}


class _Rows:
    """A growing PENDING_ROW array: rows wait as tuples and join it ROWS_BLOCK at a time (one conversion per block
    instead of one numpy assignment per row)."""

    def __init__(self):
        self.parts: list[np.ndarray] = []
        self.waiting: list[tuple] = []

    def add(self, row: tuple) -> None:
        self.waiting.append(row)
        if len(self.waiting) >= ROWS_BLOCK:
            self._block()

    def _block(self) -> None:
        self.parts.append(np.array(self.waiting, PENDING_ROW))
        self.waiting = []

    def extend(self, rows: np.ndarray) -> None:
        """Rows made elsewhere (a worker's), after those added so far."""
        self._block()
        self.parts.append(rows)

    def array(self) -> np.ndarray:
        self._block()
        return np.concatenate(self.parts)


def _key_hash(topic: str | None, uniq: str | None, fire: int | None) -> int:
    key = build_delete_key(topic, uniq)
    return 0 if key is None else hash((key, fire))


def _mismatch(u: TimerUnit, r: TimerRecord) -> str:
    if r.is_delete:
        return (f"the unit at timer-log position {u.pos} is not a delete unit (magic {u.magic}) but its record is a "
                "delete marker: the broker refuses to put it when its slot fires")
    return (f"the unit at timer-log position {u.pos} is a delete unit (magic {u.magic}) but its record is a message: "
            "the broker takes it for a marker and never delivers it")


def scan_pending(ts: TimerStore, check_crc: bool = False,
                 on_unit: Callable[[TimerUnit, Resolved], None] | None = None,
                 parallel: bool = False, progress: Progress = no_progress) -> PendingScan:
    """Walk the live chains and the units still to enqueue (see the module docstring). `on_unit` sees every unit
    of a live chain with its resolved record, newest first per slot. `parallel`: the records may be read and
    checked on worker processes (engine.workers: by --workers N, or by the timer log's size), a chunk of units
    each, while this process walks on; they are taken in the walk's order all the same (the same answer); with
    more than one live slot the chains themselves are walked there, a range of slots each (walk_on_workers).
    progress("timer chains", slots walked, live slots) as each slot's walk is done (on every worker)."""
    from engine.workers import can_fork

    pool = _resolve_pool(ts) if parallel else None
    scan = _PendingScanner(ts, check_crc, on_unit, pool)
    try:
        with no_cycle_collection():  # units, records and rows: many objects, no cycles
            live = ts.live_slots()
            if pool is not None and on_unit is None and len(live) > 1 and can_fork():
                scan.walk_on_workers(live, progress)
            else:
                for k, s in enumerate(live, 1):
                    scan.out.slots.append(scan.walk_slot(s))
                    if k % 256 == 0 or k == len(live):
                        progress("timer chains", k, len(live))
            scan.flush()
            scan.out.cursor = ts.enqueue_cursor()
            scan.read_queued(scan.out.cursor.offset)
            scan.drain()
            return scan.finish()
    finally:
        if pool is not None:
            pool.close()


#: By default a parallel scan (timer verify) reads the records on worker processes when the timer log holds this
#: many bytes of units (about 200,000 units); with --workers N whatever its size.
PARALLEL_RESOLVE_BYTES = 10 << 20


def _resolve_pool(ts: TimerStore):
    """A WorkerPool for the records' reads and checks, or None (one worker, or a small timer log)."""
    from engine import workers

    if ts.commitlog is None or not workers.fan_out(ts.end.end, PARALLEL_RESOLVE_BYTES):
        return None
    return workers.WorkerPool(workers.count())


#: A job of the chain walk on the workers takes consecutive live slots holding about this many units at most (by
#: the slots' counts; a slot of more is a job of its own): its answer (a 57-byte row per pending message, a summary
#: per slot, the problems) and its chunk of RESOLVE_CHUNK records stay within WORKER_MEMORY.
WALK_JOB_UNITS = 1 << 16

def slot_ranges(live: np.ndarray, workers: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges of the live slots (in their order), each about the same number of units (the slots' own
    counts, at least 1 each): about 4 per worker, at most WALK_JOB_UNITS units each (a bigger slot alone)."""
    weight = np.clip(live["num"].astype(np.int64), 1, WALK_JOB_UNITS)
    target = max(1, min(WALK_JOB_UNITS, int(weight.sum()) // (4 * workers)))
    out, lo, held = [], 0, 0
    for i, w in enumerate(weight.tolist()):
        if i > lo and held + w > target:
            out.append((lo, i))
            lo, held = i, 0
        held += w
    out.append((lo, len(live)))
    return out


@dataclass
class _WalkPart:
    """What a worker's walk of a range of live slots found, to be merged in the walk's order."""
    slots: list
    rows: np.ndarray
    topics: list
    markers: list
    unresolved: list
    unresolved_total: int
    crc_damaged: list
    units_walked: int


def _walk_job(token: str, slots: np.ndarray, check_crc: bool) -> _WalkPart:
    """In a worker: the chains of these live slots walked and their records read, as this process would."""
    from engine.workers import inherited

    scan = _PendingScanner(inherited(token), check_crc, None)
    with no_cycle_collection():
        for s in slots:
            scan.out.slots.append(scan.walk_slot(s))
        scan.flush()
    out = scan.out
    return _WalkPart(out.slots, scan.rows.array(), out.topics, out.markers, out.unresolved, out.unresolved_total,
                     out.crc_damaged, out.units_walked)


#: In a worker: the commit log it opened for its chunks (one per worker process, closed when the process ends).
_worker_log: dict = {}


def _resolve_job(cfg, log_end: int, offsets: list[int], sizes: list[int], check_crc: bool) -> list[Resolved]:
    """In a worker: records.resolve_many of one chunk on the commit log this process opened (read-only)."""
    from engine.broker.commitlog.log import open_commitlog
    from engine.timer.records import resolve_many

    key = str(cfg.root)
    cl = _worker_log.get(key)
    if cl is None:
        cl = _worker_log[key] = open_commitlog(cfg)
    return resolve_many(cl, log_end, offsets, sizes, check_crc)


class _PendingScanner:
    """One run of scan_pending: the PendingScan it fills, its rows, the topic ids it hands out."""

    def __init__(self, ts: TimerStore, check_crc: bool, on_unit, pool=None):
        self.ts, self.check_crc, self.on_unit = ts, check_crc, on_unit
        self.pool = pool
        self.inflight: deque = deque()   # (future, what takes its answer): chunks on the workers, in walk order
        self.out = PendingScan()
        self.rows = _Rows()
        self.topic_ids: dict = {}
        self.waiting: list[tuple[SlotWalk, TimerUnit]] = []   # walked units whose records are not resolved yet

    def topic_id(self, t: str | None) -> int:
        i = self.topic_ids.get(t)
        if i is None:
            i = self.topic_ids[t] = len(self.out.topics)
            self.out.topics.append(t)
        return i

    def unresolved(self, x: Unresolved) -> None:
        self.out.unresolved_total += 1
        if len(self.out.unresolved) < MAX_DETAILS:
            self.out.unresolved.append(x)

    def walk_on_workers(self, live: np.ndarray, progress: Progress = no_progress) -> None:
        """The live slots' chains walked on the pool's workers, a range of slots each (chains are independent of
        each other: each is walked in its own order), their findings merged in the slots' order."""
        from engine.workers import shared

        ts = self.ts
        _ = ts.end, ts.commitlog_end   # known before the workers are forked: they inherit them
        with shared(ts) as token:      # the recovered wheel, the log's valid end, the commit log's end, its mappings
            jobs = [(token, live[lo:hi], self.check_crc) for lo, hi in slot_ranges(live, self.pool.n)]
            for part in self.pool.ordered(_walk_job, jobs):
                self.merge(part)
                progress("timer chains", len(self.out.slots), len(live))

    def merge(self, part: _WalkPart) -> None:
        """A range's findings after those of the slots before it: its topics numbered as they first appear."""
        out = self.out
        out.slots += part.slots
        out.units_walked += part.units_walked
        rows = part.rows
        if len(rows):
            ids = np.array([self.topic_id(t) for t in part.topics], np.int32)
            rows["topic"] = ids[rows["topic"]]
        self.rows.extend(rows)
        out.markers += part.markers
        out.unresolved_total += part.unresolved_total
        out.unresolved += part.unresolved[:max(0, MAX_DETAILS - len(out.unresolved))]
        out.crc_damaged += part.crc_damaged[:max(0, MAX_DETAILS - len(out.crc_damaged))]

    def walk_slot(self, s) -> SlotWalk:
        """One live slot's chain, every unit on it visited (rule 1), and the slot as the wheel file holds it."""
        ts = self.ts
        t_ms = int(s["time"]) * ts.geometry.precision_ms
        sw = SlotWalk(int(s["index"]), t_ms, int(s["first"]), int(s["last"]), int(s["num"]), ChainWalk())
        sw.walk = walk_chain(ts.log, sw.last, ts.end.end, visit=lambda u: self.visit(sw, u))
        self.out.units_walked += sw.walk.count
        disk = ts.wheel.slot(sw.index)
        if disk is None or (disk.time, disk.first, disk.last) != (int(s["time"]), sw.first, sw.last):
            sw.disk = disk
        return sw

    def visit(self, sw: SlotWalk, u: TimerUnit) -> None:
        """One unit of a live chain, counted in its slot; its record is resolved with the next chunk's."""
        sw.count += -1 if is_delete(u.magic) else 1
        if u.delayed_ms != sw.time_ms and len(sw.wrong_slot) < MAX_WRONG_SLOT_NOTED:
            sw.wrong_slot.append((u.pos, u.delayed_ms))
        self.waiting.append((sw, u))
        if len(self.waiting) >= RESOLVE_CHUNK:
            self.flush()

    def flush(self) -> None:
        """The waiting units' records read together, each unit then taken in walk order."""
        waiting, self.waiting = self.waiting, []
        self.resolve([u.offset_py for _, u in waiting], [u.size_py for _, u in waiting],
                     lambda found: [self.place(sw, u, res) for (sw, u), res in zip(waiting, found)])

    def resolve(self, offsets: list[int], sizes: list[int], then: Callable[[list[Resolved]], object]) -> None:
        """then(the records of these units): now, or (on workers) when this chunk's turn comes in walk order."""
        if self.pool is None:
            then(self.ts.resolve_many(offsets, sizes, self.check_crc))
            return
        from engine.workers import JOBS_PER_WORKER

        if offsets:
            self.inflight.append((self.pool.submit(_resolve_job, self.ts.cfg, self.ts.commitlog_end, offsets,
                                                   sizes, self.check_crc), then))
        while len(self.inflight) > self.pool.n * JOBS_PER_WORKER:
            self.take()

    def take(self) -> None:
        fut, then = self.inflight.popleft()
        then(self.pool.result(fut))

    def drain(self) -> None:
        """Every chunk still on the workers taken, in order."""
        while self.inflight:
            self.take()

    def place(self, sw: SlotWalk, u: TimerUnit, res: Resolved) -> None:
        """One unit of a live chain with its record: a pending row, a delete marker or an unresolved unit (rules
        3-5)."""
        t_ms, out = sw.time_ms, self.out
        if self.on_unit is not None:
            self.on_unit(u, res)
        if not res.ok:
            self.unresolved(Unresolved(res.kind, res.why, t_ms, u.pos, None, u.offset_py, u.size_py, u.magic))
            return
        if res.kind == BAD_CRC and len(out.crc_damaged) < MAX_DETAILS:
            out.crc_damaged.append(u.offset_py)
        r = res.record
        roll = is_roll(u.magic)
        final_delete = is_delete(u.magic) and not roll
        if r.is_delete and (final_delete or roll):
            out.markers.append(DeleteMarker(r.delete_key, r.timer_out_ms, u.pos, None, r.offset, r.size))
        elif r.is_delete or final_delete:
            # A marker record under a normal unit is refused when put; a message under a delete unit is
            # taken for a marker: neither is ever delivered (timer §6).
            self.unresolved(Unresolved(MAGIC_MISMATCH, _mismatch(u, r), t_ms, u.pos, None, u.offset_py, u.size_py,
                                       u.magic))
        else:
            self.rows.add((r.timer_out_ms or 0, r.offset, r.size, u.pos, t_ms, r.queue_offset,
                           _ROLLED if roll else _WHEEL, self.topic_id(r.real_topic),
                           _key_hash(r.real_topic, r.uniq_key, r.timer_out_ms)))

    def read_queued(self, cursor: int) -> None:
        """The units of rmq_sys_wheel_timer/0 from the enqueue cursor on (rule 2)."""
        chunk: list[tuple[int, int, int]] = []
        for unit in self.ts.queued_units(cursor):
            chunk.append(unit)
            if len(chunk) == RESOLVE_CHUNK:
                self.place_queued(chunk)
                chunk = []
        self.place_queued(chunk)

    def place_queued(self, chunk: list[tuple[int, int, int]]) -> None:
        """(queue offset, commit-log offset, size) of queued units: their records read together, taken in order."""
        self.resolve([off for _, off, _ in chunk], [size for _, _, size in chunk],
                     lambda found: self.take_queued(chunk, found))

    def take_queued(self, chunk: list[tuple[int, int, int]], found: list[Resolved]) -> None:
        out = self.out
        for (q, off, size), res in zip(chunk, found):
            if not res.ok:
                self.unresolved(Unresolved(res.kind, res.why, None, None, q, off, size, None))
                continue
            if res.kind == BAD_CRC and len(out.crc_damaged) < MAX_DETAILS:
                out.crc_damaged.append(off)
            r = res.record
            if r.is_delete:
                out.markers.append(DeleteMarker(r.delete_key, r.timer_out_ms, None, q, r.offset, r.size))
            else:
                self.rows.add((r.timer_out_ms or 0, r.offset, r.size, -1, -1, q, _QUEUED,
                               self.topic_id(r.real_topic), _key_hash(r.real_topic, r.uniq_key, r.timer_out_ms)))

    def finish(self) -> PendingScan:
        """The rows by fire time, the ones a marker recalls (rule 4) apart."""
        out = self.out
        all_rows = self.rows.array()
        exact = {(m.key, m.fire_at_ms) for m in out.markers}
        maybe = np.isin(all_rows["key"], np.fromiter((hash(k) for k in exact), np.int64, len(exact))) & (
            all_rows["key"] != 0)
        if maybe.any():
            # The hashes only nominate: a message is recalled when its exact key and fire time are a marker's.
            for i in np.flatnonzero(maybe):
                m = message_at(self.ts, all_rows[i])
                if m is None or (build_delete_key(m.topic, m.uniq_key), m.fire_at_ms) not in exact:
                    maybe[i] = False
        order = np.lexsort((all_rows["offset"], all_rows["fire"]))
        all_rows = all_rows[order]
        maybe = maybe[order]
        out.rows, out.cancelled = all_rows[~maybe], all_rows[maybe]
        return out


def message_at(ts: TimerStore, row) -> PendingMessage | None:
    """The pending message a scan row stands for, its fields read again from its record (None when the record
    cannot be read any more)."""
    return _message(ts.resolve(int(row["offset"]), int(row["size"])), int(row["pos"]), int(row["slot"]),
                    int(row["qoff"]), int(row["state"]))


def _message(res: Resolved, pos: int, slot: int, qoff: int, state: int) -> PendingMessage | None:
    r = res.record
    if r is None:
        return None
    return PendingMessage(r.uniq_key, r.real_topic, r.real_queue_id, r.keys, r.tags, r.timer_out_ms or 0,
                          r.roll_times, _STATES[state], None if slot < 0 else slot, r.offset, r.size,
                          r.store_timestamp, qoff if pos < 0 else r.queue_offset, None if pos < 0 else pos)


def iter_messages(ts: TimerStore, rows: np.ndarray) -> Iterator[PendingMessage]:
    """message_at for each row, in order; the records of RESOLVE_CHUNK rows are read together."""
    for lo in range(0, len(rows), RESOLVE_CHUNK):
        part = rows[lo:lo + RESOLVE_CHUNK]
        found = ts.resolve_many(part["offset"], part["size"])
        cols = (part[f].tolist() for f in ("pos", "slot", "qoff", "state"))
        for res, pos, slot, qoff, state in zip(found, *cols):
            m = _message(res, pos, slot, qoff, state)
            if m is not None:
                yield m


class PendingList:
    """`rmqtool timer list`'s answer: the pending messages that pass the filters (iterate it: each is read from
    its record as it comes), their count, and what could not be read. Use as a context manager."""

    def __init__(self, ts: TimerStore, scan: PendingScan, rows: np.ndarray, notes: list[str],
                 problems: list[str] | None = None):
        self._ts, self.scan, self.rows, self.notes = ts, scan, rows, notes
        #: What makes the list short of what the timer store holds (a timercheck that cannot be the broker's): the
        #: answer comes from what is healthy, and these say what is not (exit 3).
        self.problems = problems or []
        self.total = len(scan.rows)            # pending messages before the filters
        self.recalled = len(scan.cancelled)    # messages a pending delete marker cancels (not listed)
        self.unresolved = scan.unresolved      # units the broker will read but cannot use (not listed)
        self.unresolved_total = scan.unresolved_total

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[PendingMessage]:
        return iter_messages(self._ts, self.rows)

    def close(self) -> None:
        self._ts.close()

    def __enter__(self) -> "PendingList":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


#: A timercheck lastReadTimeMs this far past the clock is no broker's (its dequeue never reads ahead of its clock;
#: a minute allows for the clocks of two hosts).
READ_TIME_AHEAD_MS = 60_000


def checkpoint_problems(ts: TimerStore, now_ms: int) -> list[str]:
    """What in config/timercheck cannot be what a broker wrote, and what it hides: a lastReadTimeMs before 1970 or
    ahead of the clock leaves no slot live (the broker fires none until its clock reaches it), so the units the
    wheel holds are not listed."""
    cpf = ts.checkpoint
    if not cpf.exists or cpf.length < 8:
        return []
    t = cpf.cp.lastReadTimeMs
    if 0 <= t <= now_ms + READ_TIME_AHEAD_MS:
        return []
    slots = ts.wheel.slots
    held = int(slots["num"].astype(np.int64).clip(min=0).sum()) if len(slots) else 0
    when = "before 1970" if t < 0 else f"{(t - now_ms) // 1000} s ahead of the clock"
    return [f"{ts.layout.rel(cpf.path)} is not a broker's: its lastReadTimeMs {t} is {when} (a broker's dequeue "
            f"never reads ahead of its clock), so no slot of the wheel is live and the {held} unit(s) its "
            f"{len(slots)} slot(s) hold are not listed; the broker would fire none of them until its clock reaches "
            "that time (run `rmqtool timer verify`; `rmqtool repair timer` rebuilds the timer store)"]


def list_pending(cfg, topic: str | None = None, due_after: int | None = None, due_before: int | None = None,
                 check_crc: bool = False, now_ms: int | None = None) -> PendingList:
    """Every pending timer message of the store (timer §9) whose real topic is `topic` and whose fire time lies in
    [due_after, due_before); sorted by fire time. Reads only. A `topic` neither the store (engine.broker.topics)
    nor a timer message names is a TopicNotFoundError."""
    from engine.errors import InvalidArgumentError

    if due_after is not None and due_before is not None and due_after >= due_before:
        raise InvalidArgumentError(f"--due-after {due_after} is not before --due-before {due_before}")
    ts = TimerStore(cfg)
    try:
        scan = scan_pending(ts, check_crc)
        notes = []
        if not ts.wheel.exists:
            notes.append("there is no timerwheel: only the units still to be enqueued are listed")
        elif not ts.wheel.length_ok:
            notes.append(f"timerwheel is {ts.wheel.length} bytes, not the broker's length: the broker will not "
                         "start with it (run `rmqtool timer verify`)")
        if scan.cursor is not None and scan.cursor.queue_max > scan.cursor.offset:
            notes.append(f"{scan.cursor.queue_max - scan.cursor.offset} unit(s) of rmq_sys_wheel_timer/0 are not in "
                         "the wheel yet (state queued): the broker enqueues them at its next start")
        if topic is not None and topic not in scan.topics:
            # the output contract's unknown topic (exit 2), unless a timer message names it as its REAL_TOPIC
            require_topic(StoreLayout.of(cfg), topic)
        rows = scan.rows
        keep = np.ones(len(rows), bool)
        if topic is not None:
            keep &= rows["topic"] == (scan.topics.index(topic) if topic in scan.topics else -2)
        if due_after is not None:
            keep &= rows["fire"] >= due_after
        if due_before is not None:
            keep &= rows["fire"] < due_before
        import time

        problems = checkpoint_problems(ts, int(time.time() * 1000) if now_ms is None else now_ms)
        return PendingList(ts, scan, rows[keep], notes, problems)
    except BaseException:
        ts.close()
        raise
