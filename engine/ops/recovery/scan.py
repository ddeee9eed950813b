"""Recovery, step 1: read the commit log and what points into it.

* Segment placement: a segment whose first record says it belongs at another offset was renamed or swapped;
  recovery reads the log in the order the records say and renames the files back.
* Consume queues as their own recovery finds them (format §4.4), read one file at a time, and where each must be
  cut once the commit-log end is known (format §4.5).
* The walk (engine.broker.commitlog.walk.walk) from the scan start with CRCs checked: counts, the last valid record, the
  gaps (damaged records, zeroed pages, segment tails without a filler, the end), and hooks for the index checks
  of engine.ops.recovery.trust. Nothing per record is kept: memory is one decode window plus O(queues + gaps).
"""
from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.broker.commitlog.log import CommitLog, open_commitlog
from engine.broker.config.brokerconf import CQ_STORE_UNIT_SIZE, BrokerConfig
from engine.broker.consumequeue.offsets import cut_point
from engine.broker.consumequeue.queue import BLANK_UNIT_SIZE, RECOVER_FILES, UNIT_DTYPE, ConsumeQueue
from engine.broker.layout import SEGMENT_NAME, StoreLayout, segment_name
from engine.broker.commitlog.message import NAME_VALUE_SEPARATOR, VALID, check_message, parse_properties
from engine.broker.consumequeue.lmq import PROP_INNER_MULTI_DISPATCH, dispatch_targets
from engine.broker.commitlog.segments import WRONG_SIZE, Segment, SegmentQueue
from engine.errors import GeometryError
from engine.broker.commitlog.walk import HOLE, LOG_END, SEGMENT_TAIL, Filler, Gap, TopicGroups, Window, walk
from engine.progress import Progress

#: Reasons kept for the first gaps; beyond that only their offsets (24 bytes each) are kept.
GAP_DETAILS = 1000
PARALLEL_CRC_BYTES = 256 << 20
#: Bytes of records decoded per window. Memory bound of the walk: about two windows of mapped pages (one in
#: the CRC helper's hands) plus their columns, ~60 bytes per record: RssAnon stays near 100 MiB whatever the size.
WALK_WINDOW = 64 << 20
#: The window of a segment's walk on a worker (engine.ops.recovery.scanjobs): smaller, so its temporaries are
#: reused rather than mapped anew each window (the answers do not depend on the window).
JOB_WINDOW = 8 << 20


# ==================================================================== loading the commit log

class _TolerantSegments(SegmentQueue):
    """A commit log whose files do not all have the segment size (issue 10 item 6): they are loaded anyway and
    listed in `misfits` as (segment, length on disk), for recovery to bring back to the segment size (a short
    file is padded with zeros; the bytes past the size of a long one are quarantined and cut). A long file is
    mapped up to the segment size only."""

    def _load(self) -> None:
        self.misfits: list[tuple[Segment, int]] = []
        found = []
        for d in self.dirs:
            if d.is_dir():
                found += [(int(p.name), p, p.stat().st_size) for p in d.iterdir()
                          if SEGMENT_NAME.match(p.name) and p.is_file()]
        found.sort()
        if self.file_size is None:
            sizes = [f[2] for f in found if f[2]]
            self.file_size = max(set(sizes), key=lambda v: (sizes.count(v), v)) if sizes else 0
        for i, (start, p, length) in enumerate(found):
            if start % self.file_size or (i and start == found[i - 1][0]):
                raise GeometryError(f"{self.what} file {p} does not start at a multiple of the segment size "
                                    f"{self.file_size}; repair it by hand")
            seg = Segment(p, start, self.file_size, min(length, self.file_size))
            if length != self.file_size and not (i == len(found) - 1 and length == 0):
                self.misfits.append((seg, length))
            self.segments.append(seg)


def open_log(cfg: BrokerConfig) -> tuple[CommitLog, list[tuple[Segment, int]]]:
    """The commit log for recovery: as every command opens it, or, when files have the wrong size, tolerantly
    (with the misfits to repair)."""
    try:
        cl = open_commitlog(cfg)
    except GeometryError:
        cl = CommitLog([], cfg.mappedFileSizeCommitLog)
        cl.queue = _TolerantSegments(cfg.commitlog_dirs, cfg.mappedFileSizeCommitLog if cfg.commitLogSizeGiven
                                     else None, what="commitlog")
        if not cl.queue.file_size:
            raise
        return cl, cl.queue.misfits
    # The segment queue reads around files of the wrong size and lists them as WRONG_SIZE problems.
    wrong = {str(p.path) for p in cl.queue.problems if p.kind == WRONG_SIZE}
    return cl, [(seg, seg.file_len) for seg in cl.segments if str(seg.path) in wrong]


# ==================================================================== segment placement

@dataclass
class Placement:
    renames: list[tuple[str, str]] = field(default_factory=list)   # (file name now, file name it should have)
    notes: list[str] = field(default_factory=list)


def place_segments(cl: CommitLog) -> Placement:
    """Compare every segment's name with the offset its first record states; order the log by the records.

    The commit log's segment list is re-sorted in place (a virtual rename), so the rest of the plan reads the log
    as it will be once the files carry their right names. Only unambiguous cases are renamed: the first record
    is valid with its CRC, its start is a multiple of the segment size, and no two files claim one start.
    """
    pl = Placement()
    size = cl.file_size
    segs = cl.segments + _interrupted_renames(cl)
    claims: dict[int, Segment] = {}
    for seg in segs:
        buf = cl.queue.buffer(seg)
        r = check_message(buf, 0, len(buf), check_crc=True) if len(buf) >= 8 else None
        start = r.record.physical_offset if r is not None and r.status == VALID else seg.start
        if start != seg.start and (start % size or start < 0):
            start = seg.start
        if start < 0:
            pl.notes.append(f"{seg.path.name} was left by an interrupted rename and its first record does not say "
                            "where it belongs; left as it is")
            continue
        if start in claims:
            pl.notes.append(f"segments {claims[start].path.name} and {seg.path.name} both start at {start}; "
                            "left as they are")
            return Placement(notes=pl.notes)
        claims[start] = seg
    moved = [(seg, start) for start, seg in claims.items() if start != seg.start]
    if not moved:
        _note_gaps(cl, pl)
        return pl
    for seg, start in moved:
        pl.renames.append((seg.path.name, segment_name(start)))
        pl.notes.append(f"segment {seg.path.name} holds the records of offset {start}: renamed to "
                        f"{segment_name(start)}")
    cl.queue.close()
    fixed = sorted((Segment(seg.path, start, seg.size, seg.file_len) for start, seg in claims.items()),
                   key=lambda s: s.start)
    cl.queue.segments[:] = fixed
    _note_gaps(cl, pl)
    return pl


RENAME_SUFFIX = ".rmqtool-rename"


def _interrupted_renames(cl: CommitLog) -> list[Segment]:
    """Segments a recover interrupted while renaming left under a temporary name (apply._rename_segments)."""
    out = []
    for d in cl.queue.dirs:
        if not d.is_dir():
            continue
        for p in d.iterdir():
            name = p.name[:-len(RENAME_SUFFIX)] if p.name.endswith(RENAME_SUFFIX) else ""
            if SEGMENT_NAME.match(name) and p.is_file() and p.stat().st_size == cl.file_size:
                out.append(Segment(p, -1 - len(out), cl.file_size, cl.file_size))  # start: from its records
    return out


def _note_gaps(cl: CommitLog, pl: Placement) -> None:
    segs = cl.segments
    for a, b in zip(segs, segs[1:]):
        if b.start != a.end:
            pl.notes.append(f"commit-log segments {segment_name(a.end)} .. {segment_name(b.start - cl.file_size)} "
                            f"are missing: offsets {a.end}..{b.start} hold no records")


# ==================================================================== consume queues

@dataclass
class QueueState:
    """One consume queue as its recovery finds it (format §4.4), kept small: no units, only what the plan needs."""
    topic: str
    queue_id: int
    file_size: int
    files: list[tuple[str, int, int]] = field(default_factory=list)  # (name, start, end of last non-zero unit)
    valid_end: int = 0         # logical byte offset of the first invalid unit
    max_phys: int = -1         # offset+size of the last valid unit (a blank pre-fill unit counts, format §4.4)
    coverage: int = -1         # offset+size of the last valid unit that is a real one
    stale: int = 0             # non-zero units after the valid end
    exists: bool = True
    hole: int | None = None    # logical offset of the first unit before the valid end that is not valid

    @property
    def max_offset(self) -> int:
        return self.valid_end // CQ_STORE_UNIT_SIZE


def read_queue(root: Path, cfg: BrokerConfig, topic: str, qid: int, recent_only: bool = False) -> QueueState:
    """The queue as its recovery finds it. `recent_only` (doctor's bounded plan): files before the last
    RECOVER_FILES, which the broker's ConsumeQueue.recover takes as valid without reading them (as
    cq.max_offset_in_queue does), are listed as full, unread."""
    cq = ConsumeQueue(root, topic, qid, cfg.cq_file_size, writable=False)
    try:
        qs = QueueState(topic, qid, cq.file_size)
        qs.valid_end = cq.max_offset_in_queue * CQ_STORE_UNIT_SIZE
        segs = cq.queue.segments
        first_read = max(0, len(segs) - RECOVER_FILES) if recent_only else 0
        for seg in segs[:first_read]:
            qs.files.append((seg.path.name, seg.start, cq.file_size))
        for seg in segs[first_read:]:
            _read_queue_file(cq, seg, qs)
        if qs.hole is not None and qs.hole < qs.valid_end:
            # A unit no broker would accept inside a file its start-up takes on trust (it re-reads only the last
            # RECOVER_FILES): the queue is read as ending there, so recovery cuts it and re-dispatches the
            # units from there on, each at its record's queue offset (issue 34 item 2).
            hole = qs.hole
            qs = QueueState(topic, qid, cq.file_size, valid_end=hole, hole=hole)
            for seg in segs[first_read:]:
                _read_queue_file(cq, seg, qs)
        return qs
    finally:
        cq.close()


def _read_queue_file(cq: ConsumeQueue, seg, qs: QueueState) -> None:
    """One file's share of read_queue (its views of the mapping end with this call)."""
    # Only the written units are looked at: every unit after them is zeros (ConsumeQueue.written_units).
    written = cq.written_units(seg)
    fu = cq.units_view(seg)[:written]
    qs.files.append((seg.path.name, seg.start, written * CQ_STORE_UNIT_SIZE))
    n_valid = max(0, min(written, (qs.valid_end - seg.start) // CQ_STORE_UNIT_SIZE))
    if n_valid < written:
        tail = fu[n_valid:]
        qs.stale += int(np.count_nonzero((tail["offset"] != 0) | (tail["size"] != 0) | (tail["tags_code"] != 0)))
    if n_valid:
        offs = fu["offset"][:n_valid].astype(np.int64)
        sizes = fu["size"][:n_valid].astype(np.int64)
        bad = np.flatnonzero((offs < 0) | (sizes <= 0))
        if len(bad) and qs.hole is None:
            qs.hole = seg.start + int(bad[0]) * CQ_STORE_UNIT_SIZE
        qs.max_phys = int(offs[-1] + sizes[-1])
        real = np.flatnonzero((offs != 0) | (sizes != BLANK_UNIT_SIZE))
        if len(real):
            qs.coverage = int(offs[real[-1]] + sizes[real[-1]])


@dataclass
class QueueCut:
    """The queue cut at the commit-log end (format §4.5), plus the zeroing of what follows the cut."""
    truncate_to: int | None = None      # logical byte offset of the cut (None: nothing removed)
    units_removed: int = 0
    files_deleted: list[str] = field(default_factory=list)
    zero_file: str | None = None
    zero_from: int = 0
    zero_to: int = 0
    max_phys: int = -1                  # ConsumeQueue state after the cut
    end: int | None = None              # logical end after the cut (None: every file goes, the queue restarts)
    coverage: int = -1


def cut_queue(root: Path, cfg: BrokerConfig, qs: QueueState, end: int) -> QueueCut:
    """Where the queue is cut at commit-log end `end`: from the last file backwards (format §4.5), one file at a time."""
    c = QueueCut(max_phys=qs.max_phys, coverage=qs.coverage)
    keep_end = qs.valid_end
    if qs.valid_end and qs.max_phys > end or qs.stale:
        cq = ConsumeQueue(root, qs.topic, qs.queue_id, cfg.cq_file_size, writable=False)
        try:
            keep_end, c.max_phys, c.coverage = cut_point(cq, qs.valid_end, end)
        finally:
            cq.close()
    first = qs.files[0][1] if qs.files else 0
    removed = (qs.valid_end - keep_end) // CQ_STORE_UNIT_SIZE + qs.stale
    c.end = keep_end if keep_end > first else None
    if not removed:
        c.end = qs.valid_end if qs.files else None
        return c
    c.units_removed, c.truncate_to = removed, keep_end
    for name, start, last_nz in qs.files:
        if start >= keep_end:
            c.files_deleted.append(name)
        elif keep_end < start + qs.file_size and last_nz > keep_end - start:
            c.zero_file, c.zero_from, c.zero_to = name, keep_end - start, last_nz
    return c


# ==================================================================== record starts the queues know

#: Queues beyond this many give no hints (one chunk of offsets each while the walk runs).
HINT_MAX_QUEUES = 1024
#: Units read at a time from one consume-queue file for the hints (20 bytes each; kept as 8-byte offsets:
#: 32 KiB a queue, 32 MiB at HINT_MAX_QUEUES).
HINT_CHUNK_UNITS = 4096


class _QueueOffsets:
    """The physical offsets one consume queue's valid units hold, read forward a chunk at a time."""

    def __init__(self, cq_dir: Path, qs: QueueState, start: int):
        self.files = [(cq_dir / name, min(qs.file_size, qs.valid_end - fstart) // CQ_STORE_UNIT_SIZE)
                      for name, fstart, _ in qs.files if fstart < qs.valid_end]
        self.fi, self.unit, self.fd = 0, 0, None
        self.buf = np.empty(0, np.int64)
        self._seek(start)

    def _first_offset(self, i: int, unit: int) -> int | None:
        raw = self._pread(i, unit, 1)
        return int.from_bytes(raw[:8], "big", signed=True) if len(raw) >= 8 else None

    def _pread(self, i: int, unit: int, count: int) -> bytes:
        """Units [unit, unit + count) of file i (the file stays open only while _seek reads it: a store with
        many queues must not run out of file descriptors)."""
        path, n = self.files[i]
        count = min(count, n - unit)
        if count <= 0:
            return b""
        if self.fd is not None and self.fd[0] == i:
            return os.pread(self.fd[1], count * CQ_STORE_UNIT_SIZE, unit * CQ_STORE_UNIT_SIZE)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            return os.pread(fd, count * CQ_STORE_UNIT_SIZE, unit * CQ_STORE_UNIT_SIZE)
        finally:
            os.close(fd)

    def _seek(self, start: int) -> None:
        """Skip the files, then the units, that lie before `start` (offsets grow along a sane queue)."""
        try:
            while self.fi + 1 < len(self.files) and _at_or_before(self._first_offset(self.fi + 1, 0), start):
                self.fi += 1
            if self.fi < len(self.files):
                self.fd = (self.fi, os.open(self.files[self.fi][0], os.O_RDONLY | os.O_NOFOLLOW))
                lo, hi = 0, self.files[self.fi][1]
                while lo < hi:
                    mid = (lo + hi) // 2
                    if _at_or_before(self._first_offset(self.fi, mid), start - 1):
                        lo = mid + 1
                    else:
                        hi = mid
                self.unit = lo
        except OSError:
            self.fi = len(self.files)
        finally:
            self.close()

    def _refill(self) -> bool:
        while self.fi < len(self.files):
            try:
                raw = self._pread(self.fi, self.unit, HINT_CHUNK_UNITS)
            except OSError:
                raw = b""
            if raw:
                units = np.frombuffer(raw, dtype=UNIT_DTYPE, count=len(raw) // CQ_STORE_UNIT_SIZE)
                self.buf = units["offset"].astype(np.int64)
                self.unit += len(units)
                if (self.buf[1:] >= self.buf[:-1]).all():
                    return True
                # not a sane queue (offsets going back): no more hints from it
                self.buf, self.fi = np.empty(0, np.int64), len(self.files)
                return False
            self.fi, self.unit = self.fi + 1, 0
        return False

    def take(self, lo: int, hi: int) -> list[np.ndarray]:
        """The offsets in [lo, hi) from here on; those at or past hi stay for the next call."""
        out = []
        while True:
            if not len(self.buf) and not self._refill():
                return out
            b = self.buf
            j1 = int(np.searchsorted(b, hi))
            out.append(b[int(np.searchsorted(b, lo)):j1])
            self.buf = b[j1:]
            if len(self.buf):
                return out

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd[1])
            self.fd = None


def _at_or_before(offset: int | None, limit: int) -> bool:
    return offset is not None and offset <= limit


class QueueHints:
    """decode_segment's hints for the recovery walk: the offsets of every record the consume queues hold, a
    window at a time (engine.broker.commitlog.records: a record they lack, or a wrong offset, changes no result; it only
    costs the byte scan the hints save). Memory: one chunk of offsets (HINT_CHUNK_UNITS) per queue; no file
    descriptor is kept open."""

    def __init__(self, root: Path, queues: dict[tuple[str, int], QueueState], start: int):
        layout = StoreLayout(root)
        self.streams = [_QueueOffsets(layout.cq_dir(qs.topic, qs.queue_id), qs, start)
                        for qs in queues.values() if qs.exists and qs.valid_end > 0 and qs.files]

    def __call__(self, lo: int, hi: int) -> np.ndarray:
        parts = [a for st in self.streams for a in st.take(lo, hi)]
        if not parts:
            return np.empty(0, np.int64)
        h = np.sort(np.concatenate(parts), kind="stable")  # a merge of sorted runs (one per queue)
        dup = h[1:] == h[:-1]
        return h[np.concatenate(([True], ~dup))] if dup.any() else h

    def close(self) -> None:
        for st in self.streams:
            st.close()


class QueueVouch:
    """find_resync's vouch for the recovery walk: a record older than the one before a damaged range is live,
    not stale data of an earlier truncation, when the unit at its QUEUEOFFSET in its consume queue (as read)
    points at it. One pread per record asked about (only such records are)."""

    def __init__(self, root: Path, queues: dict[tuple[str, int], QueueState]):
        self.layout, self.queues = StoreLayout(root), queues

    def __call__(self, offset: int, rec) -> bool:
        qs = self.queues.get((rec.topic, rec.queue_id))
        logical = rec.queue_offset * CQ_STORE_UNIT_SIZE
        if qs is None or not qs.exists or rec.queue_offset < 0 or logical >= qs.valid_end:
            return False
        start = logical // qs.file_size * qs.file_size
        name = next((nm for nm, fstart, _ in qs.files if fstart == start), None)
        if name is None:
            return False
        try:
            fd = os.open(self.layout.cq_dir(qs.topic, qs.queue_id) / name, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return False
        try:
            raw = os.pread(fd, 8, logical - start)
        finally:
            os.close(fd)
        return len(raw) == 8 and int.from_bytes(raw, "big", signed=True) == offset


# ==================================================================== the walk

@dataclass
class LogScan:
    """What the recovery walk found between `start` and the recovered end."""
    start: int
    end: int = 0
    stop_reason: str = "end of data"
    records: int = 0
    last_valid: int = -1            # start of the last valid record
    last_ts: int = 0
    max_ts: int = 0
    bytes_walked: int = 0
    gap_offsets: array = field(default_factory=lambda: array("q"))   # per gap: offset, end, kind code, prev ts
    gaps: list[Gap] = field(default_factory=list)                      # the first GAP_DETAILS, with reasons
    swallowed: int = 0
    first_dispatch: int | None = None  # lowest offset of a record a consume queue lacks (by the files as read)

    KINDS = (HOLE, SEGMENT_TAIL, LOG_END)

    def gap_ranges(self) -> list[tuple[int, int]]:
        g = self.gap_offsets
        return [(g[i], g[i + 1]) for i in range(0, len(g), 4)]

    def all_gaps(self) -> list[tuple[int, int, str, int]]:
        """(offset, end offset, kind, store time of the record before) of every gap."""
        g = self.gap_offsets
        return [(g[i], g[i + 1], self.KINDS[g[i + 2]], g[i + 3]) for i in range(0, len(g), 4)]


class ScanHooks:
    """Receives the walk's windows and gaps (engine.ops.recovery.trust's item checks implement this)."""

    #: An index file's item join (engine.ops.recovery.trust.ItemJoin: its x, good, keys_from, first_phy, done):
    #: the walk can then go a segment per job (engine.ops.recovery.scanjobs folds the joins itself).
    joins_items = False

    def window(self, w: Window) -> None: ...

    def gap(self, g: Gap) -> None: ...


def scan_log(cl: CommitLog, start: int, check_crc: bool, queues: dict[tuple[str, int], QueueState],
             hooks: list[ScanHooks], progress: Progress, min_hole: int, all_keys: bool = False,
             root: Path | None = None, multi: tuple[bool, bool] | None = None) -> LogScan:
    """The recovery walk (format §7.2, resynchronising past damage) from `start` to the end of the log.

    all_keys: the hooks check every record's index keys (--full-scan), so a long walk has its helper process
    extract them in parallel. root: the store, whose consume queues then tell the walk where records start
    (QueueHints), for stores of up to HINT_MAX_QUEUES queues. multi: (enableLmq, enableMultiDispatch) of a
    multi-dispatching store, whose %LMQ% units count as units a record needs."""
    s = LogScan(start=start, end=start)
    if not cl.segments:
        return s
    total = max(1, cl.max_file_offset() - start)
    # A long walk checks body CRCs in a helper process while it decodes (see engine.broker.commitlog.walk.CrcHelper).
    # (--workers N: N - 1 helpers; by default, as many as CPUs, for a walk of PARALLEL_CRC_BYTES or more).
    from engine import workers

    parallel = workers.fan_out(total, PARALLEL_CRC_BYTES)
    use_hints = root is not None and len(queues) <= HINT_MAX_QUEUES
    if parallel and workers.can_fork():
        from engine.ops.recovery import scanjobs

        segs = [g for g in cl.segments if g.end > start]
        if scanjobs.usable(hooks, len(segs)):
            return _scan_segments(cl, s, start, total, check_crc, queues, hooks, progress, min_hole, segs,
                                  root if use_hints else None, multi, root)
    hints = QueueHints(root, queues, start) if use_hints else None
    try:
        return _scan(cl, s, start, total, check_crc, queues, hooks, progress, min_hole, parallel,
                     parallel and all_keys, hints, multi, root)
    finally:
        if hints is not None:
            hints.close()


def _scan(cl, s: LogScan, start: int, total: int, check_crc: bool, queues, hooks, progress, min_hole: int,
          parallel: bool, parallel_keys: bool, hints, multi=None, cl_root: Path | None = None) -> LogScan:
    groups = TopicGroups()
    vouch = QueueVouch(cl_root, queues) if cl_root is not None else None
    for ev in walk(cl, start, check_crc=check_crc, min_hole=min_hole, parallel_crc=parallel, window=WALK_WINDOW,
                   parallel_keys=parallel_keys, hints=hints, vouch=vouch):
        if _take(s, ev, groups, queues, hooks, multi, start, total, progress):
            break
    return s


def _take(s: LogScan, ev, groups: TopicGroups, queues, hooks, multi, start: int, total: int, progress) -> bool:
    """One event of the walk into the scan and the hooks; True when the log ends there."""
    if isinstance(ev, Filler):
        s.end = ev.seg.end  # the next record goes to the next segment
        return False
    if isinstance(ev, Gap):
        _scan_gap(s, ev, hooks)
        return ev.kind == LOG_END
    b = ev.batch
    offs = ev.offsets
    s.records += len(b)
    s.last_valid = int(offs[-1])
    s.last_ts = int(b.store_ts[-1])
    s.max_ts = max(s.max_ts, int(b.store_ts.max()))
    s.end = s.last_valid + int(b.total[-1])
    if s.first_dispatch is None:
        s.first_dispatch = _first_missing_unit(ev, groups, queues, multi)
    for h in hooks:
        h.window(ev)
    s.bytes_walked = s.end - start
    progress("scan", min(total, s.bytes_walked), total)
    return False


def _scan_segments(cl, s: LogScan, start: int, total: int, check_crc: bool, queues, joins, progress,
                   min_hole: int, segs: list, hints_root: Path | None, multi, root: Path | None) -> LogScan:
    """The walk a segment per job on worker processes (engine.ops.recovery.scanjobs); a segment whose job is not
    the walk in order's is walked here, carrying the store time of the record before it."""
    from engine import workers
    from engine.ops.recovery import scanjobs

    ranges = [(max(g.start, start), segs[k + 1].start if k + 1 < len(segs) else g.end, k + 1 == len(segs))
              for k, g in enumerate(segs)]
    per_segment = scanjobs.spans(joins, ranges)
    make_hints = (lambda a: QueueHints(hints_root, queues, a)) if hints_root is not None else None
    vouch = QueueVouch(root, queues) if root is not None else None
    ctx = (cl, joins, queues, multi, check_crc, min_hole, JOB_WINDOW, make_hints, vouch, _first_missing_unit)
    groups = TopicGroups()
    with workers.shared(ctx) as token:
        answers = workers.ordered_map(scanjobs.segment_job, [(token, k, a, b, last, per_segment[k])
                                                             for k, (a, b, last) in enumerate(ranges)])
        try:
            for k, got in enumerate(answers):
                a, b, last = ranges[k]
                if got is not None:
                    if scanjobs.fold(s, got, segs[k], joins, per_segment[k], start, total, progress, _scan_gap):
                        break
                    continue
                hints = make_hints(a) if make_hints is not None else None
                try:
                    ended = False
                    for ev in walk(cl, a, check_crc=check_crc, end=None if last else b, window=WALK_WINDOW,
                                   min_hole=min_hole, hints=hints, vouch=vouch, last_ts=s.last_ts):
                        if _take(s, ev, groups, queues, joins, multi, start, total, progress):
                            ended = True
                            break
                finally:
                    if hints is not None:
                        hints.close()
                if ended:
                    break
        finally:
            answers.close()  # (the log ended: the segments after it are not waited for)
    return s


def _scan_gap(s: LogScan, g: Gap, hooks: list[ScanHooks]) -> None:
    s.gap_offsets.extend((g.offset, g.end_offset, LogScan.KINDS.index(g.kind), g.prev_ts))
    s.swallowed += g.swallowed
    if len(s.gaps) < GAP_DETAILS:
        s.gaps.append(g)
    if g.kind == LOG_END:
        s.end = g.offset
        s.stop_reason = g.reason or "end of data"
    elif g.kind == SEGMENT_TAIL:
        s.end = g.end_offset
    for h in hooks:
        h.gap(g)


_MULTI_NAME = PROP_INNER_MULTI_DISPATCH.encode() + NAME_VALUE_SEPARATOR.encode()


def multi_dispatch_units(w: Window, rows: np.ndarray, inv, keys, flags: tuple[bool, bool],
                         problems: list[str] | None = None) -> list[tuple[int, tuple[str, int], int]]:
    """(row, (queue topic, queue id), queue offset) of every multi-dispatch unit the records at `rows` of the window
    get (engine.broker.consumequeue.lmq.dispatch_targets with `flags` = (enableLmq, enableMultiDispatch)), in
    order. Only records whose properties hold INNER_MULTI_DISPATCH are decoded; what the broker would fail on is
    added to `problems`."""
    b, buf = w.batch, w.buf
    out = []
    for i in rows.tolist():
        p, n = int(b.props_pos[i]), int(b.props_len[i])
        if n <= 0:
            continue
        raw = bytes(buf[p:p + n])
        if _MULTI_NAME not in raw:
            continue
        topic, qid = keys[inv[i]]
        targets, why = dispatch_targets(topic, qid, parse_properties(raw.decode("utf-8", "replace")), *flags)
        if why and problems is not None and len(problems) < 20:
            problems.append(f"the record at {int(w.seg.start + b.pos[i])}: {why}")
        out += [(i, (t.topic, t.queue_id), t.queue_offset) for t in targets]
    return out


def _first_missing_unit(w: Window, groups: TopicGroups, queues: dict, multi=None) -> int | None:
    """Offset of the first record in the window that its consume queue (as read) does not cover, or (multi given)
    one of the queues it is multi-dispatched to."""
    b = w.batch
    inv, keys = groups(w)
    tx = b.sys_flag & 0xC
    in_cq = (tx == 0x0) | (tx == 0x8)
    limit = np.array([queues[k].max_phys if k in queues else -1 for k in keys], dtype=np.int64)
    need = in_cq & (w.offsets + b.total > limit[inv])
    hit = np.flatnonzero(need)
    first = int(w.offsets[hit[0]]) if len(hit) else None
    if multi is not None:
        for i, key, _ in multi_dispatch_units(w, np.flatnonzero(in_cq), inv, keys, multi):
            end = int(w.offsets[i] + b.total[i])
            if end > (queues[key].max_phys if key in queues else -1):
                off = int(w.offsets[i])
                first = off if first is None else min(first, off)
                break
    return first
