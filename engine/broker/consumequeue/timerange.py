"""Messages of a topic by store time (mqadmin printMsg / printMsgByQueue), found through the consume queues.

The broker's search (ConsumeQueue.getOffsetInQueueByTime: two binary searches per queue) assumes store times grow
along a queue, which a broker's clock stepping back breaks, and then misses messages. So no order is assumed:
every unit's store time is bounded from cheap evidence, and only the units certainly in the range (and the
record heads where the evidence cannot decide) are read from the commit log. The evidence is the index files'
items (IndexTimes: each indexed message's time to the second, by commit-log offset); a unit with no item (no
index file, a damaged one, a message without keys) or whose second straddles begin or end has its record head
read (8 bytes), and a sample of the bounds is checked against the heads (a disagreement: every head of the queue
is read). The plan says what it read (Searched: one line on stderr); `scan_log` reads every head (the check).
A subExpression filters by tag as a broker and its client do: the unit's tagsCode
against the hash codes of the tags first (DefaultMessageFilter.isMatchedByConsumeQueue), then the message's
TAGS against the tag names (PullAPIWrapper.processPullResult). Messages are yielded one at a time.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from engine.broker.commitlog.message import MessageRecord
from engine.errors import InvalidArgumentError, StoreError
from engine.findings import Note
from engine.java.lang import INT_MAX, java_string_hash
from engine.broker.consumequeue.queue import MAX_EXT_ADDR
from engine.broker.consumequeue.view import (MAX_UNREADABLE_RUN, OK, PLACEHOLDER, QueueView, commitlog_min_offset,
                               logical_truncation, select_queues)

SUB_ALL = "*"
#: The kinds of what a time-range search says (engine.findings.Note). Problems: a unit in the range that cannot be
#: read, a queue that cannot be read. Notes: what was searched and read (the numbers of Searched.as_dict); a
#: queue's store times go back; units left out, their times unknown; an index file skipped, or every one; units
#: without an index item; the index files disagree with the log.
UNIT_UNREADABLE, QUEUE_UNREADABLE = "unit-unreadable", "queue-unreadable"
SEARCHED, TIMES_GO_BACK, UNPLACED = "searched", "store-times-go-back", "units-unplaced"
INDEX_SKIPPED, INDEX_UNREADABLE, NO_INDEX_ITEM, INDEX_DISAGREES = ("index-file-skipped", "index-unreadable",
                                                                   "units-without-index-item", "index-disagrees")


@dataclass(frozen=True)
class TagFilter:
    """FilterAPI.buildSubscriptionData: `*` (or empty) takes every message; else tags split on `||`, trimmed."""
    expression: str
    tags: frozenset | None          # None: every message
    codes: frozenset = frozenset()

    @classmethod
    def parse(cls, expression: str | None) -> "TagFilter":
        expr = (expression or "").strip()
        if not expr or expr == SUB_ALL:
            return cls(SUB_ALL, None)
        tags = [t.strip() for t in expr.split("||")]
        tags = [t for t in tags if t]
        if not tags:
            raise InvalidArgumentError(f"--tags {expression!r} names no tag: give TagA, 'TagA || TagB' or '*'")
        return cls(expr, frozenset(tags), frozenset(java_string_hash(t) for t in tags))

    def match_unit(self, tags_code: int) -> bool:
        """The broker's test on the consume-queue unit: tagsCode.intValue() in the hash codes. An ext address
        (format §4.6) hides the real tagsCode: the message's TAGS decide instead."""
        if self.tags is None or tags_code <= MAX_EXT_ADDR:
            return True
        return ((tags_code + 2**31) % 2**32) - 2**31 in self.codes

    def match_message(self, tags: str | None) -> bool:
        """The client's test: the message's TAGS is one of the tag names (a hash collision stops here)."""
        return self.tags is None or (tags is not None and tags in self.tags)


@dataclass
class QueueRange:
    """The queue offsets [first, end) of one queue whose messages fall in the time range."""
    topic: str
    queueId: int
    minOffset: int
    maxOffset: int
    first: int
    end: int
    extra: list[int] = field(default_factory=list)   # offsets outside [first, end) stored in the range
    steps_back: int = 0                               # places where the queue's store times go back

    @property
    def candidates(self) -> int:
        return self.end - self.first + len(self.extra)

    def offsets(self) -> Iterator[int]:
        """The queue offsets to visit, in queue order: the searched range and the ones found outside it."""
        return heapq.merge(range(self.first, self.end), self.extra)


@dataclass
class Found:
    """A message printMsg shows, with its position in the consume queue."""
    queue_id: int
    queue_offset: int
    record: MessageRecord
    note: str = ""               # e.g. the record's QUEUEOFFSET differs from its position (pitfall 17)


@dataclass
class TimeRangeScan:
    """The plan (one QueueRange per queue) and, when iterated, the matching messages in queue order."""
    store: object
    topic: str
    begin: int
    end: int
    tag_filter: TagFilter
    ranges: list[QueueRange]
    check_crc: bool = True
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # said on stderr, not problems (the logical truncation)
    filtered: int = 0            # units read and left out (tag or store time)
    visited: int = 0             # units looked at so far
    searched: Searched | None = None   # what the plan read; records_read grows while iterating

    @property
    def remaining(self) -> int:
        """Units of the ranges not looked at yet (after a caller stopped early)."""
        return self.candidates - self.visited

    @property
    def candidates(self) -> int:
        """Units in the ranges: an upper bound of the messages found (exact without a tag filter)."""
        return sum(r.candidates for r in self.ranges)

    def __iter__(self) -> Iterator[Found]:
        cl_min = commitlog_min_offset(self.store)
        for r in self.ranges:
            with QueueView(self.store, r.topic, r.queueId, cl_min) as v:
                yield from self._queue(v, r)

    def _queue(self, v: QueueView, r: QueueRange) -> Iterator[Found]:
        for q in r.offsets():
            self.visited += 1
            u = v.unit(q)
            if u is not None and not self.tag_filter.match_unit(u[2]):
                self.filtered += 1
                continue
            c = v.check(q, check_crc=self.check_crc)
            if self.searched is not None and c.record is not None:
                self.searched.records_read += c.record.total_size
            if c.status == PLACEHOLDER:  # what a consumer receives there: shown, with its note
                c.status = OK
            if c.status != OK:
                self.problems.append(Note(UNIT_UNREADABLE, f"{v.name} queue offset {q}: {c.status.lower()}: {c.reason}",
                                          topic=r.topic, queueId=r.queueId, queueOffset=q, status=c.status,
                                          commitLogOffset=c.commit_log_offset))
                continue
            rec = c.record
            if not self.begin <= rec.store_timestamp <= self.end or not self.tag_filter.match_message(rec.tags):
                self.filtered += 1
                continue
            yield Found(r.queueId, q, rec, c.reason)


def scan_time_range(store, topic: str, begin: int, end: int, queue_id: int | None = None,
                    tags: str | None = None, check_crc: bool = True, scan_log: bool = False) -> TimeRangeScan:
    """printMsg: plan the queue offsets of every queue of `topic` (or of one queue) whose messages were stored in
    [begin, end] (both inclusive); iterate the result for the messages.

    Every unit's store time is bounded without trusting that times grow along the queue (a broker's clock steps
    back): from the index files' items (IndexTimes: a message's time to the second, by its commit-log offset), and
    from the record's head in the commit log (8 bytes) where the index has no item for it or its second straddles
    begin or end. With `scan_log` every head is read (the whole log, pages of every message: the check of the
    index path). The plan says what was read (TimeRangeScan.searched)."""
    if begin > end:
        raise InvalidArgumentError(f"the time range is empty: begin {begin} is after end {end}")
    tag_filter = TagFilter.parse(tags)
    queues, _ = select_queues(store, topic, queue_id)
    cl_min = commitlog_min_offset(store)
    index = None if scan_log else IndexTimes(store)
    searched = Searched(scan_log=scan_log)
    ranges, problems = [], []
    batch: list[tuple[str, int, int, int, np.ndarray, np.ndarray]] = []

    def flush():
        plan_batch(store, batch, begin, end, index, searched, ranges, problems)
        batch.clear()

    held = 0
    for t, q in queues:
        try:
            with QueueView(store, t, q, cl_min) as v:
                parts = list(v.unit_chunks(v.min_offset, v.max_offset))
                offs = np.concatenate([p[1] for p in parts]) if parts else np.empty(0, np.int64)
                sizes = np.concatenate([p[2] for p in parts]) if parts else np.empty(0, np.int64)
                batch.append((t, q, v.min_offset, v.max_offset, offs, sizes))
                problems += v.problems
        except StoreError as e:   # one damaged queue does not hide the others' messages
            problems.append(Note(QUEUE_UNREADABLE, f"{t}/{q}: cannot be read: {e}", topic=t, queueId=q))
            continue
        held += len(offs)
        if held >= BATCH_UNITS:
            flush()
            held = 0
    flush()
    searched.queues = len(ranges)
    cut = logical_truncation(store)
    notes = [cut["note"]] if cut else []
    notes += searched.notes(index)
    notes += [Note(TIMES_GO_BACK, f"{r.topic}/{r.queueId}: store times go back at {r.steps_back} place(s) along the "
                   "queue (a broker clock stepped back): its messages of the range were found by their store times, "
                   "which a binary search over the queue would not all find",
                   topic=r.topic, queueId=r.queueId, stepsBack=r.steps_back)
              for r in ranges if r.steps_back]
    return TimeRangeScan(store, topic, begin, end, tag_filter, ranges, check_crc, problems, notes, searched=searched)


#: Units of the queues whose store times are bounded in one pass over the index items (memory: some 50 bytes each;
#: a queue with more units is one batch of its own).
BATCH_UNITS = 4 << 20
#: Items of an index file matched at once.
ITEM_CHUNK = 1 << 20
#: Units per queue whose index bound is checked against the log's head (the index is evidence, not truth).
SAMPLES = 16
PAGE = 4096
_NO_TIME_LO, _NO_TIME_HI = np.iinfo(np.int64).min, np.iinfo(np.int64).max


@dataclass
class Searched:
    """What a time-range search read (said on stderr in one line)."""
    scan_log: bool = False
    log_bytes: int = 0           # the commit log's bytes from its min offset to the end of the last message searched
    queues: int = 0
    units: int = 0               # units of the queues searched
    covered: int = 0             # units whose store time the index files bounded
    heads: int = 0               # record heads read from the log
    head_pages: int = 0          # distinct 4 KiB pages of the log those heads lie in
    index_bytes: int = 0         # index-item bytes read
    disagree: int = 0            # heads read whose time lies outside the index's bound for them
    records_read: int = 0        # bytes of the messages visited (added while iterating)
    steps: int = 0               # places where a queue's store times go back (certain from the bounds)
    unplaced: int = 0            # units whose time neither the index nor the log gives, left out of the range

    @property
    def log_bytes_read(self) -> int:
        return min(self.head_pages * PAGE + self.records_read, self.log_bytes)

    def as_dict(self) -> dict:
        return {"scanLog": self.scan_log, "queues": self.queues, "units": self.units, "indexCovered": self.covered,
                "headsRead": self.heads, "logBytesRead": self.log_bytes_read, "logBytes": self.log_bytes,
                "indexBytesRead": self.index_bytes, "indexDisagrees": self.disagree, "clockSteps": self.steps,
                "unplaced": self.unplaced}

    def line(self) -> str:
        """One line: what was searched and read."""
        mib = self.log_bytes_read / (1 << 20)
        pct = 100 * self.log_bytes_read / self.log_bytes if self.log_bytes else 0.0
        how = ("every store time read from the log (--scan-log)" if self.scan_log else
               f"index files gave {_pct(self.covered, self.units)} of the times")
        steps = f"; {self.steps} clock step(s) back seen" if self.steps else ""
        return Note(SEARCHED, f"searched {self.queues} consume queue(s), {self.units} unit(s), by store time: {how}; "
                    f"read {mib:.1f} MiB of the log ({pct:.1f}%){steps}", **self.as_dict())

    def notes(self, index: "IndexTimes | None") -> list[str]:
        out = []
        if self.unplaced:
            out.append(Note(UNPLACED, f"{self.unplaced} unit(s) point at no readable message and have no index item: "
                            "their store times are unknown and they lie away from the range's messages, so they were "
                            "left out (`rmqtool verify-cq` lists them)", units=self.unplaced))
        if index is not None:
            for name, why in index.skipped:
                out.append(Note(INDEX_SKIPPED, f"index file {name}: {why}: the store times of its messages were read "
                                "from the log", file=name, reason=why)
                           if name else Note(INDEX_UNREADABLE, f"the index files cannot be read ({why}): every store "
                                             "time was read from the log", reason=why))
            if self.units > self.covered:
                out.append(Note(NO_INDEX_ITEM, f"{self.units - self.covered} unit(s) have no index item (no index "
                                "file, a damaged one, or a message without keys): their store times were read from "
                                "the log", units=self.units - self.covered))
            if self.disagree:
                out.append(Note(INDEX_DISAGREES, f"the index files disagree with the log on {self.disagree} store "
                                "time(s): every store time was read from the log instead", times=self.disagree))
        return out


def _pct(part: int, whole: int) -> str:
    if not whole or part == whole:
        return "100%" if whole else "0%"
    return f"{min(100 * part / whole, 99.9):.1f}%"


class IndexTimes:
    """Store-time bounds of messages by commit-log offset, from the index files' items (format §5.6): an item
    holds its message's commit-log offset and timeDiff = (storeTimestamp - beginTimestamp) / 1000 clamped to
    [0, INT_MAX], so the time lies in [begin + 1000 * timeDiff, begin + 1000 * timeDiff + 999] (timeDiff 0: at
    most begin + 999; INT_MAX: at least its bound). Item 1 is the file's first message: the header's begin
    timestamp is its time exactly (its own timeDiff was taken against the file before). A damaged index file,
    or one whose header has no begin time, gives nothing."""

    def __init__(self, store):
        self.files = []
        self.skipped: list[tuple[str, str]] = []
        try:
            svc = store.index
        except (StoreError, OSError) as e:
            self.skipped.append(("", str(e)))
            return
        self.skipped += [(d.path.name, "damaged") for d in svc.damaged]
        for f in svc.files:
            if f.header.beginTimestamp > 0 and f.item_count > 1:
                self.files.append(f)

    def bounds(self, offs: np.ndarray, searched: Searched) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lo, hi, covered) for the commit-log offsets `offs` (any order, repeats allowed)."""
        u, inv = np.unique(offs, return_inverse=True)
        lo = np.full(len(u), _NO_TIME_LO, dtype=np.int64)
        hi = np.full(len(u), _NO_TIME_HI, dtype=np.int64)
        cov = np.zeros(len(u), dtype=bool)
        if len(u):
            first, last = u[0], u[-1]
            for f in self.files:
                h = f.header
                b = h.beginTimestamp
                items = f.items_array()
                for k in range(0, len(items), ITEM_CHUNK):
                    chunk = items[k:k + ITEM_CHUNK]
                    searched.index_bytes += len(chunk) * 20
                    phy = chunk["phy"].astype(np.int64)
                    td = chunk["time_diff"].astype(np.int64)
                    del chunk
                    keep = np.flatnonzero((phy >= first) & (phy <= last))
                    if not len(keep):
                        continue
                    phy, td = phy[keep], td[keep]
                    at = np.minimum(np.searchsorted(u, phy), len(u) - 1)
                    m = u[at] == phy
                    at, td, n = at[m], td[m], keep[m] + k + 1      # n: the item's number in the file
                    base = b + 1000 * td
                    ilo = np.where(td > 0, base, _NO_TIME_LO)
                    ihi = np.where(td < INT_MAX, base + 999, _NO_TIME_HI)
                    exact = (n == 1) & (phy[m] == h.beginPhyOffset)
                    ilo[exact] = ihi[exact] = b
                    np.maximum.at(lo, at, ilo)
                    np.minimum.at(hi, at, ihi)
                    cov[at] = True
                del items
        cov &= lo <= hi      # items of one offset that contradict each other (a stale index): no bound
        return lo[inv], hi[inv], cov[inv]


def plan_batch(store, batch, begin: int, end: int, index: "IndexTimes | None", searched: Searched,
               ranges: list, problems: list) -> None:
    """The QueueRange of every queue of the batch: each unit's store time bounded (index items, else the record's
    head), the units certainly in [begin, end] taken, and units of unknown time between the first and the last
    of them too (the walk reports why they cannot be read)."""
    if not batch:
        return
    allo = np.concatenate([b[4] for b in batch])
    if index is not None:
        lo_all, hi_all, cov_all = index.bounds(allo, searched)
    else:
        lo_all = np.full(len(allo), _NO_TIME_LO, np.int64)
        hi_all = np.full(len(allo), _NO_TIME_HI, np.int64)
        cov_all = np.zeros(len(allo), dtype=bool)
    cl_min = commitlog_min_offset(store)
    real = allo >= 0
    if real.any():
        ends = allo[real] + np.concatenate([b[5] for b in batch])[real]
        searched.log_bytes = max(searched.log_bytes, int(ends.max()) - max(cl_min, 0))
    pages: list[np.ndarray] = []   # the 4 KiB pages of the log whose heads were read (counted once per batch)
    at = 0
    for t, q, qmin, qmax, offs, sizes in batch:
        n = len(offs)
        lo, hi, cov = lo_all[at:at + n].copy(), hi_all[at:at + n].copy(), cov_all[at:at + n]
        at += n
        searched.units += n
        searched.covered += int(np.count_nonzero(cov))
        with QueueView(store, t, q, cl_min) as v:
            need = ~cov | ((lo < begin) & (hi >= begin)) | ((lo <= end) & (hi > end))
            sample = np.flatnonzero(cov)
            if len(sample) > SAMPLES:
                sample = sample[np.linspace(0, len(sample) - 1, SAMPLES).astype(np.int64)]
            need[sample] = True
            idx = np.flatnonzero(need)
            times = v.record_times(offs[idx], sizes[idx]) if len(idx) else np.empty(0, np.int64)
            searched.heads += len(idx)
            pages.append(np.unique(offs[idx][offs[idx] >= 0] // PAGE))
            known = times >= 0
            wrong = cov[idx] & known & ((times < lo[idx]) | (times > hi[idx]))
            if wrong.any():  # the index is not this store's truth: read every head of the queue
                searched.disagree += int(np.count_nonzero(wrong))
                idx = np.arange(n)
                times = v.record_times(offs, sizes)
                searched.heads += n
                pages.append(np.unique(offs[offs >= 0] // PAGE))
                known = times >= 0
                cov = np.zeros(n, dtype=bool)
            keep = cov[idx] & ~known      # no readable head: the index's bound still places the unit
            lo[idx] = np.where(known, times, np.where(keep, lo[idx], _NO_TIME_LO))
            hi[idx] = np.where(known, times, np.where(keep, hi[idx], _NO_TIME_HI))
            unknown = np.zeros(n, dtype=bool)
            unknown[idx[~known & ~keep]] = True
            # A unit with no readable head whose index bound neither lies inside [begin, end] nor misses it (an
            # open bound, a second straddling begin or end) cannot be placed: unknown, so that the walk visits
            # it when it lies among the range's messages and reports it, never drops it unsaid.
            held = idx[keep]
            inside = (lo[held] >= begin) & (hi[held] <= end)
            outside = (hi[held] < begin) | (lo[held] > end)
            unknown[held[~inside & ~outside]] = True
            take = ~unknown & (lo >= begin) & (hi <= end)
            hit = np.flatnonzero(take)
            r = QueueRange(t, q, qmin, qmax, qmin, qmin)
            if len(hit):
                a, z = int(hit[0]), int(hit[-1])
                while a > 0 and unknown[a - 1]:          # as the broker's search: unreadable units beside the
                    a -= 1                               # range are in it (the walk reports them)
                while z + 1 < n and unknown[z + 1] and z + 1 - int(hit[-1]) <= MAX_UNREADABLE_RUN:
                    z += 1
                visit = np.flatnonzero(take[a:z + 1] | unknown[a:z + 1]) + a
                if len(visit) == z - a + 1:
                    r.first, r.end = qmin + a, qmin + z + 1
                else:
                    r.extra = (visit + qmin).tolist()
                searched.unplaced += int(np.count_nonzero(unknown)) - int(np.count_nonzero(unknown[a:z + 1]))
            else:
                searched.unplaced += int(np.count_nonzero(unknown))
            k = np.flatnonzero(~unknown)
            if len(k) > 1:
                r.steps_back = int(np.count_nonzero(hi[k][1:] < lo[k][:-1]))  # certainly earlier than the one before
            searched.steps += r.steps_back
            ranges.append(r)
            problems += [p for p in v.problems if p not in problems]
    searched.head_pages += len(np.unique(np.concatenate(pages))) if pages else 0
