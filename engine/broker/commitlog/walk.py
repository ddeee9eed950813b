"""The checking walk of the commit log (recovery, index verification): valid records a window at a time, and the
gaps between them. It goes over the segment files with the one segment walk every reader shares
(CommitLog.walk_segments) and states which decoded records are not valid with records.unsound and body_crc_bad.

walk() goes segment by segment through engine.broker.commitlog.records.decode_segment (the one bulk decoder) and checks
every record as the broker's recovery does (format §2.7): body CRC (CRC-32 over the body ranges), the length
formula, and, stricter than the broker, that PHYSICALOFFSET names the record's own position. A record that fails
is not the end of the log: records are self-delimiting, so the walk resynchronises at the next valid record
(format §2.7 applied at every candidate position, and its store time must not go back: a "valid" record older
than the one before the damage is stale data left behind by an earlier truncation, pitfall 13) and reports the
bytes in between as a Gap. Memory: one decode window (engine.broker.commitlog.records.SCAN_WINDOW) plus its columns.
"""
from __future__ import annotations

import mmap
import os
import sys
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from engine.broker.commitlog.log import CommitLog
from engine.broker.index.keycolumns import batch_key_columns
from engine.broker.commitlog.message import (BLANK, BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, VALID,
                                             check_message)
from engine.broker.commitlog.records import (BLANK as END_BLANK, CORRUPT, SCAN_WINDOW, ZERO, RecordBatch, SegmentEnd,
                                             body_crc_bad, magic_candidates, unsound)
from engine.broker.commitlog.segments import Segment

HOLE, SEGMENT_TAIL, LOG_END = "hole", "segment-tail", "log-end"
_MAGICS = (MESSAGE_MAGIC_CODE.to_bytes(4, "big", signed=True), MESSAGE_MAGIC_CODE_V2.to_bytes(4, "big", signed=True))
_BLANK = BLANK_MAGIC_CODE.to_bytes(4, "big", signed=True)


@dataclass
class Window:
    """Valid records of one decode window. batch positions are relative to the segment (seg.start + pos is
    the physical offset); its arrays are views of the mapping: copy what you keep."""
    seg: Segment
    buf: object
    batch: RecordBatch
    keys: dict | None = None   # key_columns of every record, when the walk's helper computed them already

    @property
    def offsets(self) -> np.ndarray:
        return self.seg.start + self.batch.pos


@dataclass
class Gap:
    """Bytes [pos, end) of a segment that hold no valid record.

    kind HOLE: valid records follow at `end` (a damaged record, a zeroed page, garbage in the middle);
    SEGMENT_TAIL: nothing valid follows in a non-last segment (the broker's recovery would stop here: it needs a
    BLANK filler to move on); LOG_END: nothing valid follows in the last segment (the end of the log; `reason` is
    empty when it is simply the unwritten, zero tail).
    """
    seg: Segment
    pos: int
    end: int
    kind: str
    reason: str
    prev_ts: int = 0        # store time of the last valid record before the gap (0: none seen)
    swallowed: int = 0      # valid records inside the gap (a hole narrower than min_hole was widened)

    @property
    def offset(self) -> int:
        return self.seg.start + self.pos

    @property
    def end_offset(self) -> int:
        return self.seg.start + self.end


@dataclass
class Filler:
    """The segment's BLANK filler at pos: the walk goes on at the next segment (format §3.1)."""
    seg: Segment
    pos: int


def body_crc_first_bad(buf, body_pos: np.ndarray, body_len: np.ndarray, body_crc: np.ndarray) -> int:
    """Index of the first record whose body CRC is wrong (format §2.6: CRC-32 & 0x7FFFFFFF; an empty body is not
    checked), or len(body_pos). engine.broker.commitlog.records.body_crc_bad over slices of buf."""
    n = len(body_pos)
    if not n:
        return 0
    mv = memoryview(buf)
    ends = (body_pos + np.maximum(body_len, 0)).tolist()
    bad = np.flatnonzero(body_crc_bad((mv[a:b] for a, b in zip(body_pos.tolist(), ends)), body_len, body_crc))
    return int(bad[0]) if len(bad) else n


def check_batch(buf, batch: RecordBatch, seg_start: int, check_crc: bool, crc_bad: int | None = None
                ) -> tuple[int, str]:
    """(number of leading records that are valid, why the next one is not). crc_bad: the first record with a
    wrong body CRC when already known (computed elsewhere), else it is computed here."""
    n = len(batch)
    bad = np.flatnonzero(unsound(batch, seg_start))
    first = int(bad[0]) if len(bad) else n
    if check_crc:
        if crc_bad is None:
            crc_bad = body_crc_first_bad(buf, batch.body_pos[:first], batch.body_len[:first],
                                         batch.body_crc[:first])
        if crc_bad < first:
            return crc_bad, f"body CRC mismatch (stored {int(batch.body_crc[crc_bad])})"
    if first == n:
        return n, ""
    p = int(batch.pos[first])
    if not batch.length_ok[first]:
        return first, f"length mismatch: TOTALSIZE {int(batch.total[first])} disagrees with the record's fields"
    return first, f"PHYSICALOFFSET says {int(batch.phy[first])}, but the record is at {seg_start + p}"


# ------------------------------------------------------------------------------------------- CRC helper

_WORKER_MAPS: dict = {}
#: The window's columns a helper is handed: those the body CRCs and those the index keys are read with (sending
#: them costs less than the helper gathering them again from the record starts: 12.5 against 15 ms of helper CPU a
#: 8 MiB window, measured side by side).
_CRC_FIELDS = ("body_pos", "body_len", "body_crc")
_KEY_FIELDS = ("pos", "length_ok", "sys_flag", "phy", "topic_pos", "topic_len", "props_pos", "props_len")
#: Key columns the window's own columns give (batch_key_columns copies them): not sent back by a helper.
_OWN_KEY_COLUMNS = ("phy", "ts")


def _worker_map(path: str, length: int):
    """The helper's read-only mapping of a segment file; the mappings of other segments are closed (helpers take
    the windows in log order: a walk over many segments keeps one mapping per helper)."""
    m = _WORKER_MAPS.get(path)
    if m is None or len(m) != length:
        for other in [k for k in _WORKER_MAPS if k != path]:
            try:
                _WORKER_MAPS.pop(other).close()
            except BufferError:  # (a view of it is still alive: it is dropped with the view)
                pass
        with open(path, "rb") as f:
            m = _WORKER_MAPS[path] = mmap.mmap(f.fileno(), length, access=mmap.ACCESS_READ)
    return m


def _window_work(buf, b: np.ndarray, batch: RecordBatch, seg_start: int, check_crc: bool, keys: bool):
    """What a helper (or this process, for a window it keeps) does for one decoded window: the first record with
    a bad body CRC (None: not checked) and the index keys of every record (None: not asked)."""
    bad = body_crc_first_bad(buf, batch.body_pos, batch.body_len, batch.body_crc) if check_crc else None
    return bad, (batch_key_columns(buf, b, batch, seg_start) if keys else None)


def _worker_window(path: str, length: int, seg_start: int, fields: dict, span: tuple[int, int], check_crc: bool,
                   keys: bool):
    """In a helper process, over its own read-only mapping of the segment: _window_work for the window whose
    columns (those it reads: _CRC_FIELDS, _KEY_FIELDS) are `fields`, its records in bytes [span). The key columns go
    back without those the walk has (_OWN_KEY_COLUMNS): the answer is a few bytes per record."""
    m = _worker_map(path, length)
    n = len(next(iter(fields.values())))
    batch = RecordBatch(**{f: fields.get(f, np.zeros(n, dtype=np.int64)) for f in RecordBatch.__dataclass_fields__})
    b = np.frombuffer(m, dtype=np.uint8) if keys else None
    try:
        bad, cols = _window_work(m, b, batch, seg_start, check_crc, keys)
    finally:
        del b
    _release(m, *span)  # the window's pages leave the helper's resident set (they stay in the page cache)
    if cols is not None:
        for k in _OWN_KEY_COLUMNS:
            cols.pop(k)
    return n, bad, cols


def _worker_candidates(path: str, length: int, a: int, b: int) -> np.ndarray:
    """In the helper process: the MAGICCODE candidates of bytes [a, b) of the segment (decode_segment's
    prefetch), over its own read-only mapping."""
    v = np.frombuffer(_worker_map(path, length), dtype=np.uint8)
    try:
        return magic_candidates(v, a, b)
    finally:
        del v


#: Windows handed to each helper at most (running or waiting): enough that a helper does not run dry while this
#: process checks a window itself or runs the walk's consumers (measured 2, 4 and 6 side by side: with 2 the
#: helper waited for work, 4 and 6 were alike).
HELPER_JOBS = 4


class CrcHelper:
    """Helper processes beside the walk: this process decodes the windows, in order, and hands each to a helper
    (its body CRCs checked and, asked for keys, its index keys extracted) while it decodes the next; when every
    helper already has HELPER_JOBS windows waiting, this process does that window's work itself. So the work
    balances itself between this process (which also runs the walk's consumers) and the helpers whatever their
    speeds, and on two cores both stay busy. The answers are the same whoever did a window's work. Used for long
    walks only."""

    def __init__(self, keys: bool = False, n: int = 1):
        from engine.workers import WorkerPool

        self.keys = keys
        self.n = n  # helper processes (engine.workers: --workers N gives N - 1 helpers beside this process)
        self.pool = WorkerPool(n)
        self.jobs: list = []  # submitted, not known to be done
        self.primed: _Primed | None = None  # the next segment's first windows, decoded and handed out ahead

    def saturated(self) -> bool:
        """Every helper has its HELPER_JOBS windows waiting or running."""
        return self._track(None) >= HELPER_JOBS * self.n

    def submit(self, seg: Segment, batch: RecordBatch, check_crc: bool):
        """Hand `batch`'s work to a helper; returns the job (see settle)."""
        names = (_CRC_FIELDS if check_crc else ()) + (_KEY_FIELDS if self.keys else ())
        span = (int(batch.pos[0]), int(batch.pos[-1] + batch.total[-1]))
        f = self.pool.submit(_worker_window, str(seg.path), seg.file_len, seg.start,
                             {k: getattr(batch, k) for k in names or ("pos",)}, span, check_crc, self.keys)
        self._track(f)
        return f

    def assign(self, buf, seg: Segment, batch: RecordBatch, check_crc: bool):
        """The window's job: handed to a helper, or done here when every helper has HELPER_JOBS windows."""
        return self.local(buf, seg, batch, check_crc) if self.saturated() else self.submit(seg, batch, check_crc)

    def adopt(self, seg: Segment, pos: int, limit: int) -> "_Primed | None":
        """The next-segment start made for seg (from pos 0 up to limit), if the walk enters it so; a start the
        walk has passed, or entered otherwise, is dropped."""
        p, self.primed = self.primed, None
        if p is None:
            return None
        if p.seg.start == seg.start and pos == 0 and p.limit == limit:
            return p
        if seg.start < p.seg.start:  # the walk is still before it (it resynchronises in the segment before)
            self.primed = p
        else:
            p.close()
        return None

    def local(self, buf, seg: Segment, batch: RecordBatch, check_crc: bool):
        """Do `batch`'s work here (every helper is busy); returns the job (see settle), already done."""
        b = np.frombuffer(buf, dtype=np.uint8) if self.keys else None
        try:
            return ("here", *_window_work(buf, b, batch, seg.start, check_crc, self.keys))
        finally:
            del b

    @staticmethod
    def ready(job) -> bool:
        return isinstance(job, tuple) or job.done()

    def _track(self, f) -> int:
        """Keep f among the jobs not known to be done (the done ones are dropped: they hold their results, a
        window's key columns, which must not pile up over a long walk); returns how many were outstanding."""
        self.jobs = [j for j in self.jobs if not j.done()]
        busy = len(self.jobs)
        if f is not None:
            self.jobs.append(f)
        return busy

    def prefetch(self, seg: Segment):
        """decode_segment's prefetch for this segment: the helper finds the next window's record candidates
        (unless it extracts keys: then it has work enough)."""
        if self.keys:
            return None
        path, length = str(seg.path), seg.file_len

        def offer(a: int, b: int):
            # Behind with the CRCs (a window's check still waits in the queue): this process scans the block.
            if self._track(None) > self.n:
                return None
            f = self.pool.submit(_worker_candidates, path, length, a, b)
            self._track(f)
            return f
        return offer

    def settle(self, buf, seg: Segment, batch: RecordBatch, job, check_crc: bool) -> tuple[int | None, dict | None]:
        """(the first record with a bad body CRC (None: not checked), the key columns) once the job is done (a dead
        helper: WorkerDiedError)."""
        if isinstance(job, tuple):
            return job[1], job[2]
        n, bad, cols = self.pool.result(job)
        if n != len(batch):  # not the records the walk decoded (cannot happen with the same bytes): redo them here
            return self.local(buf, seg, batch, check_crc)[1:]
        if cols is not None:  # the columns the walk's window has, as batch_key_columns gives them
            own = batch if not cols["mismatches"] else batch.select(batch.length_ok)
            cols["phy"], cols["ts"] = own.phy.copy(), own.store_ts.copy()
        return bad, cols

    def close(self) -> None:
        # The workers are stopped, not left to finish a window nobody waits for (a walk that ends early: an
        # interrupted recover must leave no process behind).
        if self.primed is not None:
            self.primed.close()
            self.primed = None
        self.pool.close()


class _Primed:
    """One segment's decode from pos up to limit, with the windows decoded so far and their jobs (CrcHelper):
    the walk's own decode of a segment, or the next segment's start made while the walk waits at the end of the
    one before (step: one more window; at most HELPER_JOBS x helpers + 1 held ahead)."""

    def __init__(self, helper: CrcHelper, cl, seg: Segment, buf, pos: int, limit: int, kw, check_crc: bool):
        from collections import deque

        self.helper, self.seg, self.buf, self.limit, self.check_crc = helper, seg, buf, limit, check_crc
        self.gen = cl.decode_segment(seg, _cut(buf, limit), pos, prefetch=helper.prefetch(seg), **kw)
        self.pending: deque = deque()  # decoded windows whose work is under way or done, in order
        self.tail: list = []           # the SegmentEnd, when a step reached it

    def step(self) -> bool:
        """Decode the next window and hand its work out; False when there is none or enough are held ahead."""
        if self.tail or len(self.pending) > HELPER_JOBS * self.helper.n:
            return False
        item = next(self.gen, None)
        if item is None or isinstance(item, SegmentEnd):
            self.tail.append(item)
            return False
        self.pending.append((item, self.helper.assign(self.buf, self.seg, item, self.check_crc)))
        return True

    def items(self):
        """What the decode yields from here on (a SegmentEnd a step reached, then the rest)."""
        if self.tail:
            if self.tail[0] is not None:
                yield self.tail[0]
            return
        yield from self.gen

    def close(self) -> None:
        self.gen.close()


def _decode_checked(cl, buf, seg: Segment, pos: int, limit: int, check_crc: bool, helper: CrcHelper | None, kw,
                    prime=None):
    """decode_segment, each batch with (good, why) from check_batch and its key columns (or None). With helpers,
    each batch's work goes to a helper or, when they are all busy, is done here (CrcHelper), and the batches are
    yielded in order as their work is done, at most HELPER_JOBS x helpers + 1 held. Yields (batch, good, why,
    keys) tuples, then the SegmentEnd.

    prime: a function that starts the next segment (_Primed) when this one ends at its BLANK filler: while this
    process waits for the helpers' last windows of this segment, it decodes and hands out the next one's first
    windows (the helpers do not wait at each segment's end); the walk takes them when it enters that segment."""
    if helper is None:
        for item in cl.decode_segment(seg, _cut(buf, limit), pos, **kw):
            yield item if isinstance(item, SegmentEnd) else (item, *check_batch(buf, item, seg.start, check_crc), None)
        return
    got = helper.adopt(seg, pos, limit)
    if got is None:
        got = _Primed(helper, cl, seg, buf, pos, limit, kw, check_crc)
    items, pending = got.items(), got.pending  # (windows the next-segment start decoded already, with their work)
    most = HELPER_JOBS * helper.n + 1
    for item in items:
        if isinstance(item, SegmentEnd):
            nxt = prime() if prime is not None and item.kind == END_BLANK else None
            while pending:
                if nxt is not None and not helper.ready(pending[0][1]) and nxt.step():
                    continue  # rather than wait: the next segment's next window
                got = _settle(buf, seg, helper, pending.popleft(), check_crc)
                yield got
                if pending and got[1] < len(got[0]):  # the last window is followed by the SegmentEnd, as ever
                    return
            yield item
            return
        pending.append((item, helper.assign(buf, seg, item, check_crc)))
        while pending and (len(pending) > most or helper.ready(pending[0][1])):
            got = _settle(buf, seg, helper, pending.popleft(), check_crc)
            yield got
            if got[1] < len(got[0]):
                return


def _settle(buf, seg, helper, pending, check_crc):
    batch, job = pending
    crc_bad, cols = helper.settle(buf, seg, batch, job, check_crc)
    return (batch, *check_batch(buf, batch, seg.start, check_crc, crc_bad), cols)


def _prefix_keys(cols: dict | None, n: int) -> dict | None:
    """Key columns of the first n records (the valid prefix of a window)."""
    if cols is None or len(cols["nkeys"]) == n:
        return cols
    nk = cols["nkeys"][:n]
    out = dict(cols)
    out.update(phy=cols["phy"][:n], ts=cols["ts"][:n], nkeys=nk, key_hash=cols["key_hash"][:int(nk.sum())])
    return out


def _candidate(buf, c: int, n: int, seg_start: int, min_ts: int, check_crc: bool) -> str:
    """"ok" when a valid record (or the segment's own BLANK filler) starts at c, "stale" when a valid record
    starts there that is older than the records before the damage, else "no"."""
    r = check_message(buf, c, n, check_crc=check_crc, read_body=check_crc)
    if r.status == BLANK:
        return "ok" if r.size == n - c else "no"  # a segment's filler runs exactly to the end of the file
    if r.status != VALID or r.record.physical_offset != seg_start + c:
        return "no"
    return "ok" if r.record.store_timestamp >= min_ts else "stale"


def _next_data(fd: int, pos: int, n: int) -> int | None:
    """Position of the first non-zero byte at or after pos (holes skipped, read with pread so the pages are
    not mapped into the resident set), or None."""
    chunk = 1 << 20
    while pos < n:
        try:
            pos = max(pos, os.lseek(fd, pos, os.SEEK_DATA))
        except OSError:
            return None  # only a hole follows
        if pos >= n:
            return None
        data = os.pread(fd, min(chunk, n - pos), pos)
        if not data:
            return None
        nz = np.flatnonzero(np.frombuffer(data, dtype=np.uint8))
        if len(nz):
            return pos + int(nz[0])
        pos += len(data)
    return None


def find_resync(buf, fd: int, p: int, n: int, seg_start: int, min_ts: int, check_crc: bool, vouch=None,
                stale: list | None = None) -> int | None:
    """The first position after p where a valid record (or the segment's BLANK filler) starts, or None
    (nothing valid follows, or what follows is stale).

    Stale data (a valid record older than the record before the damage, left behind by an earlier truncation,
    pitfall 13) ends the search, unless `vouch(offset, record)` shows the record is live (recovery: the unit at
    its QUEUEOFFSET in its consume queue points at it, which a stale record's unit no longer does). Store times
    are not monotone along a sound log (a writer that stamps before it appends, as put's parse helper does,
    producers' own store times, a clock stepped back), so an older time alone does not make a record stale.
    stale: a list that receives the offset of the stale record the search stopped at, if it did."""
    if n - p >= 8:
        total = int.from_bytes(buf[p:p + 4], "big", signed=True)
        magic = int.from_bytes(buf[p + 4:p + 8], "big", signed=True)
        if magic in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2) and 8 <= total <= n - p - 8:
            verdict = _candidate(buf, p + total, n, seg_start, min_ts, check_crc)
            if verdict == "stale" and vouch is not None and _vouched_record(buf, p + total, n, seg_start, vouch):
                verdict = "ok"
            if verdict != "no":
                return p + total if verdict == "ok" else _stale(stale, seg_start + p + total)
    q = p + 1
    while q + 8 <= n:
        data = _next_data(fd, q, n)
        if data is None:
            return None
        q = max(q, data - 4)  # a record's first non-zero byte is within its 4-byte TOTALSIZE
        hits = [h for h in (buf.find(m, q + 4) for m in _MAGICS + (_BLANK,)) if h >= 0]
        if not hits:
            return None
        c = min(hits) - 4
        verdict = _candidate(buf, c, n, seg_start, min_ts, check_crc)
        if verdict == "stale" and vouch is not None and _vouched_record(buf, c, n, seg_start, vouch):
            verdict = "ok"
        if verdict != "no":
            return c if verdict == "ok" else _stale(stale, seg_start + c)
        q = c + 1
    return None


def _stale(stale: list | None, offset: int) -> None:
    if stale is not None:
        stale.append(offset)


def _vouched_record(buf, c: int, n: int, seg_start: int, vouch) -> bool:
    r = check_message(buf, c, n, check_crc=False, read_body=False)
    return r.status == VALID and bool(vouch(seg_start + c, r.record))


def _resync_wide(cl, seg, buf, pos, n, last_ts, check_crc, min_hole, vouch=None, stale=None
                 ) -> tuple[int | None, int]:
    """find_resync, then widened past valid records while the hole is narrower than min_hole."""
    fd = cl.queue.fd(seg)
    r = find_resync(buf, fd, pos, n, seg.start, last_ts, check_crc, vouch, stale)
    swallowed = 0
    while r is not None and r - pos < min_hole:
        nxt = check_message(buf, r, n, check_crc=False, read_body=False)
        if nxt.status != VALID:
            return None, swallowed  # the segment's BLANK: the hole becomes the segment's tail
        swallowed += 1
        r = find_resync(buf, fd, r, n, seg.start, last_ts, check_crc, vouch, stale)
    return r, swallowed


def _cut(buf, limit: int):
    """decode_segment over buf[:limit] without a copy (a full mapping keeps its madvise page release)."""
    return buf if limit >= len(buf) else memoryview(buf)[:limit]


def walk(cl: CommitLog, start: int | None = None, *, check_crc: bool = True, end: int | None = None,
         known_gaps: list[tuple[int, int]] | None = None, window: int | None = None, min_hole: int = 1,
         parallel_crc: bool = False, parallel_keys: bool = False, hints=None, vouch=None, last_ts: int = 0
         ) -> Iterator[Window | Gap | Filler]:
    """Valid records from `start` (a record boundary) in log order, and the gaps between them.

    known_gaps: (offset, end offset) ranges already found by an earlier walk; they are stepped over without
    decoding (a walk with check_crc=False then sees exactly the records the checking walk saw). The walk stops
    after the first window that reaches `end` (windows may hold records past it) or at the end of the log.
    min_hole: a HOLE narrower than this swallows the valid records after it until it is not (recovery needs
    room for a placeholder record). A non-last segment with nothing valid left is a SEGMENT_TAIL only when a
    later segment holds valid records; otherwise the log ends there (LOG_END) and later segments are after it.
    parallel_crc: check body CRCs in a helper process (CrcHelper), for long walks on more than one core;
    parallel_keys: the helper also extracts every window's index keys (Window.keys).
    hints: a function (offset, end offset) -> sorted physical offsets where records are believed to start,
    asked with increasing ranges (engine.broker.commitlog.records.decode_segment's hints: they save the byte scan where
    they are right and change no result where they are wrong).
    vouch: a function (offset, MessageRecord) -> bool, true when the record is known to be live although it is
    older than the record before a damaged range (find_resync).
    last_ts: the store time of the last valid record before `start` (a walk that goes on where another stopped:
    the records after damage older than it are stale data, pitfall 13); 0, none.
    """
    segs = cl.segments
    if not segs:
        return
    first = 0 if start is None else next((i for i, s in enumerate(segs) if s.start <= start < s.end), None)
    if first is None:
        return
    known = sorted(known_gaps or [])
    helper = _helper(parallel_crc, parallel_keys)
    ctx = (check_crc, end, known, window, min_hole, helper, hints, vouch)
    at = {"i": first, "last_ts": last_ts}  # the segment's index (the walk goes on one segment at a time), the last time

    def per_segment(seg, pos, _last):
        i = at["i"]
        at["i"] += 1
        if end is not None and seg.start >= end:
            return True
        stop, at["last_ts"] = yield from _walk_segment(cl, seg, pos, segs[i + 1:], at["last_ts"], ctx)
        return stop

    try:
        # The one segment walk (CommitLog.walk_segments); a missing segment is no entry here: the gap between two
        # files is not a range of any file (recovery reads the segment files' problems from the queue).
        yield from cl.walk_segments(start, end, per_segment, gaps=False, release=False)
    finally:
        if helper is not None:
            helper.close()


class NeedsLastTs(Exception):
    """A walk begun at a segment's start without the store time the walk in order carries into it (walk's
    last_ts) met damage before the segment's first record: the walk in order judges what follows with that time
    (stale data, pitfall 13; whether the log ends), so from there this walk's events are not its."""


def as_in_order(events: Iterator) -> Iterator:
    """The events of a walk begun at a segment's start with no store time carried in (a segment walked on its
    own, as a worker's job), checked to be the walk in order's: until the segment's first window only a filler
    may come; a gap there raises NeedsLastTs. After a window, the store time the walk needs is one of the
    segment's own, so the rest are the walk in order's too."""
    first = True
    for ev in events:
        if first and isinstance(ev, Gap):
            raise NeedsLastTs()
        first = first and not isinstance(ev, Window)
        yield ev


def _helper(parallel_crc: bool, parallel_keys: bool) -> CrcHelper | None:
    """The walk's helpers (engine.workers: --workers N is this process and N - 1 helpers), None with one
    worker or when the caller did not ask for them (a short walk: they are asked for by size, or by --workers)."""
    from engine import workers

    n = workers.count()
    return CrcHelper(parallel_keys, n - 1) if (parallel_crc or parallel_keys) and n > 1 else None


def _release(buf, lo: int, hi: int) -> None:
    """Drop a consumed window's pages from the resident set (they stay in the page cache): the consumers may
    have touched them after decode_segment released them (the helpers hold windows in flight)."""
    madvise = getattr(buf, "madvise", None)
    page = mmap.PAGESIZE
    a, b = -(-lo // page) * page, (hi // page) * page
    if madvise is not None and b > a:
        madvise(mmap.MADV_DONTNEED, a, b - a)


def _later_data(cl: CommitLog, segs: list[Segment], min_ts: int, check_crc: bool) -> bool:
    """Does any of these segments hold a valid record (as a resynchronisation would find it)?"""
    for seg in segs:
        buf = cl.queue.buffer(seg)
        n = len(buf)
        if n >= 8 and (_candidate(buf, 0, n, seg.start, min_ts, check_crc) == "ok"
                       or find_resync(buf, cl.queue.fd(seg), 0, n, seg.start, min_ts, check_crc) is not None):
            return True
    return False


#: The smallest window a walk with helpers decodes at a time: a segment is cut into about 4 x (helpers + 1) windows
#: (so that a segment of 64 MiB keeps two processes busy, not one window decoded and then one checked), no smaller.
HELPER_MIN_WINDOW = 4 << 20
#: The largest: what the walk holds for its helpers (HELPER_JOBS windows each, their pages and columns) stays
#: bounded whatever the segment size (the windows' number costs nothing measurable: 8 and 64 MiB alike).
HELPER_MAX_WINDOW = 16 << 20
#: decode_segment's first window when the walk resumes inside a segment (after a damaged range): 64 KiB.
RESTART_WINDOW = 64 << 10


def _next_known_gap(known: list[tuple[int, int]], starts: list[int], lo: int, hi: int, base: int
                    ) -> tuple[int, int] | None:
    """The first non-empty known gap that starts in [lo, hi), as positions relative to base (known sorted)."""
    import bisect

    for i in range(bisect.bisect_left(starts, lo), len(known)):
        a, b = known[i]
        if a >= hi:
            return None
        if a < b:
            return a - base, b - base
    return None


def _decode_kw(seg: Segment, n: int, window: int | None, helper: CrcHelper | None, hints) -> dict:
    """decode_segment's arguments for the walk of seg (n bytes), but first_window."""
    # Each window's pages are released by the walk once its consumers are done (decode_segment would release them
    # while a helper holds the window, and the consumers would map them again).
    if helper is not None:  # windows small enough that the helpers have several per segment to overlap with
        window = min(window or SCAN_WINDOW, HELPER_MAX_WINDOW, max(HELPER_MIN_WINDOW, n // (4 * (helper.n + 1))))
    kw = {"release": False} if window is None else {"window": window, "release": False}
    if hints is not None:
        s0 = seg.start
        kw["hints"] = lambda a, b: hints(s0 + a, s0 + b) - s0
    return kw


def _walk_segment(cl, seg, pos, rest, last_ts, ctx):
    """Generator body of walk() for one segment; returns (stop the walk, store time of the last record)."""
    check_crc, end, known, window, min_hole, helper, hints, vouch = ctx
    buf = cl.queue.buffer(seg)
    n = len(buf)
    kw = _decode_kw(seg, n, window, helper, hints)
    gap_starts = [a for a, _ in known]

    def prime():
        """The next segment's start, while this process waits for the helpers at this one's end."""
        nxt = rest[0] if rest else None
        if nxt is None or (end is not None and nxt.start >= end):
            return None
        nbuf = cl.queue.buffer(nxt)
        nn = len(nbuf)
        ngap = _next_known_gap(known, gap_starts, nxt.start, nxt.start + nn, nxt.start)
        if nn == 0 or (ngap is not None and ngap[0] <= 0):
            return None
        nkw = dict(_decode_kw(nxt, nn, window, helper, hints), first_window=None)
        if helper.primed is not None:
            helper.primed.close()
        helper.primed = _Primed(helper, cl, nxt, nbuf, 0, nn if ngap is None else ngap[0], nkw, check_crc)
        return helper.primed

    while pos < n:
        # an empty gap (a segment tail found at the end of a short file, padded since) has nothing to step over
        gap = _next_known_gap(known, gap_starts, seg.start + pos, seg.start + n, seg.start)
        if gap is not None and pos >= gap[0]:
            pos = gap[1]
            continue
        limit = n if gap is None else gap[0]
        stopped = None
        # After a damaged range the next one may be near: decoding starts with a small window that doubles
        # while the records are sound, so a log damaged every few records is not decoded window after window
        # again from each damaged record (quadratic), and a sound one still goes a full window at a time.
        kw["first_window"] = RESTART_WINDOW if pos else None
        for step in _decode_checked(cl, buf, seg, pos, limit, check_crc, helper, kw,
                                    prime if helper is not None else None):
            if isinstance(step, SegmentEnd):
                stopped = step
                break
            item, good, why, cols = step
            if good:
                sel = item if good == len(item) else item.select(slice(0, good))
                last_ts = int(sel.store_ts[-1])
                yield Window(seg, buf, sel, _prefix_keys(cols, good))
                _release(buf, int(sel.pos[0]), int(sel.pos[-1] + sel.total[-1]))
                if end is not None and seg.start + int(sel.pos[-1]) >= end:
                    return True, last_ts
            if good < len(item):
                stopped = SegmentEnd(CORRUPT, int(item.pos[good]), why)
                break
        pos = stopped.pos
        if stopped.kind == END_BLANK:
            total = stopped.size if stopped.size is not None else int.from_bytes(buf[pos:pos + 4], "big", signed=True)
            if total == n - pos:
                yield Filler(seg, pos)
                return False, last_ts
            # A BLANK magic whose length does not run to the end of the file is a damaged record: the broker
            # would skip the rest of the segment there.
            stopped = SegmentEnd(CORRUPT, pos, f"BLANK magic code with TOTALSIZE {total}, but {n - pos} bytes "
                                               "remain in the segment")
        if gap is not None and pos >= limit:
            continue  # reached a known gap: stepped over above
        reason = "" if stopped.kind == ZERO else stopped.reason
        stale: list[int] = []
        r, swallowed = _resync_wide(cl, seg, buf, pos, n, last_ts, check_crc, min_hole, vouch, stale)
        if r is not None:
            yield Gap(seg, pos, r, HOLE, reason or "zero bytes in the middle of the data", last_ts, swallowed)
            pos = r
            continue
        if stale:
            reason = (f"{reason or 'zero bytes'}, and the next valid record (at {stale[0]}) was stored before the "
                      "record preceding the damage and no consume queue points at it: taken as stale data left "
                      "by an earlier truncation, the log ends here")
        if not rest or not _later_data(cl, rest, last_ts, check_crc):
            yield Gap(seg, pos, n, LOG_END, reason, last_ts)
            return True, last_ts
        yield Gap(seg, pos, n, SEGMENT_TAIL, reason or "no BLANK filler before the end of a non-last segment",
                  last_ts)
        return False, last_ts
    return False, last_ts


# ------------------------------------------------------------------------------------------- columns

def key_columns(w: Window, rows: np.ndarray | None = None) -> dict:
    """The broker index's keys of the window's records (format §5.8: UNIQ_KEY, then the KEYS tokens, as
    "topic#key"; rollback records none), as per-record key counts and one Java hashCode per key, in put order.

    Uses engine.broker.index.keycolumns.batch_key_columns, the one vectorised statement of engine.broker.index.keys' rule.
    """
    if w.keys is not None:
        return w.keys if rows is None else _select_keys(w.keys, rows)
    batch = w.batch if rows is None else w.batch.select(rows)
    b = np.frombuffer(w.buf, dtype=np.uint8)
    try:
        return batch_key_columns(w.buf, b, batch, w.seg.start)
    finally:
        del b


def _select_keys(cols: dict, rows: np.ndarray) -> dict:
    """Key columns of some records (rows, ascending) out of a window's key columns."""
    nk = cols["nkeys"].astype(np.int64)
    start = np.concatenate(([0], np.cumsum(nk)[:-1]))
    take = np.repeat(start[rows], nk[rows]) + (np.arange(int(nk[rows].sum())) - np.repeat(
        np.concatenate(([0], np.cumsum(nk[rows])[:-1])), nk[rows]))
    out = dict(cols)
    out.update(phy=cols["phy"][rows], ts=cols["ts"][rows], nkeys=cols["nkeys"][rows], key_hash=cols["key_hash"][take])
    return out


#: Keeps the last `length` bytes of an 8-byte word read in this machine's byte order (the whole word from 8 on).
_TOPIC_TAIL_MASKS = np.array([((1 << 8 * m) - 1) << (8 * (8 - m) if sys.byteorder == "little" else 0)
                              for m in range(9)], dtype=np.uint64).view(np.int64)


class TopicGroups:
    """Which consume queue (topic, queueId) each record of a window belongs to, without decoding every topic.

    Records are grouped by their topic length, queue id and the first and last 8 topic bytes (exact for topics up
    to 16 bytes, longer ones are compared byte for byte with their group's topic); one topic per group is
    decoded. Groups persist from window to window (a log has as many as it has queues), so a window whose
    records all fall into known groups costs one sorted lookup, not a sort.
    """

    def __init__(self):
        self.cache: dict[tuple, tuple[str, int]] = {}
        self.keys: list[tuple[str, int]] = []          # group id -> (topic, queue id)
        self._raw: list[bytes] = []                     # group id -> the topic's bytes
        self._sig_rows: list[tuple] = []                # group id -> head, tail, topic length and queue id
        self._sig: tuple = ()                           # the same as three columns (rebuilt when groups are added)
        self._hash = np.empty(0, np.int64)              # sorted group hashes ...
        self._hash_gid = np.empty(0, np.int64)          # ... and their group ids

    def __call__(self, w: Window) -> tuple[np.ndarray, list[tuple[str, int]]]:
        """(group id of every record, the groups' (topic, queue id)): keys[inv[i]] is record i's queue. The
        list is the groups seen so far (it only grows); do not change it."""
        batch, buf = w.batch, w.buf
        n = len(buf)
        tp, tl, q = batch.topic_pos, batch.topic_len, batch.queue_id
        # 8-byte words in this machine's byte order (no byte swap: they are compared, never read as numbers)
        i64 = np.ndarray((n - 7,), dtype=np.int64, buffer=buf, strides=(1,))
        # Only topic bytes: up to 8 bytes, the last 8 (masked to the topic) hold them all and the first 8 are
        # not read; longer topics have both (the bytes around a topic differ from record to record).
        head = i64[np.minimum(tp, n - 8)]
        head[tl <= 8] = 0
        tail = i64[np.clip(tp + tl - 8, 0, n - 8)]
        tail &= _TOPIC_TAIL_MASKS[np.clip(tl, 0, 8)]
        lq = (tl << 32) | q
        with np.errstate(over="ignore"):
            k = (head * np.int64(1000003)) ^ (tail * np.int64(7919)) ^ (lq * np.int64(31))
        inv = self._lookup(k)
        miss = np.flatnonzero(inv < 0)
        if len(miss):  # hashes not seen before: one new group each, its topic read from its first record
            _, first = np.unique(k[miss], return_index=True)
            rows = miss[first]
            gids = [self._new_group(buf, int(tp[r]), int(tl[r]), int(q[r]), int(head[r]), int(tail[r]))
                    for r in rows.tolist()]
            h = np.concatenate([self._hash, k[rows]])
            order = np.argsort(h, kind="stable")
            self._hash, self._hash_gid = h[order], np.concatenate([self._hash_gid, gids]).astype(np.int64)[order]
            inv[miss] = self._lookup(k[miss])
        sh, st, sl = self._columns()
        same = (head == sh[inv]) & (tail == st[inv]) & (lq == sl[inv])
        for r in np.flatnonzero(same & (tl > 16)).tolist():  # long topics: the middle bytes too
            a, m = int(tp[r]), int(tl[r])
            same[r] = buf[a:a + m] == self._raw[inv[r]]
        odd = np.flatnonzero(~same)
        if len(odd):  # a hash collision: those records go to the group of their own topic and queue
            for r in odd.tolist():
                inv[r] = self._exact_group(buf, int(tp[r]), int(tl[r]), int(q[r]), int(head[r]), int(tail[r]))
        return inv, self.keys

    def _columns(self) -> tuple:
        """The groups' head, tail and (topic length << 32 | queue id) columns."""
        if not self._sig or len(self._sig[0]) != len(self.keys):
            rows = np.array(self._sig_rows, dtype=np.int64).reshape(-1, 4)
            self._sig = (rows[:, 0].copy(), rows[:, 1].copy(), (rows[:, 2] << 32) | rows[:, 3])
        return self._sig

    def _lookup(self, k: np.ndarray) -> np.ndarray:
        """Group id of each hash, -1 where none has it."""
        out = np.full(len(k), -1, np.int64)
        h = self._hash
        if len(h):
            j = np.minimum(np.searchsorted(h, k), len(h) - 1)
            hit = h[j] == k
            out[hit] = self._hash_gid[j[hit]]
        return out

    def _new_group(self, buf, pos: int, length: int, qid: int, head: int, tail: int) -> int:
        self.keys.append(self._key(buf, pos, length, qid))
        self._raw.append(bytes(buf[pos:pos + length]))
        self._sig_rows.append((head, tail, length, qid))
        return len(self.keys) - 1

    def _exact_group(self, buf, pos: int, length: int, qid: int, head: int, tail: int) -> int:
        """The group of exactly this topic and queue (found by comparing, made when there is none)."""
        key = self._key(buf, pos, length, qid)
        for gid, have in enumerate(self.keys):
            if have is key:
                return gid
        return self._new_group(buf, pos, length, qid, head, tail)

    def _key(self, buf, pos: int, length: int, qid: int) -> tuple[str, int]:
        raw = bytes(buf[pos:pos + length])
        got = self.cache.get((raw, qid))
        if got is None:
            got = self.cache[(raw, qid)] = (raw.decode("utf-8", "replace"), qid)
        return got
