#!/usr/bin/env python3
"""recover on a log with many damaged records (issue 34 item 15): put N messages, flip 2 body bytes in every
K-th record, add the abort marker, run `recover --dry-run` then `recover`, and report what recover kept, the
placeholders it wrote and what it cut, with the seconds of each run; then check that every message whose record
was not damaged is still readable at its queue offset (one `get` per queue).

    python3 bench/bench_damaged_recover.py                      # the issue's 200,000 messages, every 60th
    python3 bench/bench_damaged_recover.py -n 6000 --every 60   # quick

The store is written under --workdir (a temporary folder by default, removed at the end). The last line is the
summary the issue note quotes.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RMQTOOL = [sys.executable, "-m", "rmqtool"]
ENV = dict(os.environ, PYTHONPATH=str(REPO))


def rmq(*args: str, code: int | None = 0) -> subprocess.CompletedProcess:
    r = subprocess.run([*RMQTOOL, *args], capture_output=True, text=True, env=ENV)
    if code is not None and r.returncode != code:
        raise SystemExit(f"rmqtool {' '.join(args[:2])} exited {r.returncode}: {r.stderr.strip()[-400:]}")
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--messages", type=int, default=200_000)
    ap.add_argument("--every", type=int, default=60, help="damage every K-th record (default 60)")
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args()
    work = a.workdir or Path(tempfile.mkdtemp(prefix="rmq-damaged-"))
    store = work / "store"
    try:
        src = work / "in.jsonl"
        with open(src, "w") as f:
            for i in range(a.messages):
                f.write(json.dumps({"topic": f"Topic{'AB'[i % 2]}", "queueId": i % 4, "keys": [f"k{i}"],
                                    "body": f"body {i} " + "x" * (60 + i % 97)}) + "\n")
        r = rmq("put", "-s", str(store), "--from-jsonl", str(src), "--json")
        acks = [json.loads(x) for x in r.stdout.splitlines()]
        bad = set(range(a.every - 1, len(acks), a.every))
        seg_size = (store / "commitlog" / "00000000000000000000").stat().st_size
        for i in sorted(bad):
            off = acks[i]["commitLogOffset"]
            seg = store / "commitlog" / f"{off - off % seg_size:020d}"
            with open(seg, "r+b") as fh:
                rec = os.pread(fh.fileno(), acks[i]["storeSize"], off % seg_size)
                pos = off % seg_size + rec.index(f"body {i} ".encode()) + 2  # two bytes of the body
                b = os.pread(fh.fileno(), 2, pos)
                os.pwrite(fh.fileno(), bytes(x ^ 0xFF for x in b), pos)
        (store / "abort").write_text("")
        t0 = time.monotonic()
        dry = json.loads(rmq("recover", "-s", str(store), "--dry-run", "--json").stdout)
        t_dry = time.monotonic() - t0
        t0 = time.monotonic()
        done = json.loads(rmq("recover", "-s", str(store), "--json").stdout)
        t_run = time.monotonic() - t0
        placeholders = sum(1 for p in done["skipped"] if p.get("placeholderFor"))
        missing = 0  # every intact message at its queue offset: one read per queue
        for topic, qid in sorted({(x["topic"], x["queueId"]) for x in acks}):
            r = rmq("get", "-s", str(store), "--topic", topic, "--queue-id", str(qid), "--queue-offset", "0",
                    "--count", str(len(acks)), "--json", code=None)
            got = {d["queueOffset"]: d["commitLogOffset"] for d in map(json.loads, r.stdout.splitlines())}
            missing += sum(1 for i, x in enumerate(acks) if i not in bad and (x["topic"], x["queueId"]) == (topic, qid)
                           and got.get(x["queueOffset"]) != x["commitLogOffset"])
        print(f"messages {len(acks):,}, damaged {len(bad):,} (every {a.every}th)")
        print(f"dry run: {t_dry:.1f} s, {dry['recordsScanned']:,} records kept, {dry['truncatedRecords']:,} cut")
        print(f"recover: {t_run:.1f} s, {done['recordsScanned']:,} kept, {placeholders:,} placeholders "
              f"({done['skippedRanges']:,} damaged ranges), {done['truncatedRecords']:,} cut, stop reason "
              f"{done['stopReason']!r}; intact messages missing: {missing}")
        print(f"SUMMARY n={len(acks)} damaged={len(bad)} kept={done['recordsScanned']} placeholders={placeholders} "
              f"cut={done['truncatedRecords']} dry_s={t_dry:.1f} recover_s={t_run:.1f} missing={missing}")
    finally:
        if a.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
