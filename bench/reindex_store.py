"""A realistic commit log of N GiB for the reindex benchmarks, written quickly and in bounded memory.

Every message is MSG_SIZE bytes, topic TopicBench, queue i % 8, 3 index keys (UNIQ_KEY and two KEYS tokens,
"order-<8 digits>" and "user-<5 digits>"), TAGS and WAIT properties, store time T0 + i // 5; the body is one
of 64 slices of random bytes (so its CRC is one of 64). Records are not encoded one by one: one template
record is encoded with engine.broker.commitlog.message.encode_record, tiled into a (messages, MSG_SIZE) matrix per
chunk, and the fields that vary (offsets, times, queue, CRC, body, the digits of the keys) are written as
columns. Segments end with the BLANK filler (format §3.1). The first messages of every segment are checked
against encode_record.

    python3 bench/reindex_store.py DIR --gib 1      # DIR/commitlog/ (reused when already there)
"""
from __future__ import annotations

import json
import random
import shutil
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from engine.broker.commitlog.message import MessageRecord, blank_record, encode_record  # noqa: E402

T0 = 1_700_000_000_000
TOPIC = "TopicBench"
PREFIX = "TopicBench#order-"
MSG_SIZE = 1024
GiB = 1 << 30
CHUNK = 1 << 16  # messages per generated block: 64 MiB of memory at most


def message(i: int, phy: int, body: bytes = b"") -> MessageRecord:
    props = (f"KEYS\x01order-{i:08d} user-{i % 100000:05d}\x02UNIQ_KEY\x01C0A8010A1F2E3D4C5B6A7980{i:08X}\x02"
             f"TAGS\x01TagA\x02WAIT\x01true\x02").encode()
    return MessageRecord(topic=TOPIC, queue_id=i % 8, queue_offset=i // 8, physical_offset=phy,
                         born_timestamp=T0 + i // 5 - 3, store_timestamp=T0 + i // 5, properties_raw=props,
                         body=body)


def body_len() -> int:
    return MSG_SIZE - len(encode_record(message(0, 0)))


def _digits(x: np.ndarray, k: int, base: int = 10) -> np.ndarray:
    table = np.frombuffer(b"0123456789ABCDEF", np.uint8)
    return table[(x[:, None] // base ** np.arange(k - 1, -1, -1, dtype=np.int64)) % base]


def gen_segment(path: Path, seg_no: int, seg_size: int) -> int:
    """One full commit-log segment; returns its message count."""
    per = (seg_size - 8) // MSG_SIZE
    blen = body_len()
    base = random.Random(seg_no).randbytes(MSG_SIZE)
    variants = np.frombuffer(b"".join(base[v:v + blen] for v in range(64)), np.uint8).reshape(64, blen)
    crcs = np.array([zlib.crc32(variants[v].tobytes()) & 0x7FFFFFFF for v in range(64)], dtype=np.int64)
    template = encode_record(message(0, 0, variants[0].tobytes()))
    t = np.frombuffer(template, np.uint8)
    at = {"keys": template.index(b"order-") + 6, "user": template.index(b"user-") + 5,
          "uniq": template.index(b"7980", template.index(b"UNIQ_KEY")) + 4, "body": template.index(variants[0])}
    start = seg_no * seg_size
    with open(path, "wb") as f:
        for a in range(0, per, CHUNK):
            b = min(per, a + CHUNK)
            i = seg_no * per + np.arange(a, b, dtype=np.int64)
            m = np.tile(t, (b - a, 1))
            for off, vals, dt in ((8, crcs[i % 64], ">i4"), (12, i % 8, ">i4"), (20, i // 8, ">i8"),
                                  (28, start + np.arange(a, b, dtype=np.int64) * MSG_SIZE, ">i8"),
                                  (40, T0 + i // 5 - 3, ">i8"), (56, T0 + i // 5, ">i8")):
                w = np.dtype(dt).itemsize
                m[:, off:off + w] = vals.astype(dt).view(np.uint8).reshape(b - a, w)
            m[:, at["body"]:at["body"] + blen] = variants[i % 64]
            m[:, at["keys"]:at["keys"] + 8] = _digits(i, 8)
            m[:, at["user"]:at["user"] + 5] = _digits(i % 100000, 5)
            m[:, at["uniq"]:at["uniq"] + 8] = _digits(i, 8, 16)
            f.write(m.tobytes())
        f.write(blank_record(seg_size - per * MSG_SIZE))
        f.truncate(seg_size)
    with open(path, "rb") as f:
        head = f.read(4 * MSG_SIZE)
    for j in range(4):
        n = seg_no * per + j
        want = encode_record(message(n, start + j * MSG_SIZE, variants[n % 64].tobytes()))
        if head[j * MSG_SIZE:(j + 1) * MSG_SIZE] != want:
            raise AssertionError(f"generated message {n} differs from encode_record")
    return per


def ensure_store(store: Path, segments: int, seg_size: int = GiB) -> tuple[int, float]:
    """The bench store under `store` (reused when already there with the same geometry): (messages, seconds)."""
    cl = store / "commitlog"
    marker = store / "bench.json"
    want = {"segments": segments, "seg_size": seg_size, "msg_size": MSG_SIZE, "generator": 2}
    if marker.exists() and json.loads(marker.read_text()) == want:
        return ((seg_size - 8) // MSG_SIZE) * segments, 0.0
    shutil.rmtree(store, ignore_errors=True)
    cl.mkdir(parents=True)
    t = time.perf_counter()
    n = sum(gen_segment(cl / f"{s * seg_size:020d}", s, seg_size) for s in range(segments))
    marker.write_text(json.dumps(want))
    return n, time.perf_counter() - t


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path)
    ap.add_argument("--gib", type=int, default=1, help="segments of 1 GiB")
    ap.add_argument("--segment-size", type=int, default=GiB)
    args = ap.parse_args()
    segs = max(1, args.gib * GiB // args.segment_size)
    n, sec = ensure_store(args.dir, segs, args.segment_size)
    print(f"{n} messages in {segs} segment(s) of {args.segment_size} bytes under {args.dir}"
          + (f", written in {sec:.1f} s" if sec else " (reused)"))
