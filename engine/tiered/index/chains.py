"""Whole-file chain analysis of unsealed tiered index files with numpy (no per-item Python loop): list ranking
by pointer jumping, shared by compaction (the order items are copied in), stats and verify (chain lengths,
cycles). Walking one chain item by item is ChainWalk's job (engine.broker.index.chain).
"""
from __future__ import annotations

import math

import numpy as np

from engine.tiered.index.format import INDEX_ITEM_SIZE

# `f` below is an engine.tiered.index.file.IndexStoreFile, named in annotations only: file.py imports this module.


def list_rank(nxt: np.ndarray, detect_cycles: bool = False):
    """Pointer jumping over ``nxt`` (0 = end; entry 0 is the sink).

    Returns ``rank`` (nodes from n to the end of its path, inclusive) and ``last`` (the path's final
    node); with ``detect_cycles`` also a boolean array of nodes whose path never ends.
    """
    n = nxt.size
    nx = nxt.astype(np.int64).copy()
    nx[0] = 0
    rank = np.ones(n, dtype=np.int64)
    rank[0] = 0
    last = np.arange(n, dtype=np.int64)
    rounds = max(1, math.ceil(math.log2(max(n, 2)))) + 2
    for _ in range(rounds):
        active = nx != 0
        if not active.any():
            break
        rank = rank + rank[nx]
        last = np.where(active, last[nx], last)
        nx = nx[nx]
    if detect_cycles:
        return rank, last, nx != 0
    return rank, last


def chain_lengths(f: "IndexStoreFile"):
    """Unsealed: per-slot chain length as Java walks it (pointers in 1..count), -1 for cyclic chains.

    Returns (slot heads, lengths, next pointer per item with out-of-range pointers set to 0, cyclic per item).
    """
    count = max(f.index_item_count, 0)
    max_items = (f.file_size - f.items_base) // INDEX_ITEM_SIZE
    count = min(count, max_items - 1)
    heads = f.read_slot_table()[:, 0]
    nxt = f.read_items(0, count + 1)["itemIndex"].astype(np.int64)
    nxt[0] = 0
    nxt[(nxt < 0) | (nxt > count)] = 0
    rank, _last, cyclic = list_rank(nxt, detect_cycles=True)
    valid = (heads > 0) & (heads <= count)
    lengths = np.zeros(heads.size, dtype=np.int64)
    hv = heads[valid]
    lengths[valid] = rank[hv]
    cyc = np.zeros(heads.size, dtype=bool)
    cyc[valid] = cyclic[hv]
    lengths[cyc] = -1
    return heads, lengths, nxt, cyclic
