"""The one way per-segment work runs on N worker processes, below every command that uses it (issue 32).

A command's `--workers N` (rmqtool.options.WorkersOpt) calls `use(n)` once, before any work; the engine asks
`count()` (and `asked()`: whether the operator gave N) where it decides to fan work out, so no signature between
the command and its walk changes. Work is handed to a WorkerPool: forked processes (the parent's modules and
read-only state are shared copy-on-write; every worker maps the segment files it reads itself, read-only), one job
at a time per worker, the results taken back IN ORDER (`ordered`), with at most `depth` jobs in flight, so what the
parent holds is bounded as well. The steps that need one place (recovery's decision, the index plan, the output's
order) stay in the parent.

Failure: a worker that dies (killed, out of memory) breaks the pool; taking any result then raises WorkerDiedError
(one line, exit 1): the command stops before it publishes anything (its writes come after the work it waits for),
and its lock is released as on any error. SIGINT is the parent's to handle (workers ignore it and are stopped by
the parent's `close`), SIGTERM ends a worker at once. Nothing here imports numpy.
"""
from __future__ import annotations

import os
from collections import deque
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Optional

from engine.errors import StoreError

#: What one worker holds at most while it runs a job: the pages of the window it reads (a decode window of at most
#: 128 MiB, engine.broker.commitlog.records.SCAN_WINDOW; released as it moves on) and that window's columns (about
#: 60 bytes a record), and (dump-commitlog --json) at most HOLD_BYTES (128 MiB) of its segment's lines held until
#: its turn at the output (engine.broker.commitlog.dump). A command on N workers holds at most
#: N x WORKER_MEMORY beside the parent's own bound (docs/performance.md).
WORKER_MEMORY = 512 << 20
#: Jobs waiting or running per worker (results taken back in order: the parent holds at most this many results
#: per worker that are done but not yet consumed).
JOBS_PER_WORKER = 2
#: The most workers a command takes (beyond it --workers is refused: one line, exit 2).
MAX_WORKERS = 1024
#: Seconds between the checks, while a result is awaited, that no worker died unnoticed (WorkerPool.result).
DEATH_CHECK = 1.0
#: Seconds close() gives the workers to end on SIGTERM before it kills them (SIGKILL).
TERM_GRACE = 1.0

_state = {"n": None}  # the operator's --workers, None: not given (count() is then the CPUs this process may use)


class WorkerDiedError(StoreError):
    """A worker process died or was killed: the command could not finish (nothing was published)."""

    exit_code = 1


def cpus() -> int:
    """The CPUs this process may run on (os.sched_getaffinity: a container's or taskset's limit), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def problem(n: Optional[int]) -> Optional[str]:
    """Why n is not a usable --workers value, None when it is."""
    if n is None or 1 <= n <= MAX_WORKERS:
        return None
    return f"--workers {n} is out of range 1..{MAX_WORKERS} (default: the {cpus()} CPUs this process may use)"


def use(n: Optional[int]) -> None:
    """Set the worker count of this command (None: the default, cpus()). Raises ValueError for a bad value."""
    why = problem(n)
    if why is not None:
        raise ValueError(why)
    _state["n"] = n


def count() -> int:
    """How many processes per-segment work may use (the parent counts as one where it works beside them)."""
    return _state["n"] if _state["n"] is not None else cpus()


def asked() -> bool:
    """True when the operator gave --workers (then work fans out whatever its size; by default only big work)."""
    return _state["n"] is not None


def fan_out(nbytes: int, min_bytes: int) -> bool:
    """Whether work of nbytes should run on workers: more than one process, and the operator asked for it or the
    work is at least min_bytes (a pool's start, about 20 ms, is not worth it for a small store)."""
    return count() > 1 and (asked() or nbytes >= min_bytes)


def _worker_init() -> None:
    """In a worker: Ctrl-C is the parent's to handle (it stops this process), SIGTERM ends it at once (not the
    handlers the command installed before the fork)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class WorkerPool:
    """n forked worker processes. `submit(fn, *args)` starts a job, `result(future)` takes its answer (a dead
    worker: WorkerDiedError), `ordered(fn, jobs)` runs many and yields their answers in the jobs' order; `close()`
    stops the workers at once (also what an interrupted command does). Use it as a context manager."""

    def __init__(self, n: int):
        import concurrent.futures as cf
        import multiprocessing as mp

        methods = mp.get_all_start_methods()
        self.n = n
        self._pool = cf.ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context(
            "fork" if "fork" in methods else "spawn"), initializer=_worker_init)
        self._pid = os.getpid()
        _close_at_exit(self)

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def submit(self, fn: Callable, *args):
        from concurrent.futures.process import BrokenProcessPool

        try:
            return self._pool.submit(fn, *args)
        except BrokenProcessPool:
            raise self._died() from None

    def result(self, fut):
        from concurrent.futures import TimeoutError as FutureTimeout
        from concurrent.futures.process import BrokenProcessPool

        grace = None
        while True:
            try:
                return fut.result(timeout=DEATH_CHECK)
            except BrokenProcessPool:
                raise self._died() from None
            except FutureTimeout:
                # A worker that died while it sent a result leaves the pool's manager thread reading the rest for
                # ever: it never marks the pool broken. A worker gone for DEATH_CHECK seconds with the answer still
                # missing is that case (a death the manager sees is reported at once).
                if not any(p.exitcode is not None for p in (getattr(self._pool, "_processes", None) or {}).values()):
                    grace = None
                elif grace is None:
                    grace = True
                else:
                    raise self._died() from None

    def _died(self) -> WorkerDiedError:
        return WorkerDiedError("a worker process died or was killed before its work was done: the command did "
                               "not finish and changed no file; run it again (--workers 1: no workers)")

    def ordered(self, fn: Callable, jobs: Iterable[tuple], progress: Optional[Callable[[int], None]] = None,
                depth: Optional[int] = None) -> Iterator:
        """fn(*job) for every job, yielded in the jobs' order, at most `depth` (default n x JOBS_PER_WORKER) in
        flight; progress(k) after each answer taken (k answers so far: every worker's work counts)."""
        depth = depth or self.n * JOBS_PER_WORKER
        it = iter(jobs)
        waiting: deque = deque()
        done = 0
        for job in it:
            waiting.append(self.submit(fn, *job))
            if len(waiting) >= depth:
                break
        while waiting:
            got = self.result(waiting.popleft())
            nxt = next(it, None)
            if nxt is not None:
                waiting.append(self.submit(fn, *nxt))
            done += 1
            if progress is not None:
                progress(done)
            yield got

    def close(self) -> None:
        """Stop the workers now (a job nobody waits for is not finished: an interrupted or failed command must
        leave no process behind): SIGTERM, then SIGKILL for a worker still there after TERM_GRACE seconds (one
        that was still starting, with its parent's handlers, may not end on SIGTERM)."""
        import time

        _open.discard(self)
        pool = self._pool
        procs = list((getattr(pool, "_processes", None) or {}).values())
        # (taken before shutdown, which forgets them)
        manager = getattr(pool, "_executor_manager_thread", None)
        results = getattr(pool, "_result_queue", None)
        pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:
            if p.is_alive():
                p.terminate()
        end = time.monotonic() + TERM_GRACE
        for p in procs:
            p.join(max(0.0, end - time.monotonic()))
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(5)
        # Wait for the pool's manager thread too: left running, it closes its wake-up pipe while the interpreter's
        # exit hook (concurrent.futures' _python_exit) writes to it, and a traceback follows the one error line.
        if manager is not None:
            manager.join(0.2)
            if manager.is_alive() and results is not None and not any(p.is_alive() for p in procs):
                # A worker stopped while it sent a result leaves the thread reading the rest of it for ever (and
                # the exit hook joining the thread: the command hung at its exit). Every worker is gone: closing
                # this process's copy of the pipe's writing end ends that read (EOF: the pool is taken as broken).
                results._writer.close()
            manager.join(5)


#: The pools not closed yet. A pool whose consumer stopped early and kept its generator is closed at the
#: interpreter's exit, before concurrent.futures' exit hook waits for its manager thread (which waits for the
#: workers: a busy one, or one a SIGTERM did not stop, held the interpreter at exit).
_open: "weakref.WeakSet[WorkerPool]" = None  # type: ignore[assignment]


def _close_at_exit(pool: WorkerPool) -> None:
    global _open
    if _open is None:
        import threading
        import weakref

        _open = weakref.WeakSet()
        # threading runs these hooks last registered first: this one before concurrent.futures' (registered
        # when concurrent.futures.process was imported, before any pool).
        threading._register_atexit(_close_open)
    _open.add(pool)


def _close_open() -> None:
    for pool in list(_open or ()):
        if pool._pid == os.getpid():  # (not a copy a forked worker inherited: its workers are not the worker's)
            pool.close()


#: Objects lent to forked workers (shared), by token.
_lent: dict = {}


def can_fork() -> bool:
    """Whether WorkerPool's workers are forked (they then inherit this process's objects, as shared lends them)."""
    import multiprocessing as mp

    return "fork" in mp.get_all_start_methods()


@contextmanager
def shared(obj) -> Iterator[str]:
    """obj lent to forked workers while the block runs: yields a token a job carries, with which a worker finds
    the object as this process had it when the worker was forked (inherited(token)), so a job need not send it.
    Lend it before the pool's workers are forked (a pool forks them as its first jobs are submitted); only where
    can_fork()."""
    token = f"{os.getpid()}:{id(obj)}"
    _lent[token] = obj
    try:
        yield token
    finally:
        _lent.pop(token, None)


def inherited(token: str):
    """In a forked worker: the object shared(obj) lent under token."""
    return _lent[token]


def ordered_map(fn: Callable, jobs: list[tuple], progress: Optional[Callable[[int], None]] = None,
                workers: Optional[int] = None) -> Iterator:
    """fn(*job) for every job in order: on a WorkerPool of min(workers or count(), len(jobs)) processes, or in
    this process when that is one (the same answers either way)."""
    n = min(workers or count(), len(jobs))
    if n <= 1:
        for k, job in enumerate(jobs, 1):
            got = fn(*job)
            if progress is not None:
                progress(k)
            yield got
        return
    with WorkerPool(n) as pool:
        yield from pool.ordered(fn, jobs, progress)
