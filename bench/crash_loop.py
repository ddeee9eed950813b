#!/usr/bin/env python3
"""Crash loop: kill `rmqtool put --sync-flush` at random moments, recover, and prove nothing acknowledged is lost.

Each trial writes a fresh JSONL input of --messages messages (every message has two keys of its own), starts
`rmqtool put --sync-flush --json --from-jsonl` on it, reads the acknowledgement lines as they arrive, kills the
process with SIGKILL after a random delay, runs `rmqtool recover`, and checks:

* every acknowledged message is readable at its offset and carries what was sent (after each trial: the messages
  of that trial and a sample of --old-sample earlier ones; when a store is finished, every one of them),
* it is found by each of its keys and by its UNIQ_KEY (the engine's query, i.e. what `query-key` runs, for every
  message; the `query-key` command itself for a random sample),
* the commit log ends on a record boundary: a full walk with CRC checks meets no damaged record, and every
  byte after the end of data is zero,
* `rmqtool inspect-index --verify` passes,
* the next trial's `put` continues the store (and a last uninterrupted put at the end).

When a store is finished (every --trials-per-store trials, and at the end) its surviving records are put again,
unchanged, into a fresh store without any crash: its commit log, consume queues and index files must be
byte-identical to the recovered store's (the index repaired by recover is exactly what an uninterrupted put
writes).

The last line is the figures: trials, acknowledged messages, lost messages (must be 0), verify failures (must be
0). Exit status 0 only when both are 0.

    python3 bench/crash_loop.py --trials 200        # the large run
    python3 bench/crash_loop.py --trials 3 --messages 400   # what CI runs
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.broker.commitlog.log import CommitLog  # noqa: E402
from engine.broker.config.brokerconf import load_config  # noqa: E402
from engine.broker.consumequeue.queue import list_queues  # noqa: E402
from engine.broker.layout import list_index_files  # noqa: E402
from engine.broker.commitlog.message import VALID  # noqa: E402
from engine.broker.store import MessageStore  # noqa: E402

RMQTOOL = [sys.executable, "-m", "rmqtool"]


def geometry_args(a) -> list[str]:
    return ["--commitlog-file-size", str(a.commitlog_file_size), "--hash-slots", str(a.hash_slots),
            "--max-index", str(a.max_index)]


def run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(RMQTOOL + args, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def write_input(path: Path, trial: int, n: int, rng: random.Random) -> dict[str, dict]:
    msgs = {}
    with open(path, "w") as f:
        for i in range(n):
            uniq = f"U{trial:04d}{i:06d}{rng.getrandbits(32):08X}"
            m = {"topic": f"Crash{'AB'[i % 2]}", "queueId": i % 4, "tags": f"tag{i % 3}",
                 "keys": [f"t{trial}-m{i}", f"t{trial}-b{i}"], "uniqKey": uniq,
                 "body": "".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 300)))}
            msgs[uniq] = m
            f.write(json.dumps(m) + "\n")
    return msgs


def put_and_kill(store: Path, inp: Path, a, delay: float | None) -> tuple[list[dict], bool, float]:
    """Run put; kill it after `delay` seconds (None: let it finish). Returns (acks, killed, seconds to the
    first acknowledgement)."""
    t0 = time.monotonic()
    first_ack = [None]
    p = subprocess.Popen(RMQTOOL + ["put", "--store", str(store), "--sync-flush", "--json", "--from-jsonl", str(inp)]
                         + geometry_args(a), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    lines: list[bytes] = []

    def reader():
        for line in p.stdout:
            if first_ack[0] is None:
                first_ack[0] = time.monotonic() - t0
            lines.append(line)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    killed = False
    if delay is not None:
        try:
            p.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            killed = True
    try:
        p.wait(timeout=300)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    t.join(timeout=30)
    err = p.stderr.read().decode("utf-8", "replace")
    acks = []
    for line in lines:
        if not line.endswith(b"\n"):
            continue  # a line cut by the kill was never acknowledged
        acks.append(json.loads(line))
    if not killed and p.returncode != 0:
        raise RuntimeError(f"put failed (exit {p.returncode}): {err.strip()}")
    return acks, killed, first_ack[0] if first_ack[0] is not None else time.monotonic() - t0


def check_store(store: Path, a, acked: list[tuple[dict, dict]], rng: random.Random,
                cli_sample: int) -> tuple[int, list[str], list[str]]:
    """(lost messages, what was lost, other problems) for the store as it is now, checking `acked`."""
    problems: list[str] = []
    missing: list[str] = []
    cfg = load_config(None, storePathRootDir=str(store), maxHashSlotNum=a.hash_slots, maxIndexNum=a.max_index,
                      mappedFileSizeCommitLog=a.commitlog_file_size)
    lost = 0
    with MessageStore(cfg) as st:
        for ack, sent in acked:
            off = ack["commitLogOffset"]
            ok = True
            try:
                rec = st.get(off)
            except Exception as e:
                missing.append(f"acked message at {off} unreadable: {e}")
                lost += 1
                continue
            if rec.uniq_key != sent["uniqKey"] or rec.topic != sent["topic"] or rec.keys != sent["keys"] \
                    or rec.body.decode() != sent["body"]:
                missing.append(f"message at {off} is not what was sent")
                ok = False
            for key in sent["keys"]:
                res = st.query(sent["topic"], key, max_num=64)
                if off not in [m.physical_offset for m in res.messages]:
                    missing.append(f"message at {off} not found by key {key}")
                    ok = False
            res = st.query(sent["topic"], sent["uniqKey"], unique=True)
            if off not in [m.physical_offset for m in res.messages]:
                missing.append(f"message at {off} not found by its UNIQ_KEY")
                ok = False
            lost += not ok
        # The commit log ends on a record boundary and nothing but zeros follows.
        cl = st.commitlog
        end = cl.segments[0].start if cl.segments else 0
        for e in cl.walk(check_crc=True):
            if e.kind not in (VALID, "BLANK"):
                problems.append(f"commit log: {e.kind} at {e.offset}: {e.reason}")
                break
            end = e.offset + e.size if e.kind == VALID else cl.queue.find(e.offset).end
        if cl.segments:
            seg = cl.segments[-1]
            buf = cl.queue.buffer(seg)
            if seg.start <= end < seg.end and any(buf[end - seg.start:]):
                problems.append(f"commit log: non-zero bytes after the end of data at {end}")
            if cl.find_end() != end:
                problems.append(f"commit log: put would append at {cl.find_end()}, data ends at {end}")
    r = run(["inspect-index", "--store", str(store), "--verify", "--json"] + geometry_args(a))
    if r.returncode != 0:
        problems.append(f"inspect-index --verify exit {r.returncode}: {(r.stderr or r.stdout).strip()[:300]}")
    for ack, sent in rng.sample(acked, min(cli_sample, len(acked))):
        key = rng.choice(sent["keys"])
        r = run(["query-key", "--store", str(store), "--topic", sent["topic"], "--key", key, "--json"]
                + geometry_args(a))
        offs = [json.loads(line)["commitLogOffset"] for line in r.stdout.splitlines() if line.strip()]
        if r.returncode != 0 or ack["commitLogOffset"] not in offs:
            missing.append(f"query-key {sent['topic']} {key}: offset {ack['commitLogOffset']} not returned")
            lost += 1
    return lost, missing, problems


def store_bytes(store: Path) -> dict[str, bytes]:
    """Commit log, consume queues and index contents, in order (index names are clock times, so by position)."""
    out = {}
    for p in sorted((store / "commitlog").iterdir()):
        out[f"commitlog/{p.name}"] = p.read_bytes()
    for topic, qid in list_queues(store):
        d = store / "consumequeue" / topic / str(qid)
        for p in sorted(d.iterdir()):
            out[f"consumequeue/{topic}/{qid}/{p.name}"] = p.read_bytes()
    for i, p in enumerate(list_index_files(store / "index")):
        out[f"index#{i}"] = p.read_bytes()
    return out


def replay_reference(store: Path, ref: Path, a) -> list[str]:
    """Put every surviving record again, unchanged, into a fresh store; compare the bytes."""
    cfg = load_config(None, storePathRootDir=str(store), maxHashSlotNum=a.hash_slots, maxIndexNum=a.max_index,
                      mappedFileSizeCommitLog=a.commitlog_file_size)
    inp = ref.parent / "reference.jsonl"
    with MessageStore(cfg) as st, open(inp, "w") as f:
        cl = CommitLog(cfg.commitlog_dirs, a.commitlog_file_size)
        try:
            for e in cl.walk(check_crc=True):
                if e.kind == VALID:
                    f.write(json.dumps(e.record.to_json()) + "\n")
        finally:
            cl.close()
    shutil.rmtree(ref, ignore_errors=True)
    r = run(["put", "--store", str(ref), "--json", "--from-jsonl", str(inp)] + geometry_args(a), timeout=600)
    if r.returncode != 0:
        return [f"reference put failed: {r.stderr.strip()}"]
    got, want = store_bytes(store), store_bytes(ref)
    problems = []
    for k in sorted(set(got) | set(want)):
        if got.get(k) != want.get(k):
            problems.append(f"{k} differs from an uninterrupted put of the same messages")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--messages", type=int, default=3000, help="messages in each trial's input")
    ap.add_argument("--trials-per-store", type=int, default=10,
                    help="start a fresh store after this many trials (keeps the per-trial checks fast)")
    ap.add_argument("--max-delay", type=float, default=None,
                    help="kill within this many seconds (default: from the first uninterrupted run)")
    ap.add_argument("--cli-sample", type=int, default=3, help="acked messages checked with the query-key command "
                    "per trial")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--commitlog-file-size", type=int, default=65536)
    ap.add_argument("--hash-slots", type=int, default=64)
    ap.add_argument("--max-index", type=int, default=256)
    ap.add_argument("--no-reference", action="store_true", help="skip the byte-identity comparison")
    ap.add_argument("--old-sample", type=int, default=1000, help="messages acknowledged in earlier trials that are "
                    "checked again after each trial (all of them when a store is finished)")
    ap.add_argument("--full-check", action="store_true", help="check every acknowledged message after every trial")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    work = a.workdir or Path(tempfile.mkdtemp(prefix="rmq-crash-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"crash loop: seed {seed}, work dir {work}", file=sys.stderr)
    acked_total = lost_total = verify_failures = kills = 0
    store_no = 0
    store = None
    acked: list[tuple[dict, dict]] = []
    max_delay = a.max_delay
    first_ack = 0.0

    def finish_store() -> None:
        nonlocal verify_failures
        # The store continues: one more put, uninterrupted, then the byte-identity check.
        inp = work / "final.jsonl"
        sent = write_input(inp, 9999, 20, rng)
        try:
            acks, _, _ = put_and_kill(store, inp, a, None)
        except RuntimeError as e:
            print(f"  final put: {e}", file=sys.stderr)
            verify_failures += 1
            return
        acked.extend((ack, sent[ack["uniqKey"]]) for ack in acks)
        lost, missing, problems = check_store(store, a, acked, rng, 0)
        problems += missing
        if not a.no_reference:
            problems += replay_reference(store, work / f"reference{store_no}", a)
        for p in problems[:10]:
            print(f"  final check: {p}", file=sys.stderr)
        if problems:
            verify_failures += 1

    for trial in range(a.trials):
        if store is None or trial % a.trials_per_store == 0:
            if store is not None:
                finish_store()
            store_no += 1
            store = work / f"store{store_no}"
            shutil.rmtree(store, ignore_errors=True)
            acked = []
        inp = work / "input.jsonl"
        sent = write_input(inp, trial, a.messages, rng)
        if max_delay is None:
            t0 = time.monotonic()
            acks, killed, first_ack = put_and_kill(store, inp, a, None)  # calibrate: an uninterrupted run
            max_delay = max(0.3, (time.monotonic() - t0) * 1.05)
            print(f"  trial {trial}: uninterrupted run took {max_delay / 1.05:.2f}s, first ack after "
                  f"{first_ack:.2f}s", file=sys.stderr)
        else:
            # Mostly while messages are being written; sometimes while the writer starts up.
            lo = min(first_ack, max_delay) if rng.random() > 0.15 else 0.0
            try:
                t0 = time.monotonic()
                acks, killed, _ = put_and_kill(store, inp, a, rng.uniform(lo, max_delay))
                if not killed and a.max_delay is None:
                    # It finished before the kill: the machine got faster; aim inside the next run.
                    max_delay = max(0.3, min(max_delay, (time.monotonic() - t0) * 0.9))
            except RuntimeError as e:
                print(f"  trial {trial}: {e}", file=sys.stderr)
                verify_failures += 1
                continue
        kills += killed
        for ack in acks:
            acked.append((ack, sent[ack["uniqKey"]]))
        acked_total += len(acks)
        if not store.exists():
            # Killed before the writer created the store directory: there is nothing to recover.
            if a.verbose:
                print(f"  trial {trial}: killed before the store existed", file=sys.stderr)
            continue
        r = run(["recover", "--store", str(store), "--json"] + geometry_args(a))
        if r.returncode != 0:
            print(f"  trial {trial}: recover failed: {r.stderr.strip()}", file=sys.stderr)
            verify_failures += 1
            continue
        rep = json.loads(r.stdout)
        # Every message acknowledged in this trial; earlier ones by sample (all of them at the end of a store).
        new = acked[len(acked) - len(acks):]
        old = acked[:len(acked) - len(acks)]
        if not a.full_check and len(old) > a.old_sample:
            old = rng.sample(old, a.old_sample)
        lost, missing, problems = check_store(store, a, old + new, rng, a.cli_sample)
        lost_total += lost
        verify_failures += bool(problems)
        problems = missing + problems
        status = "ok" if not problems else f"{len(problems)} problem(s)"
        if a.verbose or problems:
            print(f"  trial {trial}: {'killed' if killed else 'finished'} after {len(acks)} acks; recover "
                  f"{rep['mode']}, truncated {rep['truncatedBytes']} bytes / {rep['truncatedRecords']} records, "
                  f"{rep['consumeQueues']['unitsRemoved']} units removed, {rep['consumeQueues']['unitsAdded']} added, "
                  f"index kept {len(rep['index']['kept'])} rebuilt {len(rep['index']['rebuilt'])} created "
                  f"{len(rep['index']['created'])} removed {len(rep['index']['removed'])}: {status}", file=sys.stderr)
        for p in problems[:10]:
            print(f"    {p}", file=sys.stderr)
    if store is not None:
        finish_store()
    if a.workdir is None and lost_total == 0 and verify_failures == 0:
        shutil.rmtree(work, ignore_errors=True)
    print(f"  ({kills} of {a.trials} puts were killed mid-batch)", file=sys.stderr)
    print(f"trials: {a.trials}, acknowledged messages: {acked_total}, lost messages: {lost_total}, "
          f"verify failures: {verify_failures}")
    return 0 if lost_total == 0 and verify_failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
