#!/usr/bin/env python3
"""Start-up time (issue 13 item 3): `rmqtool --help`, `rmqtool --version` and `rmqtool query-key` on a store with
three full default-geometry index files (5M slots x 20M items, 420 MB each), next to a bare `python -c pass` of
the same interpreter, measured side by side in the same run (the commands take turns, so a busy machine slows
them alike). Target: each <= 3x `python -c pass` (median of --runs).

The store: one commit log written by `rmqtool put` (a few messages, one with the key asked for), then three full
index files written with engine.broker.index.build.build_index_file_from_hashes (random keys, the real key's items
among them pointing at its message), so query-key opens and walks real 420 MB files. Built once in --dir (kept,
reused when it is already there).

    python3 bench/bench_startup.py [--runs 20] [--dir /tmp/rmqtool-startup-store]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TOPIC, KEY = "TopicTest", "order-1"
FILES = 3


def build_store(root: Path) -> None:
    """A put-written store whose index/ holds FILES full default-geometry index files."""
    import numpy as np

    from engine.broker.config.brokerconf import load_config
    from engine.broker.index.build import build_index_file_from_hashes
    from engine.broker.layout import index_file_name
    from engine.java.lang import java_string_hash

    if (root / "index").is_dir() and len(list((root / "index").iterdir())) == FILES:
        return
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for i in range(5):
        keys = f"{KEY} other-{i}" if i == 2 else f"other-{i}"
        subprocess.run([sys.executable, "-m", "rmqtool", "put", "-s", str(root), "-t", TOPIC, "--keys", keys,
                        "--body", f"message {i}", "-Q"], check=True, cwd=REPO, env=env, stdout=subprocess.DEVNULL)
    cfg = load_config(None, storePathRootDir=str(root))
    r = subprocess.run([sys.executable, "-m", "rmqtool", "query-key", "-s", str(root), "-t", TOPIC, "-k", KEY,
                        "--json"], check=True, cwd=REPO, env=env, capture_output=True, text=True)
    target = json.loads(r.stdout.splitlines()[0])
    offset, stamp = target["commitLogOffset"], target["storeTimestamp"]
    for p in (root / "index").iterdir():
        p.unlink()
    slots, items = cfg.maxHashSlotNum, cfg.maxIndexNum
    rng = np.random.default_rng(7)
    n = items - 1
    kh = java_string_hash(f"{TOPIC}#{KEY}")
    for f in range(FILES):
        hashes = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
        hashes[rng.integers(0, n, 3)] = kh  # the key, three times per file
        phy = np.where(hashes == kh, offset, 0).astype(np.int64)
        ts = np.full(n, stamp, dtype=np.int64)
        name = index_file_name(stamp + f)
        t = time.perf_counter()
        build_index_file_from_hashes(root / "index" / name, hashes, phy, ts, slots, items)
        print(f"built index file {name} ({n} items) in {time.perf_counter() - t:.1f} s", file=sys.stderr)


def measure(cmds: dict[str, list[str]], runs: int) -> dict[str, list[float]]:
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="100")
    # Bytecode cached as for an installed package (pip compiles it): the warm-up run writes the .pyc files.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for name, argv in cmds.items():  # one warm-up each (page cache, .pyc files)
        subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(runs):
        for name, argv in cmds.items():
            t = time.perf_counter()
            r = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            times[name].append(time.perf_counter() - t)
            if r.returncode != 0:
                raise SystemExit(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.decode()[-500:]}")
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/rmqtool-startup-store"))
    a = ap.parse_args()
    build_store(a.dir)
    py = sys.executable
    cmds = {
        "python -c pass": [py, "-c", "pass"],
        "rmqtool --help": [py, "-m", "rmqtool", "--help"],
        "rmqtool --version": [py, "-m", "rmqtool", "--version"],
        f"rmqtool query-key ({FILES} full index files)": [py, "-m", "rmqtool", "query-key", "-s", str(a.dir),
                                                          "-t", TOPIC, "-k", KEY],
    }
    times = measure(cmds, a.runs)
    ref = statistics.median(times["python -c pass"])
    print(f"start-up, {a.runs} runs each, taking turns; {sys.executable} ({sys.version.split()[0]})")
    print(f"{'command':<44} {'median':>9} {'min':>9} {'max':>9} {'x python -c pass':>17}")
    worst = 0.0
    for name, ts in times.items():
        med = statistics.median(ts)
        ratio = med / ref
        if name != "python -c pass":
            worst = max(worst, ratio)
        print(f"{name:<44} {med * 1000:7.1f}ms {min(ts) * 1000:7.1f}ms {max(ts) * 1000:7.1f}ms {ratio:16.2f}x")
    print(f"worst ratio {worst:.2f}x (target <= 3x): {'met' if worst <= 3 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
