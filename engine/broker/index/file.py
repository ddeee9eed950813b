"""The broker's IndexFile (format §5.1-§5.7): the on-disk hash table, its header, one put and one key lookup.

Layout: header (40) | hashSlotNum int32 slots | indexNum 20-byte items; item 0 is never used. Read-only unless
created or opened with writable=True. numpy is imported only by the bulk accessors (start-up stays light).

A writable file is mapped whole but allocated by range, as a store costs what it holds: the header and the slot
table (written at random places) are allocated whole when the file is created or opened for writing, the items
ITEMS_AHEAD bytes at a time ahead of the next item (ensure_items), and no page is touched before it is allocated
(a store to a hole of a mapping on a full disk is a SIGBUS).
"""
from __future__ import annotations

import mmap
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from engine.broker.index.chain import BEYOND, CYCLE, EMPTY, END, HEALTHY_STOPS, LIMIT, OUTSIDE_FILE, SELF, ChainWalk
from engine.errors import GeometryError, InvalidArgumentError
from engine.fsutil import allocate, pread_fully, reserve, write_zeros
from engine.java.lang import INT_MAX, LONG_MAX, index_hash, java_string_hash, key_index_hash, to_i64

HEADER = struct.Struct(">qqqqii")
ITEM = struct.Struct(">iqii")
SLOT = struct.Struct(">i")
INDEX_HEADER_SIZE = 40
ITEM_SIZE = 20
SLOT_SIZE = 4
#: An item's fields as a numpy structured dtype (the bulk accessors and builders): the layout of ITEM.
ITEM_FIELDS = [("hash", ">i4"), ("phy", ">i8"), ("time_diff", ">i4"), ("prev", ">i4")]
_ITEM_AT = ITEM.unpack_from
_SLOT_AT = SLOT.unpack_from
#: an item's keyHash, timeDiff and prevIndex without its phyOffset: the lookup reads the offset of a match only (a
#: chain step then makes no 64-bit int; about 5% of a lookup, bench/bench_index.py)
_LINK_AT = struct.Struct(">i8xii").unpack_from
_OFFSET_AT = struct.Struct(">q").unpack_from
#: the largest decoded-time offset an item can carry (timeDiff is a non-negative int of seconds)
_MAX_TIME_SPAN = INT_MAX * 1000
#: A writer allocates a file's items this many bytes ahead of the next item at once (52,428 items).
ITEMS_AHEAD = 1 << 20


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


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    """The bytes of an index file of this geometry (format §5.1)."""
    return INDEX_HEADER_SIZE + SLOT_SIZE * hash_slot_num + ITEM_SIZE * index_num


def check_index_geometry(hash_slot_num: int, index_num: int) -> None:
    """The broker computes the size in Java int: geometries that overflow cannot exist (pitfall 5)."""
    if hash_slot_num <= 0 or index_num <= 1:
        raise InvalidArgumentError(
            f"index geometry {hash_slot_num} slots x {index_num} items is invalid (need slots >= 1, items >= 2)")
    size = index_file_size(hash_slot_num, index_num)
    if size > INT_MAX:
        raise InvalidArgumentError(
            f"index geometry {hash_slot_num} slots x {index_num} items gives a {size}-byte file; "
            f"the broker's int arithmetic caps it at {INT_MAX}")


def time_diff_seconds(store_timestamp: int, begin_timestamp: int) -> int:
    """The item's timeDiff (format §5.6): Java long difference (wraps), truncating seconds, 0 when begin <= 0,
    clamped to [0, INT_MAX]. A negative difference clamps to 0, so flooring max(delta, 0) is the same."""
    if begin_timestamp <= 0:
        return 0
    delta = to_i64(store_timestamp - begin_timestamp)
    return min(max(delta, 0) // 1000, INT_MAX)


def suggest_geometry(size: int) -> str:
    """For a wrong-size error: the geometry with the broker's 1:4 slot/item ratio that fits, if any."""
    per_slot = SLOT_SIZE + 4 * ITEM_SIZE
    if size > INDEX_HEADER_SIZE and (size - INDEX_HEADER_SIZE) % per_slot == 0:
        s = (size - INDEX_HEADER_SIZE) // per_slot
        return f" (it matches --hash-slots {s} --max-index {4 * s})"
    return ""


class IndexFile:
    """One index file."""

    def __init__(self, path: Path, hash_slot_num: int, index_num: int, mm, fd: int, writable: bool,
                 header: IndexHeader, on_disk_index_count: int):
        self.path = Path(path)
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self._mm = mm
        self._view = memoryview(mm)  # struct reads from a memoryview are cheaper than from the mmap object
        self._fd = fd
        self.writable = writable
        self.header = header
        self.on_disk_index_count = on_disk_index_count
        self._items_base = INDEX_HEADER_SIZE + SLOT_SIZE * hash_slot_num
        self._allocated = 0  # writable: the end of the file's allocated prefix (header, slots, items so far)

    # ---------------------------------------------------------------- lifecycle
    @classmethod
    def create(cls, path, hash_slot_num: int, index_num: int, end_phy_offset: int = 0,
               end_timestamp: int = 0) -> "IndexFile":
        """new IndexFile(...): a zero-filled full-size file; the seed values go into the header at once.
        An existing file of that name is never overwritten (FileExistsError)."""
        check_index_geometry(hash_slot_num, index_num)
        path = Path(path)
        size = index_file_size(hash_slot_num, index_num)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        head = INDEX_HEADER_SIZE + SLOT_SIZE * hash_slot_num + ITEM_SIZE * 2  # items 0 and 1: a reader looks at 1
        try:
            os.ftruncate(fd, size)  # sparse, as the broker's: items are allocated as they come (ensure_items)
            # Real blocks for the header and the slot table before the file is mapped for writing: a store to a
            # hole of a mapping on a full disk is a SIGBUS; a failed allocation is a DiskFullError naming the
            # file and the free space.
            allocate(fd, 0, head, path)
            # Puts write slots all over the slot table: writing it once now (zeros, as it is) costs one
            # sequential write instead of a block-initialising page fault per slot page later.
            write_zeros(fd, INDEX_HEADER_SIZE, SLOT_SIZE * hash_slot_num, path, chunk=4 << 20)
            mm = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE)
        except BaseException:
            os.close(fd)
            raise
        f = cls(path, hash_slot_num, index_num, mm, fd, True, IndexHeader(), 0)
        f._allocated = head
        if end_phy_offset > 0:
            f.header.beginPhyOffset = f.header.endPhyOffset = end_phy_offset
        if end_timestamp > 0:
            f.header.beginTimestamp = f.header.endTimestamp = end_timestamp
        # The IndexHeader setters write through to the mapping; indexCount stays 0 on disk until a put.
        struct.pack_into(">qqqq", mm, 0, f.header.beginTimestamp, f.header.endTimestamp,
                         f.header.beginPhyOffset, f.header.endPhyOffset)
        return f

    @classmethod
    def open(cls, path, hash_slot_num: int, index_num: int, writable: bool = False,
             random_access: bool = False) -> "IndexFile":
        """Map an existing file. Its size must be the geometry's (GeometryError otherwise). random_access: tell
        the kernel not to read around each page fault (a key lookup touches a few scattered pages only)."""
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
            allocated = 0
            if writable and HEADER.unpack(os.pread(fd, HEADER.size, 0))[5] < index_num:
                # A broker's file is sparse: no holes where puts will write first (the slot table, the items so
                # far); the items after them are allocated as they come (ensure_items).
                count = HEADER.unpack(os.pread(fd, HEADER.size, 0))[5]
                allocated = INDEX_HEADER_SIZE + SLOT_SIZE * hash_slot_num + ITEM_SIZE * min(max(count, 1) + 1,
                                                                                            index_num)
                allocate(fd, 0, allocated, path)
            mm = mmap.mmap(fd, actual, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
            if random_access and hasattr(mm, "madvise"):
                mm.madvise(mmap.MADV_RANDOM)
        except BaseException:
            os.close(fd)
            raise
        h = IndexHeader(*HEADER.unpack_from(mm, 0))
        raw_count = h.indexCount
        if h.indexCount <= 0:
            h.indexCount = 1  # IndexHeader.load
        f = cls(path, hash_slot_num, index_num, mm, fd, writable, h, raw_count)
        f._allocated = allocated
        return f

    def ensure_items(self, count: int) -> None:
        """Allocate items up to item `count` (exclusive) before they are written, and the one after them (a
        reader looks at item indexCount for a put in flight), ITEMS_AHEAD bytes more when the disk gives them;
        DiskFullError when it cannot."""
        need = self._items_base + ITEM_SIZE * min(count + 1, self.index_num)
        if need > self._allocated:
            self._allocated = reserve(self._fd, self._allocated, need, self._items_base + ITEM_SIZE * self.index_num,
                                      self.path, ITEMS_AHEAD)

    def close(self) -> None:
        if self._mm is not None:
            self._view.release()
            self._mm.close()
            os.close(self._fd)
            self._mm = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.close()
        except BufferError:  # an error in flight still holds numpy views of the mapping: it goes with them
            if exc[0] is None:
                raise

    def flush(self) -> None:
        """IndexFile.flush: rewrite the whole header from memory, then force the file."""
        if not self.writable:
            return
        self.write_header()
        self._mm.flush()

    def write_header(self) -> None:
        h = self.header
        HEADER.pack_into(self._mm, 0, h.beginTimestamp, h.endTimestamp, h.beginPhyOffset, h.endPhyOffset,
                         h.hashSlotCount, h.indexCount)
        self.on_disk_index_count = h.indexCount

    # ---------------------------------------------------------------- state
    def is_write_full(self) -> bool:
        return self.header.indexCount >= self.index_num

    @property
    def item_count(self) -> int:
        return max(self.header.indexCount - 1, 0)

    def header_damage(self, newest: bool, previous: Optional[IndexHeader] = None,
                      live_writer: Optional[Callable[[], bool]] = None) -> Optional[str]:
        """Why this file cannot be one the broker wrote, or None. Reads the header, two items and one slot only.

        newest: whether it is the newest file of its directory. The broker rolls to a new file only when the
        current one is full (format §5.8), so every older file holds indexNum-1 items; an older file with fewer
        (a zero-filled one has none) lost items the answers need. previous: the header of the file before it;
        a file without items carries that file's end offset and time in its header (the seed, format §5.8).
        live_writer: asked, only when the newest file has an item past indexCount, whether another process
        holds the store lock: the item is then a put in flight (IndexFile.putKey writes the item and its slot
        before the header), not damage (reading /proc/locks costs 8-15 ms in a new process, so it is not asked
        up front).
        """
        h, count = self.header, self.on_disk_index_count
        items = max(count - 1, 0)
        if not 0 <= count <= self.index_num:
            return f"header indexCount {count} is outside 0..{self.index_num}"
        if not 0 <= h.hashSlotCount <= items:
            return f"header hashSlotCount {h.hashSlotCount} is outside 0..{items} (one per item at most)"
        if items and not 0 <= h.beginPhyOffset <= h.endPhyOffset:
            return f"header offsets are not ordered: begin {h.beginPhyOffset}, end {h.endPhyOffset}"
        if not newest and count < self.index_num:
            what = "no items (zero-filled?)" if items == 0 else f"{items} of {self.index_num - 1} items"
            return f"holds {what} but is not the newest index file (the broker rolls only full files)"
        if h.indexCount < self.index_num and any(self.read_item(h.indexCount)) and not (
                newest and live_writer is not None and live_writer()):
            if self.refresh_header(wait=True):
                return self.header_damage(newest, previous, live_writer)  # a writer appended meanwhile: look again
            return f"item {h.indexCount} past the header's indexCount is written (the header was not written back)"
        if items:  # the newest item's slot holds it (or a newer item): a zeroed slot table fails here
            key_hash = self.read_item(items)[0]
            head = self.slot_value(key_hash % self.hash_slot_num) if key_hash >= 0 else -1
            if not items <= head < self.index_num:
                return (f"slot {key_hash % self.hash_slot_num if key_hash >= 0 else '?'} holds item {head}, not item "
                        f"{items} (the newest) or a newer one: the slot table is damaged")
        if not items and previous is not None:
            seed_ts = max(previous.endTimestamp, 0)
            seed_phy = max(previous.endPhyOffset, 0)
            if (h.beginTimestamp, h.endTimestamp, h.beginPhyOffset, h.endPhyOffset) != (seed_ts, seed_ts, seed_phy,
                                                                                          seed_phy):
                return "holds no items and its header does not carry the previous file's end (zero-filled?)"
        return None

    def refresh_header(self, wait: bool = False) -> bool:
        """Re-read the header of a read-only file, which a live broker may be appending to (it writes an item,
        then its slot, then the header); True when it changed. wait: give such a writer a millisecond first."""
        if self.writable or self._mm is None:
            return False
        if wait:
            time.sleep(0.001)
        fields = HEADER.unpack_from(self._view, 0)
        if fields[5] == self.on_disk_index_count and fields[3] == self.header.endPhyOffset:
            return False
        self.header = IndexHeader(*fields)
        self.on_disk_index_count = fields[5]
        if self.header.indexCount <= 0:
            self.header.indexCount = 1  # IndexHeader.load
        return True

    def slot_value(self, slot: int) -> int:
        return _SLOT_AT(self._view, INDEX_HEADER_SIZE + SLOT_SIZE * slot)[0]

    def item(self, n: int) -> tuple[int, int, int, int]:
        """(keyHash, phyOffset, timeDiff, prevIndex) of item n."""
        return _ITEM_AT(self._view, self._items_base + ITEM_SIZE * n)

    def read_item(self, n: int) -> tuple[int, int, int, int]:
        """Item n read with pread, not through the mapping: the item past the last may lie in a hole of a sparse
        file, and a read fault there allocates a page on some filesystems (tmpfs), a SIGBUS when it is full."""
        raw = os.pread(self._fd, ITEM_SIZE, self._items_base + ITEM_SIZE * n)
        return _ITEM_AT(raw.ljust(ITEM_SIZE, b"\0"), 0)

    def item_or_none(self, n: int) -> Optional[tuple[int, int, int, int]]:
        """Item n, or None when n lies past the file's last item (a chain walk then stops: OUTSIDE_FILE)."""
        return self.item(n) if 0 <= n < self.index_num else None

    def slot_of(self, key: str) -> int:
        return key_index_hash(key) % self.hash_slot_num

    # ---------------------------------------------------------------- write (format §5.6)
    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        return self.put_hash(java_string_hash(key), phy_offset, store_timestamp)

    def put_hash(self, java_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        """putKey given the key's Java hashCode (saves re-hashing in bulk paths)."""
        if not self.writable:
            raise InvalidArgumentError(f"index file {self.path} is open read-only")
        h = self.header
        if h.indexCount >= self.index_num:
            return False
        if self._items_base + ITEM_SIZE * (h.indexCount + 1) > self._allocated:
            self.ensure_items(h.indexCount + 1)
        kh = index_hash(java_hash)
        sp = INDEX_HEADER_SIZE + SLOT_SIZE * (kh % self.hash_slot_num)
        mm = self._mm
        head = _SLOT_AT(mm, sp)[0]
        if head <= 0 or head > h.indexCount:
            head = 0
        d = time_diff_seconds(store_timestamp, h.beginTimestamp)
        ITEM.pack_into(mm, self._items_base + ITEM_SIZE * h.indexCount, kh, phy_offset, d, head)
        SLOT.pack_into(mm, sp, h.indexCount)
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

    # ---------------------------------------------------------------- read (format §5.7)
    def is_time_matched(self, begin: int, end: int) -> bool:
        fb, fe = self.header.beginTimestamp, self.header.endTimestamp
        return (begin < fb and end > fe) or (fb <= begin <= fe) or (fb <= end <= fe)

    def select_phy_offsets(self, key: str, max_num: int, begin: int, end: int,
                           result: list | None = None) -> list[int]:
        """selectPhyOffset: walk the key's slot chain newest to oldest, comparing hashes only."""
        out = [] if result is None else result
        self.select_hash(key_index_hash(key), max_num, begin, end, out)
        return out

    def select_hash(self, kh: int, max_num: int, begin: int, end: int, out: list) -> Optional[str]:
        """selectPhyOffset for an index hash kh, appending to out exactly what the broker appends. Returns None
        when the chain was healthy, else what was wrong with it (the answer is then the broker's, bounded).

        This is ChainWalk's link rule inlined for the healthy case, where every link goes to an older item so
        the walk cannot loop; it is the lookup's hot path (format §5.7). Anything else goes to _select_walk."""
        if len(out) >= max_num:
            return None
        count = self.header.indexCount
        n = _SLOT_AT(self._view, INDEX_HEADER_SIZE + SLOT_SIZE * (kh % self.hash_slot_num))[0]
        if n == 0:
            return None
        bt = self.header.beginTimestamp
        if not (0 < n <= count and count > 1 and n < self.index_num and bt <= LONG_MAX - _MAX_TIME_SPAN):
            # a head the broker ignores or cannot read, or decoded times that could wrap
            return self._select_walk(kh, max_num, begin, end, out)
        start = len(out)
        mv, base = self._view, self._items_base
        if begin <= bt and end >= bt + _MAX_TIME_SPAN:
            # Every decoded time lies inside [begin, end]: only the hash decides, no time stop (the usual query).
            while True:
                p = base + ITEM_SIZE * n
                ih, d, prev = _LINK_AT(mv, p)
                if ih == kh or d < 0:
                    if d < 0:
                        break
                    out.append(_OFFSET_AT(mv, p + 4)[0])
                    if len(out) >= max_num:
                        return None
                if 0 < prev < n:
                    n = prev
                elif prev == 0:
                    return None
                else:
                    break
        else:
            while True:
                p = base + ITEM_SIZE * n
                ih, d, prev = _LINK_AT(mv, p)
                if d < 0:
                    break
                t = bt + d * 1000
                if ih == kh and begin <= t <= end:
                    out.append(_OFFSET_AT(mv, p + 4)[0])
                    if len(out) >= max_num:
                        return None
                if t < begin:
                    return None
                if 0 < prev < n:
                    n = prev
                elif prev == 0:
                    return None
                else:
                    break
        del out[start:]  # an unusual link or item: redo the walk with every rule spelled out
        return self._select_walk(kh, max_num, begin, end, out)

    def _select_walk(self, kh: int, max_num: int, begin: int, end: int, out: list) -> Optional[str]:
        """The broker's loop over ChainWalk, for chains the fast path does not take: same answer as the broker
        (which has no cycle check: the walk is bounded by the item count), and what was wrong."""
        h = self.header
        walk = self.chain(kh % self.hash_slot_num, detect_cycles=False, max_steps=h.indexCount)
        for n, (ih, off, d, _prev) in walk:
            if len(out) >= max_num:
                break
            if d < 0:
                return f"item {n} has a negative timeDiff {d}"
            t = to_i64(h.beginTimestamp + d * 1000)
            if ih == kh and begin <= t <= end:
                out.append(off)
            if t < begin:
                break
        return chain_damage(walk)

    def chain(self, slot: int, **kw) -> ChainWalk:
        """The chain of hash slot `slot` as the broker follows it: pointers up to the header's indexCount."""
        count = self.header.indexCount
        last = count if count > 1 else 0  # indexCount <= 1: the file is empty, every head is ignored
        return ChainWalk(self.slot_value(slot), self.item_or_none, _prev_of, last=last, **kw)

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
            OUTSIDE_FILE: f"item {n} points at item {walk.at}, past the file's last item {self.index_num - 1}",
        }.get(walk.stop)
        if reason is None:  # BEYOND
            if not items:
                return items, f"slot points at item {walk.at}, outside 1..{h.indexCount - 1} (the broker ignores it)"
            reason = f"item {n} points at item {walk.at}, outside 1..{h.indexCount - 1}"
        if walk.forward_links:
            reason += f"; the chain has {walk.forward_links} link(s) to a newer item (damage)"
        return items, reason

    # ---------------------------------------------------------------- bulk
    @property
    def items_base(self) -> int:
        """Where item 0 starts: after the header and the slot table."""
        return self._items_base

    def raw_header(self) -> bytes:
        """The header's 40 bytes as the file holds them (all zero in a file created and never written back)."""
        return bytes(self._mm[:INDEX_HEADER_SIZE])

    def pread(self, length: int, offset: int) -> bytes:
        """Bytes of the file read past the mapping (a pass over a table too big to fault in page by page);
        OSError when the file ends first."""
        data = pread_fully(self._fd, length, offset)
        if len(data) < length:
            raise OSError(f"index file ended at byte {offset + len(data)}, {length - len(data)} bytes short")
        return data

    def slots_array(self):
        """The slot table as an array over the mapping (written through when the file is writable)."""
        import numpy as np

        return np.frombuffer(self._mm, dtype=">i4", count=self.hash_slot_num, offset=INDEX_HEADER_SIZE)

    def items_view(self, first: int, count: int):
        """Items first..first+count-1 as a structured array over the mapping (written through when the file is
        writable)."""
        import numpy as np

        return np.frombuffer(self._mm, dtype=np.dtype(ITEM_FIELDS), count=count,
                             offset=self._items_base + ITEM_SIZE * first)

    def items_array(self):
        """Items 1..indexCount-1 (bounded by the file's capacity) as a structured array."""
        import numpy as np

        n = min(self.header.indexCount, self.index_num) - 1
        if n <= 0:
            return np.empty(0, dtype=np.dtype(ITEM_FIELDS))
        return self.items_view(1, n)


def _prev_of(item: tuple[int, int, int, int]) -> int:
    return item[3]


def chain_damage(walk: ChainWalk) -> Optional[str]:
    """What a finished walk's stop says about the chain: None when it ended as a healthy chain ends."""
    if walk.stop in HEALTHY_STOPS:
        return None if not walk.forward_links else "a chain link points at a newer item"
    return {
        BEYOND: f"a chain pointer {walk.at} lies outside the header's items (damage, or a writer in flight)",
        SELF: f"item {walk.at} points at itself",
        OUTSIDE_FILE: f"a chain pointer {walk.at} lies past the file's last item",
        CYCLE: f"the chain loops (back to item {walk.at})",
    }.get(walk.stop, walk.stop)


def open_failure(path: Path, exc: BaseException) -> str:
    """Why a file could not be opened as an index file, in a few words (the caller names the file)."""
    if isinstance(exc, GeometryError):
        try:
            size = path.stat().st_size
        except OSError:
            return str(exc)
        return f"{size} bytes, not the geometry's size{suggest_geometry(size)}"
    if isinstance(exc, OSError):
        return f"cannot be opened: {exc.strerror or exc}"
    return str(exc)
