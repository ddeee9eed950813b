"""Message record codec: the worked example of format §A.1, v1/v2, properties, CRCs, damage classification."""
from __future__ import annotations

import struct

import pytest

from engine.broker.commitlog.message import (BLANK, CORRUPT, LENGTH_MISMATCH, MESSAGE_MAGIC_CODE_V2, VALID,
                                             MessageEncodeError, MessageRecord, blank_record, check_message,
                                             decode_offset_msg_id, encode_record, parse_host, parse_properties,
                                             split_keys, tags_code)



def spec_a1() -> MessageRecord:
    return MessageRecord(
        topic="TopicTest", body=b"Hello RocketMQ", queue_id=3, queue_offset=42, physical_offset=1073741824,
        born_timestamp=1700000000000, born_host=bytes([192, 168, 0, 10]), born_port=54321,
        store_timestamp=1700000000123, store_host=bytes([10, 0, 0, 1]), store_port=10911,
        properties_raw=b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01C0A8000A00002A9F0000000000000001\x02",
        properties={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "C0A8000A00002A9F0000000000000001"})


SPEC_A1_HEX = """
00 00 00 b1 da a3 20 a7 69 c8 65 ed 00 00 00 03 00 00 00 00 00 00 00 00 00 00 00 2a 00 00 00 00
40 00 00 00 00 00 00 00 00 00 01 8b cf e5 68 00 c0 a8 00 0a 00 00 d4 31 00 00 01 8b cf e5 68 7b
0a 00 00 01 00 00 2a 9f 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 0e 48 65 6c 6c 6f 20 52 6f
63 6b 65 74 4d 51 09 54 6f 70 69 63 54 65 73 74 00 3f 54 41 47 53 01 54 61 67 41 02 4b 45 59 53
01 6b 31 20 6b 32 02 55 4e 49 51 5f 4b 45 59 01 43 30 41 38 30 30 30 41 30 30 30 30 32 41 39 46
30 30 30 30 30 30 30 30 30 30 30 30 30 30 30 31 02
"""


def test_spec_worked_example_a1():
    data = encode_record(spec_a1())
    assert data == bytes.fromhex(SPEC_A1_HEX.replace("\n", " ").replace(" ", ""))
    r = check_message(data)
    assert r.status == VALID and r.size == 177
    assert r.record.body_crc == 1774740973 and r.record.tags_code() == 2598919
    assert r.record.index_keys() == ["TopicTest#C0A8000A00002A9F0000000000000001", "TopicTest#k1", "TopicTest#k2"]


def test_v2_chosen_by_utf16_length_not_bytes():
    r127 = MessageRecord(topic="t" * 127)
    assert check_message(encode_record(r127)).record.magic != MESSAGE_MAGIC_CODE_V2
    r128 = MessageRecord(topic="t" * 128)
    rec = check_message(encode_record(r128)).record
    assert rec.magic == MESSAGE_MAGIC_CODE_V2 and rec.topic == "t" * 128
    # 64 emoji = 128 UTF-16 units (> 127) but only 256 bytes: v2
    emoji = MessageRecord(topic="😀" * 64)
    assert check_message(encode_record(emoji)).record.magic == MESSAGE_MAGIC_CODE_V2
    # 60 Cyrillic letters = 60 units, 120 bytes: v1
    assert check_message(encode_record(MessageRecord(topic="ж" * 60))).record.magic != MESSAGE_MAGIC_CODE_V2
    with pytest.raises(MessageEncodeError):
        encode_record(MessageRecord(topic="ж" * 100), v2=False)  # 200 bytes cannot be stored in a signed byte


def test_property_parser_rules():
    assert parse_properties("a\x01b\x02c\x01d") == {"a": "b", "c": "d"}          # no trailing separator
    assert parse_properties("a\x01b\x01c\x02") == {"a": "b\x01c"}                # only the first 0x01 splits
    assert parse_properties("\x01x\x02k\x01\x02kk\x01v\x02") == {"kk": "v"}      # empty names/values dropped
    assert parse_properties("k\x01v1\x02k\x01v2\x02") == {"k": "v2"}             # later duplicates win
    assert split_keys("a  b ") == ["a", "", "b"] and split_keys("") == []


def test_property_crc_roundtrip():
    rec = MessageRecord(topic="T", body=b"x", properties={"KEYS": "a"})
    data = encode_record(rec, append_prop_crc=True)
    assert data[-20:-11] == b"__CRC32#\x01" and data[-1:] == b"\x02"
    r = check_message(data, force_verify_prop_crc=True)
    assert r.status == VALID
    from engine.java.lang import rmq_crc32
    assert r.record.prop_crc() == rmq_crc32(data[:-20])
    bad = bytearray(data)
    bad[30] ^= 1  # inside PHYSICALOFFSET: covered by the whole-record CRC, not by the body CRC
    assert check_message(bytes(bad), force_verify_prop_crc=True).status == CORRUPT
    assert check_message(bytes(bad)).status == VALID
    assert r.record.prop_crc_valid is True and check_message(bytes(bad)).record.prop_crc_valid is False
    assert check_message(bytes(bad)).record.to_json()["propertiesCRC"]["valid"] is False


def test_reversed_crc_digits():
    from engine.broker.commitlog.message import CRC32_RESERVED_LEN
    assert CRC32_RESERVED_LEN == 20
    c = 1774740973
    assert "".join(str((c // 10 ** k) % 10) for k in range(10)) == "3790474771"


def test_damage_classification_never_raises():
    data = encode_record(spec_a1())
    assert check_message(data[:100]).status == CORRUPT                       # half message
    assert check_message(b"\x00" * 64).status == CORRUPT                     # zero area
    flipped = bytearray(data); flipped[0x58] ^= 0xFF                         # body byte -> CRC mismatch
    assert check_message(bytes(flipped)).status == CORRUPT
    assert check_message(bytes(flipped), check_crc=False).status == VALID
    bad_magic = bytearray(data); bad_magic[5] ^= 1
    assert check_message(bytes(bad_magic)).status == CORRUPT
    neg_topic = bytearray(data); neg_topic[0x66] = 0x80
    assert check_message(bytes(neg_topic)).status == CORRUPT
    longer = struct.pack(">i", 180) + data[4:] + b"\x00\x00\x00"
    assert check_message(longer).status == LENGTH_MISMATCH
    assert check_message(blank_record(1411)).status == BLANK
    for cut in range(len(data)):
        assert check_message(data[:cut]).status == CORRUPT
    for i in range(len(data)):                                                # any single flipped byte
        b = bytearray(data); b[i] ^= 0x5A
        assert check_message(bytes(b)).status in (VALID, CORRUPT, LENGTH_MISMATCH, BLANK)


def test_hosts_and_ids():
    assert parse_host("[2001:db8::1]:40000") == (bytes.fromhex("20010db8000000000000000000000001"), 40000)
    assert parse_host("10.0.0.5:10911") == (bytes([10, 0, 0, 5]), 10911)
    with pytest.raises(ValueError):
        parse_host("not-an-ip:1")
    assert decode_offset_msg_id("0A00000500002A9F0000000000000987") == (bytes([10, 0, 0, 5]), 10911, 0x987)
    with pytest.raises(ValueError):
        decode_offset_msg_id("XYZ")


def test_schedule_topic_tags_code():
    assert tags_code("SCHEDULE_TOPIC_XXXX", "TagA", {"DELAY": "3"}, 1000) == 1000 + 10_000
    assert tags_code("SCHEDULE_TOPIC_XXXX", "TagA", {"DELAY": "99"}, 1000) == 1000 + 7_200_000  # clamped to 18
    assert tags_code("T", "TagA", {}, 1000) == 2598919 and tags_code("T", None, {}, 1) == 0
