"""The damage bench/corruption_matrix.py applies: one function per kind, each returning which messages (by their
index in the base store) it destroys, so the matrix can check that every other message survives recover.

Base store: --messages messages of two topics (keys m<i>, g<i> and a UNIQ_KEY each) in 4 KiB segments, 16 slots x
64 items per index file, 200-byte consume-queue files, written by `rmqtool put`.
"""
from __future__ import annotations

import os
import random
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

SEG = 4096
SLOTS = 16
ITEMS = 64
CQ_FILE = 200
IDX_GEOM = ["--hash-slots", str(SLOTS), "--max-index", str(ITEMS)]
CL_GEOM = ["--commitlog-file-size", str(SEG)]
ALL_GEOM = IDX_GEOM + CL_GEOM
BLANK_MAGIC = -875286124


@dataclass
class Info:
    acks: list[dict]
    sent: list[dict]

    def last(self) -> tuple[dict, dict]:
        return self.acks[-1], self.sent[-1]

    def in_segment(self, seg_no: int) -> list[int]:
        return [i for i, a in enumerate(self.acks) if a["commitLogOffset"] // SEG == seg_no]

    def mid_of_last_segment(self) -> int:
        """A message in the last segment that is not the last message (the first one there)."""
        last = self.in_segment(self.acks[-1]["commitLogOffset"] // SEG)
        return last[0] if len(last) > 1 else len(self.acks) - 2

    def segments(self) -> int:
        return self.acks[-1]["commitLogOffset"] // SEG + 1


Mutation = Callable[[Path, Info], set]


@dataclass
class Case:
    name: str
    mutate: Mutation          # damages the store, returns the indices of the messages it destroys
    abort: bool               # leave the abort marker (a crashed writer)
    quick: bool = False       # part of the reduced matrix CI runs
    full_scan: bool = False   # damage the checkpoint says cannot be there: only `recover --full-scan` looks


# ------------------------------------------------------------------------------------------- helpers

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
    return struct.unpack(">i", read(p, pos + 84, 4))[0]  # IPv4 born/store hosts (format §2.2)


def index_files(store: Path) -> list[Path]:
    d = store / "index"
    if not d.is_dir():
        return []
    return sorted((p for p in d.iterdir() if p.name.isdigit()), key=lambda p: (len(p.name), p.name))


def segments(store: Path) -> list[Path]:
    return sorted((store / "commitlog").iterdir())


def _swap(a: Path, b: Path) -> None:
    tmp = a.with_name(a.name + ".swap")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)


# ------------------------------------------------------------------------------------------- records

def torn(which: str, k: int) -> Mutation:
    """Message `which` ("last", "mid") with its first k bytes kept and the rest zero. A page lost in a crash
    was not flushed, so for a message in the middle the checkpoint is rewound to before it too (damage the
    checkpoint says was flushed is not crash damage: `recover --full-scan` finds that, the body-flip cases)."""
    def m(store: Path, info: Info) -> set:
        i = len(info.acks) - 1 if which == "last" else info.mid_of_last_segment()
        ack = info.acks[i]
        p, pos = seg_path(store, ack["commitLogOffset"])
        patch(p, pos + k, bytes(ack["storeSize"] - k))
        if which != "last":
            before = info.acks[i - 1]["storeTimestamp"]
            patch(store / "checkpoint", 0, struct.pack(">qq", before, before))
        return {i} if k < ack["storeSize"] else set()
    return m


def flip_body(i_of: Callable[[Info], int]) -> Mutation:
    def m(store: Path, info: Info) -> set:
        i = i_of(info)
        off = info.acks[i]["commitLogOffset"]
        p, pos = seg_path(store, off)
        q = pos + 88 + body_len(store, off) // 2
        patch(p, q, bytes([read(p, q, 1)[0] ^ 0xFF]))
        return {i}
    return m


def set_field(which: str, field: str, value: Callable[[int], bytes]) -> Mutation:
    def m(store: Path, info: Info) -> set:
        i = len(info.acks) - 1 if which == "last" else info.mid_of_last_segment()
        ack = info.acks[i]
        off = ack["commitLogOffset"]
        p, pos = seg_path(store, off)
        if field == "size":
            patch(p, pos, value(ack["storeSize"]))
        elif field == "magic":
            patch(p, pos + 4, value(int.from_bytes(read(p, pos + 4, 4), "big")))
        elif field == "topiclen":
            q = pos + 88 + body_len(store, off)
            patch(p, q, value(read(p, q, 1)[0]))
        return {i}
    return m


def zero_block(seg_no_of: Callable[[Info], int], at: int, size: int, crash: bool = False) -> Mutation:
    """size zero bytes at position `at` of a segment. crash: a page that never reached the disk, so the
    checkpoint is rewound to before the first message it hits (as for torn("mid"))."""
    def m(store: Path, info: Info) -> set:
        seg = seg_no_of(info)
        p = store / "commitlog" / f"{seg * SEG:020d}"
        patch(p, at, bytes(size))
        hit = set()
        for i in info.in_segment(seg):
            a = info.acks[i]["commitLogOffset"] % SEG
            if a < at + size and at < a + info.acks[i]["storeSize"]:
                hit.add(i)
        if crash and hit and min(hit) > 0:
            before = info.acks[min(hit) - 1]["storeTimestamp"]
            patch(store / "checkpoint", 0, struct.pack(">qq", before, before))
        return hit
    return m


def zero_tail(which: str) -> Mutation:
    def m(store: Path, info: Info) -> set:
        segs = segments(store)
        if which == "last":
            last_seg = info.segments() - 1
            idx = info.in_segment(last_seg)
            lo = info.acks[idx[-3]]["commitLogOffset"] % SEG
            patch(segs[-1], lo, bytes(SEG - lo))
            return set(idx[-3:])
        # Lost pages at the end of the previous segment, with a checkpoint from before that segment.
        patch(segs[-2], SEG - 200, bytes(200))
        first = info.acks[0]["storeTimestamp"]
        cp = store / "checkpoint"
        data = bytearray(cp.read_bytes())
        struct.pack_into(">qqq", data, 0, first + 3000, first + 3000, first)
        cp.write_bytes(bytes(data))
        seg = info.segments() - 2
        return {i for i in info.in_segment(seg)
                if info.acks[i]["commitLogOffset"] % SEG + info.acks[i]["storeSize"] > SEG - 200}
    return m


# ------------------------------------------------------------------------------------------- segments

def segment_damage(kind: str, n: int) -> Mutation:
    def m(store: Path, info: Info) -> set:
        segs = segments(store)
        if n + 1 >= len(segs) and kind in ("swap", "missing"):
            return set()
        p = segs[n]
        if kind == "swap":
            _swap(p, segs[n + 1])
            return set()
        if kind == "missing":
            p.unlink()
            return set(info.in_segment(n))
        if kind == "zero":
            p.write_bytes(bytes(p.stat().st_size))
            return set(info.in_segment(n))
        if kind == "renamed":  # given the name of a segment far after the log
            p.rename(p.with_name(f"{(len(segs) + 5) * SEG:020d}"))
            return set()
        if kind == "short":
            with open(p, "r+b") as f:
                f.truncate(SEG // 2)
            return set(info.in_segment(n))
        raise ValueError(kind)
    return m


# ------------------------------------------------------------------------------------------- index, queues, checkpoint

def checkpoint(kind: str) -> Mutation:
    def m(store: Path, info: Info) -> set:
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
        elif kind.startswith("field"):  # one field garbage, zero or negative
            _, n, how = kind.split(":")
            v = {"garbage": 0x7EADBEEF12345678, "zero": 0, "negative": -12345}[how]
            patch(p, 8 * int(n), struct.pack(">q", v))
        return set()
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


def longest_slot(f: Path) -> int:
    return max(range(SLOTS), key=lambda s: len(_chain(f, s)))


def _set_prev(f: Path, item: int, prev: int) -> None:
    patch(f, 40 + 4 * SLOTS + 20 * item + 16, struct.pack(">i", prev))


def index_chain(kind: str, which: str) -> Mutation:
    def m(store: Path, info: Info) -> set:
        files = index_files(store)
        f = files[-1] if which == "newest" else files[1]
        s = longest_slot(f)
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
        return set()
    return m


def index_file(kind: str, n: int) -> Mutation:
    """Damage to index file number n: wrong size, zero-filled, missing, swapped with the next, renamed past the
    newest, header fields that disagree with the items."""
    def m(store: Path, info: Info) -> set:
        files = index_files(store)
        if n >= len(files) or (kind == "swap" and n + 1 >= len(files)):
            return set()
        f = files[n]
        if kind == "short":
            with open(f, "r+b") as fh:
                fh.truncate(f.stat().st_size - 1000)
        elif kind == "long":
            with open(f, "ab") as fh:
                fh.write(bytes(20))
        elif kind == "zero":
            f.write_bytes(bytes(f.stat().st_size))
        elif kind == "missing":
            f.unlink()
        elif kind == "swap":
            _swap(f, files[n + 1])
        elif kind == "renamed":
            f.rename(f.with_name(str(int(files[-1].name) + 1000)))
        elif kind in ("end-ts", "end-phy", "begin-ts", "count"):
            pos, fmt, delta = {"end-ts": (8, ">q", 7000), "end-phy": (24, ">q", -1), "begin-ts": (0, ">q", 3000),
                               "count": (36, ">i", -3)}[kind]
            old = struct.unpack(fmt, read(f, pos, struct.calcsize(fmt)))[0]
            patch(f, pos, struct.pack(fmt, old + delta))
        return set()
    return m


def queue_file(kind: str, topic: str, qid: int) -> Mutation:
    def m(store: Path, info: Info) -> set:
        d = store / "consumequeue" / topic / str(qid)
        files = sorted(d.iterdir()) if d.is_dir() else []
        if not files:
            return set()
        f = files[-1] if kind != "first-zero" else files[0]
        if kind == "missing-last":
            f.unlink()
        elif kind in ("zero-last", "first-zero"):
            f.write_bytes(bytes(f.stat().st_size))
        elif kind == "dir-missing":
            for x in files:
                x.unlink()
            d.rmdir()
        return set()
    return m


# ------------------------------------------------------------------------------------------- the list

def cases(info: Info, quick: bool, reindex_calls: int = 0) -> list[Case]:
    out: list[Case] = []
    size = info.acks[-1]["storeSize"]
    for k in range(size):
        out.append(Case(f"torn last message, {k} of {size} bytes written", torn("last", k), True, quick=k == size // 2))
    mid = info.acks[info.mid_of_last_segment()]["storeSize"]
    for k in range(mid):
        out.append(Case(f"torn message in the middle of the last segment, {k} of {mid} bytes", torn("mid", k), True,
                        quick=k == 40))
    out += _field_cases()
    for i in range(len(info.acks)):
        out.append(Case(f"body byte flipped in message {i} (full scan)", flip_body(lambda _, i=i: i), False,
                        quick=i == 5, full_scan=True))
    last = info.segments() - 1
    for at in range(0, SEG, 256):
        out.append(Case(f"256 zero bytes at {at} of the last segment",
                        zero_block(lambda inf: inf.segments() - 1, at, 256, crash=True), True, quick=at == 1024))
    for at in range(0, SEG, 512):
        out.append(Case(f"512 zero bytes at {at} of segment 1 (full scan)", zero_block(lambda _: 1, at, 512), False,
                        full_scan=True))
    for which in ("last", "second-last"):
        out.append(Case(f"zeroed tail of the {which} segment", zero_tail(which), True, quick=which == "second-last"))
    for kind in ("swap", "missing", "zero", "renamed", "short"):
        for n in range(last + 1):
            out.append(Case(f"commit-log segment {n} {kind}", segment_damage(kind, n), kind != "swap",
                            quick=(kind, n) in (("swap", 1), ("missing", 1))))
    for kind in ("garbage", "short", "empty", "missing", "future") + tuple(
            f"field:{n}:{how}" for n in range(5) for how in ("garbage", "zero", "negative")):
        for abort in (True, False):
            out.append(Case(f"checkpoint {kind} ({'crash' if abort else 'clean'})", checkpoint(kind), abort,
                            quick=kind == "garbage" and abort))
    for which in ("newest", "older"):
        for kind in ("slot-past-count", "self-loop", "two-cycle", "long-cycle"):
            out.append(Case(f"index {kind} in the {which} file", index_chain(kind, which), False,
                            quick=(which, kind) == ("older", "two-cycle")))
    n_idx = len(info.acks) * 3 // (ITEMS - 1) + 1
    for kind in ("short", "long", "zero", "missing", "swap", "renamed", "end-ts", "end-phy", "begin-ts", "count"):
        for n in range(n_idx):
            for abort in (True, False):
                out.append(Case(f"index file {n} {kind} ({'crash' if abort else 'clean'})", index_file(kind, n), abort,
                                quick=abort and (kind, n) in (("zero", 1), ("missing", 2))))
    for kind in ("missing-last", "zero-last", "first-zero", "dir-missing"):
        for topic, qid in (("MatrixA", 0), ("MatrixB", 1)):
            out.append(Case(f"consume queue {topic}/{qid} {kind}", queue_file(kind, topic, qid), True,
                            quick=(kind, topic) == ("dir-missing", "MatrixA")))
    for k in range(1, reindex_calls + 1):
        for replace in (False, True):
            out.append(Case(f"spark-reindex --master inline{' --replace' if replace else ''} killed at its "
                            f"rename/unlink call {k} of {reindex_calls}", reindex_kill(k, replace), False,
                            quick=k == reindex_calls // 2 and replace))
    return [c for c in out if c.quick] if quick else out


# ------------------------------------------------------------------------------------------- reindex kill points

#: Runs rmqtool in this process with os.rename, os.replace, os.unlink and shutil.rmtree counted; at call
#: number KILL_AT the process ends at once (os._exit, as SIGKILL would leave it). KILL_AT=0 only counts and
#: prints the total on stderr. Self-contained here: no fault hooks in the product.
KILL_WRAPPER = """
import atexit, os, runpy, shutil, sys
kill_at = int(os.environ["RMQ_KILL_AT"])
calls = [0]
def wrap(fn):
    def counted(*a, **k):
        calls[0] += 1
        if calls[0] == kill_at:
            os._exit(137)
        return fn(*a, **k)
    return counted
os.rename, os.replace, os.unlink, shutil.rmtree = (wrap(os.rename), wrap(os.replace), wrap(os.unlink),
                                                   wrap(shutil.rmtree))
atexit.register(lambda: sys.stderr.write(f"\\ncalls: {calls[0]}\\n"))
sys.argv = ["rmqtool"] + sys.argv[1:]
runpy.run_module("rmqtool", run_name="__main__")
"""


def run_reindex(store: Path, kill_at: int, replace: bool, repo: Path):
    import subprocess
    import sys

    args = [sys.executable, "-c", KILL_WRAPPER, "spark-reindex", "--store", str(store), "--master", "inline",
            *ALL_GEOM] + (["--replace"] if replace else [])
    return subprocess.run(args, capture_output=True, text=True, cwd=repo, timeout=300,
                          env={**env_with_repo(repo), "RMQ_KILL_AT": str(kill_at)})


def count_reindex_calls(store: Path, repo: Path) -> int:
    r = run_reindex(store, 0, True, repo)
    counts = [int(line.split()[1]) for line in r.stderr.splitlines() if line.startswith("calls: ")]
    if r.returncode != 0 or not counts:
        raise SystemExit(f"spark-reindex --master inline does not run on the base store: {r.stderr[-500:]}")
    return counts[-1]


def reindex_kill(k: int, replace: bool) -> Mutation:
    def m(store: Path, info: Info) -> set:
        run_reindex(store, k, replace, Path(__file__).resolve().parent.parent)
        return set()
    return m


def _field_cases() -> list[Case]:
    out = []
    for which in ("last", "mid"):
        for abort in (True, False):
            tag = "crash" if abort else "clean"
            out.append(Case(f"body byte flipped ({which}, {tag})",
                            flip_body((lambda inf: len(inf.acks) - 1) if which == "last" else
                                      (lambda inf: inf.mid_of_last_segment())), abort))
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
                            set_field(which, "magic", lambda v: struct.pack(">i", BLANK_MAGIC)), abort,
                            quick=which == "mid" and abort))
            for label, fn in (("topic length 0", lambda v: b"\x00"), ("topic length -1", lambda v: b"\xff"),
                              ("topic length 127", lambda v: b"\x7f"), ("topic length +1", lambda v: bytes([v + 1]))):
                out.append(Case(f"{label} ({which}, {tag})", set_field(which, "topiclen", fn), abort))
    return out


def env_with_repo(repo: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(repo)}
