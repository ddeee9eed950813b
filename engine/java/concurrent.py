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

from engine.java.lang import java_string_hash

HASH_BITS = 0x7FFFFFFF
MAXIMUM_CAPACITY = 1 << 30
DEFAULT_CAPACITY = 16
TREEIFY_THRESHOLD = 8
UNTREEIFY_THRESHOLD = 6
MIN_TREEIFY_CAPACITY = 64


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


def table_size_for(c: int) -> int:
    """The smallest power of two >= c (1 for c <= 1), capped at MAXIMUM_CAPACITY."""
    if c <= 1:
        return 1
    return min(1 << (c - 1).bit_length(), MAXIMUM_CAPACITY)


class _TreeNode:
    __slots__ = ("hash", "key", "val", "left", "right", "parent", "red")

    def __init__(self, h, key, val):
        self.hash, self.key, self.val = h, key, val
        self.left = self.right = self.parent = None
        self.red = False


class _TreeBin:
    """A treeified bin: a red-black tree ordered by (hash, key) plus the `first` list that iteration follows."""

    def __init__(self, nodes: list[_TreeNode]):
        self.order: list[_TreeNode] = list(nodes)   # the `first` list
        self.root = None
        for x in self.order:
            x.left = x.right = None
            if self.root is None:
                x.parent, x.red = None, False
                self.root = x
                continue
            p = self.root
            while True:
                d = _dir(x.hash, x.key, p)
                nxt = p.left if d <= 0 else p.right
                if nxt is None:
                    x.parent = p
                    if d <= 0:
                        p.left = x
                    else:
                        p.right = x
                    self.root = _balance_insertion(self.root, x)
                    break
                p = nxt

    def find(self, key) -> _TreeNode | None:
        for n in self.order:
            if n.key == key:
                return n
        return None

    def put(self, h: int, key, val) -> _TreeNode | None:
        """putTreeVal: the existing node, or None after inserting a new one at the head of `first`."""
        found = self.find(key)
        if found is not None:
            return found
        x = _TreeNode(h, key, val)
        self.order.insert(0, x)
        p = self.root
        if p is None:
            self.root = x
            return None
        while True:
            d = _dir(h, key, p)
            nxt = p.left if d <= 0 else p.right
            if nxt is None:
                x.parent = p
                if d <= 0:
                    p.left = x
                else:
                    p.right = x
                if not p.red:
                    x.red = True
                else:
                    self.root = _balance_insertion(self.root, x)
                return None
            p = nxt

    def remove(self, p: _TreeNode) -> bool:  # long: one step of Java's removeTreeNode per block, kept in its order
        """removeTreeNode: True when the bin is now too small and must become a plain list again."""
        self.order.remove(p)
        if not self.order:
            self.root = None
            return True
        r = self.root
        if r is None or r.right is None or r.left is None or r.left.left is None:
            return True
        pl, pr = p.left, p.right
        if pl is not None and pr is not None:
            s = pr
            while s.left is not None:
                s = s.left
            s.red, p.red = p.red, s.red
            sr, pp = s.right, p.parent
            if s is pr:
                p.parent = s
                s.right = p
            else:
                sp = s.parent
                p.parent = sp
                if sp is not None:
                    if s is sp.left:
                        sp.left = p
                    else:
                        sp.right = p
                s.right = pr
                pr.parent = s
            p.left = None
            p.right = sr
            if sr is not None:
                sr.parent = p
            s.left = pl
            pl.parent = s
            s.parent = pp
            if pp is None:
                r = s
            elif p is pp.left:
                pp.left = s
            else:
                pp.right = s
            replacement = sr if sr is not None else p
        elif pl is not None:
            replacement = pl
        elif pr is not None:
            replacement = pr
        else:
            replacement = p
        if replacement is not p:
            pp = replacement.parent = p.parent
            if pp is None:
                r = replacement
            elif p is pp.left:
                pp.left = replacement
            else:
                pp.right = replacement
            p.left = p.right = p.parent = None
        self.root = r if p.red else _balance_deletion(r, replacement)
        if p is replacement and p.parent is not None:
            pp = p.parent
            if p is pp.left:
                pp.left = None
            elif p is pp.right:
                pp.right = None
            p.parent = None
        return False


def _dir(h: int, key, p: _TreeNode) -> int:
    """Tree direction: by hash, then by the keys' natural order (Long, Integer and String are Comparable)."""
    if p.hash > h:
        return -1
    if p.hash < h:
        return 1
    if type(key) is type(p.key) and key != p.key:
        return -1 if key < p.key else 1
    return -1  # tieBreakOrder: only equal keys get here, and those are found before inserting


def _rotate_left(root, p):
    if p is not None and p.right is not None:
        r = p.right
        p.right = rl = r.left
        if rl is not None:
            rl.parent = p
        r.parent = pp = p.parent
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
    if p is not None and p.left is not None:
        lft = p.left
        p.left = lr = lft.right
        if lr is not None:
            lr.parent = p
        lft.parent = pp = p.parent
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


def _child(n, side: str):
    return None if n is None else getattr(n, side)


def _red(n) -> bool:
    return n is not None and n.red


def _balance_insertion(root, x):
    """Red-black insertion fix-up, as TreeBin.balanceInsertion (its two mirrored halves folded into one)."""
    x.red = True
    while True:
        xp = x.parent
        if xp is None:
            x.red = False
            return x
        xpp = xp.parent
        if not xp.red or xpp is None:
            return root
        near, far = ("left", "right") if xp is xpp.left else ("right", "left")
        rot_up, rot_down = (_rotate_right, _rotate_left) if near == "left" else (_rotate_left, _rotate_right)
        uncle = getattr(xpp, far)
        if _red(uncle):
            uncle.red = xp.red = False
            xpp.red = True
            x = xpp
            continue
        if x is getattr(xp, far):
            x = xp
            root = rot_down(root, x)
            xp = x.parent
            xpp = _child(xp, "parent")
        if xp is not None:
            xp.red = False
            if xpp is not None:
                xpp.red = True
                root = rot_up(root, xpp)


def _balance_deletion(root, x):
    """Red-black deletion fix-up, as TreeBin.balanceDeletion (its two mirrored halves folded into one)."""
    while True:
        if x is None or x is root:
            return root
        xp = x.parent
        if xp is None:
            x.red = False
            return x
        if x.red:
            x.red = False
            return root
        near, far = ("left", "right") if xp.left is x else ("right", "left")
        rot_near, rot_far = (_rotate_left, _rotate_right) if near == "left" else (_rotate_right, _rotate_left)
        sib = getattr(xp, far)
        if _red(sib):
            sib.red = False
            xp.red = True
            root = rot_near(root, xp)
            xp = x.parent
            sib = _child(xp, far)
        if sib is None:
            x = xp
        elif not _red(sib.left) and not _red(sib.right):
            sib.red = True
            x = xp
        else:
            if not _red(getattr(sib, far)):
                if getattr(sib, near) is not None:
                    getattr(sib, near).red = False
                sib.red = True
                root = rot_far(root, sib)
                xp = x.parent
                sib = _child(xp, far)
            if sib is not None:
                sib.red = False if xp is None else xp.red
                if getattr(sib, far) is not None:
                    getattr(sib, far).red = False
            if xp is not None:
                xp.red = False
                root = rot_near(root, xp)
            x = root


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
            self.table[i] = _TreeBin([_TreeNode(h, k, v) for h, k, v in b])

    def _transfer(self) -> None:
        """Double the table: each bin splits into the low and high halves (ConcurrentHashMap.transfer)."""
        old = self.table
        n = len(old)
        new: list = [None] * (n << 1)
        for i, b in enumerate(old):
            if b is None:
                continue
            if isinstance(b, _TreeBin):
                lo = [_TreeNode(x.hash, x.key, x.val) for x in b.order if not x.hash & n]
                hi = [_TreeNode(x.hash, x.key, x.val) for x in b.order if x.hash & n]
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


def _split_tree(nodes: list[_TreeNode], other: int, old: _TreeBin):
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
