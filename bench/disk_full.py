#!/usr/bin/env python3
"""Disk-full loop (issue 10 item 1): `rmqtool put` on a size-limited tmpfs with batches that overflow it.

Each run mounts a fresh tmpfs of a few hundred KiB to a few MiB (it needs root: `mount -t tmpfs -o size=N`),
and puts into a store on it, in two or three `put` invocations, more messages than fit (sizes, geometry, sync or
async flush and the number of queues vary by run). Then, on the full filesystem:

* no process died of a signal (SIGBUS above all: nothing maps an unallocated page);
* every failed `put` printed one line, `error: ...`, naming the store and its free space, and exit status 2;
* read-only commands work on the full store: `dump-commitlog` (no damaged record: no half record that looks
  valid), `get` of every acknowledged offset (each one returns the message acknowledged there, by UNIQ_KEY), and
  `query-key` by UNIQ_KEY for a sample;
* when the store was left unclean (abort marker), `recover` runs first (on a filesystem made 1 MiB larger,
  since repairing may need room) and the checks above run after it.

The last line is the figures: runs, acknowledged messages, lost (acknowledged but not readable as
acknowledged), signals. Exit status 0 only when lost and signals are 0 and every run was checked.

    sudo python3 bench/disk_full.py --runs 24            # the measured run
    sudo python3 bench/disk_full.py --runs 24 --write    # and record it in bench/RESULTS.md
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RMQTOOL = [sys.executable, "-m", "rmqtool"]
MARK_BEGIN = "<!-- disk-full:begin (written by bench/disk_full.py --write) -->"
MARK_END = "<!-- disk-full:end -->"


def cli(args: list[str], timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # a signal death shows where it happened
    return subprocess.run(RMQTOOL + [str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env=env, **kw)


def mount(d: Path, size: int) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], check=True)


def umount(d: Path) -> None:
    subprocess.run(["umount", str(d)], check=False)


def make_input(path: Path, run_no: int, part: int, n: int, rng: random.Random, queues: int) -> None:
    with open(path, "w") as f:
        for i in range(n):
            m = {"topic": f"Full{i % 2}", "queueId": rng.randrange(queues), "tags": f"t{i % 3}",
                 "keys": [f"r{run_no}-p{part}-m{i}", f"b{i % 7}"],
                 "uniqKey": f"U{run_no:03d}{part}{i:06d}{rng.getrandbits(24):06X}",
                 "body": "".join(rng.choice("abcdefgh") for _ in range(rng.randint(20, 1500)))}
            f.write(json.dumps(m) + "\n")


def one_run(run_no: int, work: Path, rng: random.Random, figures: dict, log) -> None:
    mnt = work / f"mnt{run_no}"
    mnt.mkdir()
    size = rng.choice([256, 384, 512, 768, 1024, 1536, 2048, 3072]) << 10
    seg = rng.choice([16 << 10, 32 << 10, 64 << 10, 128 << 10])
    slots, items = rng.choice([(64, 256), (256, 1024), (1024, 4096), (2048, 16384)])
    cq = rng.choice([400, 2000, 6000])
    queues = rng.choice([1, 4, 16])
    sync = rng.random() < 0.5
    geom = ["--commitlog-file-size", seg, "--hash-slots", slots, "--max-index", items, "--cq-file-size", cq]
    store = mnt / "store"
    mount(mnt, size)
    try:
        acks: list[dict] = []
        for part in range(rng.choice([2, 3])):
            inp = work / f"in{run_no}-{part}.jsonl"
            make_input(inp, run_no, part, rng.randint(200, 2500), rng, queues)
            r = cli(["put", "--store", store, *geom, "--from-jsonl", inp, "--json", *(["--sync-flush"] if sync else [])])
            got = [json.loads(line) for line in r.stdout.splitlines() if line.endswith("}")]
            acks += got
            figures["puts"] += 1
            if r.returncode < 0:
                figures["signals"] += 1
                log(f"run {run_no}: put died of signal {-r.returncode}: {r.stderr.strip()[:1200]}")
            elif r.returncode != 0:
                figures["stopped"] += 1
                err = r.stderr.strip().splitlines()
                if (store / "abort").exists():
                    log(f"run {run_no}: put stopped and left the store unclean: {r.stderr.strip()[:400]}")
                if r.returncode != 2 or len(err) != 1 or not err[0].startswith("error: ") or "free" not in err[0] \
                        or str(store) not in err[0]:
                    figures["bad_errors"] += 1
                    log(f"run {run_no}: put exit {r.returncode}, stderr {r.stderr.strip()!r}")
        figures["acknowledged"] += len(acks)
        unclean = (store / "abort").exists()
        if unclean:
            figures["recovered"] += 1
            subprocess.run(["mount", "-o", f"remount,size={size + (1 << 20)}", str(mnt)], check=True)
            r = cli(["recover", "--store", store, *geom[:6]])
            if r.returncode < 0:
                figures["signals"] += 1
            log(f"run {run_no}: store left unclean; recover exit {r.returncode}")
        check_store(run_no, store, geom, acks, rng, figures, log)
        log(f"run {run_no}: tmpfs {size >> 10} KiB, segment {seg >> 10} KiB, index {slots}x{items}, cq {cq}, "
            f"{queues} queue(s), {'sync' if sync else 'async'}: {len(acks)} acknowledged"
            f"{', recovered' if unclean else ''}")
    finally:
        umount(mnt)


def check_store(run_no: int, store: Path, geom: list, acks: list[dict], rng: random.Random, figures: dict,
                log) -> None:
    if not acks:
        return
    read_geom = geom[:6]
    r = cli(["dump-commitlog", "--store", store, "--json", *read_geom[:2]])
    if r.returncode < 0:
        figures["signals"] += 1
    entries = [json.loads(line) for line in r.stdout.splitlines()]
    damaged = [e for e in entries if e["type"] not in ("MESSAGE", "BLANK")]
    if damaged or r.returncode != 0:
        figures["damaged"] += len(damaged) or 1
        log(f"run {run_no}: dump-commitlog exit {r.returncode}: {damaged[:2]} {r.stderr.strip()[:300]}")
    offsets = "\n".join(str(a["commitLogOffset"]) for a in acks) + "\n"
    r = cli(["get", "--store", store, "--from-file", "-", "--json", *read_geom[:2]], input=offsets)
    if r.returncode < 0:
        figures["signals"] += 1
    got = {}
    for line in r.stdout.splitlines():
        j = json.loads(line)
        got[j["commitLogOffset"]] = j["uniqKey"]
    lost = [a for a in acks if got.get(a["commitLogOffset"]) != a["uniqKey"]]
    for a in rng.sample(acks, min(5, len(acks))):
        q = cli(["query-key", "--store", store, *read_geom[2:], "--topic", a["topic"], "--key", a["uniqKey"],
                 "--unique-key", "--json"])
        if q.returncode < 0:
            figures["signals"] += 1
        found = [json.loads(line)["commitLogOffset"] for line in q.stdout.splitlines() if line.strip()]
        if a["commitLogOffset"] not in found and a not in lost:
            lost.append(a)
    figures["lost"] += len(lost)
    if lost:
        log(f"run {run_no}: {len(lost)} acknowledged message(s) not readable, e.g. {lost[0]}")


def write_results(text: str) -> None:
    sys.path.insert(0, str(REPO))
    from bench.bench_put import write_results as write_block

    write_block(text, MARK_BEGIN, MARK_END)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=24)
    ap.add_argument("--seed", type=int, default=10)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--write", action="store_true", help="record the figures in bench/RESULTS.md")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("disk_full.py mounts size-limited tmpfs filesystems: run it as root", file=sys.stderr)
        return 2
    rng = random.Random(a.seed)
    figures = dict(puts=0, stopped=0, acknowledged=0, lost=0, signals=0, damaged=0, bad_errors=0, recovered=0)
    lines: list[str] = []

    def log(msg: str) -> None:
        lines.append(msg)
        print(msg, file=sys.stderr, flush=True)

    t0 = time.time()
    with tempfile.TemporaryDirectory(dir=a.workdir) as tmp:
        for i in range(a.runs):
            one_run(i, Path(tmp), rng, figures, log)
    summary = (f"runs: {a.runs}, acknowledged: {figures['acknowledged']}, lost: {figures['lost']}, "
               f"signals: {figures['signals']}")
    detail = (f"puts: {figures['puts']}, stopped by a full disk: {figures['stopped']}, badly reported: "
              f"{figures['bad_errors']}, damaged entries: {figures['damaged']}, recovered first: {figures['recovered']}")
    print(detail)
    print(summary)
    if a.write:
        write_results("\n".join([
            "## Disk-full loop (issue 10 item 1)", "",
            f"Produced by `sudo python3 bench/disk_full.py --runs {a.runs} --seed {a.seed} --write` on "
            f"{time.strftime('%Y-%m-%d %H:%M')} ({time.time() - t0:.0f} s). Each run: a fresh tmpfs of 256 KiB-3 MiB, "
            "2-3 `put --json` runs that overflow it (random geometry, queues, sync or async flush), then "
            "`dump-commitlog`, `get` of every acknowledged offset and `query-key` samples on the full store "
            "(after `recover` when it was left unclean).", "",
            f"    {detail}", f"    {summary}", "", "Per run:", "", *[f"    {x}" for x in lines]]))
    ok = figures["lost"] == 0 and figures["signals"] == 0 and figures["bad_errors"] == 0 and figures["damaged"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
