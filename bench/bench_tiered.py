#!/usr/bin/env python3
"""Benchmark: random key queries on a full unsealed tiered index file vs. its compacted form.

Builds an unsealed IndexStoreFile on disk (one unique key per message, puts until FILE_FULL),
compacts it, then runs the same random key queries against both files.  Every file access of the
query path goes through engine.tiered.index.queries.CountingReader (os.pread), so the read counts are exact.
Before each phase the page cache is dropped (``echo 3 > /proc/sys/vm/drop_caches``, needs root);
if that fails the phase is reported as "warm".

    python3 bench/bench_tiered.py                       # defaults: 50,000 slots, 500,000 items
    python3 bench/bench_tiered.py --slots 5000 --items 100000 --queries 20000
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.tiered.index import CountingReader, IndexStoreFile  # noqa: E402

LONG_MAX = 2**63 - 1


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def percentile(values, p):
    s = sorted(values)
    if not s:
        return 0
    k = min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))
    return s[k]


def build(path: Path, slots: int, items: int, topic: str, begin: int) -> tuple[int, float]:
    t0 = time.perf_counter()
    f = IndexStoreFile.create(path, slots, items, begin)
    n = 0
    while True:
        r = f.put_key(topic, 1, n % 8, [f"key-{n}"], 1000 * n, 200 + n % 300, begin + 50 * n)
        if r != "SUCCESS":
            assert r == "FILE_FULL", r
            break
        n += 1
    f.close()
    return n, time.perf_counter() - t0


def run_queries(path: Path, keys, topic: str, max_count: int, **open_kw):
    dropped = drop_caches()
    reads, times, results = [], [], []
    with IndexStoreFile.open(path, **open_kw) as f, CountingReader(path) as rd:
        t_all = time.perf_counter()
        for k in keys:
            rd.reset()
            t0 = time.perf_counter_ns()
            res = f.query(topic, k, max_count, 0, LONG_MAX, reader=rd)
            times.append(time.perf_counter_ns() - t0)
            reads.append(rd.reads)
            results.append(tuple(sorted((x["queueId"], x["offset"]) for x in res)))
        total = time.perf_counter() - t_all
    return {
        "cache": "cold (page cache dropped)" if dropped else "warm",
        "reads": reads,
        "times": times,
        "results": results,
        "total": total,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slots", type=int, default=50_000, help="hash slot count (default 50,000)")
    ap.add_argument("--items", type=int, default=500_000, help="max index num (default 500,000)")
    ap.add_argument("--queries", type=int, default=100_000, help="random key queries per file (default 100,000)")
    ap.add_argument("--max-count", type=int, default=64, help="maxCount per query (default 64)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary directory on disk)")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    a = ap.parse_args(argv)

    work = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="bench_tiered_", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    topic, begin = "BenchTopic", 1_700_000_000_000
    unsealed = work / str(begin)
    if unsealed.exists():
        unsealed.unlink()
    try:
        n, t_build = build(unsealed, a.slots, a.items, topic, begin)
        t0 = time.perf_counter()
        with IndexStoreFile.open(unsealed) as f:
            compacted = Path(f.compact(work / "compacting" / str(begin)))
            st = f.stats()
        t_compact = time.perf_counter() - t0

        rnd = random.Random(a.seed)
        keys = [f"key-{rnd.randrange(n)}" for _ in range(a.queries)]
        u = run_queries(unsealed, keys, topic, a.max_count, hash_slot_num=a.slots, index_num=a.items)
        c = run_queries(compacted, keys, topic, a.max_count)
        mismatches = sum(1 for x, y in zip(u["results"], c["results"]) if x != y)
        missing = sum(1 for x in c["results"] if not x)

        print("tiered index query benchmark")
        print(f"  geometry: {a.slots:,} slots x {a.items:,} items; {n:,} messages put (one key each) until FILE_FULL")
        print(f"  unsealed file {unsealed.stat().st_size:,} B built in {t_build:.1f} s; "
              f"compacted {compacted.stat().st_size:,} B in {t_compact:.2f} s")
        print(f"  chains: mean {st['meanChainLength']:.2f}, max {st['maxChainLength']}, "
              f"used slots {st['usedSlots']:,}/{st['hashSlotNum']:,}")
        print(f"  {a.queries:,} random key queries (same keys for both files), maxCount {a.max_count}, "
              f"files on disk in {work}")
        print()
        hdr = f"  {'file':<10} {'cache':<26} {'median reads':>12} {'mean reads':>10} {'max reads':>9} " \
              f"{'median us':>9} {'p99 us':>8} {'first-1k med us':>15} {'total s':>8}"
        print(hdr)
        for name, r in (("unsealed", u), ("compacted", c)):
            print(f"  {name:<10} {r['cache']:<26} {statistics.median(r['reads']):>12g} "
                  f"{statistics.fmean(r['reads']):>10.2f} {max(r['reads']):>9} "
                  f"{statistics.median(r['times']) / 1000:>9.1f} {percentile(r['times'], 99) / 1000:>8.1f} "
                  f"{statistics.median(r['times'][:1000]) / 1000:>15.1f} {r['total']:>8.2f}")
        print()
        mr = statistics.median(u["reads"]) / statistics.median(c["reads"])
        mt = statistics.median(u["times"]) / statistics.median(c["times"])
        print(f"  ratio unsealed/compacted: median reads {mr:.2f}x, median time {mt:.2f}x, "
              f"total time {u['total'] / c['total']:.2f}x")
        exact = all(x == 2 for x in c["reads"])
        print(f"  compacted queries with exactly 2 reads (slot + items): "
              f"{sum(1 for x in c['reads'] if x == 2):,}/{len(c['reads']):,}{'' if exact else '  (NOT all!)'}")
        print(f"  result sets differing between the two files: {mismatches}; compacted queries with no hit: {missing}")
        return 0 if exact and mismatches == 0 else 1
    finally:
        if not a.keep and not a.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
