"""Segment ranges as the unit of work of the index jobs' scan, and how their pieces become one exact walk.

The ranges themselves, the walk of one range and the guess of where its first record starts are the commit log's
(engine.broker.commitlog.ranges). A range scanned in parallel with the one before it starts
from that guess; the guess is checked on the driver (RangeChain): a range is kept only when it began exactly where
the walk of the range before it ended, else it is scanned again from there; a walk that stops (blank filler,
unwritten tail, damage) voids the later ranges of its segment. So the answer is the one sequential walk's whatever
the cut; the inline runner, which goes in order, gives every range its exact start and never guesses.
"""
from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Callable, Optional

from engine.broker.commitlog.ranges import PASSED, VOID, RangeWalk, SegmentRange


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
