"""Index file statistics and verification (the `inspect-index --stats/--verify` engine side)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.broker.commitlog import CommitLog
from engine.broker.indexfile import IndexFile
from engine.java.lang import index_hash, java_string_hash
from engine.broker.message import VALID


def index_stats(f: IndexFile, top: int = 10) -> dict:
    """Slot occupancy, chain-length histogram and the longest chains, computed from the arrays."""
    slots = f.slots_array()
    items = f.items_array()
    n_items = len(items)
    occupied = int(np.count_nonzero(slots))
    if n_items:
        hashes = items["hash"].astype(np.int64)
        item_slots = np.where(hashes >= 0, hashes % f.hash_slot_num, 0)
        counts = np.bincount(item_slots, minlength=f.hash_slot_num)
    else:
        counts = np.zeros(f.hash_slot_num, dtype=np.int64)
    used = counts[counts > 0]
    hist_vals, hist_counts = np.unique(used, return_counts=True) if len(used) else ([], [])
    longest_idx = np.argsort(-counts, kind="stable")[:top] if len(counts) else []
    longest = [{"slot": int(s), "length": int(counts[s])} for s in longest_idx if counts[s] > 0]
    return {
        "file": f.path.name,
        "hashSlotNum": f.hash_slot_num,
        "indexNum": f.index_num,
        "items": n_items,
        "occupiedSlots": occupied,
        "slotOccupancy": occupied / f.hash_slot_num,
        "fill": n_items / (f.index_num - 1),
        "meanChainLength": float(used.mean()) if len(used) else 0.0,
        "maxChainLength": int(used.max()) if len(used) else 0,
        "chainLengthHistogram": {int(v): int(c) for v, c in zip(hist_vals, hist_counts)},
        "longestChains": longest,
    }


@dataclass
class VerifyReport:
    file: str
    items_checked: int = 0
    problems: list[str] = field(default_factory=list)
    problem_count: int = 0
    max_listed: int = 200

    def add(self, msg: str) -> None:
        self.problem_count += 1
        if len(self.problems) < self.max_listed:
            self.problems.append(msg)

    @property
    def ok(self) -> bool:
        return self.problem_count == 0

    def as_dict(self) -> dict:
        return {"file": self.file, "itemsChecked": self.items_checked, "ok": self.ok,
                "problemCount": self.problem_count, "problems": self.problems}


def verify_index_file(f: IndexFile, commitlog: CommitLog | None, seeded_item1: bool | None = None) -> VerifyReport:
    """Structural checks, then every item against the commit log when one is given.

    Structure: indexCount in range, every chain pointer goes to an older item of the same slot, slot heads are
    the newest item of their slot, header counts and offsets agree with the items.
    Commit log: the offset holds a valid message whose topic#key set has a key with the item's hash, and the
    decoded time is the message's store time floored to whole seconds from the header begin time.
    """
    rep = VerifyReport(f.path.name)
    h = f.header
    if f.on_disk_index_count < 0 or h.indexCount > f.index_num:
        rep.add(f"header indexCount {f.on_disk_index_count} is outside 0..{f.index_num}")
    items = f.items_array()
    n = len(items)
    rep.items_checked = n
    if n == 0:
        return rep
    hashes = items["hash"].astype(np.int64)
    prev = items["prev"].astype(np.int64)
    tdiff = items["time_diff"].astype(np.int64)
    phys = items["phy"].astype(np.int64)
    nums = np.arange(1, n + 1)
    for i in np.flatnonzero(hashes < 0)[:50]:
        rep.add(f"item {i + 1}: negative key hash {hashes[i]} (the broker stores abs(hash))")
    item_slots = np.where(hashes >= 0, hashes % f.hash_slot_num, -1)
    bad_prev = (prev < 0) | (prev >= nums)
    for i in np.flatnonzero(bad_prev)[:50]:
        rep.add(f"item {i + 1}: prevIndex {prev[i]} does not point at an older item")
    ok_prev = ~bad_prev & (prev > 0)
    mism = np.flatnonzero(ok_prev & (item_slots[np.clip(prev - 1, 0, n - 1)] != item_slots))
    for i in mism[:50]:
        rep.add(f"item {i + 1}: prevIndex {prev[i]} is an item of another slot")
    for i in np.flatnonzero(tdiff < 0)[:50]:
        rep.add(f"item {i + 1}: negative timeDiff {tdiff[i]}")
    # Slot heads: the newest item of each slot.
    slots = f.slots_array().astype(np.int64)
    valid_slot_items = item_slots >= 0
    expected_heads = np.zeros(f.hash_slot_num, dtype=np.int64)
    np.maximum.at(expected_heads, item_slots[valid_slot_items], nums[valid_slot_items])
    bad_heads = np.flatnonzero(slots != expected_heads)
    for s in bad_heads[:50]:
        rep.add(f"slot {s}: head is item {slots[s]}, expected item {expected_heads[s]}")
    if len(bad_heads) > 50:
        rep.problem_count += len(bad_heads) - 50
    distinct = int(np.count_nonzero(expected_heads))
    if h.hashSlotCount != distinct:
        rep.add(f"header hashSlotCount {h.hashSlotCount} but {distinct} slots are in use")
    if h.beginPhyOffset != phys[0]:
        rep.add(f"header beginPhyOffset {h.beginPhyOffset} but item 1 is at {phys[0]}")
    if h.endPhyOffset != phys[-1]:
        rep.add(f"header endPhyOffset {h.endPhyOffset} but the last item is at {phys[-1]}")
    decoded = h.beginTimestamp + tdiff * 1000
    if commitlog is None:
        return rep
    cache: dict[int, object] = {}
    for i in range(n):
        off = int(phys[i])
        rec = cache.get(off)
        if rec is None:
            r = commitlog.check_at(off, check_crc=True)
            if r.status != VALID:
                rec = r.reason or r.status
            elif r.record.physical_offset != off:
                rec = f"record there says it is at {r.record.physical_offset}"
            else:
                rec = r.record
            cache[off] = rec
            if len(cache) > 100_000:
                cache.clear()
        if isinstance(rec, str):
            rep.add(f"item {i + 1}: phyOffset {off} is not a valid message ({rec})")
            continue
        key_hashes = {index_hash(java_string_hash(k)) for k in rec.index_keys()}
        if int(hashes[i]) not in key_hashes:
            rep.add(f"item {i + 1}: no key of the message at {off} ({rec.topic}) has hash {hashes[i]}")
        ts = rec.store_timestamp
        if i == 0:
            if h.beginTimestamp != ts:
                rep.add(f"item 1: header beginTimestamp {h.beginTimestamp} but the message was stored at {ts}")
            continue  # item 1's timeDiff is relative to the seed of a rolled file (§5.6)
        if h.beginTimestamp > 0 and not (decoded[i] <= ts < decoded[i] + 1000) and ts >= h.beginTimestamp:
            rep.add(f"item {i + 1}: decoded time {decoded[i]} does not match store time {ts}")
    last = cache.get(int(phys[-1]))
    if not isinstance(last, str) and last is not None and h.endTimestamp != last.store_timestamp:
        rep.add(f"header endTimestamp {h.endTimestamp} but the last item's message was stored at {last.store_timestamp}")
    return rep
