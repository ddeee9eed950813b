#!/usr/bin/env python3
"""`rmqtool timer list --json` and `rmqtool timer verify` with many pending timer messages: wall time and peak
memory of this checkout and of another revision (default main), next to what reading the records costs at best,
measured in the same run (issue 26, the timer store at scale).

The stores are bench_doctor's (bench/bench_doctor.py store_for, reused when present under --workdir): a 48 MiB
commit log of 16 MiB segments, 64 consume queues, and --timers timer messages put at its end with the timer log
and wheel the broker's enqueue writes, ten to a slot, all pending (they fire a day after they were written).

Then, taking turns, --runs times, each command a fresh process (interpreter start included):

* plain preads: every pending message's record read with one os.pread of its storeSize at its commitLogOffset
  (the records `timer list` and `verify` read; the list of them from `timer list --json`), after the timer log
  and the wheel read whole in 16 MiB blocks: what the work costs at best in Python, one record at a time;
* `python -c "import numpy"`: the interpreter and numpy, below every rmqtool command;
* rmqtool timer list --json, rmqtool timer verify --json --now <the store's time> (CRCs checked, the
  default) and rmqtool doctor --json --now <the same>, with this checkout and with the other revision
  (`git archive` of --before, unpacked under --workdir). Both must print the same bytes (else the bench stops).

Medians; the "per message" column is (median - import numpy) / pending messages. Memory: "anon", the anonymous
memory of the process (Pss_Anon, every 100 ms), and VmHWM, its peak RSS (it counts the clean page-cache pages of
the files it maps read-only). Before each timed command the store's allocated bytes are read once (a warm cache).

    python3 bench/bench_timer.py                       # 100,000 pending (3 runs) and 1,000,000 (1 run): 4 minutes
    python3 bench/bench_timer.py --timers 20000 --runs 1   # CI-sized
    python3 bench/bench_timer.py --write               # also replace the figures block in bench/RESULTS.md
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from bench_doctor import store_for, warm  # noqa: E402
from bench_recover import measure  # noqa: E402
from measure import compile_package  # noqa: E402

RMQTOOL = [sys.executable, "-m", "rmqtool"]
BEGIN, END = "<!-- timer-figures:begin (written by bench/bench_timer.py --write) -->", "<!-- timer-figures:end -->"

_PREADS = ("import os,sys,time\nt=time.monotonic()\nb=bytearray(16<<20);m=memoryview(b)\n"
           "for p in sys.argv[2:]:\n  fd=os.open(p,os.O_RDONLY)\n  while os.readv(fd,[m]): pass\n  os.close(fd)\n"
           "fds={}\nn=0\nfor line in open(sys.argv[1]):\n  p,off,size=line.split()\n  fd=fds.get(p)\n"
           "  if fd is None: fd=fds[p]=os.open(p,os.O_RDONLY)\n  n+=len(os.pread(fd,int(size),int(off)))\n"
           "print(time.monotonic()-t)")


def checkout(rev: str, work: Path) -> Path:
    """`rev` of this repository unpacked under work (reused when present), byte-compiled."""
    sha = subprocess.run(["git", "rev-parse", "--short", rev], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout.strip()
    dest = work / f"rmqtool-{sha}"
    if not (dest / ".unpacked").exists():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", sha], cwd=REPO, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        compile_package(dest)
        (dest / ".unpacked").write_text(sha)
    return dest


def record_list(root: Path, listing: str, path: Path) -> int:
    """The (segment file, position, size) of every listed record, one a line, for the plain preads."""
    segs = sorted(int(p.name) for p in (root / "commitlog").iterdir() if p.name.isdigit())
    size = (root / "commitlog" / f"{segs[0]:020d}").stat().st_size
    n = 0
    with open(path, "w") as f:
        for line in listing.splitlines():
            m = json.loads(line)
            off = m["commitLogOffset"]
            start = off // size * size
            f.write(f"{root / 'commitlog' / f'{start:020d}'} {off - start} {m['storeSize']}\n")
            n += 1
    return n


def run_store(root: Path, conf: Path, now: int, before: Path, runs: int, work: Path) -> dict:
    cmds = {"list": ["timer", "list", "--json", "-c", str(conf)],
            "verify": ["timer", "verify", "--json", "-c", str(conf), "--now", str(now)],
            "doctor": ["doctor", "--json", "-c", str(conf), "--now", str(now)]}
    rows: dict[str, list] = {k: [] for k in ("preads", "numpy", *(c + s for c in cmds for s in ("", "0")))}
    plain = [str(p) for p in sorted((root / "timerlog").iterdir())] + [str(root / "timerwheel")]
    recs = work / f"{root.name}.records"
    pending = 0
    for _ in range(runs):
        for k, cmd in cmds.items():
            warm(root)
            rows[k].append(measure(RMQTOOL + cmd))
            warm(root)
            rows[k + "0"].append(measure(RMQTOOL + cmd, code=before))
            if rows[k][-1]["out"] != rows[k + "0"][-1]["out"]:
                raise SystemExit(f"timer {k}: this checkout and {before.name} print different answers")
        if not pending:
            pending = record_list(root, rows["list"][-1]["out"], recs)
        warm(root)
        r = subprocess.run([sys.executable, "-c", _PREADS, str(recs), *plain], capture_output=True, text=True,
                           check=True)
        rows["preads"].append(float(r.stdout))
        rows["numpy"].append(measure([sys.executable, "-c", "import numpy"]))
    if json.loads(rows["verify"][-1]["out"])["counts"]["error"]:
        raise SystemExit("timer verify found errors in the generated store")
    out = {"store": str(root), "pending": pending, "preads": statistics.median(rows["preads"])}
    for k in ("numpy", *(c + s for c in cmds for s in ("", "0"))):
        out[k] = {m: statistics.median(r[m] for r in rows[k]) for m in ("s", "anon", "hwm")}
    return out


def table(results: list[dict], before: str) -> str:
    lines = [f"| pending | command | {before} | this branch | speed-up | per message ({before} -> this) | plain "
             f"preads of the records | python -c 'import numpy' | memory ({before} -> this) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        n, floor = r["pending"], r["numpy"]["s"]
        for k, name in (("list", "timer list --json"), ("verify", "timer verify --json"), ("doctor", "doctor --json")):
            a, b = r[k + "0"], r[k]
            lines.append("| " + " | ".join([
                f"{n:,}", name, f"{a['s']:.2f} s", f"{b['s']:.2f} s", f"**{a['s'] / b['s']:.2f}x**",
                f"{(a['s'] - floor) / n * 1e6:.1f} -> {(b['s'] - floor) / n * 1e6:.1f} us",
                f"{r['preads']:.2f} s ({b['s'] / r['preads']:.1f}x)", f"{floor:.2f} s",
                f"anon {a['anon']:.0f} -> {b['anon']:.0f} MiB, VmHWM {a['hwm']:.0f} -> {b['hwm']:.0f} MiB"]) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--timers", default="100000,1000000", help="pending timer messages, comma-separated")
    ap.add_argument("--runs", default="3,1", help="runs per store, comma-separated as --timers (the last one "
                    "for the rest)")
    ap.add_argument("--before", default="main", help="the revision to compare with (default main)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/rmqtool-bench"))
    ap.add_argument("--write", action="store_true", help="replace the figures block in bench/RESULTS.md")
    a = ap.parse_args()
    compile_package(REPO)
    t0 = time.monotonic()
    load = open("/proc/loadavg").read().split()[:3]
    a.workdir.mkdir(parents=True, exist_ok=True)
    before = checkout(a.before, a.workdir)
    results = []
    runs = [int(x) for x in a.runs.split(",")]
    for i, n in enumerate(int(x) for x in a.timers.split(",")):
        root = store_for(a.workdir, 48, 16, n, (8, 8), (16384, 2_000_000))
        meta = json.loads((root / ".generated").read_text())
        results.append(run_store(root, Path(meta["conf"]), meta["now"], before, runs[min(i, len(runs) - 1)],
                                 a.workdir))
    text = table(results, f"{a.before} ({before.name.split('-')[-1]})")
    print(text)
    if a.write:
        cmd = " ".join(["python3 bench/bench_timer.py"] + sys.argv[1:]).replace(" --write", "")
        block = (f"{BEGIN}\nProduced by `{cmd}` on {time.strftime('%Y-%m-%d %H:%M')} ({time.monotonic() - t0:.0f} s; "
                 f"load average at start {' '.join(load)}; nproc {os.cpu_count()}). Medians of {a.runs} run(s) per "
                 f"store; the same answers byte for byte from both revisions.\n\n{text}\n{END}")
        path = REPO / "bench" / "RESULTS.md"
        doc = path.read_text()
        doc = doc[:doc.index(BEGIN)] + block + doc[doc.index(END) + len(END):] if BEGIN in doc else \
            doc.rstrip() + "\n\n# The timer store at scale: timer list and verify (issue 26)\n\n" + block + "\n"
        path.write_text(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
