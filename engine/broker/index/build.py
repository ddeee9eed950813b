"""Vectorized index writing (format §5.6, §5.8): a whole IndexFile in one pass, and a run of puts appended to an
open file. Both give the bytes of IndexFile.put_hash called once per item, in order.

Chains come from one sort by slot: within a slot, items in put order; each item's predecessor is its left
neighbour in that order, the newest item of a slot is its head.
"""
from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

import numpy as np

from engine.broker.index.file import (HEADER, INDEX_HEADER_SIZE, ITEM_FIELDS, ITEM_SIZE, SLOT_SIZE, IndexFile,
                                      check_index_geometry, index_file_size)
from engine.fsutil import allocate, write_fully
from engine.errors import InvalidArgumentError
from engine.java.hashes import java_string_hashes
from engine.java.lang import INT_MAX, INT_MIN

ITEM_DTYPE = np.dtype(ITEM_FIELDS)


def index_hashes(java_hashes: np.ndarray) -> np.ndarray:
    """abs(hashCode) per key, Integer.MIN_VALUE forced to 0 (format §5.5); int32 in, int32 out."""
    kh = np.abs(java_hashes)  # abs(MIN_VALUE) stays MIN_VALUE in int32: the broker then uses 0
    kh[kh < 0] = 0
    return kh


#: Up to this many items the slot order is a radix sort (slot_order); above it, one sort of 64-bit composites
#: (_sorted_by_slot), whose sequential passes cost less than the radix passes' random gathers once the
#: arrays are far bigger than the CPU caches (measured: 13% faster at 3M items, 15% slower at 20M).
RADIX_MAX_ITEMS = 1 << 23


def slot_order(slots: np.ndarray) -> np.ndarray:
    """The stable order of items by slot (put order within a slot), as an LSD radix sort: two stable argsorts of
    16-bit digits, which numpy does by counting (linear), where a comparison sort of n 64-bit keys is not."""
    low = np.argsort((slots & 0xFFFF).astype(np.uint16), kind="stable")
    high = (slots[low] >> 16).astype(np.uint16)  # slots < 2^31 (hashSlotNum is a Java int)
    return low[np.argsort(high, kind="stable")]


def _sorted_by_slot(slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(item numbers 1..N, their slots) ordered by slot, then put order: as slot_order gives them."""
    n = len(slots)
    if n <= RADIX_MAX_ITEMS:
        order = slot_order(slots)
        item_sorted = order.astype(np.uint32)
        item_sorted += 1
        return item_sorted, slots[order].astype(np.uint32)
    # One sort of the unique composites slot<<32 | item, built as two 32-bit words (no 64-bit arithmetic).
    comp = np.empty(n, dtype=np.uint64)
    halves = comp.view(np.uint32).reshape(n, 2)
    hi, lo = (1, 0) if np.little_endian else (0, 1)
    halves[:, hi] = slots
    halves[:, lo] = np.arange(1, n + 1, dtype=np.uint32)
    comp.sort()
    return halves[:, lo], halves[:, hi]


def slot_chains(slots: np.ndarray):
    """Chain structure of items 1..N (in put order) hashed to `slots`.

    Items ordered by slot and, within a slot, by put order (_sorted_by_slot); each item's predecessor in its
    slot is then its left neighbour when the slot matches. Returns (prev per item, head slots, head items,
    occupied slot count).
    """
    n = len(slots)
    if n == 0:
        e = np.empty(0, dtype=np.int32)
        return e, e, e, 0
    item_sorted, slot_sorted = _sorted_by_slot(slots)
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


def _time_diffs_against(ts: np.ndarray, begin: int) -> np.ndarray:
    """timeDiff of items against one begin timestamp (format §5.6), int64: Java long difference (the subtraction wraps
    in int64), truncating division, a negative quotient clamped to 0 (so max(delta, 0) // 1000 is the same)."""
    if begin <= 0:
        return np.zeros(len(ts), dtype=np.int64)
    d = np.subtract(ts, np.int64(begin))
    np.maximum(d, 0, out=d)
    d //= 1000
    np.minimum(d, INT_MAX, out=d)
    return d


def _time_diffs(ts: np.ndarray, begin: int, first_item: bool) -> np.ndarray:
    """timeDiff of a run of puts into a file whose header begin is `begin`. When the run starts the file
    (first_item), item 1 is taken against `begin` (the seed) and the rest against item 1's own time, which
    becomes the header's begin (format §5.6)."""
    if not first_item or len(ts) == 0:
        return _time_diffs_against(ts, begin).astype(np.int32)
    d = np.empty(len(ts), dtype=np.int64)
    d[:1] = _time_diffs_against(ts[:1], begin)
    d[1:] = _time_diffs_against(ts[1:], int(ts[0]))
    return d.astype(np.int32)


def _as_int32_hashes(java_hashes) -> np.ndarray:
    hashes = np.asarray(java_hashes)
    if hashes.dtype != np.int32:
        hashes = hashes.astype(np.int64)
        if len(hashes) and (hashes.min() < INT_MIN or hashes.max() > INT_MAX):
            raise InvalidArgumentError("Java hashCodes must be 32-bit signed integers")
        hashes = hashes.astype(np.int32)
    return hashes


def build_index_file_from_hashes(path, java_hashes, phy_offsets, store_timestamps, hash_slot_num: int,
                                 index_num: int, end_phy_offset: int = 0, end_timestamp: int = 0) -> int:
    """Write a whole index file in one pass from per-entry Java hashCodes; equals put_key in a loop.

    The file is created full size (sparse: what is written is allocated first), then the header, the slot heads
    and items 1..N are written through one mapping; the bytes are those of IndexFile.create(..., seeds) + put_key per entry.
    """
    check_index_geometry(hash_slot_num, index_num)
    hashes = _as_int32_hashes(java_hashes)
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
        # Sparse, as the broker's: only the pages written through the mapping below are allocated (the header,
        # the slot table, the items), before it is mapped.
        os.ftruncate(fd, size)
        if n == 0:
            # IndexFile.create with no put: the seeds in the header, indexCount still 0 on disk.
            write_fully(fd, struct.pack(">qqqq", seed_ts, seed_ts, seed_phy, seed_phy), 0, path, undo=False)
            return 0
        kh = index_hashes(hashes)
        # The chains first: their sort's temporaries are gone before the file's pages are written.
        prev, head_slots, head_items, used = slot_chains(kh % np.int32(hash_slot_num))
        d = _time_diffs(ts, seed_ts, first_item=True)
        allocate(fd, 0, items_base + ITEM_SIZE * min(n + 2, index_num), path)  # and the item after the last
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


def append_puts(f: IndexFile, java_hashes: np.ndarray, phy: np.ndarray, ts: np.ndarray) -> None:
    """put_hash for each entry in order, vectorized, into a writable file with room for all of them.

    Equal byte for byte to the loop: item m (m = indexCount at its put) links to the slot's previous item in
    this run, or else to the slot's value on disk when that is in 1..m (put_hash's head rule, which a damaged
    slot value can also pass); hashSlotCount counts the puts that found no head; the header is then what
    put_hash leaves in memory, and in memory it always equals the disk once a put has happened.
    """
    k = len(java_hashes)
    if k == 0:
        return
    if not f.writable:
        raise InvalidArgumentError(f"index file {f.path} is open read-only")
    h = f.header
    m0 = h.indexCount
    if m0 + k > f.index_num:
        raise InvalidArgumentError(f"{k} puts do not fit index file {f.path} ({f.index_num - m0} left)")
    kh = index_hashes(_as_int32_hashes(java_hashes))
    slots = (kh % np.int32(f.hash_slot_num)).astype(np.int64)
    local_prev, head_slots, head_items, _used = slot_chains(slots)
    f.ensure_items(m0 + k)  # the items' pages are allocated before they are touched
    slot_view = f.slots_array()
    items = f.items_view(m0, k)
    try:
        numbers = np.arange(m0, m0 + k, dtype=np.int64)  # item number of each put
        first = local_prev == 0
        on_disk = slot_view[slots[first]].astype(np.int64)
        disk_head = np.where((on_disk > 0) & (on_disk <= numbers[first]), on_disk, 0)
        prev = np.where(first, 0, local_prev.astype(np.int64) - 1 + m0)
        prev[first] = disk_head
        items["hash"] = kh
        items["phy"] = phy
        items["time_diff"] = _time_diffs(ts, h.beginTimestamp, first_item=m0 <= 1)
        items["prev"] = prev
        slot_view[head_slots] = head_items.astype(np.int64) - 1 + m0
        found_no_head = int(np.count_nonzero(disk_head == 0))
    finally:
        del slot_view, items
    if m0 <= 1:
        h.beginPhyOffset, h.beginTimestamp = int(phy[0]), int(ts[0])
    h.hashSlotCount += found_no_head
    h.indexCount += k
    h.endPhyOffset, h.endTimestamp = int(phy[-1]), int(ts[-1])
    f.write_header()


def indexed_records(phy: np.ndarray, key_counts: np.ndarray, end_phy_offset: int) -> np.ndarray:
    """Which records of a run buildIndex indexes (format §5.8, pitfall 23): a record is skipped as already
    indexed when its offset is below the current file's endPhyOffset, which each record that puts a key moves
    to its own offset. Offsets are >= 0, so a roll (seeded with the previous endPhyOffset, or 0) never moves it;
    the check therefore compares with the running maximum of the offsets of earlier records with keys."""
    keyed = key_counts > 0
    floor = np.where(keyed, phy, np.int64(np.iinfo(np.int64).min))
    np.maximum.accumulate(floor, out=floor)
    before = np.empty_like(floor)
    before[0] = end_phy_offset
    np.maximum(floor[:-1], np.int64(end_phy_offset), out=before[1:])
    return keyed & (phy >= before)
