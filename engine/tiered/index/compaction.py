"""Compaction of an unsealed tiered index file into the layout the broker uploads (``compactToNewFile``,
format §9.4): every slot's chain copied newest first into one contiguous range of 28-byte items.

Two planners give the same order: a vectorised one (list ranking by pointer jumping) for well-formed files and
the item-by-item walk of the Java loop for anything else (cycles, shared tails, odd pointers).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import numpy as np

from engine.java.lang import to_i32
from engine.tiered.index.chains import list_rank
from engine.tiered.index.format import (COMPACT_INDEX_ITEM_SIZE, END_MAGIC_CODE, HEADER, INDEX_ITEM_SIZE, INT,
                                        TieredIndexError)

# `f` below is an engine.tiered.index.file.IndexStoreFile, named in annotations only: file.py imports this module.

_WRITE_CHUNK = 1 << 18  # items per write: bounds the memory of a compaction to ~8 MiB of rows


def compact(f: "IndexStoreFile", dest_path, *, form: str = "uploaded", method: str = "auto") -> str:
    """Write the compacted form of unsealed file ``f`` to ``dest_path`` and return that path.

    ``form="uploaded"`` (default) writes what Java returns and uploads: bytes ``[0, end of the last
    item written)`` -- 0 bytes when no item is reachable.  ``form="mapped"`` writes the whole local
    ``compacting/`` file Java maps (``28 + 8*slots + 28*indexItemCount`` bytes); the two differ only
    when some counted items are unreachable (e.g. Integer.MIN_VALUE keys with 5 or 7 slots).
    ``method``: ``"auto"``/``"fast"`` (numpy, falls back to the item-by-item walk for files that are
    not well-formed) or ``"slow"`` (the item-by-item walk).  The caller marks the file SEALED.
    """
    f.check_open()
    if f.layout != "unsealed":
        raise TieredIndexError(f"{f.path}: only an unsealed file can be compacted")
    if form not in ("uploaded", "mapped"):
        raise TieredIndexError(f"form must be 'uploaded' or 'mapped', not {form!r}")
    if method not in ("auto", "fast", "slow"):
        raise TieredIndexError(f"method must be 'auto', 'fast' or 'slow', not {method!r}")
    w0 = f.items_base
    limit = to_i32(w0 + COMPACT_INDEX_ITEM_SIZE * f.index_item_count)
    if limit < w0:
        raise TieredIndexError(
            f"{f.path}: cannot compact: indexItemCount={f.index_item_count} gives a compacted size of "
            f"{limit} (Java fails to create the file)"
        )
    plan = plan_fast(f) if method != "slow" else None
    if plan is None:
        plan = plan_slow(f, limit)
    order, counts = plan
    dest_path = os.fspath(dest_path)
    if os.path.exists(dest_path) and os.path.samefile(dest_path, f.path):
        raise TieredIndexError(f"{dest_path}: compaction output would overwrite its source")
    Path(dest_path).parent.mkdir(parents=True, exist_ok=True)
    total = int(order.size)
    out_size = limit if form == "mapped" else (w0 + COMPACT_INDEX_ITEM_SIZE * total if total else 0)
    with open(dest_path, "wb") as out:
        if out_size:
            _write_compacted(f, out, order, counts)
            if w0 + COMPACT_INDEX_ITEM_SIZE * total < out_size:
                out.truncate(out_size)
    return dest_path


def _write_compacted(f: "IndexStoreFile", out, order: np.ndarray, counts: np.ndarray) -> None:
    """Header (END magic), slot table (itemsStart, itemsLength) and the items in ``order``, 28 bytes each."""
    w0 = f.items_base
    lens = counts.astype(np.int64) * COMPACT_INDEX_ITEM_SIZE
    table = np.empty((f.hash_slot_num, 2), dtype=">i4")
    table[:, 0] = w0 + np.cumsum(lens) - lens
    table[:, 1] = lens
    out.write(HEADER.pack(END_MAGIC_CODE, f.begin_timestamp, f.end_timestamp, f.hash_slot_count,
                          f.index_item_count))
    out.write(table.tobytes())
    for i in range(0, int(order.size), _WRITE_CHUNK):
        rows = f.read_item_rows(order[i : i + _WRITE_CHUNK])
        out.write(rows[:, :COMPACT_INDEX_ITEM_SIZE].tobytes())


def plan_fast(f: "IndexStoreFile") -> Optional[tuple[np.ndarray, np.ndarray]]:
    """Vectorised compaction order (item numbers, items per slot) for well-formed files, or None to fall back
    to the walk.

    Well-formed: every slot head in [0, count], every item's pointer strictly backward
    (0 <= itemIndex < n, so no cycles), and no item pointed at twice (chains disjoint).  Then every
    chain is a simple path; list ranking by pointer jumping gives each item its chain and depth.
    """
    n_items = f.index_item_count
    s = f.hash_slot_num
    max_items = (f.file_size - f.items_base) // INDEX_ITEM_SIZE
    if n_items < 0 or n_items >= max_items:
        return None
    heads = np.maximum(f.read_slot_table()[:, 0], 0)
    if heads.size and heads.max() > n_items:
        return None
    nxt = f.read_items(0, n_items + 1)["itemIndex"].astype(np.int64)
    nxt[0] = 0
    idx = np.arange(n_items + 1, dtype=np.int64)
    if n_items and ((nxt[1:] < 0).any() or (nxt[1:] >= idx[1:]).any()):
        return None
    edges = np.concatenate([heads[heads > 0], nxt[1:][nxt[1:] > 0]])
    if edges.size and np.bincount(edges, minlength=n_items + 1).max() > 1:
        return None
    rank, last = list_rank(nxt)
    head_slots = np.flatnonzero(heads > 0)
    head_items = heads[head_slots]
    slot_of_term = np.full(n_items + 1, -1, dtype=np.int64)
    slot_of_term[last[head_items]] = head_slots
    head_rank = np.zeros(s, dtype=np.int64)
    head_rank[head_slots] = rank[head_items]
    item_slot = slot_of_term[last[1:]]
    members = np.flatnonzero(item_slot >= 0) + 1
    m_slot = item_slot[members - 1]
    depth = head_rank[m_slot] - rank[members]
    order = members[np.lexsort((depth, m_slot))]
    counts = np.bincount(m_slot, minlength=s)
    return order.astype(np.int64), counts


def plan_slow(f: "IndexStoreFile", limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Item-by-item transcription of the Java loop: each slot's chain until a pointer <= 0 or the output
    reaches ``limit`` bytes (handles cycles, shared tails, odd pointers)."""
    s = f.hash_slot_num
    heads = f.read_slot_table()[:, 0]
    order: list[int] = []
    counts = np.zeros(s, dtype=np.int64)
    w = f.items_base
    for i in range(s):
        v = int(heads[i])
        c = 0
        while v > 0 and w < limit:
            pos = f.item_position(v)
            if pos < 0 or pos > f.file_size or f.file_size - pos < INDEX_ITEM_SIZE:
                raise TieredIndexError(
                    f"{f.path}: cannot compact: slot {i} chain reaches item {v} at byte {pos}, outside "
                    f"the {f.file_size}-byte file (Java's doCompaction fails and returns null)"
                )
            order.append(v)
            v = INT.unpack(f.read_bytes(pos + 28, 4))[0]
            w += COMPACT_INDEX_ITEM_SIZE
            c += 1
        counts[i] = c
    return np.asarray(order, dtype=np.int64), counts
