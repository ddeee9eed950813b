"""CLI tests on temporary stores: put, query-key, inspect-index, get, dump-commitlog and bad input."""
from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import READ_GEOM, SMALL, assert_one_line_error, jlines, lock_held, put_jsonl, run, said, snapshot
from engine.broker.index.file import IndexFile
from engine.broker.layout import list_index_files
from engine.java.lang import index_hash, java_string_hash

T0 = 1_700_000_000_000


def msg(topic, keys, ts, body="b", **kw):
    m = {"topic": topic, "keys": keys, "body": body, "storeTimestamp": ts}
    m.update(kw)
    return m


def query(store, topic, key, *extra):
    r = run(["query-key", "--store", store, *READ_GEOM, "--topic", topic, "--key", key, "--json", *extra])
    assert r.exit_code == 0, r.output
    return [json.loads(l) for l in r.stdout.splitlines() if l.strip()]


@pytest.fixture
def store(tmp_path):
    return tmp_path / "store"


# ---------------------------------------------------------------- put


def test_put_single_message_table_and_files(store):
    r = run(["put", "--store", store, *SMALL, "--topic", "T", "--tags", "TagA", "--keys", "k1 k2", "--body", "hi",
             "--property", "a=b=c", "--store-timestamp", T0])
    assert r.exit_code == 0, r.output
    assert "commitLogOffset" in r.stdout and "msgId" in r.stdout
    assert (store / "commitlog" / ("0" * 20)).stat().st_size == 4096
    assert (store / "consumequeue" / "T" / "0" / ("0" * 20)).stat().st_size == 200
    assert len(list_index_files(store / "index")) == 1
    assert not (store / "abort").exists()
    j = json.loads(run(["get", "--store", store, "--offset", "0", "--json"]).stdout)
    assert j["properties"]["a"] == "b=c" and j["tags"] == "TagA" and j["keys"] == ["k1", "k2"]
    assert j["storeTimestamp"] == T0 and len(j["uniqKey"]) == 32 and j["body"] == "hi"


def test_put_json_acks_and_queue_offsets(store):
    acks = put_jsonl(store, [msg("T", ["a"], T0 + i, queueId=i % 2) for i in range(6)])
    assert [a["queueOffset"] for a in acks] == [0, 0, 1, 1, 2, 2]
    offs = [a["commitLogOffset"] for a in acks]
    assert offs == sorted(offs) and offs[0] == 0
    for a in acks:
        g = json.loads(run(["get", "--store", store, "--msg-id", a["msgId"], "--json"]).stdout)
        assert g["commitLogOffset"] == a["commitLogOffset"] and g["uniqKey"] == a["uniqKey"]
    # The consume queue unit points at the record with its full size (pitfall 15).
    from engine.broker.consumequeue.queue import ConsumeQueue
    cq = ConsumeQueue(store, "T", 1, 200)
    assert cq.max_offset_in_queue == 3
    assert cq.unit(1)[:2] == (acks[3]["commitLogOffset"], acks[3]["storeSize"])
    cq.close()


def test_put_rolls_segments_with_blank_and_keeps_reading(store):
    acks = put_jsonl(store, [msg("T", [f"k{i}"], T0 + i, body="x" * 700) for i in range(12)])
    segs = sorted((store / "commitlog").iterdir())
    assert len(segs) >= 3
    r = run(["dump-commitlog", "--store", store, "--json"])
    entries = [json.loads(l) for l in r.stdout.splitlines()]
    assert [e["commitLogOffset"] for e in entries if e["type"] == "MESSAGE"] == [a["commitLogOffset"] for a in acks]
    blanks = [e for e in entries if e["type"] == "BLANK"]
    assert len(blanks) == len(segs) - 1
    for b in blanks:
        assert (b["commitLogOffset"] + b["size"]) % 4096 == 0
    # A later put continues from the end, not from the start of the last segment.
    more = put_jsonl(store, [msg("T", ["late"], T0 + 100)])
    assert more[0]["commitLogOffset"] > acks[-1]["commitLogOffset"]
    assert more[0]["queueOffset"] == 12


def test_put_transactions_consume_queue_and_index_rules(store):
    acks = put_jsonl(store, [
        msg("Tx", ["half"], T0, sysFlag=0x4),
        msg("Tx", ["commit"], T0 + 1, sysFlag=0x8),
        msg("Tx", ["rollback"], T0 + 2, sysFlag=0xC),
        msg("Tx", ["plain"], T0 + 3),
    ])
    # Prepared and rollback records get queue offset 0 and no unit (pitfall 12).
    assert [a["queueOffset"] for a in acks] == [0, 0, 0, 1]
    assert len(query(store, "Tx", "half")) == 1        # prepared messages are indexed
    assert query(store, "Tx", "rollback") == []        # rollback messages are not
    assert len(query(store, "Tx", "commit")) == 1


def test_put_from_jsonl_file_and_plain_output(store, tmp_path):
    f = tmp_path / "in.jsonl"
    f.write_text("\n".join(json.dumps(msg("T", ["k"], T0 + i)) for i in range(3)) + "\n")
    r = run(["put", "--store", store, *SMALL, "--from-jsonl", f])
    assert r.exit_code == 0, r.output
    lines = r.stdout.strip().splitlines()
    assert lines[0].split("\t")[:3] == ["commitLogOffset", "queueOffset", "msgId"] and len(lines) == 4


def test_put_sync_flush_subprocess_json_lines(store, tmp_path):
    data = "".join(json.dumps(msg("T", [f"s{i}"], T0 + i)) + "\n" for i in range(5))
    p = subprocess.run([sys.executable, "-m", "rmqtool", "put", "--store", str(store), *SMALL, "--from-jsonl", "-",
                        "--sync-flush", "--json"], input=data, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    acks = [json.loads(l) for l in p.stdout.splitlines()]
    assert len(acks) == 5 and all(len(query(store, "T", f"s{i}")) == 1 for i in range(5))


# ---------------------------------------------------------------- query-key


def test_hash_collision_aa_bb_never_returns_the_wrong_message(store):
    assert java_string_hash("T#Aa") == java_string_hash("T#BB")
    acks = put_jsonl(store, [msg("T", ["Aa"], T0, body="aa"), msg("T", ["BB"], T0 + 1, body="bb")])
    got = query(store, "T", "Aa")
    assert [m["body"] for m in got] == ["aa"]
    assert [m["body"] for m in query(store, "T", "BB")] == ["bb"]
    raw = json.loads(run(["query-key", "--store", store, *READ_GEOM, "--topic", "T", "--key", "Aa", "--raw",
                          "--json"]).stdout)
    assert sorted(raw["phyOffsets"]) == sorted(a["commitLogOffset"] for a in acks)  # the broker returns both
    r = run(["query-key", "--store", store, *READ_GEOM, "--topic", "T", "--key", "Aa", "--explain", "--json"])
    rejected = [x["rejected"]["phyOffset"] for x in jlines(r) if "rejected" in x]
    assert r.exit_code == 0 and rejected == [acks[1]["commitLogOffset"]]  # BB's record: the collision, rejected


def test_same_key_other_topic_is_filtered(store):
    put_jsonl(store, [msg("A", ["k"], T0, body="in A"), msg("B", ["k"], T0 + 1, body="in B")])
    assert [m["body"] for m in query(store, "A", "k")] == ["in A"]


def test_non_ascii_and_surrogate_pair_keys(store):
    keys = ["ключ", "订单-1", "emoji😀key", "𝄞"]
    # Topics are ASCII (TopicValidator); keys may hold any character.
    put_jsonl(store, [msg("Topico", [k], T0 + i, body=k) for i, k in enumerate(keys)])
    for k in keys:
        got = query(store, "Topico", k)
        assert [m["body"] for m in got] == [k], k
    # The index stores the hash of the UTF-16 string, not of its UTF-8 bytes.
    with IndexFile.open(list_index_files(store / "index")[0], 16, 64) as f:
        hashes = {int(h) for h in f.items_array()["hash"]}
    assert index_hash(java_string_hash("Topico#emoji😀key")) in hashes


def test_unique_key_lookup(store):
    acks = put_jsonl(store, [msg("T", ["k"], T0), msg("T", ["k"], T0 + 1)])
    got = query(store, "T", acks[1]["uniqKey"], "--unique-key")
    assert [m["commitLogOffset"] for m in got] == [acks[1]["commitLogOffset"]]
    assert query(store, "T", acks[1]["uniqKey"]) == []  # a key query matches KEYS only, as mqadmin does


def brute_force(messages, topic, key, begin, end):
    return [i for i, m in enumerate(messages) if m["topic"] == topic and key in m["keys"]
            and begin <= m["storeTimestamp"] <= end]


def test_time_windows_cut_a_chain_exactly(store):
    # One key every 700 ms: the index keeps whole seconds, so windows that start or end inside a
    # second cut the chain where the broker's decoded times would be off by up to 999 ms.
    messages = [msg("T", ["k", f"u{i}"], T0 + 700 * i) for i in range(20)]
    acks = put_jsonl(store, messages)
    cases = [(T0, T0 + 700 * 19), (T0 + 1, T0 + 2800), (T0 + 699, T0 + 701), (T0 + 1400, T0 + 1400),
             (T0 + 2100, T0 + 2999), (T0 + 5000, T0 + 9999), (T0 - 5000, T0 - 1), (T0 + 13301, T0 + 13400)]
    for b, e in cases:
        want = [acks[i]["commitLogOffset"] for i in brute_force(messages, "T", "k", b, e)]
        got = [m["commitLogOffset"] for m in query(store, "T", "k", "--begin", b, "--end", e)]
        assert got == want, (b, e)
    # The broker's own answer for such a window is not exact: it keeps a message outside it.
    raw = json.loads(run(["query-key", "--store", store, *READ_GEOM, "--topic", "T", "--key", "k", "--raw", "--json",
                          "--begin", T0 + 2100, "--end", T0 + 2999]).stdout)["phyOffsets"]
    exact = [acks[i]["commitLogOffset"] for i in brute_force(messages, "T", "k", T0 + 2100, T0 + 2999)]
    assert sorted(raw) != sorted(exact)


def test_iso_times_and_max(store):
    messages = [msg("T", ["k"], T0 + 1000 * i) for i in range(10)]
    acks = put_jsonl(store, messages)
    from datetime import datetime, timezone
    iso = datetime.fromtimestamp((T0 + 3000) / 1000, tz=timezone.utc).isoformat()
    got = query(store, "T", "k", "--begin", iso)
    assert [m["commitLogOffset"] for m in got] == [a["commitLogOffset"] for a in acks[3:]]
    newest3 = query(store, "T", "k", "--count", "3")
    assert [m["commitLogOffset"] for m in newest3] == [a["commitLogOffset"] for a in acks[-3:]]


def test_several_index_files_roll_and_query_spans_them(store):
    # 3 keys per message (UNIQ_KEY + 2 KEYS), 63 items per file: 60 messages roll into 3+ files.
    messages = [msg("T", ["common", f"id{i}"], T0 + 400 * i) for i in range(60)]
    acks = put_jsonl(store, messages)
    files = list_index_files(store / "index")
    assert len(files) >= 3
    headers = []
    for p in files:
        with IndexFile.open(p, 16, 64) as f:
            headers.append(f.header)
    for prev, cur in zip(headers, headers[1:]):
        assert cur.beginPhyOffset >= prev.endPhyOffset  # rolled in commit-log order
    got = query(store, "T", "common", "--count", "1000")
    assert [m["commitLogOffset"] for m in got] == [a["commitLogOffset"] for a in acks]
    assert len(query(store, "T", "common")) == 60  # default --count 64 is not capped by maxMsgsNumBatch... 
    for i in (0, 21, 42, 59):
        assert [m["commitLogOffset"] for m in query(store, "T", f"id{i}")] == [acks[i]["commitLogOffset"]]
    r = run(["inspect-index", "--store", store, *READ_GEOM, "--json"])
    hdrs = [json.loads(l) for l in r.stdout.splitlines()]
    assert len(hdrs) == len(files) and {"beginTimestamp", "endTimestamp", "beginPhyOffset", "endPhyOffset",
                                         "hashSlotCount", "indexCount", "file"} <= set(hdrs[0])
    assert all(h["indexCount"] == 64 for h in hdrs[:-1])
    r = run(["inspect-index", "--store", store, *READ_GEOM, "--verify"])
    assert r.exit_code == 0, r.output


def test_max_is_not_capped_by_max_msgs_num_batch(store, tmp_path):
    messages = [msg("T", ["k"], T0 + 10 * i) for i in range(80)]
    put_jsonl(store, messages)
    assert len(query(store, "T", "k", "--count", "100")) == 80
    raw = json.loads(run(["query-key", "--store", store, *READ_GEOM, "--topic", "T", "--key", "k", "--raw", "--json",
                          "--count", "100"]).stdout)
    assert raw["maxNum"] == 64 and len(raw["phyOffsets"]) == 64


# ---------------------------------------------------------------- inspect-index


def test_walk_slot_and_key_and_stats(store):
    put_jsonl(store, [msg("T", ["Aa"], T0), msg("T", ["BB"], T0 + 1), msg("T", ["x"], T0 + 2)])
    slot = index_hash(java_string_hash("T#Aa")) % 16
    r = run(["inspect-index", "--store", store, *READ_GEOM, "--walk-key", "T#Aa", "--json"])
    w = json.loads(r.stdout)
    assert w["slot"] == slot and w["stop"].startswith("end of chain")
    assert [i["keyHash"] for i in w["items"]].count(index_hash(java_string_hash("T#Aa"))) >= 2
    r2 = run(["inspect-index", "--store", store, *READ_GEOM, "--walk-slot", slot, "--json"])
    assert json.loads(r2.stdout)["items"] == w["items"]
    s = json.loads(run(["inspect-index", "--store", store, *READ_GEOM, "--stats", "--json"]).stdout)["stats"]
    assert s["items"] == 6 and sum(int(k) * v for k, v in s["chainLengthHistogram"].items()) == 6
    r = run(["inspect-index", "--store", store, *READ_GEOM, "--walk-key", "T#Aa"])
    assert "stopped: end of chain" in r.stdout


def test_inspect_single_file_without_store(store):
    put_jsonl(store, [msg("T", ["k"], T0)])
    f = list_index_files(store / "index")[0]
    r = run(["inspect-index", f, *READ_GEOM, "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["indexCount"] == 3
    assert run(["inspect-index", f, "--json"]).stdout == r.stdout  # the geometry is read from the file (issue 14)
    r = run(["inspect-index", f, "--hash-slots", "5", "--max-index", "20"])  # a wrong one given still fails
    assert_one_line_error(r, contains="1384 bytes")
    assert "--hash-slots 16 --max-index 64" in r.stderr


def test_verify_reports_damage_and_exits_3(store):
    acks = put_jsonl(store, [msg("T", ["k"], T0 + i) for i in range(4)])
    p = list_index_files(store / "index")[0]
    data = bytearray(p.read_bytes())
    items = 40 + 4 * 16
    struct.pack_into(">q", data, items + 20 * 2 + 4, acks[0]["commitLogOffset"] + 3)  # item 2 -> not a record start
    p.write_bytes(bytes(data))
    r = run(["inspect-index", "--store", store, *READ_GEOM, "--verify", "--json"])
    assert r.exit_code == 3
    (f,) = json.loads(r.stdout)["verify"]["findings"]
    assert (f["kind"], f["file"], f["offset"]) == ("index-item", f"index/{p.name}", items + 20 * 2)


def chain_store(store, mutate):
    put_jsonl(store, [msg("T", ["Aa"], T0), msg("T", ["BB"], T0 + 1), msg("T", ["Aa"], T0 + 2)])
    p = list_index_files(store / "index")[0]
    data = bytearray(p.read_bytes())
    mutate(data, 40 + 4 * 16)
    p.write_bytes(bytes(data))
    return p


@pytest.mark.parametrize("kind", ["self", "two", "long", "past_count"])
def test_damaged_chains_terminate(store, kind):
    slot = index_hash(java_string_hash("T#Aa")) % 16

    def mutate(d, base):
        head = struct.unpack_from(">i", d, 40 + 4 * slot)[0]
        if kind == "self":
            struct.pack_into(">i", d, base + 20 * head + 16, head)
        elif kind == "two":
            prev = struct.unpack_from(">i", d, base + 20 * head + 16)[0]
            struct.pack_into(">i", d, base + 20 * prev + 16, head)
        elif kind == "long":
            for n in range(1, 7):  # 6 items: 1 -> 2 -> ... -> 6 -> 1
                struct.pack_into(">i", d, base + 20 * n + 16, n % 6 + 1)
        else:
            struct.pack_into(">i", d, 40 + 4 * slot, 63)
    p = chain_store(store, mutate)
    before = snapshot(store)
    for args in (["inspect-index", "--walk-key", "T#Aa"], ["query-key", "--topic", "T", "--key", "Aa"],
                 ["query-key", "--topic", "T", "--key", "Aa", "--raw"], ["inspect-index", "--stats"]):
        t = time.time()
        r = run([args[0], "--store", store, *READ_GEOM, *args[1:], "--json"])
        assert time.time() - t < 10
        assert "Traceback" not in r.output
        if args[0] == "query-key":  # a partial answer: the broken chain's file is named on stderr
            assert r.exit_code == 3, r.output
            (partial,) = said(r, "partial-answer")
            assert "warning" in partial and [d["file"] for d in partial["damagedIndexFiles"]] == [p.name]
        else:
            assert r.exit_code == 0, r.output
    r = run(["inspect-index", "--store", store, *READ_GEOM, "--verify"])
    assert r.exit_code == 3
    w = json.loads(run(["inspect-index", "--store", store, *READ_GEOM, "--walk-key", "T#Aa", "--json"]).stdout)
    if kind == "self":
        assert "itself" in w["stop"]
    elif kind in ("two", "long"):
        assert "cycle" in w["stop"]
    else:
        assert "outside" in w["stop"]
    assert snapshot(store) == before


# ---------------------------------------------------------------- get / dump


def test_dump_reports_corrupt_records_and_exits_3(store):
    acks = put_jsonl(store, [msg("T", ["k"], T0 + i, body="body%d" % i) for i in range(3)])
    seg = store / "commitlog" / ("0" * 20)
    data = bytearray(seg.read_bytes())
    off = acks[1]["commitLogOffset"]
    data[off + acks[1]["storeSize"] - 40] ^= 0xFF  # inside the properties? no: make the body CRC fail
    body_pos = off + 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4
    data[body_pos] ^= 0xFF
    seg.write_bytes(bytes(data))
    r = run(["dump-commitlog", "--store", store, "--json"])
    assert r.exit_code == 3
    kinds = [json.loads(l)["type"] for l in r.stdout.splitlines()]
    assert kinds[0] == "MESSAGE" and "CORRUPT" in kinds
    r = run(["dump-commitlog", "--store", store, "--json", "--no-check-crc"])
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 3


def test_dump_from_and_count(store):
    acks = put_jsonl(store, [msg("T", ["k"], T0 + i) for i in range(5)])
    r = run(["dump-commitlog", "--store", store, "--from-offset", acks[2]["commitLogOffset"], "--count", "2", "--json"])
    got = [json.loads(l)["commitLogOffset"] for l in r.stdout.splitlines()]
    assert got == [acks[2]["commitLogOffset"], acks[3]["commitLogOffset"]]
    r = run(["dump-commitlog", "--store", store])
    assert r.exit_code == 0 and "MESSAGE" in r.stdout


# ---------------------------------------------------------------- read-only and bad input


def test_read_only_commands_leave_every_file_byte_identical(store):
    acks = put_jsonl(store, [msg("T", ["k", f"x{i}"], T0 + 300 * i) for i in range(40)])
    before = snapshot(store)
    cmds = [
        ["query-key", "--topic", "T", "--key", "k"], ["query-key", "--topic", "T", "--key", "k", "--raw"],
        ["inspect-index"], ["inspect-index", "--stats"], ["inspect-index", "--verify"],
        ["inspect-index", "--walk-slot", "3"], ["get", "--offset", acks[5]["commitLogOffset"]],
        ["get", "--msg-id", acks[7]["msgId"]], ["dump-commitlog"],
    ]
    for c in cmds:
        r = run([c[0], "--store", store, *READ_GEOM, *c[1:]] if c[0] in ("query-key", "inspect-index")
                else [c[0], "--store", store, *c[1:]])
        assert r.exit_code == 0, (c, r.output)
    assert snapshot(store) == before


def test_read_only_works_on_read_only_files(store):
    put_jsonl(store, [msg("T", ["k"], T0)])
    for p in store.rglob("*"):
        if p.is_file():
            p.chmod(0o444)
    try:
        assert len(query(store, "T", "k")) == 1
    finally:
        for p in store.rglob("*"):
            if p.is_file():
                p.chmod(0o644)


def test_bad_inputs_one_line_errors(store, tmp_path):
    acks = put_jsonl(store, [msg("T", ["k"], T0 + i) for i in range(3)])
    not_store = tmp_path / "empty"
    not_store.mkdir()
    a_file = tmp_path / "afile"
    a_file.write_text("x")
    q = ["query-key", "--store", store, *READ_GEOM, "--topic", "T", "--key", "k"]
    cases = [
        (["query-key", "--store", not_store, "--topic", "T", "--key", "k"], "not a RocketMQ store"),
        (["query-key", "--store", tmp_path / "missing", "--topic", "T", "--key", "k"], "does not exist"),
        (["query-key", "--topic", "T", "--key", "k"], "--store"),
        (["query-key", "--store", store, "--hash-slots", "5", "--max-index", "20", "--topic", "T", "--key", "k"],
         "bytes"),  # a geometry given that the files do not have
        ([*q, "--count", "0"], "--count"),
        ([*q, "--count", "99999999999"], "--count"),
        ([*q, "--begin", "1706659200000", "--end", "1706659100000"], "after"),
        ([*q, "--begin", "yesterday"], "not a time"),
        (["get", "--store", store, "--offset", "3"], "no valid message"),
        (["get", "--store", store, "--offset", "-1"], "negative"),
        (["get", "--store", store, "--offset", 10**12], "outside"),
        (["get", "--store", store, "--msg-id", "ZZZ"], "message id"),
        (["get", "--store", store], "--offset"),
        (["dump-commitlog", "--store", store, "--count", "-1"], "--count"),
        (["dump-commitlog", "--store", store, "--from-offset", "5"], "record boundary"),
        (["inspect-index", "--store", store, "--hash-slots", "0"], "geometry"),
        (["inspect-index", "--store", store, "--hash-slots", "100000000", "--max-index", "100000000"], "int"),
        (["put", "--store", store, *SMALL], "--topic"),
        (["put", "--store", store, *SMALL, "--from-jsonl", "-"], "not JSON"),
        (["put", "--store", store, *SMALL, "--topic", "T", "--property", "novalue"], "K=V"),
        (["query-key", "--store", a_file, "--topic", "T", "--key", "k"], None),
        (["inspect-index", "--store", store, *READ_GEOM, "--walk-slot", "99"], "out of range"),
    ]
    before = snapshot(store)
    for args, text in cases:
        r = run(args, input="{bad json\n" if args[-1] == "-" else None)
        assert_one_line_error(r, contains=text)
    assert snapshot(store) == before


def test_truncated_and_wrong_size_files(store):
    put_jsonl(store, [msg("T", ["k"], T0 + i) for i in range(3)])
    idx = list_index_files(store / "index")[0]
    idx.write_bytes(idx.read_bytes()[:1000])
    assert_one_line_error(run(["query-key", "--store", store, *READ_GEOM, "--topic", "T", "--key", "k"]),
                          contains="1000 bytes")
    seg = store / "commitlog" / ("0" * 20)
    extra = store / "commitlog" / f"{4096:020d}"
    extra.write_bytes(b"\x00" * 100)  # an empty last file is allowed, a short one is not... unless it is last
    seg.write_bytes(seg.read_bytes()[:2000])
    # Deliberate change (issue 10 item 6): a wrong-size segment no longer makes readers refuse; they warn by
    # name, read what is there and exit 3.
    r = run(["dump-commitlog", "--store", store, "--json"])
    assert r.exit_code == 3, r.output
    assert {Path(w["file"]).name: w["start"] for w in said(r, "wrong-size")} == {"0" * 20: 0, f"{4096:020d}": 4096}
    assert [w["entries"] for w in said(r, "damaged-entries")] == [1]
    kinds = [json.loads(l)["type"] for l in r.stdout.splitlines()]
    assert kinds == ["MESSAGE"] * 3 + ["CORRUPT"]


def test_bad_checkpoint_is_reported(store):
    """Reads do not need the checkpoint (issue 34 item 9): they answer; doctor reports it; a writer refuses."""
    put_jsonl(store, [msg("T", ["k"], T0)])
    (store / "checkpoint").write_bytes(b"garbage")
    r = run(["get", "--store", store, "--offset", "0", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["commitLogOffset"] == 0
    r = run(["doctor", "--store", store, "--json"])
    assert "checkpoint-unreadable" in [f["kind"] for f in json.loads(r.stdout)["findings"]]
    assert_one_line_error(run(["put", "--store", store, *SMALL, "--topic", "T", "--body", "x"]), contains="checkpoint")


def test_unclean_store_refuses_put(store):
    put_jsonl(store, [msg("T", ["k"], T0)])
    (store / "abort").write_text("1234")
    before = snapshot(store)
    assert_one_line_error(run(["put", "--store", store, *SMALL, "--topic", "T", "--body", "x"]), contains="recover")
    assert snapshot(store) == before


def test_locked_store_refuses_put(store):
    put_jsonl(store, [msg("T", ["k"], T0)])
    with lock_held(store, by_rmqtool=True):
        before = snapshot(store)
        r = run(["put", "--store", store, *SMALL, "--topic", "T", "--body", "x"])
        assert_one_line_error(r, code=4, contains="locked")
        assert snapshot(store) == before
    assert run(["put", "--store", store, *SMALL, "--topic", "T", "--body", "x"]).exit_code == 0


def test_bad_input_line_keeps_store_clean(store):
    data = json.dumps(msg("T", ["ok"], T0)) + "\n" + "{not json\n"
    r = run(["put", "--store", store, *SMALL, "--from-jsonl", "-"], input=data)
    assert_one_line_error(r, contains=":2:")
    assert not (store / "abort").exists()  # nothing half-written: the store stays usable without recover
    assert len(query(store, "T", "ok")) == 1


def test_rolled_file_first_item_found_despite_seed_time_diff(store):
    # 21 messages x 3 keys = 63 items fill file 1; message 21 starts file 2 after a 10 s gap.
    messages = [msg("T", ["k", f"x{i}"], T0 + 100 * i) for i in range(21)] + [msg("T", ["k", "late"], T0 + 12_000)]
    acks = put_jsonl(store, messages)
    assert len(list_index_files(store / "index")) == 2
    b = e = T0 + 12_000
    uniq = acks[-1]["uniqKey"]  # the first key put for a message, so item 1 of the rolled file
    raw = json.loads(run(["query-key", "--store", store, *READ_GEOM, "--topic", "T", "--key", uniq, "--raw", "--json",
                          "--begin", b, "--end", e]).stdout)["phyOffsets"]
    assert raw == []  # decoded as T0 + 22 s: outside the window for the broker
    got = [m["commitLogOffset"] for m in query(store, "T", uniq, "--unique-key", "--begin", b, "--end", e)]
    assert got == [acks[-1]["commitLogOffset"]]
