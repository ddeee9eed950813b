#!/usr/bin/env python3
"""dump-commitlog's filters (issue 14 item 5): the offset range and --files seek, filters stream.

A store of --messages messages (about 250 bytes each) with --segment-mib segments is written once with the put
pipeline. Each figure is the median of --runs fresh interpreters (stdout to /dev/null), printed next to its
reference measured in the same run (the unfiltered dump), as a ratio:
* `--from-offset <start of the last segment>` and `--files <last segment>`: they read one segment, so their time
  should be near (1 / segments) of the whole dump plus the start-up;
* `--topic` (one topic of four) and `--begin/--end` (a quarter of the store times): the whole log is read, a
  quarter is printed;
* peak RSS (ru_maxrss) with the filters against the unfiltered dump: constant memory means about the same figure;
* `--body-dir`: one file per message.

    python3 bench/bench_dump_filters.py --messages 200000 --runs 3
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
T0 = 1_700_000_000_000


def build_store(store: Path, n: int, segment: int) -> None:
    from engine.broker.config.brokerconf import load_config
    from engine.broker.write.batch import MessageBatch
    from engine.broker.store import MessageStore

    cfg = load_config(None, storePathRootDir=str(store), mappedFileSizeCommitLog=segment)
    with MessageStore(cfg, writable=True, create=True) as st:
        for a in range(0, n, 4096):
            b = MessageBatch()
            b.extend_json([{"topic": f"BenchTopic{i % 4}", "queueId": i % 8, "storeTimestamp": T0 + i,
                            "keys": [f"order-{i:09d}"], "body": f"payment {i:09d} " + "x" * 120}
                           for i in range(a, min(n, a + 4096))])
            st.put_batch(b)


def timed(args: list) -> tuple[float, int]:
    """(seconds, peak RSS KiB) of one CLI run in a fresh interpreter."""
    code = ("import resource, sys, runpy; sys.argv = ['rmqtool'] + sys.argv[1:]\n"
            "try:\n    runpy.run_module('rmqtool', run_name='__main__')\n"
            "except SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(code or 0)")
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code, *map(str, args)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    dt = time.perf_counter() - t
    if p.returncode not in (0, 3):
        raise SystemExit(f"{args}: exit {p.returncode}: {p.stderr}")
    return dt, int(p.stderr.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--segment-mib", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-dump-filters-"))
    try:
        store = work / "store"
        build_store(store, a.messages, a.segment_mib << 20)
        segs = sorted(p.name for p in (store / "commitlog").iterdir())
        last = segs[-1]
        base = ["dump-commitlog", "-s", store, "--json"]
        quarter = (T0 + a.messages // 2, T0 + a.messages // 2 + a.messages // 4 - 1)
        cases = {
            "whole log (reference)": base,
            "--from-offset <last segment>": base + ["--from-offset", int(last)],
            "--files <last segment>": base + ["--files", last],
            "--topic (1 of 4)": base + ["--topic", "BenchTopic1"],
            "--begin/--end (1/4 of the times)": base + ["--begin", quarter[0], "--end", quarter[1]],
            "--body none": base + ["--body", "none"],
        }
        figures = {}
        for name, args in cases.items():
            runs = [timed(args) for _ in range(a.runs)]
            figures[name] = (statistics.median(r[0] for r in runs), max(r[1] for r in runs))
        out = work / "bodies"
        shutil.rmtree(out, ignore_errors=True)
        figures["--body-dir (table to /dev/null)"] = timed(["dump-commitlog", "-s", store, "--body-dir", out])
        ref_t, ref_rss = figures["whole log (reference)"]
        print(f"{a.messages} messages, {len(segs)} segments of {a.segment_mib} MiB; medians of {a.runs} runs")
        print(f"{'case':40} {'seconds':>8} {'x ref':>7} {'peak RSS MiB':>13} {'x ref':>7}")
        for name, (t, rss) in figures.items():
            print(f"{name:40} {t:8.2f} {t / ref_t:7.2f} {rss / 1024:13.0f} {rss / ref_rss:7.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
