"""Iteration order of Java's hash collections (java.util.HashMap / HashSet), which decides byte order on disk:
message properties are written in HashMap order (format §2.5) and tiered index keys are put in HashSet order
(format §9.6). One model serves both.
"""
from __future__ import annotations

from typing import Iterable

from engine.java.lang import java_string_hash


def _spread(key: str) -> int:
    h = java_string_hash(key) & 0xFFFFFFFF
    return h ^ (h >> 16)


def hashset_order(keys: Iterable[str]) -> list[str]:
    """Iteration order of ``new HashSet<>()`` after ``add``-ing ``keys`` in order.

    Simulates java.util.HashMap: table 16, doubled when ``size > 0.75*cap``, and also doubled when a
    bucket receives its 9th entry while the table is smaller than 64 (``treeifyBin`` resizes instead
    of treeifying).  A resize keeps the relative order inside every bucket, so the final order is the
    buckets of the final table ascending, ties in insertion order.  Known approximation: a bucket that
    really gets treeified (>= 9 colliding keys in a table >= 64) is iterated here in insertion order,
    whereas Java's TreeNode links may differ.
    """
    uniq: list[str] = []
    seen: set[str] = set()
    cap = 16
    counts: dict[int, int] = {}
    for k in keys:
        if k in seen:
            continue
        sp = _spread(k)
        b = sp & (cap - 1)
        existing = counts.get(b, 0)
        seen.add(k)
        uniq.append(k)
        if existing >= 8 and cap < 64:  # binCount >= TREEIFY_THRESHOLD - 1 -> treeifyBin -> resize
            cap *= 2
            counts = {}
            for u in uniq:
                bb = _spread(u) & (cap - 1)
                counts[bb] = counts.get(bb, 0) + 1
        else:
            counts[b] = existing + 1
        if len(uniq) > cap * 3 // 4:  # ++size > threshold
            cap *= 2
            counts = {}
            for u in uniq:
                bb = _spread(u) & (cap - 1)
                counts[bb] = counts.get(bb, 0) + 1
    mask = cap - 1
    return sorted(uniq, key=lambda u: _spread(u) & mask)  # stable: ties keep insertion order
