"""What java.util.HashMap and java.util.concurrent.ConcurrentHashMap share: table sizing, the treeify thresholds
and the red-black tree of a treeified bin (HashMap.TreeNode and ConcurrentHashMap.TreeBin run the same tree code).

The two maps differ in how a bin's iteration list is kept (engine.java.collections, engine.java.concurrent); the
tree that decides where a node goes is one model, here. Tree nodes are ordered by hash (signed int comparison),
equal hashes by the keys' natural order (String.compareTo compares UTF-16 code units; Long and Integer by value),
so tieBreakOrder (identity hashes) is never reached for distinct keys.
"""
from __future__ import annotations

from typing import Optional

MAXIMUM_CAPACITY = 1 << 30
TREEIFY_THRESHOLD = 8
UNTREEIFY_THRESHOLD = 6
MIN_TREEIFY_CAPACITY = 64


def table_size_for(capacity: int) -> int:
    """tableSizeFor: the smallest power of two >= capacity (1 for 0 or 1), capped at MAXIMUM_CAPACITY."""
    if capacity < 0:
        raise ValueError(f"illegal initial capacity: {capacity}")
    return min(1 << max(capacity - 1, 0).bit_length(), MAXIMUM_CAPACITY)


class TreeNode:
    """A node of a treeified bin: hash, key, value and the red-black links."""
    __slots__ = ("hash", "key", "val", "parent", "left", "right", "red", "_order")

    def __init__(self, h: int, key, val=None):
        self.hash, self.key, self.val = h, key, val
        self.parent = self.left = self.right = None
        self.red = False
        self._order = None

    def order_key(self):
        """The key as compareTo orders it: a String by its UTF-16 code units (big-endian bytes compare alike)."""
        if self._order is None:
            k = self.key
            self._order = k.encode("utf-16-be", "surrogatepass") if isinstance(k, str) else k
        return self._order


def direction(x: TreeNode, p: TreeNode) -> int:
    """<= 0: x goes left of p. Hash first (signed), then the keys' natural order."""
    if p.hash > x.hash:
        return -1
    if p.hash < x.hash:
        return 1
    xk, pk = x.order_key(), p.order_key()
    if type(xk) is type(pk) and xk != pk:
        return -1 if xk < pk else 1
    return -1  # tieBreakOrder: only equal keys get here, and those are found before inserting


def _rotate(root, p, side: str):
    """rotateLeft (side "left": p's right child rises) or rotateRight (side "right"), as both JDK classes do."""
    other = "right" if side == "left" else "left"
    r = None if p is None else getattr(p, other)
    if r is not None:
        inner = getattr(r, side)
        setattr(p, other, inner)
        if inner is not None:
            inner.parent = p
        pp = r.parent = p.parent
        if pp is None:
            root = r
            r.red = False
        elif getattr(pp, side) is p:
            setattr(pp, side, r)
        else:
            setattr(pp, other, r)
        setattr(r, side, p)
        p.parent = r
    return root


def rotate_left(root, p):
    return _rotate(root, p, "left")


def rotate_right(root, p):
    return _rotate(root, p, "right")


def _red(n) -> bool:
    return n is not None and n.red


def balance_insertion(root, x):
    """Red-black insertion fix-up, as balanceInsertion (its two mirrored halves folded into one); the new root."""
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
        rot_up, rot_down = (rotate_right, rotate_left) if near == "left" else (rotate_left, rotate_right)
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
            xpp = None if xp is None else xp.parent
        if xp is not None:
            xp.red = False
            if xpp is not None:
                xpp.red = True
                root = rot_up(root, xpp)


def balance_deletion(root, x):
    """Red-black deletion fix-up, as balanceDeletion (its two mirrored halves folded into one); the new root."""
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
        rot_near, rot_far = (rotate_left, rotate_right) if near == "left" else (rotate_right, rotate_left)
        sib = getattr(xp, far)
        if _red(sib):
            sib.red = False
            xp.red = True
            root = rot_near(root, xp)
            xp = x.parent
            sib = None if xp is None else getattr(xp, far)
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
                sib = None if xp is None else getattr(xp, far)
            if sib is not None:
                sib.red = False if xp is None else xp.red
                if getattr(sib, far) is not None:
                    getattr(sib, far).red = False
            if xp is not None:
                xp.red = False
                root = rot_near(root, xp)
            x = root


def insert(root: Optional[TreeNode], x: TreeNode) -> tuple[TreeNode, Optional[TreeNode]]:
    """Link x under the leaf its direction leads to and rebalance (putTreeVal, treeify's inner loop):
    (the new root, x's parent; None when x is the first node)."""
    if root is None:
        x.parent, x.left, x.right, x.red = None, None, None, False
        return x, None
    p = root
    while True:
        d = direction(x, p)
        child = p.left if d <= 0 else p.right
        if child is None:
            break
        p = child
    x.parent, x.left, x.right = p, None, None
    if d <= 0:
        p.left = x
    else:
        p.right = x
    return balance_insertion(root, x), p


def treeify(nodes: list[TreeNode]) -> Optional[TreeNode]:
    """treeify: insert the nodes in list order; the root of the tree they make."""
    root = None
    for x in nodes:
        root, _ = insert(root, x)
    return root


def _swap_with_successor(root, p: TreeNode) -> tuple:
    """removeTreeNode's first step for a node with two children: swap it with its successor (colours too);
    (the new root, the node that will replace p)."""
    pl, pr = p.left, p.right
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
    return _replace_child(root, pp, p, s), (sr if sr is not None else p)


def _replace_child(root, pp, old: TreeNode, new: TreeNode):
    """Put `new` where `old` hung under pp (as the root when pp is None); the root."""
    if pp is None:
        return new
    if old is pp.left:
        pp.left = new
    else:
        pp.right = new
    return root


def delete(root, p: TreeNode):
    """The tree half of removeTreeNode (ConcurrentHashMap.TreeBin): unlink p and rebalance; the new root."""
    if p.left is not None and p.right is not None:
        root, replacement = _swap_with_successor(root, p)
    else:
        replacement = p.left if p.left is not None else p.right if p.right is not None else p
    if replacement is not p:
        pp = replacement.parent = p.parent
        root = _replace_child(root, pp, p, replacement)
        p.left = p.right = p.parent = None
    root = root if p.red else balance_deletion(root, replacement)
    if p is replacement and p.parent is not None:
        pp = p.parent
        if p is pp.left:
            pp.left = None
        elif p is pp.right:
            pp.right = None
        p.parent = None
    return root
