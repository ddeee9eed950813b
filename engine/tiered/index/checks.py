"""Structural check of one tiered index file (inspect-index --verify on tiered files): header against slot table
and items, chains (unsealed) or slot ranges (compacted), each problem one line. No commit log is needed; the
checks are vectorised over the whole tables (format §9.2-§9.4).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from engine.tiered.index.chains import chain_lengths
from engine.tiered.index.format import (BEGIN_MAGIC_CODE, COMPACT_INDEX_ITEM_SIZE, END_MAGIC_CODE, HEADER,
                                        HEADER_SIZE, INDEX_ITEM_SIZE, hex32, magic_name)

# `f` below is an engine.tiered.index.file.IndexStoreFile, named in annotations only: file.py imports this module.


class _Problems:
    """Collects problems; a group of offending entries becomes one line with at most ``max_examples`` shown."""

    def __init__(self, max_examples: int):
        self.lines: list[str] = []
        self.max_examples = max_examples

    def add(self, line: str) -> None:
        self.lines.append(line)

    def report(self, kind: str, bad: list, fmt: Callable) -> None:
        if not bad:
            return
        shown = ", ".join(fmt(x) for x in bad[: self.max_examples])
        more = f" (+{len(bad) - self.max_examples} more)" if len(bad) > self.max_examples else ""
        self.lines.append(f"{kind}: {shown}{more}")


def verify(f: "IndexStoreFile", max_examples: int = 10) -> list[str]:
    """Structural problems as one-line strings (empty list = consistent)."""
    f.check_open()
    out = _Problems(max_examples)
    if f.file_size < HEADER_SIZE:
        return out.lines  # an empty upload (no reachable item) is legitimate
    magic, _begin, _end, h_slots, h_count = HEADER.unpack(f.read_bytes(0, HEADER_SIZE))
    if magic not in (BEGIN_MAGIC_CODE, END_MAGIC_CODE):
        out.add(f"bad magic {hex32(magic)}")
    if h_count < 0:
        out.add(f"header indexItemCount is negative ({h_count})")
    if h_slots < 0:
        out.add(f"header hashSlotCount is negative ({h_slots})")
    if f.layout == "compacted":
        _verify_compacted(f, out, magic, h_slots, h_count)
    else:
        _verify_unsealed(f, out, magic, h_slots, h_count)
    return out.lines


# ---- unsealed ---------------------------------------------------------------------------------------


def _verify_unsealed(f: "IndexStoreFile", out: _Problems, magic: int, h_slots: int, h_count: int) -> None:
    m = f.index_num
    if h_count > m - 1:
        out.add(f"header indexItemCount {h_count} exceeds the capacity {m - 1} (index_num {m} - 1)")
    expect_end = m == h_count + 1
    if magic in (BEGIN_MAGIC_CODE, END_MAGIC_CODE) and (magic == END_MAGIC_CODE) != expect_end:
        out.add(
            f"magic is {magic_name(magic)} but indexItemCount+1 {'==' if expect_end else '!='} index_num "
            f"({h_count}+1 vs {m})"
        )
    tab = f.read_slot_table()
    heads, hi = tab[:, 0], tab[:, 1]
    count = min(max(h_count, 0), m - 1)
    out.report("slots with nonzero upper word (unused in this layout)", np.flatnonzero(hi != 0).tolist(), str)
    out.report("slots with a negative value", np.flatnonzero(heads < 0).tolist(), lambda i: f"{i}={heads[i]}")
    out.report("slots pointing past indexItemCount", np.flatnonzero(heads > count).tolist(),
               lambda i: f"{i}->{heads[i]}")
    used = int((heads > 0).sum())
    if used != h_slots:
        out.add(f"header hashSlotCount {h_slots} != {used} non-empty slots")
    items = f.read_items(0, m)
    if items.size and items[0].tobytes() != bytes(INDEX_ITEM_SIZE):
        out.add("item 0 is not all zero (it is never used)")
    tail = items[count + 1 :]
    if tail.size:
        nz = np.flatnonzero(np.frombuffer(tail.tobytes(), dtype=np.uint8).reshape(-1, 32).any(axis=1))
        out.report("non-zero items after indexItemCount (count disagrees with the item table)",
                   (nz + count + 1).tolist(), str)
    if count == 0:
        return
    body = items[1 : count + 1]
    nums = np.arange(1, count + 1, dtype=np.int64)
    ptr = body["itemIndex"].astype(np.int64)
    out.report("items pointing outside 0..indexItemCount", nums[(ptr < 0) | (ptr > count)].tolist(),
               lambda n: f"{n}->{int(ptr[n - 1])}")
    out.report("items pointing forward (not to an older item)", nums[(ptr >= nums) & (ptr <= count)].tolist(),
               lambda n: f"{n}->{int(ptr[n - 1])}")
    _h, lengths, nxt, _cyclic = chain_lengths(f)
    out.report("slots whose chain has a cycle", np.flatnonzero(lengths < 0).tolist(), str)
    _verify_chain_membership(f, out, heads, body, count, nxt)


def _verify_chain_membership(f: "IndexStoreFile", out: _Problems, heads: np.ndarray, body: np.ndarray,
                             count: int, nxt: np.ndarray) -> None:
    """Slot heads hold items of their slot, links stay within a slot, chains do not merge, every item is
    reachable from a slot."""
    s = f.hash_slot_num
    nums = np.arange(1, count + 1, dtype=np.int64)
    ptr = body["itemIndex"].astype(np.int64)
    hashes = body["hashCode"].astype(np.int64)
    exp_slot = np.fmod(hashes, s)  # Java % (sign of the dividend)
    valid_heads = np.flatnonzero((heads > 0) & (heads <= count))
    wrong_head = [int(i) for i in valid_heads if exp_slot[heads[i] - 1] != i]
    out.report(
        "slots whose newest item hashes to another slot",
        wrong_head,
        lambda i: (f"slot {i} item {int(heads[i])} (hash {int(hashes[heads[i] - 1])} -> "
                   f"slot {int(exp_slot[heads[i] - 1])})"),
    )
    linked = (ptr > 0) & (ptr <= count)
    src = nums[linked]
    dst = ptr[linked]
    bad_link = src[exp_slot[src - 1] != exp_slot[dst - 1]]
    out.report(
        "items whose chain link crosses slots (hash does not land in the chain's slot)",
        bad_link.tolist(),
        lambda n: f"{n}(slot {int(exp_slot[n - 1])})->{int(ptr[n - 1])}(slot {int(exp_slot[ptr[n - 1] - 1])})",
    )
    indeg = np.bincount(np.concatenate([heads[(heads > 0) & (heads <= count)], dst]), minlength=count + 1)
    out.report("items reached from more than one place (chains merge)",
               (np.flatnonzero(indeg[1:] > 1) + 1).tolist(), str)
    unreachable = _unreachable(heads, nxt, count)

    def fmt_unreach(n):
        h = int(hashes[n - 1])
        sl = int(exp_slot[n - 1])
        why = f" (hash {h} -> slot {sl}: position {28 + 8 * sl} is in the header, Java quirk)" if sl < 0 else ""
        return f"{n}{why}"

    out.report("items not reachable from any slot", unreachable, fmt_unreach)


def _unreachable(heads: np.ndarray, nxt: np.ndarray, count: int) -> list[int]:
    """Items no slot's chain reaches, by pointer doubling: after round k every node within 2^k steps of a head
    is marked (O(N log N), also terminates on cycles)."""
    reach = np.zeros(count + 1, dtype=bool)
    reach[heads[(heads > 0) & (heads <= count)]] = True
    jump = nxt.copy()
    for _ in range(max(1, math.ceil(math.log2(count + 1))) + 1):
        reach[jump[np.flatnonzero(reach)]] = True
        jump = jump[jump]
    reach[0] = True
    return (np.flatnonzero(~reach[1:]) + 1).tolist()


# ---- compacted --------------------------------------------------------------------------------------


def _verify_compacted(f: "IndexStoreFile", out: _Problems, magic: int, h_slots: int, h_count: int) -> None:
    s, size, base = f.hash_slot_num, f.file_size, f.items_base
    if magic != END_MAGIC_CODE:
        out.add(f"compacted file has magic {magic_name(magic)} (expected END)")
    if base > size:
        out.add(f"slot table ({s} slots, ends at {base}) is longer than the file ({size} bytes)")
        return
    tab = f.read_slot_table()
    starts, lens = tab[:, 0], tab[:, 1]
    _verify_ranges(out, starts, lens, base, size)
    total = int(lens[lens > 0].sum())
    n_items = total // COMPACT_INDEX_ITEM_SIZE
    if n_items != h_count:
        out.add(
            f"slot ranges hold {n_items} items but header indexItemCount is {h_count}"
            + (" (unreachable items are not compacted)" if n_items < h_count else "")
        )
    if size not in (base + total, base + COMPACT_INDEX_ITEM_SIZE * max(h_count, 0)):
        out.add(
            f"file size {size} is neither slot table + items ({base + total}) nor the mapped size "
            f"{base + COMPACT_INDEX_ITEM_SIZE * max(h_count, 0)}"
        )
    used = int((lens > 0).sum())
    if used != h_slots:
        out.add(f"header hashSlotCount {h_slots} != {used} non-empty slots")
    _verify_range_hashes(f, out, starts, lens)


def _verify_ranges(out: _Problems, starts: np.ndarray, lens: np.ndarray, base: int, size: int) -> None:
    """Each slot range well-formed, inside the item area, not overlapping, contiguous with the previous one."""
    s = starts.size
    ends = starts + lens
    idx = np.arange(s)
    out.report("slot ranges with a negative length", idx[lens < 0].tolist(), lambda i: f"{i}(len {lens[i]})")
    out.report("slot lengths not a multiple of 28", idx[(lens > 0) & (lens % COMPACT_INDEX_ITEM_SIZE != 0)].tolist(),
               lambda i: f"{i}(len {lens[i]})")
    oob = idx[(lens > 0) & ((starts < base) | (ends > size))]
    out.report("slot ranges outside the item area", oob.tolist(), lambda i: f"{i}[{starts[i]},{ends[i]})")
    nonempty = idx[lens > 0]
    if nonempty.size > 1:
        o = nonempty[np.argsort(starts[nonempty], kind="stable")]
        ov = np.flatnonzero(starts[o[1:]] < ends[o[:-1]])
        out.report(
            "overlapping slot ranges",
            ov.tolist(),
            lambda j: (f"slot {o[j]}[{starts[o[j]]},{ends[o[j]]}) / "
                       f"slot {o[j + 1]}[{starts[o[j + 1]]},{ends[o[j + 1]]})"),
        )
    if s and starts[0] != base:
        out.add(f"slot 0 starts at {starts[0]}, expected {base} (end of the slot table)")
    misplaced = idx[1:][starts[1:] != ends[:-1]] if s > 1 else np.empty(0, dtype=np.int64)
    out.report("slot ranges not contiguous with the previous slot", misplaced.tolist(), lambda i: f"{i}@{starts[i]}")


def _verify_range_hashes(f: "IndexStoreFile", out: _Problems, starts: np.ndarray, lens: np.ndarray) -> None:
    """Every item of a well-formed range hashes to the range's slot."""
    s, size, base = f.hash_slot_num, f.file_size, f.items_base
    ends = starts + lens
    idx = np.arange(s)
    good = idx[(lens > 0) & (lens % COMPACT_INDEX_ITEM_SIZE == 0) & (starts >= base) & (ends <= size)]
    if not good.size:
        return
    k = lens[good] // COMPACT_INDEX_ITEM_SIZE
    arr = np.frombuffer(f.pread(base, size - base), dtype=np.uint8)
    offs = np.repeat(starts[good] - base, k) + (
        np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k)
    ) * COMPACT_INDEX_ITEM_SIZE
    hbytes = arr[offs[:, None] + np.arange(4)]
    hashes = hbytes.astype(np.int64) @ np.array([1 << 24, 1 << 16, 1 << 8, 1], dtype=np.int64)
    hashes = np.where(hashes >= 1 << 31, hashes - (1 << 32), hashes)
    slot_of = np.repeat(good, k)
    wrong = np.flatnonzero(np.fmod(hashes, s) != slot_of)
    out.report(
        "items whose hash does not land in their slot",
        wrong.tolist(),
        lambda j: f"@{int(offs[j]) + base} in slot {int(slot_of[j])} (hash {int(hashes[j])})",
    )
