#!/usr/bin/env python3
"""Benchmark of `rmqtool tiered dispatch` (issue 12): tier-out throughput inline and on Spark local, next to a plain
read of the same local commit log measured in the same run, and the memory each needs.

    python3 bench/bench_dispatch.py            # 256 MiB store of 1 KiB messages in 8 queues
    python3 bench/bench_dispatch.py --quick    # 32 MiB
    python3 bench/bench_dispatch.py --write    # also put the report into bench/RESULTS.md (its own block)

Every figure is measured in a fresh process (its peak memory is its own): VmHWM from /proc, sampled every 0.1 s
over the whole process tree for Spark. Medians of --runs runs. The store is generated once under
/tmp/rmqtool-bench-dispatch with engine.broker.commitlog.message.encode_record and reused.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
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
MiB = 1 << 20
BEGIN = "<!-- dispatch-figures:begin (written by bench/bench_dispatch.py --write) -->"
END = "<!-- dispatch-figures:end -->"


def vmhwm_kb(pid) -> int:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    out = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def _name(pid: int, top: int) -> str:
    try:
        cmd = [c.decode(errors="replace") for c in open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0") if c]
    except OSError:
        return "?"
    if pid == top:
        return "rmqtool driver"
    if cmd and (cmd[0] == "java" or cmd[0].endswith("/java")):
        return "jvm"
    text = " ".join(cmd)
    return "pyspark worker" if "pyspark" in text else "other (launcher scripts)"


def run_measured(args: list[str]) -> tuple[dict, dict]:
    """Run a child; return its JSON result and the peak VmHWM (MiB) per kind of process in its tree."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    peaks: dict[int, tuple[str, int]] = {}
    stop = threading.Event()

    def sample():
        while not stop.wait(0.1):
            todo = [p.pid]
            while todo:
                pid = todo.pop()
                hwm = vmhwm_kb(pid)
                if hwm:
                    name = peaks.get(pid, (_name(pid, p.pid), 0))[0]
                    peaks[pid] = (name, max(hwm, peaks.get(pid, ("", 0))[1]))
                todo += _children(pid)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, err = p.communicate()
    stop.set()
    t.join()
    if p.returncode != 0:
        raise SystemExit(f"child failed: {' '.join(args)}\n{err[-2000:]}")
    mem: dict[str, list[int]] = {}
    for name, kb in peaks.values():
        mem.setdefault(name, []).append(kb // 1024)
    return json.loads(out.strip().splitlines()[-1]), mem


# ============================================================================ the store

def ensure_store(store: Path, total: int, queues: int, size: int = 1024) -> dict:
    info = store / "bench.json"
    if info.exists():
        d = json.loads(info.read_text())
        if d["total"] == total and d["queues"] == queues:
            return d
    shutil.rmtree(store, ignore_errors=True)
    from engine.broker.commitlog.message import MessageRecord, encode_record
    from engine.java.lang import java_string_hash

    cl_dir, n = store / "commitlog", total // size
    cl_dir.mkdir(parents=True)
    seg_size = 1 << 30
    units = {q: bytearray() for q in range(queues)}
    offset = 0
    with open(cl_dir / f"{0:020d}", "wb") as f:
        for i in range(n):
            q = i % queues
            rec = MessageRecord(topic="TopicBench", queue_id=q, queue_offset=i // queues, physical_offset=offset,
                                store_timestamp=T0 + i, born_timestamp=T0 + i,
                                properties={"KEYS": f"order-{i}", "TAGS": "TagA", "UNIQ_KEY": f"{i:032X}"})
            base = len(encode_record(rec))
            rec.body = b"x" * max(0, size - base)
            data = encode_record(rec)
            f.write(data)
            units[q] += offset.to_bytes(8, "big") + len(data).to_bytes(4, "big") + \
                java_string_hash("TagA").to_bytes(8, "big", signed=True)
            offset += len(data)
        f.truncate(seg_size)
    for q, u in units.items():
        d = store / "consumequeue" / "TopicBench" / str(q)
        d.mkdir(parents=True)
        (d / f"{0:020d}").write_bytes(bytes(u) + bytes(6_000_000 - len(u)) if len(u) < 6_000_000 else bytes(u))
    d = {"total": total, "queues": queues, "messages": n, "bytes": offset}
    info.write_text(json.dumps(d))
    return d


# ============================================================================ children

def child_plain(store: str) -> dict:
    """A plain read of the local commit log: every segment through the one bulk decoder."""
    import mmap

    from engine.broker.commitlog.records import RecordBatch, decode_segment
    t = time.perf_counter()
    n = 0
    for p in sorted(Path(store, "commitlog").iterdir()):
        with open(p, "rb") as f:
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        for item in decode_segment(m):
            if isinstance(item, RecordBatch):
                n += len(item)
        m.close()
    return {"seconds": time.perf_counter() - t, "records": n}


def child_dispatch(store: str, tier: str, master: str, meta: str) -> dict:
    from engine.broker.config.brokerconf import load_config
    from engine.tiered.flat.config import load_tiered_config
    from engine.tiered.flat.dispatch import DispatchRequest, dispatch
    setup = 0.0
    if master != "inline":
        from engine.exec.runners import SparkRunner
        t = time.perf_counter()
        SparkRunner(master)   # the session the job reuses: its start-up is reported apart
        setup = time.perf_counter() - t
    req = DispatchRequest(load_config(None, storePathRootDir=store), Path(tier),
                          load_tiered_config(None, tieredStoreCommitLogMaxSize=64 * MiB), Path(meta), "BenchCluster",
                          "broker-a", None, master)
    t = time.perf_counter()
    res = dispatch(req)
    return {"seconds": time.perf_counter() - t, "setup": setup, "messages": res.messages, "bytes": res.bytes,
            "problems": len(res.problems), "master": res.master}


def tier_digest(tier: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(tier.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(tier)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


# ============================================================================ report

def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--child", nargs="+")
    a = ap.parse_args()
    if a.child:
        fn = {"plain": child_plain, "dispatch": child_dispatch}[a.child[0]]
        print(json.dumps(fn(*a.child[1:])))
        return 0
    total = (32 if a.quick else 256) * MiB
    work = Path("/tmp/rmqtool-bench-dispatch")
    store = work / "store"
    t = time.perf_counter()
    info = ensure_store(store, total, 8)
    gen = time.perf_counter() - t
    me = [sys.executable, str(Path(__file__).resolve()), "--child"]
    rows, digests = {}, {}
    for label, kind, master in (("plain read (decode_segment)", "plain", None),
                                ("dispatch --master inline", "dispatch", "inline"),
                                ("dispatch --master local[2]", "dispatch", "local[2]")):
        runs = []
        for r in range(a.runs):
            tier, meta = work / f"tier-{r}", work / f"meta-{r}.json"
            shutil.rmtree(tier, ignore_errors=True)
            for m in (meta, meta.with_name(meta.name + ".bak")):
                m.unlink(missing_ok=True)
            args = me + ([kind, str(store)] if kind == "plain" else [kind, str(store), str(tier), master, str(meta)])
            res, mem = run_measured(args)
            runs.append((res, mem))
            if kind == "dispatch":
                assert res["problems"] == 0 and res["messages"] == info["messages"], res
                digests.setdefault(master, tier_digest(tier))
        rows[label] = runs
    report = render(info, gen, rows, digests, a)
    print(report)
    if a.write:
        path = ROOT / "bench" / "RESULTS.md"
        text = path.read_text() if path.exists() else ""
        block = f"{BEGIN}\n{report}\n{END}"
        if BEGIN in text:
            head, rest = text.split(BEGIN, 1)
            text = head + block + rest.split(END, 1)[1]
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
        path.write_text(text)
    return 0


def render(info: dict, gen: float, rows: dict, digests: dict, a) -> str:
    mb = info["bytes"] / 1e6
    plain = statistics.median(r["seconds"] for r, _ in rows["plain read (decode_segment)"])
    out = ["## Tiered dispatch: `rmqtool tiered dispatch` against a plain read\n",
           f"Produced by `python3 bench/bench_dispatch.py{' --quick' if a.quick else ''}` on "
           f"{time.strftime('%Y-%m-%d %H:%M')} ({platform.node()}, {os.cpu_count()} CPUs, load "
           f"{os.getloadavg()[0]:.2f} at the end; medians of {a.runs} runs, each in a fresh process).\n",
           f"Local store: one commit-log segment, {info['messages']:,} messages of 1 KiB in 8 queues of one topic "
           f"({info['bytes']:,} bytes; generated in {gen:.1f} s). Tier: tieredStoreCommitLogMaxSize 64 MiB, "
           "CONSUME_QUEUE 100 MiB. Inline and Spark tiers byte-identical: "
           f"{'yes' if len(set(digests.values())) == 1 else 'NO'}.\n",
           "| run | median time | MB/s | messages/s | ratio to the plain read | peak memory (VmHWM) |",
           "|---|---|---|---|---|---|"]
    for label, runs in rows.items():
        secs = statistics.median(r["seconds"] for r, _ in runs)
        mem: dict[str, list[int]] = {}
        for _, m in runs:   # the run with the largest peak, per kind of process
            for k, v in m.items():
                if k not in mem or max(v) > max(mem[k]):
                    mem[k] = v
        mtext = "; ".join(f"{k} {max(v)} MiB" + (f" (x{len(v)}, sum {sum(v)} MiB)" if len(v) > 1 else "")
                          for k, v in sorted(mem.items()))
        setup = statistics.median(r.get("setup", 0.0) for r, _ in runs)
        note = f" (+ {setup:.1f} s Spark session start, not counted)" if setup else ""
        out.append(f"| {label}{note} | {secs:.2f} s | {mb / secs:.0f} | {info['messages'] / secs:,.0f} | "
                   f"{secs / plain:.1f}x | {mtext} |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
