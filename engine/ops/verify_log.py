"""Index items against the commit log, as one walk over the log range a file covers (inspect-index --verify).

Items are put in commit-log order, so the file's items and the log's records are merged like two sorted
lists: each decode window of records (engine.ops.logread.walk, CRCs checked) takes the items that point into
it; the record's keys are hashed in bulk (engine.ops.logread.key_columns) and the item's hash must be one of
them. An item that goes back (a damaged file) is checked on its own with check_at, up to SLOW_CHECKS of them.
"""
from __future__ import annotations

import numpy as np

from engine.broker.commitlog.log import CommitLog
from engine.broker.index.file import IndexFile
from engine.broker.commitlog.message import VALID
from engine.java.lang import key_index_hash
from engine.ops.logread import Window, key_columns, walk
from engine.ops.verify import VERIFY_CHUNK, Structure, VerifyReport
from engine.progress import Progress

SLOW_CHECKS = 100_000
PARALLEL_BYTES = 256 << 20


class _Items:
    """The file's items from a cursor on, a chunk at a time, as native int64 columns."""

    def __init__(self, f: IndexFile, start: int, count: int):
        self.f = f
        self.pos, self.count = start, count
        self._load()

    def _load(self) -> None:
        hi = min(self.count, self.pos + VERIFY_CHUNK)
        part = self.f.items_array()[self.pos:hi]  # a view only for this call: the mapping can close later
        self.base = self.pos
        self.phy = part["phy"].astype(np.int64)
        self.hash = part["hash"].astype(np.int64)
        self.tdiff = part["time_diff"].astype(np.int64)
        del part

    def take_upto(self, limit: int):
        """(item numbers - 1, phy, hash, tdiff) of the next items with phy <= limit, advancing the cursor;
        items that go back below an earlier one are returned too (the caller checks them on their own)."""
        out = []
        while self.pos < self.count:
            rel = self.pos - self.base
            if rel >= len(self.phy):
                self._load()
                continue
            k = int(np.searchsorted(self.phy[rel:], limit, side="right"))
            if k == 0 and self.phy[rel] > limit:
                break
            k = max(k, 1) if self.phy[rel] <= limit else k
            sl = slice(rel, rel + k)
            out.append((np.arange(self.pos, self.pos + k), self.phy[sl], self.hash[sl], self.tdiff[sl]))
            self.pos += k
            if rel + k < len(self.phy):
                break
        if not out:
            e = np.empty(0, np.int64)
            return e, e, e, e
        return tuple(np.concatenate(c) for c in zip(*out))


def _record_of_window(w: Window, phy: np.ndarray):
    offs = w.offsets
    r = np.minimum(np.searchsorted(offs, phy), len(offs) - 1)
    return r, offs[r] == phy


def keys_match(w: Window, r: np.ndarray, ih: np.ndarray) -> np.ndarray:
    """For items pointing at records r of the window (record numbers) with key hashes ih (as stored: abs of
    the Java hashCode, format §5.5): is the hash one of the record's index keys (format §5.8)?"""
    if len(r) and bool((r[1:] >= r[:-1]).all()):  # items in commit-log order: no sort needed
        first = np.empty(len(r), dtype=bool)
        first[0] = True
        np.not_equal(r[1:], r[:-1], out=first[1:])
        rows = r[first]
        local = np.cumsum(first) - 1
    else:
        rows = np.unique(r)
        local = np.searchsorted(rows, r)
    # every record of the window (the usual case): its key columns as they are, no selection
    cols = key_columns(w, None if len(rows) == len(w.batch) else rows)
    nk = cols["nkeys"].astype(np.int64)
    kstart = np.concatenate(([0], np.cumsum(nk)[:-1])) if len(nk) else nk
    kh = np.abs(cols["key_hash"].astype(np.int64))
    kh[kh == 2**31] = 0  # index_hash: abs(Integer.MIN_VALUE) becomes 0
    found = np.zeros(len(r), dtype=bool)
    n_of, start_of = nk[local], kstart[local]
    for j in range(int(nk.max()) if len(nk) else 0):
        has = n_of > j
        found |= has & (kh[np.where(has, start_of + j, 0)] == ih)
    return found


def _check_window(w: Window, nums, phy, ih, tdiff, f: IndexFile, rep: VerifyReport) -> None:
    r, hit = _record_of_window(w, phy)
    for i in np.flatnonzero(~hit)[:50].tolist():
        rep.add(f"item {nums[i] + 1}: phyOffset {phy[i]} is not the start of a valid message")
    if (~hit).sum() > 50:
        rep.problem_count += int((~hit).sum()) - 50
    if not hit.any():
        return
    nums, phy, ih, tdiff, r = nums[hit], phy[hit], ih[hit], tdiff[hit], r[hit]
    found = keys_match(w, r, ih)
    for i in np.flatnonzero(~found)[:50].tolist():
        rep.add(f"item {nums[i] + 1}: no key of the message at {phy[i]} has hash {ih[i]}")
    if (~found).sum() > 50:
        rep.problem_count += int((~found).sum()) - 50
    ts = w.batch.store_ts[r].astype(np.int64)
    h = f.header
    first = nums == 0
    for i in np.flatnonzero(first & (ts != h.beginTimestamp)).tolist():
        rep.add(f"item 1: header beginTimestamp {h.beginTimestamp} but the message was stored at {ts[i]}")
    dec = h.beginTimestamp + tdiff * 1000
    # Item 1's timeDiff is relative to the seed of a rolled file (format §5.6); older messages decode as 0.
    bad = ~first & (h.beginTimestamp > 0) & (ts >= h.beginTimestamp) & ~((dec <= ts) & (ts < dec + 1000))
    for i in np.flatnonzero(bad)[:50].tolist():
        rep.add(f"item {nums[i] + 1}: decoded time {dec[i]} does not match store time {ts[i]}")


def _slow_check(cl: CommitLog, num: int, off: int, ih: int, rep: VerifyReport) -> int | None:
    """One item checked with check_at (items out of commit-log order); returns the message's store time."""
    r = cl.check_at(off, check_crc=True)
    if r.status != VALID or r.record.physical_offset != off:
        rep.add(f"item {num + 1}: phyOffset {off} is not a valid message ({r.reason or r.status})")
        return None
    if ih not in {key_index_hash(k) for k in r.record.index_keys()}:
        rep.add(f"item {num + 1}: no key of the message at {off} ({r.record.topic}) has hash {ih}")
    return r.record.store_timestamp


def _walk_start(cl: CommitLog, off: int) -> int:
    r = cl.check_at(off, check_crc=False)
    if r.status == VALID and r.record.physical_offset == off:
        return off
    seg = cl.queue.find(off)
    return seg.start if seg is not None else off


def check_items_against_log(f: IndexFile, cl: CommitLog, s: Structure, rep: VerifyReport, live: bool,
                            progress: Progress | None = None) -> None:
    """Every item of f against the commit log (see verify_index_file)."""
    items = f.items_array()
    phys_all = items["phy"]
    min_off = cl.min_offset
    start = 0
    if min_off > 0 and s.count:
        # Expired items (below the log's first segment) come first in a monotone file.
        expired = int(np.count_nonzero(phys_all.astype(np.int64) < min_off)) if s.count <= VERIFY_CHUNK else \
            sum(int(np.count_nonzero(phys_all[lo:lo + VERIFY_CHUNK].astype(np.int64) < min_off))
                for lo in range(0, s.count, VERIFY_CHUNK))
        rep.expired_items = expired
        start = expired if s.monotone else 0
    if start >= s.count:
        return
    cur = _Items(f, start, s.count)
    last_ts = None
    end_of_log = cl.max_file_offset()
    first_off = int(cur.phy[0])
    if not cl.segments or first_off >= end_of_log:
        _past_end(cur, rep, live, end_of_log)
        return
    slow = 0
    start = _walk_start(cl, max(first_off, min_off))
    # A long range has a helper process extract the keys while this one decodes and checks CRCs.
    helped = s.last_phy - start >= PARALLEL_BYTES
    for ev in walk(cl, start, check_crc=True, end=s.last_phy + 1, parallel_keys=helped):
        if not isinstance(ev, Window):
            continue
        nums, phy, ih, td = cur.take_upto(int(ev.offsets[-1]))
        if not len(nums):
            continue
        back = phy < int(ev.offsets[0])
        for i in np.flatnonzero(back).tolist():  # out of order (damaged file) or before min offset
            if phy[i] < min_off:
                if not s.monotone:
                    rep.expired_items += 1
                continue
            slow += 1
            if slow <= SLOW_CHECKS:
                _slow_check(cl, int(nums[i]), int(phy[i]), int(ih[i]), rep)
        keep = ~back
        _check_window(ev, nums[keep], phy[keep], ih[keep], td[keep], f, rep)
        r, hit = _record_of_window(ev, np.array([s.last_phy]))
        if hit[0]:
            last_ts = int(ev.batch.store_ts[r[0]])
        if progress:
            progress("verify", cur.pos, s.count)
    if slow > SLOW_CHECKS:
        rep.add(f"{slow - SLOW_CHECKS} more items out of commit-log order were not checked one by one",
                slow - SLOW_CHECKS)
    _past_end(cur, rep, live, end_of_log)
    if last_ts is not None and f.header.endTimestamp != last_ts:
        if live:
            rep.in_flight += 1
        else:
            rep.add(f"header endTimestamp {f.header.endTimestamp} but the last item's message was stored at "
                    f"{last_ts}")


def _past_end(cur: _Items, rep: VerifyReport, live: bool, end_of_log: int) -> None:
    """Items the walk never reached: past the end of the valid log (or a live writer's newest records)."""
    nums, phy, _, _ = cur.take_upto(2**62)
    if not len(nums):
        return
    if live:
        rep.in_flight += len(nums)
        return
    for i in range(min(50, len(nums))):
        rep.add(f"item {nums[i] + 1}: phyOffset {phy[i]} is not a valid message (past the end of the valid log)")
    if len(nums) > 50:
        rep.problem_count += len(nums) - 50
