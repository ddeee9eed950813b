#!/usr/bin/env python3
"""print-msg by time range (issue 33 item 4): the index search against the full log scan (--scan-log).

A store of --messages messages of --body bytes (--queues queues of one topic, store times 1 ms apart, the clock
stepping back --step-ms once in the middle when --step-ms is given) is written once with the put pipeline, with
the broker's default index geometry. Then the same range (--fraction of the messages, from the middle) is asked
both ways through the engine (engine.broker.consumequeue.timerange.scan_time_range) in a fresh interpreter each: the time, the
bytes of the log read (Searched.logBytesRead: the 4 KiB pages of the record heads read plus the messages
printed), the index bytes read, and whether both answers are the same. A store of a few hundred MiB:

    python3 bench/bench_print_msg.py --messages 300000 --body 1000
    python3 bench/bench_print_msg.py --messages 300000 --body 1000 --step-ms 5000

Small run (checks that the script works): --messages 2000 --body 200.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
T0 = 1_700_000_000_000


def build_store(store: Path, n: int, body: int, queues: int, step_ms: int) -> tuple[int, int]:
    """Write the store; (begin, end) store times of the middle range are chosen by the caller."""
    from engine.broker.config.brokerconf import load_config
    from engine.broker.store import MessageStore
    from engine.broker.write.batch import MessageBatch

    cfg = load_config(None, storePathRootDir=str(store))
    with MessageStore(cfg, writable=True, create=True) as st:
        for a in range(0, n, 4096):
            b = MessageBatch()
            b.extend_json([{"topic": "BenchTopic", "queueId": i % queues, "keys": [f"order-{i:09d}"],
                            "storeTimestamp": T0 + i - (step_ms if step_ms and i >= n // 2 else 0),
                            "body": "x" * body} for i in range(a, min(n, a + 4096))])
            st.put_batch(b)
    return T0, T0 + n


ASK = """
import json, sys, time
from engine.broker.config.brokerconf import load_config
from engine.broker.store import MessageStore
from engine.broker.consumequeue.timerange import scan_time_range
store, begin, end, scan_log = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
t = time.perf_counter()
with MessageStore(load_config(None, storePathRootDir=store)) as st:
    scan = scan_time_range(st, "BenchTopic", begin, end, scan_log=scan_log, check_crc=False)
    found = sorted((f.queue_id, f.queue_offset) for f in scan)
    d = scan.searched.as_dict()
d["seconds"] = time.perf_counter() - t
d["found"] = len(found)
d["digest"] = hash(tuple(found))
print(json.dumps(d))
"""


def ask(store: Path, begin: int, end: int, scan_log: bool) -> dict:
    p = subprocess.run([sys.executable, "-c", ASK, str(store), str(begin), str(end), "1" if scan_log else "0"],
                       capture_output=True, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
                                                           "PYTHONHASHSEED": "0"})
    if p.returncode:
        raise SystemExit(p.stderr)
    return json.loads(p.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--body", type=int, default=1000)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--fraction", type=float, default=0.01, help="share of the messages in the range")
    ap.add_argument("--step-ms", type=int, default=0, help="the clock steps back this much halfway")
    ap.add_argument("--keep", type=Path, help="write the store here and keep it")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-print-msg-"))
    store = a.keep or tmp / "store"
    try:
        t = time.perf_counter()
        build_store(store, a.messages, a.body, a.queues, a.step_ms)
        print(f"store: {a.messages} messages of {a.body} B in {a.queues} queues, "
              f"written in {time.perf_counter() - t:.1f} s")
        mid = T0 + a.messages // 2 - (a.step_ms or 0)
        begin, end = mid, mid + max(int(a.messages * a.fraction), 1) - 1
        rows = {"index search": ask(store, begin, end, False), "full scan (--scan-log)": ask(store, begin, end, True)}
        log = next(iter(rows.values()))["logBytes"]
        print(f"range: {end - begin + 1} ms of store time; commit log {log / 2**20:.1f} MiB")
        print(f"{'':24} {'seconds':>8} {'log MiB read':>12} {'log %':>6} {'index MiB':>9} {'heads':>8} {'found':>7}")
        for name, d in rows.items():
            print(f"{name:24} {d['seconds']:8.2f} {d['logBytesRead'] / 2**20:12.1f} "
                  f"{100 * d['logBytesRead'] / max(d['logBytes'], 1):6.1f} {d['indexBytesRead'] / 2**20:9.1f} "
                  f"{d['headsRead']:8d} {d['found']:7d}")
        same = len({d["digest"] for d in rows.values()}) == 1
        print("same answer: " + ("yes" if same else "NO"))
        if not same:
            raise SystemExit(1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
