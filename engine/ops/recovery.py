"""Crash recovery (format §6, §7, §4.4-4.5, §5.8): the broker's recovery, made safe for the index.

plan_recovery() reads the store (read-only) and works out everything: the mode (abort marker), where the
broker would start scanning (§7.3/§7.4) and where rmqtool starts (possibly earlier, so that every consume queue
and index entry it relies on is checked), the last valid record, what to truncate in the commit log, the
consume queues and the index, which units and index items to re-dispatch, and the new checkpoint.
apply_recovery() carries a plan out under the store lock, in crash-safe order: abort marker first, then data
(commit log, consume queues, index files written elsewhere and renamed into place), fsync, the checkpoint,
and the abort marker is removed last.

Where rmqtool differs from the broker, on purpose:
* Bytes after the recovered end are zeroed (the broker leaves them; pitfall 13), so stale records never
  reappear in a later scan; consume-queue tails are zeroed for the same reason.
* The broker deletes every index file whose endTimestamp is after the checkpoint's indexMsgTimestamp and
  re-indexes only from its recovery start, which loses keys of messages it keeps (§7.6, RocketMQ issues 3868
  and 8007). rmqtool keeps the longest prefix of index files it can trust and re-indexes every surviving
  record after it, the way an uninterrupted IndexService would have: the rebuilt files are byte-identical to
  what a put without the crash would have written.
"""
from __future__ import annotations

import os
import re
import tempfile
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.broker.checkpoint import Checkpoint
from engine.broker.commitlog import CommitLog, open_commitlog
from engine.broker.config import CQ_STORE_UNIT_SIZE, BrokerConfig, index_file_size
from engine.broker.consumequeue import UNIT_DTYPE, ConsumeQueue, list_queues
from engine.errors import GeometryError, InvalidArgumentError, NotAStoreError
from engine.fsutil import fsync_dir
from engine.broker.indexbuild import build_index_file_from_hashes
from engine.broker.indexfile import IndexFile, suggest_geometry
from engine.broker.layout import LOCK_FILE, StoreLayout, index_file_name, list_index_files
from engine.ops.verify import verify_index_file
from engine.java.lang import index_hash, java_string_hash
from engine.broker.lock import StoreLock, mark_clean, mark_in_use
from engine.broker.message import (BLANK, LENGTH_MISMATCH, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2,
                            TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, VALID, check_message)

BLANK_CQ_SIZE = 0x7FFFFFFF
_TMP_NAME = re.compile(r"^(\d+|checkpoint)\.tmp\d+$")
_ZERO_CHUNK = 1 << 20


# ==================================================================== plan data

@dataclass
class QueuePlan:
    topic: str
    queue_id: int
    max_offset_before: int          # queue offsets (units), as ConsumeQueue recovery finds them (§4.4)
    max_offset_after: int
    truncate_to: int | None = None  # logical byte offset the queue is cut at (None: no cut)
    units_removed: int = 0          # non-zero units at or after the cut (pointing past the end, or stale)
    files_deleted: list[str] = field(default_factory=list)
    zero_file: str | None = None    # file whose tail is zeroed, from zero_from to zero_to (in-file positions)
    zero_from: int = 0
    zero_to: int = 0
    dispatch: list[tuple[int, int, int, int]] = field(default_factory=list)  # (phy, size, tagsCode, queueOffset)
    exists: bool = True

    @property
    def changed(self) -> bool:
        return bool(self.units_removed or self.files_deleted or self.dispatch or self.zero_to > self.zero_from)

    def as_dict(self) -> dict:
        return {"topic": self.topic, "queueId": self.queue_id, "maxOffsetBefore": self.max_offset_before,
                "maxOffsetAfter": self.max_offset_after, "unitsRemoved": self.units_removed,
                "unitsAdded": len(self.dispatch), "filesDeleted": self.files_deleted}


@dataclass
class PlannedIndexFile:
    name: str
    seed_phy: int
    seed_ts: int
    hashes: array = field(default_factory=lambda: array("q"))
    phys: array = field(default_factory=lambda: array("q"))
    tss: array = field(default_factory=lambda: array("q"))
    action: str = "create"          # keep (existing bytes already equal), rebuild (replace), create (new name)

    @property
    def count(self) -> int:
        return len(self.hashes)

    @property
    def end_phy(self) -> int:
        return self.phys[-1] if self.phys else self.seed_phy

    @property
    def end_ts(self) -> int:
        return self.tss[-1] if self.tss else self.seed_ts

    def write(self, path: Path, hash_slot_num: int, index_num: int) -> None:
        build_index_file_from_hashes(path, np.frombuffer(self.hashes, dtype=np.int64),
                                     np.frombuffer(self.phys, dtype=np.int64),
                                     np.frombuffer(self.tss, dtype=np.int64),
                                     hash_slot_num, index_num, self.seed_phy, self.seed_ts)


@dataclass
class IndexPlan:
    enabled: bool = True
    trusted: list[str] = field(default_factory=list)   # existing files kept without re-indexing
    untrusted_reason: str = ""                         # why the first not-trusted file was not trusted
    replay_from: int | None = None                     # commit-log offset re-indexing starts at
    replay_skip_keys: int = 0                          # keys of the record at replay_from already indexed
    planned: list[PlannedIndexFile] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)  # existing file -> why it could not be trusted

    @property
    def kept(self) -> list[str]:
        return self.trusted + [p.name for p in self.planned if p.action == "keep"]

    @property
    def rebuilt(self) -> list[str]:
        return [p.name for p in self.planned if p.action == "rebuild"]

    @property
    def created(self) -> list[str]:
        return [p.name for p in self.planned if p.action == "create"]

    @property
    def changed(self) -> bool:
        return bool(self.removed or self.rebuilt or self.created)

    def as_dict(self) -> dict:
        return {"enabled": self.enabled, "kept": self.kept, "removed": self.removed, "rebuilt": self.rebuilt,
                "created": self.created, "trustedPrefix": len(self.trusted),
                "reindexFromOffset": self.replay_from, "reindexedItems": sum(p.count for p in self.planned
                                                                            if p.action != "keep"),
                "firstUntrustedReason": self.untrusted_reason, "problems": self.problems}


@dataclass
class RecoveryPlan:
    store: str
    mode: str                                   # "normal" (no abort file) or "abnormal"
    check_crc: bool
    index_safe: bool
    full_scan: bool
    checkpoint_before: Checkpoint
    checkpoint_readable: bool
    checkpoint_problem: str
    broker_start_segment: str | None
    broker_start_offset: int
    broker_start_rule: str
    scan_start_offset: int
    scan_start_reasons: list[str]
    records_scanned: int
    last_valid_offset: int                      # start of the last valid record, -1 if none
    last_store_timestamp: int                   # of the last valid record, 0 if none
    last_store_timestamp_before: int            # of the last decodable record before truncation
    end_offset: int                             # the recovered commit-log max offset
    stop_reason: str
    max_offset_before: int                      # end of the last non-zero byte of the commit log
    truncated_bytes: int
    truncated_records: int
    zero_segment: str | None
    zero_from: int                              # in-segment positions
    zero_to: int
    segments_deleted: list[str]
    queues: list[QueuePlan]
    index: IndexPlan
    checkpoint_after: Checkpoint
    write_checkpoint: bool
    stale_temp_files: list[str]
    notes: list[str]
    fingerprint: tuple = ()
    data_consistent: bool = False               # set by plan_recovery: nothing to repair in the data


    @property
    def commitlog_changed(self) -> bool:
        return bool(self.segments_deleted) or self.zero_to > self.zero_from

    def _data_unchanged(self) -> bool:
        return not (self.commitlog_changed or any(q.changed for q in self.queues) or self.index.changed
                    or self.write_checkpoint or self.stale_temp_files)

    @property
    def consistent(self) -> bool:
        """Nothing to repair: at most (abnormal mode) the checkpoint is rewritten and the abort marker removed."""
        return self.data_consistent

    @property
    def nothing_to_do(self) -> bool:
        return self.data_consistent and self.mode == "normal"

    def actions(self) -> list[str]:
        out = []
        if self.mode == "abnormal" or not self.consistent:
            out.append("write the abort marker (PID) so a crash during recovery is recovered again")
        for s in reversed(self.segments_deleted):
            out.append(f"delete commit-log segment {s}")
        if self.zero_to > self.zero_from:
            out.append(f"zero commit-log segment {self.zero_segment} bytes {self.zero_from}..{self.zero_to}")
        for q in self.queues:
            for f in reversed(q.files_deleted):
                out.append(f"delete consume-queue file {q.topic}/{q.queue_id}/{f}")
            if q.zero_to > q.zero_from:
                out.append(f"zero consume queue {q.topic}/{q.queue_id}/{q.zero_file} bytes {q.zero_from}..{q.zero_to}")
            if q.dispatch:
                out.append(f"re-dispatch {len(q.dispatch)} unit(s) to {q.topic}/{q.queue_id}")
        for p in self.index.planned:
            if p.action == "rebuild":
                out.append(f"rebuild index file {p.name} ({p.count} items)")
            elif p.action == "create":
                out.append(f"create index file {p.name} ({p.count} items)")
        for n in self.index.removed:
            out.append(f"delete index file {n}")
        for t in self.stale_temp_files:
            out.append(f"delete stale temporary file {t}")
        if self.write_checkpoint:
            out.append("write the checkpoint")
        if self.mode == "abnormal" or not self.consistent:
            out.append("remove the abort marker")
        return out

    def as_dict(self) -> dict:
        qs = [q for q in self.queues if q.changed]
        return {
            "store": self.store,
            "mode": self.mode,
            "consistent": self.consistent,
            "checkCrc": self.check_crc,
            "indexSafe": self.index_safe,
            "fullScan": self.full_scan,
            "brokerStartSegment": self.broker_start_segment,
            "brokerStartRule": self.broker_start_rule,
            "scanStartOffset": self.scan_start_offset,
            "scanStartReasons": self.scan_start_reasons,
            "recordsScanned": self.records_scanned,
            "lastValidOffset": self.last_valid_offset,
            "stopReason": self.stop_reason,
            "maxOffsetBefore": self.max_offset_before,
            "maxOffsetAfter": self.end_offset,
            "lastStoreTimestampBefore": self.last_store_timestamp_before,
            "lastStoreTimestampAfter": self.last_store_timestamp,
            "truncatedBytes": self.truncated_bytes,
            "truncatedRecords": self.truncated_records,
            "commitLog": {"segmentsDeleted": self.segments_deleted, "zeroSegment": self.zero_segment,
                          "zeroFrom": self.zero_from, "zeroTo": self.zero_to},
            "consumeQueues": {"unitsRemoved": sum(q.units_removed for q in self.queues),
                              "unitsAdded": sum(len(q.dispatch) for q in self.queues),
                              "filesDeleted": sum(len(q.files_deleted) for q in self.queues),
                              "queuesChanged": len(qs), "queues": [q.as_dict() for q in qs]},
            "index": self.index.as_dict(),
            "checkpointReadable": self.checkpoint_readable,
            "checkpointProblem": self.checkpoint_problem,
            "checkpointBefore": self.checkpoint_before.as_dict(),
            "checkpointAfter": self.checkpoint_after.as_dict(),
            "writeCheckpoint": self.write_checkpoint,
            "staleTempFiles": self.stale_temp_files,
            "actions": self.actions(),
            "notes": self.notes,
        }


# ==================================================================== scanning

@dataclass
class _Scan:
    """Valid records from the scan start to the recovered end, in compact columns."""
    start: int
    keep_from: int
    end: int = 0
    stop_reason: str = "end of data"
    count: int = 0
    last_valid: int = -1
    last_ts: int = 0
    max_ts: int = 0
    offsets: array = field(default_factory=lambda: array("q"))      # every valid record start
    # Full details only for records at or after keep_from (what re-dispatch and re-indexing need).
    k_off: array = field(default_factory=lambda: array("q"))
    k_size: array = field(default_factory=lambda: array("q"))
    k_ts: array = field(default_factory=lambda: array("q"))
    k_queue: list = field(default_factory=list)      # (topic, queueId, queueOffset, tagsCode) or None
    k_hashes: list = field(default_factory=list)     # Java hashCodes of the record's topic#key strings


def _scan(cl: CommitLog, start: int, keep_from: int, check_crc: bool) -> _Scan:
    """The recovery scan (§7.2): VALID advances, BLANK moves to the next segment, anything else ends the log."""
    s = _Scan(start=start, keep_from=keep_from, end=start)
    if not cl.segments:
        return s
    for e in cl.walk(start, check_crc=check_crc):
        if e.kind == VALID and e.record.physical_offset != e.offset:
            # Stricter than the broker: a record that says it lives elsewhere has a damaged header (the body
            # CRC does not cover it), and nothing after it can be trusted either.
            s.end = e.offset
            s.stop_reason = (f"damaged record header at offset {e.offset}: PHYSICALOFFSET says "
                             f"{e.record.physical_offset}")
            return s
        if e.kind == VALID:
            rec = e.record
            s.count += 1
            s.last_valid = e.offset
            s.last_ts = rec.store_timestamp
            s.max_ts = max(s.max_ts, rec.store_timestamp)
            s.end = e.offset + e.size
            s.offsets.append(e.offset)
            if e.offset >= keep_from:
                s.k_off.append(e.offset)
                s.k_size.append(e.size)
                s.k_ts.append(rec.store_timestamp)
                in_cq = rec.tx_type in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)
                s.k_queue.append((rec.topic, rec.queue_id, rec.queue_offset, rec.tags_code()) if in_cq else None)
                s.k_hashes.append([java_string_hash(k) for k in rec.index_keys()])
        elif e.kind == BLANK:
            seg = cl.queue.find(e.offset)
            s.end = seg.end if seg is not None else e.offset
        else:
            s.end = e.offset
            what = "length mismatch" if e.kind == LENGTH_MISMATCH else "corrupt record"
            s.stop_reason = f"{what} at offset {e.offset}: {e.reason}"
            return s
    return s


def _last_nonzero(buf, lo: int, hi: int) -> int:
    """Position just after the last non-zero byte of buf[lo:hi], or lo if all zero. Chunked, from the end."""
    pos = hi
    while pos > lo:
        a = max(lo, pos - _ZERO_CHUNK)
        chunk = np.frombuffer(buf, dtype=np.uint8, count=pos - a, offset=a)
        nz = np.flatnonzero(chunk)
        if len(nz):
            return a + int(nz[-1]) + 1
        pos = a
    return lo


def _count_records_after(cl: CommitLog, end: int) -> tuple[int, int, int | None]:
    """(records or record fragments after `end`, global offset just after the last non-zero byte, store time of
    the last decodable record among them).

    A lenient walk (no CRC): decodable records count one each and are skipped by TOTALSIZE; anything else
    non-zero counts as one fragment and ends that segment.
    """
    count = 0
    data_end = end
    last_ts = None
    for seg in cl.segments:
        if seg.end <= end:
            continue
        buf = cl.queue.buffer(seg)
        n = len(buf)
        pos = max(0, end - seg.start)
        last = _last_nonzero(buf, pos, n)
        if last <= pos:
            continue
        data_end = seg.start + last
        while pos < last:
            r = check_message(buf, pos, n, check_crc=False, read_body=False)
            if r.status in (VALID, LENGTH_MISMATCH) and r.size > 0:
                count += 1
                if r.record is not None:
                    last_ts = r.record.store_timestamp
                pos += r.size
                continue
            if r.status == BLANK:
                break
            if any(buf[pos:min(pos + 8, n)]) or _last_nonzero(buf, pos, min(pos + 4096, n)) > pos:
                count += 1
                # A torn record still says how long it was meant to be; step over it if that is sane.
                total = int.from_bytes(buf[pos:pos + 4], "big", signed=True) if pos + 4 <= n else 0
                magic = int.from_bytes(buf[pos + 4:pos + 8], "big", signed=True) if pos + 8 <= n else 0
                if magic in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2) and 8 <= total <= n - pos:
                    pos += total
                    continue
            break
    return count, data_end, last_ts


# ==================================================================== broker start rule

def _first_record(cl: CommitLog, seg, check_crc: bool):
    buf = cl.queue.buffer(seg)
    if not len(buf):
        return None
    return check_message(buf, 0, len(buf), check_crc=check_crc)


def _broker_start(cl: CommitLog, mode: str, cp: Checkpoint, max_phy_cq: int, index_safe: bool,
                  check_crc: bool) -> tuple[int, str]:
    """HEAD's start file (§7.3/§7.4): walk back from the last segment to the first whose first record matches."""
    segs = cl.segments
    if not segs:
        return 0, "no commit-log segments"
    if mode == "abnormal":
        limit = cp.min_timestamp_index() if index_safe else cp.min_timestamp()
        what = "min(physic, logics) - 3 s" + (", min with indexMsgTimestamp" if index_safe else "")
        rule = f"abnormal: first segment whose first record was stored at or before {what} = {limit}"
        lowest = 0
    else:
        rule = f"normal: first segment whose first record is at or below the consume queues' max offset {max_phy_cq}"
        lowest = 1  # normal mode never checks index 0: it is the fallback
    for i in range(len(segs) - 1, lowest - 1, -1):
        r = _first_record(cl, segs[i], check_crc)
        if r is None or r.status != VALID:
            continue
        ts = r.record.store_timestamp
        if ts == 0:
            continue
        if index_safe and ts > cp.indexMsgTimestamp:
            continue
        if mode == "abnormal":
            if ts <= limit:
                return i, rule
        elif r.record.physical_offset <= max_phy_cq:
            return i, rule
    return 0, rule + " (none matched: the first segment)"


# ==================================================================== index

@dataclass
class _IdxFile:
    path: Path
    f: IndexFile | None
    problem: str = ""           # wrong size, structural problem
    phys: np.ndarray | None = None


def _open_index_files(cfg: BrokerConfig, index_dir: Path) -> list[_IdxFile]:
    paths = list_index_files(index_dir)
    expected = index_file_size(cfg.maxHashSlotNum, cfg.maxIndexNum)
    out: list[_IdxFile] = []
    sizes = {}
    for p in paths:
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        sizes[p] = st.st_size
    if paths and all(sz != expected for sz in sizes.values()):
        # Every file disagrees with the geometry: the geometry is wrong, not the files (pitfall 27).
        first = paths[0]
        raise GeometryError(
            f"index files in {index_dir} are {sizes[first]} bytes, but {cfg.maxHashSlotNum} slots x "
            f"{cfg.maxIndexNum} items gives {expected} bytes{suggest_geometry(sizes[first])}; pass the store's "
            "geometry (--hash-slots/--max-index or --broker-conf)")
    for p in paths:
        if sizes.get(p) != expected:
            out.append(_IdxFile(p, None, f"{sizes.get(p)} bytes, expected {expected}"))
            continue
        f = IndexFile.open(p, cfg.maxHashSlotNum, cfg.maxIndexNum, writable=False)
        rep = verify_index_file(f, None)
        item = _IdxFile(p, f)
        if not rep.ok:
            item.problem = "; ".join(rep.problems[:3]) + (" ..." if rep.problem_count > 3 else "")
        items = f.items_array()
        item.phys = items["phy"].astype(np.int64) if len(items) else np.empty(0, dtype=np.int64)
        out.append(item)
    return out


def _deep_ok(x: _IdxFile, scan: _Scan) -> str:
    """Items of a trusted-candidate file against the commit log: '' if fine, else why not.

    Items before the scan start are taken on trust as the broker takes that part of the log; items in the
    scanned range must be record starts, and in the kept range also carry one of the record's key hashes and
    a decoded time that matches (what inspect-index --verify checks).
    """
    f = x.f
    phys = x.phys
    if not len(phys):
        return ""
    if int(phys.max()) >= scan.end:
        return f"has items at or past the recovered end {scan.end}"
    in_scan = phys >= scan.start
    if not in_scan.any():
        return ""
    offs = np.frombuffer(scan.offsets, dtype=np.int64) if len(scan.offsets) else np.empty(0, dtype=np.int64)
    sel = phys[in_scan]
    pos = np.searchsorted(offs, sel)
    if len(offs):
        ok = (pos < len(offs)) & (offs[np.minimum(pos, len(offs) - 1)] == sel)
    else:
        ok = np.zeros(len(sel), dtype=bool)
    if not ok.all():
        return f"an item points at {int(sel[~ok][0])}, which is not the start of a valid record"
    items = f.items_array()
    koff = np.frombuffer(scan.k_off, dtype=np.int64) if len(scan.k_off) else np.empty(0, dtype=np.int64)
    h = f.header
    for i in np.flatnonzero(phys >= scan.keep_from):
        off = int(phys[i])
        j = int(np.searchsorted(koff, off))
        if j >= len(koff) or koff[j] != off:
            return f"item {i + 1} points at {off}, which is not a valid record"
        kh = int(items["hash"][i])
        if kh not in {index_hash(hh) for hh in scan.k_hashes[j]}:
            return f"item {i + 1}: the message at {off} has no key with hash {kh}"
        ts = scan.k_ts[j]
        if i == 0:
            if h.beginTimestamp != ts:
                return f"header beginTimestamp {h.beginTimestamp} but item 1's message was stored at {ts}"
            continue
        d = int(items["time_diff"][i])
        dec = h.beginTimestamp + d * 1000
        if h.beginTimestamp > 0 and ts >= h.beginTimestamp and not dec <= ts < dec + 1000:
            return f"item {i + 1}: decoded time {dec} does not match store time {ts}"
    last = int(phys[-1])
    if last >= scan.keep_from:
        j = int(np.searchsorted(koff, last))
        if h.endTimestamp != scan.k_ts[j]:
            return f"header endTimestamp {h.endTimestamp} but the last item's message was stored at {scan.k_ts[j]}"
    return ""


def _trusted_prefix(files: list[_IdxFile], cp: Checkpoint, cp_ok: bool, scan: _Scan | None,
                    index_num: int) -> tuple[int, str]:
    """How many leading index files are kept as they are, and why the next one is not.

    A file is trusted when the broker would keep it after a crash (full, and flushed according to the
    checkpoint's indexMsgTimestamp, §5.8) and it also passes the structural checks of inspect-index --verify
    and, where the scan reached, the commit-log checks; the first file that fails ends the prefix.
    """
    for i, x in enumerate(files):
        name = x.path.name
        if x.f is None:
            return i, f"{name}: wrong size ({x.problem})"
        if x.problem:
            return i, f"{name}: {x.problem}"
        h = x.f.header
        if h.indexCount < index_num:
            return i, f"{name}: not full (the current file is always re-indexed)"
        if not cp_ok or h.endTimestamp > cp.indexMsgTimestamp:
            return i, (f"{name}: endTimestamp {h.endTimestamp} is after the checkpoint's indexMsgTimestamp "
                       f"{cp.indexMsgTimestamp} (not known to be flushed)")
        if scan is not None:
            why = _deep_ok(x, scan)
            if why:
                return i, f"{name}: {why}"
    return len(files), ""


class _IndexReplay:
    """IndexService.buildIndex (§5.8) over planned files, starting after the trusted prefix."""

    def __init__(self, index_num: int, last_full: tuple[int, int] | None):
        self.index_num = index_num
        self.files: list[PlannedIndexFile] = []
        # The last trusted file is full: the next put rolls to a file seeded from it.
        self._prev = last_full

    def _last_for_write(self) -> PlannedIndexFile:
        if self.files and self.files[-1].count + 1 < self.index_num:
            return self.files[-1]
        if self.files:
            prev = (self.files[-1].end_phy, self.files[-1].end_ts)
        else:
            prev = self._prev
        seed_phy = prev[0] if prev and prev[0] > 0 else 0
        seed_ts = prev[1] if prev and prev[1] > 0 else 0
        f = PlannedIndexFile("", seed_phy, seed_ts)
        self.files.append(f)
        return f

    def build(self, off: int, ts: int, hashes: list[int], skip: int = 0) -> None:
        if skip:
            if skip >= len(hashes):
                return  # every key went into the last trusted file before it filled up
            hashes = hashes[skip:]
        f = self._last_for_write()
        if off < f.end_phy:
            return  # already indexed (strict <, pitfall 23)
        for h in hashes:
            if f.count + 1 >= self.index_num:
                f = self._last_for_write()
            f.hashes.append(h)
            f.phys.append(off)
            f.tss.append(ts)


def _files_equal(a: Path, b: Path) -> bool:
    try:
        if os.path.getsize(a) != os.path.getsize(b):
            return False
        with open(a, "rb") as fa, open(b, "rb") as fb:
            while True:
                x = fa.read(_ZERO_CHUNK)
                y = fb.read(_ZERO_CHUNK)
                if x != y:
                    return False
                if not x:
                    return True
    except OSError:
        return False


def _plan_index(cfg: BrokerConfig, files: list[_IdxFile], k: int, reason: str, scan: _Scan) -> IndexPlan:
    ip = IndexPlan(trusted=[x.path.name for x in files[:k]], untrusted_reason=reason)
    for x in files:
        if x.problem:
            ip.problems[x.path.name] = x.problem
    last_full = None
    if k:
        h = files[k - 1].f.header
        last_full = (h.endPhyOffset, h.endTimestamp)
        c = h.endPhyOffset
        phys = files[k - 1].phys
        skip = int(np.count_nonzero(phys == c)) if len(phys) else 0
        # Keys of the record at C that went into the last trusted file are in its trailing items.
        ip.replay_from, ip.replay_skip_keys = c, skip
    else:
        c, skip = None, 0
        ip.replay_from = scan.k_off[0] if len(scan.k_off) else None
    replay = _IndexReplay(cfg.maxIndexNum, last_full)
    for j in range(len(scan.k_off)):
        off = scan.k_off[j]
        if c is not None and off < c:
            continue
        replay.build(off, scan.k_ts[j], scan.k_hashes[j], skip if off == c else 0)
    # Match planned files to the existing files after the trusted prefix, by position.
    rest = files[k:]
    names_taken = [x.path.name for x in files]
    last_name = names_taken[-1] if names_taken else None
    with tempfile.TemporaryDirectory(prefix="rmqtool-recover-") as tmp:
        for i, p in enumerate(replay.files):
            if i < len(rest):
                existing = rest[i]
                p.name = existing.path.name
                probe = Path(tmp) / "probe"
                p.write(probe, cfg.maxHashSlotNum, cfg.maxIndexNum)
                p.action = "keep" if _files_equal(probe, existing.path) else "rebuild"
            else:
                name = index_file_name(_now_ms())
                if last_name is not None and (len(name), name) <= (len(last_name), last_name):
                    name = str(int(last_name) + 1)
                p.name = last_name = name
                p.action = "create"
    ip.removed = [x.path.name for x in rest[len(replay.files):]]
    ip.planned = replay.files
    return ip


def _now_ms() -> int:
    return int(time.time() * 1000)


# ==================================================================== consume queues

class _QueueSnap:
    """One consume queue read once: its valid units (§4.4) and where non-zero bytes lie after them."""

    def __init__(self, root: Path, cfg: BrokerConfig, topic: str, qid: int):
        self.topic, self.queue_id = topic, qid
        cq = ConsumeQueue(root, topic, qid, cfg.cq_file_size, writable=False)
        try:
            self.F = cq.file_size
            self.max_before = cq.max_offset_in_queue
            self.files = []  # (name, start, position after the last non-zero unit)
            parts = []
            stale = 0
            valid_end = cq.max_offset_in_queue * CQ_STORE_UNIT_SIZE
            for seg in cq.queue.segments:
                fu = cq.file_units(seg)
                nz = (fu["offset"] != 0) | (fu["size"] != 0) | (fu["tags_code"] != 0)
                idx = np.flatnonzero(nz)
                last_nz = (int(idx[-1]) + 1) * CQ_STORE_UNIT_SIZE if len(idx) else 0
                self.files.append((seg.path.name, seg.start, last_nz))
                n_valid = max(0, min(len(fu), (valid_end - seg.start) // CQ_STORE_UNIT_SIZE))
                if n_valid:
                    parts.append(np.array(fu[:n_valid]))  # a copy: the mapping is closed below
                stale += int(np.count_nonzero(nz[n_valid:]))
                del fu, nz
            self.units = np.concatenate(parts) if parts else np.empty(0, dtype=UNIT_DTYPE)
            self.stale = stale
            self.first_start = self.files[0][1] if self.files else 0
        finally:
            cq.close()
        offs = self.units["offset"].astype(np.int64)
        sizes = self.units["size"].astype(np.int64)
        self.offs, self.sizes = offs, sizes
        self.real = np.flatnonzero((offs != 0) | (sizes != BLANK_CQ_SIZE))

    def plan(self, end: int) -> tuple[QueuePlan, dict]:
        """The queue cut at the commit-log end `end` (§4.5, plus zeroing what follows)."""
        past = np.flatnonzero(self.offs >= end)
        keep = int(past[0]) if len(past) else len(self.units)
        cut = self.first_start + keep * CQ_STORE_UNIT_SIZE
        qp = QueuePlan(self.topic, self.queue_id, self.max_before, cut // CQ_STORE_UNIT_SIZE)
        qp.units_removed = (len(self.units) - keep) + self.stale
        for name, start, last_nz in self.files:
            if start >= cut:
                qp.files_deleted.append(name)
            elif cut < start + self.F and last_nz > cut - start:
                qp.zero_file, qp.zero_from, qp.zero_to = name, cut - start, last_nz
        if qp.units_removed:
            qp.truncate_to = cut
        # ConsumeQueue's state after the cut: max physic offset of the last unit kept (a blank pre-fill unit
        # counts, §4.4), and where real units end (what the queue covers of the commit log).
        max_phys = int(self.offs[keep - 1] + self.sizes[keep - 1]) if keep else -1
        real = self.real[self.real < keep]
        coverage = int(self.offs[real[-1]] + self.sizes[real[-1]]) if len(real) else -1
        # With no unit kept every file goes and the queue starts afresh, as a new one would.
        return qp, {"max_phys": max_phys, "end": cut if keep else None, "coverage": coverage, "F": self.F}


def _simulate_dispatch(qp: QueuePlan, state: dict, phy: int, size: int, tags: int, qoff: int) -> None:
    """ConsumeQueue.put (§4.3) on the planned state; records the unit when it would be written."""
    if phy + size <= state["max_phys"]:
        return
    expected = qoff * CQ_STORE_UNIT_SIZE
    if state["end"] is None:
        state["end"] = expected
    elif qoff != 0 and expected < state["end"]:
        return
    qp.dispatch.append((phy, size, tags, qoff))
    state["end"] += CQ_STORE_UNIT_SIZE
    state["max_phys"] = phy + size
    qp.max_offset_after = state["end"] // CQ_STORE_UNIT_SIZE


# ==================================================================== plan

def _fingerprint(cfg: BrokerConfig) -> tuple:
    """Sizes and mtimes of every file recovery reads: apply re-plans when the store changed since."""
    out = []
    roots = [cfg.root] + [d for d in cfg.commitlog_dirs if not str(d).startswith(str(cfg.root))]
    for r in roots:
        if not r.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(r):
            for n in filenames:
                if n == LOCK_FILE:
                    continue
                p = os.path.join(dirpath, n)
                try:
                    st = os.lstat(p)
                except FileNotFoundError:
                    continue
                out.append((p, st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


def _segment_of(cl: CommitLog, offset: int) -> int:
    """Start of the segment holding `offset` (first segment if before the log, last if after)."""
    segs = cl.segments
    if not segs:
        return 0
    if offset <= segs[0].start:
        return segs[0].start
    seg = cl.queue.find(offset)
    if seg is None:
        return segs[-1].start
    return seg.start


def plan_recovery(cfg: BrokerConfig, check_crc: bool = True, index_safe: bool = False,
                  full_scan: bool = False) -> RecoveryPlan:
    """Work out what recovery does. Reads only; every file is opened read-only.

    full_scan: validate the whole commit log from its first segment (and so every index item against it),
    for damage the checkpoint says cannot be there; costs a read of the whole log.
    """
    root = cfg.root
    layout = StoreLayout.of(cfg)
    # An abort marker or a checkpoint alone is a store whose writer died before its first write.
    layout.require_store(allow_markers=True)
    fingerprint = _fingerprint(cfg)
    mode = "abnormal" if layout.abort.exists() else "normal"
    notes: list[str] = []
    cp_problem = ""
    cp_path = layout.checkpoint
    try:
        cp = Checkpoint.load(cp_path, strict=True)
        cp_ok = cp_path.exists()
        if not cp_ok:
            cp_problem = "missing (reads as zeros)"
    except Exception as e:  # a short or unreadable checkpoint reads as zeros: rewind to the first segment
        cp, cp_ok = Checkpoint(), False
        cp_problem = str(e)
    if cp_ok and any(v < 0 for v in (cp.physicMsgTimestamp, cp.logicsMsgTimestamp, cp.indexMsgTimestamp,
                                      cp.confirmPhyOffset)):
        cp_ok = False
        cp_problem = "negative values (garbage)"
    cl = open_commitlog(cfg)
    idx_files: list[_IdxFile] = []
    try:
        # Consume queues as their own recovery finds them (§4.4).
        queues = [_QueueSnap(root, cfg, topic, qid) for topic, qid in list_queues(root)]
        max_phy_cq = -1
        for q in queues:
            max_phy_cq = max(max_phy_cq, q.plan(1 << 62)[1]["coverage"])
        bi, rule = _broker_start(cl, mode, cp, max_phy_cq, index_safe, check_crc)
        segs = cl.segments
        broker_start = segs[bi].start if segs else 0
        index_enabled = cfg.messageIndexEnable
        if index_enabled:
            idx_files = _open_index_files(cfg, layout.index_dir)
        reasons = [f"broker rule ({rule}): segment {segs[bi].path.name}" if segs else "empty commit log"]

        def needs(scan: _Scan | None, end: int) -> tuple[int, list[str]]:
            """Earliest segment start the index and the consume queues need scanned, and why."""
            first = segs[0].start if segs else 0
            out, why = 1 << 62, []
            if index_enabled:
                k, _ = _trusted_prefix(idx_files, cp, cp_ok, scan, cfg.maxIndexNum)
                if k:
                    c = idx_files[k - 1].f.header.endPhyOffset
                    out = _segment_of(cl, c)
                    why.append(f"re-index after {c}, the end of the last trusted index file")
                else:
                    out = first
                    why.append("no index file can be trusted: re-index from the first record")
            cover = -1
            for q in queues:
                cover = max(cover, q.plan(end)[1]["coverage"])
            s = _segment_of(cl, min(cover, end)) if cover >= 0 else first
            if s < out:
                why = []
            if s <= out:
                out = s
                why.append(f"consume queues are complete up to {cover}" if cover >= 0 else
                           "no consume-queue units: dispatch from the first record")
            return out, why

        # A first guess from the files as they are saves a second scan in the common case.
        need, why = needs(None, 1 << 62)
        scan_start = broker_start
        if full_scan and segs and segs[0].start < scan_start:
            need, why = segs[0].start, ["--full-scan: the whole commit log"]
        if need < scan_start:
            reasons.extend(f"rmqtool starts earlier, at {need}: {w}" for w in why)
            scan_start = need
        keep_from = scan_start
        while True:
            scan = _scan(cl, scan_start, keep_from, check_crc)
            end = scan.end
            need, why = needs(scan, end)
            if need >= scan_start and need >= keep_from:
                break
            if need < scan_start:
                reasons.extend(f"rmqtool starts earlier, at {need}: {w}" for w in why)
                scan_start = need
            keep_from = min(keep_from, need)
        # ---------------------------------------------------------------- consume queues
        qplans: list[QueuePlan] = []
        states = {}
        for q in queues:
            qp, st = q.plan(end)
            qplans.append(qp)
            states[(q.topic, q.queue_id)] = (qp, st)
        for j in range(len(scan.k_off)):
            q = scan.k_queue[j]
            if q is None:
                continue
            topic, qid, qoff, tags = q
            key = (topic, qid)
            if key not in states:
                qp = QueuePlan(topic, qid, 0, 0, exists=False)
                qplans.append(qp)
                states[key] = (qp, {"max_phys": -1, "end": None, "coverage": -1, "F": cfg.cq_file_size})
            qp, st = states[key]
            _simulate_dispatch(qp, st, scan.k_off[j], scan.k_size[j], tags, qoff)
        # ---------------------------------------------------------------- index
        if index_enabled:
            k, reason = _trusted_prefix(idx_files, cp, cp_ok, scan, cfg.maxIndexNum)
            iplan = _plan_index(cfg, idx_files, k, reason, scan)
        else:
            iplan = IndexPlan(enabled=False)
            notes.append("messageIndexEnable=false: the index is left alone")
        # ---------------------------------------------------------------- commit log
        truncated_records, data_end, truncated_ts = _count_records_after(cl, end)
        zero_seg = None
        zero_from = zero_to = 0
        deleted = []
        for seg in segs:
            if seg.start > end:
                deleted.append(seg.path.name)
            elif seg.start <= end < seg.end:
                buf = cl.queue.buffer(seg)
                pos = end - seg.start
                last = _last_nonzero(buf, pos, len(buf)) if pos < len(buf) else pos
                if last > pos:
                    zero_seg, zero_from, zero_to = seg.path.name, pos, last
        truncated_bytes = max(0, data_end - end)
        # ---------------------------------------------------------------- checkpoint
        new_cp = Checkpoint(masterFlushedOffset=cp.masterFlushedOffset if cp_ok else 0)
        if scan.last_valid >= 0:
            new_cp.physicMsgTimestamp = new_cp.logicsMsgTimestamp = scan.last_ts
            new_cp.confirmPhyOffset = scan.last_valid
        elif end > 0 and cp_ok:
            # The scan's first record is already damaged: the last valid record lies before the scan start,
            # which the checkpoint describes as well as anything does.
            new_cp.physicMsgTimestamp, new_cp.logicsMsgTimestamp = cp.physicMsgTimestamp, cp.logicsMsgTimestamp
            new_cp.confirmPhyOffset = min(cp.confirmPhyOffset, end)
        newest_full = 0
        if index_enabled:
            for x in idx_files[:len(iplan.trusted)]:
                newest_full = x.f.header.endTimestamp
            for p in iplan.planned:
                if p.count + 1 >= cfg.maxIndexNum:
                    newest_full = p.end_ts
        elif cp_ok:
            newest_full = cp.indexMsgTimestamp
        new_cp.indexMsgTimestamp = newest_full
        write_cp = False
        if not cp_ok:
            write_cp = True
            notes.append(f"checkpoint unreadable or implausible ({cp_problem}); it is rewritten")
        else:
            bad = []
            if max(cp.physicMsgTimestamp, cp.logicsMsgTimestamp) > max(scan.max_ts, scan.last_ts) and scan.count:
                bad.append("physic/logics timestamps are after every scanned message")
            if cp.indexMsgTimestamp > newest_full and index_enabled:
                bad.append("indexMsgTimestamp is after the newest full index file")
            if scan.last_valid >= 0 and cp.confirmPhyOffset > scan.last_valid:
                bad.append("confirmPhyOffset is past the last valid record")
            if bad:
                write_cp = True
                notes.append("checkpoint claims more than the store holds (" + "; ".join(bad) + "); it is rewritten")
        stale = []
        for d in (root, layout.index_dir):
            if d.is_dir():
                stale.extend(str(p.relative_to(root)) for p in d.iterdir() if _TMP_NAME.match(p.name))
        plan = RecoveryPlan(
            store=str(root), mode=mode, check_crc=check_crc, index_safe=index_safe, full_scan=full_scan,
            checkpoint_before=cp,
            checkpoint_readable=cp_ok, checkpoint_problem=cp_problem,
            broker_start_segment=segs[bi].path.name if segs else None, broker_start_offset=broker_start,
            broker_start_rule=rule, scan_start_offset=scan_start, scan_start_reasons=reasons,
            records_scanned=scan.count, last_valid_offset=scan.last_valid, last_store_timestamp=scan.last_ts,
            last_store_timestamp_before=truncated_ts if truncated_ts is not None else scan.last_ts,
            end_offset=end, stop_reason=scan.stop_reason, max_offset_before=max(data_end, end),
            truncated_bytes=truncated_bytes, truncated_records=truncated_records, zero_segment=zero_seg,
            zero_from=zero_from, zero_to=zero_to, segments_deleted=deleted, queues=qplans, index=iplan,
            checkpoint_after=new_cp, write_checkpoint=write_cp, stale_temp_files=sorted(stale), notes=notes,
            fingerprint=fingerprint)
        plan.data_consistent = plan._data_unchanged()
        if not plan.data_consistent or mode == "abnormal":
            plan.write_checkpoint = True
        else:
            plan.checkpoint_after = cp
        if not check_crc:
            notes.append("body CRCs were not checked (--no-check-crc)")
        return plan
    finally:
        for x in idx_files:
            if x.f is not None:
                x.f.close()
        cl.close()


# ==================================================================== apply

def _zero_range(path: Path, lo: int, hi: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        pos = lo
        while pos < hi:
            n = min(_ZERO_CHUNK, hi - pos)
            os.pwrite(fd, bytes(n), pos)
            pos += n
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def apply_recovery(cfg: BrokerConfig, plan: RecoveryPlan, lock: StoreLock | None = None) -> RecoveryPlan:
    """Carry out a plan under the store lock. Re-plans first if the store changed since the plan was made.

    Returns the plan that was applied. With `lock` given the caller already holds it.
    """
    own = lock is None
    if own:
        lock = StoreLock(cfg.root).acquire()
    try:
        if _fingerprint(cfg) != plan.fingerprint:
            plan = plan_recovery(cfg, plan.check_crc, plan.index_safe, plan.full_scan)
        if plan.nothing_to_do:
            return plan
        _execute(cfg, plan)
        return plan
    finally:
        if own:
            lock.release()


def _execute(cfg: BrokerConfig, plan: RecoveryPlan) -> None:
    root = cfg.root
    layout = StoreLayout.of(cfg)
    # 1. The abort marker first: a crash from here on leaves a store the next recover handles again.
    mark_in_use(layout)
    # 2. Commit log: later segments (newest first, so what remains is always a prefix), then the tail.
    seg_dirs = {}
    for d in cfg.commitlog_dirs:
        if d.is_dir():
            for p in d.iterdir():
                seg_dirs[p.name] = p
    for name in reversed(plan.segments_deleted):
        p = seg_dirs.get(name)
        if p is not None:
            p.unlink()
    for d in cfg.commitlog_dirs:
        if d.is_dir():
            fsync_dir(d)
    if plan.zero_to > plan.zero_from and plan.zero_segment:
        _zero_range(seg_dirs[plan.zero_segment], plan.zero_from, plan.zero_to)
    # 3. Consume queues: cut (§4.5, and zero the tail), then re-dispatch the missing units (§4.3).
    for q in plan.queues:
        if not q.changed:
            continue
        qdir = layout.cq_dir(q.topic, q.queue_id)
        for name in reversed(q.files_deleted):
            (qdir / name).unlink(missing_ok=True)
        if q.zero_file and q.zero_to > q.zero_from:
            _zero_range(qdir / q.zero_file, q.zero_from, q.zero_to)
        if q.files_deleted and qdir.is_dir():
            fsync_dir(qdir)
        if q.dispatch:
            cq = ConsumeQueue(root, q.topic, q.queue_id, cfg.cq_file_size, writable=True)
            try:
                touched = set()
                for phy, size, tags, qoff in q.dispatch:
                    if not cq.put(phy, size, tags, qoff):
                        raise InvalidArgumentError(
                            f"consume queue {q.topic}/{q.queue_id} refused unit for offset {phy}; run recover again")
                    touched.add(cq.queue.segments[cq._end_seg_index].start)
                for seg in cq.queue.segments:
                    if seg.start in touched:
                        os.fsync(cq.queue.fd(seg))
            finally:
                cq.close()
            fsync_dir(qdir)
            fsync_dir(qdir.parent)
            fsync_dir(qdir.parent.parent)
    # 4. Index: new contents written to a temporary name, forced, renamed into place.
    idir = layout.index_dir
    ip = plan.index
    if ip.enabled and ip.changed:
        idir.mkdir(parents=True, exist_ok=True)
        for p in ip.planned:
            if p.action == "keep":
                continue
            tmp = idir / f"{p.name}.tmp{os.getpid()}"
            p.write(tmp, cfg.maxHashSlotNum, cfg.maxIndexNum)
            _fsync_file(tmp)
            os.replace(tmp, idir / p.name)
        for name in ip.removed:
            (idir / name).unlink(missing_ok=True)
        fsync_dir(idir)
    for t in plan.stale_temp_files:
        (root / t).unlink(missing_ok=True)
    # 5. The checkpoint only once the data it describes is durable; the abort marker goes last.
    if plan.write_checkpoint:
        plan.checkpoint_after.save(layout.checkpoint)
    mark_clean(layout)


def recover(cfg: BrokerConfig, check_crc: bool = True, index_safe: bool = False, dry_run: bool = False,
            full_scan: bool = False) -> RecoveryPlan:
    """The `rmqtool recover` entry point: lock (unless dry run), plan, apply."""
    if dry_run:
        return plan_recovery(cfg, check_crc, index_safe, full_scan)
    if not cfg.root.is_dir():
        raise NotAStoreError(f"store directory {cfg.root} does not exist")
    lock = StoreLock(cfg.root).acquire()
    try:
        plan = plan_recovery(cfg, check_crc, index_safe, full_scan)
        return apply_recovery(cfg, plan, lock=lock)
    finally:
        lock.release()
