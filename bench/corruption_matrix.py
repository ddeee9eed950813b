#!/usr/bin/env python3
"""Corruption matrix: damage a store in every way bench/corruption_cases.py lists and run every command on it.

Cases (each on a fresh copy of one small store; see corruption_cases.py): torn last and middle messages at
every byte boundary; flipped bodies in every message; TOTALSIZE, magic (including a BLANK magic) and topic-length
fields; zeroed blocks and zeroed segment tails; commit-log segments swapped, missing, zero-filled, renamed and
short; the checkpoint garbage, short, empty, missing, from the future, field by field; index chains with
cycles; index files short, long, zero-filled, missing, swapped, renamed out of order, with header fields that
disagree with their items; consume-queue files missing or zero-filled; and `spark-reindex --master inline`
killed at each of its rename/replace/unlink/rmtree calls (a self-contained wrapper, see KILL_WRAPPER).

For each case every read-only command (dump-commitlog, get, query-key, inspect-index with --verify, --stats and
--walk-slot, recover --dry-run, clean --dry-run) must either work or fail with one line on stderr and a non-zero
exit: never a traceback, never a hang (each run has a timeout), and never a change to any file. Then `recover`
(`--full-scan` for damage the checkpoint says cannot be there) must succeed, after which:
* `inspect-index --verify` passes and a second `recover` finds nothing to do;
* every message the damage did not destroy is still there and found by each of its keys and its UNIQ_KEY
  (the engine's query, i.e. what query-key runs, for all of them; the query-key command for one);
* `put` continues the store and the new message is found;
* nothing outside the store changed (each case has a sibling folder of sentinel files, and its parent's listing
  is compared).

The last line is the figures the issue note quotes: cases tried, tracebacks, hangs, keys unfindable after
recover, read-only writes, outside changes, other failures (all must be 0).

    python3 bench/corruption_matrix.py                  # the full matrix (> 600 cases)
    python3 bench/corruption_matrix.py --cases 60       # an evenly spread sample of 60
    python3 bench/corruption_matrix.py --quick          # the reduced one CI runs
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from corruption_cases import (ALL_GEOM, CL_GEOM, CQ_FILE, Case, Info, cases, count_reindex_calls,  # noqa: E402
                              env_with_repo, index_files, longest_slot)

RMQTOOL = [sys.executable, "-m", "rmqtool"]
KINDS = ("tracebacks", "hangs", "unfindable", "ro_writes", "outside", "failures")


@dataclass
class Outcome:
    name: str
    tracebacks: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    unfindable: list[str] = field(default_factory=list)
    ro_writes: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def bad(self) -> list[str]:
        return [x for k in KINDS for x in getattr(self, k)]


# ------------------------------------------------------------------------------------------- building

def build_base(d: Path, n: int) -> Info:
    rng = random.Random(7)
    sent = []
    for i in range(n):
        sent.append({"topic": f"Matrix{'AB'[i % 2]}", "queueId": i % 2, "tags": "t", "keys": [f"m{i}", f"g{i}"],
                     "uniqKey": f"UNIQ{i:06d}", "storeTimestamp": 1_700_000_000_000 + i * 700,
                     "body": "".join(rng.choice("xyzw") for _ in range(rng.randint(5, 60)))})
    inp = d.parent / "base.jsonl"
    inp.write_text("".join(json.dumps(m) + "\n" for m in sent))
    r = subprocess.run(RMQTOOL + ["put", "--store", str(d), "--json", "--from-jsonl", str(inp),
                                  "--cq-file-size", str(CQ_FILE)] + ALL_GEOM,
                       capture_output=True, text=True, cwd=REPO, env=env_with_repo(REPO))
    if r.returncode != 0:
        raise SystemExit(f"cannot build the base store: {r.stderr}")
    return Info([json.loads(line) for line in r.stdout.splitlines()], sent)


def tree_hash(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            p = Path(dirpath) / n
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "link"
    return out


# ------------------------------------------------------------------------------------------- checks

def run_cmd(args: list[str], timeout: float, o: Outcome, what: str) -> subprocess.CompletedProcess | None:
    try:
        r = subprocess.run(RMQTOOL + args, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                           env=env_with_repo(REPO))
    except subprocess.TimeoutExpired:
        o.hangs.append(f"{what}: no answer within {timeout:g}s")
        return None
    if "Traceback" in r.stderr or "Traceback" in r.stdout:
        o.tracebacks.append(f"{what}: traceback: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ''}")
    elif r.returncode < 0:
        o.tracebacks.append(f"{what}: killed by signal {-r.returncode}")
    elif r.returncode == 3 and not r.stderr.strip():
        # exit 3 is a partial answer: what is healthy on stdout, one line per damage found on stderr
        o.failures.append(f"{what}: exit 3 (damage found) without naming the damage on stderr")
    elif r.returncode not in (0, 3) and len(r.stderr.strip().splitlines()) != 1:
        o.failures.append(f"{what}: exit {r.returncode} without a one-line error: {r.stderr.strip()[:300]!r}")
    return r


def read_only_commands(store: Path, info: Info, quick: bool, torn: bool) -> list[list[str]]:
    s = ["--store", str(store)]
    ack, sent = info.last()
    mid = info.mid_of_last_segment()
    try:
        slot = longest_slot(index_files(store)[-1])
    except (IndexError, OSError, struct.error):  # no index file, or the newest one is damaged itself
        slot = 0
    ro = [["inspect-index", "--verify"] + s + ALL_GEOM,
          ["query-key", "--topic", sent["topic"], "--key", sent["keys"][0], "--json"] + s + ALL_GEOM,
          ["recover", "--dry-run", "--json"] + s + ALL_GEOM]
    if quick or torn:  # the torn cases differ only in k
        return ro
    return ro + [
        ["dump-commitlog", "--json"] + s + CL_GEOM,
        ["get", "--offset", str(ack["commitLogOffset"])] + s + CL_GEOM,
        ["get", "--offset", str(info.acks[mid]["commitLogOffset"]), "--json"] + s + CL_GEOM,
        ["query-key", "--topic", info.sent[mid]["topic"], "--key", info.sent[mid]["uniqKey"], "--unique-key"]
        + s + ALL_GEOM,
        ["query-key", "--topic", info.sent[mid]["topic"], "--key", info.sent[mid]["keys"][1], "--raw"] + s + ALL_GEOM,
        ["inspect-index"] + s + ALL_GEOM,
        ["inspect-index", "--stats", "--json"] + s + ALL_GEOM,
        ["inspect-index", "--walk-slot", str(slot)] + s + ALL_GEOM,
        ["recover", "--dry-run"] + s + ALL_GEOM,
        ["clean", "--dry-run", "--force-now"] + s + ALL_GEOM,
    ]


def check_survivors(store: Path, info: Info, destroyed: set, o: Outcome) -> None:
    """Every message the damage did not destroy: readable at its offset and found by each key and UNIQ_KEY."""
    from engine.broker.config.brokerconf import load_config
    from engine.broker.store import MessageStore

    cfg = load_config(None, storePathRootDir=str(store), maxHashSlotNum=16, maxIndexNum=64,
                      mappedFileSizeCommitLog=4096)
    with MessageStore(cfg) as st:
        for i, (ack, m) in enumerate(zip(info.acks, info.sent)):
            if i in destroyed:
                continue
            off = ack["commitLogOffset"]
            try:
                rec = st.get(off)
                ok = rec.uniq_key == m["uniqKey"]
            except Exception:
                ok = False
            if not ok:
                o.unfindable.append(f"message {i} (offset {off}) is gone after recover")
                continue
            for key, unique in ((m["keys"][0], False), (m["keys"][1], False), (m["uniqKey"], True)):
                if off not in [r.physical_offset for r in st.query(m["topic"], key, unique=unique).messages]:
                    o.unfindable.append(f"message {i} not found by {'UNIQ_KEY' if unique else 'key'} {key}")


def after_recover(store: Path, info: Info, destroyed: set, timeout: float, quick: bool, o: Outcome) -> None:
    s = ["--store", str(store)]
    r = run_cmd(["inspect-index", "--verify"] + s + ALL_GEOM, timeout, o, "verify after recover")
    if r is not None and r.returncode != 0:
        o.failures.append("inspect-index --verify fails after recover: "
                          + " | ".join(line.strip() for line in r.stdout.splitlines() if "item" in line)[:300])
    check_survivors(store, info, destroyed, o)
    r = None if quick else run_cmd(["recover", "--json"] + s + ALL_GEOM, timeout, o, "second recover")
    if r is not None and r.returncode == 0:
        d = json.loads(r.stdout)
        if not (d["consistent"] and d["mode"] == "normal" and not d["changed"]):
            o.failures.append(f"a second recover still changed the store: {d['actions']}")
    sent = info.sent[-1]
    r = run_cmd(["put", "--topic", sent["topic"], "--keys", "after-recover", "--body", "x"] + s + ALL_GEOM,
                timeout, o, "put after recover")
    if r is not None and r.returncode != 0:
        o.failures.append(f"put after recover failed: {r.stderr.strip()}")
    r = run_cmd(["query-key", "--topic", sent["topic"], "--key", "after-recover", "--json"] + s + ALL_GEOM,
                timeout, o, "query after put")
    if r is not None and (r.returncode != 0 or not r.stdout.strip()):
        o.failures.append("the message put after recover is not found by its key")


def run_case(case: Case, base: Path, info: Info, work: Path, timeout: float, quick: bool) -> Outcome:
    o = Outcome(case.name)
    home = work / f"case-{hashlib.sha1(case.name.encode()).hexdigest()[:12]}"
    shutil.rmtree(home, ignore_errors=True)
    store, outside = home / "store", home / "outside"
    shutil.copytree(base, store)
    outside.mkdir()
    (outside / "sentinel").write_text("must not change")
    fence = tree_hash(outside), sorted(os.listdir(home))
    try:
        destroyed = case.mutate(store, info)
        if case.abort:
            (store / "abort").write_text("12345")
        before = tree_hash(store)
        for args in read_only_commands(store, info, quick, case.name.startswith("torn")):
            run_cmd(args, timeout, o, " ".join(args[:1] + [a for a in args[1:] if a.startswith("--")
                                                         and a not in ("--store", "--json")][:2]))
            after = tree_hash(store)
            if after != before:
                changed = sorted(k for k in set(after) | set(before) if after.get(k) != before.get(k))
                o.ro_writes.append(f"read-only {args[0]} changed {', '.join(changed[:5])}")
                before = after
        r = run_cmd(["recover", "--json"] + (["--full-scan"] if case.full_scan else []) + ["--store", str(store)]
                    + ALL_GEOM, timeout, o, "recover")
        if r is None or r.returncode != 0:
            o.failures.append(f"recover failed: {r.stderr.strip() if r else 'hang'}")
        else:
            after_recover(store, info, destroyed, timeout, quick, o)
        if (tree_hash(outside), sorted(os.listdir(home))) != fence:
            o.outside.append("a file outside the store changed or appeared")
    except Exception as e:  # the harness itself must not die on one case
        o.failures.append(f"harness error: {type(e).__name__}: {e}")
    finally:
        if not o.bad():
            shutil.rmtree(home, ignore_errors=True)
    return o


def sample(todo: list[Case], n: int | None) -> list[Case]:
    if n is None or n >= len(todo):
        return todo
    step = len(todo) / n
    return [todo[int(i * step)] for i in range(n)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a reduced matrix with fewer commands per case (CI)")
    ap.add_argument("--cases", type=int, default=None, help="run an evenly spread sample of this many cases")
    ap.add_argument("--messages", type=int, default=70, help="messages in the base store")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a command counts as hung")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--match", default=None, help="only the cases whose name contains this text")
    ap.add_argument("--list", action="store_true", help="print the case names and exit")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    work = a.workdir or Path(tempfile.mkdtemp(prefix="rmq-matrix-"))
    work.mkdir(parents=True, exist_ok=True)
    base = work / "base"
    shutil.rmtree(base, ignore_errors=True)
    info = build_base(base, a.messages)
    probe = work / "reindex-probe"
    shutil.rmtree(probe, ignore_errors=True)
    shutil.copytree(base, probe)
    calls = count_reindex_calls(probe, REPO)
    shutil.rmtree(probe, ignore_errors=True)
    todo = [c for c in cases(info, a.quick, calls) if a.match is None or a.match in c.name]
    todo = sample(todo, a.cases)
    if a.list:
        print("\n".join(c.name for c in todo))
        return 0
    print(f"corruption matrix: {len(todo)} cases (spark-reindex makes {calls} rename/unlink calls), work dir {work}",
          file=sys.stderr)
    totals = dict.fromkeys(KINDS, 0)
    with cf.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        for o in ex.map(lambda c: run_case(c, base, info, work, a.timeout, a.quick), todo):
            for k in KINDS:
                totals[k] += len(getattr(o, k))
            if o.bad() or a.verbose:
                print(f"  {o.name}: {'ok' if not o.bad() else ''}", file=sys.stderr)
                for line in o.bad()[:8]:
                    print(f"    {line}", file=sys.stderr)
    if a.workdir is None and not any(totals.values()):
        shutil.rmtree(work, ignore_errors=True)
    print(f"cases tried: {len(todo)}, tracebacks: {totals['tracebacks']}, hangs: {totals['hangs']}, "
          f"keys unfindable after recover: {totals['unfindable']}, read-only writes: {totals['ro_writes']}, "
          f"outside changes: {totals['outside']}, failures: {totals['failures']}")
    return 0 if not any(totals.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
