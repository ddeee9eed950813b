"""A dump's lines put again (issue 33 item 1): a compressed message is stored so that its consumer reads back the
same body, for every codec; and put's own store times never go back within one run (item 2)."""
from __future__ import annotations

import base64
import json
import os
import struct
import zlib

import lz4.frame as lz4_frame
import pytest

from engine.broker.commitlog.compression import decode_body
from helpers import SMALL, put_jsonl, run, said

try:
    from compression import zstd
except ImportError:
    from backports import zstd

RAW = os.urandom(2000) + b"RocketMQ " * 900
GEOM = ["--commitlog-file-size", "1048576"]
CODECS = {"zlib": (0x301, zlib.compress), "zstd": (0x201, zstd.compress), "lz4": (0x101, lz4_frame.compress)}


def _get(store, offset: int) -> dict:
    r = run(["get", "-s", store, *GEOM, "--offset", offset, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _read_record(store, offset: int) -> tuple[int, bytes]:
    """(SYSFLAG, the body bytes as stored) of the IPv4 record at `offset`."""
    files = sorted((store / "commitlog").iterdir())
    for f in files:
        start = int(f.name)
        data = f.read_bytes()
        if start <= offset < start + len(data):
            pos = offset - start
            sys_flag = struct.unpack_from(">i", data, pos + 36)[0]
            blen = struct.unpack_from(">i", data, pos + 84)[0]
            return sys_flag, data[pos + 88:pos + 88 + blen]
    raise AssertionError(f"no segment holds offset {offset}")


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_a_compressed_message_dumped_and_put_again_reads_back_the_same(tmp_path, codec):
    flag, enc = CODECS[codec]
    a, b = tmp_path / "a", tmp_path / "b"
    # As a producer sends it: the compressed bytes with the flag and the codec in SYSFLAG.
    acks = put_jsonl(a, [{"topic": "T", "keys": "k1", "sysFlag": flag, "bodyEncoding": "base64",
                          "body": base64.b64encode(enc(RAW)).decode()}], GEOM)
    first = _get(a, acks[0]["commitLogOffset"])
    assert first["compression"] == codec and first["sysFlag"] == flag
    assert base64.b64decode(first["body"]) == RAW

    # The dump's line, put again as it is.
    acks2 = put_jsonl(b, [first], GEOM)
    again = _get(b, acks2[0]["commitLogOffset"])
    assert again["sysFlag"] == flag and again["compression"] == codec and "compressionError" not in again
    assert base64.b64decode(again["body"]) == RAW
    for k in ("topic", "keys", "uniqKey", "storeTimestamp", "bornTimestamp", "flag", "properties"):
        assert again[k] == first[k], k
    stored_flag, stored = _read_record(b, acks2[0]["commitLogOffset"])
    assert stored_flag == flag and len(stored) < len(RAW)  # compressed again, not the plain body under the flag
    assert decode_body(stored, flag).data == RAW


def test_a_body_that_did_not_decode_is_put_again_as_it_was_stored(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    junk = b"\x00" * 64  # not a zlib stream
    acks = put_jsonl(a, [{"topic": "T", "sysFlag": 0x301, "bodyEncoding": "base64",
                          "body": base64.b64encode(junk).decode()}], GEOM)
    r = run(["get", "-s", a, *GEOM, "--offset", acks[0]["commitLogOffset"], "--json"])
    assert r.exit_code == 3
    line = json.loads(r.stdout)
    assert line["body"] is None and line["compressionError"]
    acks2 = put_jsonl(b, [line], GEOM)
    assert _read_record(b, acks2[0]["commitLogOffset"]) == (0x301, junk)

    del line["storedBody"]
    r = run(["put", "-s", tmp_path / "c", *SMALL, "--from-jsonl", "-"], input=json.dumps(line) + "\n")
    assert r.exit_code == 2 and not (tmp_path / "c").exists()


def test_a_codec_that_disagrees_with_sysflag_is_refused(tmp_path):
    line = {"topic": "T", "sysFlag": 0x301, "compression": "zstd", "body": "plain"}
    r = run(["put", "-s", tmp_path / "s", *SMALL, "--from-jsonl", "-"], input=json.dumps(line) + "\n")
    assert r.exit_code == 2 and not (tmp_path / "s").exists()


def test_store_times_put_takes_never_go_back_with_the_parse_helper(tmp_path, monkeypatch):
    """The helper encodes a block ahead of the writer: its clock is made to lag a second behind the writer's (an
    injected clock, so the test does not depend on timing); every store time put takes is still non-decreasing."""
    from engine.broker.write import jsonl

    monkeypatch.setattr(jsonl, "PARSE_HELPER_MIN_BYTES", 0)  # the engine's threshold: any file uses the helper
    monkeypatch.setattr(jsonl, "READ_CHUNK", 2048)  # blocks of a few lines: many for each process
    helpers = []
    real_init = jsonl.ParseHelper.__init__

    def init(self, *a, **k):
        helpers.append(self)
        real_init(self, *a, **k)
    monkeypatch.setattr(jsonl.ParseHelper, "__init__", init)
    writer = os.getpid()
    base = 1_800_000_000_000
    ticks = iter(range(10**9))

    def clock() -> float:  # the writer's clock advances 1 ms a call; the helper's lags 1 s behind it
        return (base + next(ticks) - (0 if os.getpid() == writer else 1000)) / 1000
    monkeypatch.setattr("time.time", clock)

    msgs = [{"topic": "T", "keys": f"k{i}", "body": f"b{i}"} for i in range(300)]  # plain: the fast path
    msgs += [{"topic": "T", "keys": f"j{i}", "body": "x", "flag": 1} for i in range(300)]  # add_json one by one
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(m) + "\n" for m in msgs))
    r = run(["put", "-s", tmp_path / "s", *GEOM, "--from-jsonl", src, "--json"])
    assert r.exit_code == 0, r.output
    assert helpers, "the parse helper was not used"
    acks = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(acks) == 600
    times = [a["storeTimestamp"] for a in acks]
    assert all(a <= b for a, b in zip(times, times[1:]))
    assert said(r) == []  # no note that a store time went back (nor any other)

    r = run(["dump-commitlog", "-s", tmp_path / "s", *GEOM, "--json"])
    assert r.exit_code == 0, r.output
    dumped = [json.loads(x) for x in r.stdout.splitlines()]
    assert [d["storeTimestamp"] for d in dumped] == times
    assert all(d["bornTimestamp"] == d["storeTimestamp"] for d in dumped)


def test_store_times_the_input_gives_are_kept_even_when_they_go_back(tmp_path):
    msgs = [{"topic": "T", "body": "a", "storeTimestamp": 1_700_000_002_000},
            {"topic": "T", "body": "b", "storeTimestamp": 1_700_000_001_000}]
    acks = put_jsonl(tmp_path / "s", msgs, GEOM)
    assert [a["storeTimestamp"] for a in acks] == [1_700_000_002_000, 1_700_000_001_000]
