#!/usr/bin/env python3
"""`rmqtool doctor` and `rmqtool info` on a production-shaped store: wall time and peak memory next to what the
work costs at best, measured in the same run, and how doctor's time grows with the commit log (issue 26 item 3).

Each store is generated once under --workdir with bench/gen_store.py (reused when present): 2,048 consume queues
(64 topics x 32 queues), 388-byte records (a 200-byte body, UNIQ_KEY + 2 KEYS: 3 index keys each), default index
geometry (5,000,000 slots x 20,000,000 items: a 2.4 GiB commit log fills one 420 MB index file), commit-log
segments of --segment-mib, and a timer store: --timers timer messages put at the end of the log
(rmq_sys_wheel_timer/0, engine.broker.store.MessageStore) with their timer log and wheel written as the broker's
enqueue writes them (engine.timer.write.TimerStoreWriter), firing a day after they were written.

Then, taking turns, --runs times, each command a fresh process (interpreter start included):

* plain read: the bytes doctor reads, read once with pread in 16 MiB blocks (a `cat` of them, holes skipped):
  the commit log from where doctor's walk starts (its summary.read.commitLogFrom, from a doctor run of the same
  round) to the end, every consume-queue file's allocated bytes, the timer log and wheel's allocated bytes, and
  the index files' 40-byte headers: what the work costs at best;
* body CRCs: the seconds of CRC-32 over every body of the commit-log segments that walk touches, one call per
  body (decoding not counted): the floor of a walk that checks CRCs as the broker's recovery does
  (checkCRCOnRecover, on by default);
* rmqtool doctor --json (the store is healthy: exit 0);
* rmqtool info --json, next to `python -c "import numpy"` (the interpreter and numpy, which the engine modules
  info loads import: info's floor, since what it reads is directory listings, stat and 40-byte headers);

Medians; ratios are to the reference in the same row. Memory: "anon", the anonymous memory of the process and
any helper (Pss_Anon summed, every 100 ms), and VmHWM, the peak RSS of the process (it counts the clean page-cache
pages of the files it maps read-only). Before each timed command the store's allocated bytes are read once,
untimed (a warm page cache, as the plain read has). The "doctor read" column is what doctor says it walked
(summary.read): its bytes should not grow with the log.

    python3 bench/bench_doctor.py                          # 1 and 4 GiB, 256 MiB segments (about 6 minutes)
    python3 bench/bench_doctor.py --small                  # CI-sized: 48 and 192 MiB, 16 MiB segments
    python3 bench/bench_doctor.py --store /data/store      # an existing store (its own geometry), no growth row
    python3 bench/bench_doctor.py --profile                # also cProfile one doctor run on the largest store
    python3 bench/bench_doctor.py --write                  # also replace the figures block in bench/RESULTS.md
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

from bench_recover import crc_floor, measure  # noqa: E402
from gen_store import GenSpec, gen_store  # noqa: E402
from measure import compile_package  # noqa: E402

RMQTOOL = [sys.executable, "-m", "rmqtool"]
BEGIN, END = "<!-- doctor-figures:begin (written by bench/bench_doctor.py --write) -->", "<!-- doctor-figures:end -->"
FIRE_AFTER_MS = 86_400_000


def add_timer_store(root: Path, conf: Path, count: int) -> int:
    """`count` timer messages appended to the store (commit log, consume queue, index through MessageStore) and
    the timer store that holds them pending. Returns the time they were written (epoch ms), doctor's --now."""
    from engine.broker.commitlog.message import MessageRecord
    from engine.broker.config.brokerconf import load_config
    from engine.broker.store import MessageStore
    from engine.broker.write.batch import MessageBatch
    from engine.timer.codec import TimerCheckpoint
    from engine.timer.layout import TimerGeometry, TimerLayout
    from engine.timer.write import TimerStoreWriter

    cfg = load_config(conf)
    write_ms = int(time.time()) * 1000
    # Ten to a slot (chains of ten units), in whole seconds as the broker floors them (timerPrecisionMs).
    fire = [write_ms + FIRE_AFTER_MS + i // 10 * 1000 for i in range(count)]
    puts = []
    with MessageStore(cfg, writable=True) as st:
        for lo in range(0, count, 1000):
            batch = MessageBatch(0)
            for i in range(lo, min(count, lo + 1000)):
                batch.add_record(MessageRecord(
                    topic="rmq_sys_wheel_timer", queue_id=0, body=b"t" * 200,
                    properties={"REAL_TOPIC": "BenchTimer", "REAL_QID": str(i % 8), "KEYS": f"timer-{i}",
                                "TAGS": "t", "TIMER_OUT_MS": str(fire[i])}))
            res = st.put_batch(batch)
            if res.error is not None:
                raise res.error
            puts += res.results()
    w = TimerStoreWriter(TimerLayout.of(cfg), TimerGeometry.of(cfg))
    for i, r in enumerate(puts):
        w.enqueue(r.commitLogOffset, r.storeSize, fire[i], write_ms, "BenchTimer")
    w.write(TimerCheckpoint(write_ms, w.end, count, count))
    return write_ms


def store_for(work: Path, mib: int, seg_mib: int, timers: int, queues: tuple[int, int], geom: tuple[int, int]) -> Path:
    root = work / f"doctor-{mib}m-seg{seg_mib}m-q{queues[0] * queues[1]}-t{timers}"
    done = root / ".generated"
    if not done.exists():
        import shutil

        shutil.rmtree(root, ignore_errors=True)
        t = time.monotonic()
        r = gen_store(root, GenSpec(gib=mib / 1024, body_size=200, topics=queues[0], queues_per_topic=queues[1],
                                    commitlog_file_size=seg_mib << 20, hash_slots=geom[0], max_index=geom[1]))
        conf = root.parent / f"{root.name}.conf"
        conf.write_text(f"storePathRootDir={root}\nmappedFileSizeCommitLog={seg_mib << 20}\n"
                        f"maxHashSlotNum={geom[0]}\nmaxIndexNum={geom[1]}\n")
        now = add_timer_store(root, conf, timers) if timers else int(time.time() * 1000)
        # config/topics.json as a broker keeps it (gen_store writes no config): from what the store holds.
        subprocess.run(RMQTOOL + ["repair", "config", "-c", str(conf), "topics.json", "--from-store", "-Q"],
                       check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL)
        done.write_text(json.dumps({**r.as_dict(), "now": now, "conf": str(conf)}))
        print(f"  generated {root}: {r.messages} messages, {timers} timer messages in "
              f"{time.monotonic() - t:.1f}s", file=sys.stderr)
    return root


def warm(root: Path) -> None:
    """Read the allocated bytes of every file of the store once (untimed; holes skipped)."""
    buf = bytearray(16 << 20)
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.is_symlink():
            continue
        fd = os.open(p, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            pos = 0
            while pos < size:
                try:
                    pos = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError:
                    break
                end = os.lseek(fd, pos, os.SEEK_HOLE)
                while pos < end:
                    n = os.preadv(fd, [memoryview(buf)[:min(len(buf), end - pos)]], pos)
                    if n <= 0:
                        break
                    pos += n
        finally:
            os.close(fd)


_READ_RANGES = ("import json,os,sys,time\nranges=json.load(sys.stdin)\nt=time.monotonic()\nb=bytearray(16<<20)\n"
                "m=memoryview(b)\nfor p,lo,hi in ranges:\n  fd=os.open(p,os.O_RDONLY)\n  while lo<hi:\n"
                "    n=os.preadv(fd,[m[:min(len(b),hi-lo)]],lo)\n    if n<=0: break\n    lo+=n\n  os.close(fd)\n"
                "print(time.monotonic()-t)")


def read_ranges(ranges: list[tuple[str, int, int]]) -> float:
    """Seconds a fresh process takes to read these (path, from, to) byte ranges."""
    r = subprocess.run([sys.executable, "-c", _READ_RANGES], input=json.dumps(ranges), capture_output=True,
                       text=True, check=True)
    return float(r.stdout)


def _allocated(p: Path) -> list[tuple[str, int, int]]:
    fd = os.open(p, os.O_RDONLY)
    try:
        size, pos, out = os.fstat(fd).st_size, 0, []
        while pos < size:
            try:
                pos = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:
                break
            end = os.lseek(fd, pos, os.SEEK_HOLE)
            out.append((str(p), pos, end))
            pos = end
        return out
    finally:
        os.close(fd)


def doctor_reads(root: Path, segs: list[Path], walk_from: int) -> tuple[list, list[Path]]:
    """The byte ranges doctor reads (see the module docstring) and the commit-log segments its walk touches."""
    size = segs[0].stat().st_size if segs else 1
    touched = [p for p in segs if int(p.name) + size > walk_from]
    ranges = [(str(p), max(0, walk_from - int(p.name)), size) for p in touched]
    for d in ("consumequeue", "timerlog"):
        for p in sorted((root / d).rglob("*")) if (root / d).is_dir() else []:
            if p.is_file():
                ranges += _allocated(p)
    if (root / "timerwheel").is_file():
        ranges += _allocated(root / "timerwheel")
    for p in sorted((root / "index").iterdir()) if (root / "index").is_dir() else []:
        ranges.append((str(p), 0, 40))
    return ranges, touched


def run_store(root: Path, conf: Path | None, now: int | None, runs: int) -> dict:
    s = ["-c", str(conf)] if conf is not None else ["-s", str(root)]
    segs = sorted(p for p in (root / "commitlog").iterdir() if p.name.isdigit())
    doctor = RMQTOOL + ["doctor", "--json", *s] + (["--now", str(now)] if now else [])
    rows: dict[str, list] = {k: [] for k in ("read", "crc", "doctor", "info", "numpy")}
    for _ in range(runs):
        warm(root)
        rows["doctor"].append(measure(doctor))
        read = json.loads(rows["doctor"][-1]["out"])["summary"].get("read") or {"commitLogFrom": 0}
        ranges, touched = doctor_reads(root, segs, read["commitLogFrom"])
        warm(root)
        rows["read"].append(read_ranges(ranges))
        rows["crc"].append(crc_floor(touched))
        rows["numpy"].append(measure([sys.executable, "-c", "import numpy"]))
        rows["info"].append(measure(RMQTOOL + ["info", "--json", *s]))
    rep = json.loads(rows["doctor"][-1]["out"])
    if not rep["healthy"]:
        raise SystemExit(f"doctor found errors in the generated store: {rep['findings'][:3]}")
    out = {"store": str(root), "bytes": sum(p.stat().st_size for p in segs), "segments": len(segs),
           "window": sum(hi - lo for _, lo, hi in ranges),
           "queues": sum(1 for _ in (root / "consumequeue").glob("*/*")),
           "index_files": len(list((root / "index").iterdir())) if (root / "index").is_dir() else 0,
           "read": statistics.median(rows["read"]), "crc": statistics.median(rows["crc"]),
           "doctor_read": rep["summary"].get("read"), "findings": rep["summary"]["findings"],
           "timer": (root / "timerwheel").exists()}
    for k in ("doctor", "info", "numpy"):
        out[k] = {m: statistics.median(r[m] for r in rows[k]) for m in ("s", "anon", "hwm")}
    return out


def profile(root: Path, conf: Path | None, now: int | None, top: int = 18) -> str:
    """cProfile of one in-process doctor run: the functions with the most cumulative time."""
    code = ("import cProfile,pstats,sys,io\nfrom rmqtool.app import main\nsys.argv=['rmqtool']+sys.argv[1:]\n"
            "p=cProfile.Profile()\ntry:\n  p.runcall(main)\nexcept SystemExit:\n  pass\n"
            f"s=io.StringIO();pstats.Stats(p,stream=s).sort_stats('cumtime').print_stats({top});"
            "sys.stderr.write(s.getvalue())")
    s = ["-c", str(conf)] if conf is not None else ["-s", str(root)]
    r = subprocess.run([sys.executable, "-c", code, "doctor", "--json", *s] + (["--now", str(now)] if now else []),
                       capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    return r.stderr


def _read_cell(r: dict) -> str:
    d = r["doctor_read"]
    if not d:
        return "?"
    return f"{d['commitLogBytes'] / 2**20:,.0f} MiB from {d['commitLogFrom']:,}"


def table(results: list[dict]) -> str:
    lines = ["| commit log | segments | queues | index files | timer store | plain read of what doctor reads | body CRCs "
             "| doctor --json | doctor read | info --json | python -c 'import numpy' |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        d, i, v = r["doctor"], r["info"], r['numpy']
        lines.append("| " + " | ".join([
            f"{r['bytes'] / 2**30:.2f} GiB", str(r["segments"]), f"{r['queues']:,}", str(r["index_files"]),
            "yes" if r["timer"] else "no", f"{r['window'] / 2**20:,.0f} MiB in {r['read']:.2f} s",
            f"{r['crc']:.2f} s",
            f"{d['s']:.2f} s = **{d['s'] / r['read']:.1f}x** read, {d['s'] / max(r['crc'], 1e-9):.1f}x CRCs; "
            f"anon {d['anon']:.0f} MiB, VmHWM {d['hwm']:.0f} MiB", _read_cell(r),
            f"{i['s']:.2f} s = **{i['s'] / v['s']:.1f}x** import numpy; anon {i['anon']:.0f} MiB, "
            f"VmHWM {i['hwm']:.0f} MiB", f"{v['s']:.2f} s"]) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=None, help="MiB of commit log, comma-separated (default 1024,4096; "
                    "--small: 48,192)")
    ap.add_argument("--segment-mib", type=int, default=None, help="commit-log segment size (default 256; --small 16)")
    ap.add_argument("--timers", type=int, default=None, help="timer messages (default 100000; --small 2000)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="CI-sized stores: 64 queues, small index geometry")
    ap.add_argument("--store", type=Path, help="measure this existing store instead (read-only; no growth row)")
    ap.add_argument("--conf", type=Path, help="with --store: its broker.conf")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/rmqtool-bench"))
    ap.add_argument("--profile", action="store_true", help="also print a cProfile of doctor on the largest store")
    ap.add_argument("--write", action="store_true", help="replace the figures block in bench/RESULTS.md")
    a = ap.parse_args()
    sizes = [int(x) for x in (a.sizes or ("48,192" if a.small else "1024,4096")).split(",")]
    seg = a.segment_mib or (16 if a.small else 256)
    timers = a.timers if a.timers is not None else (2000 if a.small else 100_000)
    queues = (8, 8) if a.small else (64, 32)
    geom = (16384, 2_000_000) if a.small else (5_000_000, 20_000_000)
    compile_package(REPO)
    t0 = time.monotonic()
    load = open("/proc/loadavg").read().split()[:3]
    if a.store is not None:
        targets = [(a.store, a.conf, None)]
    else:
        a.workdir.mkdir(parents=True, exist_ok=True)
        targets = []
        for mib in sizes:
            root = store_for(a.workdir, mib, seg, timers, queues, geom)
            meta = json.loads((root / ".generated").read_text())
            targets.append((root, Path(meta["conf"]), meta["now"]))
    results = [run_store(root, conf, now, a.runs) for root, conf, now in targets]
    text = table(results)
    print(text)
    if len(results) > 1:
        lo, hi = results[0], results[-1]
        growth = (f"doctor at {hi['bytes'] / 2**30:.2f} GiB / at {lo['bytes'] / 2**30:.2f} GiB of commit log "
                  f"({hi['bytes'] / lo['bytes']:.1f}x the log): {hi['doctor']['s'] / lo['doctor']['s']:.2f}x the time")
        print(growth)
    else:
        growth = ""
    if a.profile:
        print(profile(*targets[-1]))
    if a.write:
        cmd = " ".join(["python3 bench/bench_doctor.py"] + sys.argv[1:]).replace(" --write", "")
        block = (f"{BEGIN}\nProduced by `{cmd}` on {time.strftime('%Y-%m-%d %H:%M')} ({time.monotonic() - t0:.0f} s; "
                 f"load average at start {' '.join(load)}; nproc {os.cpu_count()}). Medians of {a.runs}; ratios to "
                 f"the references in the same row.\n\n{text}\n\n{growth}\n{END}")
        path = REPO / "bench" / "RESULTS.md"
        doc = path.read_text()
        doc = doc[:doc.index(BEGIN)] + block + doc[doc.index(END) + len(END):] if BEGIN in doc else \
            doc.rstrip() + "\n\n# doctor and info at scale (issue 26 item 3)\n\n" + block + "\n"
        path.write_text(doc)
    worst = max(r["doctor"]["s"] / r["read"] for r in results)
    anon = max(r["doctor"]["anon"] for r in results)
    print(f"doctor: worst {worst:.1f}x the plain read of what it reads; peak anon {anon:.0f} MiB; "
          f"info worst {max(r['info']['s'] / r['numpy']['s'] for r in results):.1f}x python -c 'import numpy'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
