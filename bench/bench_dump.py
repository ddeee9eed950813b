#!/usr/bin/env python3
"""dump-commitlog and get throughput (issue 13 item 5), next to a plain read of the same commit log in the
same run; memory against the number of messages; time to the first line through `| head -1`.

The store is written once with the put pipeline (messages of about 300 bytes, default geometry: 1 GiB segments)
under --workdir. Figures, medians of --runs, each command in a fresh interpreter with its stdout to /dev/null:
* reference: a plain sequential read of the commit log's data (readinto of 16 MiB blocks, up to the end of the
  data: the preallocated zero tail of the last segment is not data), and `cat` of the same bytes;
* `rmqtool dump-commitlog --json` and as a table; `rmqtool get --from-file` with every message's offset
  (`--json` and as a table);
* peak RSS (ru_maxrss of the process) for the whole store and for a quarter of it (`--count`): constant memory
  means the same figure;
* seconds until the first line arrives through a pipe that closes after one line.

    python3 bench/bench_dump.py            # print the figures
    python3 bench/bench_dump.py --write    # and record them in bench/RESULTS.md
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from measure import compile_package  # noqa: E402

MARK_BEGIN = "<!-- bench-dump:begin (written by bench/bench_dump.py --write) -->"
MARK_END = "<!-- bench-dump:end -->"


def build_store(store: Path, n: int) -> int:
    """n messages through the put pipeline; returns the commit log's end of data."""
    from engine.broker.config.brokerconf import load_config
    from engine.broker.write.batch import MessageBatch
    from engine.broker.store import MessageStore

    cfg = load_config(None, storePathRootDir=str(store))
    end = 0
    with MessageStore(cfg, writable=True, create=True) as st:
        for a in range(0, n, 4096):
            b = MessageBatch()
            b.extend_json([{"topic": f"BenchTopic{i % 4}", "queueId": i % 8, "tags": f"Tag{i % 5}",
                            "keys": [f"order-{i:09d}", f"user-{i % 100000:06d}"],
                            "body": f"payment {i:09d} " + "x" * 170} for i in range(a, min(n, a + 4096))])
            res = st.put_batch(b)
            end = res.phy[-1] + res.size[-1]
    return end


def plain_read(store: Path, end: int) -> float:
    buf = bytearray(16 << 20)
    t = time.perf_counter()
    left = end
    for seg in sorted((store / "commitlog").iterdir()):
        with open(seg, "rb", buffering=0) as f:
            while left > 0:
                got = f.readinto(memoryview(buf)[:min(len(buf), left)])
                if not got:
                    break
                left -= got
    return time.perf_counter() - t


# The command runs in a fresh interpreter that reports its own peak RSS (VmHWM: reset by exec, unlike the
# ru_maxrss a child inherits from the forking parent) on its way out.
_RUN = ("import atexit, sys\n"
        "def hwm():\n"
        "    d = dict(l.split(':', 1) for l in open('/proc/self/status'))\n"
        "    sys.stderr.write('VmHWM ' + d['VmHWM'].split()[0] + '\\n')\n"
        "atexit.register(hwm)\n"
        "from rmqtool.app import main\n"
        "sys.argv = ['rmqtool'] + sys.argv[1:]\n"
        "main()\n")


def cpu_of_children() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def timed(args: list, stdin: Path | None = None) -> tuple[float, int, float]:
    """(wall seconds, peak RSS in KiB, CPU seconds) of one rmqtool command with stdout to /dev/null."""
    with open(os.devnull, "wb") as out, open(stdin or os.devnull, "rb") as inp:
        c, t = cpu_of_children(), time.perf_counter()
        p = subprocess.run([sys.executable, "-c", _RUN, *map(str, args)], stdout=out, stdin=inp,
                           stderr=subprocess.PIPE, cwd=REPO)
        dt, cpu = time.perf_counter() - t, cpu_of_children() - c
    if p.returncode != 0:
        raise SystemExit(f"{args[0]} failed: {p.stderr.decode()}")
    hwm = [line for line in p.stderr.decode().splitlines() if line.startswith("VmHWM ")]
    return dt, int(hwm[-1].split()[1]) if hwm else 0, cpu


def first_line(args: list) -> float:
    line = " ".join(f"'{a}'" for a in [sys.executable, "-m", "rmqtool", *map(str, args)])
    t = time.perf_counter()
    p = subprocess.Popen(["bash", "-c", f"{line} 2>/dev/null | head -1"], stdout=subprocess.PIPE, cwd=REPO)
    p.stdout.readline()
    dt = time.perf_counter() - t
    p.wait()
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    compile_package(REPO)  # bytecode written as an install writes it
    n = a.messages
    with tempfile.TemporaryDirectory(dir=a.workdir) as tmp:
        store = Path(tmp) / "store"
        end = build_store(store, n)
        offsets = Path(tmp) / "offsets.txt"
        r = subprocess.run([sys.executable, "-m", "rmqtool", "dump-commitlog", "--store", str(store), "--json"],
                           capture_output=True, text=True, cwd=REPO)
        offsets.write_text("".join(f"{json.loads(line)['commitLogOffset']}\n" for line in r.stdout.splitlines()))
        med = lambda xs: statistics.median(xs)  # noqa: E731
        plain = med([plain_read(store, end) for _ in range(a.runs)])
        cat = med([timed_cat(store) for _ in range(a.runs)])
        rows = []
        for label, args, stdin in (
                ("dump-commitlog --json", ["dump-commitlog", "--store", store, "--json"], None),
                ("dump-commitlog (table)", ["dump-commitlog", "--store", store], None),
                ("get --from-file --json", ["get", "--store", store, "--from-file", "-", "--json"], offsets),
                ("get --from-file (table)", ["get", "--store", store, "--from-file", "-"], offsets)):
            runs = [timed(args, stdin) for _ in range(a.runs)]
            rows.append((label, med([x[0] for x in runs]), max(x[1] for x in runs), med([x[2] for x in runs])))
        _, rss_quarter, _ = timed(["dump-commitlog", "--store", store, "--json", "--count", n // 4])
        start_runs = [timed(["--version"]) for _ in range(a.runs)]
        start, start_cpu = med([x[0] for x in start_runs]), med([x[2] for x in start_runs])
        head = med([first_line(["dump-commitlog", "--store", store, "--json"]) for _ in range(a.runs)])
    lines = [f"# dump-commitlog and get: {n:,} messages of about 360 bytes ({end / 2**20:.1f} MiB of commit log)", "",
             f"Produced by `python3 bench/bench_dump.py --messages {n} --runs {a.runs}` on "
             f"{time.strftime('%Y-%m-%d %H:%M')}; load average at the end {os.getloadavg()[0]:.2f} on "
             f"{os.cpu_count()} CPUs. Each command in a fresh interpreter (start-up {start:.2f} s included), stdout "
             "to /dev/null; medians.", "",
             "| figure | wall time | messages/s (wall) | CPU time | messages/s (CPU, start-up excluded) | "
             "vs plain read (wall) | peak RSS |", "|---|---|---|---|---|---|---|",
             f"| reference: plain read of the data (readinto) | {plain:.3f} s | - | - | - | 1.0 | - |",
             f"| reference: `cat` of the segment files | {cat:.3f} s | - | - | - | {cat / plain:.1f} | - |"]
    for label, t, rss, cpu in rows:
        lines.append(f"| `rmqtool {label}` | {t:.2f} s | **{n / t:,.0f}** | {cpu:.2f} s | "
                     f"{n / max(cpu - start_cpu, 1e-9):,.0f} | {t / plain:.0f} | {rss / 1024:.0f} MiB |")
    lines += ["", f"Peak RSS of `dump-commitlog --json --count {n // 4}` (a quarter of the messages): "
                  f"{rss_quarter / 1024:.0f} MiB, against {rows[0][2] / 1024:.0f} MiB for all of them.",
              f"First line through `| head -1`: {head:.2f} s after start (`rmqtool --version`: {start:.2f} s wall, "
              f"{start_cpu:.2f} s CPU).",
              "", "Targets (issue 13 item 5): >= 100,000 messages/s to NDJSON and >= 30,000/s as a table, memory "
                  "constant in the number of messages, output flushed as it goes."]
    text = "\n".join(lines)
    print(text)
    if a.write:
        from bench.bench_put import write_results
        write_results(text, MARK_BEGIN, MARK_END)
    return 0


def timed_cat(store: Path) -> float:
    files = sorted(str(p) for p in (store / "commitlog").iterdir())
    t = time.perf_counter()
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


if __name__ == "__main__":
    sys.exit(main())
