"""Rebuild a store's index files from its commit log (spark-reindex), byte-identical to the broker's.

The job (on the framework of engine.jobs.framework), bottom to top:

* scan: one commit-log segment range -> compact columns. engine.broker.commitlog.records.decode_segment decodes the
  records window by window; engine.broker.index.keycolumns finds and hashes the keys the dispatcher would put
  (UNIQ_KEY, then each non-empty KEYS token, as `topic#key`; rollback and length-mismatch records none,
  format §5.8, §7.7). Per record: PHYSICALOFFSET, STORETIMESTAMP and its key count; per key its Java
  hashCode. A message's keys share its offset and time, so this is the compact form of "offset, time, hash
  per key".
* plan (driver, engine.jobs.broker_plan): the "already indexed" rule, the cut into files of indexNum-1
  entries, each seeded from the previous file's last entry (IndexService rolling).
* build: on Spark, one task per index file, the vectorized builder over that file's entries. Inline, the plan
  and the build follow the scan range by range (PlanStream, FileStream): each range's entries are appended to
  their file in this process as soon as the range is scanned, while the workers scan the ranges after it.
* publish: into the store's index/ by one directory swap (old kept as index.bak-<time> unless --replace),
  then the checkpoint's indexMsgTimestamp; or into --out DIR file by file; all under the store lock. Before it,
  the rebuilt files are compared by content with the store's index files (ReindexResult.same_as_before).
"""
from __future__ import annotations

import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

import numpy as np

from engine.broker.write.guard import require_writable
from engine.broker.config.checkpoint import Checkpoint
from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.index.file import IndexFile, check_index_geometry, index_file_size
from engine.broker.index.build import append_puts, build_index_file_from_hashes
from engine.broker.index.compare import same_index
from engine.broker.layout import list_index_files
from engine.broker.index.geometry import existing_index_size, writer_index_geometry
from engine.broker.index.keycolumns import batch_key_columns
from engine.broker.commitlog.records import RecordBatch
from engine.jobs.broker_plan import FilePlan, Plan, PlanStream, file_pieces, file_ranges, make_plan
from engine.jobs.framework import (DEFAULT_MASTER, Job, ReindexError, ReindexResult, check_master, check_store,
                                   resolve_output)
from engine.broker.commitlog.ranges import RANGE_BYTES, SegmentRange, segment_ranges, walk_buffer, walk_range
from engine.exec.ranges import RangeScan, range_summary
from engine.exec.runners import InlineRunner
from engine.progress import Progress, no_progress

# ============================================================================ scan

#: Bytes of records the reindex scan decodes per window. The key extraction makes several passes over each window's
#: property bytes; at this size they stay in the CPU's caches, where 128 MiB windows (SCAN_WINDOW) stream them from
#: memory each time: about 15% less CPU on one core, and two workers no longer slow each other down on the memory
#: bus. The answer does not depend on the window (a record cut by a window's end starts the next).
RANGE_WINDOW = 8 << 20

@dataclass
class SegmentScan(RangeScan):
    """What one segment range contributes. Arrays are per dispatched record, except key_hash (per key)."""
    rec_phy: np.ndarray      # int64 PHYSICALOFFSET field
    rec_ts: np.ndarray       # int64 STORETIMESTAMP
    rec_nkeys: np.ndarray    # int32 keys the broker would put (0: none / rollback)
    key_hash: np.ndarray     # int32 Java hashCode of each "topic#key", in put order
    rollbacks: int = 0
    phy_mismatches: int = 0  # records whose PHYSICALOFFSET field differs from their position

    @property
    def keys(self) -> int:
        return len(self.key_hash)

    @property
    def nbytes(self) -> int:
        return self.rec_phy.nbytes + self.rec_ts.nbytes + self.rec_nkeys.nbytes + self.key_hash.nbytes

    def summary(self) -> dict:
        """Everything the driver needs to plan, without the columns."""
        keyed = self.rec_nkeys > 0
        kp = self.rec_phy[keyed]
        return {
            "index": self.index, "segment": self.segment, "start": self.start, "begin": self.begin, "end": self.end,
            "first": self.first, "exit": self.exit, "records": self.records, "keys": self.keys,
            "bytes_scanned": self.bytes_scanned, "end_kind": self.end_kind, "end_offset": self.end_offset,
            "end_reason": self.end_reason, "length_mismatches": self.length_mismatches,
            "rollbacks": self.rollbacks, "phy_mismatches": self.phy_mismatches, "seconds": self.seconds,
            "started": self.started,
            "first_rec_ts": int(self.rec_ts[0]) if self.records else None,
            "keyed_min": int(kp.min()) if len(kp) else None,
            "keyed_max": int(kp.max()) if len(kp) else None,
            "keyed_monotone": bool(np.all(kp[1:] >= kp[:-1])) if len(kp) > 1 else True,
        }


class _Columns:
    """Collects the index columns of the windows of one range walk."""

    def __init__(self, seg_start: int):
        self.seg_start = seg_start
        self.parts: list[tuple] = []
        self.mismatches = self.rollbacks = self.phy_mismatches = 0

    def __call__(self, buf, b: np.ndarray, batch: RecordBatch) -> None:
        c = batch_key_columns(buf, b, batch, self.seg_start)
        self.mismatches += c["mismatches"]
        self.rollbacks += c["rollbacks"]
        self.phy_mismatches += c["phy_mismatches"]
        self.parts.append((c["phy"], c["ts"], c["nkeys"], c["key_hash"]))

    def column(self, j: int, dtype) -> np.ndarray:
        if not self.parts:
            return np.empty(0, dtype)
        return np.concatenate([p[j] for p in self.parts]).astype(dtype, copy=False)


def scan_range(unit: SegmentRange, window: int = RANGE_WINDOW) -> SegmentScan:
    """Decode one segment range the way the broker's dispatcher does (no CRC, format §7.7)."""
    return _scan(unit, lambda on_batch: walk_range(unit, on_batch, window))


def scan_buffer(buf, unit: SegmentRange, window: int = RANGE_WINDOW) -> SegmentScan:
    """scan_range over a buffer holding the whole segment file (tools and tests)."""
    return _scan(unit, lambda on_batch: walk_buffer(buf, unit, on_batch, window))


def _scan(unit: SegmentRange, walk) -> SegmentScan:
    t, started = time.perf_counter(), time.time()
    cols = _Columns(unit.seg_start)
    w = walk(cols)
    s = range_summary(unit, w, 0, time.perf_counter() - t)
    return SegmentScan(unit.index, unit.seg_start, cols.column(0, np.int64), cols.column(1, np.int64),
                       cols.column(2, np.int32), cols.column(3, np.int32), bytes_scanned=s["bytes_scanned"],
                       end_kind=w.end_kind, end_offset=s["end_offset"], end_reason=w.end_reason,
                       length_mismatches=cols.mismatches, rollbacks=cols.rollbacks,
                       phy_mismatches=cols.phy_mismatches, segment=unit.segment, begin=unit.begin, end=unit.end,
                       first=w.first, exit=w.exit, seconds=s["seconds"], started=started)


# ============================================================================ build

@dataclass
class BuiltFile:
    number: int
    temp_path: str
    entries: int
    bytes: int


def temp_name(number: int, run_id: str, attempt: str) -> str:
    """Attempt-unique, and never a valid index file name (the broker skips names that are not numbers)."""
    return f".{number:06d}.{run_id}.{attempt}.tmp"


def build_file(k: int, pieces: Iterable[tuple], plan: Plan, staging: str, run_id: str,
               attempt: str = "a0") -> BuiltFile:
    """Index file k from its pieces (in any order); fsynced before it is reported as built."""
    fp: FilePlan = plan.files[k]
    pieces = sorted(pieces, key=lambda p: p[0])
    if len(pieces) == 1:
        _, hashes, phy, ts = pieces[0]
    elif pieces:
        hashes = np.concatenate([p[1] for p in pieces])
        phy = np.concatenate([p[2] for p in pieces])
        ts = np.concatenate([p[3] for p in pieces])
    else:
        hashes, phy, ts = np.empty(0, np.int32), np.empty(0, np.int64), np.empty(0, np.int64)
    if len(hashes) != fp.entries:
        raise ReindexError(f"index file {fp.number}: got {len(hashes)} entries, planned {fp.entries}")
    path = os.path.join(staging, temp_name(fp.number, run_id, attempt))
    n = build_index_file_from_hashes(path, hashes, phy, ts, plan.hash_slot_num, plan.index_num, fp.seed_phy,
                                     fp.seed_ts)
    return _finish_file(fp.number, path, n)


def _finish_file(number: int, path: str, n: int) -> BuiltFile:
    """A written file of n entries made what the broker leaves, and fsynced."""
    fd = os.open(path, os.O_RDWR)
    try:
        if n == 0:
            # A file the broker created but never put into: its shutdown flush (5.x) writes indexCount 1.
            if os.pwrite(fd, struct.pack(">i", 1), 36) != 4:
                raise ReindexError(f"short write to {path}")
        os.fsync(fd)
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    return BuiltFile(number, path, n, size)


class FileStream:
    """The index files of a PlanStream written piece by piece in this process: file k is created with its seeds
    (IndexFile.create) at its first piece, each piece appended in put order (append_puts: the bytes of the one-pass
    builder and of put_hash in a loop), and the file fsynced and closed as soon as it is full or the log ends.
    Holds one open file (its mapping) and no entries."""

    def __init__(self, plan: Plan, staging: str, run_id: str, progress: Progress):
        self.plan, self.staging, self.run_id, self.progress = plan, staging, run_id, progress
        self.built: list[BuiltFile] = []
        self.seconds = 0.0
        self._f: Optional[IndexFile] = None
        self._fp: Optional[FilePlan] = None

    def put(self, pieces: list) -> None:
        t = time.perf_counter()
        for fp, hashes, phy, ts in pieces:
            if self._fp is not fp:
                self._close()
                self._open(fp)
            append_puts(self._f, hashes, phy, ts)
            if fp.entries == self.plan.cap:  # full: no later range puts into it
                self._close()
        self.seconds += time.perf_counter() - t

    def _open(self, fp: FilePlan) -> None:
        path = os.path.join(self.staging, temp_name(fp.number, self.run_id, "a0"))
        self._f = IndexFile.create(path, self.plan.hash_slot_num, self.plan.index_num, fp.seed_phy, fp.seed_ts)
        self._fp = fp

    def _close(self) -> None:
        if self._f is None:
            return
        f, fp = self._f, self._fp
        self._f = self._fp = None
        n = f.header.indexCount - 1
        f.close()
        self.built.append(_finish_file(fp.number, str(f.path), n))
        self.progress("build", len(self.built), len(self.plan.files))

    def finish(self) -> list[BuiltFile]:
        """Close the last file, write the empty files the plan ends with (finish() of the PlanStream first)."""
        t = time.perf_counter()
        self._close()
        for fp in self.plan.files[len(self.built):]:
            self._open(fp)
            self._close()
        self.seconds += time.perf_counter() - t
        return self.built

    def abandon(self) -> None:
        """Close the open file (an error: the staging directory it is in goes with the job)."""
        if self._f is not None:
            self._f.close()
            self._f = self._fp = None


def rebuild_from_scans(scans: list[SegmentScan], hash_slot_num: int, index_num: int, out_dir: Path) -> list[Path]:
    """Plan and build index files from ready scans into out_dir (no lock, no publishing): for tests and tools."""
    check_index_geometry(hash_slot_num, index_num)
    runner = InlineRunner(scans)
    plan = make_plan(runner, [sc.summary() for sc in scans], hash_slot_num, index_num)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    built = runner.build_with(len(plan.files), file_pieces, build_file, plan, str(out_dir), "0" * 12, no_progress)
    return _renamed(built, plan, out_dir)


def stream_from_scans(scans: list[SegmentScan], hash_slot_num: int, index_num: int, out_dir: Path) -> list[Path]:
    """rebuild_from_scans the inline job's way: the plan and the files range by range (PlanStream, FileStream)."""
    check_index_geometry(hash_slot_num, index_num)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    planner = PlanStream(hash_slot_num, index_num)
    files = FileStream(planner.plan, str(out_dir), "0" * 12, no_progress)
    for sc in sorted(scans, key=lambda x: x.index):
        files.put(planner.add(sc.summary(), sc))
    plan = planner.finish()
    return _renamed(files.finish(), plan, out_dir)


def _renamed(built: list[BuiltFile], plan: Plan, out_dir: Path) -> list[Path]:
    paths = []
    for b, fp in zip(built, plan.files):
        os.rename(b.temp_path, out_dir / fp.name)
        paths.append(out_dir / fp.name)
    return paths


# ============================================================================ the job

def spark_reindex(config: BrokerConfig, out: Optional[Path] = None, master: str = DEFAULT_MASTER,
                  dry_run: bool = False, replace: bool = False, progress: Optional[Progress] = None,
                  range_bytes: int = RANGE_BYTES, spark_conf: Optional[dict] = None,
                  new_geometry: bool = False) -> ReindexResult:
    """Rebuild the store's index files from its commit log (see the module docstring). The geometry is the
    store's (writer_index_geometry: broker.conf, the options, else its index files); new_geometry: the configured
    one even where the store's index files have another (the whole index is rebuilt in it)."""
    progress = progress or no_progress
    require_writable(config, "spark-reindex --replace" if replace else "spark-reindex")
    layout = check_store(config)
    old_size = existing_index_size(layout.index_dir)
    config = writer_index_geometry(config, new_geometry, "spark-reindex")
    hash_slot_num, index_num = config.maxHashSlotNum, config.maxIndexNum
    check_index_geometry(hash_slot_num, index_num)
    check_master(master)
    # --replace deletes an old index/ that holds nothing but index files of its own geometry
    target = resolve_output(layout, out, "broker", replace, dry_run,
                            old_size if new_geometry and old_size else index_file_size(hash_slot_num, index_num))
    result = ReindexResult(master, dry_run, str(config.root), str(target.directory), hash_slot_num=hash_slot_num,
                           index_num=index_num)
    with Job(layout, master, result, target, "broker") as job:
        if target.into_store:
            Checkpoint.load(layout.checkpoint)  # a corrupt checkpoint fails here, before any work
        job.start_runner(spark_conf)
        units = segment_ranges(config, range_bytes)
        built = None
        if isinstance(job.runner, InlineRunner):  # the plan and the build follow the scan, range by range
            summaries, plan, built = _stream(job, units, hash_slot_num, index_num, progress)
        else:
            summaries = job.scan(units, scan_range, progress)
            plan = make_plan(job.runner, summaries, hash_slot_num, index_num)
        result.rollback_records = sum(d["rollbacks"] for d in summaries)
        result.phy_mismatches = sum(d["phy_mismatches"] for d in summaries)
        result.skipped_already_indexed = sum(d["keys"] for d in summaries) - plan.total_entries
        result.keys_indexed = plan.total_entries
        result.index_files = len(plan.files)
        result.files = [{"name": fp.name, "entries": fp.entries, "full": fp.entries == plan.cap,
                         "seedPhyOffset": fp.seed_phy, "seedTimestamp": fp.seed_ts} for fp in plan.files]
        if dry_run:
            return result
        _build_and_publish(job, plan, progress, built)
        if target.into_store:
            result.index_msg_timestamp = max([0] + [f["endTimestamp"] for f in result.files])
            # The broker deletes index files with endTimestamp > indexMsgTimestamp after an unclean exit
            # (format §5.8, load). Every rebuilt file is complete and on disk, so the newest end time protects them all.
            checkpoint = Checkpoint.load(layout.checkpoint)
            checkpoint.indexMsgTimestamp = result.index_msg_timestamp
            checkpoint.save(layout.checkpoint)
        return result


def _stream(job: Job, units: list[SegmentRange], hash_slot_num: int, index_num: int,
            progress: Progress) -> tuple[list[dict], Plan, Optional[list[BuiltFile]]]:
    """The inline job: each range's exact scan, as it comes in commit-log order, placed by the PlanStream and (not on
    a dry run) appended to its index file in the staging directory, while the workers scan the ranges after it.
    buildSeconds is this process's time writing files, within the scan's time."""
    planner = PlanStream(hash_slot_num, index_num)
    files = None if job.result.dry_run else FileStream(planner.plan, str(job.open_staging()), job.run_id, progress)
    summaries = []
    scans = job.stream(units, scan_range, progress)
    try:
        for summary, sc in scans:
            summaries.append(summary)
            pieces = planner.add(summary, sc)
            if files is not None:
                files.put(pieces)
        plan = planner.finish()
        built = files.finish() if files is not None else None
    except BaseException:
        scans.close()  # the workers stop now (a failure here, Ctrl-C), before the staging directory goes
        if files is not None:
            files.abandon()
        raise
    if files is not None:
        job.result.build_seconds = files.seconds
    return summaries, plan, built


def _build_and_publish(job: Job, plan: Plan, progress: Progress, built: Optional[list[BuiltFile]] = None) -> None:
    """Build the plan's files (unless built: the inline job's, as it scanned), seal and publish them."""
    staging = job.open_staging()
    if built is None:
        t = time.perf_counter()
        built = (job.runner.build_with(len(plan.files), file_pieces, build_file, plan, str(staging), job.run_id,
                                       progress, file_ranges) if plan.files else [])
        job.result.build_seconds = time.perf_counter() - t
    names = job.seal(built, [fp.name for fp in plan.files],
                     {"hash_slot_num": plan.hash_slot_num, "index_num": plan.index_num})
    for info, name in zip(job.result.files, names):
        info["endTimestamp"] = _read_end_timestamp(staging / name)
    # By content, not by name: put names its files by the wall clock, the rebuild by store time.
    job.result.same_as_before = same_index(list_index_files(job.layout.index_dir), [staging / n for n in names],
                                           plan.hash_slot_num)
    job.publish(names)


def _read_end_timestamp(path: Path) -> int:
    with open(path, "rb") as f:
        return struct.unpack(">q", f.read(16)[8:16])[0]
