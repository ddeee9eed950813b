"""Slot statistics of one index file, streamed: `inspect-index --stats` on a 20M-item file (400 MB of items)
reads it in bounded chunks, so memory does not grow with the file.

Memory: one chunk of items (CHUNK_ITEMS x 20 bytes, plus its slots: about 30 MiB) and the per-slot counts of one
slot range (SLOT_RANGE slots, int64: 64 MiB); files with more slots than SLOT_RANGE (the default geometry has
5,000,000) are counted range by range, one pass over the items each. Reads are pread calls bounded by the file's
real size (no mapping, so no SIGBUS if the file shrinks under us).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from engine.broker.index.build import ITEM_DTYPE
from engine.broker.index.file import INDEX_HEADER_SIZE, ITEM_SIZE, SLOT_SIZE, IndexFile
from engine.progress import Progress, no_progress

CHUNK_ITEMS = 1 << 20
SLOT_RANGE = 8 << 20



def _occupied_slots(f: IndexFile) -> int:
    n = 0
    for a in range(0, f.hash_slot_num, CHUNK_ITEMS):
        k = min(CHUNK_ITEMS, f.hash_slot_num - a)
        raw = f.pread(SLOT_SIZE * k, INDEX_HEADER_SIZE + SLOT_SIZE * a)
        n += int(np.count_nonzero(np.frombuffer(raw, dtype=">i4")))
    return n


def _item_slots(f: IndexFile, n_items: int, progress: Progress, done_before: int, total: int):
    """The slot of each item 1..n_items, a chunk at a time (negative hashes count for slot 0, as before)."""
    base = f.items_base + ITEM_SIZE  # item 1
    for a in range(0, n_items, CHUNK_ITEMS):
        k = min(CHUNK_ITEMS, n_items - a)
        items = np.frombuffer(f.pread(ITEM_SIZE * k, base + ITEM_SIZE * a), dtype=ITEM_DTYPE)
        hashes = items["hash"].astype(np.intp)
        del items
        np.maximum(hashes, 0, out=hashes)  # a negative hash counts for slot 0
        hashes %= f.hash_slot_num
        yield hashes
        progress("stats", done_before + a + k, total)


def index_file_stats(f: IndexFile, top: int = 10, progress: Optional[Progress] = None) -> dict:
    """Slot occupancy, chain-length histogram (items per slot) and the `top` longest chains of one file."""
    progress = progress or no_progress
    n_items = max(min(f.header.indexCount, f.index_num) - 1, 0)
    ranges = [(a, min(a + SLOT_RANGE, f.hash_slot_num)) for a in range(0, f.hash_slot_num, SLOT_RANGE)]
    total = n_items * len(ranges)
    hist = np.zeros(1, dtype=np.int64)
    longest: list[tuple[int, int]] = []  # (-length, slot), best first
    for i, (a, b) in enumerate(ranges):
        counts = np.zeros(b - a, dtype=np.int64)
        for slots in _item_slots(f, n_items, progress, i * n_items, total):
            inside = slots if len(ranges) == 1 else slots[(slots >= a) & (slots < b)] - a
            np.add.at(counts, inside, 1)  # in place: no slot-table-sized temporary per chunk
        hist = _add(hist, np.bincount(counts))
        longest = sorted(longest + _top_slots(counts, a, top))[:top]
        del counts
    progress("stats", total, total)
    used = int(hist[1:].sum())
    lengths = np.nonzero(hist[1:])[0] + 1
    return {
        "file": f.path.name,
        "hashSlotNum": f.hash_slot_num,
        "indexNum": f.index_num,
        "items": n_items,
        "occupiedSlots": (occupied := _occupied_slots(f)),
        "slotOccupancy": occupied / f.hash_slot_num,
        "fill": n_items / (f.index_num - 1),
        "meanChainLength": n_items / used if used else 0.0,
        "maxChainLength": int(lengths[-1]) if used else 0,
        "chainLengthHistogram": {int(v): int(hist[v]) for v in lengths},
        "longestChains": [{"slot": s, "length": -neg} for neg, s in longest],
    }


def _add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if len(b) > len(a):
        a, b = b.astype(np.int64), a
    a[:len(b)] += b
    return a


def _top_slots(counts: np.ndarray, offset: int, top: int) -> list[tuple[int, int]]:
    """The `top` largest non-zero counts as (-length, slot): longest first, then lowest slot (a stable sort)."""
    if top <= 0 or not len(counts):
        return []
    k = min(top, len(counts))
    floor = max(int(np.partition(counts, len(counts) - k)[len(counts) - k]), 1)  # the k-th largest, or 1
    above = np.nonzero(counts > floor)[0]  # fewer than k slots
    ties = np.nonzero(counts == floor)[0][:k - len(above)]  # the lowest slots of the k-th length
    return sorted((-int(counts[s]), int(s) + offset) for s in np.concatenate([above, ties]))[:top]
