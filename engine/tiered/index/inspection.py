"""Looking into one tiered index file: the items of a slot (an unsealed chain walked with the shared ChainWalk, or
a compacted slot range), the walk of the slot a TOPIC#KEY hashes to, and slot/chain statistics.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from engine.broker.index.chain import BEYOND, END, OUTSIDE_FILE, ChainWalk
from engine.errors import InvalidArgumentError
from engine.tiered.index.chains import chain_lengths
from engine.tiered.index.format import (CITEM, COMPACT_INDEX_ITEM_SIZE, HASH_SLOT_SIZE, HEADER_SIZE,
                                        INDEX_ITEM_SIZE, INT, ITEM, ITEM_FIELDS, MAX_COMPACT_READ_ITEMS,
                                        MAX_QUERY_COUNT, SLOT, TieredIndexError, tiered_key_hash, tiered_slot)

# `f` below is an engine.tiered.index.file.IndexStoreFile, named in annotations only: file.py imports this module.


def check_slot(f: "IndexStoreFile", slot) -> int:
    if isinstance(slot, bool) or not isinstance(slot, (int, np.integer)):
        raise TieredIndexError("slot must be an integer")
    slot = int(slot)
    if not 0 <= slot < f.hash_slot_num:
        raise TieredIndexError(f"slot {slot} out of range 0..{f.hash_slot_num - 1}")
    return slot


def _item_dict(f: "IndexStoreFile", n: Optional[int], pos: int, data: bytes, compact: bool) -> dict:
    vals = CITEM.unpack(data) + (0,) if compact else ITEM.unpack(data)
    d = {"item": n, "position": pos}
    d.update(zip(ITEM_FIELDS, vals))
    d["slot"] = tiered_slot(d["hashCode"], f.hash_slot_num)
    return d


def walk_slot(f: "IndexStoreFile", slot: int, limit: int = MAX_QUERY_COUNT) -> tuple[list[dict], str]:
    """Items of one slot, newest first, and why the walk stopped.

    Unsealed stop reasons: ``empty`` (slot value <= 0), ``end`` (itemIndex <= 0), ``limit``,
    ``beyond_count`` (item number > indexItemCount; Java's query stops there too),
    ``out_of_range`` (item outside the file), ``cycle`` (an item seen twice).  Compacted files
    return the slot range's items with ``empty``/``end``/``limit``/``out_of_range``/``bad_length``.
    Each item dict has ``item`` (number; None for compacted), ``position``, the 7 fields and
    ``slot`` = the slot its hash belongs to.
    """
    f.check_open()
    if f.file_size < HEADER_SIZE:
        return [], "empty"
    slot = check_slot(f, slot)
    limit = max(0, int(limit))
    if f.layout == "compacted":
        return _walk_range(f, slot, limit)
    head = INT.unpack(f.read_bytes(HEADER_SIZE + HASH_SLOT_SIZE * slot, 4))[0]
    if head <= 0:
        return [], "empty"

    def read_item(n: int) -> Optional[dict]:
        pos = f.item_position(n)
        if pos < f.items_base or pos + INDEX_ITEM_SIZE > f.file_size:
            return None
        return _item_dict(f, n, pos, f.read_bytes(pos, INDEX_ITEM_SIZE), False)

    walk = ChainWalk(head, read_item, _prev_of, last=f.index_item_count, limit=limit)
    items = [item for _n, item in walk]
    return items, _stop_reason(walk, limit)


def _prev_of(item: dict) -> int:
    return item["itemIndex"]


def _stop_reason(walk: ChainWalk, limit: int) -> str:
    """ChainWalk's stop mapped onto walk_slot's reasons: a pointer <= 0 ends the chain even after the limit,
    otherwise the limit is reported before what the next link would have hit (beyond the count, a cycle)."""
    if walk.stop == END or (walk.stop == BEYOND and walk.at is not None and walk.at < 0):
        return "end"
    if walk.stop == OUTSIDE_FILE:
        return "out_of_range"
    if walk.visited >= limit:
        return "limit"
    if walk.stop == BEYOND:
        return "beyond_count"
    return "cycle"  # CYCLE or SELF: an item reached twice


def _walk_range(f: "IndexStoreFile", slot: int, limit: int) -> tuple[list[dict], str]:
    start, length, items = slot_range(f, slot)
    if length == 0:
        return [], "empty"
    reason = "end"
    if length < 0 or length % COMPACT_INDEX_ITEM_SIZE:
        reason = "bad_length"
    if len(items) * COMPACT_INDEX_ITEM_SIZE < max(length, 0) and reason == "end":
        reason = "out_of_range"
    if len(items) > limit:
        items, reason = items[:limit], "limit"
    return items, reason


def slot_range(f: "IndexStoreFile", slot: int) -> tuple[int, int, list[dict]]:
    """Compacted file: (itemsStart, itemsLength, items) of one slot; items only where they fit the file."""
    f.check_open()
    if f.layout != "compacted":
        raise TieredIndexError(f"{f.path}: slot_range() is for compacted files; use walk_slot()")
    if f.file_size < HEADER_SIZE:
        return 0, 0, []
    slot = check_slot(f, slot)
    p = HEADER_SIZE + HASH_SLOT_SIZE * slot
    if p + 8 > f.file_size:
        return 0, 0, []
    start, length = SLOT.unpack(f.read_bytes(p, 8))
    items = []
    if start > 0 and length > 0:
        for i in range(length // COMPACT_INDEX_ITEM_SIZE):
            q = start + i * COMPACT_INDEX_ITEM_SIZE
            if q + COMPACT_INDEX_ITEM_SIZE > f.file_size:
                break
            items.append(_item_dict(f, None, q, f.read_bytes(q, COMPACT_INDEX_ITEM_SIZE), True))
    return start, length, items


@dataclass
class SlotWalk:
    """One slot walked for inspection: by number, or the slot a TOPIC#KEY hashes to."""

    slot: int
    items: list[dict]
    stop: str                            # a walk_slot reason, or "negative_slot"
    key: Optional[str] = None            # TOPIC#KEY when walked by key
    hash_code: Optional[int] = None      # its tiered hash
    items_start: Optional[int] = None    # compacted files: the slot's range
    items_length: Optional[int] = None


def walk(f: "IndexStoreFile", slot: Optional[int], key: Optional[str], limit: int) -> SlotWalk:
    """Chain (unsealed) or slot range (compacted) of ``slot``, or of the slot ``key`` = TOPIC#KEY hashes to with
    the tiered rules. A negative slot (the key's hash is Integer.MIN_VALUE) is not walked: the broker reads a
    header word there (format §9.5)."""
    hc = None
    if key is not None:
        if "#" not in key:
            raise InvalidArgumentError(f"--walk-key takes TOPIC#KEY, got {key!r}")
        topic, k = key.split("#", 1)
        hc = tiered_key_hash(topic, k)
        slot = tiered_slot(hc, f.hash_slot_num)
    if slot is not None and slot < 0:
        return SlotWalk(slot, [], "negative_slot", key, hc)
    items, stop = walk_slot(f, slot, limit)
    res = SlotWalk(slot, items, stop, key, hc)
    if f.layout == "compacted":
        res.items_start, res.items_length, _ = slot_range(f, slot)
    return res


def stats(f: "IndexStoreFile", top: int = 10) -> dict:
    """Slot occupancy, chain-length histogram and longest chains (numpy over the whole tables)."""
    f.check_open()
    s = f.hash_slot_num
    if f.layout == "compacted":
        lens = f.read_slot_table()[:, 1]
        lengths = np.where(lens > 0, lens // COMPACT_INDEX_ITEM_SIZE, 0)
        cyclic_slots = 0
        cap = MAX_COMPACT_READ_ITEMS
    else:
        _heads, lengths, _nxt, _cyc = chain_lengths(f)
        cyclic_slots = int((lengths < 0).sum())
        cap = MAX_QUERY_COUNT
    occ = int((lengths != 0).sum())
    pos = lengths[lengths > 0]
    uniq, cnt = np.unique(pos, return_counts=True)
    order = np.argsort(-lengths, kind="stable")[: max(0, int(top))]
    longest = [(int(i), int(lengths[i])) for i in order if lengths[i] > 0]
    return {
        "layout": f.layout,
        "hashSlotNum": s,
        "indexNum": f.index_num,
        "indexItemCount": f.index_item_count,
        "usedSlots": occ,
        "emptySlots": s - occ,
        "occupancy": occ / s if s else 0.0,
        "chainedItems": int(pos.sum()),
        "meanChainLength": float(pos.mean()) if pos.size else 0.0,
        "maxChainLength": int(pos.max()) if pos.size else 0,
        "chainLengthHistogram": {int(k): int(v) for k, v in zip(uniq, cnt)},
        "longestChains": longest,
        "cyclicSlots": cyclic_slots,
        "queryCap": cap,
        "slotsOverQueryCap": int((lengths > cap).sum()),
    }
