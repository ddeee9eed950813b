"""Segment ranges: the unit of work of the index jobs' scan, and how their pieces become one exact walk.

Records never span segments (format §3.1), so each commit-log segment decodes on its own; a big segment is
also cut into byte ranges (RANGE_BYTES) so that its work spreads over executors. A range owns the records
that start inside it. Where its first record starts is known only by walking the segment from its start, so
a range scanned in parallel with the one before it guesses: the first position from which a chain of
well-formed records follows (find_record_start). The guess is checked on the driver (RangeChain): a range
is kept only when it began exactly where the walk of the range before it ended, else it is scanned again
from there; a walk that stops (blank filler, unwritten tail, damage) voids the later ranges of its segment.
So the answer is the one sequential walk's whatever the cut; the inline runner, which goes in order, gives
every range its exact start and never guesses.
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import KW_ONLY, dataclass, replace
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


@dataclass
class RangeScan:
    """What both index jobs' scans of one segment range share (SegmentScan, TieredSegmentScan extend it): the
    range, where its walk went and stopped, and its timing. The per-record arrays are the subclasses' own."""
    index: int               # the range's position in commit-log order
    start: int               # commit-log offset of its segment
    _: KW_ONLY
    bytes_scanned: int = 0   # bytes of records walked (up to the blank filler / end of data / range end)
    end_kind: str = "empty"  # range (went on in the next range) | blank | zero | corrupt | empty | void
    end_offset: int = 0      # commit-log offset where the walk of this range stopped
    end_reason: str = ""
    length_mismatches: int = 0
    segment: int = 0
    begin: int = 0           # the range: records starting in [begin, end) of the segment file
    end: Optional[int] = None
    first: Optional[int] = 0  # where its walk began / went past the range or stopped
    exit: int = 0
    seconds: float = 0.0
    started: float = 0.0     # wall clock (epoch seconds) when its walk began, to show tasks overlapping

    @property
    def records(self) -> int:
        return len(self.rec_ts)


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


# ============================================================================ one exact walk

class RangeChain:
    """Follows the one sequential walk of every segment across its ranges (see the module docstring)."""

    def __init__(self):
        self._next: dict[int, int] = {}   # segment -> where its walk goes on
        self._stopped: set[int] = set()

    def exact(self, unit: SegmentRange) -> SegmentRange:
        """The range as the sequential walk reaches it: its exact start, or void."""
        pos = self._next.get(unit.segment, 0)
        if unit.segment in self._stopped or (unit.end is not None and pos >= unit.end):
            return unit.voided()
        return unit.exact(pos)

    def record(self, summary: dict) -> None:
        if summary["end_kind"] == VOID:
            return
        if summary["end_kind"] == PASSED:
            self._next[summary["segment"]] = summary["exit"]
        else:
            self._stopped.add(summary["segment"])

    @staticmethod
    def agrees(unit: SegmentRange, summary: dict) -> bool:
        """Whether a scan made from a guess is the scan of the exact range."""
        if unit.void:
            return summary["end_kind"] == VOID
        return summary["end_kind"] != VOID and summary["first"] == unit.start


def reconcile(units: list[SegmentRange], summaries: dict[int, dict]) -> list[SegmentRange]:
    """The ranges to scan again (exactly) so that every range begins where the walk before it ended. Per
    segment: every range that must be void (after a stop, or jumped over by one record) up to the first
    range that began at a wrong guess; the ones after that are checked once it is fixed."""
    chain = RangeChain()
    redo, blocked = [], set()
    for unit in units:
        if unit.segment in blocked:
            continue
        want = chain.exact(unit)
        s = summaries[unit.index]
        if chain.agrees(want, s):
            chain.record(s)
        elif want.void:
            redo.append(want)
        else:
            redo.append(want)
            blocked.add(unit.segment)
    return redo


def settle(units: list[SegmentRange], summaries: dict[int, dict],
           rescan: Callable[[list[SegmentRange]], list[dict]]) -> dict[int, dict]:
    """Scan again (rescan: exact ranges -> their summaries) until every range agrees with the walk before
    it; each round fixes at least the first disagreeing range of every segment."""
    while True:
        redo = reconcile(units, summaries)
        if not redo:
            return summaries
        for d in rescan(redo):
            summaries[d["index"]] = d


# ============================================================================ per segment

def segment_ends(summaries: list[dict]) -> list[dict]:
    """Range summaries merged per segment: records, bytes, and where and why its walk stopped."""
    out: dict[int, dict] = {}
    for d in sorted(summaries, key=lambda x: x["index"]):
        seg = out.setdefault(d["segment"], {"segment": d["segment"], "start": d["start"], "records": 0,
                                              "bytes_scanned": 0, "end_kind": "empty", "end_offset": d["start"],
                                              "end_reason": "", "phy_mismatches": 0})
        seg["records"] += d["records"]
        seg["bytes_scanned"] += d["bytes_scanned"]
        seg["phy_mismatches"] += d.get("phy_mismatches", 0)
        if d["end_kind"] not in (VOID, PASSED):
            seg.update(end_kind=d["end_kind"], end_offset=d["end_offset"], end_reason=d["end_reason"])
    return [out[k] for k in sorted(out)]


def scan_anomalies(summaries: list[dict]) -> list[str]:
    """Damage the dispatcher would have met. A zero area before only empty segments is the normal end."""
    segs = segment_ends(summaries)
    out = []
    for i, d in enumerate(segs):
        later_empty = all(x["records"] == 0 and x["end_kind"] in ("zero", "empty") and x["bytes_scanned"] == 0
                          for x in segs[i + 1:])
        if d["end_kind"] == "corrupt":
            out.append(f"segment at {d['start']}: stopped at offset {d['end_offset']}: {d['end_reason']}; "
                       "the rest of that segment is not indexed")
        elif d["end_kind"] == "zero" and not later_empty:
            out.append(f"segment at {d['start']}: data ends at offset {d['end_offset']} without a BLANK filler, "
                       "but later segments hold records")
    mis = sum(d["phy_mismatches"] for d in segs)
    if mis:
        out.append(f"{mis} record(s) carry a PHYSICALOFFSET that is not their position in the commit log (copied or "
                   "moved segments?); the index stores the recorded value, as the broker would")
    return out


def range_summary(unit: SegmentRange, walk: RangeWalk, records: int, seconds: float) -> dict:
    """The fields every scan summary carries for the driver (the formats add their own)."""
    scanned = 0 if walk.first is None else max(0, walk.exit - walk.first)
    return {"index": unit.index, "segment": unit.segment, "start": unit.seg_start, "begin": unit.begin,
            "end": unit.end, **walk.fields(), "end_offset": unit.seg_start + walk.exit, "records": records,
            "bytes_scanned": scanned, "seconds": round(seconds, 4)}
