"""Consume queues checked against the commit log, and the file queues compared with the RocksDB queues of the same
store (format §11.4): `rmqtool verify-cq`.

verify_queues: every unit between a queue's min and max offsets (the broker's, from the files or the RocksDB
offset table) must point at a valid record of its topic and queue whose QUEUEOFFSET is the unit's queue offset,
whose size is the unit's size, whose tagsCode is the unit's (MessageRecord.tags_code: the tags' hash, or the
delivery time on a delay queue) and, in RocksDB, whose store time is the unit's storeTime (the 28-byte unit keeps
it: RocksDBConsumeQueueTable). Units of RocksDB's default column family whose key is not in the broker's layout,
and units missing between min and max, are problems too.

compare_queues: the file queues (consumequeue/<topic>/<queueId>/) against the RocksDB queues, as a double-writing
broker (CombineConsumeQueueStore) or a migration leaves them: the queues each side has, their min and max
offsets, and the units of the offsets both hold, field by field; the first differences are named.

Memory: one chunk of units (CHUNK_UNITS) of one queue at a time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from engine.broker.config.brokerconf import CQ_STORE_UNIT_SIZE
from engine.broker.commitlog.message import VALID
from engine.broker.consumequeue.queue import BLANK_UNIT_SIZE, ConsumeQueue
from engine.broker.consumequeue.rocksdb import CHUNK_UNITS, RocksDBQueue
from engine.broker.layout import StoreLayout, list_queue_dirs, CONSUMEQUEUE_DIR
from engine.broker.topics import require_topic
from engine.errors import InvalidArgumentError, StoreError
from engine.broker.consumequeue.view import commitlog_min_offset
from engine.findings import ERROR, WARNING, Finding

#: Problems named in full; the others are counted.
FIRST = 20


@dataclass
class CqProblem:
    topic: str
    queueId: int
    queueOffset: int | None
    commitLogOffset: int | None
    reason: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    def finding(self, where: str) -> Finding:
        """This problem located (engine.findings): the queue as `where`/<topic>/<queueId>, a unit at its queue
        offset x 20 (the byte offset in the queue's files taken as one stream, as doctor names units); an entry
        outside the broker's key layout at `where` itself."""
        if not self.topic:
            return Finding(CQ_ENTRY, WARNING, where, None, self.reason, BROKER_WILL[CQ_ENTRY])
        kind = CQ_UNIT if self.queueOffset is not None else CQ_QUEUE
        problem = self.reason if self.commitLogOffset is None else \
            f"unit at commit-log offset {self.commitLogOffset}: {self.reason}"
        return Finding(kind, ERROR, f"{where}/{self.topic}/{self.queueId}",
                       None if self.queueOffset is None else self.queueOffset * CQ_STORE_UNIT_SIZE, problem,
                       BROKER_WILL[kind])


#: The kinds of verify-cq's located problems, and what the broker does with each at its next start.
CQ_UNIT = "cq-unit"          # a unit that points at no record of its topic, queue, offset and size
CQ_QUEUE = "cq-queue"        # a queue that cannot be read, or units of a queue the offset table does not name
CQ_ENTRY = "cq-entry"        # a RocksDB entry outside the broker's key layout
BROKER_WILL = {
    CQ_UNIT: "serves the unit as it is: a consumer at that queue offset gets no message or another one",
    CQ_QUEUE: "serves the queue from what it can read of it (or not at all)",
    CQ_ENTRY: "never reads the entry (its keys are outside the layout the broker asks for)",
}


@dataclass
class CqVerifyReport:
    source: str                       # "file" or "rocksdb"
    queues: int = 0
    units: int = 0
    problemCount: int = 0
    firstProblems: list[CqProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    where: str = "consumequeue"       # the queues' root as findings name it (the RocksDB directory for rocksdb)

    def add(self, p: CqProblem, limit: int = FIRST) -> None:
        self.problemCount += 1
        if len(self.firstProblems) < limit:
            self.firstProblems.append(p)

    def as_dict(self) -> dict:
        return {"source": self.source, "queues": self.queues, "units": self.units, "problemCount": self.problemCount,
                "findings": [p.finding(self.where).as_dict() for p in self.firstProblems], "notes": self.notes}


def verify_queues(store, topic: str | None = None, source: str | None = None, check_crc: bool = True,
                  progress: Callable[[int, int], None] | None = None) -> CqVerifyReport:
    """Every unit of the queues the broker serves (or of `source`: "file", "rocksdb") against the commit log."""
    src = source or store.queue_source
    if src not in ("file", "rocksdb"):
        raise InvalidArgumentError(f"--source {src!r} is not file or rocksdb")
    if src == "rocksdb" and store.mode.rocksdb_cq_dir is None:
        raise InvalidArgumentError(f"{store.root} has no RocksDB consume queues (its mode: {store.mode.name})")
    rep = CqVerifyReport(src)
    if src == "rocksdb":
        rdb = store.rocksdb_queues
        rep.where = rdb.rel.rstrip("/")
        names = sorted(k for k, e in rdb.offset_table.items() if e.max is not None and (topic is None or k[0] == topic))
        if topic is not None and not names:
            require_topic(store.layout, topic)
        for p in rdb.listing().problems:
            rep.add(CqProblem("", -1, None, None, f"{p.path}: {p.reason}"))
        _stray_units(store, rep, topic)
    else:
        names = _file_queues(store, topic)
    cl_min = commitlog_min_offset(store)
    for i, (t, q) in enumerate(names):
        try:
            cq = store.rocksdb_queues.queue(t, q) if src == "rocksdb" else ConsumeQueue(store.root, t, q,
                                                                                        store.config.cq_file_size)
        except StoreError as e:
            rep.add(CqProblem(t, q, None, None, f"the queue cannot be read: {e}"))
            continue
        try:
            _verify_one(store, cq, cl_min, check_crc, rep)
        finally:
            cq.close()
        rep.queues += 1
        if progress:
            progress(i + 1, len(names))
    return rep


def _file_queues(store, topic: str | None) -> list[tuple[str, int]]:
    queues = StoreLayout(store.root).list_queues(files_only=True).queues  # the files whatever the broker reads
    if topic is not None:
        require_topic(store.layout, topic)
        queues = [k for k in queues if k[0] == topic]
    return sorted(queues)


def _stray_units(store, rep: CqVerifyReport, topic: str | None) -> None:
    """Default-column-family entries that are not units of the broker's layout, and units of queues the offset
    table does not name (a broker never serves them)."""
    rdb = store.rocksdb_queues
    seen: set = set()
    for t, q, offs, units in rdb.all_units():
        if t is None:
            rep.add(CqProblem("", -1, None, None, f"{rdb.rel} default column family: {units} (key {offs[:40]!r})"))
            continue
        if (topic is None or t == topic) and (t, q) not in rdb.offset_table and (t, q) not in seen:
            seen.add((t, q))
            rep.add(CqProblem(t, q, int(offs[0]), None, f"{len(offs)}+ unit(s) of a queue the offset table does not "
                              "name: the broker does not serve them"))


def _verify_one(store, cq, cl_min: int, check_crc: bool, rep: CqVerifyReport) -> None:
    rocks = isinstance(cq, RocksDBQueue)
    if rocks:
        b = cq.bounds(cl_min)
    else:
        b = store.broker_view.bounds(cq, cl_min)
    lo, hi = b.min_offset, b.max_offset
    cl = store.commitlog
    q = lo
    while q < hi:
        n = min(CHUNK_UNITS, hi - q)
        if rocks:
            offs, units, problems = cq.store.units(cq.topic, cq.queue_id, q, q + n)
            for p in problems:
                rep.add(CqProblem(cq.topic, cq.queue_id, None, None, p))
            have = np.zeros(n, dtype=bool)
            have[offs - q] = True
            for m in np.flatnonzero(~have).tolist()[:FIRST]:
                rep.add(CqProblem(cq.topic, cq.queue_id, q + m, None, "no unit in RocksDB between the queue's min "
                                  f"and max offsets [{lo}, {hi})"))
            rep.problemCount += max(0, int((~have).sum()) - FIRST)
            rows = [(int(o), u) for o, u in zip(offs.tolist(), units.tolist())]
        else:
            rows = []
            for k in range(q, q + n):
                u = cq.unit(k)
                if u is not None:
                    rows.append((k, (*u, None)))
        for k, (phy, size, tags, ts) in rows:
            rep.units += 1
            why = _check_unit(cl, cq.topic, cq.queue_id, k, phy, size, tags, ts, cl_min, check_crc)
            if why:
                rep.add(CqProblem(cq.topic, cq.queue_id, k, phy, why))
        q += n


def _check_unit(cl, topic, qid, k, phy, size, tags, ts, cl_min, check_crc) -> str | None:
    if size == BLANK_UNIT_SIZE and phy == 0:
        return None  # a blank pre-fill unit (pitfall 16) points at nothing
    if phy < 0 or size <= 0:
        return f"not a valid unit (offset {phy}, size {size})"
    if phy < cl_min:
        return f"points below the commit log's min offset {cl_min}: the record was deleted"
    r = cl.check_at(phy, check_crc=check_crc)
    if r.status != VALID:
        return f"no valid message at commit-log offset {phy}: {r.reason or r.status}"
    rec = r.record
    why = []
    if rec.topic != topic or rec.queue_id != qid:
        why.append(f"the record belongs to {rec.topic}/{rec.queue_id}")
    if rec.total_size != size:
        why.append(f"the record is {rec.total_size} bytes, the unit says {size}")
    if rec.queue_offset != k:
        why.append(f"the record's QUEUEOFFSET is {rec.queue_offset}")
    code = rec.tags_code()
    if code != tags:
        why.append(f"the record's tagsCode is {code}, the unit says {tags}")
    if ts is not None and rec.store_timestamp != ts:
        why.append(f"the record's store time is {rec.store_timestamp}, the unit says {ts}")
    return "; ".join(why) or None


# ------------------------------------------------------------------------------------------- compare


@dataclass
class CqDifference:
    topic: str
    queueId: int
    queueOffset: int | None
    field: str                        # "queue", "minOffset", "maxOffset", "offset", "size", "tagsCode"
    file: object
    rocksdb: object

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class CqCompareReport:
    queues: int = 0
    onlyInFiles: int = 0
    onlyInRocksdb: int = 0
    boundsDiffer: int = 0
    unitsCompared: int = 0
    unitsDiffer: int = 0
    firstDifferences: list[CqDifference] = field(default_factory=list)

    @property
    def differ(self) -> bool:
        return bool(self.onlyInFiles or self.onlyInRocksdb or self.boundsDiffer or self.unitsDiffer)

    def add(self, d: CqDifference, limit: int = FIRST) -> None:
        if len(self.firstDifferences) < limit:
            self.firstDifferences.append(d)

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "firstDifferences"}
        d["firstDifferences"] = [x.as_dict() for x in self.firstDifferences]
        d["same"] = not self.differ
        return d


def compare_queues(store, topic: str | None = None,
                   progress: Callable[[int, int], None] | None = None) -> CqCompareReport:
    """The file queues against the RocksDB queues of the same store, queue by queue and unit by unit."""
    if store.mode.rocksdb_cq_dir is None:
        raise InvalidArgumentError(f"{store.root} has no RocksDB consume queues to compare with its files "
                                   f"(its mode: {store.mode.name})")
    rdb = store.rocksdb_queues
    files_dir = store.root / CONSUMEQUEUE_DIR
    files = set(list_queue_dirs(files_dir, lambda p: str(p))[0]) if files_dir.is_dir() else set()
    rocks = {k for k, e in rdb.offset_table.items() if e.max is not None}
    if topic is not None:
        require_topic(store.layout, topic)
        files, rocks = {k for k in files if k[0] == topic}, {k for k in rocks if k[0] == topic}
    rep = CqCompareReport()
    cl_min = commitlog_min_offset(store)
    both = sorted(files | rocks)
    for i, (t, q) in enumerate(both):
        rep.queues += 1
        if (t, q) not in rocks:
            rep.onlyInFiles += 1
            rep.add(CqDifference(t, q, None, "queue", True, False))
            continue
        if (t, q) not in files:
            rep.onlyInRocksdb += 1
            rep.add(CqDifference(t, q, None, "queue", False, True))
            continue
        fq = ConsumeQueue(store.root, t, q, store.config.cq_file_size)
        rq = rdb.queue(t, q)
        try:
            _compare_one(store, fq, rq, cl_min, rep)
        finally:
            fq.close()
            rq.close()
        if progress:
            progress(i + 1, len(both))
    return rep


def _compare_one(store, fq: ConsumeQueue, rq: RocksDBQueue, cl_min: int, rep: CqCompareReport) -> None:
    fb, rb = store.broker_view.bounds(fq, cl_min), rq.bounds(cl_min)
    differ = False
    for name, a, b in (("minOffset", fb.min_offset, rb.min_offset), ("maxOffset", fb.max_offset, rb.max_offset)):
        if a != b:
            differ = True
            rep.add(CqDifference(fq.topic, fq.queue_id, None, name, a, b))
    rep.boundsDiffer += differ
    lo, hi = max(fb.min_offset, rb.min_offset), min(fb.max_offset, rb.max_offset)
    per_file = fq.file_size // CQ_STORE_UNIT_SIZE
    q = lo
    while q < hi:
        seg = fq.queue.find(q * CQ_STORE_UNIT_SIZE)
        n = min(hi - q, CHUNK_UNITS, (q // per_file + 1) * per_file - q)
        if seg is None:
            fu = np.zeros(n, dtype=[("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
        else:
            first = seg.start // CQ_STORE_UNIT_SIZE
            fu = fq.file_units(seg)[q - first:q - first + n]
            if len(fu) < n:
                fu = np.concatenate([fu, np.zeros(n - len(fu), dtype=fu.dtype)])
        ru = rq.rocksdb_units(q, q + n)
        rep.unitsCompared += n
        bad = np.zeros(n, dtype=bool)
        for f, name in (("offset", "offset"), ("size", "size"), ("tags_code", "tagsCode")):
            diff = fu[f].astype(np.int64) != ru[f].astype(np.int64)
            bad |= diff
            for m in np.flatnonzero(diff).tolist()[:FIRST - len(rep.firstDifferences)]:
                rep.add(CqDifference(fq.topic, fq.queue_id, q + m, name, int(fu[f][m]), int(ru[f][m])))
        rep.unitsDiffer += int(bad.sum())
        q += n
