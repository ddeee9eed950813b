"""Where a job's scan and build run: in this process (InlineRunner) or on Spark (SparkRunner).

Both offer the same four steps, whatever the format:

* scan(units, progress, scan_fn, scratch=None): scan_fn(SegmentRange) -> an object with .index and
  .summary(), one per range; returns the summaries of the exact sequential walk (engine.exec.ranges) and
  keeps the scans (scratch: a directory on the output's storage the runner may use for them, None on a dry
  run);
* ask(fn, requests): {range index: fn(scan, argument)} for a question that needs the columns;
* build_with(n_files, pieces_fn, build_fn, plan, staging, run_id, progress, ranges_fn): pieces_fn(scan,
  plan) yields (file number, piece), in file order; ranges_fn(plan, k) names the ranges with pieces of file k;
  build_fn(k, pieces, plan, staging, run_id, attempt) builds file k from its pieces (in any order) and
  returns what was built;
* close(failed).

InlineRunner also offers stream(units, progress, scan_fn): the ranges' exact scans themselves, one by one in
commit-log order as they come (on the workers or in this process), kept nowhere: the inline spark-reindex plans
and builds each range's entries while the workers scan the ranges after it.

scan also runs any other per-item function (items with .index, fn returning an object with .index and
.summary(): the tiered flat store's dispatch), one task per item, without the range bookkeeping.

pyspark is imported only inside SparkRunner, and numpy (through the segment ranges) only when work runs, so the
module imports light. Every failure of the runner itself (Spark missing, unreachable or failing a task) is a
RunnerError; the jobs that run on it raise their own errors for what their work finds.
"""
from __future__ import annotations

import functools
import os
import pickle
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional

from engine.errors import StoreError
from engine.progress import Progress

if TYPE_CHECKING:  # numpy: the ranges are imported when work runs
    from engine.broker.commitlog.ranges import SegmentRange

INLINE = "inline"  # the master that runs the work in this process, without Spark
#: The master URLs SparkContext takes (SparkContext.createTaskScheduler, SparkSubmit): local, local[N], local[*],
#: local[N,F], local[*,F], local-cluster[N,C,M], spark://, k8s://, mesos://, yarn.
_SPARK_MASTER = r"local(\[(\d+|\*)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|(spark|k8s|mesos)://\S+|yarn"


def master_problem(master: str) -> Optional[str]:
    """Why `master` is neither 'inline' nor a Spark master URL, None when it is one (checked before any work)."""
    import re

    if master == INLINE or re.fullmatch(_SPARK_MASTER, master or ""):
        return None
    return (f"--master {master!r} is not a Spark master (local[*], local[N], spark://host:port, yarn, "
            "k8s://..., mesos://...) nor 'inline'")

#: Scan columns the inline runner keeps in memory; beyond it, scans are pickled to a temporary directory
#: ($TMPDIR) and read back when asked. With one file's entries at a time in the build, this bounds memory.
INLINE_MEMORY_BUDGET = 512 << 20
#: Commit logs at least this big are scanned by worker processes by default (engine.workers: one per CPU this
#: process may use, or --workers N whatever the size), each holding one decode window (WORKER_MEMORY at most: the
#: window's pages, released as the walk moves on, and its columns). The tiered inline job's memory is then
#: bounded by N x WORKER_MEMORY + INLINE_MEMORY_BUDGET + the build of one index file (about 1.1 GiB for a full
#: default-geometry file of 20M items; 200 MiB for 3M); spark-reindex's (stream) by N x WORKER_MEMORY + the
#: ranges in flight (JOBS_PER_WORKER per worker) + one range's entries.
INLINE_PARALLEL_MIN_BYTES = 256 << 20
#: JVM options of a local master's JVM (driver and executor in one): the client compiler only (no C2
#: compiler threads competing with the Python workers for the CPUs while a short job runs) and the serial
#: collector (its heap holds little: summaries and small task results). --conf spark.driver.extraJavaOptions
#: replaces them.
LOCAL_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: How long a cluster may take to give the job its first executor.
EXECUTOR_WAIT_SECONDS = 60
MASTER_PROBE_SECONDS = 5


class RunnerError(StoreError):
    """The runner could not run the work: Spark missing, unreachable or failing, the job's JVM gone."""


# ============================================================================ inline

def open_runner(master: str, spark_conf: Optional[dict] = None):
    """The runner for `master` (the public entry point of this module, with each runner's `scan`, `build_with`,
    `master_used` and `close`): InlineRunner for "inline", else a SparkRunner on that master."""
    return InlineRunner() if master == INLINE else SparkRunner(master, spark_conf)


class InlineRunner:
    """The whole job without Spark or a JVM, the driver in this process: range after range (each starts
    exactly where the last one ended); a commit log of INLINE_PARALLEL_MIN_BYTES or more (any, with --workers) is
    scanned by a pool of forked worker processes (engine.workers), one range per task as on Spark
    (guessed starts, settled afterwards), their columns sent back to this process. The build runs here, file
    after file (one file's entries in memory)."""

    name = INLINE
    master_used = INLINE   # the master the job ran on, as reported

    def __init__(self, scans: Optional[list] = None, memory_budget: Optional[int] = None,
                 workers: Optional[int] = None):
        self._mem: dict[int, object] = {}
        self._spilled: dict[int, Path] = {}
        self._budget = INLINE_MEMORY_BUDGET if memory_budget is None else memory_budget
        self._held = 0
        self._tmp: Optional[Path] = None
        self._spill_dir: Optional[Path] = None
        self._workers = workers  # None: engine.workers decides (--workers, else the CPUs)
        for sc in scans or []:
            self._keep(sc)

    def _keep(self, sc) -> None:
        old = self._mem.pop(sc.index, None)
        if old is not None:
            self._held -= getattr(old, "nbytes", 0)
        size = getattr(sc, "nbytes", 0)
        if self._held + size <= self._budget:
            self._spilled.pop(sc.index, None)
            self._mem[sc.index] = sc
            self._held += size
            return
        if self._tmp is None:
            if self._spill_dir is not None:  # the job's scratch directory, on the output's storage
                self._spill_dir.mkdir(parents=True, exist_ok=True)
                self._tmp = Path(tempfile.mkdtemp(prefix="scans-", dir=self._spill_dir))
            else:
                self._tmp = Path(tempfile.mkdtemp(prefix="rmqtool-scans-"))
        path = self._tmp / f"{sc.index}.pickle"
        with open(path, "wb") as f:
            pickle.dump(sc, f, protocol=pickle.HIGHEST_PROTOCOL)
        self._spilled[sc.index] = path

    def _get(self, index: int):
        if index in self._mem:
            return self._mem[index]
        with open(self._spilled[index], "rb") as f:
            return pickle.load(f)

    def _indexes(self) -> list[int]:
        return sorted([*self._mem, *self._spilled])

    def scan(self, units: list[SegmentRange], progress: Progress, scan_fn, scratch: Optional[str] = None
             ) -> list[dict]:
        from engine.broker.commitlog.ranges import SegmentRange  # numpy: imported when work runs
        from engine.exec.ranges import RangeChain

        if scratch is not None:
            self._spill_dir = Path(scratch)
        if units and not isinstance(units[0], SegmentRange):
            return self._each(units, progress, scan_fn)
        size = sum({u.segment: u.file_len for u in units}.values())
        from engine import workers as pool_workers

        n = min(self._workers or pool_workers.count(), len(units))
        if n > 1 and (self._workers is not None or pool_workers.fan_out(size, INLINE_PARALLEL_MIN_BYTES)):
            return self._scan_pool(units, progress, scan_fn, n)
        chain = RangeChain()
        out = []
        for i, unit in enumerate(units):
            sc = scan_fn(chain.exact(unit))
            summary = sc.summary()
            chain.record(summary)
            self._keep(sc)
            out.append(summary)
            progress("scan", i + 1, len(units))
        return out

    def stream(self, units: list[SegmentRange], progress: Progress, scan_fn) -> Iterator[tuple[dict, object]]:
        """(summary, scan) of every range of the exact sequential walk, in commit-log order, each as soon as it and
        the ranges before it are scanned; nothing is kept. On workers as `scan` decides (guessed starts: a range
        that did not begin where the walk of the one before it ended is scanned again here, exactly, before it is
        given out, which is settle's answer), at most JOBS_PER_WORKER ranges per worker ahead of the caller."""
        from engine.exec.ranges import RangeChain
        from engine import workers as pool_workers

        size = sum({u.segment: u.file_len for u in units}.values())
        n = min(self._workers or pool_workers.count(), len(units))
        chain = RangeChain()
        if n > 1 and (self._workers is not None or pool_workers.fan_out(size, INLINE_PARALLEL_MIN_BYTES)):
            from engine.workers import WorkerPool

            with WorkerPool(n) as pool:  # a dead worker: WorkerDiedError, nothing published
                done = pool.ordered(scan_fn, [(u,) for u in units], lambda k: progress("scan", k, len(units)))
                for unit, sc in zip(units, done):
                    want = chain.exact(unit)
                    summary = sc.summary()
                    if not chain.agrees(want, summary):
                        sc = scan_fn(want)
                        summary = sc.summary()
                    chain.record(summary)
                    yield summary, sc
            return
        for i, unit in enumerate(units):
            sc = scan_fn(chain.exact(unit))
            summary = sc.summary()
            chain.record(summary)
            yield summary, sc
            progress("scan", i + 1, len(units))

    def _each(self, items: list, progress: Progress, fn) -> list[dict]:
        out = []
        for i, item in enumerate(items):
            out.append(fn(item).summary())
            progress("scan", i + 1, len(items))
        return out

    def _scan_pool(self, units: list[SegmentRange], progress: Progress, scan_fn, workers: int) -> list[dict]:
        from engine.exec.ranges import settle
        from engine.workers import WorkerPool

        summaries: dict[int, dict] = {}
        with WorkerPool(workers) as pool:  # a dead worker: WorkerDiedError, nothing built
            for sc in pool.ordered(scan_fn, [(u,) for u in units],
                                   lambda done: progress("scan", done, len(units))):
                summaries[sc.index] = sc.summary()
                self._keep(sc)

        def rescan(redo: list[SegmentRange]) -> list[dict]:
            fixed = [scan_fn(u) for u in redo]
            for sc in fixed:
                self._keep(sc)
            return [sc.summary() for sc in fixed]

        summaries = settle(units, summaries, rescan)
        return [summaries[u.index] for u in units]

    def ask(self, fn, requests: dict) -> dict:
        return {i: fn(self._get(i), a) for i, a in requests.items()}

    def build_with(self, n_files: int, pieces_fn, build_fn, plan, staging: str, run_id: str,
                   progress: Progress, ranges_fn=None) -> list:
        """Files in order, each from the pieces the ranges yield for it: one file's entries in memory."""
        built, pending, current = [], [], 0

        def flush_until(k):
            nonlocal pending, current
            while current < k:
                built.append(build_fn(current, pending, plan, staging, run_id, "a0"))
                progress("build", len(built), n_files)
                pending, current = [], current + 1

        for index in self._indexes():
            for k, piece in pieces_fn(self._get(index), plan):
                flush_until(k)
                pending.append(piece)
        flush_until(n_files)
        return built

    def close(self, failed: bool = False) -> None:
        self._mem.clear()
        self._spilled.clear()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


# ============================================================================ Spark

def _attempt() -> str:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return f"s{ctx.stageId()}a{ctx.attemptNumber()}t{ctx.taskAttemptId()}" if ctx else "a0"


class ScanFile:
    """What the Spark RDD holds for a range when the job has a scratch directory: its summary, and where its
    columns wait (one pickle per range), instead of the columns themselves in the JVM's block store."""

    def __init__(self, index: int, path: str, summary: dict):
        self.index, self.path, self._summary = index, path, summary

    def summary(self) -> dict:
        return self._summary

    def load(self):
        with open(self.path, "rb") as f:
            return pickle.load(f)


def _loaded(s):
    return s.load() if isinstance(s, ScanFile) else s


def _scan_to_file(unit: SegmentRange, scan_fn, scratch: str) -> ScanFile:
    # Named after the range as scanned (its start, or a guess): a guessed scan that Spark recomputes later
    # can never overwrite the exact one that replaced it.
    start = "void" if unit.void else ("guess" if unit.start is None else str(unit.start))
    sc = scan_fn(unit)
    path = os.path.join(scratch, f"scan-{unit.index}-{start}.pickle")
    tmp = f"{path}.{_attempt()}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump(sc, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)  # a retried or speculative attempt writes the same columns
    return ScanFile(sc.index, path, {**sc.summary(), "scan_file": path})


def _build_from_scans(k: int, scan_files: list[str], pieces_fn, build_fn, plan, staging: str, run_id: str):
    """Index file k from the scan files of the ranges that hold its pieces (no shuffle through the JVM)."""
    pieces = []
    for path in scan_files:
        with open(path, "rb") as f:
            scan = pickle.load(f)
        pieces.extend(piece for kk, piece in pieces_fn(scan, plan) if kk == k)
    return build_fn(k, pieces, plan, staging, run_id, _attempt())


_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
"""


def probe_master(master: str, timeout: float = MASTER_PROBE_SECONDS) -> None:
    """A spark:// master must accept a TCP connection, else fail now (Spark itself retries for 60 s)."""
    if not master.startswith("spark://"):
        return
    errors = []
    for hostport in master[len("spark://"):].split(","):
        host, _, port = hostport.strip().rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout):
                return
        except ValueError:
            raise RunnerError(f"--master {master}: expected spark://HOST:PORT[,HOST:PORT]") from None
        except OSError as e:
            errors.append(f"{hostport.strip()}: {e.strerror or e}")
    raise RunnerError(f"cannot reach the Spark master {master} ({'; '.join(errors)}); is it running?")


def _spark_conf(master: str, conf: dict, driver_opts: str, executor_opts: str):
    """The SparkConf of a job: a SparkContext, not a SparkSession (the job uses RDDs only, and a session's SQL
    start-up, catalog and shared state, costs about 2.4 s of JVM work here for nothing); the user's --conf last."""
    from pyspark import SparkConf

    spark_conf = (SparkConf().setMaster(master).setAppName("rmqtool spark-reindex")
                  .set("spark.ui.enabled", "false")
                  .set("spark.ui.showConsoleProgress", "false")
                  .set("spark.driver.extraJavaOptions", driver_opts)
                  .set("spark.executor.extraJavaOptions", executor_opts))
    if master.startswith("local"):
        # The workers' daemon imports pyspark compiled, not from Spark's source zip: about 1 s sooner to the
        # first task (engine.exec.sparkdaemon).
        spark_conf.set("spark.python.daemon.module", "engine.exec.sparkdaemon")
    for key, value in conf.items():
        spark_conf.set(key, value)
    return spark_conf


class SparkRunner:
    """The job on Spark: one task per segment range (scan), one task per output file (build).

    local[*] (the default) starts an embedded Spark in this process. With a cluster master the commit log and
    the output directory must be on storage every executor can read at the same paths, and the engine
    package is shipped to the executors with addPyFile.
    """

    @property
    def master_used(self) -> str:
        """The master Spark resolved (what the job reports)."""
        return self.sc.master

    def __init__(self, master: str, conf: Optional[dict] = None):
        self.master = master
        self.log_path: Optional[str] = None
        self._conf_file: Optional[str] = None
        self._created = False
        self._persisted: list = []
        self._scans = None
        self._scratch: Optional[str] = None
        self._files: dict[int, Optional[str]] = {}  # range -> its scan file in the scratch directory
        self._zip: Optional[str] = None
        self.class_archive = None  # engine.exec.jvmcache.ClassArchive of a local JVM this runner starts
        self._log_opened = False
        self.sc = self._context(master, conf or {})
        if self._created and not master.startswith("local"):
            self._wait_for_executors()

    def _context(self, master: str, conf: dict):
        if master.startswith("local"):
            # Workers run this interpreter (which has rmqtool and numpy); no network lookups for a local job.
            # A cluster's executors use their own configured Python (spark.pyspark.python / PYSPARK_PYTHON).
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        try:
            from pyspark import SparkContext
        except ImportError:
            raise RunnerError("pyspark is not installed; install it or use --master inline") from None
        if SparkContext._active_spark_context is not None:
            # A context already runs in this process (a notebook, the tests): use it and leave it running.
            # Its master wins over the one asked for; the result reports the master actually used.
            return SparkContext.getOrCreate()
        probe_master(master)
        tmp = Path(tempfile.gettempdir())
        java_opts = self._log_to_file(tmp)
        # A local job's JVM only schedules tasks and carries small results (the work is in Python workers):
        # LOCAL_JVM_OPTIONS start it seconds sooner and leave the CPUs to the workers, and a class-data
        # archive of Spark's classes (engine.exec.jvmcache) about 2 s more. A driver JVM option of the
        # user's replaces them all. A JVM that crashes writes its report to the temporary directory, never
        # to the user's working directory.
        local = master.startswith("local")
        driver_opts = java_opts
        if local:
            driver_opts = f"{java_opts} {LOCAL_JVM_OPTIONS} -XX:ErrorFile={tmp}/rmqtool-jvm-crash-%p.log"
            if "spark.driver.extraJavaOptions" not in conf:
                from engine.exec.jvmcache import ClassArchive

                self.class_archive = ClassArchive(LOCAL_JVM_OPTIONS)

        def start(opts: str):
            spark_conf = _spark_conf(master, conf, opts, java_opts)
            return self._start_quietly(lambda: SparkContext(conf=spark_conf), master)

        archive = self.class_archive
        if archive is None:
            sc = start(driver_opts)
        else:
            try:
                sc = start(f"{driver_opts} {archive.options()}")
            except RunnerError:
                if archive.state != "used":
                    raise
                archive.reject()  # an archive this JVM could not start with: start without it
                sc = start(f"{driver_opts} {archive.options()}")
        self._created = True
        sc.setLogLevel("ERROR")
        if not local:
            self._zip = _engine_zip(tmp)
            sc.addPyFile(self._zip)
        return sc

    def _log_to_file(self, tmp: Path) -> str:
        """The JVM options that send Spark's log4j output to this run's log file (self.log_path)."""
        conf_file = tmp / f"rmqtool-log4j2-{os.getpid()}.properties"
        conf_file.write_text(_LOG4J2)
        self._conf_file = str(conf_file)
        self.log_path = str(tmp / f"rmqtool-spark-{os.getpid()}.log")
        return f"-Dlog4j2.configurationFile=file:{conf_file} -Dlog4j.configurationFile=file:{conf_file}"

    def _start_quietly(self, start, master: str):
        """The JVM writes banners, warnings and crash reports straight to file descriptors 1 and 2: it gets the
        log file as both instead (it inherits them as it starts), so stdout carries only the command's output
        and stderr only our progress bar and errors. A second start (without the class archive) appends."""
        saved = [os.dup(1), os.dup(2)]
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if self._log_opened else os.O_TRUNC)
        log_fd = os.open(self.log_path, flags, 0o644)
        self._log_opened = True
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            try:
                return start()
            finally:
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
        except Exception as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise RunnerError(f"could not start Spark ({master}): {first}; see {self.log_path}") from None
        finally:
            for fd in (*saved, log_fd):
                os.close(fd)

    def _wait_for_executors(self, timeout: float = EXECUTOR_WAIT_SECONDS) -> None:
        jsc = self.sc._jsc.sc()
        deadline = time.monotonic() + timeout
        while jsc.getExecutorMemoryStatus().size() <= 1:  # the driver counts as one
            if jsc.isStopped():
                raise RunnerError(f"the Spark master {self.master} refused or dropped this application; "
                                   f"see {self.log_path}")
            if time.monotonic() > deadline:
                stop_context(self.sc)
                raise RunnerError(f"the Spark master {self.master} gave this job no executor in {timeout:.0f} s "
                                   "(no live worker, or none with the cores/memory asked: spark.executor.cores, "
                                   "spark.executor.memory)")
            time.sleep(0.2)

    def _run(self, group: str, total: int, progress: Progress, phase: str, action):
        """Run a Spark action, reporting completed tasks of its last stage while it runs."""
        sc = self.sc
        sc.setJobGroup(group, f"rmqtool spark-reindex {phase}")
        stop = threading.Event()

        def poll():
            st = sc.statusTracker()
            while not stop.wait(0.2):
                try:
                    stages = []
                    for jid in st.getJobIdsForGroup(group) or []:
                        info = st.getJobInfo(jid)
                        if info:
                            stages.extend(info.stageIds)
                    if stages:
                        si = st.getStageInfo(max(stages))
                        if si:
                            progress(phase, min(si.numCompletedTasks, total), total)
                except Exception:
                    return

        t = threading.Thread(target=poll, daemon=True)
        t.start()
        try:
            return action()
        except Exception as e:
            msg = str(e).strip().splitlines()
            detail = next((line for line in msg if "Error" in line or "Exception" in line), msg[0] if msg else "")
            raise RunnerError(f"the Spark {phase} job failed: {detail[:300]}") from e
        finally:
            stop.set()
            t.join()
            progress(phase, total, total)

    def _scan_rdd(self, units: list[SegmentRange], scan_fn):
        from pyspark import StorageLevel

        if self._scratch is not None:
            scan_fn = functools.partial(_scan_to_file, scan_fn=scan_fn, scratch=self._scratch)
        rdd = self.sc.parallelize(units, max(1, len(units))).map(scan_fn).persist(StorageLevel.MEMORY_AND_DISK)
        self._persisted.append(rdd)
        return rdd

    def scan(self, units: list[SegmentRange], progress: Progress, scan_fn, scratch: Optional[str] = None
             ) -> list[dict]:
        """One task per range, all at once; then the ranges whose guessed start was wrong, again (rare). With
        a scratch directory the columns wait there (ScanFile), else in the JVM's block store."""
        from engine.broker.commitlog.ranges import SegmentRange  # numpy: imported when work runs
        from engine.exec.ranges import settle

        if units and not isinstance(units[0], SegmentRange):  # other per-item work: one task per item
            items = self.sc.parallelize(units, len(units)).map(scan_fn)
            return self._run(f"rmqtool-tasks-{uuid.uuid4().hex}", len(units), progress, "scan",
                             lambda: items.map(lambda x: x.summary()).collect())
        self._scratch = scratch
        if scratch is not None:
            os.makedirs(scratch, exist_ok=True)
        scans = self._scan_rdd(units, scan_fn)
        where = {u.index: p for p, u in enumerate(units)}  # range -> partition of `scans` holding its scan
        got = self._run(f"rmqtool-scan-{uuid.uuid4().hex}", len(units), progress, "scan",
                        lambda: scans.map(lambda s: s.summary()).collect())

        def rescan(redo: list[SegmentRange]) -> list[dict]:
            nonlocal scans
            fixed = self._scan_rdd(redo, scan_fn)
            gone = {u.index for u in redo}
            base = scans.getNumPartitions()  # filter keeps the partitions; union appends fixed's after them
            scans = scans.filter(lambda s: s.index not in gone).union(fixed)
            where.update({u.index: base + j for j, u in enumerate(redo)})
            return fixed.map(lambda s: s.summary()).collect()

        summaries = settle(units, {d["index"]: d for d in got}, rescan)
        self._scans, self._where = scans, where
        self._files = {i: d.get("scan_file") for i, d in summaries.items()}
        return [summaries[u.index] for u in units]

    def ask(self, fn, requests: dict) -> dict:
        """Answered here from the ranges' scan files when they wait in the scratch directory (which the driver
        shares with the executors: it created it), one range's columns in memory at a time, without a Spark job
        (a job costs more than the answer); else by a job over only the partitions holding the asked ranges."""
        req = dict(requests)
        if req and all(self._files.get(i) for i in req):
            return {i: fn(ScanFile(i, self._files[i], {}).load(), a) for i, a in req.items()}
        parts = sorted({self._where[i] for i in req})
        return dict(self.sc.runJob(self._scans, lambda it: [(s.index, fn(_loaded(s), req[s.index])) for s in it
                                                              if s.index in req], parts))

    def build_with(self, n_files: int, pieces_fn, build_fn, plan, staging: str, run_id: str,
                   progress: Progress, ranges_fn=None) -> list:
        """One task per file, reading the scan files of the ranges that hold its pieces (the columns wait in
        the staging directory whenever there is a build: it is never a dry run)."""
        if self._scratch is None:
            raise RunnerError("internal error: a build without a scratch directory")
        jobs = [(k, [self._files[r] for r in ranges_fn(plan, k)]) for k in range(n_files)]
        # The plan is small (summaries, file cuts, seeds): it travels in the task closure, not as a broadcast.
        built = self.sc.parallelize(jobs, max(1, n_files)).map(
            lambda kf: _build_from_scans(kf[0], kf[1], pieces_fn, build_fn, plan, staging, run_id))
        return self._run(f"rmqtool-build-{run_id}", n_files, progress, "build", built.collect)

    def close(self, failed: bool = False) -> None:
        try:
            for rdd in self._persisted:
                rdd.unpersist()
        finally:
            if self._created:
                stop_context(self.sc)
                if self.class_archive is not None and self.class_archive.state == "creating":
                    self.class_archive.end_gateway()
                for p in (self._conf_file, self._zip, None if failed else self.log_path):
                    if p:
                        try:
                            os.unlink(p)
                        except OSError:
                            pass


def stop_context(sc) -> None:
    """SparkContext.stop() without its idle wait: stop() ends by shutting down PySpark's accumulator server,
    whose request handler notices the shutdown flag only on its next one-second poll, so stop() idles up to a
    second after the JVM has stopped. This job uses no accumulators: the server is told to stop and left to
    its daemon thread, which ends with the process."""
    server = getattr(sc, "_accumulatorServer", None)
    if server is not None and hasattr(server, "server_shutdown"):
        server.server_shutdown = True  # its handler's poll loop returns at its next tick
        sc._accumulatorServer = None   # stop() then does not wait for it
    sc.stop()


def _engine_zip(tmp: Path) -> str:
    """The engine package as a zip for addPyFile (cluster executors may not have rmqtool installed)."""
    import zipfile

    pkg = Path(__file__).resolve().parent.parent  # the engine package, with its subpackages
    out = tmp / f"rmqtool-engine-{os.getpid()}.zip"
    with zipfile.ZipFile(out, "w") as z:
        for p in pkg.rglob("*.py"):
            z.write(p, f"engine/{p.relative_to(pkg).as_posix()}")
    return str(out)
