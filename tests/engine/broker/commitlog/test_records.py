"""engine.broker.commitlog.records: the vectorised phase A walk returns exactly what the per-record walk returns."""
from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from engine.broker.commitlog import records
from engine.broker.commitlog.message import BLANK_MAGIC_CODE, MessageRecord, encode_record
from engine.broker.commitlog.records import BufferViews, record_chain, record_chain_vector, decode_segment


def _record(rnd: random.Random, pos: int, fake_chain: bool = False) -> bytes:
    if fake_chain:  # a body that holds record headers (MAGICCODE bytes at plausible places)
        body, p = bytearray(), 0
        for i in range(rnd.randrange(1, 5)):
            inner = encode_record(MessageRecord(topic="F", body=b"f" * rnd.randrange(0, 30), physical_offset=p))
            body += inner
            p += len(inner)
        body = bytes(body)
    else:
        body = bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 300)))
    topic = "T" * rnd.randrange(1, 6) if rnd.random() < 0.9 else "V" * 130  # > 127 chars: a v2 record
    r = MessageRecord(topic=topic, body=body, properties={"KEYS": f"k{pos}"}, physical_offset=pos,
                      queue_id=rnd.randrange(4))
    return encode_record(r)


def _buffer(seed: int) -> bytearray:
    """Records, then one ending chosen at random: a BLANK filler, a zero tail, or damage of some kind."""
    rnd = random.Random(seed)
    out = bytearray()
    for _ in range(rnd.randrange(0, 120)):
        out += _record(rnd, len(out), fake_chain=rnd.random() < 0.15)
    ending = rnd.choice(["blank", "zeros", "none", "magic", "total_big", "total_small", "total_neg", "short",
                         "partial"])
    if ending == "blank":
        out += struct.pack(">ii", 64, BLANK_MAGIC_CODE) + bytes(56)
    elif ending == "zeros":
        out += bytes(rnd.randrange(1, 200))
    elif ending == "short":
        out += b"\x01\x02\x03"
    elif ending == "partial":
        out += _record(rnd, len(out))[:rnd.randrange(8, 60)]
    elif ending != "none" and out:
        # damage one record in the middle (its successors stay, and must not be returned)
        starts, _, _ = record_chain(bytes(out), 0, len(out), len(out))
        at = rnd.choice(starts)
        if ending == "magic":
            out[at + 4:at + 8] = b"\x00\x00\x00\x01"
        elif ending == "total_big":
            struct.pack_into(">i", out, at, len(out) - at + 1)
        elif ending == "total_small":
            struct.pack_into(">i", out, at, rnd.choice([4, 5, 7, 13]))
        else:
            struct.pack_into(">i", out, at, -rnd.randrange(1, 1000))
    return out


@pytest.fixture
def tiny_blocks(monkeypatch):
    monkeypatch.setattr(records, "_VECTOR_MIN", 0)
    monkeypatch.setattr(records, "_CANDIDATE_BLOCK", 97)  # block edges fall inside headers


@pytest.mark.parametrize("seed", range(60))
def test_vector_walk_equals_per_record_walk(tiny_blocks, seed):
    buf = bytes(_buffer(seed))
    rnd = random.Random(1000 + seed)
    v = BufferViews(buf)
    n = len(buf)
    plain_starts, _, _ = record_chain(buf, 0, n, n + 1)
    starts_from = [0] + rnd.sample(plain_starts, min(3, len(plain_starts)))
    for pos in starts_from:
        for limit in (n + 1, pos + rnd.randrange(1, max(2, n - pos + 1)), pos + 1):
            want_starts, want_pos, want_end = record_chain(buf, pos, n, limit)
            got_starts, got_pos, got_end = record_chain_vector(v, buf, pos, limit)
            assert got_starts.tolist() == want_starts
            assert got_pos == want_pos
            assert got_end == want_end
    v.close()


def test_false_magic_candidates_are_jumped_over(tiny_blocks):
    rnd = random.Random(7)
    buf = bytearray()
    for _ in range(30):
        buf += _record(rnd, len(buf), fake_chain=True)
    buf = bytes(buf)
    v = BufferViews(buf)
    cand = records.magic_candidates(v.b, 0, len(buf) - 7)
    starts = record_chain_vector(v, buf, 0, len(buf) + 1)[0]
    assert len(cand) > len(starts) == 30  # the bodies' headers are candidates, and are not records
    v.close()


def test_decode_segment_batches_are_unchanged_by_the_vector_walk(monkeypatch):
    buf = bytes(_buffer(3)) + bytes(100)
    monkeypatch.setattr(records, "_VECTOR_MIN", 1 << 40)  # the per-record walk only
    want = list(decode_segment(buf, window=4096))
    monkeypatch.setattr(records, "_VECTOR_MIN", 0)
    monkeypatch.setattr(records, "_CANDIDATE_BLOCK", 1000)
    got = list(decode_segment(buf, window=4096))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is type(w)
        if isinstance(w, records.SegmentEnd):
            assert g == w
        else:
            for f in w.__dataclass_fields__:
                assert np.array_equal(getattr(g, f), getattr(w, f)), f


def _batches(items) -> list:
    out = []
    for it in items:
        if isinstance(it, records.SegmentEnd):
            out.append(("end", it.kind, it.pos, it.reason))
        else:
            out.append({f: getattr(it, f).copy() for f in it.__dataclass_fields__})
    return out


def _assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, tuple):
            assert g == w
        else:
            for f in w:
                assert np.array_equal(g[f], w[f]), f


@pytest.mark.parametrize("seed", [3, 11, 25, 40])
def test_prefetched_candidates_give_the_same_batches(tiny_blocks, seed):
    """decode_segment with the next window's candidates found elsewhere (decode_segment's prefetch, here a
    thread over the same bytes) yields exactly the batches and the end it yields without."""
    import concurrent.futures as cf

    buf = bytes(_buffer(seed)) + bytes(50)
    want = _batches(decode_segment(buf, window=700))
    b = np.frombuffer(buf, dtype=np.uint8)
    asked = []
    with cf.ThreadPoolExecutor(1) as pool:
        def prefetch(a, hi):  # "busy" every third time: that block is scanned by the walk itself
            asked.append((a, hi))
            return None if len(asked) % 3 == 0 else pool.submit(records.magic_candidates, b, a, hi)
        for start in (0, record_chain(buf, 0, len(buf), len(buf) // 3)[1]):
            if start >= len(buf):
                continue
            got = _batches(decode_segment(buf, start, window=700, prefetch=prefetch))
            _assert_same(got, _batches(decode_segment(buf, start, window=700)))
        got = _batches(decode_segment(buf, window=700, prefetch=prefetch))
    _assert_same(got, want)
    if len(buf) >= 1400:
        assert asked  # the prefetch was used: blocks of the window's size, ahead of the walk
        assert all(hi - a <= 700 for a, hi in asked)


def test_crc32_is_zlibs():
    """engine.java.crc.crc32 (ISA-L's when installed) gives zlib's CRC-32 for every length and alignment,
    from bytes and from memoryview slices, with and without a start value."""
    import zlib

    from engine.java.crc import crc32

    rnd = random.Random(5)
    data = bytes(rnd.randrange(256) for _ in range(70_000))
    mv = memoryview(data)
    for n in list(range(0, 70)) + [255, 256, 1023, 1024, 1025, 4096, 65_537]:
        a = rnd.randrange(0, len(data) - n + 1)
        assert crc32(data[a:a + n]) == zlib.crc32(data[a:a + n])
        assert crc32(mv[a:a + n]) == zlib.crc32(mv[a:a + n])
        assert crc32(data[a:a + n], 12345) == zlib.crc32(data[a:a + n], 12345)


@pytest.mark.parametrize("seed", range(12))
def test_hints_change_nothing(tiny_blocks, seed):
    """decode_segment with hints (where records are believed to start: a random part of the true starts, plus
    positions inside records, past the data and negative ones, as a damaged consume queue would give) yields
    exactly the batches it yields without them."""
    buf = bytes(_buffer(seed)) + bytes(40)
    rnd = random.Random(seed)
    true_starts, _, _ = record_chain(buf, 0, len(buf), len(buf))
    keep = rnd.choice([1.0, 0.9, 0.5, 0.0])
    h = [s for s in true_starts if rnd.random() < keep]
    h += [rnd.randrange(len(buf)) for _ in range(rnd.randrange(0, 20))] + [-5, len(buf) + 3]
    hints_arr = np.unique(np.array(h, dtype=np.int64))
    asked = []

    def hints(pos, hi):
        asked.append((pos, hi))
        return hints_arr
    for window in (300, 5000):
        want = _batches(decode_segment(buf, window=window))
        got = _batches(decode_segment(buf, window=window, hints=hints))
        _assert_same(got, want)
    assert asked or len(buf) < 300


class _AdvisedMap(__import__("mmap").mmap):
    """An mmap that records its madvise calls."""

    def madvise(self, *args):
        self.calls = getattr(self, "calls", []) + [args]
        return super().madvise(*args)


@pytest.mark.parametrize("release", [True, False])
def test_decode_segment_leaves_page_release_to_the_caller_when_asked(tmp_path, tiny_blocks, release):
    """Issue 13: a walk that holds a batch while the next is decoded (the CRC helper's pipeline) releases each
    window's pages itself after its consumers, so decode_segment(release=False) must not drop them (the
    consumers would map them again); with release=True it drops the decoded windows as it goes. The batches
    are the same either way."""
    import mmap

    rnd = random.Random(3)
    out = bytearray()
    while len(out) < 6 * mmap.PAGESIZE:
        out += _record(rnd, len(out))
    buf = bytes(out + bytes(-len(out) % mmap.PAGESIZE))
    path = tmp_path / "seg"
    path.write_bytes(buf)
    with open(path, "rb") as f:
        m = _AdvisedMap(f.fileno(), 0, access=mmap.ACCESS_READ)
        got = [(b.pos.tolist(), b.total.tolist()) for b in decode_segment(m, 0, window=mmap.PAGESIZE,
                                                                       release=release) if isinstance(b, records.RecordBatch)]
        calls = getattr(m, "calls", [])
        m.close()
    want = [(b.pos.tolist(), b.total.tolist()) for b in decode_segment(buf, 0, window=mmap.PAGESIZE)
            if isinstance(b, records.RecordBatch)]
    assert got == want and len(got) > 2
    assert bool(calls) is release


@pytest.mark.parametrize("seed", range(4))
def test_key_columns_are_the_same_extracted_in_slices(monkeypatch, seed):
    """batch_key_columns extracts the keys KEY_ROWS records at a time (memory); slices of any size give the
    columns of the whole window at once, and both match each record's own index_keys()."""
    from engine.broker.index import keycolumns
    from engine.broker.commitlog.message import check_message
    from engine.broker.commitlog.records import RecordBatch
    from engine.java.lang import java_string_hash

    rnd = random.Random(seed)
    out = bytearray()
    for i in range(300):
        props = {}
        if rnd.random() < 0.8:
            props["UNIQ_KEY"] = f"U{i}"
        if rnd.random() < 0.7:
            props["KEYS"] = " ".join(f"k{i}-{j}" for j in range(rnd.randrange(0, 4)))
        sys_flag = 0xC if rnd.random() < 0.1 else 0  # a rollback indexes no key
        out += encode_record(MessageRecord(topic="T" * rnd.randrange(1, 9), body=b"b" * rnd.randrange(0, 40),
                                           properties=props, physical_offset=len(out), sys_flag=sys_flag))
    buf = bytes(out)
    batch = next(x for x in decode_segment(buf, 0, window=len(buf) + 1) if isinstance(x, RecordBatch))
    b = np.frombuffer(buf, dtype=np.uint8)
    whole = keycolumns.batch_key_columns(buf, b, batch, 0)
    want = []
    for p in batch.pos.tolist():
        rec = check_message(buf, p, len(buf)).record
        want.append([java_string_hash(k) for k in rec.index_keys()] if (rec.sys_flag & 0xC) != 0xC else [])
    assert whole["nkeys"].tolist() == [len(w) for w in want]
    assert whole["key_hash"].tolist() == [h for w in want for h in w]
    for rows in (1, 7, 64):
        monkeypatch.setattr(keycolumns, "KEY_ROWS", rows)
        got = keycolumns.batch_key_columns(buf, b, batch, 0)
        assert got["nkeys"].tolist() == whole["nkeys"].tolist()
        assert got["key_hash"].tolist() == whole["key_hash"].tolist()
        assert got["rollbacks"] == whole["rollbacks"] and got["phy"].tolist() == whole["phy"].tolist()
