"""The job framework both index jobs stand on (spark-reindex, and tiered reindex).

A job, in order:

1. check the inputs and the output path (check_store, check_master, resolve_output): nothing is written,
   no lock file is created, for an input that is refused;
2. Job: take the store lock, refuse an unclean store (abort marker), repair what an interrupted run left
   (engine.jobs.publish), start the runner (engine.exec.runners);
3. scan the commit log as segment ranges on the runner (Job.scan; engine.exec.ranges), plan on the driver;
4. build the files into a staging directory (Job.open_staging, the runner's build_with), seal it (Job.seal:
   final names, marker, fsync) and publish it by renames (Job.publish); the inline spark-reindex plans and builds
   range by range as its scan goes instead (Job.stream: the inline runner's ranges in commit-log order);
5. the result (ReindexResult), with the anomalies met and the repairs made.

Progress is reported as (phase, done, total) with phases "scan" and "build".
"""
from __future__ import annotations

import os
import shutil
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional

from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.layout import StoreLayout, is_inside, list_index_files
from engine.broker.config.lock import StoreLock
from engine.errors import InvalidArgumentError, NotAStoreError, StoreError, StoreReadOnlyError, UncleanStoreError
from engine.fsutil import fsync_dir
from engine.jobs import publish
from engine.progress import Progress

if TYPE_CHECKING:  # the numpy side of the jobs is imported when a job runs, not with the CLI
    from engine.broker.commitlog.ranges import SegmentRange

DEFAULT_MASTER = "local[*]"
SCRATCH = ".scratch"  # in the staging directory: scan columns and build pieces waiting between the steps

class ReindexError(StoreError):
    """The rebuild could not run or did not complete (nothing was published)."""


@dataclass
class ReindexResult:
    """What a job did; --json prints as_dict(). The tiered job extends it."""
    master: str
    dry_run: bool
    store: str
    out_dir: str
    segments: int = 0
    messages: int = 0
    keys_indexed: int = 0
    index_files: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    scan_seconds: float = 0.0
    build_seconds: float = 0.0
    hash_slot_num: int = 0
    index_num: int = 0
    skipped_already_indexed: int = 0
    rollback_records: int = 0
    length_mismatches: int = 0
    phy_mismatches: int = 0
    anomalies: list[str] = field(default_factory=list)
    files: list[dict] = field(default_factory=list)
    backup_dir: Optional[str] = None
    replaced: bool = False
    index_msg_timestamp: Optional[int] = None
    spark_log: Optional[str] = None
    spark_class_archive: Optional[str] = None  # local Spark: used | creating | pending | rejected | failed | off
    format: str = "broker"               # broker | tiered
    scan_tasks: list[dict] = field(default_factory=list)  # per segment range: bytes, records, seconds, started
    scan_started: float = 0.0                             # wall clock (epoch seconds) of the scan stage's start
    repairs: list[str] = field(default_factory=list)      # what an interrupted earlier run left, and what was done
    # broker format: whether the rebuilt index equals, by content, the store's index it replaces (with --out: the
    # store's index, which it would replace); None in a dry run
    same_as_before: Optional[bool] = None
    store_read_only: bool = False  # a read-only store (a snapshot) read without the lock: the output is elsewhere

    @property
    def throughput(self) -> float:
        """Commit-log bytes per second over the whole job."""
        return self.bytes_read / self.seconds if self.seconds > 0 else 0.0

    @property
    def scan_throughput(self) -> float:
        return self.bytes_read / self.scan_seconds if self.scan_seconds > 0 else 0.0

    def as_dict(self) -> dict:
        """The --json document: camelCase names, as every command's (docs/output-contract.md; the snake_case
        names of 0.1 are listed there)."""
        d = camel_keys(asdict(self))
        d["throughputBytesPerS"] = round(self.throughput, 1)
        d["scanThroughputBytesPerS"] = round(self.scan_throughput, 1)
        return d


def camel(name: str) -> str:
    """keys_indexed -> keysIndexed."""
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def camel_keys(obj):
    """A JSON-ready value with every dict key in camelCase (the job's own records: no data maps inside)."""
    if isinstance(obj, dict):
        return {camel(k) if isinstance(k, str) else k: camel_keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [camel_keys(v) for v in obj]
    return obj


# ============================================================================ inputs

def _dledger_store(config: BrokerConfig) -> bool:
    """A DLedger store keeps its commit log in dledger-<id>/data (engine.broker.mode), not in commitlog/."""
    from engine.broker.mode import DLEDGER, detect_mode

    m = detect_mode(config)
    return m.commitlog == DLEDGER and m.dledger_data_dir is not None and m.dledger_data_dir.is_dir()


def check_store(config: BrokerConfig) -> StoreLayout:
    """The store must exist and have a commit log (the jobs' only input)."""
    root = config.root
    if not root.exists():
        raise NotAStoreError(f"store directory {root} does not exist")
    if not root.is_dir():
        raise NotAStoreError(f"{root} is not a directory")
    if not any(d.is_dir() for d in config.commitlog_dirs) and not _dledger_store(config):
        raise NotAStoreError(f"{root} is not a RocketMQ store: it has no commitlog/ directory "
                             f"({', '.join(map(str, config.commitlog_dirs))})")
    return StoreLayout.of(config)


def check_master(master: str) -> None:
    from engine.exec.runners import master_problem

    if not master or not master.strip():
        raise InvalidArgumentError("--master must not be empty")
    why = master_problem(master)
    if why:
        raise InvalidArgumentError(why)


@dataclass
class OutputTarget:
    directory: Path        # where the files end up
    into_store: bool       # the store's own index directory: swapped whole, checkpoint updated
    replace: bool


def resolve_output(layout: StoreLayout, out: Optional[Path], fmt: str, replace: bool, dry_run: bool,
                   index_file_size: Optional[int] = None) -> Optional[OutputTarget]:
    """Where the job may write, or a one-line refusal. Nothing is written here.

    Refused: a path that is, contains or lies inside commitlog/, consumequeue/, config/ or checkpoint, the
    store root itself (StoreLayout.clash); anything inside the store's index/ or tiered_index_file/; a file.
    Index files already in the directory need --replace, and --replace needs a directory rmqtool built
    (engine.jobs.publish.MANIFEST) or, for the store's own index/, one with nothing but index files.
    """
    index_dir = layout.index_dir.resolve()
    if out is None:
        if fmt == "tiered":
            if dry_run:
                return None
            raise InvalidArgumentError("tiered reindex needs --out DIR: the compacted files are uploaded segments, "
                                       "which have no place in the local store")
        return _target(index_dir, True, replace, index_file_size)
    d = Path(os.path.realpath(os.path.abspath(os.path.expanduser(os.fspath(out)))))
    why = layout.clash(d)
    if why:
        raise InvalidArgumentError(f"--out {d}: {why}; choose a directory outside the store's data")
    tiered_dir = layout.tiered_index_dir.resolve()
    if d == tiered_dir or is_inside(d, tiered_dir):
        raise InvalidArgumentError(f"--out {d}: the broker loads every numeric file under {tiered_dir} as an "
                                   "unsealed working file; choose another directory")
    if d == index_dir and fmt == "tiered":
        raise InvalidArgumentError(f"--out {d}: that is the broker's own index directory; choose another directory")
    if is_inside(d, index_dir):
        raise InvalidArgumentError(f"--out {d} lies inside the store's index directory; choose another directory")
    if d == index_dir:
        return _target(d, True, replace, index_file_size)
    if d.exists() and not d.is_dir():
        raise InvalidArgumentError(f"--out {d} exists and is not a directory")
    if d.is_dir() and list_index_files(d) and not dry_run:
        if not replace:
            raise InvalidArgumentError(f"--out {d} already holds index files; pass --replace to overwrite them "
                                       "or choose an empty directory")
        if publish.read_manifest(d) is None:
            raise InvalidArgumentError(f"--out {d} holds index files rmqtool did not write (no {publish.MANIFEST}); "
                                       "--replace only replaces an index directory rmqtool built: choose an empty "
                                       "directory or move those files away yourself")
    return OutputTarget(d, False, replace)


def _target(index_dir: Path, into_store: bool, replace: bool, file_size: Optional[int]) -> OutputTarget:
    """The store's own index/: with --replace the old directory is deleted whole, so it must hold nothing but
    index files (of this geometry, unless rmqtool built it) and the marker."""
    if replace and index_dir.is_dir():
        ours = publish.read_store_index_marker(index_dir) is not None
        foreign = publish.foreign_entries(index_dir, None if ours else file_size)
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise InvalidArgumentError(
                f"--replace: {index_dir} holds more than index files of this geometry ({shown}); rmqtool replaces "
                "only an index directory it built or one with nothing but index files: drop --replace to keep the "
                "old directory as a backup")
    return OutputTarget(index_dir, into_store, replace)


# ============================================================================ the job

class Job:
    """What a job holds and must release however it ends: the store lock (not for a dry run), the runner,
    the staging directory of unpublished files."""

    def __init__(self, layout: StoreLayout, master: str, result: ReindexResult,
                 target: Optional[OutputTarget], fmt: str):
        self.layout, self.master, self.result, self.target, self.fmt = layout, master, result, target, fmt
        self.t0 = time.perf_counter()
        self.lock = None if result.dry_run else self._store_lock()
        self.runner = None
        self.staging: Optional[Path] = None
        self.run_id = uuid.uuid4().hex[:12]

    def _store_lock(self) -> Optional[StoreLock]:
        """The store lock, so that no broker or other writer changes the store while the job reads it. A store that
        cannot be written at all (a read-only mount, a snapshot) cannot be changed by anyone either: a job whose
        output lies outside the store (--out DIR) reads it without the lock, as every read-only command does; a
        job that publishes into the store's own index/ is refused (StoreReadOnlyError)."""
        try:
            return StoreLock(self.layout.root).acquire()
        except StoreReadOnlyError:
            if self.target is None or self.target.into_store:
                raise
            self.result.store_read_only = True
            return None

    def __enter__(self) -> "Job":
        try:
            if self.layout.abort.exists():
                raise UncleanStoreError(f"store {self.layout.root} was not shut down cleanly (abort file present); "
                                        "run `rmqtool recover` first")
            if not self.result.dry_run and self.target is not None:
                self.result.repairs = (publish.repair_store_index(self.target.directory) if self.target.into_store
                                       else publish.repair_out_dir(self.target.directory))
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def start_runner(self, spark_conf: Optional[dict] = None):
        from engine.exec.runners import open_runner

        self.runner = open_runner(self.master, spark_conf)
        self.result.spark_log = getattr(self.runner, "log_path", None)
        self.result.master = self.runner.master_used
        return self.runner

    def scan(self, units: list[SegmentRange], scan_fn, progress: Progress) -> list[dict]:
        """Scan every range on the runner; the summaries in commit-log order, with the common figures set."""
        r = self.result
        r.segments = len({u.segment for u in units})
        # Columns may wait in the staging directory (the output's storage, which executors share); a dry run
        # writes nothing, so its runner keeps them itself.
        scratch = None if r.dry_run else str(self.open_staging() / SCRATCH)
        t, r.scan_started = time.perf_counter(), time.time()
        summaries = self.runner.scan(units, progress, scan_fn, scratch) if units else []
        summaries.sort(key=lambda d: d["index"])
        self._scanned(summaries, t)
        return summaries

    def stream(self, units: list[SegmentRange], scan_fn, progress: Progress) -> Iterator[tuple[dict, object]]:
        """(summary, scan) of every range of the exact walk in commit-log order, as the inline runner's stream gives
        them (the caller uses each scan before it takes the next); the common figures set at the end, as scan's."""
        r = self.result
        r.segments = len({u.segment for u in units})
        t, r.scan_started = time.perf_counter(), time.time()
        summaries = []
        scans = self.runner.stream(units, progress, scan_fn) if units else iter(())
        try:
            for summary, sc in scans:
                summaries.append(summary)
                yield summary, sc
        finally:
            if hasattr(scans, "close"):
                scans.close()  # a failure or an interrupt stops the workers now, not when the generator is freed
        self._scanned(summaries, t)

    def _scanned(self, summaries: list[dict], t: float) -> None:
        from engine.exec.ranges import scan_anomalies

        r = self.result
        r.scan_seconds = time.perf_counter() - t
        r.messages = sum(d["records"] for d in summaries)
        r.bytes_read = sum(d["bytes_scanned"] for d in summaries)
        r.length_mismatches = sum(d["length_mismatches"] for d in summaries)
        r.anomalies = scan_anomalies(summaries)
        keys = ("segment", "start", "begin", "end", "bytes_scanned", "records", "seconds", "started")
        r.scan_tasks = [{k: d[k] for k in keys} for d in summaries if d["end_kind"] != "void"]

    def open_staging(self) -> Path:
        """The staging directory: beside the store's index (same file system, swapped whole), or in --out."""
        if self.staging is not None:
            return self.staging
        target = self.target.directory
        if self.target.into_store:
            path = publish.staging_path(target, self.run_id)
        else:
            target.mkdir(parents=True, exist_ok=True)
            path = target / f".reindex-{self.run_id}"
        self.staging = publish.create_staging(path, self.run_id, self.fmt)
        return self.staging

    def seal(self, built: list, names: list[str], manifest_extra: dict) -> list[str]:
        """Give the built files (objects with .number, .temp_path) their final names in the staging
        directory, drop leftovers of failed task attempts, write the complete marker, fsync."""
        by_no = {b.number: b for b in built}
        if sorted(by_no) != list(range(len(names))):
            raise ReindexError("not every index file was built; nothing was published")
        shutil.rmtree(self.staging / SCRATCH, ignore_errors=True)
        keep = {os.path.basename(b.temp_path) for b in built} | {publish.MANIFEST}
        for p in self.staging.iterdir():  # leftovers of failed or speculative task attempts
            if p.name not in keep:
                os.unlink(p)
        for k, name in enumerate(names):
            os.rename(by_no[k].temp_path, self.staging / name)
        self.manifest = publish.new_manifest(self.run_id, self.fmt, "complete", store=str(self.layout.root),
                                             replace=self.target.replace, **manifest_extra,
                                             files=[{"name": n, "bytes": os.path.getsize(self.staging / n)}
                                                    for n in names])
        publish.write_manifest(self.staging, self.manifest)
        fsync_dir(self.staging)
        return names

    def publish(self, names: list[str]) -> None:
        """Make the sealed staging directory's files visible (engine.jobs.publish)."""
        r, t = self.result, self.target
        if t.into_store:
            had_old = t.directory.exists()
            backup = publish.publish_directory(self.staging, t.directory, self.run_id, t.replace)
            r.backup_dir = str(backup) if backup else None
            r.replaced = had_old and t.replace
        else:
            r.replaced = publish.publish_files(self.staging, t.directory, names, self.manifest, t.replace)
        self.staging = None

    def __exit__(self, exc_type, exc, tb) -> None:
        failed = exc_type is not None
        try:
            if self.staging is not None and self.staging.exists():
                shutil.rmtree(self.staging, ignore_errors=True)
            if self.runner is not None:
                self.runner.close(failed)
                archive = getattr(self.runner, "class_archive", None)
                self.result.spark_class_archive = archive.state if archive is not None else None
                if not failed:
                    self.result.spark_log = None  # the JVM log is kept only when something went wrong
        finally:
            if self.lock is not None:
                self.lock.release()
                self.lock = None
            self.result.seconds = time.perf_counter() - self.t0
