#!/usr/bin/env python3
"""Kill points: run an rmqtool command and end its process abruptly at its K-th file-system change.

    python3 bench/killpoints.py --at K [--log FILE] [--no-exchange] -- spark-reindex --store S ...

Inside the child process, before the command runs, these are wrapped: os.rename, os.replace, os.unlink,
os.remove, os.rmdir, shutil.rmtree and engine.jobs.publish.exchange (the atomic directory swap). Calls are
counted from 1 across all of them (shutil.rmtree counts once itself and once per file or directory it
removes, so a kill can land in the middle of it); the K-th call ends the process with os._exit(KILLED) before
it takes effect, as a SIGKILL or a power cut between two renames would. K = 0 never kills. Each call is
appended to the log file ("<n> <function> <path>") as it happens, so the caller can tell where the kill
landed; a run that ends normally has written all its calls there. --no-exchange makes the directory swap
report "not supported", to exercise the two-rename fallback of file systems without RENAME_EXCHANGE.

Production code has no fault hooks: this harness patches the library from outside.

From Python (tests/engine/jobs/test_publish_safety.py, bench/corruption_matrix.py):

    run = run_killed(["spark-reindex", "--store", s, "--master", "inline"], k)   # a new interpreter
    run = fork_killed([...], k)                                                  # a fork of this one (fast)
    run.killed, run.kill_point, run.calls, run.returncode, run.stdout, run.stderr
    for run in kill_loop(args, prepare, fork=True): ...   # K = 1, 2, ... until a run is not killed
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

REPO = Path(__file__).resolve().parents[1]
KILLED = 86
WRAPPED_OS = ("rename", "replace", "unlink", "remove", "rmdir")


@dataclass
class KillRun:
    k: int
    returncode: int
    stdout: str
    stderr: str
    calls: list[str] = field(default_factory=list)

    @property
    def killed(self) -> bool:
        return self.returncode == KILLED

    @property
    def kill_point(self) -> str:
        """The call the process died at (empty when it was not killed)."""
        return self.calls[-1] if self.killed and self.calls else ""


def run_killed(args: list, k: int, env: Optional[dict] = None, no_exchange: bool = False,
               timeout: float = 300) -> KillRun:
    """Run `rmqtool ARGS` in a child process killed at its k-th file-system change."""
    with tempfile.NamedTemporaryFile(prefix="killpoints-", suffix=".log", delete=False) as f:
        log = f.name
    try:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--at", str(k), "--log", log]
        if no_exchange:
            cmd.append("--no-exchange")
        p = subprocess.run([*cmd, "--", *map(str, args)], capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, **(env or {})})
        calls = Path(log).read_text().splitlines()
    finally:
        os.unlink(log)
    return KillRun(k, p.returncode, p.stdout, p.stderr, calls)


def fork_killed(args: list, k: int, no_exchange: bool = False, timeout: float = 300) -> KillRun:
    """run_killed in a fork of this process (no interpreter start, modules already imported): for callers
    that have already imported rmqtool and run no other threads that the child would need."""
    import time

    with tempfile.NamedTemporaryFile(prefix="killpoints-", suffix=".log", delete=False) as f:
        log = f.name
    pid = os.fork()
    if pid == 0:  # the child: run the command through typer's test runner, keep its output
        code = 70
        try:
            _install(k, log, no_exchange)
            from typer.testing import CliRunner

            from rmqtool.app import app

            r = CliRunner().invoke(app, [str(a) for a in args])
            Path(log + ".out").write_text(r.stdout)
            Path(log + ".err").write_text(r.stderr + ("" if r.exception is None or isinstance(r.exception, SystemExit)
                                                      else f"\nTraceback: {r.exception!r}"))
            code = r.exit_code
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise TimeoutError(f"{args} killed at {k}: still running after {timeout} s")
        time.sleep(0.01)
    out = {}
    for ext in (".out", ".err"):
        p = Path(log + ext)
        out[ext] = p.read_text() if p.exists() else ""
        p.unlink(missing_ok=True)
    calls = Path(log).read_text().splitlines()
    os.unlink(log)
    return KillRun(k, os.waitstatus_to_exitcode(status), out[".out"], out[".err"], calls)


def kill_loop(args: list, prepare: Callable[[int], None], max_k: int = 1000, fork: bool = False,
              **kw) -> Iterator[KillRun]:
    """prepare(k) sets the store up afresh, then the command runs killed at its k-th change; K = 1, 2, ...
    until a run completes (that last run is yielded too, not killed). fork=True uses fork_killed."""
    for k in range(1, max_k + 1):
        prepare(k)
        run = (fork_killed if fork else run_killed)(args, k, **kw)
        yield run
        if not run.killed:
            return
    raise RuntimeError(f"still killed after {max_k} kill points")


# ============================================================================ the child

def _install(at: int, log: str, no_exchange: bool) -> None:
    import shutil

    count = [0]
    out = open(log, "a", buffering=1)

    def wrap(name: str, fn):
        def wrapper(*a, **kw):
            count[0] += 1
            out.write(f"{count[0]} {name} {a[0] if a else ''}\n")
            if count[0] == at:
                out.flush()
                os._exit(KILLED)
            return fn(*a, **kw)
        return wrapper

    for name in WRAPPED_OS:
        setattr(os, name, wrap(f"os.{name}", getattr(os, name)))
    shutil.rmtree = wrap("shutil.rmtree", shutil.rmtree)
    from engine.jobs import publish

    exchange = (lambda a, b: False) if no_exchange else publish.exchange
    publish.exchange = wrap("publish.exchange", exchange)


def main(argv: list[str]) -> int:
    import argparse

    sep = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--at", type=int, required=True, help="kill at this call (0: never)")
    ap.add_argument("--log", default=os.devnull, help="append every wrapped call to this file")
    ap.add_argument("--no-exchange", action="store_true", help="pretend RENAME_EXCHANGE is not supported")
    opts = ap.parse_args(argv[:sep])
    sys.path.insert(0, str(REPO))
    _install(opts.at, opts.log, opts.no_exchange)
    from rmqtool.app import main as rmqtool_main

    sys.argv = ["rmqtool", *argv[sep + 1:]]
    try:
        rmqtool_main()
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
