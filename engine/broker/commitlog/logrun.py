"""The commit log read in runs of records: the bulk read path of dump-commitlog.

scan_runs walks the same segments in the same order as CommitLog.scan, with the same entries for blank fillers,
gaps, misplaced records, length mismatches and damage, but decodes VALID records a window at a time with the
one bulk decoder (engine.broker.commitlog.records.decode_segment) and hands them out as RecordRuns: numpy columns plus the
body bytes, ready to be formatted many at once (engine.views.runjson.run_json_text,
engine.views.recordjson.run_table_rows).

One difference from CommitLog.scan, on purpose: a record whose fields all add up but whose body fails its CRC is
reported CORRUPT and the walk goes on after it (its TOTALSIZE is trustworthy), so one bad body does not hide the
rest of its segment from a dump.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from engine.broker.commitlog.compression import COMPRESSED_FLAG, decode_body
from engine.broker.commitlog.log import MISPLACED, CommitLog, ScanEntry, misplaced_reason
from engine.broker.commitlog.message import BLANK, CORRUPT, LENGTH_MISMATCH, VALID, cal_msg_length, check_message
from engine.broker.commitlog.records import SegmentEnd, body_crc_bad, unsound
from engine.broker.commitlog.records import BLANK as END_BLANK, ZERO as END_ZERO
from engine.java.lang import rmq_crc32

#: Bytes of records decoded per window (the decoder drops the pages it has passed from the resident set).
RUN_WINDOW = 4 << 20


@dataclass
class RecordRun:
    """Consecutive VALID records of one segment: `batch` holds their columns (positions relative to `buf`),
    `bodies` their body bytes. `buf` is the segment's mapping: valid until the walk moves to the next segment."""
    seg_start: int
    segment: str
    buf: object
    batch: object            # engine.broker.commitlog.records.RecordBatch
    bodies: list[bytes]

    def __len__(self) -> int:
        return len(self.batch)

    def head(self, k: int) -> "RecordRun":
        return RecordRun(self.seg_start, self.segment, self.buf, self.batch.select(slice(0, k)), self.bodies[:k])

    def undecodable(self) -> list[tuple[int, str, str]]:
        """(commit-log offset, codec, why) of every compressed body of the run that a consumer could not decode
        (engine.broker.commitlog.compression.decode_body); bodies stored uncompressed are not looked at."""
        flags = self.batch.sys_flag
        out = []
        for i in np.flatnonzero(flags & COMPRESSED_FLAG).tolist():
            dec = decode_body(bytes(self.bodies[i]), int(flags[i]))
            if not dec.ok:
                out.append((self.seg_start + int(self.batch.pos[i]), dec.codec, dec.error))
        return out


def scan_runs(cl: CommitLog, start: int | None = None, check_crc: bool = True,
              check_position: bool = True, max_size: int | None = None) -> Iterator[RecordRun | ScanEntry]:
    """Runs of valid records (and the entries that are not records) in commit-log order from `start`. With
    `max_size`, a record whose TOTALSIZE is above it is reported CORRUPT and its size is not trusted: the rest of
    its segment is not read (the walk goes on with the next segment)."""
    return cl.walk_segments(start, None, lambda seg, pos, last: _segment(cl, seg, pos, last, check_crc,
                                                                          check_position, max_size))


def _segment(cl: CommitLog, seg, pos: int, last: bool, check_crc: bool, check_position: bool,
             max_size: int | None = None):
    """Entries of one segment from pos; returns True when the whole walk must stop."""
    buf = cl.queue.buffer(seg)
    name = seg.path.name
    while True:
        resume = None
        for item in cl.decode_segment(seg, buf, pos, RUN_WINDOW):
            if not isinstance(item, SegmentEnd):
                over = np.flatnonzero(item.total > max_size) if max_size is not None else ()
                if len(over):
                    j = int(over[0])
                    if j:
                        yield from _runs(seg, buf, item.select(slice(0, j)), check_crc, check_position)
                    p, total = int(item.pos[j]), int(item.total[j])
                    yield ScanEntry(CORRUPT, seg.start + p, total, buf, p, f"TOTALSIZE {total} is above the maximum "
                                    f"message size {max_size}: not trusted, the rest of segment {name} is not read",
                                    name)
                    return last
                yield from _runs(seg, buf, item, check_crc, check_position)
                continue
            off = seg.start + item.pos
            if item.kind == END_BLANK:
                size = item.size if item.size is not None else struct.unpack_from(">i", buf, item.pos)[0]
                yield ScanEntry(BLANK, off, size, buf, item.pos, "end-of-segment blank", name)
                return False
            if item.kind == END_ZERO:
                if last:
                    return True  # the normal end of data
                if item.pos >= len(buf) and seg.file_len < seg.size:
                    reason = f"segment file is {seg.file_len} bytes, not {seg.size}: it ends without a BLANK filler"
                else:
                    reason = "no BLANK filler before the end of a non-last segment"
                yield ScanEntry(CORRUPT, off, -1, buf, item.pos, reason, name)
                return False
            if item.exact and item.size:
                # damage inside a unit whose size is sound (a DLedger entry): reported, and the walk goes on after it
                yield ScanEntry(CORRUPT, off, item.size, buf, item.pos, item.reason, name)
                resume = item.pos + item.size
                break
            reason = item.reason if item.exact else \
                check_message(buf, item.pos, len(buf), check_crc=False, read_body=False).reason or item.reason
            yield ScanEntry(CORRUPT, off, -1, buf, item.pos, reason, name)
            return last
        if resume is None:
            return last
        pos = resume


def _runs(seg, buf, batch, check_crc: bool, check_position: bool):
    """Split one decoded window into RecordRuns of VALID records and single entries for the others."""
    pos = batch.pos
    blen = batch.body_len
    bodies = _bodies(buf, batch)
    bad_crc = body_crc_bad(bodies, blen, batch.body_crc) if check_crc else np.zeros(len(batch), dtype=bool)
    good = ~bad_crc & ~unsound(batch, seg.start, check_position)
    if good.all():
        yield RecordRun(seg.start, seg.path.name, buf, batch, bodies)
        return
    name = seg.path.name
    i, n = 0, len(batch)
    for j in np.flatnonzero(~good).tolist():
        if j > i:
            yield RecordRun(seg.start, name, buf, batch.select(slice(i, j)), bodies[i:j])
        p, total = int(pos[j]), int(batch.total[j])
        if bad_crc[j]:
            kind, reason = CORRUPT, f"body CRC mismatch (stored {int(batch.body_crc[j])}, computed {rmq_crc32(bodies[j])})"
        elif not batch.length_ok[j]:
            expect = cal_msg_length(bool(batch.v2[j]), int(batch.sys_flag[j]), int(blen[j]), int(batch.topic_len[j]),
                                    int(batch.props_len[j]))
            kind, reason = LENGTH_MISMATCH, f"TOTALSIZE {total} but fields add up to {expect}"
        else:
            kind, reason = MISPLACED, misplaced_reason(seg.start + p, int(batch.phy[j]), seg)
        yield ScanEntry(kind, seg.start + p, total, buf, p, reason, name)
        i = j + 1
    if i < n:
        yield RecordRun(seg.start, name, buf, batch.select(slice(i, n)), bodies[i:n])


def run_at(seg, buf, positions: list[int]) -> RecordRun:
    """A RecordRun of records at arbitrary positions of one segment, each already found VALID (get's lookups):
    the bulk decoder's columns for exactly those records."""
    from engine.broker.commitlog.records import BufferViews, decode_positions

    views = BufferViews(buf)
    try:
        batch, cut = decode_positions(views, np.asarray(positions, dtype=np.int64))
    finally:
        views.close()
    assert cut is None, "run_at takes VALID records only"
    ends = batch.body_pos + np.maximum(batch.body_len, 0)
    bodies = list(map(buf.__getitem__, map(slice, batch.body_pos.tolist(), ends.tolist())))
    return RecordRun(seg.start, seg.path.name, buf, batch, bodies)


def lookup_runs(cl: CommitLog, offsets: list[int], expect_hosts: list | None = None,
                check_crc: bool = True) -> Iterator[RecordRun | tuple[int, str]]:
    """The records at `offsets`, in order: a RecordRun for each stretch of VALID ones that lie one after the other
    in one segment, and (index, reason) for each offset where there is none (the reason check_at gives).
    `expect_hosts[i]`, when not None, is the (store host, port) the i-th record must carry (a lookup by offset
    message id). Each segment's records are checked at once, in whatever order they are asked for."""
    from engine.broker.commitlog.records import BufferViews

    segs = cl.segments
    offs = np.asarray(offsets, dtype=np.int64)
    n = len(offs)
    seg_of = _seg_indexes(cl, offs)
    rank = np.zeros(n, dtype=np.int64)      # where each lookup is in its segment's batch
    good = np.zeros(n, dtype=bool)
    found = {}
    for k in np.unique(seg_of[seg_of >= 0]).tolist():
        idx = np.flatnonzero(seg_of == k)
        seg = segs[k]
        buf = cl.queue.buffer(seg)
        views = BufferViews(buf)
        try:
            ok, batch, bodies = _checked(views, buf, seg, offs[idx] - seg.start, check_crc)
        finally:
            views.close()
        if expect_hosts is not None and ok.any():
            ok &= _hosts_match(buf, batch, ok, [expect_hosts[i] for i in idx.tolist()])
        rank[idx], good[idx] = np.arange(len(idx)), ok
        found[k] = (seg, buf, batch, bodies)
    cut = np.ones(n, dtype=bool)  # a stretch ends at another segment or a bad lookup (ranks in one run on by 1)
    cut[1:] = (seg_of[1:] != seg_of[:-1]) | ~good[1:] | ~good[:-1]
    starts = np.flatnonzero(cut).tolist()
    for lo, hi in zip(starts, starts[1:] + [n]):
        if good[lo]:
            seg, buf, batch, bodies = found[int(seg_of[lo])]
            j = int(rank[lo])
            yield RecordRun(seg.start, seg.path.name, buf, batch.select(slice(j, j + hi - lo)), bodies[j:j + hi - lo])
            continue
        off = int(offs[lo])  # a bad lookup is a stretch of its own
        r = cl.check_at(off, check_crc)
        if seg_of[lo] < 0:
            yield lo, r.reason
        elif r.status == VALID and expect_hosts is not None and expect_hosts[lo] is not None:
            yield lo, f"the message there has id {r.record.msg_id}"
        else:
            yield lo, r.reason or r.status.lower()


def _seg_indexes(cl: CommitLog, offs: np.ndarray) -> np.ndarray:
    """The index of the segment holding each offset, -1 where none does (outside the log, or in a gap)."""
    segs = cl.segments
    if not segs or not len(offs):
        return np.full(len(offs), -1, dtype=np.int64)
    starts = np.array([s.start for s in segs], dtype=np.int64)
    idx = np.searchsorted(starts, offs, side="right") - 1
    inside = (idx >= 0) & (offs >= 0) & (offs < starts[np.maximum(idx, 0)] + cl.file_size)
    return np.where(inside, idx, -1)


def _checked(views, buf, seg, pos: np.ndarray, check_crc: bool):
    """(good mask, RecordBatch of every position (garbage where not good), bodies) for positions in one segment."""
    from engine.broker.commitlog.message import MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2
    from engine.broker.commitlog.records import decode_positions

    n = views.n
    inside = (pos >= 0) & (pos + 91 <= n)
    p = np.where(inside, pos, 0)
    total, magic = views.i32[p], views.i32[p + 4]
    good = inside & ((magic == MESSAGE_MAGIC_CODE) | (magic == MESSAGE_MAGIC_CODE_V2)) & (total >= 91) & (total <= n - p)
    p = np.where(good, p, np.flatnonzero(good)[0] if good.any() else 0)
    if not good.any():
        return good, None, []
    batch, cut = decode_positions(views, p)
    while cut is not None:  # a record whose fields run past TOTALSIZE: mark it and decode the others again
        bad = p == cut
        good &= ~bad
        if not good.any():
            return good, None, []
        p = np.where(good, p, p[np.flatnonzero(good)[0]])
        batch, cut = decode_positions(views, p)
    bodies = _bodies(buf, batch)
    good &= ~unsound(batch, seg.start)  # batch.pos is pos wherever good still holds
    if check_crc:
        good &= ~body_crc_bad(bodies, batch.body_len, batch.body_crc)
    return good, batch, bodies


def _bodies(buf, batch) -> list:
    """The batch's bodies as bytes (an empty one for a record without a body)."""
    ends = batch.body_pos + np.maximum(batch.body_len, 0)
    return list(map(buf.__getitem__, map(slice, batch.body_pos.tolist(), ends.tolist())))


def _hosts_match(buf, batch, good: np.ndarray, expect: list) -> np.ndarray:
    """For lookups by message id: does each record carry the store host and port its id names?"""
    from engine.broker.commitlog.message import decode_fields
    from engine.broker.commitlog.records import gather

    ok = np.ones(len(good), dtype=bool)
    asked = [i for i, want in enumerate(expect) if want is not None and good[i]]
    if not asked:
        return ok
    v4 = [i for i in asked if not batch.sys_flag[i] & 0x30]
    if v4:
        pos = batch.pos[v4]
        hosts = zip(gather(buf, pos, 64, ">u4"), gather(buf, pos, 68, ">i4"))
        for i, (h, port) in zip(v4, hosts):
            want = expect[i]
            ok[i] = len(want[0]) == 4 and int.from_bytes(want[0], "big") == h and want[1] == port
    for i in set(asked) - set(v4):
        f = decode_fields(buf, int(batch.pos[i]))
        ok[i] = (f.store_host, f.store_port) == tuple(expect[i])
    return ok


__all__ = ["RUN_WINDOW", "RecordRun", "lookup_runs", "run_at", "scan_runs", "VALID"]
