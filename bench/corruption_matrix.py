#!/usr/bin/env python3
"""Corruption matrix: damage a store in every way listed below and run every command on it.

Cases (each on a fresh copy of one small store, 4 KiB segments, 16 slots x 64 items per index file):
* torn last message: its first k bytes kept, the rest zero, for every byte boundary k (crash mode);
* flipped bytes: a body byte (CRC), TOTALSIZE, magic and topic-length fields of the last message and of a
  message in the middle of the last segment;
* zeroed segment tails: the last segment's tail (last records) and the second-last segment's tail (its
  last records and its BLANK filler);
* checkpoint: garbage, short, empty, missing, claims from the future;
* index chains: a slot past indexCount, a self-loop, a two-item cycle, a long cycle, in the newest index file
  and in an older full one; a wrong-size index file (newest cut short, an older one grown).

For each case every read-only command (dump-commitlog, get, query-key, inspect-index with --verify, --stats and
--walk-slot, recover --dry-run, clean --dry-run) must either work or fail with one line on stderr and a non-zero
exit: never a traceback, never a hang (each run has a timeout), and never a change to any file of the store.
Then `recover` must succeed, after which `inspect-index --verify` passes, a second `recover` finds nothing to do
and `put` continues the store.

The last line is the figures: cases tried, crashes (must be 0), hangs (must be 0), and other failures (must be 0).

    python3 bench/corruption_matrix.py            # the full matrix
    python3 bench/corruption_matrix.py --quick    # a reduced one (CI)
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
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
RMQTOOL = [sys.executable, "-m", "rmqtool"]
SEG = 4096
SLOTS = 16
ITEMS = 64
IDX_GEOM = ["--hash-slots", str(SLOTS), "--max-index", str(ITEMS)]
CL_GEOM = ["--commitlog-file-size", str(SEG)]
ALL_GEOM = IDX_GEOM + CL_GEOM


@dataclass
class Info:
    acks: list[dict]
    sent: list[dict]

    def last(self) -> tuple[dict, dict]:
        return self.acks[-1], self.sent[-1]

    def mid_of_last_segment(self) -> tuple[dict, dict]:
        """A message in the last segment that is not the last message (the first one there)."""
        last_seg = self.acks[-1]["commitLogOffset"] // SEG
        for a, s in zip(self.acks, self.sent):
            if a["commitLogOffset"] // SEG == last_seg:
                return a, s
        return self.acks[-2], self.sent[-2]


@dataclass
class Case:
    name: str
    mutate: Callable[[Path, Info], None]
    abort: bool
    quick: bool = False


@dataclass
class Outcome:
    name: str
    crashes: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


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
    r = subprocess.run(RMQTOOL + ["put", "--store", str(d), "--json", "--from-jsonl", str(inp)] + ALL_GEOM,
                       capture_output=True, text=True, cwd=REPO)
    if r.returncode != 0:
        raise SystemExit(f"cannot build the base store: {r.stderr}")
    return Info([json.loads(line) for line in r.stdout.splitlines()], sent)


def seg_path(store: Path, offset: int) -> tuple[Path, int]:
    start = offset - offset % SEG
    return store / "commitlog" / f"{start:020d}", offset - start


def patch(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def read(path: Path, pos: int, n: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(pos)
        return f.read(n)


def body_len(store: Path, off: int) -> int:
    p, pos = seg_path(store, off)
    return struct.unpack(">i", read(p, pos + 84, 4))[0]  # IPv4 born/store hosts (§2.2)


def index_files(store: Path) -> list[Path]:
    return sorted((p for p in (store / "index").iterdir() if p.name.isdigit()), key=lambda p: (len(p.name), p.name))


# ------------------------------------------------------------------------------------------- mutations

def torn(k: int):
    def m(store: Path, info: Info) -> None:
        ack, _ = info.last()
        p, pos = seg_path(store, ack["commitLogOffset"])
        patch(p, pos + k, bytes(ack["storeSize"] - k))
    return m


def flip_body(which: str):
    def m(store: Path, info: Info) -> None:
        ack, _ = info.last() if which == "last" else info.mid_of_last_segment()
        off = ack["commitLogOffset"]
        p, pos = seg_path(store, off)
        bl = body_len(store, off)
        q = pos + 88 + bl // 2
        patch(p, q, bytes([read(p, q, 1)[0] ^ 0xFF]))
    return m


def set_field(which: str, field_name: str, value: Callable[[int], bytes]):
    def m(store: Path, info: Info) -> None:
        ack, _ = info.last() if which == "last" else info.mid_of_last_segment()
        off = ack["commitLogOffset"]
        p, pos = seg_path(store, off)
        if field_name == "size":
            patch(p, pos, value(ack["storeSize"]))
        elif field_name == "magic":
            old = read(p, pos + 4, 4)
            patch(p, pos + 4, value(int.from_bytes(old, "big")))
        elif field_name == "topiclen":
            q = pos + 88 + body_len(store, off)
            patch(p, q, value(read(p, q, 1)[0]))
    return m


def zero_tail(which: str):
    def m(store: Path, info: Info) -> None:
        segs = sorted((store / "commitlog").iterdir())
        if which == "last":
            # From the start of the third-last message of the last segment to the segment end.
            last_seg = int(segs[-1].name)
            starts = [a["commitLogOffset"] for a in info.acks if a["commitLogOffset"] >= last_seg]
            lo = starts[-3] - last_seg if len(starts) >= 3 else 0
            patch(segs[-1], lo, bytes(SEG - lo))
        else:
            # Lost pages at the end of the previous segment, with a checkpoint from before that segment: what a
            # power failure leaves when that segment was never flushed. (Damage the checkpoint says was flushed
            # is not crash damage; recover, like the broker, does not look for it before its start point.)
            patch(segs[-2], SEG - 200, bytes(200))
            first = info.acks[0]["storeTimestamp"]
            cp = store / "checkpoint"
            data = bytearray(cp.read_bytes())
            struct.pack_into(">qqq", data, 0, first + 3000, first + 3000, first)
            cp.write_bytes(bytes(data))
    return m


def checkpoint(kind: str):
    def m(store: Path, info: Info) -> None:
        p = store / "checkpoint"
        if kind == "garbage":
            p.write_bytes(random.Random(3).randbytes(4096))
        elif kind == "short":
            p.write_bytes(p.read_bytes()[:10])
        elif kind == "empty":
            p.write_bytes(b"")
        elif kind == "missing":
            p.unlink()
        elif kind == "future":
            p.write_bytes(struct.pack(">qqqqq", 2**62, 2**62, 2**62, 0, 2**40) + bytes(4056))
    return m


def _chain(f: Path, slot: int) -> list[int]:
    data = f.read_bytes()
    count = struct.unpack_from(">i", data, 36)[0]
    n = struct.unpack_from(">i", data, 40 + 4 * slot)[0]
    out = []
    while 0 < n < count and n not in out:
        out.append(n)
        n = struct.unpack_from(">i", data, 40 + 4 * SLOTS + 20 * n + 16)[0]
    return out


def _longest_slot(f: Path) -> int:
    return max(range(SLOTS), key=lambda s: len(_chain(f, s)))


def _set_prev(f: Path, item: int, prev: int) -> None:
    patch(f, 40 + 4 * SLOTS + 20 * item + 16, struct.pack(">i", prev))


def index_chain(kind: str, which: str):
    def m(store: Path, info: Info) -> None:
        files = index_files(store)
        f = files[-1] if which == "newest" else files[1]
        s = _longest_slot(f)
        chain = _chain(f, s)
        if kind == "slot-past-count":
            count = struct.unpack(">i", read(f, 36, 4))[0]
            patch(f, 40 + 4 * s, struct.pack(">i", count + 5))
        elif kind == "self-loop":
            _set_prev(f, chain[0], chain[0])
        elif kind == "two-cycle":
            _set_prev(f, chain[1], chain[0])
        elif kind == "long-cycle":
            _set_prev(f, chain[-1], chain[0])
    return m


def index_size(which: str):
    def m(store: Path, info: Info) -> None:
        files = index_files(store)
        if which == "newest-short":
            with open(files[-1], "r+b") as fh:
                fh.truncate(files[-1].stat().st_size - 1000)
        else:
            with open(files[1], "ab") as fh:
                fh.write(bytes(20))
    return m


def cases(info: Info, quick: bool) -> list[Case]:
    out: list[Case] = []
    size = info.acks[-1]["storeSize"]
    for k in range(size):
        out.append(Case(f"torn last message, {k} of {size} bytes written", torn(k), True,
                        quick=k == size // 2))
    for which in ("last", "mid"):
        for abort in (True, False):
            tag = "crash" if abort else "clean"
            out.append(Case(f"body byte flipped ({which}, {tag})", flip_body(which), abort))
            for label, fn in (("TOTALSIZE+1", lambda s: struct.pack(">i", s + 1)),
                              ("TOTALSIZE-1", lambda s: struct.pack(">i", s - 1)),
                              ("TOTALSIZE=INT_MAX", lambda s: struct.pack(">i", 2**31 - 1)),
                              ("TOTALSIZE=-5", lambda s: struct.pack(">i", -5)),
                              ("TOTALSIZE=0", lambda s: struct.pack(">i", 0))):
                out.append(Case(f"{label} ({which}, {tag})", set_field(which, "size", fn), abort,
                                quick=label == "TOTALSIZE=INT_MAX" and abort and which == "last"))
            out.append(Case(f"magic flipped ({which}, {tag})",
                            set_field(which, "magic", lambda v: struct.pack(">I", v ^ 0x00FF0000)), abort))
            out.append(Case(f"magic = BLANK ({which}, {tag})",
                            set_field(which, "magic", lambda v: struct.pack(">i", -875286124)), abort))
            for label, fn in (("topic length 0", lambda v: b"\x00"), ("topic length -1", lambda v: b"\xff"),
                              ("topic length 127", lambda v: b"\x7f"), ("topic length +1", lambda v: bytes([v + 1]))):
                out.append(Case(f"{label} ({which}, {tag})", set_field(which, "topiclen", fn), abort))
    for which in ("last", "second-last"):
        out.append(Case(f"zeroed tail of the {which} segment", zero_tail(which), True, quick=which == "second-last"))
    for kind in ("garbage", "short", "empty", "missing", "future"):
        for abort in (True, False):
            out.append(Case(f"checkpoint {kind} ({'crash' if abort else 'clean'})", checkpoint(kind), abort,
                            quick=kind == "garbage" and abort))
    for which in ("newest", "older"):
        for kind in ("slot-past-count", "self-loop", "two-cycle", "long-cycle"):
            out.append(Case(f"index {kind} in the {which} file", index_chain(kind, which), False,
                            quick=(which, kind) == ("older", "two-cycle")))
    for which in ("newest-short", "older-long"):
        for abort in (True, False):
            out.append(Case(f"index file wrong size ({which}, {'crash' if abort else 'clean'})", index_size(which),
                            abort, quick=abort and which == "newest-short"))
    if quick:
        out = [c for c in out if c.quick]
    return out


# ------------------------------------------------------------------------------------------- running

def store_hash(store: Path) -> dict[str, str]:
    out = {}
    for dirpath, _, files in os.walk(store):
        for n in files:
            p = Path(dirpath) / n
            out[str(p.relative_to(store))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def run_cmd(args: list[str], timeout: float, o: Outcome, what: str) -> subprocess.CompletedProcess | None:
    try:
        r = subprocess.run(RMQTOOL + args, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        o.hangs.append(f"{what}: no answer within {timeout:g}s")
        return None
    if "Traceback" in r.stderr or "Traceback" in r.stdout:
        o.crashes.append(f"{what}: traceback: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ''}")
    elif r.returncode < 0:
        o.crashes.append(f"{what}: killed by signal {-r.returncode}")
    elif r.returncode != 0 and len(r.stderr.strip().splitlines()) != 1:
        o.crashes.append(f"{what}: exit {r.returncode} without a one-line error: {r.stderr.strip()[:300]!r}")
    return r


def run_case(case: Case, base: Path, info: Info, work: Path, timeout: float, quick: bool) -> Outcome:
    o = Outcome(case.name)
    store = work / f"case-{abs(hash(case.name)) % 10**12}"
    shutil.rmtree(store, ignore_errors=True)
    shutil.copytree(base, store)
    try:
        files = index_files(store)
        slot = _longest_slot(files[-1]) if files else 0
        case.mutate(store, info)
        if case.abort:
            (store / "abort").write_text("12345")
        s = ["--store", str(store)]
        ack, sent = info.last()
        mack, msent = info.mid_of_last_segment()
        ro = [
            ["inspect-index", "--verify"] + s + ALL_GEOM,
            ["query-key", "--topic", sent["topic"], "--key", sent["keys"][0], "--json"] + s + ALL_GEOM,
            ["recover", "--dry-run", "--json"] + s + ALL_GEOM,
        ]
        if not quick:
            ro.append(["dump-commitlog", "--json"] + s + CL_GEOM)
        if not quick and not case.name.startswith("torn"):  # the torn cases differ only in k
            ro += [
                ["get", "--offset", str(ack["commitLogOffset"])] + s + CL_GEOM,
                ["get", "--offset", str(mack["commitLogOffset"]), "--json"] + s + CL_GEOM,
                ["query-key", "--topic", msent["topic"], "--key", msent["uniqKey"], "--unique-key"] + s + ALL_GEOM,
                ["query-key", "--topic", msent["topic"], "--key", msent["keys"][1], "--raw"] + s + ALL_GEOM,
                ["inspect-index"] + s + ALL_GEOM,
                ["inspect-index", "--stats", "--json"] + s + ALL_GEOM,
                ["inspect-index", "--walk-slot", str(slot)] + s + ALL_GEOM,
                ["recover", "--dry-run"] + s + ALL_GEOM,
                ["clean", "--dry-run", "--force-now"] + s + ALL_GEOM,
            ]
        before = store_hash(store)
        for args in ro:
            run_cmd(args, timeout, o, " ".join(args[:1] + [a for a in args[1:] if a.startswith("--") and a not in
                                                             ("--store", "--json")][:2]))
            after = store_hash(store)
            if after != before:
                changed = sorted(k for k in set(after) | set(before) if after.get(k) != before.get(k))
                o.failures.append(f"read-only {args[0]} changed {', '.join(changed[:5])}")
                before = after
        r = run_cmd(["recover", "--json"] + s + ALL_GEOM, timeout, o, "recover")
        if r is None or r.returncode != 0:
            o.failures.append(f"recover failed: {r.stderr.strip() if r else 'hang'}")
            return o
        r = run_cmd(["inspect-index", "--verify"] + s + ALL_GEOM, timeout, o, "verify after recover")
        if r is not None and r.returncode != 0:
            o.failures.append("inspect-index --verify fails after recover: "
                              + " | ".join(line.strip() for line in r.stdout.splitlines() if "item" in line)[:300])
        r = None if quick else run_cmd(["recover", "--json"] + s + ALL_GEOM, timeout, o, "second recover")
        if r is not None and r.returncode == 0:
            d = json.loads(r.stdout)
            if not (d["consistent"] and d["mode"] == "normal" and not d["changed"]):
                o.failures.append(f"a second recover still changed the store: {d['actions']}")
        r = run_cmd(["put", "--topic", sent["topic"], "--keys", "after-recover", "--body", "x"] + s + ALL_GEOM,
                    timeout, o, "put after recover")
        if r is not None and r.returncode != 0:
            o.failures.append(f"put after recover failed: {r.stderr.strip()}")
        r = run_cmd(["query-key", "--topic", sent["topic"], "--key", "after-recover", "--json"] + s + ALL_GEOM,
                    timeout, o, "query after put")
        if r is not None and (r.returncode != 0 or not r.stdout.strip()):
            o.failures.append("the message put after recover is not found by its key")
        r = None if quick else run_cmd(["inspect-index", "--verify"] + s + ALL_GEOM, timeout, o, "verify after put")
        if r is not None and r.returncode != 0:
            o.failures.append("inspect-index --verify fails after recover + put")
    except Exception as e:  # the harness itself must not die on one case
        o.failures.append(f"harness error: {type(e).__name__}: {e}")
    finally:
        if not (o.crashes or o.hangs or o.failures):
            shutil.rmtree(store, ignore_errors=True)
    return o


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a reduced matrix with fewer commands per case (CI)")
    ap.add_argument("--messages", type=int, default=70, help="messages in the base store")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a command counts as hung")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    work = a.workdir or Path(tempfile.mkdtemp(prefix="rmq-matrix-"))
    work.mkdir(parents=True, exist_ok=True)
    base = work / "base"
    shutil.rmtree(base, ignore_errors=True)
    info = build_base(base, a.messages)
    todo = cases(info, a.quick)
    print(f"corruption matrix: {len(todo)} cases, work dir {work}", file=sys.stderr)
    crashes = hangs = failures = 0
    with cf.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        futs = [ex.submit(run_case, c, base, info, work, a.timeout, a.quick) for c in todo]
        for fut in futs:
            o = fut.result()
            crashes += len(o.crashes)
            hangs += len(o.hangs)
            failures += len(o.failures)
            bad = o.crashes + o.hangs + o.failures
            if bad or a.verbose:
                print(f"  {o.name}: {'ok' if not bad else ''}", file=sys.stderr)
                for line in bad[:8]:
                    print(f"    {line}", file=sys.stderr)
    if a.workdir is None and not (crashes or hangs or failures):
        shutil.rmtree(work, ignore_errors=True)
    print(f"cases tried: {len(todo)}, crashes: {crashes}, hangs: {hangs}, failures: {failures}")
    return 0 if not (crashes or hangs or failures) else 1


if __name__ == "__main__":
    sys.exit(main())
