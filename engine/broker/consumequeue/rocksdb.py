"""RocksDB consume queues (format §11.4): a storeType=defaultRocksDB broker keeps its consume queues in one RocksDB
database (RocksDBConsumeQueueStore; <root>/consumequeue/ at the golden commit, consumequeue_r/ in newer releases)
with two column families (ConsumeQueueRocksDBStorage):

* default (RocksDBConsumeQueueTable): one entry a unit.
  key   = topicLen:int32 0x01 topic 0x01 queueId:int32 0x01 cqOffset:int64      (big-endian)
  value = phyOffset:int64 size:int32 tagsCode:int64 storeTime:int64            (28 bytes)
* offset (RocksDBConsumeQueueOffsetTable): a queue's max and min, and one checkpoint.
  key   = topicLen:int32 0x01 topic 0x01 "max"|"min" 0x01 queueId:int32
  value = phyOffset:int64 cqOffset:int64 (the last unit dispatched, or the first one kept)
  CHECKPOINT_TOPIC/max/0 holds an 8-byte value: the commit-log offset dispatched so far.

The queue offsets a broker serves: max = the "max" entry's cqOffset + 1 (0 without one:
RocksDBConsumeQueueStore.getMaxOffsetInQueue); min = the "min" entry's cqOffset while the unit it names points at
or above the commit log's min offset, else the first unit at or above it, found by the broker's binary search
(RocksDBConsumeQueueOffsetTable.getMinCqOffset, correctMinCqOffset, RocksDBConsumeQueueTable.binarySearchInCQ).

RocksDBQueue offers what ConsumeQueue offers its readers (unit, file_units over pseudo files of CHUNK_UNITS
units, max_offset_in_queue), so QueueView and every command over it read either kind; units are decoded in bulk
with numpy from one range scan a chunk.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.broker.config.brokerconf import CQ_STORE_UNIT_SIZE
from engine.broker.consumequeue.offsets import QueueBounds
from engine.broker.consumequeue.queue import UNIT_DTYPE
from engine.broker.layout import NameProblem, stored_topic_problem
from engine.broker.rocksdbread import ReadOnlyDB

#: AbstractRocksDBStorage.CTRL_0/1/2: the separators of the keys and the ends of a range delete.
CTRL_0, CTRL_1, CTRL_2 = b"\x00", b"\x01", b"\x02"
#: ConsumeQueueRocksDBStorage.OFFSET_COLUMN_FAMILY; the units are in RocksDB's default column family.
OFFSET_CF = "offset"
DEFAULT_CF = "default"
MAX_BYTES, MIN_BYTES = b"max", b"min"
#: TopicValidator.RMQ_SYS_ROCKSDB_OFFSET_TOPIC: the offset-table entry holding the dispatched commit-log offset.
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"
#: RocksDBConsumeQueueTable.CQ_UNIT_SIZE.
ROCKSDB_UNIT_SIZE = 28
ROCKSDB_UNIT_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8"), ("store_time", ">i8")])
OFFSET_VALUE = struct.Struct(">qq")
#: Units read (and held) at once: the pseudo file size of a RocksDB queue, 6,000,000 bytes as a file queue's.
CHUNK_UNITS = 300_000


def cq_key(topic: str, queue_id: int, cq_offset: int) -> bytes:
    """RocksDBConsumeQueueTable.buildCQKeyByteBuffer."""
    t = topic.encode()
    return struct.pack(">i", len(t)) + CTRL_1 + t + CTRL_1 + struct.pack(">i", queue_id) + CTRL_1 + \
        struct.pack(">q", cq_offset)


def cq_prefix(topic: str, queue_id: int) -> bytes:
    """The key prefix of one queue's units (the start of the broker's range delete, buildDeleteCQKey, without
    its CTRL_0)."""
    t = topic.encode()
    return struct.pack(">i", len(t)) + CTRL_1 + t + CTRL_1 + struct.pack(">i", queue_id) + CTRL_1


def cq_value(phy_offset: int, size: int, tags_code: int, store_time: int) -> bytes:
    """RocksDBConsumeQueueTable.buildCQValueByteBuffer: the 28-byte unit."""
    return struct.pack(">qiqq", phy_offset, size, tags_code, store_time)


def offset_key(topic: str, queue_id: int, is_max: bool) -> bytes:
    """RocksDBConsumeQueueOffsetTable.buildOffsetKeyByteBuffer."""
    t = topic.encode()
    return struct.pack(">i", len(t)) + CTRL_1 + t + CTRL_1 + (MAX_BYTES if is_max else MIN_BYTES) + CTRL_1 + \
        struct.pack(">i", queue_id)


def offset_value(phy_offset: int, cq_offset: int) -> bytes:
    return OFFSET_VALUE.pack(phy_offset, cq_offset)


def decode_cq_key(key: bytes) -> tuple[str, int, int] | None:
    """(topic, queueId, cqOffset) of a unit key, None when the key is not in the broker's layout."""
    if len(key) < 19:
        return None
    n = struct.unpack_from(">i", key)[0]
    if n < 0 or len(key) != 4 + 1 + n + 1 + 4 + 1 + 8 or key[4:5] != CTRL_1 or key[5 + n:6 + n] != CTRL_1 \
            or key[10 + n:11 + n] != CTRL_1:
        return None
    try:
        topic = key[5:5 + n].decode()
    except UnicodeDecodeError:
        return None
    qid, off = struct.unpack_from(">iq", key, 6 + n)[0], struct.unpack_from(">q", key, 11 + n)[0]
    return topic, qid, off


def decode_offset_key(key: bytes) -> tuple[str, str, int] | None:
    """(topic, "max"|"min", queueId) of an offset-table key, None when it is not in the broker's layout."""
    if len(key) < 14:
        return None
    n = struct.unpack_from(">i", key)[0]
    if n < 0 or len(key) != 4 + 1 + n + 1 + 3 + 1 + 4 or key[4:5] != CTRL_1 or key[5 + n:6 + n] != CTRL_1:
        return None
    kind = key[6 + n:9 + n]
    if kind not in (MAX_BYTES, MIN_BYTES) or key[9 + n:10 + n] != CTRL_1:
        return None
    try:
        topic = key[5:5 + n].decode()
    except UnicodeDecodeError:
        return None
    return topic, kind.decode(), struct.unpack_from(">i", key, 10 + n)[0]


@dataclass
class OffsetEntry:
    phy_offset: int
    cq_offset: int


@dataclass
class QueueEntries:
    """A queue's "max" and "min" entries of the offset table."""
    max: OffsetEntry | None = None
    min: OffsetEntry | None = None


@dataclass
class RocksDBListing:
    queues: list[tuple[str, int]] = field(default_factory=list)
    problems: list[NameProblem] = field(default_factory=list)


class RocksDBConsumeQueueStore:
    """The consume-queue database of a store, read-only (engine.broker.rocksdbread). Close it after use."""

    def __init__(self, path: Path, rel: str = "consumequeue/"):
        self.path = Path(path)
        self.rel = rel
        self.db = ReadOnlyDB(self.path)
        self._table: dict[tuple[str, int], QueueEntries] | None = None
        self._problems: list[NameProblem] = []
        self.checkpoint: int | None = None

    def close(self) -> None:
        self.db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the offset table
    @property
    def offset_table(self) -> dict[tuple[str, int], QueueEntries]:
        """Every queue's max and min entries (RocksDBConsumeQueueOffsetTable.forEach), read once."""
        if self._table is None:
            table: dict[tuple[str, int], QueueEntries] = {}
            for k, v in self.db.items(OFFSET_CF):
                d = decode_offset_key(k)
                if d is None:
                    self._problems.append(NameProblem(f"{self.rel}[offset] {k[:40]!r}",
                                                      "an offset-table key not in the broker's layout"))
                    continue
                topic, kind, qid = d
                if topic == CHECKPOINT_TOPIC and len(v) == 8:
                    self.checkpoint = struct.unpack(">q", v)[0]
                    continue
                if len(v) != OFFSET_VALUE.size:
                    self._problems.append(NameProblem(f"{self.rel}[offset] {topic}/{kind}/{qid}",
                                                      f"a {len(v)}-byte value, not 16 (the broker skips it)"))
                    continue
                e = OffsetEntry(*OFFSET_VALUE.unpack(v))
                setattr(table.setdefault((topic, qid), QueueEntries()), kind, e)
            self._table = table
        return self._table

    def listing(self) -> RocksDBListing:
        """The queues the offset table names (as the broker's scanAllQueueIdInTopic finds them), and the entries
        that are not queues a broker would serve."""
        out = RocksDBListing()
        # A broker writes a "min" entry for every queue of every topic at start-up, (0, 0) for a queue that never
        # held a unit; the queues with units have a "max" entry (what scanAllQueueIdInTopic lists).
        for (topic, qid) in sorted(k for k, e in self.offset_table.items() if e.max is not None):
            why = stored_topic_problem(topic)
            if why:
                out.problems.append(NameProblem(f"{self.rel}[offset] {topic}/{qid}", f"not a valid topic name: {why}"))
            elif qid < 0:
                out.problems.append(NameProblem(f"{self.rel}[offset] {topic}/{qid}", "a negative queue id"))
            else:
                out.queues.append((topic, qid))
        out.problems[:0] = self._problems
        return out

    # -- units
    def units(self, topic: str, queue_id: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """The units stored at queue offsets [lo, hi): (their queue offsets, ROCKSDB_UNIT_DTYPE rows, problems),
        decoded in bulk from one range scan."""
        if hi <= lo:
            return np.empty(0, np.int64), np.empty(0, ROCKSDB_UNIT_DTYPE), []
        keys, vals, problems = [], [], []
        for k, v in self.db.items(DEFAULT_CF, cq_key(topic, queue_id, lo), cq_key(topic, queue_id, hi)):
            if len(v) != ROCKSDB_UNIT_SIZE or len(k) != len(cq_prefix(topic, queue_id)) + 8:
                problems.append(f"{topic}/{queue_id}: an entry of {len(v)} bytes under key {k!r}: not a unit")
                continue
            keys.append(k[-8:])
            vals.append(v)
        offs = np.frombuffer(b"".join(keys), dtype=">i8").astype(np.int64)
        units = np.frombuffer(b"".join(vals), dtype=ROCKSDB_UNIT_DTYPE)
        return offs, units, problems

    def first_unit_offset(self, topic: str, queue_id: int) -> int | None:
        """The queue offset of the queue's first stored unit (one seek), None when it has none."""
        pre = cq_prefix(topic, queue_id)
        for k, _v in self.db.items(DEFAULT_CF, pre + struct.pack(">q", 0), pre + b"\x7f" + b"\xff" * 7):
            return struct.unpack(">q", k[-8:])[0]
        return None

    def get_unit(self, topic: str, queue_id: int, q: int) -> tuple[int, int, int, int] | None:
        """RocksDBConsumeQueueTable.getCQInKV: (phyOffset, size, tagsCode, storeTime) or None."""
        v = self.db.get(DEFAULT_CF, cq_key(topic, queue_id, q))
        if v is None or len(v) != ROCKSDB_UNIT_SIZE:
            return None
        return struct.unpack(">qiqq", v)

    def queue(self, topic: str, queue_id: int) -> "RocksDBQueue":
        return RocksDBQueue(self, topic, queue_id)

    def all_units(self):
        """Every unit of the database in key order, a chunk at a time: (topic, queueId, queue offsets, units).
        Keys not in the broker's layout are yielded as problems: (None, None, key, reason)."""
        cur, offs, vals = None, [], []
        for k, v in self.db.items(DEFAULT_CF):
            d = decode_cq_key(k)
            if d is None or len(v) != ROCKSDB_UNIT_SIZE:
                yield None, None, k, ("a key not in the broker's layout" if d is None
                                      else f"a {len(v)}-byte value, not {ROCKSDB_UNIT_SIZE}")
                continue
            tq = d[:2]
            if tq != cur or len(offs) >= CHUNK_UNITS:
                if cur is not None and offs:
                    yield cur[0], cur[1], np.array(offs, np.int64), np.frombuffer(b"".join(vals), ROCKSDB_UNIT_DTYPE)
                cur, offs, vals = tq, [], []
            offs.append(d[2])
            vals.append(v)
        if cur is not None and offs:
            yield cur[0], cur[1], np.array(offs, np.int64), np.frombuffer(b"".join(vals), ROCKSDB_UNIT_DTYPE)


def to_file_units(units: np.ndarray) -> np.ndarray:
    """RocksDB units as the 20-byte units of a file queue (UNIT_DTYPE: offset, size, tags_code)."""
    out = np.zeros(len(units), dtype=UNIT_DTYPE)
    for f in ("offset", "size", "tags_code"):
        out[f] = units[f]
    return out


@dataclass(frozen=True)
class PseudoSegment:
    """CHUNK_UNITS queue offsets of a RocksDB queue, standing where a consume-queue file stands for readers."""
    start: int               # logical byte position (queue offset * 20), as a file's name
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size


class _PseudoQueue:
    """The segments of a RocksDB queue as ConsumeQueue.queue offers them (segments, find)."""

    def __init__(self, segments: list[PseudoSegment]):
        self.segments = segments
        self.problems: list = []

    def find(self, logical: int) -> PseudoSegment | None:
        for s in self.segments:
            if s.start <= logical < s.end:
                return s
        return None

    def close(self) -> None:
        pass


class RocksDBQueue:
    """One topic-queue of a RocksDB consume-queue database, read as ConsumeQueue is read. Units below the first
    stored one or missing read as zeros (not a valid unit), as a hole in a file queue does."""

    kind = "rocksdb"

    def __init__(self, store: RocksDBConsumeQueueStore, topic: str, queue_id: int):
        self.store, self.topic, self.queue_id = store, topic, queue_id
        self.entries = store.offset_table.get((topic, queue_id), QueueEntries())
        self.max_offset_in_queue = self.entries.max.cq_offset + 1 if self.entries.max is not None else 0
        self.max_physic_offset = self.entries.max.phy_offset if self.entries.max is not None else -1
        self.file_size = CHUNK_UNITS * CQ_STORE_UNIT_SIZE
        self.damage: str | None = None  # as ConsumeQueue.damage: a RocksDB queue has no file end to be damaged
        first = store.first_unit_offset(topic, queue_id) if self.max_offset_in_queue else None
        first = self.max_offset_in_queue if first is None else min(first, self.max_offset_in_queue)
        segs, q = [], first
        while q < self.max_offset_in_queue:
            segs.append(PseudoSegment(q * CQ_STORE_UNIT_SIZE, self.file_size))
            q += CHUNK_UNITS
        self.queue = _PseudoQueue(segs)
        self.problems: list[str] = []
        self._cache: tuple[int, np.ndarray] | None = None

    def close(self) -> None:
        self._cache = None

    def rocksdb_units(self, lo: int, hi: int) -> np.ndarray:
        """ROCKSDB_UNIT_DTYPE rows for queue offsets [lo, hi), zeros where no unit is stored."""
        offs, units, problems = self.store.units(self.topic, self.queue_id, lo, hi)
        self.problems.extend(p for p in problems if p not in self.problems)
        out = np.zeros(max(hi - lo, 0), dtype=ROCKSDB_UNIT_DTYPE)
        if len(offs):
            out[offs - lo] = units
        return out

    def file_units(self, seg: PseudoSegment) -> np.ndarray:
        first = seg.start // CQ_STORE_UNIT_SIZE
        if self._cache is None or self._cache[0] != first:
            hi = min(first + CHUNK_UNITS, self.max_offset_in_queue)
            self._cache = (first, to_file_units(self.rocksdb_units(first, hi)))
        return self._cache[1].copy()

    def units_view(self, seg: PseudoSegment) -> np.ndarray:
        return self.file_units(seg)

    def unit(self, q: int) -> tuple[int, int, int] | None:
        if not 0 <= q < self.max_offset_in_queue:
            return None
        u = self.store.get_unit(self.topic, self.queue_id, q)
        return (0, 0, 0) if u is None else u[:3]

    def all_units(self) -> np.ndarray:
        parts = [self.file_units(s) for s in self.queue.segments]
        return np.concatenate(parts) if parts else np.empty(0, dtype=UNIT_DTYPE)

    # -- the broker's min and max
    def bounds(self, cl_min: int) -> QueueBounds:
        """getMinOffsetInQueue and getMaxOffsetInQueue of RocksDBConsumeQueueStore (see the module doc)."""
        max_q = self.max_offset_in_queue
        return QueueBounds(self.min_offset(cl_min), max_q, max_q)

    def min_offset(self, cl_min: int) -> int:
        mn, mx = self.entries.min, self.entries.max
        if mn is not None and mn.phy_offset >= cl_min:
            return mn.cq_offset
        low = mn.cq_offset if mn is not None else 0
        if mx is None:
            return 0
        if mx.phy_offset < cl_min:
            return mx.cq_offset + 1
        found = self._search_min(mx.cq_offset, low, cl_min)
        if found is None:
            return mx.cq_offset if mx.cq_offset != low else low
        return found

    def _search_min(self, high: int, low: int, target: int) -> int | None:
        """binarySearchInCQ(min=true): the lowest queue offset seen whose unit points at or above target
        (missing units move the search up, as the broker's does)."""
        result = None
        while high >= low:
            mid = low + ((high - low) >> 1)
            u = self.store.get_unit(self.topic, self.queue_id, mid)
            if u is None:
                low = mid + 1
                continue
            if u[0] == target:
                result = mid
                break
            if u[0] > target:
                high = mid - 1
                result = mid
            else:
                low = mid + 1
        return result
