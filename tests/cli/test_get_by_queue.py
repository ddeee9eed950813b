"""get by queue offset (mqadmin queryMsgByOffset) and get --msg-id with the client's UNIQ_KEY (queryMsgByUniqueKey),
through the CLI on stores written by `put` and on the golden commit log (issue 14 item 1)."""
from __future__ import annotations

import json
import struct

import pytest

from engine.broker.read import COUNT_LIMIT
from helpers import READ_GEOM, assert_one_line_error, built_store, put_jsonl, run, said, snapshot

UNIT = struct.Struct(">qiq")


def sample(n=60, queues=2, topic="TopicA"):
    return [{"topic": topic, "queueId": i % queues, "keys": f"k{i}", "tags": "TagA", "body": f"hello {i}"}
            for i in range(n)]


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "store"
    acks = built_store(f"{__name__}.store", root, lambda r: put_jsonl(r, sample() + sample(4, 1, "TopicB")))
    return root, acks


def jlines(r):
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def cq_file(root, topic, q):
    files = sorted((root / "consumequeue" / topic / str(q)).iterdir())
    return files


def set_unit(root, topic, q, queue_offset, phy, size):
    """Overwrite one consume-queue unit (files are 200 bytes: 10 units each, SMALL geometry)."""
    f = cq_file(root, topic, q)[queue_offset // 10]
    data = bytearray(f.read_bytes())
    old = UNIT.unpack_from(data, (queue_offset % 10) * 20)
    UNIT.pack_into(data, (queue_offset % 10) * 20, phy, size, old[2])
    f.write_bytes(bytes(data))


def test_one_unit_is_shown_like_get_by_offset(store):
    root, acks = store
    want = [a for a in acks if a["topic"] == "TopicA" and a["queueId"] == 1][5]
    r = run(["get", "-s", root, "-t", "TopicA", "-q", "1", "--queue-offset", "5", "--json", *READ_GEOM])
    assert r.exit_code == 0, r.output
    j = json.loads(r.stdout)
    by_offset = json.loads(run(["get", "-s", root, "--offset", want["commitLogOffset"], "--json"]).stdout)
    assert j == by_offset
    assert (j["queueOffset"], j["commitLogOffset"], j["msgId"]) == (5, want["commitLogOffset"], want["msgId"])
    r = run(["get", "-s", root, "-t", "TopicA", "-q", "1", "--queue-offset", "5"])
    assert r.exit_code == 0 and want["msgId"] in r.stdout and "storeTimestamp" in r.stdout


def test_count_streams_units_in_order_and_is_cut_at_max(store):
    root, acks = store
    q0 = [a for a in acks if a["topic"] == "TopicA" and a["queueId"] == 0]
    r = run(["get", "-s", root, "-t", "TopicA", "-q", "0", "--queue-offset", "3", "--count", "4", "--json"])
    assert r.exit_code == 0, r.output
    got = jlines(r)
    assert [(g["queueOffset"], g["commitLogOffset"], g["msgId"]) for g in got] == \
        [(a["queueOffset"], a["commitLogOffset"], a["msgId"]) for a in q0[3:7]]
    # the same lines as get by offset (the MessageExt shape)
    by_offset = run(["get", "-s", root, *sum((["-o", a["commitLogOffset"]] for a in q0[3:7]), []), "--json"])
    assert got == jlines(by_offset)
    r = run(["get", "-s", root, "-t", "TopicA", "-q", "0", "--queue-offset", "28", "--count", "50"])
    assert r.exit_code == 0, r.output
    rows = r.stdout.splitlines()
    assert len(rows) == 2 + 2 and all("MESSAGE" in x for x in rows[2:])   # header, rule; queue offsets 28 and 29
    r = run(["get", "-s", root, "-t", "TopicA", "-q", "0", "--queue-offset", "28", "--count", "50", "--json"])
    (cut,) = said(r, "count-past-max-offset")
    assert (cut["asked"], cut["count"], cut["maxOffset"]) == (50, 2, 30) and len(jlines(r)) == 2


@pytest.mark.parametrize("qo", ["30", "99", "-1"])
def test_offset_outside_the_queue_names_min_and_max(store, qo):
    root, _ = store
    before = snapshot(root)
    r = run(["get", "-s", root, "-t", "TopicA", "-q", "0", "--queue-offset", qo])
    assert_one_line_error(r, 2, "min offset is 0 and its max offset is 30")
    assert snapshot(root) == before


def test_min_offset_after_the_commit_log_lost_its_first_segment(store):
    root, acks = store
    (root / "commitlog" / "00000000000000000000").unlink()     # as the expiry clean-up leaves it
    first = min(a["queueOffset"] for a in acks if a["topic"] == "TopicA" and a["queueId"] == 0
                and a["commitLogOffset"] >= 4096)
    assert first > 0
    r = run(["get", "-s", root, "-t", "TopicA", "-q", "0", "--queue-offset", first - 1])
    assert_one_line_error(r, 2, f"min offset is {first} and its max offset is 30")
    r = run(["get", "-s", root, "-t", "TopicA", "-q", "0", "--queue-offset", first, "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["queueOffset"] == first


@pytest.mark.parametrize("args,contains", [
    (["-t", "Nope", "-q", "0", "--queue-offset", "0"], "is not in the store"),
    (["-t", "TopicA", "-q", "7", "--queue-offset", "0"], "has no queue 7"),
    (["-t", "TopicA", "-q", "0", "--queue-offset", "0", "--count", "0"], "--count 0 is out of range"),
    (["-t", "TopicA", "-q", "0", "--queue-offset", "0", "--count", str(COUNT_LIMIT + 1)], "out of range"),
    (["-t", "TopicA", "--queue-offset", "0"], "needs --topic and --queue-id"),
    (["-q", "0", "--queue-offset", "0"], "needs --topic and --queue-id"),
    (["-t", "TopicA", "-q", "0", "--queue-offset", "0", "--offset", "0"], "not both"),
    (["-q", "0", "--offset", "0"], "--queue-id goes with --queue-offset"),
    (["--count", "3", "--offset", "0"], "--count goes with --queue-offset"),
])
def test_bad_queue_reads_are_one_line_errors(store, args, contains):
    root, _ = store
    before = snapshot(root)
    assert_one_line_error(run(["get", "-s", root, *args]), 2, contains)
    assert snapshot(root) == before


def test_unit_pointing_outside_the_commit_log_is_reported(store):
    root, _ = store
    set_unit(root, "TopicA", 0, 4, 10**9, 144)
    before = snapshot(root)
    r = run(["get", "-s", root, "-t", "TopicA", "-q", "0", "--queue-offset", "4", "--json"])
    assert r.exit_code == 3 and r.stdout == ""
    (bad,) = said(r, "unit-unusable")
    assert (bad["topic"], bad["queueId"], bad["queueOffset"], bad["status"], bad["commitLogOffset"]) == \
        ("TopicA", 0, 4, "OUTSIDE", 10**9) and "error" in bad
    r = run(["get", "-s", root, "-t", "TopicA", "-q", "0", "--queue-offset", "3", "--count", "3", "--json"])
    assert r.exit_code == 3
    assert [j["queueOffset"] for j in jlines(r)] == [3, 5]            # the others are answered
    (summary,) = said(r, "units-not-answered")
    assert (summary["failed"], summary["count"]) == (1, 3) and "Traceback" not in r.output
    assert snapshot(root) == before


def test_unit_pointing_at_another_queues_record_is_never_answered(store):
    root, acks = store
    other = next(a for a in acks if a["topic"] == "TopicA" and a["queueId"] == 1 and a["queueOffset"] == 2)
    set_unit(root, "TopicA", 0, 2, other["commitLogOffset"], other["storeSize"])
    r = run(["get", "-s", root, "-t", "TopicA", "-q", "0", "--queue-offset", "2", "--json"])
    assert r.exit_code == 3 and r.stdout == ""
    (bad,) = said(r, "unit-unusable")
    assert (bad["queueOffset"], bad["status"], bad["commitLogOffset"]) == (2, "MISMATCH", other["commitLogOffset"])
    # same topic and queue, but the record says another queue offset (pitfall 17): reported, not answered
    same = next(a for a in acks if a["topic"] == "TopicA" and a["queueId"] == 0 and a["queueOffset"] == 6)
    set_unit(root, "TopicA", 0, 2, same["commitLogOffset"], same["storeSize"])
    r = run(["get", "-s", root, "-t", "TopicA", "-q", "0", "--queue-offset", "2", "--json"])
    assert r.exit_code == 3 and r.stdout == ""
    (bad,) = said(r, "unit-unusable")
    assert (bad["queueOffset"], bad["status"], bad["commitLogOffset"]) == (2, "MISMATCH", same["commitLogOffset"])
    assert f"`rmqtool get --offset {same['commitLogOffset']}`" in bad["message"]  # the command that shows it


# ------------------------------------------------------------------------------------------- UNIQ_KEY


def test_msg_id_accepts_the_uniq_key(store):
    root, acks = store
    a = acks[7]
    for extra in ([], ["--topic", "TopicA"]):
        r = run(["get", "-s", root, "--msg-id", a["uniqKey"], "--json", *READ_GEOM, *extra])
        assert r.exit_code == 0, r.output
        j = json.loads(r.stdout)
        assert (j["commitLogOffset"], j["uniqKey"], j["msgId"]) == (a["commitLogOffset"], a["uniqKey"], a["msgId"])
    r = run(["get", "-s", root, "--msg-id", a["uniqKey"].lower(), "--json", *READ_GEOM])
    assert r.exit_code == 0 and json.loads(r.stdout)["commitLogOffset"] == a["commitLogOffset"]
    b = next(x for x in acks if x["topic"] == "TopicB")
    r = run(["get", "-s", root, "--msg-id", b["uniqKey"], "--json", *READ_GEOM])
    assert r.exit_code == 0 and json.loads(r.stdout)["topic"] == "TopicB"
    # the offset message id still works, and several ids of both forms stream in order
    r = run(["get", "-s", root, "-m", a["msgId"], "-m", b["uniqKey"], "-m", acks[2]["uniqKey"], "--json", *READ_GEOM])
    assert r.exit_code == 0, r.output
    assert [j["commitLogOffset"] for j in jlines(r)] == [a["commitLogOffset"], b["commitLogOffset"],
                                                        acks[2]["commitLogOffset"]]


def test_uniq_key_in_the_wrong_topic_and_unknown_ids(store):
    root, acks = store
    a = acks[7]
    r = run(["get", "-s", root, "--msg-id", a["uniqKey"], "--topic", "TopicB", *READ_GEOM])
    assert_one_line_error(r, 2, "neither an offset message id nor a UNIQ_KEY")
    assert "topic 'TopicB'" in r.stderr
    r = run(["get", "-s", root, "--msg-id", "0123456789ABCDEF0123456789ABCDEF", *READ_GEOM])
    assert_one_line_error(r, 2, "as an offset message id, it names commit-log offset")
    assert "as a UNIQ_KEY, no message has it in 2 topic(s)" in r.stderr
    r = run(["get", "-s", root, "--msg-id", "not-hex", *READ_GEOM])
    assert_one_line_error(r, 2, "as a UNIQ_KEY")
    r = run(["get", "-s", root, "-m", a["uniqKey"], "-m", "not-hex", "--json", *READ_GEOM])
    assert r.exit_code == 2 and len(jlines(r)) == 1  # the one failure is an id no message has: bad input, not damage
    (miss,) = said(r, "message-not-found")
    assert (miss["asked"], miss["value"], miss["commitLogOffset"]) == ("msgId", "not-hex", None)


# ------------------------------------------------------------------------------------------- golden


def test_golden_queue_reads_match_the_java_records(golden_store):
    root, expected = golden_store
    a0 = [m for m in expected if m["type"] == "MESSAGE" and m["topic"] == "TopicA" and m["queueId"] == 0]
    assert len(a0) == 3
    r = run(["get", "-s", root, "-t", "TopicA", "-q", "0", "--queue-offset", "0", "--count", "3", "--json"])
    assert r.exit_code == 0, r.output
    got = jlines(r)
    assert [(g["queueOffset"], g["commitLogOffset"], g["msgId"], g["storeTimestamp"]) for g in got] == \
        [(m["queueOffset"], m["physicalOffset"], m["offsetMsgId"], m["storeTimestamp"]) for m in a0]
    v6 = [m for m in expected if m["type"] == "MESSAGE" and m["topic"] == "TopicV6"]
    r = run(["get", "-s", root, "-t", "TopicV6", "-q", "2", "--queue-offset", "1", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["bornHost"] == v6[1]["bornHost"]
    assert_one_line_error(run(["get", "-s", root, "-t", "TopicA", "-q", "0", "--queue-offset", "3"]), 2,
                          "min offset is 0 and its max offset is 3")
    # a golden UNIQ_KEY is 32 hex digits, a valid-looking offset message id: both forms are tried and named
    uniq = dict(p.split("\x01") for p in a0[0]["propertiesString"].split("\x02") if p)["UNIQ_KEY"]
    r = run(["get", "-s", root, "--msg-id", uniq])
    assert_one_line_error(r, 2, "as an offset message id, it names commit-log offset")
