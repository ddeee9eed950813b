"""The broker's IndexFile and IndexService (format §5), plus a vectorized whole-file builder.

IndexFile layout: header (40) | hashSlotNum int32 slots | indexNum 20-byte items; item 0 is never used.
"""
from __future__ import annotations

import mmap
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from engine.broker.chain import CYCLE, EMPTY, END, LIMIT, SELF, ChainWalk
from engine.broker.config import INDEX_HEADER_SIZE, check_index_geometry, index_file_size
from engine.broker.layout import index_file_name, list_index_files
from engine.errors import GeometryError, InvalidArgumentError
from engine.java.lang import INT_MAX, INT_MIN, index_hash, java_div, java_string_hash, java_string_hashes

HEADER = struct.Struct(">qqqqii")
ITEM = struct.Struct(">iqii")
ITEM_SIZE = 20
SLOT_SIZE = 4
ITEM_DTYPE = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("time_diff", ">i4"), ("prev", ">i4")])


@dataclass
class IndexHeader:
    beginTimestamp: int = 0
    endTimestamp: int = 0
    beginPhyOffset: int = 0
    endPhyOffset: int = 0
    hashSlotCount: int = 0
    indexCount: int = 1

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def time_diff_seconds(store_timestamp: int, begin_timestamp: int) -> int:
    """The item's timeDiff (§5.6): truncating seconds, 0 when begin <= 0, clamped to [0, INT_MAX]."""
    if begin_timestamp <= 0:
        return 0
    d = java_div(store_timestamp - begin_timestamp, 1000)
    return min(max(d, 0), INT_MAX)


def suggest_geometry(size: int) -> str:
    """For a wrong-size error: the geometry with the broker's 1:4 slot/item ratio that fits, if any."""
    if size > INDEX_HEADER_SIZE and (size - INDEX_HEADER_SIZE) % 84 == 0:
        s = (size - INDEX_HEADER_SIZE) // 84
        return f" (it matches --hash-slots {s} --max-index {4 * s})"
    return ""


class IndexFile:
    """One index file. Read-only unless created or opened with writable=True."""

    def __init__(self, path: Path, hash_slot_num: int, index_num: int, mm, fd: int, writable: bool,
                 header: IndexHeader, on_disk_index_count: int):
        self.path = Path(path)
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self._mm = mm
        self._fd = fd
        self.writable = writable
        self.header = header
        self.on_disk_index_count = on_disk_index_count
        self._items_base = INDEX_HEADER_SIZE + SLOT_SIZE * hash_slot_num

    # ---------------------------------------------------------------- lifecycle
    @classmethod
    def create(cls, path, hash_slot_num: int, index_num: int, end_phy_offset: int = 0,
               end_timestamp: int = 0) -> "IndexFile":
        """new IndexFile(...): a zero-filled full-size file; the seed values go into the header at once."""
        check_index_geometry(hash_slot_num, index_num)
        path = Path(path)
        size = index_file_size(hash_slot_num, index_num)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE)
        except Exception:
            os.close(fd)
            raise
        f = cls(path, hash_slot_num, index_num, mm, fd, True, IndexHeader(), 0)
        if end_phy_offset > 0:
            f.header.beginPhyOffset = f.header.endPhyOffset = end_phy_offset
        if end_timestamp > 0:
            f.header.beginTimestamp = f.header.endTimestamp = end_timestamp
        # The IndexHeader setters write through to the mapping; indexCount stays 0 on disk until a put.
        struct.pack_into(">qqqq", mm, 0, f.header.beginTimestamp, f.header.endTimestamp,
                         f.header.beginPhyOffset, f.header.endPhyOffset)
        return f

    @classmethod
    def open(cls, path, hash_slot_num: int, index_num: int, writable: bool = False) -> "IndexFile":
        check_index_geometry(hash_slot_num, index_num)
        path = Path(path)
        expected = index_file_size(hash_slot_num, index_num)
        try:
            fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
        except FileNotFoundError:
            raise InvalidArgumentError(f"index file {path} does not exist") from None
        except IsADirectoryError:
            raise InvalidArgumentError(f"{path} is a directory, not an index file") from None
        try:
            actual = os.fstat(fd).st_size
            if actual != expected:
                raise GeometryError(
                    f"index file {path} is {actual} bytes, but {hash_slot_num} slots x {index_num} items "
                    f"gives {expected} bytes{suggest_geometry(actual)}")
            mm = mmap.mmap(fd, actual, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
        except Exception:
            os.close(fd)
            raise
        fields = HEADER.unpack_from(mm, 0)
        h = IndexHeader(*fields)
        raw_count = h.indexCount
        if h.indexCount <= 0:
            h.indexCount = 1  # IndexHeader.load
        return cls(path, hash_slot_num, index_num, mm, fd, writable, h, raw_count)

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            os.close(self._fd)
            self._mm = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def flush(self) -> None:
        """IndexFile.flush: rewrite the whole header from memory, then force the file."""
        if not self.writable:
            return
        h = self.header
        HEADER.pack_into(self._mm, 0, h.beginTimestamp, h.endTimestamp, h.beginPhyOffset, h.endPhyOffset,
                         h.hashSlotCount, h.indexCount)
        self.on_disk_index_count = h.indexCount
        self._mm.flush()

    # ---------------------------------------------------------------- state
    def is_write_full(self) -> bool:
        return self.header.indexCount >= self.index_num

    @property
    def item_count(self) -> int:
        return max(self.header.indexCount - 1, 0)

    def slot_value(self, slot: int) -> int:
        return struct.unpack_from(">i", self._mm, INDEX_HEADER_SIZE + SLOT_SIZE * slot)[0]

    def item(self, n: int) -> tuple[int, int, int, int]:
        """(keyHash, phyOffset, timeDiff, prevIndex) of item n."""
        return ITEM.unpack_from(self._mm, self._items_base + ITEM_SIZE * n)

    def slot_of(self, key: str) -> int:
        return index_hash(java_string_hash(key)) % self.hash_slot_num

    # ---------------------------------------------------------------- write (§5.6)
    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        return self.put_hash(java_string_hash(key), phy_offset, store_timestamp)

    def put_hash(self, java_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        """putKey given the key's Java hashCode (saves re-hashing in bulk paths)."""
        if not self.writable:
            raise InvalidArgumentError(f"index file {self.path} is open read-only")
        h = self.header
        if h.indexCount >= self.index_num:
            return False
        kh = index_hash(java_hash)
        sp = INDEX_HEADER_SIZE + SLOT_SIZE * (kh % self.hash_slot_num)
        mm = self._mm
        head = struct.unpack_from(">i", mm, sp)[0]
        if head <= 0 or head > h.indexCount:
            head = 0
        d = time_diff_seconds(store_timestamp, h.beginTimestamp)
        ITEM.pack_into(mm, self._items_base + ITEM_SIZE * h.indexCount, kh, phy_offset, d, head)
        struct.pack_into(">i", mm, sp, h.indexCount)
        if h.indexCount <= 1:
            h.beginPhyOffset = phy_offset
            h.beginTimestamp = store_timestamp
            struct.pack_into(">q", mm, 16, phy_offset)
            struct.pack_into(">q", mm, 0, store_timestamp)
        if head == 0:
            h.hashSlotCount += 1
            struct.pack_into(">i", mm, 32, h.hashSlotCount)
        h.indexCount += 1
        h.endPhyOffset = phy_offset
        h.endTimestamp = store_timestamp
        struct.pack_into(">qqq", mm, 8, h.endTimestamp, h.beginPhyOffset, h.endPhyOffset)
        struct.pack_into(">i", mm, 36, h.indexCount)
        self.on_disk_index_count = h.indexCount
        return True

    # ---------------------------------------------------------------- read (§5.7)
    def is_time_matched(self, begin: int, end: int) -> bool:
        fb, fe = self.header.beginTimestamp, self.header.endTimestamp
        return (begin < fb and end > fe) or (fb <= begin <= fe) or (fb <= end <= fe)

    def select_phy_offsets(self, key: str, max_num: int, begin: int, end: int,
                           result: list | None = None) -> list[int]:
        """selectPhyOffset: walk the key's slot chain newest to oldest, comparing hashes only."""
        out = [] if result is None else result
        self._walk_select(index_hash(java_string_hash(key)), max_num, begin, end, out)
        return out

    def chain(self, slot: int, **kw) -> ChainWalk:
        """The chain of hash slot `slot` as the broker follows it: pointers up to the header's indexCount."""
        count = self.header.indexCount
        last = count if count > 1 else 0  # indexCount <= 1: the file is empty, every head is ignored
        return ChainWalk(self.slot_value(slot), self.item, _prev_of, last=last, **kw)

    def _walk_select(self, kh: int, max_num: int, begin: int, end: int, out: list) -> None:
        h = self.header
        # The broker's loop has no cycle check: bound it by the item count instead of a visited set.
        for _n, (ih, off, d, _prev) in self.chain(kh % self.hash_slot_num, detect_cycles=False,
                                                   max_steps=h.indexCount):
            if len(out) >= max_num or d < 0:
                break
            t = h.beginTimestamp + d * 1000
            if ih == kh and begin <= t <= end:
                out.append(off)
            if t < begin:
                break

    def walk_chain(self, slot: int, limit: int | None = None):
        """Inspect a slot's chain item by item. Returns (items, stop_reason); always terminates."""
        h = self.header
        if not 0 <= slot < self.hash_slot_num:
            raise InvalidArgumentError(f"slot {slot} is out of range 0..{self.hash_slot_num - 1}")
        cap = limit if limit is not None else self.index_num
        walk = self.chain(slot, limit=cap)
        items = []
        for n, (ih, off, d, prev) in walk:
            t = h.beginTimestamp + d * 1000
            items.append({"item": n, "keyHash": ih, "phyOffset": off, "timeDiff": d, "timestamp": t,
                          "prevIndex": prev, "slot": ih % self.hash_slot_num if ih >= 0 else None})
            if d < 0:
                return items, f"item {n} has a negative timeDiff {d} (the broker stops here)"
        n = items[-1]["item"] if items else walk.head
        reason = {
            EMPTY: "slot is empty",
            END: "end of chain (prevIndex 0)",
            SELF: f"item {n} points at itself",
            CYCLE: f"cycle: item {walk.at} was already visited",
            LIMIT: f"stopped after {cap} items (limit)",
        }.get(walk.stop)
        if reason is None:  # BEYOND
            if not items:
                return items, f"slot points at item {walk.at}, outside 1..{h.indexCount - 1} (the broker ignores it)"
            reason = f"item {n} points at item {walk.at}, outside 1..{h.indexCount - 1}"
        return items, reason

    # ---------------------------------------------------------------- bulk
    def slots_array(self) -> np.ndarray:
        return np.frombuffer(self._mm, dtype=">i4", count=self.hash_slot_num, offset=INDEX_HEADER_SIZE)

    def items_array(self) -> np.ndarray:
        """Items 1..indexCount-1 (bounded by the file's capacity) as a structured array."""
        n = min(self.header.indexCount, self.index_num) - 1
        if n <= 0:
            return np.empty(0, dtype=ITEM_DTYPE)
        return np.frombuffer(self._mm, dtype=ITEM_DTYPE, count=n, offset=self._items_base + ITEM_SIZE)


# ==================================================================== vectorized builder

def _prev_of(item: tuple[int, int, int, int]) -> int:
    return item[3]


def _slot_chains(slots: np.ndarray):
    """Chain structure of items 1..N (in put order) hashed to `slots`.

    One sort of the unique 64-bit composites slot<<32 | item orders the items by slot and, within a slot, by
    put order (what a stable sort by slot gives); each item's predecessor in its slot is then its left
    neighbour when the slot matches. Returns (prev per item, head slots, head items, occupied slot count).
    """
    n = len(slots)
    if n == 0:
        e = np.empty(0, dtype=np.int32)
        return e, e, e, 0
    comp = np.empty(n, dtype=np.uint64)
    halves = comp.view(np.uint32).reshape(n, 2)  # composite built as two 32-bit words, no 64-bit arithmetic
    hi, lo = (1, 0) if np.little_endian else (0, 1)
    halves[:, hi] = slots
    halves[:, lo] = np.arange(1, n + 1, dtype=np.uint32)
    comp.sort()
    item_sorted, slot_sorted = halves[:, lo], halves[:, hi]
    same = slot_sorted[1:] == slot_sorted[:-1]  # item k+1 (in sorted order) continues item k's slot
    prev = np.empty(n, dtype=np.int32)
    prev[item_sorted[0] - 1] = 0
    prev[item_sorted[1:] - 1] = np.where(same, item_sorted[:-1], 0)
    last = np.empty(n, dtype=bool)  # the newest item of each slot: the slot's head
    np.logical_not(same, out=last[:-1])
    last[-1] = True
    del same
    head_slots = slot_sorted[last].astype(np.int64)
    head_items = item_sorted[last].astype(np.int32)
    return prev, head_slots, head_items, len(head_items)


def _prev_and_heads(slots: np.ndarray, hash_slot_num: int):
    """For items 1..N with the given slots: each item's predecessor in its slot (0 = none) and slot heads."""
    prev, head_slots, head_items, used = _slot_chains(np.asarray(slots, dtype=np.int64))
    heads = np.zeros(hash_slot_num, dtype=np.int32)
    heads[head_slots] = head_items
    return prev, heads, used


def _time_diffs(ts: np.ndarray, seed_begin: int) -> np.ndarray:
    """timeDiff of every item (§5.6): item 1 against the seed, the others against item 1's own time.

    Java long arithmetic: the difference wraps in int64, the division truncates toward zero, and a
    negative quotient is clamped to 0 (so max(delta, 0) // 1000 is the same value).
    """
    n = len(ts)
    d = np.empty(n, dtype=np.int64)
    with np.errstate(over="ignore"):
        first = (int(ts[0]) - seed_begin + 2**63) % 2**64 - 2**63  # int64 wrap
        d[0] = 0 if seed_begin <= 0 else min(max(first, 0) // 1000, INT_MAX)
        begin = int(ts[0])
        if begin <= 0:
            d[1:] = 0
        elif n > 1:
            rest = d[1:]
            np.subtract(ts[1:], np.int64(begin), out=rest)
            np.maximum(rest, 0, out=rest)
            rest //= 1000
            np.minimum(rest, INT_MAX, out=rest)
    return d.astype(np.int32)


def build_index_file_from_hashes(path, java_hashes, phy_offsets, store_timestamps, hash_slot_num: int,
                                 index_num: int, end_phy_offset: int = 0, end_timestamp: int = 0) -> int:
    """Write a whole index file in one pass from per-entry Java hashCodes; equals put_key in a loop.

    The file is created full size (sparse), then the header, the slot heads and items 1..N are written
    through one mapping; the bytes are those of IndexFile.create(..., seeds) + put_key per entry.
    """
    check_index_geometry(hash_slot_num, index_num)
    hashes = np.asarray(java_hashes)
    if hashes.dtype != np.int32:
        hashes = hashes.astype(np.int64)
        if len(hashes) and (hashes.min() < INT_MIN or hashes.max() > INT_MAX):
            raise InvalidArgumentError("Java hashCodes must be 32-bit signed integers")
        hashes = hashes.astype(np.int32)
    phy = np.asarray(phy_offsets, dtype=np.int64)
    ts = np.asarray(store_timestamps, dtype=np.int64)
    n = len(hashes)
    if not len(phy) == len(ts) == n:
        raise InvalidArgumentError("keys, phy_offsets and store_timestamps must have the same length")
    if n > index_num - 1:
        raise InvalidArgumentError(f"{n} entries do not fit an index file of {index_num} items (max {index_num - 1})")
    seed_phy = end_phy_offset if end_phy_offset > 0 else 0
    seed_ts = end_timestamp if end_timestamp > 0 else 0
    size = index_file_size(hash_slot_num, index_num)
    items_base = INDEX_HEADER_SIZE + SLOT_SIZE * hash_slot_num
    path = Path(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, size)
        if n == 0:
            # IndexFile.create with no put: the seeds in the header, indexCount still 0 on disk.
            os.pwrite(fd, struct.pack(">qqqq", seed_ts, seed_ts, seed_phy, seed_phy), 0)
            return 0
        kh = np.abs(hashes)  # abs(Integer.MIN_VALUE) stays MIN_VALUE in int32: the broker then uses 0
        kh[kh < 0] = 0
        slots = kh % np.int32(hash_slot_num)
        prev, head_slots, head_items, used = _slot_chains(slots)
        del slots
        d = _time_diffs(ts, seed_ts)
        mm = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE)
        try:
            HEADER.pack_into(mm, 0, int(ts[0]), int(ts[-1]), int(phy[0]), int(phy[-1]), used, n + 1)
            slot_view = np.frombuffer(mm, dtype=">i4", count=hash_slot_num, offset=INDEX_HEADER_SIZE)
            slot_view[head_slots] = head_items
            items = np.frombuffer(mm, dtype=ITEM_DTYPE, count=n, offset=items_base + ITEM_SIZE)
            items["hash"] = kh
            items["phy"] = phy
            items["time_diff"] = d
            items["prev"] = prev
            del slot_view, items
        finally:
            mm.close()
    finally:
        os.close(fd)
    return n


def build_index_file(path, keys, phy_offsets, store_timestamps, hash_slot_num: int, index_num: int,
                     end_phy_offset: int = 0, end_timestamp: int = 0) -> int:
    """Vectorized IndexFile builder: same bytes as IndexFile.create + put_key in a loop.

    keys: "topic#key" strings: a list, a numpy 'U' array, or a lazily sliced sequence of either
    (hashed a chunk at a time, so 20M keys never exist as Python strings at once).
    """
    check_index_geometry(hash_slot_num, index_num)
    n = len(keys)
    if n > index_num - 1:
        raise InvalidArgumentError(f"{n} entries do not fit an index file of {index_num} items (max {index_num - 1})")
    hashes = java_string_hashes(keys)
    return build_index_file_from_hashes(path, hashes, phy_offsets, store_timestamps, hash_slot_num, index_num,
                                        end_phy_offset, end_timestamp)


# ==================================================================== IndexService

class IndexService:
    def __init__(self, index_dir: Path, hash_slot_num: int, index_num: int, writable: bool = False,
                 on_full_flush: Callable[[int], None] | None = None, clock: Callable[[], int] | None = None):
        check_index_geometry(hash_slot_num, index_num)
        self.dir = Path(index_dir)
        self.hash_slot_num, self.index_num = hash_slot_num, index_num
        self.writable = writable
        self.on_full_flush = on_full_flush
        self.clock = clock or (lambda: int(time.time() * 1000))
        self.files: list[IndexFile] = []
        for p in list_index_files(self.dir):
            self.files.append(IndexFile.open(p, hash_slot_num, index_num, writable=writable))

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []

    def flush_all(self) -> None:
        for f in self.files:
            f.flush()

    # ---------------------------------------------------------------- write
    def _new_file_name(self) -> Path:
        name = index_file_name(self.clock())
        if self.files:
            last = self.files[-1].path.name
            if (len(name), name) <= (len(last), last):
                name = str(int(last) + 1)  # two files in one millisecond: keep names unique and ordered
        return self.dir / name

    def last_file_for_write(self) -> IndexFile:
        """getAndCreateLastIndexFile: the last file if not full, else a new one seeded from it (§5.8)."""
        if self.files and not self.files[-1].is_write_full():
            return self.files[-1]
        prev = self.files[-1] if self.files else None
        self.dir.mkdir(parents=True, exist_ok=True)
        f = IndexFile.create(self._new_file_name(), self.hash_slot_num, self.index_num,
                             prev.header.endPhyOffset if prev else 0, prev.header.endTimestamp if prev else 0)
        self.files.append(f)
        if prev is not None:
            self.flush_file(prev)
        return f

    def flush_file(self, f: IndexFile) -> None:
        """IndexService.flush: the header rewrite + force; a full file advances indexMsgTimestamp."""
        ts = f.header.endTimestamp if f.is_write_full() else 0
        f.flush()
        if ts > 0 and self.on_full_flush:
            self.on_full_flush(ts)

    def build_index(self, rec) -> int:
        """buildIndex for one decoded record; returns the number of keys put."""
        keys = rec.index_keys()
        f = self.last_file_for_write()
        if rec.physical_offset < f.header.endPhyOffset:
            return 0  # already indexed (strict: the record at endPhyOffset is indexed again, pitfall 23)
        n = 0
        for k in keys:
            h = java_string_hash(k)
            while not f.put_hash(h, rec.physical_offset, rec.store_timestamp):
                f = self.last_file_for_write()
            n += 1
        return n

    # ---------------------------------------------------------------- read
    def query_offsets(self, key_string: str, max_num: int, begin: int, end: int) -> list[int]:
        """IndexService.queryOffset for a full "topic#key" string (max_num already clamped by the caller)."""
        out: list[int] = []
        kh = index_hash(java_string_hash(key_string))
        for f in reversed(self.files):
            if f.is_time_matched(begin, end):
                f._walk_select(kh, max_num, begin, end, out)
            if f.header.beginTimestamp < begin:
                break
            if len(out) >= max_num:
                break
        return out
