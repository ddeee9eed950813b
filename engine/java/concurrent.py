"""Iteration order of java.util.concurrent.ConcurrentHashMap (Java 17), which decides the byte order of the
tiered store's metadata file (flat-store §6; flat-store pitfall 9).

A map iterates its table from bucket 0 upwards; inside a bucket a plain bin is a linked list (insertion order,
appended at the tail) and a treeified bin (a TreeBin, at least 9 colliding keys in a table of 64 or more
buckets) iterates its `first` list, where new keys are put at the head. The order therefore depends on the
map's history: how it was made (default, presized by a capacity, copied from another map), the resizes its
insertions caused (a resize keeps a bin's trailing run in order and moves the nodes before it in reverse),
the treeifications and untreeifications (which depend on the red-black tree's shape). This module replays
that history; tests/java/ChmOrderProbe.java checks it against a real JVM.

Keys are Python values; the map is told how Java hashes them (`long_hash`, `int_hash`, `string_hash`), since a
Python int may stand for a Java Long or an Integer.
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator

from engine.java import hashbins
from engine.java.hashbins import (MAXIMUM_CAPACITY, MIN_TREEIFY_CAPACITY, TREEIFY_THRESHOLD, UNTREEIFY_THRESHOLD,
                                  TreeNode, table_size_for)
from engine.java.lang import java_string_hash

HASH_BITS = 0x7FFFFFFF
DEFAULT_CAPACITY = 16


def long_hash(v: int) -> int:
    """Long.hashCode: (int)(value ^ (value >>> 32))."""
    u = v & 0xFFFFFFFFFFFFFFFF
    return _i32((u ^ (u >> 32)) & 0xFFFFFFFF)


def int_hash(v: int) -> int:
    """Integer.hashCode: the value."""
    return _i32(v & 0xFFFFFFFF)


def string_hash(s: str) -> int:
    return java_string_hash(s)


def _i32(u: int) -> int:
    return u - (1 << 32) if u & 0x80000000 else u


def spread(h: int) -> int:
    """ConcurrentHashMap.spread: (h ^ (h >>> 16)) & HASH_BITS."""
    u = h & 0xFFFFFFFF
    return (u ^ (u >> 16)) & HASH_BITS


class _TreeBin:
    """A treeified bin: the red-black tree (engine.java.hashbins) plus the `first` list that iteration follows."""

    def __init__(self, nodes: list[TreeNode]):
        self.order: list[TreeNode] = list(nodes)   # the `first` list
        self.root = hashbins.treeify(self.order)

    def find(self, key) -> TreeNode | None:
        for n in self.order:
            if n.key == key:
                return n
        return None

    def put(self, h: int, key, val) -> TreeNode | None:
        """putTreeVal: the existing node, or None after inserting a new one at the head of `first`."""
        found = self.find(key)
        if found is not None:
            return found
        x = TreeNode(h, key, val)
        self.order.insert(0, x)
        self.root, _ = hashbins.insert(self.root, x)
        return None

    def remove(self, p: TreeNode) -> bool:
        """removeTreeNode: True when the bin is now too small and must become a plain list again."""
        self.order.remove(p)
        if not self.order:
            self.root = None
            return True
        r = self.root
        if r is None or r.right is None or r.left is None or r.left.left is None:
            return True
        self.root = hashbins.delete(r, p)
        return False


class ConcurrentHashMap:
    """One ConcurrentHashMap, single-threaded: put / computeIfAbsent / putIfAbsent / remove and iteration.

    `ConcurrentHashMap(key_hash)` is `new ConcurrentHashMap<>()`; `initial_capacity` gives
    `new ConcurrentHashMap<>(n)`; `ConcurrentHashMap.copy_of(items, key_hash)` is `new ConcurrentHashMap<>(map)`
    (and `put_all` is `putAll`) with the entries taken in the order given.
    """

    def __init__(self, key_hash: Callable[[object], int] = string_hash, initial_capacity: int | None = None):
        self.key_hash = key_hash
        self.table: list | None = None   # bins: None, a list of [hash, key, value] nodes, or a _TreeBin
        self.count = 0
        if initial_capacity is None:
            self.size_ctl = 0
        else:
            if initial_capacity < 0:
                raise ValueError("negative capacity")
            # Java 11+: ConcurrentHashMap(int) delegates to (initialCapacity, 0.75f, 1).
            size = int(1.0 + initial_capacity / 0.75)
            self.size_ctl = MAXIMUM_CAPACITY if size >= MAXIMUM_CAPACITY else table_size_for(size)

    @classmethod
    def copy_of(cls, items, key_hash: Callable[[object], int] = string_hash) -> "ConcurrentHashMap":
        m = cls(key_hash)
        m.size_ctl = DEFAULT_CAPACITY
        m.put_all(items)
        return m

    # ------------------------------------------------------------------ reading
    @property
    def table_size(self) -> int:
        return 0 if self.table is None else len(self.table)

    def __len__(self) -> int:
        return self.count

    def _nodes(self) -> Iterator:
        for b in self.table or ():
            if b is None:
                continue
            if isinstance(b, _TreeBin):
                for n in b.order:
                    yield n.key, n.val
            else:
                for n in b:
                    yield n[1], n[2]

    def items(self) -> list[tuple]:
        return list(self._nodes())

    def keys(self) -> list:
        return [k for k, _ in self._nodes()]

    def values(self) -> list:
        return [v for _, v in self._nodes()]

    def __iter__(self):
        return iter(self.keys())

    def _find(self, key):
        if self.table is None:
            return None
        b = self.table[spread(self.key_hash(key)) & (len(self.table) - 1)]
        if b is None:
            return None
        if isinstance(b, _TreeBin):
            n = b.find(key)
            return None if n is None else (n.key, n.val)
        for n in b:
            if n[1] == key:
                return n[1], n[2]
        return None

    def get(self, key, default=None):
        f = self._find(key)
        return default if f is None else f[1]

    def __contains__(self, key) -> bool:
        return self._find(key) is not None

    def __getitem__(self, key):
        f = self._find(key)
        if f is None:
            raise KeyError(key)
        return f[1]

    # ------------------------------------------------------------------ writing
    def put(self, key, value):
        """put: the previous value or None."""
        return self._put(key, lambda: value, only_if_absent=False)[0]

    def put_if_absent(self, key, value):
        return self._put(key, lambda: value, only_if_absent=True)[0]

    def compute_if_absent(self, key, factory: Callable[[], object]):
        old, new = self._put(key, factory, only_if_absent=True)
        return new if old is None else old

    def __setitem__(self, key, value) -> None:
        self.put(key, value)

    def put_all(self, items) -> None:
        entries = list(items.items() if hasattr(items, "items") else items)
        self._try_presize(len(entries))
        for k, v in entries:
            self.put(k, v)

    def _put(self, key, make, only_if_absent: bool):  # putVal / computeIfAbsent, one thread
        h = spread(self.key_hash(key))
        if self.table is None:
            self._init_table()
        tab = self.table
        i = h & (len(tab) - 1)
        b = tab[i]
        if b is None:
            value = make()
            tab[i] = [[h, key, value]]
            self._add_count(1, True)
            return None, value
        if isinstance(b, _TreeBin):
            value = make() if b.find(key) is None else None
            node = b.put(h, key, value)
            if node is not None:
                old = node.val
                if not only_if_absent:
                    node.val = make()
                return old, node.val
            self._add_count(1, True)
            return None, value
        for pos, n in enumerate(b, 1):
            if n[1] == key:
                old = n[2]
                if not only_if_absent:
                    n[2] = make()
                if pos >= TREEIFY_THRESHOLD:
                    self._treeify_bin(i)
                return old, n[2]
        value = make()
        bin_count = len(b)
        b.append([h, key, value])
        if bin_count >= TREEIFY_THRESHOLD:
            self._treeify_bin(i)
        self._add_count(1, True)
        return None, value

    def remove(self, key):
        """remove: the removed value or None; never resizes."""
        if self.table is None:
            return None
        h = spread(self.key_hash(key))
        i = h & (len(self.table) - 1)
        b = self.table[i]
        if b is None:
            return None
        if isinstance(b, _TreeBin):
            node = b.find(key)
            if node is None:
                return None
            if b.remove(node):
                self.table[i] = [[n.hash, n.key, n.val] for n in b.order] or None
            self.count -= 1
            return node.val
        for j, n in enumerate(b):
            if n[1] == key:
                del b[j]
                if not b:
                    self.table[i] = None
                self.count -= 1
                return n[2]
        return None

    # ------------------------------------------------------------------ sizing
    def _init_table(self) -> None:
        n = self.size_ctl if self.size_ctl > 0 else DEFAULT_CAPACITY
        self.table = [None] * n
        self.size_ctl = n - (n >> 2)

    def _add_count(self, delta: int, check: bool) -> None:
        self.count += delta
        if check:
            while self.count >= self.size_ctl and self.table is not None and len(self.table) < MAXIMUM_CAPACITY:
                self._transfer()

    def _try_presize(self, size: int) -> None:
        c = MAXIMUM_CAPACITY if size >= (MAXIMUM_CAPACITY >> 1) else table_size_for(size + (size >> 1) + 1)
        while self.size_ctl >= 0:
            sc = self.size_ctl
            if self.table is None:
                n = sc if sc > c else c
                self.table = [None] * n
                self.size_ctl = n - (n >> 2)
            elif c <= sc or len(self.table) >= MAXIMUM_CAPACITY:
                break
            else:
                self._transfer()

    def _treeify_bin(self, i: int) -> None:
        n = len(self.table)
        if n < MIN_TREEIFY_CAPACITY:
            self._try_presize(n << 1)
            return
        b = self.table[i]
        if b is not None and not isinstance(b, _TreeBin):
            self.table[i] = _TreeBin([TreeNode(h, k, v) for h, k, v in b])

    def _transfer(self) -> None:
        """Double the table: each bin splits into the low and high halves (ConcurrentHashMap.transfer)."""
        old = self.table
        n = len(old)
        new: list = [None] * (n << 1)
        for i, b in enumerate(old):
            if b is None:
                continue
            if isinstance(b, _TreeBin):
                lo = [TreeNode(x.hash, x.key, x.val) for x in b.order if not x.hash & n]
                hi = [TreeNode(x.hash, x.key, x.val) for x in b.order if x.hash & n]
                new[i] = _split_tree(lo, len(hi), b)
                new[i + n] = _split_tree(hi, len(lo), b)
                continue
            run_bit = b[0][0] & n
            last_run = 0
            for j in range(1, len(b)):
                bit = b[j][0] & n
                if bit != run_bit:
                    run_bit, last_run = bit, j
            lo_nodes = [nd for nd in b[last_run:]] if run_bit == 0 else []
            hi_nodes = [nd for nd in b[last_run:]] if run_bit else []
            for nd in b[:last_run]:   # the nodes before the trailing run are prepended: reversed
                if nd[0] & n:
                    hi_nodes.insert(0, nd)
                else:
                    lo_nodes.insert(0, nd)
            new[i] = lo_nodes or None
            new[i + n] = hi_nodes or None
        self.table = new
        self.size_ctl = (n << 1) - (n >> 1)


def _split_tree(nodes: list[TreeNode], other: int, old: _TreeBin):
    if not nodes:
        return None
    if len(nodes) <= UNTREEIFY_THRESHOLD:
        return [[x.hash, x.key, x.val] for x in nodes]
    return _TreeBin(nodes) if other else old


def iteration_order(keys: Iterable, key_hash: Callable[[object], int] = string_hash,
                    initial_capacity: int | None = None) -> list:
    """The keys of a map made by `new ConcurrentHashMap<>([initial_capacity])` after putting `keys` in order."""
    m = ConcurrentHashMap(key_hash, initial_capacity)
    for k in keys:
        m.put(k, None)
    return m.keys()
