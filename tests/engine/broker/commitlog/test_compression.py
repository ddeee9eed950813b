"""Compressed message bodies (format §2.3): every codec a RocketMQ client writes, decoded as its consumer decodes
it, through the one decoder (engine.broker.commitlog.compression) that every view calls. The real client's bodies are
checked against broker/r1 (tests/golden/test_golden_broker.py); here: the framing rules, and a body that does not decode.
"""
from __future__ import annotations

import base64
import json
import os
import struct
import zlib

import lz4.frame as lz4_frame
import pytest

from engine.broker.commitlog import compression
from engine.broker.commitlog.compression import MAX_DECODED_BODY, codec_of, decode_body
from engine.java.lang import rmq_crc32
from helpers import jsonl, run, said, BROKER_R1

try:
    from compression import zstd
except ImportError:
    from backports import zstd

RAW = os.urandom(3000) + b"RocketMQ " * 2000
ZLIB, ZSTD, LZ4 = 0x301, 0x201, 0x101


def test_codec_names_follow_compression_type_find_by_value():
    assert codec_of(0) is None and codec_of(0x300) is None  # bit 0 clear: stored as sent, whatever bits 8-10 say
    assert [codec_of(0x1 | v << 8) for v in range(8)] == ["zlib", "lz4", "zstd", "zlib", "unknown(4)", "unknown(5)",
                                                          "unknown(6)", "unknown(7)"]


@pytest.mark.parametrize("flag,encode", [
    (ZLIB, zlib.compress), (0x1, zlib.compress), (ZSTD, zstd.compress), (LZ4, lz4_frame.compress)])
def test_each_codec_decodes(flag, encode):
    b = decode_body(encode(RAW), flag)
    assert b.ok and b.data == RAW and b.codec == codec_of(flag)


def test_frames_follow_one_another_as_the_java_streams_read_them():
    # ZstdInputStream and LZ4FrameInputStream read frame after frame; InflaterInputStream stops at the stream's end.
    assert decode_body(zstd.compress(RAW) + zstd.compress(b"tail"), ZSTD).data == RAW + b"tail"
    assert decode_body(lz4_frame.compress(RAW) + lz4_frame.compress(b"tail"), LZ4).data == RAW + b"tail"
    assert decode_body(zlib.compress(RAW) + b"after the stream", ZLIB).data == RAW


@pytest.mark.parametrize("flag,data,why", [
    (ZLIB, zlib.compress(RAW)[:-4], "ends early"),
    (ZSTD, zstd.compress(RAW)[:-4], "ends early"),
    (LZ4, lz4_frame.compress(RAW)[:-4], "ends early"),
    (ZSTD, zstd.compress(RAW) + b"not a frame", "not zstd frames"),
    (LZ4, b"\x00" * 32, "not lz4 frames"),
    (ZLIB, b"\x00" * 32, "not a zlib stream"),
    (0x501, zlib.compress(RAW), "none of RocketMQ's"),
], ids=["zlib-cut", "zstd-cut", "lz4-cut", "zstd-trailing", "lz4-zeros", "zlib-zeros", "codec-5"])  # RAW is random:
# named ids keep the test names the same in every process (pytest-xdist's workers must collect the same tests)
def test_a_body_that_does_not_decode_says_why_and_keeps_the_stored_bytes(flag, data, why):
    b = decode_body(data, flag)
    assert not b.ok and why in b.error
    assert b.data == data  # the stored bytes, for a caller that shows them as such


def test_decoding_is_bounded(monkeypatch):
    monkeypatch.setattr(compression, "MAX_DECODED_BODY", 10_000)
    for flag, enc in ((ZLIB, zlib.compress), (ZSTD, zstd.compress), (LZ4, lz4_frame.compress)):
        b = decode_body(enc(b"\0" * 50_000), flag)
        assert not b.ok and "MAX_DECODED_BODY" in b.error
    assert MAX_DECODED_BODY >= 4 << 20  # the producer's default maxMessageSize fits


def _spoil_body(store, offset: int) -> bytes:
    """Spoil the frame magic of the compressed body of the record at `offset` (of a store with 1 MiB segments) and
    write the body CRC of the new bytes, so the record stays VALID and only its body fails to decode."""
    seg = store / "commitlog" / f"{offset - offset % (1 << 20):020d}"
    with open(seg, "r+b") as f:
        pos = offset % (1 << 20)
        f.seek(pos)
        head = f.read(100)
        sys_flag = struct.unpack_from(">i", head, 36)[0]
        body_at = 76 + (16 if sys_flag & 0x10 else 4) + (16 if sys_flag & 0x20 else 4)
        body_len = struct.unpack_from(">i", head, body_at)[0]
        f.seek(pos + body_at + 4)
        body = bytearray(f.read(body_len))
        body[0:4] = b"\0\0\0\0"
        f.seek(pos + body_at + 4)
        f.write(body)
        f.seek(pos + 8)
        f.write(struct.pack(">i", rmq_crc32(bytes(body))))
    return bytes(body)


def test_a_body_that_does_not_decode_is_reported_never_shown_as_the_message(r1_store, tmp_path):
    delivered = [d for d in jsonl(BROKER_R1 / "answers" / "consumed_G_ALL.jsonl")
                 if d["topic"] == "TopicBig" and d["sysFlag"] & 0x700 == 0x200]
    victim = delivered[0]
    off = victim["commitLogOffset"]
    store = r1_store
    stored = _spoil_body(store, off)

    r = run(["get", "-s", store, "--offset", off, "--json"])
    assert r.exit_code == 3, r.output
    j = json.loads(r.stdout)
    assert j["body"] is None and j["compression"] == "zstd" and j["compressionError"]
    assert base64.b64decode(j["storedBody"]) == stored
    (bad,) = said(r, "body-undecodable")
    assert (bad["commitLogOffset"], bad["codec"]) == (off, "zstd") and "error" in bad

    r = run(["get", "-s", store, "--offset", off])
    assert r.exit_code == 3 and "does not decode" in r.stdout and "does not decode" in r.stderr

    for mode in ("auto", "utf8", "hex", "base64", "none"):
        r = run(["dump-commitlog", "-s", store, "--topic", "TopicBig", "--json", "--body", mode])
        assert r.exit_code == 3, (mode, r.output)
        lines = {d["commitLogOffset"]: d for d in map(json.loads, r.stdout.split("\n")[:-1])}
        assert lines[off]["body"] is None and "compressionError" in lines[off]
        assert sum(1 for d in lines.values() if "compressionError" in d) == 1
        assert [b["commitLogOffset"] for b in said(r, "body-undecodable")] == [off]
        assert [n["bodies"] for n in said(r, "bodies-undecodable")] == [1]

    out = tmp_path / "bodies"
    r = run(["dump-commitlog", "-s", store, "--topic", "TopicBig", "--body-dir", out])
    assert r.exit_code == 3, r.output
    assert not (out / f"{off:020d}.body").exists()
    assert (out / f"{off:020d}.stored").read_bytes() == stored
    assert len(list(out.glob("*.body"))) == 29

    key = victim["keys"].split(" ")[0]
    r = run(["query-key", "-s", store, "--topic", "TopicBig", "--key", key, "--json"])
    j = json.loads(r.stdout)
    assert r.exit_code == 3 and j["body"] is None and j["compressionError"]
    assert [b["commitLogOffset"] for b in said(r, "body-undecodable")] == [off]

    r = run(["print-msg", "-s", store, "--topic", "TopicBig", "--begin", "0", "--end", "now"])
    assert r.exit_code == 3 and "<zstd body does not decode>" in r.stdout
    r = run(["print-msg", "-s", store, "--topic", "TopicBig", "--begin", "0", "--end", "now", "--json"])
    (bad,) = said(r, "body-undecodable")
    assert r.exit_code == 3 and (bad["commitLogOffset"], bad["queueOffset"]) == (off, victim["queueOffset"])
