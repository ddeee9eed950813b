#!/usr/bin/env python3
"""Benchmarks for spark-reindex and the vectorized index builder, printed as one Markdown report.

    python3 bench/bench_reindex.py                 # full size: 20M-key builder, 1 GiB store of 1 KiB messages
    python3 bench/bench_reindex.py --quick         # scaled down (1M keys, 256 MiB store): a smoke run
    python3 bench/bench_reindex.py --gib 4         # a bigger store (segments of 1 GiB)
    python3 bench/bench_reindex.py --write         # also write the report to bench/RESULTS.md
    python3 bench/bench_reindex.py --parts 3       # only some parts

Parts (each measured figure in its own fresh process, so its peak memory is its own; every ratio is taken
against a reference measured in the same run):
 1. bulk builder: build_index_file over a full default-geometry file (5,000,000 slots, 19,999,999 keys
    "TopicBench#order-<n>"), keys given as a lazily sliced sequence, hashing included.
 2. commit-log scan: scan_range over the store's segment ranges in one process, next to a plain sequential
    read of the same files (page cache; and caches dropped, when they can be).
 3. end-to-end `rmqtool spark-reindex` (issue 13 item 6): --master inline against one plain read of the commit
    log (target <= 3x); --master local[2] against the inline time plus the JVM start, measured on its own
    (target: no more); local[1] beside local[2] and the per-task figures (one task per segment range), to show
    the scan is split by segment ranges and scales with executors.
 4. incremental put_key throughput, select_phy_offsets latency, and `rmqtool query-key` wall time from a cold
    start on a store with several full index files.
The store is bench/reindex_store.py's (vectorised generator, memory bounded by its 64 MiB chunks).
Peak memory is VmHWM from /proc/<pid>/status (per process; for Spark every process of the job is sampled).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from measure import TreeSampler, compile_package, cpu_scaling, drop_caches, machine, med, vmhwm_kb  # noqa: E402
from reindex_store import MSG_SIZE, PREFIX, T0, TOPIC, GiB, ensure_store, gen_segment  # noqa: E402


# ============================================================================ measurement helpers

def child(*args: str, env=None) -> dict:
    """Run one measurement in a fresh interpreter; it prints one JSON object."""
    p = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# ============================================================================ inputs

class LazyKeys:
    """keys[a:b] -> numpy 'U' array of PREFIX + str(n), n in [a, b), generated on demand.

    The last four digits come from a cyclic table of "0000".."9999" (a contiguous slice, no per-row work);
    the leading digits are constant over runs of 10,000 rows and are broadcast.
    """

    _cycle = None

    def __init__(self, n: int, chunk: int = 1 << 16):
        self.n = n
        self.chunk = chunk

    def __len__(self):
        return self.n

    def _table(self):
        import numpy as np

        if LazyKeys._cycle is None or len(LazyKeys._cycle) < 10000 + self.chunk:
            g = np.arange(10000 + self.chunk) % 10000
            LazyKeys._cycle = np.stack([48 + g // 1000, 48 + g // 100 % 10, 48 + g // 10 % 10, 48 + g % 10],
                                       axis=1).astype(np.uint32)
        return LazyKeys._cycle

    def __getitem__(self, sl):
        import numpy as np

        a, b, _ = sl.indices(self.n)
        if b <= a:
            return np.empty(0, dtype="<U1")
        pre = np.frombuffer(PREFIX.encode("utf-32-le"), dtype=np.uint32)
        p = len(pre)
        width = p + len(str(b - 1))
        mat = np.zeros((b - a, width), dtype=np.uint32)
        mat[:, :p] = pre
        lo = a
        while lo < b:
            nd = len(str(lo))
            hi = min(b, 10 ** nd, lo + len(self._table()) - 10000)
            rows = mat[lo - a:hi - a]
            low = min(4, nd)
            rows[:, p + nd - low:p + nd] = self._table()[lo % 10000:lo % 10000 + hi - lo, 4 - low:]
            r = lo
            while nd > 4 and r < hi:  # leading digits: constant for runs of 10,000 numbers
                run_end = min(hi, (r // 10000 + 1) * 10000)
                rows[r - lo:run_end - lo, p:p + nd - 4] = np.frombuffer(str(r // 10000).encode("utf-32-le"),
                                                                        dtype=np.uint32)
                r = run_end
            lo = hi
        return mat.view(f"<U{width}").reshape(-1)


class LazyStrKeys(LazyKeys):
    def __getitem__(self, sl):
        a, b, _ = sl.indices(self.n)
        return [f"{PREFIX}{i}" for i in range(a, b)]


# ============================================================================ child measurements

def c_builder(n: int, slots: int, items: int, path: str, form: str) -> dict:
    import numpy as np

    from engine.broker.index.build import build_index_file, build_index_file_from_hashes
    from engine.java.hashes import java_string_hashes

    keys = LazyKeys(n) if form == "unicode" else LazyStrKeys(n)
    phy = np.arange(n, dtype=np.int64) * MSG_SIZE
    ts = T0 + np.arange(n, dtype=np.int64) // 5
    base = vmhwm_kb()
    if os.path.exists(path):
        os.unlink(path)
    out = {"n": n, "slots": slots, "items": items, "form": form, "inputs_mib": round(base / 1024)}
    if form == "breakdown":
        keys = LazyKeys(n)
        t = time.perf_counter()
        for a in range(0, n, 1 << 16):
            keys[a:a + (1 << 16)]
        out["generate_s"] = time.perf_counter() - t
        t = time.perf_counter()
        h = java_string_hashes(keys)
        out["generate_and_hash_s"] = time.perf_counter() - t
        t = time.perf_counter()
        build_index_file_from_hashes(path, h, phy, ts, slots, items)
        out["build_from_hashes_s"] = time.perf_counter() - t
    else:
        t = time.perf_counter()
        got = build_index_file(path, keys, phy, ts, slots, items)
        out["seconds"] = time.perf_counter() - t
        assert got == n
        out["keys_per_s"] = n / out["seconds"]
    out["peak_mib"] = round(vmhwm_kb() / 1024)
    return out


def c_read(paths: list[str]) -> dict:
    buf = bytearray(16 << 20)
    mv = memoryview(buf)
    total = 0
    t = time.perf_counter()
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while True:
                k = f.readinto(mv)
                if not k:
                    break
                total += k
    return {"seconds": time.perf_counter() - t, "bytes": total, "peak_mib": round(vmhwm_kb() / 1024)}


def c_scan(store: str) -> dict:
    """Every segment range of the store, in order, in this process (what one inline worker does)."""
    from engine.broker.config.brokerconf import load_config
    from engine.jobs.broker_index import scan_range
    from engine.broker.commitlog.ranges import segment_ranges
    from engine.exec.ranges import RangeChain

    chain = RangeChain()
    t = time.perf_counter()
    recs = keys = scanned = 0
    for unit in segment_ranges(load_config(storePathRootDir=store)):
        sc = scan_range(chain.exact(unit))
        chain.record(sc.summary())
        recs, keys, scanned = recs + sc.records, keys + sc.keys, scanned + sc.bytes_scanned
    return {"seconds": time.perf_counter() - t, "records": recs, "keys": keys, "bytes_scanned": scanned,
            "peak_mib": round(vmhwm_kb() / 1024)}


def c_jvm(master: str, jvm_options: str = "job") -> dict:
    """The JVM's start and stop as spark-reindex pays them: pyspark's import, the runner's own start
    (engine.exec.runners.SparkRunner: a SparkContext with the job's settings, the JVM options of a local job,
    LOCAL_JVM_OPTIONS, its log redirection), one trivial job (which starts the Python workers), and the runner's
    close. "default": the same context with Spark's own JVM options, for scale."""
    t = time.perf_counter()
    if jvm_options in ("job", "before"):
        from engine.exec.runners import SparkRunner

        # "before": the runner as it was before the class archive and the compiled daemon (the caller also
        # sets RMQTOOL_SPARK_CDS=0)
        conf = {"spark.python.daemon.module": "pyspark.daemon"} if jvm_options == "before" else None
        runner = SparkRunner(master, conf)
        runner.sc.parallelize(range(4), 2).count()
        runner.close()
        return {"seconds": time.perf_counter() - t}
    from pyspark import SparkConf, SparkContext

    from engine.exec.runners import stop_context

    conf = (SparkConf().setMaster(master).setAppName("jvm-start").set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false"))
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    sc.parallelize(range(4), 2).count()
    stop_context(sc)
    return {"seconds": time.perf_counter() - t}


def c_putkey(n: int, slots: int, items: int, path: str) -> dict:
    from engine.broker.index.file import IndexFile

    keys = [f"{PREFIX}{i}" for i in range(n)]
    if os.path.exists(path):
        os.unlink(path)
    f = IndexFile.create(path, slots, items)
    t = time.perf_counter()
    for i, k in enumerate(keys):
        f.put_key(k, i * MSG_SIZE, T0 + i // 5)
    sec = time.perf_counter() - t
    f.close()
    os.unlink(path)
    return {"n": n, "seconds": sec, "keys_per_s": n / sec, "peak_mib": round(vmhwm_kb() / 1024)}


def c_select(path: str, slots: int, items: int, n_keys: int, samples: int, cold: str) -> dict:
    from engine.broker.index.file import IndexFile

    rnd = random.Random(3)
    keys = [f"{PREFIX}{rnd.randrange(n_keys)}" for _ in range(samples)]
    if cold == "cold":
        drop_caches()
    lat, found = [], 0
    with IndexFile.open(path, slots, items) as f:
        for k in keys:
            t = time.perf_counter()
            r = f.select_phy_offsets(k, 64, 0, 2**63 - 1)
            lat.append(time.perf_counter() - t)
            found += bool(r)
    lat.sort()
    return {"samples": samples, "found": found, "median_us": lat[len(lat) // 2] * 1e6,
            "p99_us": lat[int(len(lat) * 0.99)] * 1e6, "max_us": lat[-1] * 1e6}


def child_main(argv: list[str]) -> None:
    kind, *a = argv
    if kind == "gen":
        gen_segment(Path(a[0]), int(a[1]), int(a[2]))
        return
    if kind == "builder":
        out = c_builder(int(a[0]), int(a[1]), int(a[2]), a[3], a[4])
    elif kind == "read":
        out = c_read(a)
    elif kind == "scan":
        out = c_scan(a[0])
    elif kind == "jvm":
        out = c_jvm(*a)
    elif kind == "putkey":
        out = c_putkey(int(a[0]), int(a[1]), int(a[2]), a[3])
    elif kind == "select":
        out = c_select(a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4]), a[5])
    else:
        raise SystemExit(f"unknown child {kind}")
    print(json.dumps(out))


# ============================================================================ parts

def part1(cfg, rep) -> dict:
    n, slots, items = cfg["builder"]
    path = str(cfg["work"] / "builder.idx")
    runs = [child("builder", str(n), str(slots), str(items), path, "unicode") for _ in range(cfg["repeat"])]
    secs = [r["seconds"] for r in runs]
    res = {"n": n, "slots": slots, "items": items, "runs_s": secs, "median_s": med(secs),
           "median_keys_per_s": n / med(secs), "peak_mib": max(r["peak_mib"] for r in runs),
           "inputs_mib": runs[0]["inputs_mib"]}
    res["breakdown"] = child("builder", str(n), str(slots), str(items), path, "breakdown")
    res["str_list"] = child("builder", str(n), str(slots), str(items), path, "str")
    rep.append(f"### 1. Bulk builder: {n:,} keys into a {slots:,}-slot / {items:,}-item file\n")
    rep.append(f"`build_index_file(path, keys, phy, ts, {slots}, {items})`, keys `{PREFIX}<n>` as a lazily sliced "
               "sequence of numpy 'U' chunks (generated on demand, generation inside the timing), hashing included, "
               f"{cfg['repeat']} runs in fresh processes.\n")
    b = res["breakdown"]
    rep.append("| figure | value |\n|---|---|")
    rep.append(f"| runs (s) | {', '.join(f'{s:.2f}' for s in secs)} |")
    rep.append(f"| **median time** | **{res['median_s']:.2f} s** |")
    rep.append(f"| **median throughput** | **{res['median_keys_per_s'] / 1e6:.2f} M keys/s** (target >= 4.6 M/s; "
               f"RocketMQ IndexFile.putKey: 4.58 M/s) |")
    rep.append(f"| **peak memory (VmHWM)** | **{res['peak_mib']} MiB** (target < 2048 MiB; of which inputs "
               f"phy+ts arrays and interpreter: {res['inputs_mib']} MiB) |")
    rep.append(f"| breakdown: generate keys | {b['generate_s']:.2f} s |")
    rep.append(f"| breakdown: generate + hash (java_string_hashes) | {b['generate_and_hash_s']:.2f} s |")
    rep.append(f"| breakdown: build_index_file_from_hashes (slots, chains, timeDiffs, write) | "
               f"{b['build_from_hashes_s']:.2f} s |")
    s = res["str_list"]
    rep.append(f"| same build, keys as lazily generated lists of Python `str` | {s['seconds']:.2f} s = "
               f"{s['keys_per_s'] / 1e6:.2f} M keys/s, peak {s['peak_mib']} MiB |")
    rep.append("")
    return res


def part2(cfg, rep) -> dict:
    paths = sorted(str(p) for p in (cfg["store"] / "commitlog").iterdir())
    child("read", *paths)  # warm the page cache
    pairs = [(child("read", *paths), child("scan", str(cfg["store"]))) for _ in range(cfg["repeat"])]
    reads, scans = [p[0] for p in pairs], [p[1] for p in pairs]
    res = {"read_warm_s": med([r["seconds"] for r in reads]), "scan_warm_s": med([r["seconds"] for r in scans]),
           "bytes": reads[0]["bytes"], "records": scans[0]["records"], "keys": scans[0]["keys"],
           "scan_peak_mib": scans[0]["peak_mib"], "read_peak_mib": reads[0]["peak_mib"]}
    res["cold_available"] = cold = drop_caches()
    if cold:
        res["read_cold_s"] = child("read", *paths)["seconds"]
        drop_caches()
        res["scan_cold_s"] = child("scan", str(cfg["store"]))["seconds"]
    mb = res["bytes"] / 1e6
    rep.append(f"### 2. Commit-log scan: {len(paths)} segment(s), {res['bytes'] / GiB:.2f} GiB, "
               f"{res['records']:,} messages of {MSG_SIZE} B, {res['keys']:,} keys\n")
    rep.append("`scan_range` over every segment range in one process (decode_segment + keycolumns.broker_keys: "
               f"no CRC, as the dispatcher), read and scan alternated, medians of {cfg['repeat']}; plain read = "
               "`readinto` of the same files in 16 MiB blocks.\n")
    rep.append("| figure | time | MB/s | messages/s | ratio to plain read | peak memory |\n|---|---|---|---|---|---|")
    rep.append(f"| plain sequential read (page cache) | {res['read_warm_s']:.2f} s | {mb / res['read_warm_s']:.0f} "
               f"| - | 1.0 | {res['read_peak_mib']} MiB |")
    rep.append(f"| **scan, 1 process (page cache)** | {res['scan_warm_s']:.2f} s | {mb / res['scan_warm_s']:.0f} | "
               f"{res['records'] / res['scan_warm_s']:,.0f} | **{res['scan_warm_s'] / res['read_warm_s']:.1f}x** | "
               f"{res['scan_peak_mib']} MiB |")
    if cold:
        rep.append(f"| plain sequential read (caches dropped) | {res['read_cold_s']:.2f} s | "
                   f"{mb / res['read_cold_s']:.0f} | - | 1.0 | - |")
        rep.append(f"| scan, 1 process (caches dropped) | {res['scan_cold_s']:.2f} s | {mb / res['scan_cold_s']:.0f} | "
                   f"{res['records'] / res['scan_cold_s']:,.0f} | {res['scan_cold_s'] / res['read_cold_s']:.1f}x | - |")
    rep.append("")
    return res


def _reindex_run(store: Path, out: Path, master: str, extra=(), env=None) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "rmqtool", "spark-reindex", "--store", str(store), "--out", str(out), "--master",
           master, "--json", *extra]
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    with TreeSampler(p.pid) as s:
        so, se = p.communicate()
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"{cmd} failed: {se}")
    return {"wall_s": wall, "job": json.loads(so), "peaks": s.by_label()}


def _digest(d: Path) -> list[str]:
    """The index files' digests (not the rmqtool-index.json marker, whose run id differs by design)."""
    import hashlib

    from engine.broker.layout import list_index_files

    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in list_index_files(d)]


def part3(cfg, rep, p2) -> dict:
    store, work = cfg["store"], cfg["work"]
    paths = sorted(str(p) for p in (store / "commitlog").iterdir())
    child("read", *paths)  # warm the page cache
    # The local JVM's class-data archive (engine.exec.jvmcache) in a cache of the bench's own: made afresh by a
    # first local[2] run (timed: what an operator's first local job costs), then mapped by every later one.
    cache = work / "jvm-cache"
    shutil.rmtree(cache, ignore_errors=True)
    os.environ["RMQTOOL_CACHE_DIR"] = str(cache)
    no_cds = dict(os.environ, RMQTOOL_SPARK_CDS="0")  # with Spark's own daemon: the local runner before session 20
    before = ["--conf", "spark.python.daemon.module=pyspark.daemon"]
    first = _reindex_run(store, work / "out-local2", "local[2]")
    if first["job"]["sparkClassArchive"] != "creating":
        raise RuntimeError(f"the first local run made no class archive: {first['job']['sparkClassArchive']}")
    deadline = time.monotonic() + 600  # made in the background after the command returned
    while not list(cache.glob("*.jsa")):
        if time.monotonic() > deadline:
            raise RuntimeError("the class archive did not appear within 600 s")
        time.sleep(0.2)
    time.sleep(1.0)  # the settling process exits
    runs: dict[str, list] = {"read": [], "inline": [], "local[2]": [], "local[1]": [], "jvm": [],
                             "local[2], before": [], "jvm_plain": []}
    for _ in range(cfg["repeat"]):  # interleaved, so that a noisy minute hits every figure alike
        runs["read"].append(child("read", *paths)["seconds"])
        runs["inline"].append(_reindex_run(store, work / "out-inline", "inline"))
        runs["jvm"].append(child("jvm", "local[2]")["seconds"])
        runs["local[2]"].append(_reindex_run(store, work / "out-local2", "local[2]"))
        runs["jvm_plain"].append(child("jvm", "local[2]", "before", env=no_cds)["seconds"])
        runs["local[2], before"].append(_reindex_run(store, work / "out-local2-plain", "local[2]", before, env=no_cds))
    runs["local[1]"].append(_reindex_run(store, work / "out-local1", "local[1]"))
    jvm_default = child("jvm", "local[2]", "default")["seconds"]  # for scale: Spark's own JVM options
    same = (_digest(work / "out-local2") == _digest(work / "out-inline") == _digest(work / "out-local1")
            == _digest(work / "out-local2-plain"))
    wall = {k: med([r["wall_s"] for r in v]) for k, v in runs.items() if k not in ("read", "jvm", "jvm_plain")}
    read, jvm = med(runs["read"]), med(runs["jvm"])
    res = {"read_s": read, "jvm_s": jvm, "jvm_default_s": jvm_default, "walls": wall, "identical": same,
           "jvm_plain_s": med(runs["jvm_plain"]), "first_local2_s": first["wall_s"],
           "archive_states": sorted({r["job"]["sparkClassArchive"] for r in runs["local[2]"]}),
           "jobs": {k: runs[k][len(runs[k]) // 2]["job"] for k in wall},
           "peaks": {k: runs[k][len(runs[k]) // 2]["peaks"] for k in wall}}
    cold = drop_caches()
    if cold:
        res["read_cold_s"] = child("read", *paths)["seconds"]
        drop_caches()
        res["inline_cold_s"] = _reindex_run(store, work / "out-inline", "inline")["wall_s"]
    _part3_report(cfg, rep, res)
    return res


def _part3_report(cfg, rep, res) -> None:
    j, w, read, jvm = res["jobs"]["inline"], res["walls"], res["read_s"], res["jvm_s"]
    mb = j["bytesRead"] / 1e6
    rep.append(f"### 3. End-to-end `rmqtool spark-reindex` ({j['messages']:,} messages, {j['keysIndexed']:,} keys, "
               f"{j['indexFiles']} index file(s) of default geometry, {len(j['scanTasks'])} segment ranges)\n")
    rep.append(f"`rmqtool spark-reindex --store STORE --out OUT --master M --json`, wall time of the whole command "
               f"(interpreter, imports, JVM start, scan, plan, build, fsync, publish, JVM stop), medians of "
               f"{cfg['repeat']} interleaved runs. Reference: one plain read of the same files (page cache), and the "
               "JVM start as the job pays it (pyspark import, the runner's start of a local[2] SparkContext with the "
               "job's settings and JVM options, one trivial job that starts the Python workers, the runner's stop) in "
               "a process of its own. The "
               f"files of every run are byte-identical: {'yes' if res['identical'] else '**NO**'}.\n")
    rep.append("| figure | wall time | reference (same run) | ratio | target |\n|---|---|---|---|---|")
    rep.append(f"| plain sequential read | {read:.2f} s | - | 1.0 | - |")
    rep.append(f"| **--master inline** | **{w['inline']:.2f} s** | read {read:.2f} s | "
               f"**{w['inline'] / read:.1f}x** | <= 3x: {'met' if w['inline'] <= 3 * read else '**not met**'} |")
    if "read_cold_s" in res:
        rep.append(f"| --master inline, caches dropped | {res['inline_cold_s']:.2f} s | read (caches dropped) "
                   f"{res['read_cold_s']:.2f} s | {res['inline_cold_s'] / res['read_cold_s']:.1f}x | - |")
    rep.append(f"| JVM start and stop (alone; the job's JVM options) | {jvm:.2f} s | - | - | - |")
    if "jvm_default_s" in res:
        rep.append(f"| JVM start and stop (alone; Spark's default JVM options, once) | {res['jvm_default_s']:.2f} s "
                   f"| - | - | - |")
    lim = w["inline"] + jvm
    rep.append(f"| **--master local[2]** | **{w['local[2]']:.2f} s** | inline + JVM {lim:.2f} s | "
               f"**{w['local[2]'] / lim:.2f}x** | <= 1x: {'met' if w['local[2]'] <= lim else '**not met**'} |")
    rep.append(f"| --master local[1] | {w['local[1]']:.2f} s | - | - | - |")
    plain, jp = w["local[2], before"], res["jvm_plain_s"]
    rep.append(f"| JVM start and stop as before session 20 (no class archive, Spark's own worker daemon) | {jp:.2f} s | - | - "
               f"| - |")
    rep.append(f"| --master local[2] as before session 20 | {plain:.2f} s | inline + that JVM start "
               f"{w['inline'] + jp:.2f} s | {plain / (w['inline'] + jp):.2f}x | - |")
    rep.append(f"| first --master local[2] run (its JVM lists its classes; the archive is made in the background after "
               f"the command returned) | {res['first_local2_s']:.2f} s | - | - | - |")
    rep.append("")
    rep.append(f"The JVM rows and local[2] run with the class-data archive of Spark's classes "
               f"(engine.exec.jvmcache; state of the timed runs: {', '.join(res['archive_states'])}) and the "
               f"workers' daemon that imports pyspark compiled (engine.exec.sparkdaemon); the rows \"as before session "
               f"20\" are the same commands with `RMQTOOL_SPARK_CDS=0` and `--conf "
               f"spark.python.daemon.module=pyspark.daemon`. The two save {plain - w['local[2]']:.2f} s per local[2] "
               f"run here ({plain:.2f} s -> {w['local[2]']:.2f} s), and the JVM reference gains as much.")
    rep.append("")
    rep.append("Stages inside each job (`scan_seconds`, `build_seconds` of its --json result). The scan tasks' span "
               "runs from the first task's start to the last one's end (per-task wall clocks), so it leaves out what "
               "comes before the first task (on Spark: starting the Python workers and their imports); tasks' time "
               "over span shows how many ran at once:\n")
    rep.append("| run | scan stage | before the first task | scan tasks' span | sum of task times | sum / span | "
               "build stage |\n|---|---|---|---|---|---|---|")
    for k in ("inline", "local[1]", "local[2]"):
        jj = res["jobs"][k]
        tasks = jj["scanTasks"]
        tsum = sum(t["seconds"] for t in tasks)
        first = min(t["started"] for t in tasks)
        span = max(t["started"] + t["seconds"] for t in tasks) - first
        rep.append(f"| {k} | {jj['scanSeconds']:.2f} s | {first - jj['scanStarted']:.2f} s | {span:.2f} s | "
                   f"{tsum:.2f} s | {tsum / span:.2f} | {jj['buildSeconds']:.2f} s |")
    rep.append("")
    rep.append("Per-task figures of the local[2] run (one Spark task per segment range):\n")
    rep.append("| segment | range | bytes | messages | seconds | MB/s |\n|---|---|---|---|---|---|")
    for t in res["jobs"]["local[2]"]["scanTasks"]:
        end = "end" if t["end"] is None else f"{t['end']:,}"
        rep.append(f"| {t['segment']} | {t['begin']:,} .. {end} | {t['bytesScanned']:,} | {t['records']:,} | "
                   f"{t['seconds']:.2f} | {t['bytesScanned'] / 1e6 / max(t['seconds'], 1e-9):.0f} |")
    rep.append("")
    rep.append("Peak memory per process (VmHWM, sampled every 0.1 s):\n")
    rep.append("| run | process | count | peak of one | sum |\n|---|---|---|---|---|")
    for name, peaks in res["peaks"].items():
        for label, v in sorted(peaks.items()):
            rep.append(f"| {name} | {label} | {v['processes']} | {v['max_mib']} MiB | {v['sum_mib']} MiB |")
    rep.append(f"\n(Scale: {mb:,.0f} MB of records.)\n")


def part4(cfg, rep, p1) -> dict:
    work, store = cfg["work"], cfg["store"]
    n_put, slots, items = cfg["putkey"]
    puts = [child("putkey", str(n_put), str(slots), str(items), str(work / "putkey.idx"))
            for _ in range(cfg["repeat"])]
    res = {"putkey_keys_per_s": med([p["keys_per_s"] for p in puts]), "putkey_n": n_put}
    bn, bslots, bitems = cfg["builder"]
    big = work / "builder.idx"
    if not big.exists():
        child("builder", str(bn), str(bslots), str(bitems), str(big), "unicode")
    warm = child("select", str(big), str(bslots), str(bitems), str(bn), "3000", "warm")
    cold = child("select", str(big), str(bslots), str(bitems), str(bn), "300", "cold")
    res.update(select_warm=warm, select_cold=cold)
    # A store with several full index files: the bench commit log, indexed with a smaller geometry.
    qslots, qitems = cfg["query_geom"]
    s2 = work / "store-query"
    if not (s2 / "index").is_dir():
        shutil.rmtree(s2, ignore_errors=True)
        s2.mkdir(parents=True)
        (s2 / "commitlog").symlink_to(store / "commitlog")
        subprocess.run([sys.executable, "-m", "rmqtool", "spark-reindex", "--store", str(s2), "--hash-slots",
                        str(qslots), "--max-index", str(qitems), "--master", "inline", "--json"], check=True,
                       capture_output=True)
    from engine.broker.layout import list_index_files

    files = list_index_files(s2 / "index")
    walls_warm, walls_cold, base, found, dropped = _query_walls(cfg, s2, qslots, qitems)
    res.update(query_files=len(files), query_warm_s=med(walls_warm), query_cold_s=med(walls_cold),
               query_found=found, version_s=med(base), caches_dropped=dropped)
    rep.append("### 4. Incremental path and queries\n")
    rep.append("| figure | value |\n|---|---|")
    rep.append(f"| `IndexFile.put_key` in a loop ({n_put:,} keys, {slots:,} slots, median of {cfg['repeat']}) | "
               f"{res['putkey_keys_per_s'] / 1e3:.0f} k keys/s "
               f"({p1['median_keys_per_s'] / res['putkey_keys_per_s']:.0f}x slower than the bulk builder) |"
               if p1 else f"| `IndexFile.put_key` loop | {res['putkey_keys_per_s'] / 1e3:.0f} k keys/s |")
    rep.append(f"| `select_phy_offsets` on the full {bitems:,}-item file, page cache (3000 random keys) | "
               f"median {warm['median_us']:.0f} µs, p99 {warm['p99_us']:.0f} µs, max {warm['max_us']:.0f} µs |")
    rep.append(f"| `select_phy_offsets` after dropping caches (300 random keys) | median {cold['median_us']:.0f} µs, "
               f"p99 {cold['p99_us']:.0f} µs |")
    rep.append(f"| `rmqtool query-key` cold start (new process), store with {len(files)} index files of "
               f"{qslots:,} slots x {qitems:,} items, page cache warm (median of 5) | {res['query_warm_s'] * 1000:.0f} ms |")
    rep.append(f"| same, caches dropped before each run (median of 3) | {res['query_cold_s'] * 1000:.0f} ms "
               f"{'' if dropped else '(could not drop caches)'} |")
    rep.append(f"| for scale: `rmqtool --version` (interpreter + CLI start) | {res['version_s'] * 1000:.0f} ms |")
    rep.append(f"| queries that found their message | {found} of 8 |")
    rep.append("")
    return res


def _query_walls(cfg, s2: Path, qslots: int, qitems: int):
    """query-key from a new process (warm, then caches dropped) and `rmqtool --version` for scale."""
    n_msgs = p2_records(cfg["store"])
    rnd = random.Random(9)
    cmd = [sys.executable, "-m", "rmqtool", "query-key", "--store", str(s2), "--hash-slots", str(qslots),
           "--max-index", str(qitems), "--topic", TOPIC, "--json"]
    walls_warm, walls_cold, found, base = [], [], 0, []
    for i in range(cfg["repeat"] + 2):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "rmqtool", "--version"], check=True, capture_output=True)
        base.append(time.perf_counter() - t)
    dropped = False
    for i in range(8):
        key = f"order-{rnd.randrange(n_msgs):08d}"
        if i >= 5:
            dropped = drop_caches()
        t = time.perf_counter()
        p = subprocess.run([*cmd, "--key", key], capture_output=True, text=True)
        (walls_warm if i < 5 else walls_cold).append(time.perf_counter() - t)
        found += p.returncode == 0 and bool(p.stdout.strip())
    return walls_warm, walls_cold, base, found, dropped


def p2_records(store: Path) -> int:
    meta = json.loads((store / "bench.json").read_text())
    return ((meta["seg_size"] - 8) // MSG_SIZE) * meta["segments"]


# ============================================================================ main

def _config(args) -> dict:
    work = Path(args.work) / ("quick" if args.quick else f"full-{args.gib}g")
    work.mkdir(parents=True, exist_ok=True)
    if args.quick:
        cfg = {"builder": (999_999, 250_000, 1_000_000), "segments": 2, "seg_size": 128 << 20,
               "putkey": (50_000, 250_000, 1_000_000), "query_geom": (25_000, 100_000), "repeat": args.repeat or 1}
    else:
        cfg = {"builder": (19_999_999, 5_000_000, 20_000_000), "segments": args.gib, "seg_size": GiB,
               "putkey": (300_000, 5_000_000, 20_000_000), "query_geom": (250_000, 1_000_000),
               "repeat": args.repeat or 3}
    cfg["work"], cfg["store"] = work, work / "store"
    return cfg


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="scaled-down sizes (smoke run)")
    ap.add_argument("--parts", default="1,2,3,4", help="comma-separated parts to run (default all)")
    ap.add_argument("--work", default="/tmp/rmqtool-bench", help="work directory (the store is reused)")
    ap.add_argument("--repeat", type=int, default=None, help="runs per figure (default 3, quick 1)")
    ap.add_argument("--write", action="store_true", help="write the report to bench/RESULTS.md")
    ap.add_argument("--gib", type=int, default=1, help="store size in GiB, as 1 GiB segments (default 1)")
    args = ap.parse_args()
    compile_package(ROOT)  # bytecode written as an install writes it
    parts = {int(p) for p in args.parts.split(",")}
    cfg = _config(args)
    work = cfg["work"]
    m = machine()
    m["cpu_scaling"] = cpu_scaling()
    rep = ["## Machine\n", "| | |\n|---|---|"]
    rep += [f"| {k} | {v} |" for k, v in m.items() if k != "cpu_scaling"]
    cs = m["cpu_scaling"]
    rep.append(f"| parallel CPU check | a pure-Python loop takes {cs['solo_s']} s alone, {cs['two_at_once_s']} s "
               f"when two run at once: 2 processes give {cs['throughput_x']}x the throughput of one |")
    rep.append("")
    results: dict = {"machine": m, "quick": args.quick}
    if parts & {2, 3, 4}:
        n, gen_s = ensure_store(cfg["store"], cfg["segments"], cfg["seg_size"])
        results["store"] = {"messages": n, "generated_s": gen_s}
        rep.append(f"Bench store: {cfg['segments']} commit-log segments of {cfg['seg_size']:,} bytes, {n:,} messages of "
                   f"{MSG_SIZE} bytes (topic {TOPIC}, UNIQ_KEY + 2 KEYS each = 3 index keys), written by "
                   "bench/reindex_store.py" + (f" in {gen_s:.0f} s." if gen_s else " (reused)."))
        rep.append("")
    p1 = p2 = None
    t = time.perf_counter()
    if 1 in parts:
        p1 = results["part1"] = part1(cfg, rep)
    if 2 in parts:
        p2 = results["part2"] = part2(cfg, rep)
    if 3 in parts:
        results["part3"] = part3(cfg, rep, p2)
    if 4 in parts:
        results["part4"] = part4(cfg, rep, p1)
    cmd = "python3 bench/bench_reindex.py" + (" --quick" if args.quick else "") + \
          ("" if args.quick or args.gib == 1 else f" --gib {args.gib}") + \
          ("" if parts == {1, 2, 3, 4} else f" --parts {args.parts}")
    head = [f"# rmqtool spark-reindex / index builder benchmarks\n",
            f"Produced by `{cmd}` on {time.strftime('%Y-%m-%d %H:%M')} ({time.perf_counter() - t:.0f} s).\n"]
    text = "\n".join(head + rep)
    print(text)
    (work / "results.json").write_text(json.dumps(results, indent=1, default=str))
    if args.write:  # replace the figures between the markers, keep the hand-written notes around them
        path = ROOT / "bench" / "RESULTS.md"
        begin, end = "<!-- figures:begin (written by bench/bench_reindex.py --write) -->", "<!-- figures:end -->"
        old = path.read_text() if path.exists() else ""
        if begin in old and end in old:
            new = old.split(begin)[0] + begin + "\n" + text + "\n" + end + old.split(end, 1)[1]
        else:
            new = begin + "\n" + text + "\n" + end + "\n"
        path.write_text(new)


if __name__ == "__main__":
    main()
