"""Index file verification (the `inspect-index --verify` engine side; recovery uses the same structural check
and item cursor to decide which index files it can trust).

Memory is bounded whatever the file size: items are read a chunk at a time (VERIFY_CHUNK items, about 25 MB
of working arrays), plus one int32 per hash slot (20 MB for the default 5,000,000 slots).

Against the commit log, items are checked in one walk over the log range the file covers (on workers, a
segment per job: _segments_on_workers): items are put in commit-log order, so the file's items and the log's
records are merged like two sorted lists; each decode window of records (engine.broker.commitlog.walk.walk, CRCs
checked) takes the items that point into it, the record's keys are hashed in bulk
(engine.broker.commitlog.walk.key_columns) and the item's hash must be one of them. An item that goes back (a
damaged file) is checked on its own with check_at, up to SLOW_CHECKS of them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from engine.broker.commitlog.log import CommitLog
from engine.broker.commitlog.message import VALID
from engine.broker.index.file import INDEX_HEADER_SIZE, ITEM_SIZE, SLOT_SIZE, IndexFile
from engine.broker.config.lock import lock_held_elsewhere
from engine.findings import ERROR, Finding
from engine.java.lang import key_index_hash
from engine.broker.commitlog.walk import LOG_END, Gap, NeedsLastTs, Window, as_in_order, key_columns, walk
from engine.progress import Progress

VERIFY_CHUNK = 1 << 18          # items per chunk: about 25 MB of working arrays at most
SLOW_CHECKS = 100_000          # items that go back, checked one by one at most
PARALLEL_BYTES = 256 << 20     # a log range at least this big is checked on worker processes
#: Bytes of records the walk against the log decodes at a time, with workers or without (the same windows: the
#: same report). Its temporaries stay small enough to be reused, not mapped anew window after window: 8 MiB
#: windows cost less CPU than 128 MiB ones (inspect-index --verify of ten 64 MiB segments: 1.9 against 2.2 s).
VERIFY_WINDOW = 8 << 20
_LISTED = 50                    # problems of one kind listed before they are only counted


#: The kinds of the located problems (engine.findings) an index file's check reports.
INDEX_STRUCTURE = "index-structure"      # the file's own chains, counts, header fields (no commit log needed)
INDEX_ITEM = "index-item"                # items against the commit-log records they point at
#: kind -> what the broker does at its next start (IndexService.load maps every file as it is; a query follows
#: the slot's chain and reads the records the items name).
#: Byte offsets of the header fields a finding names (IndexHeader: begin/end timestamp, begin/end phyOffset,
#: hashSlotCount, indexCount).
_BEGIN_PHY_AT, _END_PHY_AT, _SLOT_COUNT_AT, _INDEX_COUNT_AT = 16, 24, 32, 36
BROKER_WILL = {
    INDEX_STRUCTURE: "loads the file as it is (IndexService.load): key queries that reach it follow the broken "
                     "chains and answer wrongly or not at all",
    INDEX_ITEM: "returns these items to key queries: the query misses the message or reads another one",
}


@dataclass
class VerifyReport:
    file: str
    items_checked: int = 0
    problems: list[Finding] = field(default_factory=list)
    problem_count: int = 0
    max_listed: int = 200
    expired_items: int = 0          # items below the commit log's minimum offset (deleted by clean): not problems
    in_flight: int = 0              # a live writer's items and header fields not yet consistent: not problems
    live: bool = False              # another process held the store lock (a writer) while verifying
    zero_filled: bool = False

    where: str = ""                 # the file as findings name it (index/<name> in a store); default: file
    items_base: int = 0             # where item 0 would start (header + slots); 0: item offsets unknown

    def add(self, msg: str, count: int = 1, kind: str = INDEX_STRUCTURE, offset: int | None = None) -> None:
        self.problem_count += count
        if len(self.problems) < self.max_listed:
            self.problems.append(Finding(kind, ERROR, self.where or self.file, offset, msg, BROKER_WILL[kind]))

    def at_item(self, n: int) -> int | None:
        """The byte offset of item n (1-based, as prevIndex counts: the broker puts item n at header + slots +
        n x 20)."""
        return self.items_base + ITEM_SIZE * int(n) if self.items_base else None

    def add_item(self, msg: str, count: int = 1, item: int | None = None) -> None:
        """A problem of an item (number `item`, when one) against the commit log."""
        self.add(msg, count, INDEX_ITEM, None if item is None else self.at_item(item))

    @property
    def ok(self) -> bool:
        return self.problem_count == 0

    def as_dict(self) -> dict:
        return {"file": self.file, "itemsChecked": self.items_checked, "ok": self.ok,
                "problemCount": self.problem_count, "findings": [p.as_dict() for p in self.problems],
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


def _listed(rep: VerifyReport, idx: np.ndarray, fmt: Callable[[int], str], listed: list[int],
            first: int | None = None) -> None:
    """Add one problem per index in idx, listing at most _LISTED of this kind in total; index i is item first + i."""
    room = max(0, _LISTED - listed[0])
    for i in idx[:room].tolist():
        rep.add(fmt(i), offset=None if first is None else rep.at_item(first + i))
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
    raw_head = f.raw_header()
    if f.on_disk_index_count < 0 or h.indexCount > f.index_num:
        rep.add(f"header indexCount {f.on_disk_index_count} is outside 0..{f.index_num}", offset=_INDEX_COUNT_AT)
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
            rep.add(f"header beginPhyOffset {h.beginPhyOffset} but item 1 is at {s.first_phy}", offset=_BEGIN_PHY_AT)
        if h.endPhyOffset != s.last_phy:
            if live:
                rep.in_flight += 1
            else:
                rep.add(f"header endPhyOffset {h.endPhyOffset} but the last item is at {s.last_phy}",
                        offset=_END_PHY_AT)
        s.trailing = trailing_count(items, s.last_phy)
    return s


def header_goes_back(f: IndexFile) -> str | None:
    """Why the file's header does not bound its messages' store times, or None: its last item was stored before its
    first (a clock that stepped back while it was written; format §5.7: the broker's query then skips the file
    for ranges inside its header's span, and its decoded item times are clamped to the begin time)."""
    h = f.header
    if f.item_count > 1 and h.endTimestamp < h.beginTimestamp:
        return (f"header endTimestamp {h.endTimestamp} is before beginTimestamp {h.beginTimestamp}: store times "
                "went back while the file was written, so its header does not bound its messages' times (the "
                "broker's query by key skips it for some time ranges; rmqtool query-key does not)")
    return None


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
    # Native int32 columns (the items are big-endian; int32 arithmetic is what the fields hold, and half the bytes).
    hashes = part["hash"].astype(np.int32)
    prev = part["prev"].astype(np.int32)
    phys = part["phy"].astype(np.int64)
    neg_tdiff = np.flatnonzero(part["time_diff"] < 0)
    del part
    nums = np.arange(lo + 1, hi + 1, dtype=np.int32)
    _listed(rep, np.flatnonzero(hashes < 0), lambda i: f"item {lo + i + 1}: negative key hash {hashes[i]} "
            "(the broker stores abs(hash))", listed["hash"], lo + 1)
    slots = _slots(hashes, f.hash_slot_num)
    bad_prev = (prev < 0) | (prev >= nums)
    _listed(rep, np.flatnonzero(bad_prev), lambda i: f"item {lo + i + 1}: prevIndex {prev[i]} does not point "
            "at an older item", listed["prev"], lo + 1)
    linked = np.flatnonzero(~bad_prev & (prev > 0))
    p = prev[linked]
    their = _slots(items["hash"][p - 1].astype(np.int32), f.hash_slot_num)
    wrong = linked[their != slots[linked]]
    _listed(rep, wrong, lambda i: f"item {lo + i + 1}: prevIndex {prev[i]} is an item of another slot", listed["prev"],
            lo + 1)
    st["seen"][p] = True  # compared with the number of links at the end: no item may be linked from two
    st["links"] += len(p)
    st["roots"] += int(np.count_nonzero(prev == 0))
    st["heads"][slots] = nums  # items come in order: the last write per slot is its newest item
    _listed(rep, neg_tdiff, lambda i: f"item {lo + i + 1}: negative timeDiff {int(items['time_diff'][lo + i])}",
            listed["tdiff"], lo + 1)
    if len(phys):
        if s.first_phy < 0:
            s.first_phy = int(phys[0])
        down = np.flatnonzero(np.diff(phys) < 0) + 1
        if last is not None and phys[0] < last:
            down = np.concatenate(([0], down))
        if len(down):
            s.monotone = False
            _listed(rep, down, lambda i: f"item {lo + i + 1}: phyOffset {phys[i]} is below the item before it "
                    "(items are put in commit-log order)", listed["order"], lo + 1)
        s.last_phy = int(phys[-1])
        return int(phys[-1])
    return last


def _slots(hashes: np.ndarray, slot_num: int) -> np.ndarray:
    """The slot of each (int32) key hash, as the broker's abs(hash) % slots; a negative hash (damage) counts as
    slot 0."""
    out = hashes % slot_num
    out[hashes < 0] = 0
    return out


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
            rep.add(f"slot {lo + i}: head is item {have[i]}, expected item {want[i]}",
                    offset=INDEX_HEADER_SIZE + SLOT_SIZE * (lo + i))
        if len(bad) > max(0, _LISTED - bad_total):
            rep.problem_count += len(bad) - max(0, _LISTED - bad_total)
        bad_total += len(bad)
    s.distinct_slots = int(np.count_nonzero(expected))
    if f.header.hashSlotCount != s.distinct_slots:
        if live and f.header.hashSlotCount > s.distinct_slots:
            rep.in_flight += 1
        else:
            rep.add(f"header hashSlotCount {f.header.hashSlotCount} but {s.distinct_slots} slots are in use",
                    offset=_SLOT_COUNT_AT)


# ==================================================================== against the commit log

def store_is_live(index_path: Path) -> bool:
    """True when another process (a broker or a writer) holds the lock of the store this index file is in."""
    return lock_held_elsewhere(Path(index_path).parent.parent)


def verify_index_file(f: IndexFile, commitlog: CommitLog | None, seeded_item1: bool | None = None, *,
                      live: bool | None = None, progress: Progress | None = None,
                      jobs: "SegmentJobs | None" = None) -> VerifyReport:
    """Structural checks, then every item against the commit log when one is given.

    Commit log: the offset holds a valid message (body CRC, PHYSICALOFFSET) whose topic#key set has a key with
    the item's hash, and the decoded time is the message's store time floored to whole seconds from the header
    begin time. Items below the commit log's minimum offset were expired by clean: counted, not problems.
    live: another process is writing the store (default: asked of /proc/locks); its newest items, heads and
    header fields may run ahead of what this reader saw and are counted as in flight, not as problems.
    jobs: worker processes shared by several files' checks (SegmentJobs; see begin_verify).
    seeded_item1 is accepted for compatibility and unused (item 1 is always checked against the begin time).
    """
    return begin_verify(f, commitlog, live=live, progress=progress, jobs=jobs)()


def begin_verify(f: IndexFile, commitlog: CommitLog | None, *, live: bool | None = None,
                 progress: Progress | None = None, jobs: "SegmentJobs | None" = None) -> Callable[[], VerifyReport]:
    """verify_index_file in two steps: the structural checks now, and the items against the log handed to `jobs`
    (its workers, a segment per job) when there are such, so the caller can check the next file's structure while
    the workers go on; the function returned waits for them and gives the report (keep f open until then)."""
    where = f"index/{f.path.name}" if f.path.parent.name == "index" else str(f.path)
    rep = VerifyReport(f.path.name, where=where, items_base=INDEX_HEADER_SIZE + SLOT_SIZE * f.hash_slot_num)
    if live is None:
        live = commitlog is not None and store_is_live(f.path)
    rep.live = live
    s = check_structure(f, rep, live, progress)
    went_back = header_goes_back(f)
    if went_back:
        rep.add(went_back)
    if commitlog is None or s.count == 0:
        return lambda: rep
    finish = check_items_against_log(f, commitlog, s, rep, live, progress, jobs)

    def done() -> VerifyReport:
        finish()
        return rep
    return done


class ItemCursor:
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
        rep.add_item(f"item {nums[i] + 1}: phyOffset {phy[i]} is not the start of a valid message", item=nums[i] + 1)
    if (~hit).sum() > 50:
        rep.problem_count += int((~hit).sum()) - 50
    if not hit.any():
        return
    nums, phy, ih, tdiff, r = nums[hit], phy[hit], ih[hit], tdiff[hit], r[hit]
    found = keys_match(w, r, ih)
    for i in np.flatnonzero(~found)[:50].tolist():
        rep.add_item(f"item {nums[i] + 1}: no key of the message at {phy[i]} has hash {ih[i]}", item=nums[i] + 1)
    if (~found).sum() > 50:
        rep.problem_count += int((~found).sum()) - 50
    ts = w.batch.store_ts[r].astype(np.int64)
    h = f.header
    first = nums == 0
    for i in np.flatnonzero(first & (ts != h.beginTimestamp)).tolist():
        rep.add_item(f"item 1: header beginTimestamp {h.beginTimestamp} but the message was stored at {ts[i]}",
                     item=1)
    dec = h.beginTimestamp + tdiff * 1000
    # Item 1's timeDiff is relative to the seed of a rolled file (format §5.6); older messages decode as 0.
    bad = ~first & (h.beginTimestamp > 0) & (ts >= h.beginTimestamp) & ~((dec <= ts) & (ts < dec + 1000))
    for i in np.flatnonzero(bad)[:50].tolist():
        rep.add_item(f"item {nums[i] + 1}: decoded time {dec[i]} does not match store time {ts[i]}", item=nums[i] + 1)


def _slow_check(cl: CommitLog, num: int, off: int, ih: int, rep: VerifyReport) -> int | None:
    """One item checked with check_at (items out of commit-log order); returns the message's store time."""
    r = cl.check_at(off, check_crc=True)
    if r.status != VALID or r.record.physical_offset != off:
        rep.add_item(f"item {num + 1}: phyOffset {off} is not a valid message ({r.reason or r.status})", item=num + 1)
        return None
    if ih not in {key_index_hash(k) for k in r.record.index_keys()}:
        rep.add_item(f"item {num + 1}: no key of the message at {off} ({r.record.topic}) has hash {ih}", item=num + 1)
    return r.record.store_timestamp


def _walk_start(cl: CommitLog, off: int) -> int:
    r = cl.check_at(off, check_crc=False)
    if r.status == VALID and r.record.physical_offset == off:
        return off
    seg = cl.queue.find(off)
    return seg.start if seg is not None else off


def _nothing() -> None:
    return None


def check_items_against_log(f: IndexFile, cl: CommitLog, s: Structure, rep: VerifyReport, live: bool,
                            progress: Progress | None = None, jobs: "SegmentJobs | None" = None
                            ) -> Callable[[], None]:
    """Every item of f against the commit log (see verify_index_file). On worker processes, a segment per job
    (`jobs`, or workers of its own when the range is long or --workers was given); returns the function that
    waits for them and completes `rep` (already done when no job was handed out)."""
    items = f.items_array()
    phys_all = items["phy"]
    min_off = cl.min_offset
    start = 0
    if min_off > 0 and s.count:
        # Expired items (below the log's first segment) come first in a monotone file.
        expired = items_below(phys_all, s.count, s.monotone, min_off)
        rep.expired_items = expired
        start = expired if s.monotone else 0
    if start >= s.count:
        return _nothing
    cur = ItemCursor(f, start, s.count)
    end_of_log = cl.max_file_offset()
    first_off = int(cur.phy[0])
    if not cl.segments or first_off >= end_of_log:
        _past_end(cur, rep, live, end_of_log)
        return _nothing
    start = _walk_start(cl, max(first_off, min_off))
    from engine import workers

    helped = workers.fan_out(s.last_phy - start, PARALLEL_BYTES) or jobs is not None  # --workers N: N processes
    ranges = _segment_ranges(f, cl, s, start, cur.pos) if helped and s.monotone and not live and \
        workers.can_fork() else []
    # (a file of one segment: on the shared workers too, while this process goes on with the next file)
    if len(ranges) > (0 if jobs is not None else 1):
        # A segment per job on worker processes (each walks its segment as this process would); a segment that
        # is not clean (see _segments_on_workers) sends the file to the walk in order, in this process.
        own = SegmentJobs(cl) if jobs is None else None
        waiting = _segments_on_workers(jobs or own, f, s, ranges, progress)

        def finish() -> None:
            try:
                got = waiting()
            finally:
                if own is not None:
                    own.close()
            if got is None:
                _walk_in_order(f, cl, s, rep, live, ItemCursor(f, cur.pos, s.count), start, helped, progress)
                return
            calls, extra, last_ts, left = got
            for msg, count, item in calls:
                rep.add_item(msg, count, item)
            rep.problem_count += extra
            _past_end(ItemCursor(f, left, s.count), rep, live, end_of_log)
            _check_end_timestamp(f, rep, live, last_ts)
        return finish
    _walk_in_order(f, cl, s, rep, live, cur, start, helped, progress)
    return _nothing


def _walk_in_order(f: IndexFile, cl: CommitLog, s: Structure, rep: VerifyReport, live: bool, cur: ItemCursor,
                   start: int, helped: bool, progress: Progress | None) -> None:
    """check_items_against_log's walk over the range in order, from `start`, the items from the cursor on."""
    min_off = cl.min_offset
    end_of_log = cl.max_file_offset()
    last_ts = None
    slow = 0
    # A long range has a helper process extract the keys while this one decodes and checks CRCs.
    for ev in walk(cl, start, check_crc=True, end=s.last_phy + 1, window=VERIFY_WINDOW, parallel_keys=helped):
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
        rep.add_item(f"{slow - SLOW_CHECKS} more items out of commit-log order were not checked one by one",
                     slow - SLOW_CHECKS)
    _past_end(cur, rep, live, end_of_log)
    _check_end_timestamp(f, rep, live, last_ts)


def _check_end_timestamp(f: IndexFile, rep: VerifyReport, live: bool, last_ts: int | None) -> None:
    if last_ts is not None and f.header.endTimestamp != last_ts:
        if live:
            rep.in_flight += 1
        else:
            rep.add_item(f"header endTimestamp {f.header.endTimestamp} but the last item's message was stored at "
                         f"{last_ts}")


class _Recorder(VerifyReport):
    """What a segment's check adds to the report, kept in order to be added to the real one (in the parent)."""

    def __init__(self):
        super().__init__("")
        self.calls: list[tuple[str, int, int | None]] = []

    def add_item(self, msg: str, count: int = 1, item: int | None = None) -> None:
        self.calls.append((msg, count, item))


def item_runs(phys, lo: int, count: int, cuts: list[int]) -> list[tuple[int, int]]:
    """A monotone file's items lo..count cut where their phyOffset reaches each of `cuts` (ascending): the
    len(cuts) + 1 runs [i0, i1), found by bisection over the file's (mapped) phy column, nothing copied."""
    import bisect

    out = []
    for c in cuts:
        hi = bisect.bisect_left(phys, c, lo, count)
        out.append((lo, hi))
        lo = hi
    out.append((lo, count))
    return out


def items_below(phys, count: int, monotone: bool, offset: int) -> int:
    """How many of a file's items 1..count point below `offset` (phys: its mapped phy column): by bisection when
    the items are in log order (monotone), else counted a chunk at a time."""
    if monotone:
        return item_runs(phys, 0, count, [offset])[0][1]
    return sum(int(np.count_nonzero(phys[lo:lo + VERIFY_CHUNK].astype(np.int64) < offset))
               for lo in range(0, count, VERIFY_CHUNK))


def _segment_ranges(f: IndexFile, cl: CommitLog, s: Structure, start: int, first_item: int
                    ) -> list[tuple[int, int, int, int, bool]]:
    """(log offset a, walk end, first item, end item, last) per segment the items from first_item on point into,
    the first from `start` (where the walk in order would start): the items of a monotone file with phy in
    [a, the next segment's start)."""
    segs = [g for g in cl.segments if g.end > start and g.start <= s.last_phy]
    runs = item_runs(f.items_array()["phy"], first_item, s.count, [g.start for g in segs[1:]])
    return [(max(g.start, start), segs[k + 1].start if k + 1 < len(segs) else s.last_phy + 1, *runs[k],
             k + 1 == len(segs)) for k, g in enumerate(segs)]


class SegmentJobs:
    """Worker processes (engine.workers) that check index files' items against the commit log a segment per job,
    for one file or for several in turn (inspect-index --verify: the next file's structure is checked in this
    process while the workers check the segments of the one before). The workers inherit the commit log; each
    opens the index file a job names itself, read-only; close() stops them."""

    def __init__(self, cl: CommitLog, n: int | None = None):
        from engine import workers

        self._lent = workers.shared(cl)
        self.token = self._lent.__enter__()  # (lent before the pool forks its workers)
        try:
            self.pool = workers.WorkerPool(n or workers.count())
        except BaseException:
            self._lent.__exit__(None, None, None)
            raise

    def submit(self, f: IndexFile, last_phy: int, job: tuple):
        return self.pool.submit(_segment_job, self.token, str(f.path), f.hash_slot_num, f.index_num, last_phy, *job)

    def result(self, fut):
        return self.pool.result(fut)

    def close(self) -> None:
        try:
            self.pool.close()
        finally:
            self._lent.__exit__(None, None, None)


def _segments_on_workers(jobs: SegmentJobs, f: IndexFile, s: Structure, ranges: list[tuple], progress):
    """check_items_against_log's walk, a segment per job on worker processes (`ranges`: _segment_ranges): each
    job walks its segment from its start (the first from where the walk in order would start) with the items that
    point into it, as the walk in order does there (the same windows: the answers are the same). That holds unless
    damage comes before the segment's first record (engine.broker.commitlog.walk.as_in_order); a job says so
    then, and also where the log ends before the next segment, or an item points between records (or before the
    segment's first record: a DLedger entry's header).

    The jobs are handed out now; returns the function that waits for them: (the report's item problems in order,
    problems only counted, the store time of the record at last_phy or None, the first item no job took), or
    None when a segment was not clean (the caller then walks the range in order)."""
    futures = [jobs.submit(f, s.last_phy, r) for r in ranges]

    def wait():
        calls: list = []
        extra, last_ts, left = 0, None, ranges[0][2]
        try:
            for fut in futures:
                got = jobs.result(fut)
                if got is None:
                    return None
                c, x, ts, left = got
                calls += c
                extra += x
                if ts is not None:
                    last_ts = ts
                if progress:
                    progress("verify", left, s.count)
        finally:
            for fut in futures:
                fut.cancel()  # (the segments after one that was not clean: not started, not needed)
        return calls, extra, last_ts, left
    return wait


_JOB_FILE: dict = {}


def _job_file(path: str, slots: int, items: int) -> IndexFile:
    """In a worker: the index file a job names, opened read-only (the one opened before is closed: jobs come a
    file after the other)."""
    f = _JOB_FILE.get(path)
    if f is None:
        for other in list(_JOB_FILE):
            _JOB_FILE.pop(other).close()
        f = _JOB_FILE[path] = IndexFile.open(Path(path), slots, items)
    return f


def _segment_job(token: str, path: str, slots: int, items: int, last_phy: int, a: int, end: int, i0: int, i1: int,
                 last: bool):
    """In a worker: one segment's items against its records (see _segments_on_workers); None when not clean."""
    from engine.workers import inherited

    cl = inherited(token)
    f = _job_file(path, slots, items)
    rep = _Recorder()
    cur = ItemCursor(f, i0, i1) if i1 > i0 else None
    last_ts, windows = None, 0
    try:
        for ev in as_in_order(walk(cl, a, check_crc=True, end=end, window=VERIFY_WINDOW)):
            if not isinstance(ev, Window):
                if isinstance(ev, Gap) and ev.kind == LOG_END and not last:
                    return None  # (the log ends before the next segment: the walk in order would not go on)
                continue  # a filler, a gap after a record (the walk in order carries nothing over it this one lacks)
            windows += 1
            if cur is None:
                continue
            nums, phy, ih, td = cur.take_upto(int(ev.offsets[-1]))
            if not len(nums):
                continue
            if int(phy[0]) < int(ev.offsets[0]):  # an item between records (sorted: the first is the lowest)
                return None
            _check_window(ev, nums, phy, ih, td, f, rep)
            r, hit = _record_of_window(ev, np.array([last_phy]))
            if hit[0]:
                last_ts = int(ev.batch.store_ts[r[0]])
    except NeedsLastTs:
        return None
    left = i1 if cur is None else cur.pos
    if not windows or (not last and left < i1):
        return None
    return rep.calls, rep.problem_count, last_ts, left


def _past_end(cur: ItemCursor, rep: VerifyReport, live: bool, end_of_log: int) -> None:
    """Items the walk never reached: past the end of the valid log (or a live writer's newest records)."""
    nums, phy, _, _ = cur.take_upto(2**62)
    if not len(nums):
        return
    if live:
        rep.in_flight += len(nums)
        return
    for i in range(min(50, len(nums))):
        rep.add_item(f"item {nums[i] + 1}: phyOffset {phy[i]} is not a valid message (past the end of the valid log)",
                     item=nums[i] + 1)
    if len(nums) > 50:
        rep.problem_count += len(nums) - 50
