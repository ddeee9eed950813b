#!/usr/bin/env python3
"""Build a realistic broker store of N GiB quickly: commit log, consume queues, index files and checkpoint for
several topics and queues, every message with a UNIQ_KEY and KEYS, byte for byte what `rmqtool put` writes for
the same messages (tests/tools/test_gen_store.py puts a small one's messages again and compares the files).

Vectorised: every record of a store has the same layout (fixed-width keys, one body length, topic names of one
length), so records are rows of a numpy byte matrix filled column by column from a template made by
engine.broker.commitlog.message.encode_record; bodies come from a pool with precomputed CRCs; index keys are hashed as
arrays and written by engine.broker.index.write (the bounded-memory index builder recovery uses). Memory is one
chunk of records (about CHUNK_BYTES) plus one index file's slot table.

    python3 bench/gen_store.py /tmp/store --gib 1                      # 1 GiB of commit log, default geometry
    python3 bench/gen_store.py /tmp/s --messages 1000 --commitlog-file-size 65536 --hash-slots 64 --max-index 256

API: gen_store(root, GenSpec(...)) -> GenResult; message_json(spec, i) gives message i as `put --from-jsonl`
takes it.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from engine.broker.config.checkpoint import Checkpoint  # noqa: E402
from engine.broker.config.brokerconf import CQ_STORE_UNIT_SIZE  # noqa: E402
from engine.broker.layout import StoreLayout, index_file_name, segment_name  # noqa: E402
from engine.broker.commitlog.message import (PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY, MessageRecord, blank_record,  # noqa: E402
                                   encode_record)
from engine.java.lang import java_string_hash  # noqa: E402
from engine.fsutil import write_fully  # noqa: E402
from engine.broker.index.write import IndexFileBuilder  # noqa: E402


def write_all(fd: int, data, pos: int) -> None:
    """A checked pwrite (engine.fsutil.write_fully) of the generator's own files."""
    write_fully(fd, data, pos, "generated store file", undo=False)

CHUNK_BYTES = 64 << 20
BODY_POOL = 4096
UNIQ_PREFIX = "7F0000010D4A1B2C"  # IP + pid + classloader hash, as MessageClientIDSetter starts a UNIQ_KEY
KEY_DIGITS = 12
TAGS = "TagA"


@dataclass
class GenSpec:
    messages: int = 0                    # or give gib: as many messages as fill that much commit log
    gib: float = 0.0
    body_size: int = 1000
    topics: int = 4
    queues_per_topic: int = 4
    keys_per_message: int = 2            # KEYS tokens; every message also has a UNIQ_KEY
    commitlog_file_size: int = 1 << 30
    cq_file_size: int = 6_000_000
    hash_slots: int = 5_000_000
    max_index: int = 20_000_000
    start_timestamp: int = 1_700_000_000_000
    step_ms: int = 1
    seed: int = 1
    abort: bool = False                  # leave the abort marker, as a writer killed after its last flush
    index: bool = True


@dataclass
class GenResult:
    root: Path
    messages: int
    record_size: int
    commitlog_bytes: int
    segments: int
    index_files: list[str] = field(default_factory=list)
    keys: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["root"] = str(self.root)
        return d


def topic_name(t: int) -> str:
    return f"BenchTopic{t:02d}"


def message_json(spec: GenSpec, i: int) -> dict:
    """Message i as `rmqtool put --from-jsonl` takes it (the generator writes exactly what put writes for it)."""
    q = spec.topics * spec.queues_per_topic
    qi = i % q
    rng = np.random.default_rng(spec.seed)
    pool = _body_pool(spec, rng)[0]
    body = bytes(pool[_body_index(np.array([i]))[0]])
    ts = spec.start_timestamp + i * spec.step_ms
    return {"topic": topic_name(qi // spec.queues_per_topic), "queueId": qi % spec.queues_per_topic,
            "tags": TAGS, "keys": [f"{chr(65 + k)}{i:0{KEY_DIGITS}d}" for k in range(spec.keys_per_message)],
            "uniqKey": f"{UNIQ_PREFIX}{i:016X}", "storeTimestamp": ts, "bornTimestamp": ts,
            "body": body.decode("ascii")}


def _body_pool(spec: GenSpec, rng) -> tuple[np.ndarray, np.ndarray]:
    import zlib

    pool = rng.integers(97, 123, size=(BODY_POOL, spec.body_size), dtype=np.uint8)
    crcs = np.array([zlib.crc32(row.tobytes()) & 0x7FFFFFFF for row in pool], dtype=np.int64)
    return pool, crcs


def _body_index(i: np.ndarray) -> np.ndarray:
    return ((i.astype(np.uint64) * np.uint64(2654435761)) % np.uint64(BODY_POOL)).astype(np.int64)


class _Template:
    """One encoded record with marker values, and where each per-record field lies in it."""

    def __init__(self, spec: GenSpec):
        keys = " ".join(chr(65 + k) + "#" * KEY_DIGITS for k in range(spec.keys_per_message))
        rec = MessageRecord(topic="@" * len(topic_name(0)), body=b"~" * spec.body_size,
                            properties={PROP_KEYS: keys, PROP_TAGS: TAGS, PROP_UNIQ_KEY: UNIQ_PREFIX + "$" * 16})
        data = encode_record(rec)
        self.row = np.frombuffer(data, dtype=np.uint8).copy()
        self.size = len(data)
        self.body = data.index(b"~" * spec.body_size)
        self.topic = data.index(b"@" * len(topic_name(0)))
        self.uniq = data.index(b"$" * 16)
        self.keys = [data.index((chr(65 + k) + "#" * KEY_DIGITS).encode()) + 1 for k in range(spec.keys_per_message)]


def _digits(values: np.ndarray, width: int, base: int) -> np.ndarray:
    """ASCII digits (upper-case hex for base 16) of each value, zero-padded to width: a (n, width) matrix."""
    v = values.astype(np.uint64)[:, None]
    powers = np.uint64(base) ** np.arange(width - 1, -1, -1, dtype=np.uint64)
    d = ((v // powers) % np.uint64(base)).astype(np.uint8)
    return np.where(d < 10, d + 48, d + 55).astype(np.uint8)


def _be(values: np.ndarray, dtype: str) -> np.ndarray:
    return np.ascontiguousarray(values.astype(dtype)).view(np.uint8).reshape(len(values), -1)


def _hash_rows(mat: np.ndarray) -> np.ndarray:
    """Java String.hashCode of ASCII byte rows (uint32 wrap-around)."""
    w = np.array([pow(31, mat.shape[1] - 1 - c, 2**32) for c in range(mat.shape[1])], dtype=np.uint32)
    return np.einsum("ij,j->i", mat, w, dtype=np.uint32, casting="unsafe")


class _Writer:
    """Builds the store chunk by chunk."""

    def __init__(self, root: Path, spec: GenSpec):
        self.root, self.spec = root, spec
        self.layout = StoreLayout(root)
        self.t = _Template(spec)
        self.pool, self.crcs = _body_pool(spec, np.random.default_rng(spec.seed))
        self.nq = spec.topics * spec.queues_per_topic
        self.topic_rows = np.array([list(topic_name(t).encode()) for t in range(spec.topics)], dtype=np.uint8)
        self.topic_hash = np.array([java_string_hash(topic_name(t) + "#") & 0xFFFFFFFF
                                    for t in range(spec.topics)], dtype=np.uint32)
        self.tags_code = java_string_hash(TAGS)
        self.cq_fds: dict[tuple[int, int], int] = {}
        self.index: IndexFileBuilder | None = None
        self.index_files: list[str] = []
        self.index_flushed_ts = 0
        self.keys = 0

    # -------------------------------------------------------------- records
    def records(self, i: np.ndarray, phys: np.ndarray) -> np.ndarray:
        spec, t = self.spec, self.t
        n = len(i)
        m = np.empty((n, t.size), dtype=np.uint8)
        m[:] = t.row
        qi = i % self.nq
        topic, qid, qoff = qi // spec.queues_per_topic, qi % spec.queues_per_topic, i // self.nq
        ts = spec.start_timestamp + i * spec.step_ms
        b = _body_index(i)
        m[:, 8:12] = _be(self.crcs[b], ">i4")
        m[:, 12:16] = _be(qid, ">i4")
        m[:, 20:28] = _be(qoff, ">i8")
        m[:, 28:36] = _be(phys, ">i8")
        m[:, 40:48] = _be(ts, ">i8")
        m[:, 56:64] = _be(ts, ">i8")
        m[:, t.body:t.body + spec.body_size] = self.pool[b]
        m[:, t.topic:t.topic + self.topic_rows.shape[1]] = self.topic_rows[topic]
        m[:, t.uniq:t.uniq + 16] = _digits(i, 16, 16)
        digits = _digits(i, KEY_DIGITS, 10)
        for k in t.keys:
            m[:, k:k + KEY_DIGITS] = digits
        self.cq_units(topic, qid, qoff, phys)
        if spec.index:
            self.index_keys(i, topic, digits, phys, ts)
        return m

    # -------------------------------------------------------------- consume queues
    def cq_units(self, topic, qid, qoff, phys) -> None:
        size, f = self.t.size, self.spec.cq_file_size
        for q in np.unique(topic * self.spec.queues_per_topic + qid).tolist():
            sel = np.flatnonzero(topic * self.spec.queues_per_topic + qid == q)
            units = np.empty(len(sel), dtype=[("o", ">i8"), ("s", ">i4"), ("t", ">i8")])
            units["o"], units["s"], units["t"] = phys[sel], size, self.tags_code
            logical = int(qoff[sel[0]]) * CQ_STORE_UNIT_SIZE
            raw = units.tobytes()
            while raw:
                start = logical - logical % f
                room = start + f - logical
                fd = self._cq_fd(q, start)
                write_all(fd, raw[:room], logical - start)
                raw, logical = raw[room:], logical + min(room, len(raw))

    def _cq_fd(self, q: int, start: int) -> int:
        key = (q, start)
        fd = self.cq_fds.get(key)
        if fd is None:
            for k in [k for k in self.cq_fds if k[0] == q]:
                os.close(self.cq_fds.pop(k))
            d = self.layout.cq_dir(topic_name(q // self.spec.queues_per_topic), q % self.spec.queues_per_topic)
            d.mkdir(parents=True, exist_ok=True)
            fd = os.open(d / segment_name(start), os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(fd, self.spec.cq_file_size)
            self.cq_fds[key] = fd
        return fd

    # -------------------------------------------------------------- index
    def index_keys(self, i, topic, digits, phys, ts) -> None:
        kpm = self.spec.keys_per_message + 1
        hashes = np.empty((len(i), kpm), dtype=np.uint32)
        prefix = self.topic_hash[topic]
        uniq = np.concatenate([np.broadcast_to(np.frombuffer(UNIQ_PREFIX.encode(), np.uint8), (len(i), 16)),
                               _digits(i, 16, 16)], axis=1)
        with np.errstate(over="ignore"):
            hashes[:, 0] = prefix * np.uint32(pow(31, 32, 2**32)) + _hash_rows(uniq)
            for k in range(self.spec.keys_per_message):
                letter = np.full((len(i), 1), 65 + k, dtype=np.uint8)
                hashes[:, k + 1] = prefix * np.uint32(pow(31, KEY_DIGITS + 1, 2**32)) + \
                    _hash_rows(np.concatenate([letter, digits], axis=1))
        self.feed_index(hashes.reshape(-1).view(np.int32), np.repeat(phys, kpm), np.repeat(ts, kpm))

    def feed_index(self, h, phy, ts) -> None:
        spec = self.spec
        while len(h):
            if self.index is None or self.index.capacity == 0:
                seed = (self.index.end_phy, self.index.end_ts) if self.index is not None else (0, 0)
                if self.index is not None:
                    self.index.finish()
                    self.index.close()
                    self.index_flushed_ts = seed[1]  # IndexService.flush of a full file sets indexMsgTimestamp
                name = index_file_name(int(ts[0]))
                if self.index_files and (len(name), name) <= (len(self.index_files[-1]), self.index_files[-1]):
                    name = str(int(self.index_files[-1]) + 1)
                self.layout.index_dir.mkdir(parents=True, exist_ok=True)
                self.index = IndexFileBuilder(spec.hash_slots, spec.max_index, *seed,
                                              path=self.layout.index_dir / name)
                self.index_files.append(name)
            took = self.index.add(h, phy, ts)
            self.keys += took
            h, phy, ts = h[took:], phy[took:], ts[took:]

    def close(self) -> None:
        for fd in self.cq_fds.values():
            os.close(fd)
        if self.index is not None:
            self.index.finish()
            self.index.close()


def gen_store(root, spec: GenSpec, progress=None) -> GenResult:
    """Write a new store at `root` (which must not exist or be empty)."""
    t0 = time.monotonic()
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise SystemExit(f"{root} exists and is not empty")
    w = _Writer(root, spec)
    size, f = w.t.size, spec.commitlog_file_size
    per_seg = (f - 8) // size  # a record goes in while TOTALSIZE + 8 <= the room left (format §3.1)
    n = spec.messages or int(spec.gib * (1 << 30)) // size
    cl_dir = root / "commitlog"
    cl_dir.mkdir(parents=True, exist_ok=True)
    chunk = max(1, CHUNK_BYTES // size)
    done, seg_no = 0, 0
    while done < n:
        k = min(per_seg, n - done)
        path = cl_dir / segment_name(seg_no * f)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for lo in range(0, k, chunk):
                m = min(chunk, k - lo)
                i = np.arange(done + lo, done + lo + m, dtype=np.int64)
                phys = seg_no * f + np.arange(lo, lo + m, dtype=np.int64) * size
                write_all(fd, w.records(i, phys).tobytes(), lo * size)
                if progress:
                    progress(done + lo + m, n)
            if done + k < n:
                write_all(fd, blank_record(f - k * size), k * size)
            os.ftruncate(fd, f)
        finally:
            os.close(fd)
        done += k
        seg_no += 1
    w.close()
    _checkpoint(w, spec, n, size, per_seg)
    if spec.abort:
        w.layout.abort.write_text(str(os.getpid()))
    return GenResult(root, n, size, n * size, seg_no, w.index_files, w.keys, time.monotonic() - t0)


def _checkpoint(w: _Writer, spec: GenSpec, n: int, size: int, per_seg: int) -> None:
    """What put's clean shutdown leaves (format §6): the last message's times and start, the index's flush."""
    if n == 0:
        return
    last = n - 1
    ts = spec.start_timestamp + last * spec.step_ms
    cp = Checkpoint(ts, ts, w.index_flushed_ts, 0, (last // per_seg) * spec.commitlog_file_size + (last % per_seg) * size)
    cp.save(w.layout.checkpoint)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", type=Path)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--gib", type=float, help="commit-log size to fill")
    g.add_argument("--messages", type=int)
    ap.add_argument("--body-size", type=int, default=1000)
    ap.add_argument("--topics", type=int, default=4)
    ap.add_argument("--queues-per-topic", type=int, default=4)
    ap.add_argument("--keys-per-message", type=int, default=2)
    ap.add_argument("--commitlog-file-size", type=int, default=1 << 30)
    ap.add_argument("--cq-file-size", type=int, default=6_000_000)
    ap.add_argument("--hash-slots", type=int, default=5_000_000)
    ap.add_argument("--max-index", type=int, default=20_000_000)
    ap.add_argument("--abort", action="store_true", help="leave the abort marker (a crashed writer)")
    ap.add_argument("--no-index", action="store_true")
    a = ap.parse_args()
    spec = GenSpec(messages=a.messages or 0, gib=a.gib or 0.0, body_size=a.body_size, topics=a.topics,
                   queues_per_topic=a.queues_per_topic, keys_per_message=a.keys_per_message,
                   commitlog_file_size=a.commitlog_file_size, cq_file_size=a.cq_file_size, hash_slots=a.hash_slots,
                   max_index=a.max_index, abort=a.abort, index=not a.no_index)

    def progress(done: int, total: int) -> None:
        print(f"\r{done}/{total} messages", end="", file=sys.stderr, flush=True)

    r = gen_store(a.root, spec, progress if sys.stderr.isatty() else None)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    import json

    print(json.dumps(r.as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
