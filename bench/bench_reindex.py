#!/usr/bin/env python3
"""Benchmarks for issue 4 (spark-reindex and the vectorized index builder), printed as one Markdown report.

    python3 bench/bench_reindex.py                 # full size: 20M-key builder, 2 GiB store of 1 KiB messages
    python3 bench/bench_reindex.py --quick         # scaled down (1M keys, 64 MiB store): a smoke run
    python3 bench/bench_reindex.py --write          # also write the report to bench/RESULTS.md
    python3 bench/bench_reindex.py --parts 1,2     # only some parts

Parts (each measured figure in its own fresh process, so its peak memory is its own):
 1. bulk builder: build_index_file over a full default-geometry file (5,000,000 slots, 19,999,999 keys
    "TopicBench#order-<n>"), keys given as a lazily sliced sequence (numpy 'U' chunks generated on demand,
    generation counted in the time), hashing included.
 2. commit-log scan: scan_segment over a generated store (>= 2 GiB of 1 KiB messages in 1 GiB segments), next
    to a plain sequential read of the same files (warm page cache; and cold, when caches can be dropped).
 3. end-to-end `rmqtool spark-reindex` on that store in local mode (and --master inline), next to the plain read.
 4. incremental put_key throughput, select_phy_offsets latency, and `rmqtool query-key` wall time from a cold
    start on a store with several full index files.
Peak memory is VmHWM from /proc/<pid>/status (per process; for Spark every process of the job is sampled).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

T0 = 1_700_000_000_000
PREFIX = "TopicBench#order-"
TOPIC = "TopicBench"
GiB = 1 << 30


# ============================================================================ measurement helpers

def vmhwm_kb(pid: int | str = "self") -> int:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def machine() -> dict:
    cpu = "?"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal")) // 1024
    import numpy

    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    except (OSError, IndexError):
        java = "?"
    try:
        import pyspark
        spark = pyspark.__version__
    except ImportError:
        spark = "-"
    return {"nproc": os.cpu_count(), "mem_mib": mem, "cpu": cpu, "loadavg_at_start": open("/proc/loadavg").read().split()[:3],
            "kernel": platform.release(),
            "python": platform.python_version(), "numpy": numpy.__version__, "pyspark": spark, "java": java}


_SPIN = "import time,sys\nt=time.perf_counter()\nx=0\nfor i in range(10_000_000): x+=i\nprint(time.perf_counter()-t)"


def cpu_scaling() -> dict:
    """A CPU-bound Python loop alone, then two copies at once: how much the second vCPU really adds."""
    solo = float(subprocess.run([sys.executable, "-c", _SPIN], capture_output=True, text=True).stdout)
    ps = [subprocess.Popen([sys.executable, "-c", _SPIN], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    pair = [float(p.communicate()[0]) for p in ps]
    return {"solo_s": round(solo, 2), "two_at_once_s": [round(x, 2) for x in pair],
            "throughput_x": round(2 * solo / max(pair), 2)}


def child(*args: str, env=None) -> dict:
    """Run one measurement in a fresh interpreter; it prints one JSON object."""
    p = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


class TreeSampler:
    """Peak VmHWM of every process below a pid (the JVM, the Python workers, the driver)."""

    def __init__(self, pid: int):
        self.pid, self.peaks, self._stop = pid, {}, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()

    def _tree(self) -> list[int]:
        parent = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    parent[int(d)] = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    pass
        out, todo = [], [self.pid]
        while todo:
            p = todo.pop()
            out.append(p)
            todo.extend(c for c, pp in parent.items() if pp == p)
        return out

    def _run(self):
        while not self._stop.wait(0.1):
            for pid in self._tree():
                hwm = vmhwm_kb(pid)
                if not hwm:
                    continue
                try:
                    cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                exe = cmd.split(" ")[0]
                label = ("jvm" if exe.endswith("java") else "pyspark worker" if "pyspark" in cmd
                         else "rmqtool driver" if "rmqtool" in cmd else None)
                if label is None:  # short-lived helpers (shell, rm) are not part of the job's footprint
                    continue
                key = (pid, label)
                self.peaks[key] = max(self.peaks.get(key, 0), hwm)

    def by_label(self) -> dict:
        out: dict[str, list[int]] = {}
        for (pid, label), kb in self.peaks.items():
            out.setdefault(label, []).append(kb)
        return {k: {"processes": len(v), "max_mib": round(max(v) / 1024), "sum_mib": round(sum(v) / 1024)}
                for k, v in out.items()}


def med(xs):
    return statistics.median(xs)


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


MSG_SIZE = 1024


def _message(i: int, phy: int):
    from engine.broker.message import MessageRecord

    props = (f"KEYS\x01order-{i:08d} user-{i % 100000:05d}\x02UNIQ_KEY\x01C0A8010A1F2E3D4C5B6A7980{i:08X}\x02"
             f"TAGS\x01TagA\x02WAIT\x01true\x02").encode()
    r = MessageRecord(topic=TOPIC, queue_id=i % 8, queue_offset=i // 8, physical_offset=phy,
                      born_timestamp=T0 + i // 5 - 3, store_timestamp=T0 + i // 5, properties_raw=props)
    return r


def _body_len() -> int:
    from engine.broker.message import encode_record

    r = _message(0, 0)
    r.body = b""
    return MSG_SIZE - len(encode_record(r))


def gen_segment(path: str, seg_no: int, seg_size: int) -> int:
    """One full commit-log segment of MSG_SIZE-byte messages, ended by a BLANK filler (§3.1)."""
    from engine.broker.message import blank_record, encode_record

    per_seg = (seg_size - 8) // MSG_SIZE
    body_base = bytes(random.Random(seg_no).randbytes(MSG_SIZE))
    blen = _body_len()
    buf = bytearray(seg_size)
    start = seg_no * seg_size
    for j in range(per_seg):
        i = seg_no * per_seg + j
        r = _message(i, start + j * MSG_SIZE)
        r.body = body_base[i % 64:i % 64 + blen]
        data = encode_record(r)
        assert len(data) == MSG_SIZE
        buf[j * MSG_SIZE:(j + 1) * MSG_SIZE] = data
    pos = per_seg * MSG_SIZE
    buf[pos:pos + 8] = blank_record(seg_size - pos)
    with open(path, "wb") as f:
        f.write(buf)
    return per_seg


def ensure_store(store: Path, segments: int, seg_size: int) -> tuple[int, float]:
    """The bench store (reused when it is already there with the same geometry)."""
    cl = store / "commitlog"
    marker = store / "bench.json"
    want = {"segments": segments, "seg_size": seg_size, "msg_size": MSG_SIZE}
    if marker.exists() and json.loads(marker.read_text()) == want:
        return ((seg_size - 8) // MSG_SIZE) * segments, 0.0
    shutil.rmtree(store, ignore_errors=True)
    cl.mkdir(parents=True)
    t = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, __file__, "--child", "gen", str(cl / f"{s * seg_size:020d}"), str(s),
                               str(seg_size)]) for s in range(segments)]
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError("store generation failed")
    marker.write_text(json.dumps(want))
    return ((seg_size - 8) // MSG_SIZE) * segments, time.perf_counter() - t


# ============================================================================ child measurements

def c_builder(n: int, slots: int, items: int, path: str, form: str) -> dict:
    import numpy as np

    from engine.broker.index import build_index_file, build_index_file_from_hashes
    from engine.java.lang import java_string_hashes

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


def c_scan(paths: list[str]) -> dict:
    from engine.jobs.broker_index import scan_range
    from engine.jobs.ranges import whole_segment

    t = time.perf_counter()
    recs = keys = scanned = 0
    for i, p in enumerate(paths):
        sc = scan_range(whole_segment(i, p, int(os.path.basename(p))))
        recs += sc.records
        keys += sc.keys
        scanned += sc.bytes_scanned
    return {"seconds": time.perf_counter() - t, "records": recs, "keys": keys, "bytes_scanned": scanned,
            "peak_mib": round(vmhwm_kb() / 1024)}


def c_putkey(n: int, slots: int, items: int, path: str) -> dict:
    from engine.broker.index import IndexFile

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
    from engine.broker.index import IndexFile

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
        gen_segment(a[0], int(a[1]), int(a[2]))
        return
    if kind == "builder":
        out = c_builder(int(a[0]), int(a[1]), int(a[2]), a[3], a[4])
    elif kind == "read":
        out = c_read(a)
    elif kind == "scan":
        out = c_scan(a)
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
    res = {}
    child("read", *paths)  # warm the page cache
    reads = [child("read", *paths) for _ in range(cfg["repeat"])]
    scans = [child("scan", *paths) for _ in range(cfg["repeat"])]
    res["read_warm_s"] = med([r["seconds"] for r in reads])
    res["scan_warm_s"] = med([r["seconds"] for r in scans])
    res["bytes"] = reads[0]["bytes"]
    sc = scans[0]
    res.update(records=sc["records"], keys=sc["keys"], bytes_scanned=sc["bytes_scanned"], scan_peak_mib=sc["peak_mib"],
               read_peak_mib=reads[0]["peak_mib"])
    # Two segments at once (one process per segment): what two Spark executors do.
    t = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, __file__, "--child", "scan", p], stdout=subprocess.PIPE, text=True)
             for p in paths]
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    res["scan_parallel_wall_s"] = time.perf_counter() - t
    res["scan_parallel_s"] = max(o["seconds"] for o in outs)  # scanning time, without interpreter start-up
    res["scan_parallel_peak_mib"] = max(o["peak_mib"] for o in outs)
    cold = drop_caches()
    res["cold_available"] = cold
    if cold:
        res["read_cold_s"] = child("read", *paths)["seconds"]
        drop_caches()
        res["scan_cold_s"] = child("scan", *paths)["seconds"]
    mb = res["bytes"] / 1e6
    rep.append(f"### 2. Commit-log scan: {len(paths)} segments, {res['bytes'] / GiB:.2f} GiB, "
               f"{res['records']:,} messages of {MSG_SIZE} B, {res['keys']:,} keys\n")
    rep.append("`scan_segment` per segment (decode + key extraction + hashing, no CRC, as the dispatcher), "
               f"medians of {cfg['repeat']}; plain read = `readinto` of the same files in 16 MiB blocks.\n")
    rep.append("| figure | time | MB/s | messages/s | ratio to plain read | peak memory |\n|---|---|---|---|---|---|")
    rep.append(f"| plain sequential read (page cache) | {res['read_warm_s']:.2f} s | {mb / res['read_warm_s']:.0f} | - "
               f"| 1.0 | {res['read_peak_mib']} MiB |")
    rep.append(f"| **scan, 1 process (page cache)** | {res['scan_warm_s']:.2f} s | **{mb / res['scan_warm_s']:.0f}** | "
               f"**{res['records'] / res['scan_warm_s']:,.0f}** | **{res['scan_warm_s'] / res['read_warm_s']:.1f}x** | "
               f"{res['scan_peak_mib']} MiB |")
    rep.append(f"| scan, {len(paths)} processes in parallel (page cache) | {res['scan_parallel_s']:.2f} s | "
               f"{mb / res['scan_parallel_s']:.0f} | {res['records'] / res['scan_parallel_s']:,.0f} | "
               f"{res['scan_parallel_s'] / res['read_warm_s']:.1f}x | {res['scan_parallel_peak_mib']} MiB each |")
    if cold:
        rep.append(f"| plain sequential read (caches dropped) | {res['read_cold_s']:.2f} s | "
                   f"{mb / res['read_cold_s']:.0f} | - | 1.0 | - |")
        rep.append(f"| scan, 1 process (caches dropped) | {res['scan_cold_s']:.2f} s | {mb / res['scan_cold_s']:.0f} | "
                   f"{res['records'] / res['scan_cold_s']:,.0f} | {res['scan_cold_s'] / res['read_cold_s']:.1f}x | - |")
    rep.append("")
    return res


def _reindex_run(store: Path, out: Path, master: str, extra=()) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "rmqtool", "spark-reindex", "--store", str(store), "--out", str(out), "--master",
           master, "--json", *extra]
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with TreeSampler(p.pid) as s:
        so, se = p.communicate()
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"{cmd} failed: {se}")
    return {"wall_s": wall, "job": json.loads(so), "peaks": s.by_label()}


def _digest(d: Path) -> list[str]:
    import hashlib

    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())]


def part3(cfg, rep, p2) -> dict:
    store, work = cfg["store"], cfg["work"]
    paths = sorted(str(p) for p in (store / "commitlog").iterdir())
    read = p2["read_warm_s"] if p2 else child("read", *paths)["seconds"]
    spark_runs = [_reindex_run(store, work / "out-spark", "local[*]") for _ in range(cfg["repeat"])]
    inline = _reindex_run(store, work / "out-inline", "inline")
    same = _digest(work / "out-spark") == _digest(work / "out-inline")
    walls = [r["wall_s"] for r in spark_runs]
    r0 = spark_runs[len(spark_runs) // 2]
    res = {"spark_walls_s": walls, "spark_median_s": med(walls), "inline_s": inline["wall_s"], "read_s": read,
           "identical": same, "spark_job": r0["job"], "spark_peaks": r0["peaks"], "inline_peaks": inline["peaks"],
           "inline_job": inline["job"]}
    j = r0["job"]
    mb = j["bytes_read"] / 1e6
    rep.append(f"### 3. End-to-end `rmqtool spark-reindex` ({j['messages']:,} messages, {j['keys_indexed']:,} keys, "
               f"{j['index_files']} index file(s) of default geometry)\n")
    rep.append(f"`rmqtool spark-reindex --store STORE --out OUT --master local[*] --json`, wall time of the whole "
               f"command (interpreter, JVM start, scan, build, publish, JVM stop), {cfg['repeat']} runs; "
               "the rebuilt files of Spark and inline runs are byte-identical: "
               f"{'yes' if same else '**NO**'}.\n")
    rep.append("| figure | wall time | MB/s | ratio to plain read (page cache) |\n|---|---|---|---|")
    rep.append(f"| plain sequential read | {read:.2f} s | {mb / read:.0f} | 1.0 |")
    rep.append(f"| **spark-reindex --master local[*]** (runs: {', '.join(f'{w:.1f}' for w in walls)}) | "
               f"**{med(walls):.1f} s** | {mb / med(walls):.0f} | **{med(walls) / read:.1f}x** |")
    rep.append(f"| &nbsp;&nbsp;of which the job's scan stage / build stage | {j['scan_seconds']:.1f} s / "
               f"{j['build_seconds']:.1f} s | {mb / j['scan_seconds']:.0f} (scan) | "
               f"{j['scan_seconds'] / read:.1f}x (scan) |")
    rep.append(f"| spark-reindex --master inline (one process, no JVM) | {inline['wall_s']:.1f} s | "
               f"{mb / inline['wall_s']:.0f} | {inline['wall_s'] / read:.1f}x |")
    rep.append("")
    rep.append("Peak memory per process (VmHWM, sampled every 0.1 s):\n")
    rep.append("| run | process | count | peak of one | sum |\n|---|---|---|---|---|")
    for name, peaks in (("local[*]", r0["peaks"]), ("inline", inline["peaks"])):
        for label, v in sorted(peaks.items()):
            rep.append(f"| {name} | {label} | {v['processes']} | {v['max_mib']} MiB | {v['sum_mib']} MiB |")
    rep.append("")
    return res


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
    files = sorted(p for p in (s2 / "index").iterdir())
    n_msgs = p2_records(store)
    rnd = random.Random(9)
    cmd = [sys.executable, "-m", "rmqtool", "query-key", "--store", str(s2), "--hash-slots", str(qslots),
           "--max-index", str(qitems), "--topic", TOPIC, "--json"]
    walls_warm, walls_cold, found = [], [], 0
    base = []
    for i in range(cfg["repeat"] + 2):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "rmqtool", "--version"], check=True, capture_output=True)
        base.append(time.perf_counter() - t)
    for i in range(5):
        key = f"order-{rnd.randrange(n_msgs):08d}"
        t = time.perf_counter()
        p = subprocess.run([*cmd, "--key", key], capture_output=True, text=True)
        walls_warm.append(time.perf_counter() - t)
        found += p.returncode == 0 and bool(p.stdout.strip())
    dropped = False
    for i in range(3):
        key = f"order-{rnd.randrange(n_msgs):08d}"
        dropped = drop_caches()
        t = time.perf_counter()
        p = subprocess.run([*cmd, "--key", key], capture_output=True, text=True)
        walls_cold.append(time.perf_counter() - t)
        found += p.returncode == 0 and bool(p.stdout.strip())
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


def p2_records(store: Path) -> int:
    meta = json.loads((store / "bench.json").read_text())
    return ((meta["seg_size"] - 8) // MSG_SIZE) * meta["segments"]


# ============================================================================ main

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
    args = ap.parse_args()
    parts = {int(p) for p in args.parts.split(",")}
    work = Path(args.work) / ("quick" if args.quick else "full")
    work.mkdir(parents=True, exist_ok=True)
    if args.quick:
        cfg = {"builder": (999_999, 250_000, 1_000_000), "segments": 2, "seg_size": 32 << 20,
               "putkey": (50_000, 250_000, 1_000_000), "query_geom": (25_000, 100_000), "repeat": args.repeat or 1}
    else:
        cfg = {"builder": (19_999_999, 5_000_000, 20_000_000), "segments": 2, "seg_size": GiB,
               "putkey": (300_000, 5_000_000, 20_000_000), "query_geom": (250_000, 1_000_000),
               "repeat": args.repeat or 3}
    cfg["work"], cfg["store"] = work, work / "store"
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
                   f"{MSG_SIZE} bytes (topic {TOPIC}, UNIQ_KEY + 2 KEYS each = 3 index keys), written with "
                   "`engine.broker.message.encode_record`" + (f" in {gen_s:.0f} s." if gen_s else " (reused)."))
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
