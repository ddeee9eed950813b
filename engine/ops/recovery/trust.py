"""Recovery, step 2: which checkpoint values, consume queues and index files can be trusted.

* The checkpoint (format §6): unreadable, negative or claiming more than the log holds means rewind and rewrite.
* The broker's start segment (format §7.3, §7.4) is engine.broker.commitlog.startup.broker_start's.
* Index files: each is checked without the commit log first (chains, counts, header offsets, items in commit-log
  order and inside segments that exist, its first and last item's store times, and continuity with the file
  before it: a missing, renamed or zero-filled file in the sequence shows here). The leading files that pass,
  are full and were flushed (endTimestamp <= the checkpoint's indexMsgTimestamp, format §5.8) are trusted. The
  next file keeps the longest prefix of items that the walk confirms (each item at the start of a valid record,
  its decoded time matching), and everything after that prefix is re-indexed (engine.ops.recovery.dispatch).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.broker.config.checkpoint import Checkpoint
from engine.broker.commitlog.log import CommitLog
from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.index.file import IndexFile, index_file_size, suggest_geometry
from engine.broker.layout import StoreLayout, list_index_files
from engine.broker.commitlog.message import BLANK, VALID
from engine.errors import GeometryError
from engine.broker.commitlog.walk import Window
from engine.ops.recovery.scan import ScanHooks
from engine.broker.index.verify import (VERIFY_CHUNK, ItemCursor, Structure, VerifyReport, check_structure,
                                        items_below, keys_match, trailing_count)

#: Items per chunk of a structure check that runs beside the walk: about 25 MB of working arrays, on top of the
#: check's per-file state (4 bytes per hash slot and 1 per item) and the walk's own memory.
OVERLAP_CHUNK = 1 << 18
CONTINUITY_RECORDS = 10_000  # records walked to confirm that no index file is missing between two files


# ==================================================================== checkpoint

@dataclass
class CheckpointFacts:
    cp: Checkpoint
    ok: bool
    problem: str = ""


def read_checkpoint(layout: StoreLayout) -> CheckpointFacts:
    """The checkpoint and whether it can be trusted (Checkpoint.read_checked): a missing, short or garbage
    checkpoint reads as zeros, so recovery rewinds to the first segment."""
    cp, why = Checkpoint.read_checked(layout.checkpoint)
    if why is None:
        return CheckpointFacts(cp, True)
    return CheckpointFacts(cp if why.startswith("missing") else Checkpoint(), False, why)


# ==================================================================== index files

@dataclass
class IndexFacts:
    path: Path
    f: IndexFile | None
    problem: str = ""               # why the file cannot be kept as it is (wrong size, structure, continuity)
    structure: Structure | None = None
    full: bool = False
    flushed: bool = False

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def count(self) -> int:
        return self.structure.count if self.structure else 0

    @property
    def prefix_ok(self) -> bool:
        """Its items can be kept up to where the walk stops confirming them."""
        return self.f is not None and not self.problem and self.structure is not None and self.count > 0

    def close(self) -> None:
        if self.f is not None:
            self.f.close()


def open_index_files(cfg: BrokerConfig, index_dir: Path) -> list[IndexFacts]:
    """The index files, opened in cfg's geometry (settled by the caller: writer_index_geometry)."""
    paths = list_index_files(index_dir)
    expected = index_file_size(cfg.maxHashSlotNum, cfg.maxIndexNum)
    sizes = {}
    for p in paths:
        try:
            sizes[p] = os.lstat(p).st_size
        except FileNotFoundError:
            continue
    if paths and sizes and all(sz != expected for sz in sizes.values()):
        # Every file disagrees with the geometry: the geometry is wrong, not the files (pitfall 27).
        first = next(iter(sizes))
        raise GeometryError(
            f"index files in {index_dir} are {sizes[first]} bytes, but {cfg.maxHashSlotNum} slots x "
            f"{cfg.maxIndexNum} items gives {expected} bytes{suggest_geometry(sizes[first])}; pass the store's "
            "geometry (--hash-slots/--max-index or --broker-conf)")
    out = []
    for p, size in sizes.items():
        if size != expected:
            out.append(IndexFacts(p, None, f"{size} bytes, expected {expected}"))
        else:
            out.append(IndexFacts(p, IndexFile.open(p, cfg.maxHashSlotNum, cfg.maxIndexNum, writable=False)))
    return out


def check_index_files(files: list[IndexFacts], cl: CommitLog, cp: CheckpointFacts, index_num: int,
                      full_from: int | None = None) -> "StructureChecks":
    """The checks that need no walk (see the module docstring); sets each file's problem.

    The files' structure checks (and whether every item lies in a segment) are the long part: they run on a
    thread, one file after the other, while the caller goes on (the walk). Each file's facts are read from its
    items' ends (what the check finds in a file that passes it, see quick_structure) and the problems are judged
    as if every check passes; the returned StructureChecks.settle() waits for the checks and says whether any
    found what was assumed away (then the problems are judged again with the verdicts, and the caller must redo
    what it did with them). A file quick_structure cannot read is checked before this returns.
    `full_from` (a walk that reads no earlier than the broker's start-up, doctor's): a file whose items all lie
    before it keeps the facts read from its items' ends, unchecked (the broker's start-up reads none of its items).
    Memory: one check's chunk columns (OVERLAP_CHUNK items) and slot heads (engine.broker.index.verify)."""
    from concurrent.futures import ThreadPoolExecutor

    todo = [i for i, x in enumerate(files) if x.f is not None]
    pool = ThreadPoolExecutor(1)
    guessed = {i: q for i in todo if (q := quick_structure(files[i].f)) is not None}
    futures = {i: pool.submit(_structure, files[i], cl, OVERLAP_CHUNK) for i in todo
               if full_from is None or i not in guessed or guessed[i].last_phy >= full_from}
    checks = StructureChecks(files, cl, cp, index_num, pool, futures, guessed)
    checks.judge({i: (None, q, "") for i, q in guessed.items()} | {i: futures[i].result() for i in todo
                                                                if i not in guessed})
    if not guessed:
        checks.settle()
    return checks


def _structure(x: IndexFacts, cl: CommitLog, chunk: int) -> tuple[VerifyReport, Structure, str]:
    """The structure check of one file, and whether its items lie in segments (when the check passes)."""
    rep = VerifyReport(x.name, max_listed=3)
    st = check_structure(x.f, rep, chunk=chunk)
    return rep, st, _outside_segments(x, st.count, cl) if rep.ok and st.count else ""


class StructureChecks:
    """The index files' structure checks of check_index_files, perhaps still running."""

    def __init__(self, files, cl, cp, index_num, pool, futures, guessed):
        self.files, self.cl, self.cp, self.index_num = files, cl, cp, index_num
        self.pool, self.futures, self.guessed = pool, futures, guessed
        self.changed: bool | None = None

    def settle(self) -> bool:
        """Wait for the checks; True when one found a problem (or facts) the judgement assumed away, in which
        case the files' problems have been judged again with the verdicts."""
        if self.changed is not None:
            return self.changed
        try:
            got = {i: f.result() for i, f in self.futures.items()}
        finally:
            self.close()
        self.changed = any(not got[i][0].ok or got[i][1] != q or got[i][2] for i, q in self.guessed.items()
                           if i in got)
        got = {i: (None, q, "") for i, q in self.guessed.items() if i not in got} | got  # files left unchecked
        if self.changed:
            self.judge(got)
        else:
            for i, (_, st, _) in got.items():  # the checks' own Structure objects (equal to the guesses)
                self.files[i].structure = st
        return self.changed

    def close(self) -> None:
        """Wait for the checks without asking their verdicts (before the files are closed)."""
        self.pool.shutdown(wait=True)

    def judge(self, checked: dict) -> None:
        """Each file's problem from its structure check and segment check (rep None: assumed to pass) and the
        other checks."""
        prev: IndexFacts | None = None
        for i, x in enumerate(self.files):
            if x.f is None:
                prev = x
                continue
            rep, s, outside = checked[i]
            x.structure = s
            h = x.f.header
            x.full = h.indexCount >= self.index_num
            x.flushed = self.cp.ok and h.endTimestamp <= self.cp.cp.indexMsgTimestamp
            if rep is not None and not rep.ok:
                x.problem = "; ".join(p.problem for p in rep.problems[:3]) + (" ..." if rep.problem_count > 3 else "")
            elif s.count == 0:
                x.problem = "" if x is self.files[-1] else "holds no items but is not the newest file"
            else:
                x.problem = (outside or _edge_problem(x, self.cl, x.full)
                             or (_continuity(prev, x, self.cl) if prev is not None else _covers_start(x, self.cl)))
            prev = x


def quick_structure(f: IndexFile) -> Structure | None:
    """The Structure check_structure returns for this file if it passes (count, first and last phyOffset and
    the trailing items from the items' ends; items in order; as many slots in use as the header says), or None
    when the file will not pass as it is read here (a header count out of range, a zero header)."""
    if f.on_disk_index_count < 0 or f.header.indexCount > f.index_num or not any(f.raw_header()):
        return None
    items = f.items_array()
    n = len(items)
    s = Structure(count=n)
    if n:
        s.first_phy, s.last_phy = int(items["phy"][0]), int(items["phy"][n - 1])
        s.trailing = trailing_count(items, s.last_phy)
        if not _tail_heads_fit(f, items):
            return None  # a zeroed or damaged slot table: the full check names it (plain doctor too)
    s.distinct_slots = f.header.hashSlotCount
    return s


#: The newest items whose slot heads quick_structure checks (a few reads: a zeroed slot table fails the first).
QUICK_HEADS = 16


def _tail_heads_fit(f: IndexFile, items) -> bool:
    """The newest items' slots hold them or newer items (item k is items[k - 1]), as the broker's put leaves them."""
    n = len(items)
    first = max(0, n - QUICK_HEADS)
    for k, h in enumerate(items["hash"][first:].tolist(), start=first + 1):
        if h < 0 or not k <= f.slot_value(h % f.hash_slot_num) < f.index_num:
            return False
    return True


def _outside_segments(x: IndexFacts, count: int, cl: CommitLog) -> str:
    """Why an item points where no segment is (items 1..count), or ""."""
    segs = cl.segments
    if not segs:
        return "the commit log has no segments"
    starts = np.array([s.start for s in segs], dtype=np.int64)
    ends = np.array([s.end for s in segs], dtype=np.int64)
    items = x.f.items_array()
    for lo in range(0, count, VERIFY_CHUNK):
        phy = items["phy"][lo:lo + VERIFY_CHUNK].astype(np.int64)
        i = np.searchsorted(starts, phy, side="right") - 1
        bad = (phy >= starts[0]) & ((i < 0) | (phy >= ends[np.maximum(i, 0)]))
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            return f"item {lo + k + 1} points at {int(phy[k])}, where no commit-log segment exists"
    return ""


def record_ts(cl: CommitLog, off: int) -> int | None:
    r = cl.check_at(off, check_crc=False)
    if r.status != VALID or r.record.physical_offset != off:
        return None
    return r.record.store_timestamp


def _edge_problem(x: IndexFacts, cl: CommitLog, check_end: bool) -> str:
    """Header begin (and for a full file, end) timestamps against the records its first and last items name."""
    h, s = x.f.header, x.structure
    if s.first_phy >= cl.min_offset:
        ts = record_ts(cl, s.first_phy)
        if ts is None:
            return f"item 1 points at {s.first_phy}, which is not a valid record"
        if ts != h.beginTimestamp:
            return f"header beginTimestamp {h.beginTimestamp} but item 1's message was stored at {ts}"
    if check_end:
        ts = record_ts(cl, s.last_phy)
        if ts is None:
            return f"the last item points at {s.last_phy}, which is not a valid record"
        if ts != h.endTimestamp:
            return f"header endTimestamp {h.endTimestamp} but the last item's message was stored at {ts}"
    return ""


def _continuity(prev: IndexFacts, x: IndexFacts, cl: CommitLog) -> str:
    """x must start where prev stopped: at prev's last record (keys left over when prev filled up) or at the
    next record that has index keys. Anything else is a missing, renamed or out-of-order file."""
    if prev.f is None or prev.structure is None or prev.count == 0:
        return ""  # prev is damaged itself; it is the one not trusted
    end, first = prev.structure.last_phy, x.structure.first_phy
    if first < end:
        return f"its first item ({first}) lies before the end of {prev.name} ({end}): files out of order"
    if end < cl.min_offset or first == end:
        return ""
    r = cl.check_at(end, check_crc=False)
    if r.status != VALID:
        return f"cannot confirm it follows {prev.name}: no valid record at {end}"
    if prev.structure.trailing < len(r.record.index_keys()):
        return f"{prev.name} ended inside the keys of the record at {end}, but this file starts at {first}"
    for n, e in enumerate(cl.walk(end, check_crc=False, read_body=False)):
        if e.offset == end:
            continue
        if e.kind == BLANK:
            continue
        if e.kind != VALID or n > CONTINUITY_RECORDS or e.offset > first:
            break
        if e.record.index_keys():
            return "" if e.offset == first else (
                f"the first record indexed after {prev.name} is at {e.offset}, but this file starts at {first}: "
                "an index file is missing")
    return f"cannot confirm that no index file is missing between {prev.name} and this one"


def _covers_start(x: IndexFacts, cl: CommitLog) -> str:
    """The first index file must start at the log's first record with keys (or before the log, when clean
    deleted the segments its first items point at); otherwise a file before it is missing or renamed."""
    first = x.structure.first_phy
    lo = cl.min_offset
    if first <= lo or not cl.segments:
        return ""
    for n, e in enumerate(cl.walk(lo, check_crc=False, read_body=False)):
        if e.kind == BLANK:
            continue
        if e.kind != VALID or n > CONTINUITY_RECORDS or e.offset >= first:
            return ""
        if e.record.index_keys():
            return (f"it is the first index file but starts at {first}, after the record at {e.offset} that has "
                    "keys: an older index file is missing or renamed")
    return ""


def trusted_prefix(files: list[IndexFacts]) -> tuple[int, str]:
    """How many leading files are kept as they are, and why the next one is not (format §5.8)."""
    for i, x in enumerate(files):
        if x.f is None or x.problem:
            return i, f"{x.name}: {x.problem}"
        if not x.full:
            return i, f"{x.name}: not full (the current file is checked item by item)"
        if not x.flushed:
            return i, (f"{x.name}: endTimestamp {x.f.header.endTimestamp} is after the checkpoint's "
                       "indexMsgTimestamp (not known to be flushed)")
    return len(files), ""


class ItemJoin(ScanHooks):
    """One index file's items against the walk, in commit-log order, from offset `lo` on: how many leading items
    point at the start of a valid record with a matching decoded time (`good`), and why the next one does not.

    Items of records stored at or after `keys_from` (a store time) must also carry one of their record's key
    hashes. The properties are not covered by the body CRC, so a record torn inside its properties still
    looks valid; only the crash-exposed tail needs this (records older than the checkpoint's flush time were on
    disk before the crash), and everything with --full-scan or an unreadable checkpoint (keys_from 0)."""

    joins_items = True

    def __init__(self, x: IndexFacts, lo: int, keys_from: int = 0):
        self.x = x
        self.keys_from = keys_from
        # (the items' order is assumed while the structure check runs: a wrong guess walks again)
        below = items_below(x.f.items_array()["phy"], x.count, x.structure.monotone, lo)
        # The item cursor (one chunk of columns) exists only while the walk is inside this file's range, so
        # memory does not grow with the number of index files the walk passes.
        self.cursor: ItemCursor | None = None
        self.first_phy = x.structure.first_phy
        self.good = below          # items before the walk are taken on trust (they passed the structure checks)
        self.reason = ""
        self.last_ts: int | None = None   # store time of the record item `good` points at
        self.done = below >= x.count

    def over(self, i0: int, i1: int) -> "ItemJoin":
        """This join, from its start, over items [i0, i1) of its file only (the items that point into one
        segment: a segment's job, engine.ops.recovery.scanjobs): its good, reason and last_ts then say how far
        they were found good, why the next one is not, and the store time of the last good one."""
        j = ItemJoin.__new__(ItemJoin)
        j.x, j.keys_from, j.first_phy = self.x, self.keys_from, self.first_phy
        j.good, j.reason, j.last_ts, j.done = i0, "", None, False
        j.cursor = ItemCursor(self.x.f, i0, i1)  # (never made again: it ends at i1, not at the file's end)
        return j

    def window(self, w: Window) -> None:
        if self.done or int(w.offsets[-1]) < self.first_phy:
            return
        if self.cursor is None:
            self.cursor = ItemCursor(self.x.f, self.good, self.x.count)
        nums, phy, ih, tdiff = self.cursor.take_upto(int(w.offsets[-1]))
        if not len(nums):
            return
        offs = w.offsets
        r = np.minimum(np.searchsorted(offs, phy), len(offs) - 1)
        ts = w.batch.store_ts[r].astype(np.int64)
        h = self.x.f.header
        ok = offs[r] == phy
        dec = h.beginTimestamp + tdiff * 1000
        first = nums == 0
        ok &= ~first | (ts == h.beginTimestamp)
        ok &= first | (h.beginTimestamp <= 0) | (ts < h.beginTimestamp) | ((dec <= ts) & (ts < dec + 1000))
        keyed = ok & (ts >= self.keys_from)
        if keyed.any():
            ok[keyed] = keys_match(w, r[keyed], ih[keyed])
        bad = np.flatnonzero(~ok)
        if len(bad):
            k = int(bad[0])
            why = ("which is not the start of a valid record" if offs[r[k]] != phy[k] else
                   "whose message has no key with its hash" if keyed[k] else
                   "whose message's store time does not match its timeDiff")
            self.stop(int(nums[k]), f"item {int(nums[k]) + 1} points at {int(phy[k])}, {why}")
            if k:
                self.last_ts = int(ts[k - 1])
            return
        self.good = int(nums[-1]) + 1
        self.last_ts = int(ts[-1])
        if self.good >= self.x.count:
            self.done, self.cursor = True, None

    def stop(self, good: int, reason: str) -> None:
        self.good, self.reason, self.done = good, reason, True
        self.cursor = None

    def finish(self, end: int) -> None:
        """Items the walk never reached point past the recovered end (or into a gap before it)."""
        if self.done:
            return
        if self.cursor is None:
            self.cursor = ItemCursor(self.x.f, self.good, self.x.count)
        nums, phy, _, _ = self.cursor.take_upto(2**62)
        if len(nums):
            self.stop(int(nums[0]), f"item {int(nums[0]) + 1} points at {int(phy[0])}, "
                       + ("past the recovered end" if phy[0] >= end else "where no valid record is"))
        self.done, self.cursor = True, None

    @property
    def complete(self) -> bool:
        return self.good >= self.x.count


def trailing_items(f: IndexFile, j: int) -> tuple[int, int]:
    """(phyOffset of item j, how many of items 1..j point at it): the keys of that record already in the file."""
    items = f.items_array()
    last = int(items["phy"][j - 1])
    n, hi = 0, j
    while hi > 0:
        lo = max(0, hi - 4096)
        part = items["phy"][lo:hi].astype(np.int64)
        other = np.flatnonzero(part != last)
        if len(other):
            return last, n + (len(part) - int(other[-1]) - 1)
        n += len(part)
        hi = lo
    return last, n
