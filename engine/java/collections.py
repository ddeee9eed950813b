"""Iteration order of Java's hash collections (java.util.HashMap / HashSet), which decides byte order on disk:
message properties are written in HashMap order (format §2.5) and tiered index keys are put in HashSet order
(format §9.6, pitfall 39). One model serves both.

The model replays what JDK 8-17 HashMap does on ``put`` of distinct keys (HashSet.add is HashMap.put):

* table of ``tableSizeFor(initialCapacity)`` (16 by default) buckets, created on the first put; doubled when
  ``++size > threshold`` (0.75 of the capacity);
* bucket = ``spread(hash) & (capacity - 1)`` with ``spread(h) = h ^ (h >>> 16)``;
* a plain bin appends at its tail; when a bin reaches 9 nodes (TREEIFY_THRESHOLD 8) ``treeifyBin`` resizes the
  table instead while it is smaller than 64 (MIN_TREEIFY_CAPACITY), else turns the bin into a red-black tree;
* a tree bin keeps a doubly linked "next" list beside the tree, and iteration follows that list: ``treeify``
  keeps the list order and moves the root to the front (``moveRootToFront``); ``putTreeVal`` links a new node
  right after its tree parent, then the (possibly new) root is moved to the front again;
* a resize splits every bin into a low and a high list, both in list order; a tree half of at most 6 nodes
  (UNTREEIFY_THRESHOLD) becomes a plain bin, a larger one is treeified again from its list, and a tree whose
  nodes all move the same way is kept as it is;
* tree nodes are ordered by spread hash (signed int comparison), equal hashes by ``String.compareTo`` (UTF-16
  code units), so tieBreakOrder (identity hashes) is never reached for distinct strings.

Iteration walks the buckets in ascending order and each bin along its next links. The orders are checked
against a JVM by tests/java/HashMapOrder.java (tests/engine/java/test_java.py).
"""
from __future__ import annotations

from typing import Iterable, Optional, Union

from engine.java.hashbins import (MAXIMUM_CAPACITY, MIN_TREEIFY_CAPACITY, TREEIFY_THRESHOLD, UNTREEIFY_THRESHOLD,
                                  TreeNode, insert, table_size_for, treeify)
from engine.java.lang import java_string_hash

DEFAULT_INITIAL_CAPACITY = 16


def spread(key: str) -> int:
    """HashMap.hash(key): the String hash with its high half folded into the low half, as a signed int."""
    h = java_string_hash(key) & 0xFFFFFFFF
    s = h ^ (h >> 16)
    return s - (1 << 32) if s >= 1 << 31 else s


class _TreeBin:
    """A TreeNode bin: the red-black tree (engine.java.hashbins) and the next-link list that iteration follows."""

    def __init__(self, nodes: list[TreeNode]):
        # TreeNode.treeify: insert the nodes in list order, then move the root to the front of the list.
        self.order = list(nodes)
        self._move_root_to_front(treeify(self.order))

    def _move_root_to_front(self, root: TreeNode) -> None:
        if self.order[0] is not root:
            self.order.remove(root)
            self.order.insert(0, root)

    def put(self, key: str, h: int) -> None:
        """TreeNode.putTreeVal for a key not yet present: the new node follows its parent in the list."""
        x = TreeNode(h, key)
        root, p = insert(self.order[0], x)  # the root is always first
        self.order.insert(self.order.index(p) + 1, x)
        self._move_root_to_front(root)

    def split(self, bit: int) -> tuple:
        """TreeNode.split on resize: (low bin, high bin), each None, a plain list or a tree bin."""
        lo = [n for n in self.order if not n.hash & bit]
        hi = [n for n in self.order if n.hash & bit]
        return self._half(lo, bool(hi)), self._half(hi, bool(lo))

    def _half(self, nodes: list[TreeNode], other_half: bool):
        if not nodes:
            return None
        if len(nodes) <= UNTREEIFY_THRESHOLD:
            return [(n.key, n.hash) for n in nodes]  # untreeify, in list order
        if not other_half:
            return self  # everything moved together: the tree is kept as it is
        return _TreeBin(nodes)

    def keys(self) -> list[str]:
        return [n.key for n in self.order]


_Bin = Union[list, _TreeBin]


class JavaHashMap:
    """The key structure of a ``java.util.HashMap`` (values play no part in the order).

    ``JavaHashMap()`` is ``new HashMap<>()``, ``JavaHashMap(n)`` is ``new HashMap<>(n)``. ``put`` of a key
    already present changes nothing, as in Java. ``treeified_bins()`` says which buckets hold TreeNode bins;
    ``events`` counts the structural steps taken (resize, treeify_resize, treeify, tree_kept, tree_untreeified,
    tree_retreeified), so tests can show which paths a key list went through.
    """

    def __init__(self, initial_capacity: Optional[int] = None):
        self._threshold = 0 if initial_capacity is None else table_size_for(initial_capacity)
        self.capacity = 0
        self._size = 0
        self._bins: dict[int, _Bin] = {}
        self._present: set[str] = set()
        self.events: dict[str, int] = {}

    def _count(self, event: str) -> None:
        self.events[event] = self.events.get(event, 0) + 1

    def put(self, key: str) -> bool:
        """HashMap.put / HashSet.add; True if the key was new."""
        if key in self._present:
            return False
        self._present.add(key)
        if self.capacity == 0:
            self._resize()
        h = spread(key)
        i = h & (self.capacity - 1)
        b = self._bins.get(i)
        if b is None:
            self._bins[i] = [(key, h)]
        elif isinstance(b, _TreeBin):
            b.put(key, h)
        else:
            b.append((key, h))
            if len(b) > TREEIFY_THRESHOLD:  # putVal: binCount >= TREEIFY_THRESHOLD - 1
                self._treeify_bin(i)
        self._size += 1
        if self._size > self._threshold:
            self._resize()
        return True

    def _treeify_bin(self, i: int) -> None:
        if self.capacity < MIN_TREEIFY_CAPACITY:
            self._count("treeify_resize")
            self._resize()  # small tables grow instead of treeifying
        else:
            self._count("treeify")
            self._bins[i] = _TreeBin([TreeNode(h, k) for k, h in self._bins[i]])

    def _resize(self) -> None:
        old_cap, old_thr = self.capacity, self._threshold
        new_thr = 0
        if old_cap > 0:
            if old_cap >= MAXIMUM_CAPACITY:
                self._threshold = 2**31 - 1
                return
            new_cap = old_cap << 1
            if new_cap < MAXIMUM_CAPACITY and old_cap >= DEFAULT_INITIAL_CAPACITY:
                new_thr = old_thr << 1
        elif old_thr > 0:
            new_cap = old_thr  # the initial capacity was parked in the threshold
        else:
            new_cap, new_thr = DEFAULT_INITIAL_CAPACITY, int(0.75 * DEFAULT_INITIAL_CAPACITY)
        if new_thr == 0:
            ft = new_cap * 0.75
            new_thr = int(ft) if new_cap < MAXIMUM_CAPACITY and ft < MAXIMUM_CAPACITY else 2**31 - 1
        self._threshold, self.capacity = new_thr, new_cap
        if old_cap:
            self._count("resize")
        bins: dict[int, _Bin] = {}
        for j, b in self._bins.items():
            if isinstance(b, _TreeBin):
                lo, hi = b.split(old_cap)
                for half in (lo, hi):
                    if half is not None:
                        self._count("tree_kept" if half is b else
                                    "tree_retreeified" if isinstance(half, _TreeBin) else "tree_untreeified")
            else:
                lo = [e for e in b if not e[1] & old_cap] or None
                hi = [e for e in b if e[1] & old_cap] or None
            if lo is not None:
                bins[j] = lo
            if hi is not None:
                bins[j + old_cap] = hi
        self._bins = bins

    def keys(self) -> list[str]:
        """keySet() iteration order: buckets ascending, each bin along its next links."""
        out: list[str] = []
        for i in sorted(self._bins):
            b = self._bins[i]
            out.extend(b.keys() if isinstance(b, _TreeBin) else [k for k, _ in b])
        return out

    def treeified_bins(self) -> list[int]:
        return sorted(i for i, b in self._bins.items() if isinstance(b, _TreeBin))


def hashmap_order(keys: Iterable[str], initial_capacity: Optional[int] = None) -> list[str]:
    """Iteration order of ``new HashMap<>([initial_capacity])`` after ``put``-ting ``keys`` in order
    (a repeated key keeps its first place)."""
    m = JavaHashMap(initial_capacity)
    for k in keys:
        m.put(k)
    return m.keys()


def hashset_order(keys: Iterable[str], initial_capacity: Optional[int] = None) -> list[str]:
    """Iteration order of ``new HashSet<>([initial_capacity])`` after ``add``-ing ``keys`` in order.
    (``HashSet.addAll`` adds one by one, so it gives the same order.)"""
    return hashmap_order(keys, initial_capacity)
