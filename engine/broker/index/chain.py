"""The one hash-chain walker: broker index files (format §5.7) and unsealed tiered index files (format §9.7)
keep each hash slot's items as a chain from the slot's head, newest first, through a previous-item pointer.

Queries, verify, inspect and the tiered code all walk chains through ChainWalk, so there is one answer to
"when does a walk stop": at a zero pointer, at a pointer outside 1..last, at a pointer to the item itself, at an
item already visited (or after max_steps when cycles are not tracked), after `limit` items, or where the caller
breaks out. It always terminates, whatever the bytes say.

Items are appended in order and a slot's head is its newest item, so in a healthy file every link points to an
OLDER item (prev < n). `forward_links` counts the links that do not: a walk that followed one crossed damage,
even when it then ended normally. (The broker's key lookup walks healthy chains with an inlined copy of these
rules for speed, and hands any chain with such a link back to this class: IndexFile.select_hash.)
"""
from __future__ import annotations

from typing import Callable, Generic, Iterator, Optional, TypeVar

T = TypeVar("T")

EMPTY = "empty"            # the slot holds no item
END = "end"                # the last item points at 0
BEYOND = "beyond"          # a pointer outside 1..last (the broker ignores such a head and stops at such a link)
SELF = "self"              # an item points at itself
CYCLE = "cycle"            # an item was reached twice
LIMIT = "limit"            # `limit` items were returned
OUTSIDE_FILE = "outside_file"  # read_item found no item there (the pointer leads past the file's end)
CALLER = "caller"          # the caller stopped iterating

#: the stops that end a walk on a healthy chain (any other stop, or a forward link, means damage)
HEALTHY_STOPS = (EMPTY, END, LIMIT, CALLER)


class ChainWalk(Generic[T]):
    """Iterate (item number, item) along one chain. After the loop, `stop` says why it ended and `at` is the
    pointer that ended it (None for LIMIT/CALLER).

    read_item(n) returns the item with number n, or None when n lies outside the file. prev_of(item) is its
    previous-item pointer. last is the highest valid item number (the broker follows pointers up to its
    header's indexCount). With detect_cycles=False no visited set is kept and the walk stops after max_steps
    links instead (the broker's own loop has no cycle check; rmqtool bounds it by the item count).
    With stop_at_self=False a pointer to the item itself is followed like any other link (the tiered query
    has no such check and revisits the item until its budget runs out).
    """

    def __init__(self, head: int, read_item: Callable[[int], Optional[T]], prev_of: Callable[[T], int], *,
                 last: int, limit: Optional[int] = None, detect_cycles: bool = True,
                 max_steps: Optional[int] = None, stop_at_self: bool = True):
        self.head = head
        self.read_item = read_item
        self.prev_of = prev_of
        self.last = last
        self.limit = limit
        self.detect_cycles = detect_cycles
        self.max_steps = max_steps if max_steps is not None else max(last, 1)
        self.stop_at_self = stop_at_self
        self.stop = CALLER
        self.at: Optional[int] = None
        self.visited = 0
        self.forward_links = 0     # links to an item that is not older (prev > n): damage, whatever the stop

    def _ended(self, reason: str, at: Optional[int]) -> None:
        self.stop, self.at = reason, at

    def __iter__(self) -> Iterator[tuple[int, T]]:
        n = self.head
        if n == 0:
            self._ended(EMPTY, n)
            return
        if n < 0 or n > self.last:
            self._ended(BEYOND, n)
            return
        seen: set[int] = set()
        steps = 0
        while True:
            if self.detect_cycles:
                if n in seen:
                    self._ended(CYCLE, n)
                    return
            if self.limit is not None and self.visited >= self.limit:
                self._ended(LIMIT, None)
                return
            if self.detect_cycles:
                seen.add(n)
            item = self.read_item(n)
            if item is None:
                self._ended(OUTSIDE_FILE, n)
                return
            self.visited += 1
            self.stop = CALLER  # until the next link says otherwise
            yield n, item
            prev = self.prev_of(item)
            if prev == 0:
                self._ended(END, prev)
                return
            if prev < 0 or prev > self.last:
                self._ended(BEYOND, prev)
                return
            if prev == n and self.stop_at_self:
                self._ended(SELF, prev)
                return
            if prev > n:
                self.forward_links += 1
            steps += 1
            if not self.detect_cycles and steps >= self.max_steps:
                self._ended(CYCLE, prev)
                return
            n = prev
