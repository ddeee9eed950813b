"""Commit-log segment ranges and how one is walked: a segment cut into byte ranges (a big segment's work spreads
over executors), the walk of one range window by window with the one bulk decoder (a DLedger data file entry by
entry), and the guess of where a range's first record starts when the walk of the range before it has not said
(find_record_start: the first position from which a chain of well-formed records follows).

Records never span segments (format §3.1), so each segment decodes on its own; a range owns the records that start
inside it. The guess is only a guess: engine.exec.ranges (RangeChain, settle) keeps a range only when it began
exactly where the walk of the range before it ended, so the answer is the one sequential walk's whatever the cut.
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, replace
from typing import Callable, Optional

import numpy as np

from engine.broker.dledger.log import decode_entries, open_log
from engine.broker.commitlog.message import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2
from engine.broker.commitlog.records import SCAN_WINDOW, RecordBatch, SegmentEnd, decode_segment, is_zero_area

RANGE_BYTES = 256 << 20  # bytes of a segment per scan task: four tasks per default 1 GiB segment
PASSED = "range"         # end kind of a walk that went past its range's end (the next range goes on)
VOID = "void"            # end kind of a range that holds no record of the walk
_HEAD = struct.Struct(">ii")
_MAGIC_PREFIX = struct.pack(">i", MESSAGE_MAGIC_CODE)[:3]  # v1 and v2 magic codes share their first 3 bytes
_MAGIC_LAST = {struct.pack(">i", MESSAGE_MAGIC_CODE)[3], struct.pack(">i", MESSAGE_MAGIC_CODE_V2)[3]}
_SYNC_RECORDS = 8        # a guessed start must be followed by this many well-formed record headers


@dataclass(frozen=True)
class SegmentRange:
    """Part of one commit-log segment file: the records that start in [begin, end)."""
    index: int                  # position in commit-log order: the plan's order
    segment: int                # the segment's number in commit-log order
    path: str
    seg_start: int              # commit-log offset of the segment (its file name)
    file_len: int
    begin: int = 0
    end: Optional[int] = None   # None: up to wherever the data of the segment ends
    start: Optional[int] = 0    # where its first record starts, when known; None: find it
    void: bool = False          # holds no record of the walk: nothing to scan
    entries: bool = False       # a DLedger data file: records inside entries (engine.broker.dledger), one range

    def exact(self, start: int) -> "SegmentRange":
        return replace(self, start=start, void=False)

    def voided(self) -> "SegmentRange":
        return replace(self, start=None, void=True)


def segment_ranges(config, range_bytes: int = RANGE_BYTES) -> list[SegmentRange]:
    """The store's commit log as ranges of at most range_bytes, segment by segment."""
    out: list[SegmentRange] = []
    step = max(1, int(range_bytes))
    cl = open_log(config)  # the mode's log: a DLedger data file is walked entry by entry, as one range
    segs = list(cl.segments)
    cl.close()
    for i, seg in enumerate(segs):
        path, n = str(seg.path.resolve()), seg.file_len
        if getattr(cl, "is_entry_segment", None) is not None and cl.is_entry_segment(seg):  # DLedgerLog
            out.append(SegmentRange(len(out), i, path, seg.start, n, 0, None, 0, entries=True))
            continue
        cuts = list(range(0, max(n, 1), step))
        for j, begin in enumerate(cuts):
            end = cuts[j + 1] if j + 1 < len(cuts) else None
            out.append(SegmentRange(len(out), i, path, seg.start, n, begin, end, 0 if j == 0 else None))
    return out


def whole_segment(index: int, path: str, seg_start: int) -> SegmentRange:
    """One segment file as a single range (tools and tests)."""
    return SegmentRange(index, index, str(path), seg_start, os.path.getsize(path))


# ============================================================================ walking one range

@dataclass
class RangeWalk:
    """Where the walk of a range began and why it ended."""
    first: Optional[int]    # position of its first record (None: none starts in the range)
    exit: int               # the first record start at or past the range end, or where the data stopped
    end_kind: str           # PASSED | VOID | blank | zero | corrupt | empty
    end_reason: str = ""

    def fields(self) -> dict:
        return {"first": self.first, "exit": self.exit, "end_kind": self.end_kind, "end_reason": self.end_reason}


OnBatch = Callable[[object, np.ndarray, RecordBatch], None]


def walk_range(unit: SegmentRange, on_batch: OnBatch, window: int = SCAN_WINDOW) -> RangeWalk:
    """Decode the records of one range window by window with decode_segment, calling on_batch(buf, bytes,
    batch) for each window (copy what you keep: the batch views the mapping). Pages already decoded are
    released from the resident set as the walk moves on, so memory is bounded by the window."""
    if unit.void:
        return RangeWalk(None, unit.begin, VOID)
    with open(unit.path, "rb") as f:
        n = os.fstat(f.fileno()).st_size
        if n == 0:
            return RangeWalk(0, 0, "empty")
        mm = mmap.mmap(f.fileno(), n, access=mmap.ACCESS_READ)
    try:
        return walk_buffer(mm, unit, on_batch, window)
    finally:
        try:
            mm.close()
        except BufferError:  # numpy views still alive after an error: the mapping goes with them
            pass


def walk_buffer(buf, unit: SegmentRange, on_batch: OnBatch, window: int = SCAN_WINDOW) -> RangeWalk:
    """walk_range over a buffer holding the whole segment file."""
    n = len(buf)
    start = unit.start if unit.start is not None else find_record_start(buf, unit.begin, unit.end)
    if start is None:
        return RangeWalk(None, unit.end if unit.end is not None else n, PASSED)
    b = np.frombuffer(buf, dtype=np.uint8) if n else np.empty(0, np.uint8)
    madvise = getattr(buf, "madvise", None)
    page = mmap.PAGESIZE
    released = (start // page) * page
    pos = start
    try:
        while True:
            if unit.end is not None and pos >= unit.end:
                return RangeWalk(start, pos, PASSED)
            step = window if unit.end is None else max(1, min(window, unit.end - pos))
            # one window per call: it ends at the first record >= pos + step
            # (DLedger's entry CRC fields are not read: the broker indexes the message whatever they hold)
            gen = decode_entries(buf, unit.seg_start, pos, step, check_crc=False) if unit.entries else \
                decode_segment(buf, pos, step)
            try:
                item = next(gen)
            finally:
                gen.close()
            if isinstance(item, SegmentEnd):
                return RangeWalk(start, item.pos, item.kind, item.reason)
            on_batch(buf, b, item)
            pos = int(item.pos[-1] + item.total[-1])
            if madvise is not None and (pos // page) * page > released:  # done with these pages (not the cache)
                upto = (pos // page) * page
                madvise(mmap.MADV_DONTNEED, released, upto - released)
                released = upto
    finally:
        del b


def find_record_start(buf, begin: int, end: Optional[int]) -> Optional[int]:
    """The first position in [begin, end) from which _SYNC_RECORDS well-formed record headers follow (or
    fewer ending in a blank filler or the unwritten tail): a guess, checked later by RangeChain."""
    n = len(buf)
    stop = n if end is None else min(n, end)
    j = begin + 4
    while True:
        j = buf.find(_MAGIC_PREFIX, j, stop + 4 + 2)
        if j < 0 or j - 4 >= stop:
            return None
        if j + 3 < n and buf[j + 3] in _MAGIC_LAST and _plausible_chain(buf, j - 4, n):
            return j - 4
        j += 1


def _plausible_chain(buf, pos: int, n: int) -> bool:
    for _ in range(_SYNC_RECORDS):
        if n - pos < 8:
            return is_zero_area(buf, pos, n)
        total, magic = _HEAD.unpack_from(buf, pos)
        if magic == BLANK_MAGIC_CODE:
            return True
        if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
            return is_zero_area(buf, pos, n)
        if total < 4 or total > n - pos:
            return False
        pos += total
    return True
