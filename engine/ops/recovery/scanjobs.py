"""The recovery walk on workers, a segment per job (issue 32): each worker walks whole segments, as the walk in order
walks them there (decode, body CRCs, resynchronisation past damage, the index items that point into the segment
checked against its records, the first record its consume queue lacks), and this process puts the segments' answers
together in order (engine.ops.recovery.scan._scan's counts and gaps, the index files' item joins of
engine.ops.recovery.trust).

Why a segment's job answers as the walk in order: the walk enters a segment at its start carrying one thing, the
store time of the last valid record before it, which it needs only where it meets damage before any valid record of
the segment (to judge what follows as stale data, pitfall 13, or the log as ended). A job walks its segment from its
start with none; its answer is the walk in order's unless a gap comes before the segment's first window (the first
segment's job starts where the walk starts, carrying what the walk carries: always). A job that meets such a gap
says so (engine.broker.commitlog.walk.as_in_order), and this process walks that segment itself, carrying the store
time, with the same item joins (engine.broker.commitlog.walk.walk's last_ts); so the scan is the walk in order's in
every case. (A DLedger segment's first record comes after its entry's header: its job answers as well.)

The item joins: a monotone index file's items are sorted by offset, so those that point into a segment are one run
(found by bisection: engine.broker.index.verify.item_runs); the job checks them against the segment's windows with
the join itself over that run (ItemJoin.over). The items a segment's windows leave (pointing past its last record)
are taken by the next window in the log, which ItemJoin fails at the first of them ("not the start of a valid
record"): this process does the same when it folds the next segment that has a window.

Memory: per worker one decode window (engine.ops.recovery.scan.JOB_WINDOW) and its columns, a chunk of items per
index file, and the segment's answer (a few numbers a window, its gaps: at most GAPS_PER_JOB, beyond that the
segment is walked here); in this process the answers of at most engine.workers.JOBS_PER_WORKER segments per worker
ahead.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from engine.broker.commitlog.walk import LOG_END, Filler, Gap, NeedsLastTs, TopicGroups, Window, as_in_order, walk
from engine.broker.index.verify import item_runs

#: The gaps a segment's job sends back at most; a segment with more is walked by the command's process.
GAPS_PER_JOB = 4096


@dataclass
class SegmentScan:
    """A segment's job's answer: its events in order (("w", records, last_valid, last_ts, max_ts, end) a window,
    ("g", pos, end, kind, reason, prev_ts, swallowed) a gap, ("f",) its BLANK filler), the first record a consume
    queue lacks, and each item join's (good, reason, last_ts) over its items (None: no item in the segment)."""
    events: list = field(default_factory=list)
    first_dispatch: Optional[int] = None
    joins: list = field(default_factory=list)
    windows: int = 0


def usable(hooks: list, segments: int) -> bool:
    """Whether the walk can go a segment per job: more than one segment, every hook an item join
    (ScanHooks.joins_items) whose file is monotone."""
    return segments > 1 and all(getattr(h, "joins_items", False) and h.x.structure.monotone for h in hooks)


def spans(joins: list, ranges: list[tuple[int, int, bool]]) -> list[list[tuple[int, int]]]:
    """Per segment range (a, b, last), per join: the items [i0, i1) that point into [a, b) (the first range's
    from the join's start: the items before the walk are taken on trust)."""
    cuts = [b for _, b, last in ranges if not last]
    runs = [item_runs(j.x.f.items_array()["phy"], j.good, j.x.count, cuts) for j in joins]
    return [[r[k] for r in runs] for k in range(len(ranges))]


def segment_job(token: str, k: int, a: int, b: int, last: bool, join_spans: list):
    """In a worker: the walk of one segment from a (to b, the next segment's start), its answer (SegmentScan), or
    None when it is not the walk in order's (damage before the segment's first record: as_in_order) or has more
    than GAPS_PER_JOB gaps."""
    from engine import workers

    ctx = workers.inherited(token)
    cl, joins, queues, multi, check_crc, min_hole, window, make_hints, vouch, first_missing_unit = ctx
    out = SegmentScan()
    sj = [j.over(i0, i1) if i1 > i0 else None for j, (i0, i1) in zip(joins, join_spans)]
    groups = TopicGroups()
    hints = make_hints(a) if make_hints is not None else None
    try:
        events = walk(cl, a, check_crc=check_crc, end=None if last else b, window=window, min_hole=min_hole,
                      hints=hints, vouch=vouch)
        for ev in as_in_order(events) if k else events:  # (the first starts where the walk in order starts)
            if isinstance(ev, Filler):
                out.events.append(("f",))
                continue
            if isinstance(ev, Gap):
                if len(out.events) - out.windows >= GAPS_PER_JOB:
                    return None
                out.events.append(("g", ev.pos, ev.end, ev.kind, ev.reason, ev.prev_ts, ev.swallowed))
                if ev.kind == LOG_END:
                    break
                continue
            bt = ev.batch
            out.windows += 1
            last_valid = int(ev.offsets[-1])
            out.events.append(("w", len(bt), last_valid, int(bt.store_ts[-1]), int(bt.store_ts.max()),
                               last_valid + int(bt.total[-1])))
            if out.first_dispatch is None:
                out.first_dispatch = first_missing_unit(ev, groups, queues, multi)
            for j in sj:
                if j is not None:
                    j.window(ev)
    except NeedsLastTs:
        return None
    finally:
        if hints is not None:
            hints.close()
    out.joins = [None if j is None else (j.good, j.reason, j.last_ts) for j in sj]
    return out


def fold(s, got: SegmentScan, seg, joins: list, join_spans: list, start: int, total: int, progress: Callable,
         scan_gap: Callable) -> bool:
    """Put a segment's job's answer into the scan `s` and the item joins, as the walk in order would have left
    them after that segment; True when the log ends in it."""
    if got.windows:
        for j, (i0, _) in zip(joins, join_spans):
            if not j.done and j.good < i0:  # items the segments before left: the first window here fails them
                phy = int(j.x.f.items_array()["phy"][j.good])
                j.stop(j.good, f"item {j.good + 1} points at {phy}, which is not the start of a valid record")
    for j, (i0, i1), ans in zip(joins, join_spans, got.joins):
        if ans is None or j.done:
            continue
        good, reason, last_ts = ans
        if good == i0 and not reason:
            continue  # none of its items taken (no window reached them): they wait, as the ones before may
        j.good, j.cursor = good, None
        if last_ts is not None:
            j.last_ts = last_ts
        if reason:
            j.stop(good, reason)
        elif j.good >= j.x.count:
            j.done = True
    if s.first_dispatch is None:
        s.first_dispatch = got.first_dispatch
    for ev in got.events:
        if ev[0] == "w":
            _, n, last_valid, last_ts, max_ts, end = ev
            s.records += n
            s.last_valid, s.last_ts, s.max_ts, s.end = last_valid, last_ts, max(s.max_ts, max_ts), end
            s.bytes_walked = s.end - start
            progress("scan", min(total, s.bytes_walked), total)
        elif ev[0] == "f":
            s.end = seg.end
        else:
            _, pos, end, kind, reason, prev_ts, swallowed = ev
            scan_gap(s, Gap(seg, pos, end, kind, reason, prev_ts, swallowed), joins)
            if kind == LOG_END:
                return True
    return False
