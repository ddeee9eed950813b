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
against a JVM by tests/java/HashMapOrder.java (tests/test_java.py).
"""
from __future__ import annotations

from typing import Iterable, Optional, Union

from engine.java.lang import java_string_hash

DEFAULT_INITIAL_CAPACITY = 16
MAXIMUM_CAPACITY = 1 << 30
TREEIFY_THRESHOLD = 8
UNTREEIFY_THRESHOLD = 6
MIN_TREEIFY_CAPACITY = 64


def spread(key: str) -> int:
    """HashMap.hash(key): the String hash with its high half folded into the low half, as a signed int."""
    h = java_string_hash(key) & 0xFFFFFFFF
    s = h ^ (h >> 16)
    return s - (1 << 32) if s >= 1 << 31 else s


def table_size_for(capacity: int) -> int:
    """HashMap.tableSizeFor: the power of two a ``new HashMap<>(capacity)`` starts with."""
    if capacity < 0:
        raise ValueError(f"illegal initial capacity: {capacity}")
    n = 1
    while n < capacity:
        n <<= 1
    return min(n, MAXIMUM_CAPACITY)


class _TreeNode:
    __slots__ = ("key", "hash", "parent", "left", "right", "red", "_units")

    def __init__(self, key: str, h: int):
        self.key, self.hash = key, h
        self.parent = self.left = self.right = None
        self.red = False
        self._units: Optional[bytes] = None

    def units(self) -> bytes:
        # Big-endian UTF-16 bytes compare like String.compareTo compares chars (code units, then length).
        if self._units is None:
            self._units = self.key.encode("utf-16-be", "surrogatepass")
        return self._units


def _direction(x: _TreeNode, p: _TreeNode) -> int:
    """<= 0: x goes left of p. Hash first (signed), then compareTo; distinct strings never compare equal."""
    if p.hash > x.hash:
        return -1
    if p.hash < x.hash:
        return 1
    return -1 if x.units() < p.units() else 1


def _rotate_left(root, p):
    r = p.right
    if r is not None:
        rl = p.right = r.left
        if rl is not None:
            rl.parent = p
        pp = r.parent = p.parent
        if pp is None:
            root = r
            r.red = False
        elif pp.left is p:
            pp.left = r
        else:
            pp.right = r
        r.left = p
        p.parent = r
    return root


def _rotate_right(root, p):
    lft = p.left
    if lft is not None:
        lr = p.left = lft.right
        if lr is not None:
            lr.parent = p
        pp = lft.parent = p.parent
        if pp is None:
            root = lft
            lft.red = False
        elif pp.right is p:
            pp.right = lft
        else:
            pp.left = lft
        lft.right = p
        p.parent = lft
    return root


def _balance_insertion(root, x):
    """Red-black insert fix-up exactly as TreeNode.balanceInsertion (its rotations decide the root)."""
    x.red = True
    while True:
        xp = x.parent
        if xp is None:
            x.red = False
            return x
        xpp = xp.parent
        if not xp.red or xpp is None:
            return root
        xppl = xpp.left
        if xp is xppl:
            xppr = xpp.right
            if xppr is not None and xppr.red:
                xppr.red = xp.red = False
                xpp.red = True
                x = xpp
                continue
            if x is xp.right:
                x = xp
                root = _rotate_left(root, x)
                xp = x.parent
                xpp = None if xp is None else xp.parent
            if xp is not None:
                xp.red = False
                if xpp is not None:
                    xpp.red = True
                    root = _rotate_right(root, xpp)
        else:
            if xppl is not None and xppl.red:
                xppl.red = xp.red = False
                xpp.red = True
                x = xpp
                continue
            if x is xp.left:
                x = xp
                root = _rotate_right(root, x)
                xp = x.parent
                xpp = None if xp is None else xp.parent
            if xp is not None:
                xp.red = False
                if xpp is not None:
                    xpp.red = True
                    root = _rotate_left(root, xpp)


class _TreeBin:
    """A TreeNode bin: the red-black tree and the next-link list that iteration follows."""

    def __init__(self, nodes: list[_TreeNode]):
        # TreeNode.treeify: insert the nodes in list order, then move the root to the front of the list.
        self.order = list(nodes)
        root = None
        for x in self.order:
            x.left = x.right = None
            if root is None:
                x.parent = None
                x.red = False
                root = x
                continue
            p = root
            while True:
                d = _direction(x, p)
                child = p.left if d <= 0 else p.right
                if child is None:
                    x.parent = p
                    if d <= 0:
                        p.left = x
                    else:
                        p.right = x
                    root = _balance_insertion(root, x)
                    break
                p = child
        self._move_root_to_front(root)

    def _move_root_to_front(self, root: _TreeNode) -> None:
        if self.order[0] is not root:
            self.order.remove(root)
            self.order.insert(0, root)

    def put(self, key: str, h: int) -> None:
        """TreeNode.putTreeVal for a key not yet present: the new node follows its parent in the list."""
        x = _TreeNode(key, h)
        p = self.order[0]  # the root is always first
        while True:
            d = _direction(x, p)
            child = p.left if d <= 0 else p.right
            if child is None:
                break
            p = child
        if d <= 0:
            p.left = x
        else:
            p.right = x
        x.parent = p
        self.order.insert(self.order.index(p) + 1, x)
        self._move_root_to_front(_balance_insertion(self.order[0], x))

    def split(self, bit: int) -> tuple:
        """TreeNode.split on resize: (low bin, high bin), each None, a plain list or a tree bin."""
        lo = [n for n in self.order if not n.hash & bit]
        hi = [n for n in self.order if n.hash & bit]
        return self._half(lo, bool(hi)), self._half(hi, bool(lo))

    def _half(self, nodes: list[_TreeNode], other_half: bool):
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
            self._bins[i] = _TreeBin([_TreeNode(k, h) for k, h in self._bins[i]])

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
