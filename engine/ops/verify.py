"""Index file verification (the `inspect-index --verify` engine side; recovery uses the
same structural check to decide which index files it can trust).

Memory is bounded whatever the file size: items are read a chunk at a time (VERIFY_CHUNK items, about 25 MB
of working arrays), plus one int32 per hash slot (20 MB for the default 5,000,000 slots). The commit-log checks
walk the log once over the range the file's items cover (engine.ops.logread.walk: one decode window at a time)
instead of decoding a record per item.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from engine.broker.commitlog.log import CommitLog
from engine.broker.index.file import IndexFile
from engine.broker.config.lock import lock_held_elsewhere
from engine.progress import Progress

VERIFY_CHUNK = 1 << 18          # items per chunk: about 25 MB of working arrays at most
_LISTED = 50                    # problems of one kind listed before they are only counted


@dataclass
class VerifyReport:
    file: str
    items_checked: int = 0
    problems: list[str] = field(default_factory=list)
    problem_count: int = 0
    max_listed: int = 200
    expired_items: int = 0          # items below the commit log's minimum offset (deleted by clean): not problems
    in_flight: int = 0              # a live writer's items and header fields not yet consistent: not problems
    live: bool = False              # another process held the store lock (a writer) while verifying
    zero_filled: bool = False

    def add(self, msg: str, count: int = 1) -> None:
        self.problem_count += count
        if len(self.problems) < self.max_listed:
            self.problems.append(msg)

    @property
    def ok(self) -> bool:
        return self.problem_count == 0

    def as_dict(self) -> dict:
        return {"file": self.file, "itemsChecked": self.items_checked, "ok": self.ok,
                "problemCount": self.problem_count, "problems": self.problems,
                "expiredItems": self.expired_items, "inFlight": self.in_flight, "liveWriter": self.live,
                "zeroFilled": self.zero_filled}


# ==================================================================== structure

@dataclass
class Structure:
    """What the structural pass learned about a file (recovery's cheap facts)."""
    count: int = 0                  # items 1..count (by the header's indexCount, snapshotted once)
    monotone: bool = True           # item phyOffsets never go down (items are put in commit-log order)
    first_phy: int = -1
    last_phy: int = -1
    trailing: int = 0               # items at the end that point at last_phy (keys of one record)
    distinct_slots: int = 0
    zero_filled: bool = False


def _listed(rep: VerifyReport, idx: np.ndarray, fmt: Callable[[int], str], listed: list[int]) -> None:
    """Add one problem per index in idx, listing at most _LISTED of this kind in total."""
    room = max(0, _LISTED - listed[0])
    for i in idx[:room].tolist():
        rep.add(fmt(i))
    listed[0] += min(room, len(idx))
    if len(idx) > room:
        rep.problem_count += len(idx) - room


def check_structure(f: IndexFile, rep: VerifyReport, live: bool = False,
                    progress: Progress | None = None, chunk: int = VERIFY_CHUNK) -> Structure:
    """Chains, counts and header offsets, `chunk` items at a time (no commit log needed).

    Every chain pointer must go to an older item of the same slot, slot heads must be the newest item of their
    slot, header counts and offsets must agree with the items, and item offsets must not go down. With a live
    writer (live=True) the newest file may run ahead of the snapshot: heads past it are not problems.
    """
    h = f.header
    s = Structure()
    raw_head = bytes(f._mm[:40])
    if f.on_disk_index_count < 0 or h.indexCount > f.index_num:
        rep.add(f"header indexCount {f.on_disk_index_count} is outside 0..{f.index_num}")
    if not any(raw_head) and not np.count_nonzero(f.slots_array()):
        s.zero_filled = rep.zero_filled = True
        if live:
            rep.in_flight += 1
        else:
            rep.add("the file is zero-filled: no header, no slots (a file the writer never wrote, or lost)")
        return s
    items = f.items_array()
    n = s.count = len(items)
    rep.items_checked = n
    # Bounded state: one int32 per hash slot (the newest item of each) and one bit-sized flag per item.
    st = {"heads": np.zeros(f.hash_slot_num, dtype=np.int32), "seen": np.zeros(n + 1, dtype=bool), "roots": 0,
          "links": 0}
    listed = {k: [0] for k in ("hash", "prev", "tdiff", "order")}
    last = None
    for lo in range(0, n, chunk):
        last = _check_chunk(f, items, lo, min(n, lo + chunk), st, rep, listed, last, s)
        if progress:
            progress("verify", min(n, lo + chunk), n)
    expected = st["heads"]
    _check_heads(f, expected, rep, live, s)
    if st["links"] != int(np.count_nonzero(st["seen"])):
        rep.add(f"{st['links'] - int(np.count_nonzero(st['seen']))} item(s) are the previous item of two items: "
                "chains are merged")
    if n and st["roots"] != s.distinct_slots:
        rep.add(f"{st['roots']} items end a chain (prevIndex 0) but {s.distinct_slots} slots are in use: "
                "chains are broken or merged")
    if n:
        if h.beginPhyOffset != s.first_phy:
            rep.add(f"header beginPhyOffset {h.beginPhyOffset} but item 1 is at {s.first_phy}")
        if h.endPhyOffset != s.last_phy:
            if live:
                rep.in_flight += 1
            else:
                rep.add(f"header endPhyOffset {h.endPhyOffset} but the last item is at {s.last_phy}")
        s.trailing = trailing_count(items, s.last_phy)
    return s


def trailing_count(items, last_phy: int) -> int:
    """How many of the last 64 items point at last_phy (the keys of the last record, Structure.trailing)."""
    tail = items["phy"][max(0, len(items) - 64):].astype(np.int64)
    other = np.flatnonzero(tail != last_phy)
    return int(len(tail) - other[-1] - 1) if len(other) else len(tail)


def _check_chunk(f, items, lo, hi, st, rep, listed, last, s: Structure):
    """One chunk of check_structure; returns the last phyOffset seen.

    Chains, without sorting: every prevIndex points at an older item of the same slot, no item is the
    previous one of two items, and there are as many chain ends (prevIndex 0) as slots in use (checked at the
    end). Then each slot's items form one chain in put order, which is what putKey builds (format §5.6).
    """
    part = items[lo:hi]
    hashes = part["hash"].astype(np.int64)
    prev = part["prev"].astype(np.int64)
    tdiff = part["time_diff"].astype(np.int64)
    phys = part["phy"].astype(np.int64)
    del part
    nums = np.arange(lo + 1, hi + 1, dtype=np.int64)
    _listed(rep, np.flatnonzero(hashes < 0), lambda i: f"item {lo + i + 1}: negative key hash {hashes[i]} "
            "(the broker stores abs(hash))", listed["hash"])
    slots = np.where(hashes >= 0, hashes % f.hash_slot_num, 0)
    bad_prev = (prev < 0) | (prev >= nums)
    _listed(rep, np.flatnonzero(bad_prev), lambda i: f"item {lo + i + 1}: prevIndex {prev[i]} does not point "
            "at an older item", listed["prev"])
    linked = np.flatnonzero(~bad_prev & (prev > 0))
    p = prev[linked]
    their = items["hash"][p - 1].astype(np.int64)
    wrong = linked[np.where(their >= 0, their % f.hash_slot_num, 0) != slots[linked]]
    _listed(rep, wrong, lambda i: f"item {lo + i + 1}: prevIndex {prev[i]} is an item of another slot", listed["prev"])
    st["seen"][p] = True  # compared with the number of links at the end: no item may be linked from two
    st["links"] += len(p)
    st["roots"] += int(np.count_nonzero(prev == 0))
    st["heads"][slots] = nums  # items come in order: the last write per slot is its newest item
    _listed(rep, np.flatnonzero(tdiff < 0), lambda i: f"item {lo + i + 1}: negative timeDiff {tdiff[i]}",
            listed["tdiff"])
    if len(phys):
        if s.first_phy < 0:
            s.first_phy = int(phys[0])
        down = np.flatnonzero(np.diff(phys) < 0) + 1
        if last is not None and phys[0] < last:
            down = np.concatenate(([0], down))
        if len(down):
            s.monotone = False
            _listed(rep, down, lambda i: f"item {lo + i + 1}: phyOffset {phys[i]} is below the item before it "
                    "(items are put in commit-log order)", listed["order"])
        s.last_phy = int(phys[-1])
        return int(phys[-1])
    return last


def _check_heads(f, expected, rep, live, s: Structure) -> None:
    slots = f.slots_array()
    count = s.count
    bad_total = 0
    step = VERIFY_CHUNK * 4
    for lo in range(0, f.hash_slot_num, step):
        have = slots[lo:lo + step].astype(np.int64)
        want = expected[lo:lo + step]
        bad = np.flatnonzero(have != want)
        if live and len(bad):
            ahead = have[bad] > count  # a head written by the live writer after the count we read
            rep.in_flight += int(np.count_nonzero(ahead))
            bad = bad[~ahead]
        for i in bad[:max(0, _LISTED - bad_total)].tolist():
            rep.add(f"slot {lo + i}: head is item {have[i]}, expected item {want[i]}")
        if len(bad) > max(0, _LISTED - bad_total):
            rep.problem_count += len(bad) - max(0, _LISTED - bad_total)
        bad_total += len(bad)
    s.distinct_slots = int(np.count_nonzero(expected))
    if f.header.hashSlotCount != s.distinct_slots:
        if live and f.header.hashSlotCount > s.distinct_slots:
            rep.in_flight += 1
        else:
            rep.add(f"header hashSlotCount {f.header.hashSlotCount} but {s.distinct_slots} slots are in use")


# ==================================================================== against the commit log

def store_is_live(index_path: Path) -> bool:
    """True when another process (a broker or a writer) holds the lock of the store this index file is in."""
    return lock_held_elsewhere(Path(index_path).parent.parent)


def verify_index_file(f: IndexFile, commitlog: CommitLog | None, seeded_item1: bool | None = None, *,
                      live: bool | None = None, progress: Progress | None = None) -> VerifyReport:
    """Structural checks, then every item against the commit log when one is given.

    Commit log: the offset holds a valid message (body CRC, PHYSICALOFFSET) whose topic#key set has a key with
    the item's hash, and the decoded time is the message's store time floored to whole seconds from the header
    begin time. Items below the commit log's minimum offset were expired by clean: counted, not problems.
    live: another process is writing the store (default: asked of /proc/locks); its newest items, heads and
    header fields may run ahead of what this reader saw and are counted as in flight, not as problems.
    seeded_item1 is accepted for compatibility and unused (item 1 is always checked against the begin time).
    """
    rep = VerifyReport(f.path.name)
    if live is None:
        live = commitlog is not None and store_is_live(f.path)
    rep.live = live
    s = check_structure(f, rep, live, progress)
    if commitlog is None or s.count == 0:
        return rep
    from engine.ops.verify_log import check_items_against_log

    check_items_against_log(f, commitlog, s, rep, live, progress)
    return rep
