"""Broker index files built (or compared with a file on disk) a chunk of items at a time, in bounded memory.

The bytes are those of engine.broker.index.build.build_index_file_from_hashes, i.e. IndexFile.create(seed) followed
by put_key per key (format §5.6, §5.8), but the keys arrive in chunks, so a 20M-item file never needs its
items in memory at once. Memory: the slot heads (4 bytes per hash slot, 20 MB for the default 5,000,000
slots) plus one chunk. Items go to disk with pwrite as they come (no writable mapping: a full disk is an
error, never SIGBUS); the slot table and the header are written last, so a file cut short by a crash has a
header that does not describe it (recovery then rebuilds it).

Compare mode runs the same computation against an existing file and only answers "would the bytes be
equal", which is how recovery decides that a file can be kept as it is.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from engine.broker.index.build import ITEM_DTYPE, slot_chains
from engine.broker.index.file import (HEADER, INDEX_HEADER_SIZE, ITEM_SIZE, SLOT_SIZE, check_index_geometry,
                                      index_file_size)
from engine.fsutil import is_zero, pread_fully, write_fully
from engine.java.lang import INT_MAX

_SEEDS = struct.Struct(">qqqq")
_IO_CHUNK = 1 << 20


def time_diffs(ts: np.ndarray, begin: int | None, seed_ts: int) -> np.ndarray:
    """timeDiff of a chunk of items (format §5.6). begin is item 1's store time, or None when the chunk starts
    with item 1 (whose timeDiff is taken against the seed of a rolled file). Java long arithmetic: the
    difference wraps, division truncates, negatives clamp to 0."""
    d = np.empty(len(ts), dtype=np.int64)
    rest = 0
    with np.errstate(over="ignore"):
        if begin is None and len(ts):
            first = (int(ts[0]) - seed_ts + 2**63) % 2**64 - 2**63
            d[0] = 0 if seed_ts <= 0 else min(max(first, 0) // 1000, INT_MAX)
            begin, rest = int(ts[0]), 1
        if begin is None or begin <= 0:
            d[rest:] = 0
        elif len(ts) > rest:
            tail = d[rest:]
            np.subtract(ts[rest:], np.int64(begin), out=tail)
            np.maximum(tail, 0, out=tail)
            tail //= 1000
            np.minimum(tail, INT_MAX, out=tail)
    return d.astype(np.int32)


class IndexFileBuilder:
    """One index file, item by item in put order: written to `path`, compared with the existing file `compare`,
    or (neither given) only counted."""

    def __init__(self, hash_slot_num: int, index_num: int, seed_phy: int = 0, seed_ts: int = 0, *,
                 path: Path | None = None, compare: Path | None = None):
        check_index_geometry(hash_slot_num, index_num)
        if path is not None and compare is not None:
            raise ValueError("give path or compare, not both")
        self.hash_slot_num, self.index_num = hash_slot_num, index_num
        self.seed_phy = seed_phy if seed_phy > 0 else 0
        self.seed_ts = seed_ts if seed_ts > 0 else 0
        self.size = index_file_size(hash_slot_num, index_num)
        self.items_base = INDEX_HEADER_SIZE + SLOT_SIZE * hash_slot_num
        self.heads = np.zeros(hash_slot_num, dtype=np.int32)
        self.count = 0            # items so far (item numbers 1..count)
        self.used_slots = 0
        self.begin_ts = self.begin_phy = self.end_ts = self.end_phy = 0
        self.comparing = compare is not None
        self.counting = path is None and compare is None
        self.equal = True         # compare mode: no difference seen yet
        self.path = Path(path if path is not None else compare) if not self.counting else None
        self.fd = None
        if self.counting:
            pass
        elif self.comparing:
            self.fd = os.open(self.path, os.O_RDONLY)
            self.equal = os.fstat(self.fd).st_size == self.size
        else:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            os.ftruncate(self.fd, self.size)

    @property
    def capacity(self) -> int:
        """Items this file still takes (a file holds index_num - 1 items, item 0 is never used)."""
        return self.index_num - 1 - self.count

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    # ------------------------------------------------------------------ items
    def resume(self, existing: Path, items: int, end_ts: int, same_file: bool = False) -> None:
        """Start from the first `items` items of an existing file (checked by the caller); end_ts is the store
        time of the record the last of them points at. same_file: comparing with `existing` itself (its prefix
        is not compared with itself; when every item is kept its slot table gives the heads)."""
        if self.count or items <= 0:
            raise ValueError("resume starts an empty builder from a non-empty prefix")
        fd = os.open(existing, os.O_RDONLY)
        try:
            head = HEADER.unpack(pread_fully(fd, HEADER.size, 0))
            self.begin_ts, self.begin_phy = head[0], head[2]
            if self.counting or (same_file and items + 1 == head[5]):
                self._resume_light(fd, items, head)
                self.end_ts = end_ts
                return
            for lo in range(0, items, 1 << 16):
                n = min(1 << 16, items - lo)
                pos = self.items_base + ITEM_SIZE * (lo + 1)
                raw = pread_fully(fd, n * ITEM_SIZE, pos)
                chunk = np.frombuffer(raw, dtype=ITEM_DTYPE)
                slots = chunk["hash"].astype(np.int64) % self.hash_slot_num
                np.maximum.at(self.heads, slots, np.arange(lo + 1, lo + n + 1, dtype=np.int32))
                if not same_file:
                    self._sink(raw, pos)
                self.end_phy = int(chunk["phy"][-1])
        finally:
            os.close(fd)
        self.count = items
        self.used_slots = int(np.count_nonzero(self.heads))
        self.end_ts = end_ts

    def _resume_light(self, fd: int, items: int, head: tuple) -> None:
        """resume() without copying: counting, or comparing a file with itself when all its items are kept."""
        self.count = items
        self.end_phy = struct.unpack(">q", pread_fully(fd, 8, self.items_base + ITEM_SIZE * items + 4))[0]
        if self.counting:
            return
        raw = pread_fully(fd, SLOT_SIZE * self.hash_slot_num, INDEX_HEADER_SIZE)
        self.heads = np.frombuffer(raw, dtype=">i4").astype(np.int32)
        self.used_slots = int(np.count_nonzero(self.heads))

    def add(self, java_hashes: np.ndarray, phys: np.ndarray, tss: np.ndarray) -> int:
        """Put keys (Java hashCodes, in put order) until the file is full; returns how many were taken."""
        n = min(len(java_hashes), self.capacity)
        if n <= 0:
            return 0
        kh = np.abs(np.asarray(java_hashes[:n], dtype=np.int32))
        kh[kh < 0] = 0  # abs(Integer.MIN_VALUE) stays negative in Java: the broker then uses 0
        phy = np.asarray(phys[:n], dtype=np.int64)
        ts = np.asarray(tss[:n], dtype=np.int64)
        slots = (kh % np.int32(self.hash_slot_num)).astype(np.uint32)
        prev, head_slots, head_items, _ = slot_chains(slots)
        base = self.count
        first_of_slot = prev == 0
        prev = prev.astype(np.int32)
        prev[~first_of_slot] += base
        prev[first_of_slot] = self.heads[slots[first_of_slot]]
        self.used_slots += int(np.count_nonzero(self.heads[head_slots] == 0))
        self.heads[head_slots] = head_items + base
        items = np.empty(n, dtype=ITEM_DTYPE)
        items["hash"] = kh
        items["phy"] = phy
        items["time_diff"] = time_diffs(ts, self.begin_ts if base else None, self.seed_ts)
        items["prev"] = prev
        self._sink(items.tobytes(), self.items_base + ITEM_SIZE * (base + 1))
        if base == 0:
            self.begin_ts, self.begin_phy = int(ts[0]), int(phy[0])
        self.end_ts, self.end_phy = int(ts[-1]), int(phy[-1])
        self.count += n
        return n

    def _sink(self, data: bytes, pos: int) -> None:
        if self.counting:
            return
        if not self.comparing:
            write_fully(self.fd, data, pos, self.path, undo=False)
        elif self.equal and pread_fully(self.fd, len(data), pos) != data:
            self.equal = False

    # ------------------------------------------------------------------ finish
    def header_bytes(self) -> bytes:
        if self.count == 0:
            # IndexFile.create with no put: the seeds in the header, indexCount still 0 on disk.
            return _SEEDS.pack(self.seed_ts, self.seed_ts, self.seed_phy, self.seed_phy) + bytes(8)
        return HEADER.pack(self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.used_slots,
                           self.count + 1)

    def finish(self, sync: bool = True) -> bool:
        """Write (or compare) the slot table and the header. Returns True in write and counting mode, and in
        compare mode whether the existing file has exactly these bytes."""
        if self.counting:
            return True
        step = _IO_CHUNK // SLOT_SIZE
        for lo in range(0, self.hash_slot_num, step):
            part = self.heads[lo:lo + step]
            pos = INDEX_HEADER_SIZE + SLOT_SIZE * lo
            if not self.comparing and not part.any():
                continue  # the file was created sparse: an all-zero part is already there
            self._sink(part.astype(">i4").tobytes(), pos)
        self._sink(self.header_bytes(), 0)
        if self.comparing:
            if self.equal:
                self.equal = is_zero(self.fd, self.items_base + ITEM_SIZE * (self.count + 1), self.size)
            return self.equal
        if sync:
            os.fsync(self.fd)
        return True


def build_index_file_chunked(path, java_hashes, phys, tss, hash_slot_num: int, index_num: int,
                             seed_phy: int = 0, seed_ts: int = 0, chunk: int = 1 << 20) -> int:
    """One whole file from arrays, a chunk at a time (what the bench generator and the tests use)."""
    b = IndexFileBuilder(hash_slot_num, index_num, seed_phy, seed_ts, path=Path(path))
    try:
        for lo in range(0, len(java_hashes), chunk):
            if b.add(java_hashes[lo:lo + chunk], phys[lo:lo + chunk], tss[lo:lo + chunk]) < min(chunk, len(
                    java_hashes) - lo):
                raise ValueError(f"{len(java_hashes)} entries do not fit an index file of {index_num} items")
        b.finish()
        return b.count
    finally:
        b.close()
