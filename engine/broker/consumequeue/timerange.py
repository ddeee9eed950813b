"""Messages of a topic by store time (mqadmin printMsg / printMsgByQueue), found through the consume queues.

Per queue, two binary searches on store time (ConsumeQueue.getOffsetInQueueByTime, LOWER for the begin and
UPPER for the end) give the queue offsets whose messages were stored in [begin, end]; only those units are read,
never the whole commit log. The searches assume store times grow along the queue, which a broker's clock stepping
back breaks: so the store time of every message of the queue is read once as well (8 bytes of each record head,
TIME_CHUNK units at a time: engine.broker.consumequeue.view store_time_chunks), and messages stored in the range that lie outside
the searched offsets are visited too, in queue order, with a note naming the queue. A subExpression filters by tag as a broker and its client do: the unit's tagsCode
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
from engine.java.lang import java_string_hash
from engine.broker.consumequeue.queue import MAX_EXT_ADDR
from engine.broker.consumequeue.view import OK, PLACEHOLDER, QueueView, commitlog_min_offset, logical_truncation, select_queues

SUB_ALL = "*"


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
            if c.status == PLACEHOLDER:  # what a consumer receives there: shown, with its note
                c.status = OK
            if c.status != OK:
                self.problems.append(f"{v.name} queue offset {q}: {c.status.lower()}: {c.reason}")
                continue
            rec = c.record
            if not self.begin <= rec.store_timestamp <= self.end or not self.tag_filter.match_message(rec.tags):
                self.filtered += 1
                continue
            yield Found(r.queueId, q, rec, c.reason)


def scan_time_range(store, topic: str, begin: int, end: int, queue_id: int | None = None,
                    tags: str | None = None, check_crc: bool = True) -> TimeRangeScan:
    """printMsg: plan the queue-offset range of every queue of `topic` (or of one queue) for store times in
    [begin, end] (both inclusive), two binary searches per queue; iterate the result for the messages."""
    if begin > end:
        raise InvalidArgumentError(f"the time range is empty: begin {begin} is after end {end}")
    tag_filter = TagFilter.parse(tags)
    queues, _ = select_queues(store, topic, queue_id)
    cl_min = commitlog_min_offset(store)
    ranges, problems = [], []
    for t, q in queues:
        try:
            with QueueView(store, t, q, cl_min) as v:
                first = v.lower_bound(begin)
                stop = max(first, v.upper_bound(end))
                r = QueueRange(t, q, v.min_offset, v.max_offset, first, stop)
                r.extra, r.steps_back = out_of_order(v, begin, end, first, stop)
                ranges.append(r)
                problems += v.problems
        except StoreError as e:   # one damaged queue does not hide the others' messages
            problems.append(f"{t}/{q}: cannot be read: {e}")
    cut = logical_truncation(store)
    notes = [cut["note"]] if cut else []
    notes += [f"{r.topic}/{r.queueId}: store times go back at {r.steps_back} place(s) along the queue (a broker "
              f"clock stepped back): {len(r.extra)} message(s) stored in the range lie outside the offsets the "
              "broker's time search finds and were found by reading every message's store time"
              for r in ranges if r.steps_back]
    return TimeRangeScan(store, topic, begin, end, tag_filter, ranges, check_crc, problems, notes)


def out_of_order(v: QueueView, begin: int, end: int, first: int, stop: int) -> tuple[list[int], int]:
    """(queue offsets outside [first, stop) whose messages were stored in [begin, end], places where the store
    time goes back): one pass over the queue's store times (unreadable units are skipped: the walk of the range
    reports those it meets). Both are empty when the times never go back, which makes the binary searches exact."""
    extra: list[int] = []
    steps = 0
    prev = None
    for q0, times in v.store_time_chunks(v.min_offset, v.max_offset):
        known = times >= 0
        t = times[known]
        if len(t):
            steps += int(np.count_nonzero(t[1:] < t[:-1])) + int(prev is not None and t[0] < prev)
            prev = int(t[-1])
        qs = q0 + np.flatnonzero(known & (times >= begin) & (times <= end))
        extra += qs[(qs < first) | (qs >= stop)].tolist()
    return extra, steps
