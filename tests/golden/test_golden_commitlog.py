"""Commit-log golden vectors: decode every field, re-encode to the same bytes, read the segments as a store."""
from __future__ import annotations

import json
import shutil

import pytest

from helpers import GOLDEN, run
from engine.broker.commitlog.log import CommitLog
from engine.broker.commitlog.message import (BLANK, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, VALID, check_message,
                                             encode_record, split_keys)

G = GOLDEN / "commitlog"
EXPECTED = [json.loads(l) for l in (G / "messages.jsonl").read_text().splitlines() if l.strip()]
PARAMS = json.loads((G / "params.json").read_text())


@pytest.fixture
def store(tmp_path):
    d = tmp_path / "store" / "commitlog"
    d.mkdir(parents=True)
    for name in PARAMS["files"]:
        shutil.copy(G / name, d / name)
    return tmp_path / "store"


def walk_entries(store):
    cl = CommitLog([store / "commitlog"], None)
    try:
        return list(cl.walk())
    finally:
        cl.close()


def test_walk_matches_every_listed_record(store):
    entries = walk_entries(store)
    assert [e.kind for e in entries] == ["VALID" if x["type"] == "MESSAGE" else "BLANK" for x in EXPECTED]
    for e, x in zip(entries, EXPECTED):
        assert e.offset == x["physicalOffset"]
        assert e.segment == x["file"]
        if x["type"] == "BLANK":
            assert e.size == x["totalSize"]  # the blank's TOTALSIZE = bytes to the end of the segment
            assert e.offset + e.size == int(x["file"]) + PARAMS["mappedFileSize"]
            continue
        r = e.record
        assert r.total_size == x["totalSize"]
        assert r.magic == x["magicCode"]
        assert ("V2" if r.magic == MESSAGE_MAGIC_CODE_V2 else "V1") == x["magicVersion"]
        assert r.body_crc == x["bodyCRC"]
        assert r.queue_id == x["queueId"] and r.flag == x["flag"] and r.queue_offset == x["queueOffset"]
        assert r.sys_flag == x["sysFlag"]
        assert r.born_timestamp == x["bornTimestamp"] and r.store_timestamp == x["storeTimestamp"]
        assert r.born_host_str == x["bornHost"] and r.store_host_str == x["storeHost"]
        assert r.born_host.hex() == x["bornHostAddressHex"] and r.born_port == x["bornPort"]
        assert r.store_host.hex() == x["storeHostAddressHex"] and r.store_port == x["storePort"]
        assert r.reconsume_times == x["reconsumeTimes"]
        assert r.prepared_transaction_offset == x["preparedTransactionOffset"]
        assert len(r.body) == x["bodyLength"] and r.body.hex() == x["bodyHex"]
        assert r.topic == x["topic"] and len(r.topic.encode()) == x["topicLength"]
        assert len(r.properties_raw) == x["propertiesLength"]
        assert r.properties_raw.decode() == x["propertiesString"]
        assert r.properties == x["properties"]
        assert r.properties.get("KEYS") == x["keys"]
        assert split_keys(r.properties.get("KEYS")) == x["keyList"]
        assert r.uniq_key == x["uniqKey"] and r.tags == x["tags"]
        assert r.msg_id == x["offsetMsgId"]
        if "uncompressedBodyHex" in x:
            assert r.compression() == "zlib"
            assert r.decoded_body().data.hex() == x["uncompressedBodyHex"]


def test_reencode_gives_the_same_bytes():
    data = (G / "messages.bin").read_bytes()
    pos, out = 0, b""
    while pos < len(data):
        r = check_message(data, pos)
        assert r.status == VALID
        rec = r.record
        assert encode_record(rec) == data[pos:pos + r.size]
        rec.properties_raw = None  # from the parsed map, in Java HashMap order, as the broker serialises
        out += encode_record(rec)
        pos += r.size
    assert out == data


def test_blank_record_ends_segment_zero(store):
    seg0 = (store / "commitlog" / PARAMS["files"][0]).read_bytes()
    blank = next(x for x in EXPECTED if x["type"] == "BLANK")
    r = check_message(seg0, blank["filePosition"])
    assert r.status == BLANK and r.size == len(seg0) - blank["filePosition"]
    assert not any(seg0[blank["filePosition"] + 8:])  # only the 8 header bytes are written
    assert PARAMS["MESSAGE_MAGIC_CODE"] == MESSAGE_MAGIC_CODE


def test_cli_reads_golden_segments(store):
    r = run(["dump-commitlog", "--store", store, "--json"])
    assert r.exit_code == 0, r.output
    lines = [json.loads(l) for l in r.stdout.splitlines()]
    assert [l["type"] for l in lines] == [x["type"] for x in EXPECTED]
    for l, x in zip(lines, EXPECTED):
        if x["type"] != "MESSAGE":
            continue
        assert l["commitLogOffset"] == x["physicalOffset"] and l["msgId"] == x["offsetMsgId"]
        assert l["keys"] == x["keyList"] and l["storeHost"] == x["storeHost"]
        if "uncompressedBodyHex" in x:
            assert l["body"].encode() == bytes.fromhex(x["uncompressedBodyHex"])
        elif bytes.fromhex(x["bodyHex"]).isascii():
            assert l["body"].encode() == bytes.fromhex(x["bodyHex"])
    v6 = next(x for x in EXPECTED if x.get("sysFlag") == 48)
    r = run(["get", "--store", store, "--msg-id", v6["offsetMsgId"], "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["bornHost"] == v6["bornHost"]
    binary = next(x for x in EXPECTED if x.get("bodyLength") == 256)
    j = json.loads(run(["get", "--store", store, "--offset", binary["physicalOffset"], "--json"]).stdout)
    import base64
    assert j["bodyEncoding"] == "base64" and base64.b64decode(j["body"]).hex() == binary["bodyHex"]
