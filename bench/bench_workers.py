#!/usr/bin/env python3
"""--workers (issue 32): each bulk command with 1 worker and with all, side by side in one run, next to a cold
and a warm read of the same bytes.

A store of ten 64 MiB commit-log segments (1 KB messages, UNIQ_KEY + 2 KEYS each, index geometry 300,000 slots x
1,200,000 items) is generated once under --workdir with bench/gen_store.py (reused when present), or --store names
one. Then, each command in a fresh process, alternating 1 worker and N, medians of --runs:

* cold read: every commit-log file dropped from the page cache (posix_fadvise DONTNEED) and read once with
  readinto in 16 MiB blocks; warm read: the same again, the pages now cached;
* recover --full-scan --dry-run (the whole walk and the plan; nothing written, so every run sees the same store);
* inspect-index --verify (every index item against the commit log);
* dump-commitlog --json (to /dev/null);
* spark-reindex --master inline (into a scratch directory, removed after each run).

Before each timed command every commit-log file is read once, untimed (a warm page cache, as the warm read).
Beside the medians, the spread of the ratio of each run's pair (1 worker, then N, one after the other): on a machine
whose two-process speed moves from minute to minute, that spread says how far one bench's ratio can be trusted. The
machine's load average is printed at the start and the end: the figures are only worth what the machine's quiet is
(other processes on the same cores slow the N-worker runs most). The CPU seconds of each command (its process and
its workers, from wait4) show the work the workers add (forks, results sent back): on a quiet machine with N cores
the N-worker time is about the larger of the ordered part's and (CPU seconds / N).

    python3 bench/bench_workers.py                         # generate (or reuse) the store, 3 runs
    python3 bench/bench_workers.py --store /path --runs 5 --workers 8
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

SEGMENT = 64 << 20
SEGMENTS = 10
BLOCK = 16 << 20


def make_store(root: Path) -> Path:
    from gen_store import GenSpec, gen_store

    if (root / "commitlog").is_dir() and len(list((root / "commitlog").iterdir())) >= SEGMENTS:
        return root
    shutil.rmtree(root, ignore_errors=True)
    # a little less than ten segments' worth of 1 KB records: the tenth segment is the last, partly filled
    gen_store(root, GenSpec(gib=SEGMENTS * SEGMENT / (1 << 30) * 0.97, commitlog_file_size=SEGMENT,
                            hash_slots=300000, max_index=1200000))
    return root


def segments(store: Path) -> list[Path]:
    return sorted(p for p in (store / "commitlog").iterdir() if p.is_file())


def read_all(files: list[Path], cold: bool) -> tuple[float, int]:
    """Seconds to read every file once (after dropping its pages with posix_fadvise when cold), and the bytes."""
    buf = bytearray(BLOCK)
    if cold:
        for p in files:
            fd = os.open(p, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    t0, total = time.perf_counter(), 0
    for p in files:
        with open(p, "rb", buffering=0) as f:
            while True:
                n = f.readinto(buf)
                if not n:
                    break
                total += n
    return time.perf_counter() - t0, total


def commands(store: Path, scratch: Path) -> dict[str, list[str]]:
    s = ["-s", str(store)]  # the geometry: read from the store's files
    return {
        "recover --full-scan": ["recover", *s, "--full-scan", "--dry-run", "--json"],
        "inspect-index --verify": ["inspect-index", *s, "--verify", "--json"],
        "dump-commitlog --json": ["dump-commitlog", *s, "--json"],
        "spark-reindex inline": ["spark-reindex", *s, "--master", "inline", "--out", str(scratch / "out")],
    }


def run(args: list[str], workers: int, scratch: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the command and its workers, exit code) of one run."""
    shutil.rmtree(scratch / "out", ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "rmqtool", *args, "--workers", str(workers), "--quiet"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    took = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    p.returncode = code
    if code not in (0, 3):
        raise SystemExit(f"{' '.join(args)} --workers {workers}: exit {code} (run it alone to see why)")
    return took, usage.ru_utime + usage.ru_stime, code


def main() -> int:
    from engine.workers import cpus

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", type=Path, help="an existing store of 64 MiB segments (default: generate one)")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "rmqtool-bench-workers")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=cpus(), help="the 'all' column (default: the CPUs usable)")
    ap.add_argument("--only", action="append", help="only the commands whose name contains this (repeatable)")
    a = ap.parse_args()

    from measure import compile_package

    compile_package(REPO)
    store = a.store or make_store(a.workdir / "store")
    files = segments(store)
    size = sum(p.stat().st_size for p in files)
    scratch = Path(tempfile.mkdtemp(prefix="bench-workers-", dir=a.workdir if a.store is None else None))
    load0 = open("/proc/loadavg").read().split()[:3]
    cold, warm = [], []
    for _ in range(a.runs):
        cold.append(read_all(files, True)[0])
        warm.append(read_all(files, False)[0])
    rows = []
    try:
        for name, args in commands(store, scratch).items():
            if a.only and not any(o in name for o in a.only):
                continue
            times, cpu = {1: [], a.workers: []}, {1: [], a.workers: []}
            codes = set()
            for _ in range(a.runs):
                for n in (1, a.workers):
                    read_all(files, False)  # a warm page cache for every run
                    took, used, code = run(args, n, scratch)
                    times[n].append(took)
                    cpu[n].append(used)
                    codes.add(code)
            one, many = statistics.median(times[1]), statistics.median(times[a.workers])
            pairs = sorted(m / o for o, m in zip(times[1], times[a.workers]))  # each run's pair, side by side
            rows.append({"command": name, "one": one, "all": many, "ratio": many / one, "exits": sorted(codes),
                         "cpuOne": statistics.median(cpu[1]), "cpuAll": statistics.median(cpu[a.workers]),
                         "pairRatios": pairs})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    load1 = open("/proc/loadavg").read().split()[:3]
    gb = size / 1e9
    print(f"store {store}: {len(files)} segments, {size / (1 << 20):.0f} MiB; {cpus()} CPUs usable, "
          f"all = {a.workers} workers; medians of {a.runs} runs; load average {' '.join(load0)} -> {' '.join(load1)}")
    print(f"{'':24} {'1 worker':>10} {f'{a.workers} workers':>11} {'ratio':>6} {'GB/s (all)':>11} "
          f"{'CPU s 1 / all':>14}  {'ratio of each pair':>20}")
    cr, wr = statistics.median(cold), statistics.median(warm)
    print(f"{'cold read':24} {cr:>9.2f}s {'':>11} {'':>6} {gb / cr:>11.2f}")
    print(f"{'warm read':24} {wr:>9.2f}s {'':>11} {'':>6} {gb / wr:>11.2f}")
    for r in rows:
        p = r["pairRatios"]
        print(f"{r['command']:24} {r['one']:>9.2f}s {r['all']:>10.2f}s {r['ratio']:>5.2f}x {gb / r['all']:>11.2f} "
              f"{r['cpuOne']:>6.2f} / {r['cpuAll']:<6.2f}  {p[0]:.2f}-{p[-1]:.2f}x")
    print(json.dumps({"segments": len(files), "bytes": size, "workers": a.workers, "runs": a.runs,
                      "coldRead": cr, "warmRead": wr, "load": [load0, load1], "commands": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
