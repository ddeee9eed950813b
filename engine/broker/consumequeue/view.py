"""Consume queues as an operator asks about them (mqadmin topicStatus, queryCq): the broker's min and max queue
offsets, store times, bytes, and each unit checked against the commit log (format §4, §8.3).

Read-only: queues are opened one at a time (ConsumeQueue, read-only maps) and closed after use, so a store with
thousands of queues never holds more than one queue's files open. Memory: one consume-queue file's view at a time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from engine.broker.config.brokerconf import CQ_STORE_UNIT_SIZE
from engine.broker.consumequeue.lmq import unit_named_by
from engine.broker.consumequeue.queue import BLANK_UNIT_SIZE
from engine.broker.layout import NameProblem
from engine.broker.topics import require_topic
from engine.broker.commitlog.message import (BORNHOST_V6_FLAG, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, VALID,
                                             MessageRecord)
from engine.errors import InvalidArgumentError, StoreError
from engine.findings import Note
from engine.broker.commitlog.placeholder import is_placeholder, placeholder_info, placeholder_note

#: A time search steps over at most this many consecutive unreadable units before it gives up on them.
MAX_UNREADABLE_RUN = 256
#: Units read at once by unit_chunks (memory: a few arrays of this many int64).
TIME_CHUNK = 1 << 16
#: Bytes of a record head that hold its store time with either born-host width (format §2: STORETIMESTAMP at 56,
#: or at 68 after an IPv6 born host).
TIME_HEAD = 76

OK, BLANK, EXPIRED, OUTSIDE, UNREADABLE, MISMATCH = "OK", "BLANK", "EXPIRED", "OUTSIDE", "UNREADABLE", "MISMATCH"
#: A unit in the files past the broker's max offset: the broker's start-up cuts it (logical truncation, format §4.5).
CUT = "CUT"
#: A unit whose record is rmqtool recover's placeholder for a damaged message (engine.ops.recovery.placeholder):
#: what a consumer of the queue receives there; no damage left to report.
PLACEHOLDER = "PLACEHOLDER"
#: Unit statuses that point outside the commit log.
POINTS_OUTSIDE = (EXPIRED, OUTSIDE)
#: The kinds of the notes a queue view makes (engine.findings.Note): a damaged file ends the queue early; a run of
#: units pointing at unreadable messages stopped a time search; a usable unit whose record is another queue's
#: (multi-dispatch, LMQ) or says another queue offset (pitfall 17).
QUEUE_DAMAGED, UNREADABLE_RUN = "queue-damaged", "unreadable-run"
MULTI_DISPATCHED, QUEUE_OFFSET_DIFFERS = "multi-dispatched", "queue-offset-differs"


def commitlog_min_offset(store) -> int:
    """CommitLog.getMinOffset: the first segment's start offset, -1 without segments."""
    cl = store.commitlog
    return cl.min_offset if cl.segments else -1


# ------------------------------------------------------------------------------------------- one queue


@dataclass
class UnitCheck:
    """One consume-queue unit and what it points at."""
    queue_offset: int
    commit_log_offset: int
    size: int
    tags_code: int
    status: str                      # OK, BLANK, EXPIRED, OUTSIDE, UNREADABLE, MISMATCH, CUT, PLACEHOLDER
    record: MessageRecord | None = None
    reason: str = ""
    #: the record is another queue's, multi-dispatched to this one (an %LMQ% unit): its QUEUEOFFSET is its own queue's
    multi_dispatch: bool = False

    def as_dict(self) -> dict:
        d = {"queueOffset": self.queue_offset, "commitLogOffset": self.commit_log_offset, "size": self.size,
             "tagsCode": self.tags_code, "status": self.status, "reason": self.reason or None, "message": None}
        r = self.record
        if r is not None:
            d["message"] = {"topic": r.topic, "queueId": r.queue_id, "queueOffset": r.queue_offset,
                            "commitLogOffset": r.physical_offset, "storeSize": r.total_size,
                            "storeTimestamp": r.store_timestamp, "keys": r.keys, "tags": r.tags,
                            "uniqKey": r.uniq_key, "msgId": r.msg_id}
        if self.status == PLACEHOLDER and r is not None:
            d["placeholder"] = placeholder_info(r)
        return d


class QueueView:
    """One consume queue of an open MessageStore, read as the broker serves it after its start-up: its min and
    max offsets are the broker's (engine.broker.consumequeue.offsets, logical truncation included; `units_end` is
    where the units in the files end, `cut` how many of them the broker cuts). Close it after use."""

    def __init__(self, store, topic: str, queue_id: int, cl_min: int | None = None):
        self.store, self.topic, self.queue_id = store, topic, queue_id
        self.cq = store.read_queue(topic, queue_id)
        self.cl_min = commitlog_min_offset(store) if cl_min is None else cl_min
        try:
            # RocksDB queues carry their min and max in the database (RocksDBConsumeQueueOffsetTable).
            b = self.cq.bounds(self.cl_min) if getattr(self.cq, "kind", "file") == "rocksdb" \
                else store.broker_view.bounds(self.cq, self.cl_min)
        except BaseException:
            self.cq.close()
            raise
        self.min_offset, self.max_offset, self.units_end = b.min_offset, b.max_offset, b.units_end
        self.problems: list[str] = [Note(QUEUE_DAMAGED, self.cq.damage, topic=self.topic, queueId=self.queue_id)] \
            if self.cq.damage else []

    @property
    def cut(self) -> int:
        """Units in the files past the broker's max offset (logical truncation: not messages)."""
        return self.units_end - self.max_offset

    def close(self) -> None:
        self.cq.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def name(self) -> str:
        return f"{self.topic}/{self.queue_id}"

    def unit(self, q: int):
        return self.cq.unit(q) if 0 <= q < self.max_offset else None

    def check(self, q: int, check_crc: bool = False) -> UnitCheck:
        """The unit at queue offset q and the record it points at, with the reason when it cannot be used."""
        u = self.unit(q)
        if u is None and self.max_offset <= q < self.units_end:
            u = self.cq.unit(q)
            log_end = self.store.broker_view.log_end
            return UnitCheck(q, u[0], u[1], u[2], CUT, reason=f"past the broker's max offset {self.max_offset}: "
                             f"the commit log ends at {log_end.end} for a broker (logical truncation)")
        if u is None:
            return UnitCheck(q, -1, 0, 0, OUTSIDE, reason=f"queue offset {q} is outside the queue [0, {self.max_offset})")
        off, size, tags = u
        c = UnitCheck(q, off, size, tags, OK)
        if size == BLANK_UNIT_SIZE and off == 0:
            c.status, c.reason = BLANK, "blank pre-fill unit (the queue starts later; pitfall 16)"
            return c
        cl = self.store.commitlog
        end = cl.max_file_offset()
        if off < 0 or size <= 0:
            c.status, c.reason = OUTSIDE, f"not a valid unit (offset {off}, size {size})"
            return c
        if off < self.cl_min:
            c.status = EXPIRED
            c.reason = f"points below the commit log's min offset {self.cl_min}: the record was deleted"
            return c
        if off + size > end:
            c.status, c.reason = OUTSIDE, f"points past the end of the commit-log files ({end})"
            return c
        r = cl.check_at(off, check_crc=check_crc)
        if r.status != VALID:
            c.status, c.reason = UNREADABLE, f"no valid message at commit-log offset {off}: {r.reason or r.status}"
            return c
        rec = c.record = r.record
        if is_placeholder(rec):
            c.status, c.reason = PLACEHOLDER, placeholder_note(rec)
            return c
        why = []
        multi = False
        if rec.topic != self.topic or rec.queue_id != self.queue_id:
            # an %LMQ% (multi-dispatch) unit points at a record of another queue that names this one
            multi = unit_named_by(rec.topic, rec.queue_id, rec.properties, self.topic, self.queue_id, q)
            if not multi:
                why.append(f"the record belongs to {rec.topic}/{rec.queue_id}")
        if rec.total_size != size:
            why.append(f"the record is {rec.total_size} bytes, the unit says {size}")
        if why:
            c.status, c.reason = MISMATCH, "; ".join(why)
        elif multi:
            c.multi_dispatch, c.reason = True, Note(MULTI_DISPATCHED, f"multi-dispatched from {rec.topic}/"
                                                    f"{rec.queue_id}", fromTopic=rec.topic, fromQueueId=rec.queue_id)
        elif rec.queue_offset != q:
            c.reason = Note(QUEUE_OFFSET_DIFFERS, f"the record's QUEUEOFFSET is {rec.queue_offset} (pitfall 17)",
                            recordQueueOffset=rec.queue_offset)
        return c

    def store_time(self, q: int) -> int | None:
        """The store timestamp of the message at queue offset q (CommitLog.pickupStoreTimestamp), or None."""
        c = self.check(q)
        return c.record.store_timestamp if c.status == OK else None

    def units_bytes(self, lo: int, hi: int) -> int:
        """The sum of the unit sizes of queue offsets [lo, hi): the bytes those messages take in the commit log."""
        total = 0
        for seg in self.cq.queue.segments:
            first = seg.start // CQ_STORE_UNIT_SIZE
            a, b = max(lo, first), min(hi, first + self.cq.file_size // CQ_STORE_UNIT_SIZE)
            if a < b:
                sizes = self.cq.file_units(seg)["size"][a - first:b - first]
                total += int(sizes[sizes != BLANK_UNIT_SIZE].astype(np.int64).sum())
        return total

    # -- store times in bulk
    def unit_chunks(self, lo: int, hi: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """(first queue offset, commit-log offsets, sizes) of the units [lo, hi), TIME_CHUNK units at a time, read
        from the consume queue only (offset -1 where no file holds the unit). A RocksDB queue is read unit by unit."""
        files = getattr(self.cq, "queue", None)
        per_file = max(self.cq.file_size // CQ_STORE_UNIT_SIZE, 1) if files is not None else TIME_CHUNK
        q = lo
        while q < hi:
            seg = files.find(q * CQ_STORE_UNIT_SIZE) if files is not None else None
            first = q - q % per_file if seg is None else seg.start // CQ_STORE_UNIT_SIZE
            n = min(hi, first + per_file, q + TIME_CHUNK) - q
            offs = np.full(n, -1, dtype=np.int64)
            sizes = np.zeros(n, dtype=np.int64)
            if seg is not None:
                units = self.cq.units_view(seg)[q - first:q - first + n]
                k = len(units)
                offs[:k], sizes[:k] = units["offset"], units["size"]
                del units
            elif files is None:
                for i in range(n):
                    u = self.cq.unit(q + i)
                    if u is not None:
                        offs[i], sizes[i] = u[0], u[1]
            yield q, offs, sizes
            q += n

    def record_times(self, offs: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """The store times of the records at commit-log offsets `offs` of the given sizes, from their heads (-1
        where no record of that size is)."""
        cl = self.store.commitlog
        segs = cl.segments
        out = np.full(len(offs), -1, dtype=np.int64)
        if not segs or not len(offs):
            return out
        starts = np.array([sg.start for sg in segs], dtype=np.int64)
        idx = np.searchsorted(starts, offs, side="right") - 1
        for i in np.unique(idx[idx >= 0]).tolist():
            sg = segs[i]
            buf = cl.queue.buffer(sg)
            sel = np.flatnonzero((idx == i) & (offs >= self.cl_min))
            pos = offs[sel] - sg.start
            ok = (pos >= 0) & (pos + TIME_HEAD <= len(buf))
            sel, pos = sel[ok], pos[ok]
            if not len(sel):
                continue
            i4 = np.ndarray((len(buf) - 3,), dtype=">i4", buffer=buf, strides=(1,))
            i8 = np.ndarray((len(buf) - 7,), dtype=">i8", buffer=buf, strides=(1,))
            total, magic, flag = i4[pos], i4[pos + 4], i4[pos + 36]
            ts = np.where(flag & BORNHOST_V6_FLAG, i8[pos + 68], i8[pos + 56])
            del i4, i8   # no view of the mapping may outlive the call
            good = np.isin(magic, (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2)) & (total == sizes[sel])
            out[sel[good]] = ts[good]
        return out

    # -- time search (ConsumeQueue.getOffsetInQueueByTime)
    def lower_bound(self, ts: int) -> int:
        """BoundaryType.LOWER: the first queue offset whose message was stored at or after ts (max when none)."""
        return self._bisect(lambda t: t >= ts)

    def upper_bound(self, ts: int) -> int:
        """One past BoundaryType.UPPER: the first queue offset whose message was stored after ts. Unreadable
        units right after the range are kept in it (their time is unknown), so that a walk reports them."""
        q = self._bisect(lambda t: t > ts)
        run = 0
        while q < self.max_offset and run < MAX_UNREADABLE_RUN and self.store_time(q) is None:
            q += 1
            run += 1
        return q

    def _bisect(self, pred: Callable[[int], bool]) -> int:
        """The first q in [min, max) whose store time satisfies pred. Store times grow with the queue offset (the
        broker's search assumes it too); an unreadable unit takes the time of the next readable one."""
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            q, t = self._readable_from(mid, hi)
            if t is None or pred(t):
                hi = mid
            else:
                lo = q + 1
        return lo

    def _readable_from(self, q: int, hi: int) -> tuple[int, int | None]:
        stop = min(hi, q + MAX_UNREADABLE_RUN)
        for p in range(q, stop):
            t = self.store_time(p)
            if t is not None:
                return p, t
        if stop < hi:
            self.problems.append(Note(UNREADABLE_RUN, f"{self.name}: {MAX_UNREADABLE_RUN} units from queue offset {q} "
                                      "point at unreadable messages; the time search took them as later than the "
                                      "range", topic=self.topic, queueId=self.queue_id, queueOffset=q,
                                      units=MAX_UNREADABLE_RUN))
        return q, None


# ------------------------------------------------------------------------------------------- queue status


@dataclass
class QueueStatus:
    topic: str
    queueId: int
    minOffset: int | None            # None: the queue's files cannot be read (see problems)
    maxOffset: int | None
    messages: int | None
    firstStoreTimestamp: int | None
    lastStoreTimestamp: int | None
    bytes: int | None
    problems: list[str] = field(default_factory=list)
    truncatedUnits: int = 0          # units in the files past maxOffset: the broker's start-up cuts them

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class QueuesReport:
    commitLogMinOffset: int
    queues: list[QueueStatus] = field(default_factory=list)
    skipped: list[NameProblem] = field(default_factory=list)
    truncation: dict | None = None   # logical_truncation(store): where the broker's start-up cuts, if it cuts

    @property
    def problem_count(self) -> int:
        return sum(len(q.problems) for q in self.queues)

    def as_dict(self) -> dict:
        return {"commitLogMinOffset": self.commitLogMinOffset, "queues": [q.as_dict() for q in self.queues],
                "skipped": [p.as_dict() for p in self.skipped], "logicalTruncation": self.truncation}


def logical_truncation(store) -> dict | None:
    """Where a broker starting on the store ends its commit log, when that cut consume-queue units of the queues
    read so far through the store (QueueView): {commitLogEnd, reason, startSegment, mode, cutUnits, queues,
    note}; None when nothing was cut. The readers print `note` on stderr."""
    e = store.broker_view.log_end
    note = e.note()
    if note is None:
        return None
    return {"commitLogEnd": e.end, "reason": e.reason, "startSegment": e.start_segment, "mode": e.mode,
            "cutUnits": sum(e.cut_queues.values()),
            "queues": [{"topic": t, "queueId": q, "cutUnits": n} for (t, q), n in sorted(e.cut_queues.items())],
            "note": note}


def select_queues(store, topic: str | None = None, queue_id: int | None = None) -> tuple[list, list[NameProblem]]:
    """The (topic, queueId) pairs of consumequeue/ (optionally one topic / one queue), and the entries skipped.
    An unknown topic or queue is an InvalidArgumentError naming what exists."""
    listing = store.layout.list_queues()
    queues = sorted(listing.queues)
    if topic is not None:
        require_topic(store.layout, topic)  # a topic the store does not have: exit 2 naming the ones it has
        queues = [(t, q) for t, q in queues if t == topic]
        if not queues and queue_id is None:
            return [], []  # configured in topics.json, never written: no queue, an empty answer
    if queue_id is not None:
        ids = [q for _, q in queues]
        if queue_id not in ids:
            raise InvalidArgumentError(f"topic {topic!r} has no queue {queue_id} (its queues: "
                                       f"{', '.join(map(str, ids))})")
        queues = [(topic, queue_id)]
    return queues, [p for p in listing.problems if topic is None or p.path.split("/")[1:2] == [topic]]


def queue_status(store, topic: str | None = None, progress: Callable[[int, int], None] | None = None) -> QueuesReport:
    """topicStatus for every queue (or one topic's): min/max queue offset, first/last store time, bytes.

    Reads two records and every unit between min and max (20 bytes per message) of each queue.
    """
    queues, skipped = select_queues(store, topic)
    rep = QueuesReport(commitlog_min_offset(store), skipped=skipped)
    for i, (t, q) in enumerate(queues):
        try:
            rep.queues.append(_status(store, t, q, rep.commitLogMinOffset))
        except StoreError as e:   # one damaged queue does not hide the others
            rep.queues.append(QueueStatus(t, q, None, None, None, None, None, None, [f"cannot be read: {e}"]))
        if progress:
            progress(i + 1, len(queues))
    rep.truncation = logical_truncation(store)
    return rep


def _status(store, topic: str, queue_id: int, cl_min: int) -> QueueStatus:
    with QueueView(store, topic, queue_id, cl_min) as v:
        st = QueueStatus(topic, queue_id, v.min_offset, v.max_offset, v.max_offset - v.min_offset, None, None, 0,
                         truncatedUnits=v.cut)
        st.problems += v.problems  # a damaged file that ends the queue early
        if v.max_offset > v.min_offset:
            for attr, at in (("firstStoreTimestamp", v.min_offset), ("lastStoreTimestamp", v.max_offset - 1)):
                c = v.check(at)
                if c.status == OK:
                    setattr(st, attr, c.record.store_timestamp)
                else:
                    st.problems.append(f"queue offset {at}: {c.status.lower()}: {c.reason}")
            st.bytes = v.units_bytes(v.min_offset, v.max_offset)
    return st


# ------------------------------------------------------------------------------------------- dump-cq


@dataclass
class CqDump:
    """dump_cq's answer: the queue's bounds, then the units one by one (iterate `units`)."""
    topic: str
    queueId: int
    minOffset: int
    maxOffset: int
    firstUnit: int                   # the first unit the files hold (below minOffset: expired or pre-fill)
    start: int
    count: int
    units: Iterator[UnitCheck]
    unitsEnd: int = 0                # where the units in the files end (above maxOffset: the broker cuts them)
    note: str | None = None          # the logical truncation, when the broker's start-up cuts units
    damage: list[str] = field(default_factory=list)  # a damaged file that ends the queue early (exit 3)

    def header(self) -> dict:
        return {"topic": self.topic, "queueId": self.queueId, "minOffset": self.minOffset,
                "maxOffset": self.maxOffset, "firstUnitInFiles": self.firstUnit, "unitsEndInFiles": self.unitsEnd,
                "start": self.start, "count": self.count}


def dump_cq(store, topic: str, queue_id: int, queue_offset: int | None = None, count: int = 10,
            check_crc: bool = True) -> CqDump:
    """queryCq: `count` units from `queue_offset` (default: the queue's min offset), each with the message it
    points at or why it cannot be read, up to the broker's max offset; units the files hold past it (the broker's
    start-up cuts them: logical truncation) are shown as CUT when asked for from there. The caller iterates .units
    (streamed) and closes nothing."""
    select_queues(store, topic, queue_id)
    view = QueueView(store, topic, queue_id)
    segs = view.cq.queue.segments
    first_unit = min(segs[0].start // CQ_STORE_UNIT_SIZE, view.max_offset) if segs else 0
    start = view.min_offset if queue_offset is None else queue_offset
    last = max(view.max_offset, view.units_end)
    if start < first_unit or start > last:
        view.close()
        raise InvalidArgumentError(f"--queue-offset {start} is outside {topic}/{queue_id}: its files hold queue "
                                   f"offsets [{first_unit}, {last}) (the broker's min offset is {view.min_offset}, "
                                   f"its max offset {view.max_offset})")
    n = min(count, (view.max_offset if start < view.max_offset else last) - start)
    cut = logical_truncation(store)

    def units() -> Iterator[UnitCheck]:
        try:
            for q in range(start, start + n):
                yield view.check(q, check_crc=check_crc)
        finally:
            view.close()

    return CqDump(topic, queue_id, view.min_offset, view.max_offset, first_unit, start, n, units(), view.units_end,
                  cut["note"] if cut else None, list(view.problems))
