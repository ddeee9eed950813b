#!/usr/bin/env python3
"""recover, clean and verify at scale: time next to a plain read of the same files in the same run, and peak
memory (issue 13 items 1 and 7).

For each size (default 1, 2 and 4 GiB of commit log) a store is generated once with bench/gen_store.py under
--workdir (reused when present): 1 KB messages over 16 queues, UNIQ_KEY + 2 KEYS each, index geometry
300,000 slots x 1,200,000 items so the 4 GiB store has 10 index files. Then, each command in a fresh process,
median of --runs:

* plain read: every commit-log file read once with readinto in 16 MiB blocks (page cache warm), the reference;
* body CRCs alone: the seconds spent in CRC-32 (engine.java.crc.crc32, what recovery calls), one call per message
  body as the broker checks them, in one process (the decoding that finds the bodies is not counted): the floor
  of a CRC-checking recovery per core;
* recover (abnormal): the abort marker is put back before each run (a writer killed after its last flush);
* recover --full-scan (no abort marker): validates every record and every index item;
* clean --dry-run --force-now (plans the deletion of every segment but the last: the reading clean does);
* inspect-index --verify (every index file, every item against the commit log).

Every file of the store (commit log, consume queues, index files, checkpoint) is read once, untimed, before each
timed command, so that it runs on a warm page cache as the plain read does (this machine's page cache is small and
is emptied from time to time).

Memory: "anon", the anonymous memory of the command's process and its helper processes (the peak of their
Pss_Anon summed, from /proc/<pid>/smaps_rollup every 100 ms: a page a forked helper shares with its parent counts
once; never below the process's own RssAnon), the command's own peak RssAnon (/proc/<pid>/status, every 20 ms),
and VmHWM (peak RSS of the command's process, which includes clean file pages it maps read-only: page cache the
kernel can reclaim).

The project's bytecode is written first (bench/measure.py compile_package, as installing the package does), so
the commands do not compile rmqtool's modules on every run on a machine that sets PYTHONDONTWRITEBYTECODE.

    python3 bench/bench_recover.py                       # 1, 2, 4 GiB
    python3 bench/bench_recover.py --sizes 1 --runs 1    # quick
    python3 bench/bench_recover.py --write               # also replace the figures block in bench/RESULTS.md

The last line is the summary the issue note quotes.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from gen_store import GenSpec, gen_store  # noqa: E402
from measure import children, compile_package, proc_kb  # noqa: E402

RMQTOOL = [sys.executable, "-m", "rmqtool"]
SLOTS, ITEMS = 300_000, 1_200_000
GEOM = ["--hash-slots", str(SLOTS), "--max-index", str(ITEMS)]
BEGIN, END = "<!-- recover-figures:begin (written by bench/bench_recover.py --write) -->", "<!-- recover-figures:end -->"


def measure(args: list[str], code: Path = REPO, ok: tuple[int, ...] = (0,)) -> dict:
    """Run a command (with `code` as the rmqtool checkout it imports); wall time, exit code, peak anonymous memory
    (MiB: Pss_Anon summed over the command's process and its helper processes at each sample), peak RssAnon and
    VmHWM of the command's process (MiB). An exit code outside `ok` stops the bench."""
    t0 = time.monotonic()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=code,
                         env={**os.environ, "PYTHONPATH": str(code)})
    peak = {"RssAnon": 0, "VmHWM": 0, "tree": 0}
    n = 0

    def sample():
        nonlocal n
        while p.poll() is None:
            for k in ("VmHWM", "RssAnon"):
                peak[k] = max(peak[k], proc_kb(p.pid, k))
            n += 1
            if n % 5 == 1:  # smaps_rollup walks the page tables: every 100 ms, so the sampler stays light.
                # Pss_Anon: a page shared with a forked helper counts half in each, so the sum is each page once.
                tree = sum(proc_kb(q, "Pss_Anon", "smaps_rollup") for q in [p.pid, *children(p.pid)])
                peak["tree"] = max(peak["tree"], tree)
            time.sleep(0.02)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, err = p.communicate()
    wall = time.monotonic() - t0
    t.join()
    if p.returncode not in ok:
        raise SystemExit(f"{' '.join(args[2:6])} failed (exit {p.returncode}): {err.decode()[-500:]}")
    return {"s": wall, "anon": max(peak["tree"], peak["RssAnon"]) / 1024, "main_anon": peak["RssAnon"] / 1024,
            "hwm": peak["VmHWM"] / 1024, "out": out.decode()}


def plain_read(files: list[Path]) -> float:
    code = ("import sys,time\nt=time.monotonic()\nb=bytearray(16<<20);m=memoryview(b)\n"
            "for p in sys.argv[1:]:\n  f=open(p,'rb',buffering=0)\n  while f.readinto(m): pass\n  f.close()\n"
            "print(time.monotonic()-t)")
    r = subprocess.run([sys.executable, "-c", code, *map(str, files)], capture_output=True, text=True, check=True)
    return float(r.stdout)


_CRC_FLOOR = """
import mmap, sys, time
import numpy as np
from engine.broker.commitlog.records import RecordBatch, decode_segment
from engine.java.crc import crc32
spent = 0.0
for p in sys.argv[1:]:
    with open(p, 'rb') as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    mv = memoryview(m)
    for b in decode_segment(m):
        if not isinstance(b, RecordBatch):
            break
        s = b.body_pos.tolist(); e = (b.body_pos + np.maximum(b.body_len, 0)).tolist()
        t = time.monotonic()
        [crc32(mv[a:z]) for a, z in zip(s, e)]
        spent += time.monotonic() - t
        del b
    mv.release(); m.close()
print(spent)
"""


def warm(root: Path) -> None:
    """Read every file of the store once (untimed), so that the next command runs on a warm page cache, as the
    plain read it is compared with does. This machine's page cache is small and is emptied from time to time:
    a recover that found one 25 MB index file evicted took 0.6 s longer."""
    buf = bytearray(16 << 20)
    for d in ("commitlog", "consumequeue", "index"):
        for p in sorted((root / d).rglob("*")):
            if p.is_file() and not p.is_symlink():
                with open(p, "rb", buffering=0) as f:
                    while f.readinto(buf):
                        pass
    if (root / "checkpoint").is_file():
        (root / "checkpoint").read_bytes()


def crc_floor(files: list[Path]) -> float:
    """Seconds of CRC-32 alone over every body (one call per body, as the broker checks them), the
    decoding that finds the bodies not counted: a floor for any recovery that checks CRCs on one core."""
    r = subprocess.run([sys.executable, "-c", _CRC_FLOOR, *map(str, files)], capture_output=True, text=True,
                       check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    return float(r.stdout)


def store_for(work: Path, gib: int) -> Path:
    root = work / f"recover-{gib}g"
    done = root / ".generated"
    if not done.exists():
        import shutil

        shutil.rmtree(root, ignore_errors=True)
        r = gen_store(root, GenSpec(gib=gib, hash_slots=SLOTS, max_index=ITEMS))
        done.write_text(json.dumps(r.as_dict()))
        print(f"  generated {root}: {r.messages} messages in {r.seconds:.1f}s", file=sys.stderr)
    return root


def run_size(work: Path, gib: int, runs: int) -> dict:
    root = store_for(work, gib)
    files = sorted((root / "commitlog").iterdir())
    s = ["--store", str(root)]
    rows: dict[str, list] = {k: [] for k in ("read", "crc", "recover", "full", "clean", "verify")}
    for _ in range(runs):
        plain_read(files)  # warm the page cache
        rows["read"].append(plain_read(files))
        rows["crc"].append(crc_floor(files))
        (root / "abort").write_text("1")
        warm(root)
        rows["recover"].append(measure(RMQTOOL + ["recover", "--json", *s, *GEOM]))
        warm(root)
        rows["full"].append(measure(RMQTOOL + ["recover", "--full-scan", "--json", *s, *GEOM]))
        warm(root)
        rows["clean"].append(measure(RMQTOOL + ["clean", "--dry-run", "--force-now", "--json", *s, *GEOM]))
        warm(root)
        rows["verify"].append(measure(RMQTOOL + ["inspect-index", "--verify", "--json", *s, *GEOM]))
    for k in ("recover", "full"):
        d = json.loads(rows[k][-1]["out"])
        if not d["consistent"] or d["skipped"] or d["truncatedBytes"]:
            raise SystemExit(f"recover found damage in the generated store: {d['actions']}")
    info = json.loads((root / ".generated").read_text())
    out = {"gib": gib, "bytes": sum(f.stat().st_size for f in files), "messages": info["messages"],
           "index_files": len(info["index_files"]), "read": statistics.median(rows["read"]),
           "crc": statistics.median(rows["crc"])}
    for k in ("recover", "full", "clean", "verify"):
        out[k] = {m: statistics.median(r[m] for r in rows[k]) for m in ("s", "anon", "main_anon", "hwm")}
    return out


def table(results: list[dict]) -> str:
    lines = ["| commit log | messages | index files | plain read | body CRCs alone (1 core) | recover (abnormal) | "
             "recover --full-scan | clean --dry-run | inspect-index --verify |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        cells = [f"{r['gib']} GiB", f"{r['messages']:,}", str(r["index_files"]), f"{r['read']:.2f} s",
                 f"{r['crc']:.2f} s = {r['crc'] / r['read']:.1f}x"]
        for k in ("recover", "full", "clean", "verify"):
            m = r[k]
            cells.append(f"{m['s']:.2f} s = **{m['s'] / r['read']:.1f}x**; anon {m['anon']:.0f} MiB "
                         f"(RssAnon {m['main_anon']:.0f}), "
                         f"VmHWM {m['hwm']:.0f} MiB")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1,2,4", help="GiB of commit log, comma-separated")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/rmqtool-bench"))
    ap.add_argument("--write", action="store_true", help="replace the figures block in bench/RESULTS.md")
    a = ap.parse_args()
    a.workdir.mkdir(parents=True, exist_ok=True)
    compile_package(REPO)
    t0 = time.monotonic()
    load = open("/proc/loadavg").read().split()[:3]
    results = [run_size(a.workdir, int(g), a.runs) for g in a.sizes.split(",")]
    text = table(results)
    print(text)
    if a.write:
        block = (f"{BEGIN}\nProduced by `python3 bench/bench_recover.py --sizes {a.sizes} --runs {a.runs}` on "
                 f"{time.strftime('%Y-%m-%d %H:%M')} ({time.monotonic() - t0:.0f} s; load average at start "
                 f"{' '.join(load)}; nproc {os.cpu_count()}). Medians; ratios are to the plain read of the same "
                 f"files in the same run.\n\n{text}\n{END}")
        path = REPO / "bench" / "RESULTS.md"
        doc = path.read_text()
        doc = doc[:doc.index(BEGIN)] + block + doc[doc.index(END) + len(END):] if BEGIN in doc else \
            doc.rstrip() + "\n\n# Recover, clean and verify at scale (issue 13 items 1 and 7)\n\n" + block + "\n"
        path.write_text(doc)
    worst = max(r["recover"]["s"] / r["read"] for r in results)
    worst_full = max(r["full"]["s"] / r["read"] for r in results)
    anon = max(max(r[k]["anon"] for k in ("recover", "full", "clean", "verify")) for r in results)
    print(f"sizes: {a.sizes} GiB, recover ratio: {worst:.1f}x, full-scan ratio: {worst_full:.1f}x, "
          f"peak anon (process and helpers): {anon:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
