"""Tier-out of one queue, as MessageStoreDispatcherImpl does it (flat-store §3-§5, §10): pure per-queue work, with
no shared state, so the queues can be the partitions of a Spark job.

For one queue: read the local consume queue from where the tier ends, read each record from the local commit log
(read-only, through the one bulk decoder), rewrite bytes 28..35 to the record's offset in the queue's own
COMMIT_LOG stream, place records and 20-byte units into segments with FlatAppendFile's size rule, and write them.

Crash safety without a journal: the plan starts where the metadata (untouched until the whole dispatch is done)
says the tier ends, and is a function of that and the local store only, so a rerun plans the very same bytes.
Bytes already in a file where the plan writes (what a killed run or a crashed broker left) must equal the plan:
they are kept, anything else stops the queue with a problem. COMMIT_LOG bytes are written and forced before the
consume-queue units that point at them.

Memory: CHUNK_UNITS consume-queue units and their records at a time (CHUNK_UNITS x the mean record size, about
16 MiB for 1 KiB records), plus a READ_WINDOW (1 MiB) read buffer, or one record when a record is larger.
"""
from __future__ import annotations

import os
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from engine.broker.commitlog.segments import SegmentQueue
from engine.broker.consumequeue.offsets import queue_min_offset
from engine.broker.consumequeue.queue import BLANK_UNIT_SIZE, UNIT_DTYPE as LOCAL_UNIT_DTYPE, ConsumeQueue
from engine.errors import StoreError
from engine.fsutil import fsync_dir, write_fully
from engine.tiered.flat.config import CQ_UNIT_SIZE
from engine.tiered.flat.layout import COMMIT_LOG, CONSUME_QUEUE, TieredLayout
from engine.tiered.flat.scan import decode_records
from engine.tiered.flat.segments import SegmentState, plan_appends

CHUNK_UNITS = 16384
READ_WINDOW = 1 << 20   # bytes of the local commit log read at once around a queue's records
PHYSICAL_OFFSET_POSITION = 28


@dataclass
class QueueTask:
    """Everything one queue's tier-out needs (picklable: it travels to a Spark executor)."""
    index: int
    topic: str
    queue_id: int
    tier_root: str
    cluster: str
    broker: str
    local_root: str
    commitlog_dirs: list[str]
    commitlog_file_size: int | None
    cq_file_size: int
    cl_max_size: int
    cq_max_size: int
    cl_start: tuple[int, int, int, int]     # (base, position, min ts, max ts) of the segment appends go to
    cq_start: tuple[int, int, int, int] | None   # None: the queue is not initialised (starts at the local min)
    dry_run: bool = False
    max_offset: int | None = None   # the local queue's max offset as the broker serves it (None: its units' end)


@dataclass
class QueueResult:
    index: int
    topic: str
    queue_id: int
    local_min: int = 0
    local_max: int = 0
    from_offset: int = 0
    to_offset: int = 0
    bytes: int = 0
    cl_segments: list = field(default_factory=list)   # [(base, size, min ts, max ts)], first = where appends began
    cq_segments: list = field(default_factory=list)
    stalled_at: int | None = None
    stalled_size: int | None = None
    first_phy: int | None = None
    problems: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    skipped: str | None = None

    @property
    def messages(self) -> int:
        return self.to_offset - self.from_offset

    def summary(self) -> dict:
        return asdict(self)


# ============================================================================ the local store (read-only)

class LocalQueue:
    """A queue of the local store: its consume queue units and the commit-log records they point at."""

    def __init__(self, task: QueueTask):
        self.cq = ConsumeQueue(Path(task.local_root), task.topic, task.queue_id, task.cq_file_size)
        self.cl = SegmentQueue([Path(d) for d in task.commitlog_dirs], task.commitlog_file_size, what="commitlog")
        self._fds: dict[int, int] = {}
        # The broker's own rules (format §4.4, §4.5, §8.3): end of data as its start-up leaves it (the driver works
        # out the logical truncation once for every queue), min as it settles it.
        self.max_offset = self.cq.max_offset_in_queue if task.max_offset is None else task.max_offset
        self.min_offset = queue_min_offset(self.cq, self.cl.min_offset, self.max_offset)

    def close(self) -> None:
        self.cq.close()
        self.cl.close()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def units(self, first: int, last: int) -> np.ndarray:
        """Units [first, last) as (offset, size, tags_code) columns."""
        parts = []
        q = first
        while q < last:
            seg = self.cq.queue.find(q * CQ_UNIT_SIZE)
            if seg is None:
                raise ValueError(f"no local consume-queue file holds queue offset {q}")
            u = self.cq.file_units(seg)
            i = q - seg.start // CQ_UNIT_SIZE
            take = u[i:i + (last - q)]
            if not len(take):
                raise ValueError(f"local consume queue ends before queue offset {q}")
            parts.append(np.array(take))
            q += len(take)
        return np.concatenate(parts) if parts else np.empty(0, LOCAL_UNIT_DTYPE)

    def read_records(self, offsets: np.ndarray, sizes: np.ndarray) -> bytearray:
        """The records back to back. Records of one queue lie close together among other queues' records: they are
        read in windows of up to READ_WINDOW bytes (one pread each) and copied out."""
        out = bytearray(int(sizes.sum()))
        n = len(offsets)
        if not n:
            return out
        ends = offsets + sizes
        dst = np.concatenate(([0], np.cumsum(sizes)))
        mv = memoryview(out)
        i = 0
        while i < n:
            # the longest run from i whose bytes fit one window (a record bigger than the window is read alone)
            j = max(i + 1, int(np.searchsorted(ends, offsets[i] + READ_WINDOW, side="right")))
            start, stop = int(offsets[i]), int(ends[j - 1])
            if j - i == 1 or stop - start == int(dst[j] - dst[i]):
                self._pread_into(out, int(dst[i]), start, stop - start)
            else:
                window = bytearray(stop - start)
                self._pread_into(window, 0, start, stop - start)
                wv = memoryview(window)
                for k in range(i, j):
                    src = int(offsets[k]) - start
                    mv[int(dst[k]):int(dst[k + 1])] = wv[src:src + int(sizes[k])]
            i = j
        return out

    def _pread_into(self, out: bytearray, at: int, phy: int, length: int) -> None:
        view = memoryview(out)
        done = 0
        while done < length:
            seg = self.cl.find(phy + done)
            if seg is None:
                raise ValueError(f"local commit log has no segment holding offset {phy + done}")
            fd = self._fds.get(seg.start)
            if fd is None:
                fd = self._fds[seg.start] = os.open(seg.path, os.O_RDONLY)
            pos = phy + done - seg.start
            want = min(length - done, seg.start + seg.size - (phy + done))
            got = os.preadv(fd, [view[at + done:at + done + want]], pos)
            if got <= 0:
                raise ValueError(f"local commit log {seg.path} ends before offset {phy + done}")
            done += got


# ============================================================================ the tier (written)

class SegmentWriter:
    """The segment files of one queue and type. Writes only where the plan says; bytes already there must
    be the planned ones (a killed run or a crashed broker wrote them), else SegmentConflict."""

    def __init__(self, layout: TieredLayout, topic: str, queue_id: int, file_type: int, dry_run: bool):
        self.layout, self.topic, self.queue_id, self.file_type = layout, topic, queue_id, file_type
        self.dry_run = dry_run
        self._fds: dict[int, tuple[int, int]] = {}   # base -> (fd, length)
        self._dirty: set[int] = set()
        self._new_dirs = False
        self._virtual: dict[int, int] = {}   # dry run: the lengths the files would have

    def path(self, base: int) -> Path:
        return self.layout.segment_path(self.topic, self.queue_id, self.file_type, base)

    def _open(self, base: int) -> tuple[int, int]:
        if base not in self._fds:
            p = self.path(base)
            if not p.parent.is_dir():
                p.parent.mkdir(parents=True, exist_ok=True)
            if not os.path.lexists(p):
                self._new_dirs = True   # a new directory entry: the directories are forced at the next sync
            fd = os.open(p, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
            self._fds[base] = (fd, os.fstat(fd).st_size)
            self._dirty.add(base)
        return self._fds[base]

    def existing_length(self, base: int) -> int:
        try:
            return os.lstat(self.path(base)).st_size
        except FileNotFoundError:
            return 0

    def ensure(self, base: int) -> None:
        """The segment file exists (PosixFileSegment creates it empty when the segment is made)."""
        if not self.dry_run:
            self._open(base)

    def write(self, base: int, pos: int, data) -> None:
        if self.dry_run:
            have = self.existing_length(base)
            planned = self._virtual.get(base, have)
            if pos > planned:
                raise SegmentConflict(f"{self.layout.rel(self.path(base))} is {planned} bytes but this dispatch would "
                                      f"continue at {pos} (the metadata says more than the file holds)")
            if pos < have:
                self._compare_file(base, pos, data, have)
            self._virtual[base] = max(planned, pos + len(data))
            return
        fd, length = self._open(base)
        mv = memoryview(data)
        if pos > length:   # writing there would leave a hole of zeros inside the segment
            raise SegmentConflict(f"{self.layout.rel(self.path(base))} is {length} bytes but this dispatch continues "
                                  f"at {pos} (the metadata says more than the file holds; run tiered verify)")
        if pos < length:   # bytes a previous run left where this one writes: they must be the same
            k = min(len(mv), length - pos)
            old = os.pread(fd, k, pos)
            if old != mv[:k]:
                raise SegmentConflict(self._conflict(base, pos, old, mv[:k]))
            mv, pos = mv[k:], pos + k
        # Checked (a short write or a full disk is a WriteFailedError naming the file); the bytes a failed write
        # left are this dispatch's own, so a rerun compares equal over them and goes on (no undo).
        write_fully(fd, mv, pos, self.path(base), undo=False)
        pos += len(mv)
        self._fds[base] = (fd, max(length, pos))
        self._dirty.add(base)

    def _compare_file(self, base: int, pos: int, data, have: int) -> None:
        with open(self.path(base), "rb") as f:
            f.seek(pos)
            k = min(len(data), have - pos)
            old = f.read(k)
        if old != bytes(memoryview(data)[:k]):
            raise SegmentConflict(self._conflict(base, pos, old, memoryview(data)[:k]))

    def _conflict(self, base: int, pos: int, old: bytes, new) -> str:
        i = next((j for j in range(min(len(old), len(new))) if old[j] != new[j]), 0)
        return (f"{self.layout.rel(self.path(base))} already holds different bytes at {pos + i} than this dispatch "
                "would write there (not overwritten; run tiered verify)")

    def sync(self) -> None:
        for base in sorted(self._dirty):
            os.fsync(self._fds[base][0])
        if self._new_dirs:
            d = self.layout.type_dir(self.topic, self.queue_id, self.file_type)
            for p in (d, d.parent, d.parent.parent, d.parent.parent.parent):
                if p.is_dir():
                    fsync_dir(p)
        self._dirty.clear()
        self._new_dirs = False

    def close(self) -> None:
        for fd, _ in self._fds.values():
            os.close(fd)
        self._fds.clear()


class SegmentConflict(Exception):
    pass


# ============================================================================ one queue

def first_message(task: QueueTask) -> tuple[int, int] | None:
    """(local min offset, commit-log offset of its message) when the local queue has a message, else None."""
    try:
        local = LocalQueue(task)
    except (OSError, ValueError, StoreError):
        return None
    try:
        if local.min_offset >= local.max_offset:
            return None
        return local.min_offset, int(local.units(local.min_offset, local.min_offset + 1)["offset"][0])
    except (OSError, ValueError, StoreError):
        return None
    finally:
        local.close()


def dispatch_queue(task: QueueTask) -> QueueResult:
    """Plan and (unless dry_run) write one queue's appends; never raises for a queue-level problem."""
    res = QueueResult(task.index, task.topic, task.queue_id)
    try:
        local = LocalQueue(task)
    except (OSError, ValueError, StoreError) as e:
        res.skipped = f"local queue cannot be read: {e}"
        res.problems.append(res.skipped)
        return res
    layout = TieredLayout(task.tier_root, task.cluster, task.broker)
    cl_w = SegmentWriter(layout, task.topic, task.queue_id, COMMIT_LOG, task.dry_run)
    cq_w = SegmentWriter(layout, task.topic, task.queue_id, CONSUME_QUEUE, task.dry_run)
    try:
        _run(task, local, cl_w, cq_w, res)
    except SegmentConflict as e:
        res.problems.append(str(e))
    except (OSError, ValueError, StoreError) as e:
        res.problems.append(f"stopped: {e}")
    finally:
        local.close()
        cl_w.close()
        cq_w.close()
    return res


def _run(task: QueueTask, local: LocalQueue, cl_w: SegmentWriter, cq_w: SegmentWriter, res: QueueResult) -> None:
    res.local_min, res.local_max = local.min_offset, local.max_offset
    if task.cq_start is None:
        start = local.min_offset   # a new queue starts at the local queue's min offset
        cq_state = SegmentState(start * CQ_UNIT_SIZE, 0)
    else:
        base, pos, lo, hi = task.cq_start
        if pos % CQ_UNIT_SIZE or base % CQ_UNIT_SIZE:
            res.skipped = f"the CONSUME_QUEUE metadata ends at byte {base + pos}, not at a unit boundary"
            res.problems.append(res.skipped)
            return
        start = (base + pos) // CQ_UNIT_SIZE
        cq_state = SegmentState(base, pos, lo, hi)
    cl_state = SegmentState(*task.cl_start)
    res.from_offset = res.to_offset = start
    res.cl_segments = [_seg(cl_state)]
    res.cq_segments = [_seg(cq_state)]
    if start < local.min_offset:
        res.skipped = (f"the tier ends at queue offset {start} but the local queue starts at {local.min_offset}: "
                       "the broker would destroy and recreate this flat file; not done offline")
        res.problems.append(res.skipped)
        return
    if start > local.max_offset:
        res.skipped = f"the tier ends at queue offset {start}, past the local queue's end {local.max_offset}"
        res.notes.append(res.skipped)
        return
    if task.cq_start is None and start >= local.max_offset:
        # A new queue with no message left (retention removed them all): its metadata is not made (dispatch's
        # first_message), so no file is made either — both or neither.
        res.skipped = "no local message left to tier: neither files nor metadata written"
        res.notes.append(res.skipped)
        return
    if not task.dry_run:
        cl_w.ensure(cl_state.base)
        cq_w.ensure(cq_state.base)
    q = start
    while q < local.max_offset:
        want = min(CHUNK_UNITS, local.max_offset - q)
        done = _chunk(task, local, q, q + want, cl_w, cq_w, res)
        q += done
        res.to_offset = q
        if done < want or res.stalled_at is not None or res.problems:
            break
    _check_tail(cl_w, res.cl_segments, res)
    _check_tail(cq_w, res.cq_segments, res)


def _seg(s: SegmentState) -> tuple[int, int, int, int]:
    return (s.base, s.position, s.min_ts, s.max_ts)


def _chunk(task, local: LocalQueue, first: int, last: int, cl_w, cq_w, res: QueueResult) -> int:
    """Units [first, last): read, check, place, write. Returns how many were appended."""
    units = local.units(first, last)
    offsets = units["offset"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    bad = np.flatnonzero((offsets < 0) | (sizes <= 0) | (sizes == BLANK_UNIT_SIZE))
    n = int(bad[0]) if len(bad) else len(units)
    if res.first_phy is None and n:
        res.first_phy = int(offsets[0])
    if n < len(units):
        res.problems.append(f"queue offset {first + n}: the local consume-queue unit is not valid "
                            f"(offset {int(offsets[n])}, size {int(sizes[n])})")
    buf = local.read_records(offsets[:n], sizes[:n])
    recs = decode_records(memoryview(buf)) if n else None
    n, why = _check_records(recs, sizes[:n], first, task.queue_id)
    if why:
        res.problems.append(why)
    ts = recs.ts56[:n] if n else np.empty(0, np.int64)
    cl_plan = plan_appends(SegmentState(*res.cl_segments[-1]), sizes[:n], task.cl_max_size, ts)
    if cl_plan.stalled_at is not None:
        res.stalled_at, res.stalled_size = first + cl_plan.stalled_at, int(sizes[cl_plan.stalled_at])
        res.problems.append(f"queue offset {res.stalled_at}: a {res.stalled_size}-byte record is larger than "
                            f"tieredStoreCommitLogMaxSize {task.cl_max_size}; the broker stalls this queue here "
                            "for good (flat-store §5)")
        n = cl_plan.stalled_at
    cq_plan = plan_appends(SegmentState(*res.cq_segments[-1]), np.full(n, CQ_UNIT_SIZE, np.int64),
                           task.cq_max_size, ts[:n])
    seg_bases = np.array([s.base for s in cl_plan.segments], np.int64)
    stream = seg_bases[cl_plan.seg_index] + cl_plan.position   # each record's offset in the COMMIT_LOG stream
    starts = np.concatenate(([0], np.cumsum(sizes[:n])[:-1])) if n else np.empty(0, np.int64)
    for p, off in zip(starts.tolist(), stream.tolist()):
        struct.pack_into(">q", buf, p + PHYSICAL_OFFSET_POSITION, off)
    _write_runs(cl_w, cl_plan, buf, starts, sizes[:n])
    cl_w.sync()
    cq_bytes = np.empty(n, dtype=np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")]))
    cq_bytes["offset"], cq_bytes["size"], cq_bytes["tags_code"] = stream, sizes[:n], units["tags_code"][:n]
    raw = cq_bytes.tobytes()
    _write_runs(cq_w, cq_plan, raw, np.arange(n, dtype=np.int64) * CQ_UNIT_SIZE, np.full(n, CQ_UNIT_SIZE))
    cq_w.sync()
    _merge(res.cl_segments, cl_plan.segments)
    _merge(res.cq_segments, cq_plan.segments)
    res.bytes += int(sizes[:n].sum())
    return n


def _check_records(recs, sizes: np.ndarray, first: int, queue_id: int) -> tuple[int, str | None]:
    """How many leading records are whole and belong here (TOTALSIZE = the unit's size, this queue id, the
    expected QUEUEOFFSET), and why the next one is not."""
    n = len(sizes)
    if not n:
        return 0, None
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    k = min(len(recs), n)
    ok = (recs.pos[:k] == starts[:k]) & (recs.total[:k] == sizes[:k]) & (recs.queue_id[:k] == queue_id) \
        & (recs.queue_offset[:k] == np.arange(first, first + k))
    bad = np.flatnonzero(~ok)
    good = int(bad[0]) if len(bad) else k
    if good == n:
        return n, None
    q = first + good
    if good < len(recs) and recs.pos[good] == starts[good]:
        if recs.total[good] != sizes[good]:
            why = f"TOTALSIZE {int(recs.total[good])} but the consume-queue unit says {int(sizes[good])}"
        elif recs.queue_id[good] != queue_id:
            why = f"the record belongs to queue {int(recs.queue_id[good])}"
        else:
            why = f"the record's QUEUEOFFSET is {int(recs.queue_offset[good])}"
    else:
        why = f"no valid record ({recs.end.reason or recs.end.kind})"
    return good, f"queue offset {q}: local record at the unit's commit-log offset is not tiered: {why}"


def _write_runs(w: SegmentWriter, plan, data, starts: np.ndarray, sizes: np.ndarray) -> None:
    """Write each planned segment's share of `data` with one call, and create the (possibly empty) files."""
    mv = memoryview(data)
    for k, seg in enumerate(plan.segments):
        w.ensure(seg.base)
        sel = np.flatnonzero(plan.seg_index == k)
        if not len(sel):
            continue
        a, b = int(sel[0]), int(sel[-1])
        w.write(seg.base, int(plan.position[a]), mv[int(starts[a]):int(starts[b] + sizes[b])])


def _merge(have: list, segs: list[SegmentState]) -> None:
    """The segment list after a chunk: the first planned segment continues the last one we had."""
    have[-1] = _seg(segs[0])
    have.extend(_seg(s) for s in segs[1:])


def _check_tail(w: SegmentWriter, segs: list, res: QueueResult) -> None:
    """Bytes past the planned end (a run that saw more local messages) are reported, never truncated."""
    base, size = segs[-1][0], segs[-1][1]
    have = w.existing_length(base)
    if have > size:
        res.problems.append(f"{w.layout.rel(w.path(base))} holds {have - size} bytes past where this dispatch ends "
                            f"({size}); not truncated (run tiered verify)")
    for f in w.layout.list_segments(w.topic, w.queue_id, w.file_type).files:
        if f.base > base:
            res.problems.append(f"{w.layout.rel(f.path)} lies past where this dispatch ends; not removed")
