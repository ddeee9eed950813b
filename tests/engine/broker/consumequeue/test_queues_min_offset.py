"""Operator parity (issue 14 items 2 and 3): print-msg, queues and dump-cq through the CLI, on stores written by
`put` and on the golden commit log, and the broker's min-offset rule (format §8.3) in the engine."""
from __future__ import annotations

import json

import pytest

from engine.broker.config.brokerconf import load_config
from engine.broker.consumequeue.queue import ConsumeQueue
from engine.broker.layout import topic_problem
from engine.broker.consumequeue.offsets import queue_min_offset
from helpers import assert_one_line_error, built_store, put_jsonl, run, said, snapshot

T0 = 1_700_000_000_000
TAGS = ["TagA", "TagB", "TagC"]


def sample(n=30, queues=3, topic="TopicA"):
    return [{"topic": topic, "queueId": i % queues, "storeTimestamp": T0 + i * 1000, "tags": TAGS[(i // 3) % 3],
             "keys": f"k{i}", "body": f"hello {i}"} for i in range(n)]


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "store"
    acks = built_store(f"{__name__}.store", root, lambda r: put_jsonl(r, sample()))  # put once per run
    return root, acks


def jlines(r):
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------- print-msg


def test_print_msg_time_range_all_queues_in_queue_order(store):
    root, acks = store
    r = run(["print-msg", "-s", root, "--topic", "TopicA", "--begin", T0 + 5000, "--end", T0 + 12000, "--json"])
    assert r.exit_code == 0, r.output
    got = jlines(r)
    want = sorted((a for a in acks if T0 + 5000 <= a["storeTimestamp"] <= T0 + 12000),
                  key=lambda a: (a["queueId"], a["queueOffset"]))
    assert [(g["queueId"], g["queueOffset"], g["commitLogOffset"]) for g in got] == \
        [(a["queueId"], a["queueOffset"], a["commitLogOffset"]) for a in want]
    # the shape of `get --json`, field for field
    one = run(["get", "-s", root, "--offset", got[0]["commitLogOffset"], "--json"])
    assert json.loads(one.stdout) == got[0]


def test_print_msg_bounds_are_inclusive_and_one_queue(store):
    root, acks = store
    r = run(["print-msg", "-s", root, "-t", "TopicA", "-q", "1", "--begin", T0 + 4000, "--end", T0 + 10000, "--json"])
    assert r.exit_code == 0, r.output
    assert [g["storeTimestamp"] for g in jlines(r)] == [T0 + 4000, T0 + 7000, T0 + 10000]
    assert {g["queueId"] for g in jlines(r)} == {1}


def test_print_msg_reads_only_the_units_in_range(store, monkeypatch):
    """The range comes from binary searches: the units looked at are those in range plus O(log n) probes."""
    from engine.broker.consumequeue import view as q
    root, _ = store
    calls = []
    orig = q.QueueView.check
    monkeypatch.setattr(q.QueueView, "check", lambda self, at, check_crc=False: calls.append(at) or orig(self, at,
                                                                                                      check_crc))
    r = run(["print-msg", "-s", root, "-t", "TopicA", "-q", "0", "--begin", T0 + 27000, "--end", T0 + 27000, "--json"])
    assert r.exit_code == 0 and [g["keys"] for g in jlines(r)] == [["k27"]]
    assert len(calls) <= 2 * 5 + 2, calls   # 10 units: two searches of <= 4 probes, then the one unit


def test_print_msg_tags_subexpression(store):
    root, acks = store
    r = run(["print-msg", "-s", root, "-t", "TopicA", "--begin", T0, "--end", "now", "--tags", " TagB ||TagC ",
             "--json"])
    assert r.exit_code == 0, r.output
    want = {a["commitLogOffset"] for i, a in enumerate(acks) if TAGS[(i // 3) % 3] in ("TagB", "TagC")}
    assert {g["commitLogOffset"] for g in jlines(r)} == want and len(want) == 18
    star = run(["print-msg", "-s", root, "-t", "TopicA", "--begin", T0, "--end", "now", "--tags", "*", "--json"])
    assert len(jlines(star)) == 30
    none = run(["print-msg", "-s", root, "-t", "TopicA", "--begin", T0, "--end", "now", "--tags", "TagZ", "--json"])
    assert none.exit_code == 0 and none.stdout == ""
    (empty,) = said(none, "no-message")
    assert (empty["topic"], empty["tags"], empty["begin"]) == ("TopicA", "TagZ", T0)
    assert_one_line_error(run(["print-msg", "-s", root, "-t", "TopicA", "--begin", T0, "--end", "now",
                               "--tags", " || "]), 2, "names no tag")


def test_print_msg_tag_hash_collision_is_filtered_by_the_message_tags(tmp_path):
    """'Aa' and 'BB' have the same Java hashCode: the unit test passes both, the client's TAGS test keeps one."""
    root = tmp_path / "s"
    put_jsonl(root, [{"topic": "T", "tags": t, "storeTimestamp": T0 + i, "body": t} for i, t in
                     enumerate(["Aa", "BB", "Aa"])])
    r = run(["print-msg", "-s", root, "-t", "T", "--begin", T0, "--end", T0 + 10, "--tags", "BB", "--json"])
    assert [g["body"] for g in jlines(r)] == ["BB"]


def test_print_msg_max_says_it_cut(store):
    root, _ = store
    r = run(["print-msg", "-s", root, "-t", "TopicA", "--begin", T0, "--end", "now", "--count", "4", "--json"])
    assert r.exit_code == 0 and len(jlines(r)) == 4
    (cut,) = said(r, "count-cut")
    assert (cut["shown"], cut["total"], cut["limit"]) == (4, 30, "--count")
    r = run(["print-msg", "-s", root, "-t", "TopicA", "--begin", T0, "--end", "now", "--count", "30", "--json"])
    assert len(jlines(r)) == 30 and said(r, "count-cut") == []
    r = run(["print-msg", "-s", root, "-t", "TopicA", "--begin", T0, "--end", "now", "--tags", "TagA", "--count", "2",
             "--json"])
    (cut,) = said(r, "count-cut")
    assert (cut["shown"], cut["atLeast"]) == (2, 30) and "total" not in cut   # a tag filter: the total is unknown


def test_print_msg_times_end_of_day_and_relative(store):
    root, _ = store
    from datetime import datetime
    day = datetime.fromtimestamp(T0 / 1000).date().isoformat()
    r = run(["print-msg", "-s", root, "-t", "TopicA", "--begin", day, "--end", day, "--json"])
    assert len(jlines(r)) == 30   # a date alone as --end means the end of that day
    r = run(["print-msg", "-s", root, "-t", "TopicA", "--begin", "now-1h", "--end", "now", "--json"])
    assert r.exit_code == 0 and jlines(r) == []


@pytest.mark.parametrize("args,code,text", [
    (["--begin", "1700000000", "--end", "now"], 2, "did you mean 1700000000000?"),
    (["--begin", "yesterday", "--end", "now"], 2, "is not a time"),
    (["--begin", "now", "--end", "now-1h"], 2, "is after --end"),
    (["--begin", "now-1x", "--end", "now"], 2, "relative times look like"),
    (["--begin", T0, "--end", "now", "-q", "9"], 2, "has no queue 9"),
    (["--begin", T0, "--end", "now", "--count", "0"], 2, "--count 0 is out of range"),
])
def test_print_msg_bad_input_one_line(store, args, code, text):
    root, _ = store
    assert_one_line_error(run(["print-msg", "-s", root, "-t", "TopicA", *args]), code, text)


def test_print_msg_unknown_topic_and_bad_names(store):
    root, _ = store
    assert_one_line_error(run(["print-msg", "-s", root, "-t", "Nope", "--begin", T0, "--end", "now"]), 2,
                          "is not in the store")
    assert_one_line_error(run(["print-msg", "-s", root, "-t", "../x", "--begin", T0, "--end", "now"]), 2)


def damage_record(root, ack):
    seg = root / "commitlog" / f"{ack['commitLogOffset'] // 4096 * 4096:020d}"
    data = bytearray(seg.read_bytes())
    data[ack["commitLogOffset"] % 4096 + 4: ack["commitLogOffset"] % 4096 + 8] = b"\0\0\0\1"   # the magic code
    seg.write_bytes(bytes(data))


def _in_last_segment(root, ack) -> bool:
    return ack["commitLogOffset"] // 4096 == max(int(p.name) for p in (root / "commitlog").iterdir()) // 4096


@pytest.mark.parametrize("victims", [[4], [0], [0, 4]])
def test_print_msg_reports_unreadable_units_and_exits_3(store, victims):
    """A unit whose message cannot be read is reported, wherever it is in the queue (first, middle), when the
    broker's recovery scan (which starts in the last segment here, format §7.3) does not reach the damage."""
    root, acks = store
    for v in victims:
        ack = next(a for a in acks if a["queueId"] == 2 and a["queueOffset"] == v)
        assert not _in_last_segment(root, ack)
        damage_record(root, ack)
    r = run(["print-msg", "-s", root, "-t", "TopicA", "-q", "2", "--begin", T0, "--end", "now", "--json"])
    assert r.exit_code == 3
    assert [g["queueOffset"] for g in jlines(r)] == [q for q in range(10) if q not in victims]
    bad = said(r, "unit-unreadable")
    assert [(u["topic"], u["queueId"], u["queueOffset"], u["status"]) for u in bad] == \
        [("TopicA", 2, v, "UNREADABLE") for v in sorted(victims)]
    assert [s["units"] for s in said(r, "units-unreadable")] == [len(victims)]
    assert said(r, "logical-truncation") == []


@pytest.mark.parametrize("victims", [[9], [8, 9]])
def test_print_msg_stops_where_the_brokers_recovery_ends_the_log(store, victims):
    """Damage in the segment the broker's recovery scans ends its commit log there (format §7.2): it cuts the
    units from the first damaged record on (format §4.5), in every queue; print-msg answers as that broker serves the
    queue and says so."""
    root, acks = store
    hit = [next(a for a in acks if a["queueId"] == 2 and a["queueOffset"] == v) for v in victims]
    for ack in hit:
        assert _in_last_segment(root, ack)
        damage_record(root, ack)
    first = min(a["commitLogOffset"] for a in hit)
    r = run(["print-msg", "-s", root, "-t", "TopicA", "--begin", T0, "--end", "now", "--json"])
    assert r.exit_code == 0, r.output
    assert sorted(g["commitLogOffset"] for g in jlines(r)) == sorted(
        a["commitLogOffset"] for a in acks if a["commitLogOffset"] < first)
    (cut,) = said(r, "logical-truncation")
    assert cut["commitLogEnd"] == first and cut["cutUnits"] >= len(victims)


def test_print_msg_table_streams_and_is_read_only(store):
    root, _ = store
    before = snapshot(root)
    r = run(["print-msg", "-s", root, "-t", "TopicA", "--begin", T0, "--end", T0 + 2000])
    assert r.exit_code == 0, r.output
    assert "queueOffset" in r.stdout and "hello 2" in r.stdout
    assert snapshot(root) == before


# ------------------------------------------------------------------------------------------- queues


def test_queues_min_max_times_bytes(store):
    root, acks = store
    r = run(["queues", "-s", root, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["commitLogMinOffset"] == 0
    for q in doc["queues"]:
        mine = [a for a in acks if a["queueId"] == q["queueId"]]
        assert (q["minOffset"], q["maxOffset"], q["messages"]) == (0, len(mine), len(mine))
        assert q["firstStoreTimestamp"] == mine[0]["storeTimestamp"]
        assert q["lastStoreTimestamp"] == mine[-1]["storeTimestamp"]
        assert q["bytes"] == sum(a["storeSize"] for a in mine)
    t = run(["queues", "-s", root, "--topic", "TopicA"])
    assert t.exit_code == 0 and "maxOffset" in t.stdout
    assert_one_line_error(run(["queues", "-s", root, "--topic", "Nope"]), 2, "is not in the store")


def test_queues_numeric_queue_order_and_skipped_dirs(tmp_path):
    root = tmp_path / "s"
    put_jsonl(root, [{"topic": "T", "queueId": q, "body": "x"} for q in (10, 2)])
    (root / "consumequeue" / "T" / "tmp").mkdir()
    r = run(["queues", "-s", root, "--json"])
    doc = json.loads(r.stdout)
    assert [q["queueId"] for q in doc["queues"]] == [2, 10]
    assert [p["path"] for p in doc["skipped"]] == ["consumequeue/T/tmp"]


def expire_first_segment(root, acks):
    """What the broker's commit-log clean-up leaves: the first segment gone, the consume queues not yet cut."""
    (root / "commitlog" / f"{0:020d}").unlink()
    return 4096


def test_queues_min_offset_is_the_brokers_after_expiry(store):
    root, acks = store
    cl_min = expire_first_segment(root, acks)
    r = run(["queues", "-s", root, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["commitLogMinOffset"] == cl_min
    for q in doc["queues"]:
        mine = [a for a in acks if a["queueId"] == q["queueId"]]
        first_live = next(a for a in mine if a["commitLogOffset"] >= cl_min)
        assert q["minOffset"] == first_live["queueOffset"] > 0
        assert q["firstStoreTimestamp"] == first_live["storeTimestamp"]
        assert q["bytes"] == sum(a["storeSize"] for a in mine if a["queueOffset"] >= q["minOffset"])
    # print-msg never shows what was deleted
    r = run(["print-msg", "-s", root, "-t", "TopicA", "--begin", T0, "--end", "now", "--json"])
    assert r.exit_code == 0 and min(g["commitLogOffset"] for g in jlines(r)) >= cl_min


def test_min_offset_rule_files_blank_prefill_and_empty(tmp_path):
    root = tmp_path / "s"
    root.mkdir()
    cq = ConsumeQueue(root, "T", 0, 200, writable=True)   # 10 units per file
    for i in range(25):
        cq.put(1000 + 100 * i, 100, 0, i)
    # file 0 points at [1000, 2000), file 1 at [2000, 3000), file 2 at [3000, 3500)
    for cl_min, want in ((0, 0), (1000, 0), (1050, 1), (2000, 10), (2950, 20), (3400, 24), (3500, 25),
                         (10**9, 25)):
        assert queue_min_offset(cq, cl_min) == want, cl_min
    cq.close()
    late = ConsumeQueue(root, "T", 1, 200, writable=True)
    late.put(5000, 100, 0, 13)          # a queue that starts at 13: units 10..12 are blank pre-fill
    late.put(5100, 100, 0, 14)
    assert queue_min_offset(late, 0) == 13 and queue_min_offset(late, -1) == 13
    assert queue_min_offset(late, 5100) == 14
    late.close()
    empty = ConsumeQueue(root, "T", 2, 200)
    assert queue_min_offset(empty, 0) == 0 == empty.max_offset_in_queue


def test_min_offset_agrees_with_the_flat_stores_local_queue(store):
    from engine.tiered.flat.queue_dispatch import LocalQueue, QueueTask
    root, acks = store
    expire_first_segment(root, acks)
    cfg = load_config(None, storePathRootDir=str(root))
    for qid in range(3):
        task = QueueTask(0, "TopicA", qid, str(root / "tier"), "c", "b", str(root), [str(root / "commitlog")], None,
                         200, 4096, 0, 0, (0, 0, 0, 0), None)
        lq = LocalQueue(task)
        cq = ConsumeQueue(root, "TopicA", qid, cfg.cq_file_size)
        try:
            assert queue_min_offset(cq, 4096) == lq.min_offset
        finally:
            lq.close()
            cq.close()


# ------------------------------------------------------------------------------------------- dump-cq


def test_dump_cq_units_and_messages(store):
    root, acks = store
    r = run(["dump-cq", "-s", root, "-t", "TopicA", "-q", "1", "--queue-offset", "2", "--count", "3", "--json"])
    assert r.exit_code == 0, r.output
    units = jlines(r)
    mine = [a for a in acks if a["queueId"] == 1][2:5]
    assert [u["queueOffset"] for u in units] == [2, 3, 4]
    assert [u["commitLogOffset"] for u in units] == [a["commitLogOffset"] for a in mine]
    assert [u["size"] for u in units] == [a["storeSize"] for a in mine]
    assert all(u["status"] == "OK" and u["message"]["topic"] == "TopicA" for u in units)
    assert [u["message"]["storeTimestamp"] for u in units] == [a["storeTimestamp"] for a in mine]
    from engine.java.lang import java_string_hash
    assert units[0]["tagsCode"] == java_string_hash(units[0]["message"]["tags"])
    t = run(["dump-cq", "-s", root, "-t", "TopicA", "-q", "1"])
    assert t.exit_code == 0 and t.stdout.count("OK") == 10


def test_dump_cq_reports_units_outside_the_commit_log(store):
    root, acks = store
    cl_min = expire_first_segment(root, acks)
    r = run(["dump-cq", "-s", root, "-t", "TopicA", "-q", "0", "--json"])
    assert r.exit_code == 0 and jlines(r)[0]["commitLogOffset"] >= cl_min   # default start: the broker's min
    r = run(["dump-cq", "-s", root, "-t", "TopicA", "-q", "0", "--queue-offset", "0", "--count", "30", "--json"])
    assert r.exit_code == 3
    units = jlines(r)
    expired = [u for u in units if u["status"] == "EXPIRED"]
    assert expired and all(u["commitLogOffset"] < cl_min and u["message"] is None for u in expired)
    (unusable,) = said(r, "units-unusable")
    assert unusable["byStatus"] == {"EXPIRED": len(expired)} and unusable["pointOutside"] == len(expired)
    # a unit pointing past the end of the commit-log files
    cqf = root / "consumequeue" / "TopicA" / "2" / f"{0:020d}"
    data = bytearray(cqf.read_bytes())
    data[40:48] = (10**9).to_bytes(8, "big")
    cqf.write_bytes(bytes(data))
    r = run(["dump-cq", "-s", root, "-t", "TopicA", "-q", "2", "-i", "0", "--json"])
    assert r.exit_code == 3
    assert jlines(r)[2]["status"] == "OUTSIDE" and "past the end" in jlines(r)[2]["reason"]


def test_dump_cq_bad_input(store):
    root, _ = store
    base = ["dump-cq", "-s", root, "-t", "TopicA"]
    assert_one_line_error(run([*base, "-q", "7"]), 2, "has no queue 7")
    assert_one_line_error(run([*base, "-q", "0", "--queue-offset", "99"]), 2, "outside TopicA/0")
    assert_one_line_error(run([*base, "-q", "0", "--count", "0"]), 2, "out of range")
    assert_one_line_error(run([*base, "-q", "0", "--queue-offset", "-1"]), 2, "negative")
    assert_one_line_error(run(["dump-cq", "-s", root / "nope", "-t", "T", "-q", "0"]), 2)


# ------------------------------------------------------------------------------------------- golden


def test_golden_queues_and_print_msg(golden_store):
    root, expected = golden_store
    msgs = [m for m in expected if m["type"] == "MESSAGE" and m["sysFlag"] & 0xC != 4 and not topic_problem(m["topic"])]
    doc = json.loads(run(["queues", "-s", root, "--json"]).stdout)
    got = {(q["topic"], q["queueId"]): q for q in doc["queues"]}
    for (topic, qid), q in got.items():
        mine = [m for m in msgs if (m["topic"], m["queueId"]) == (topic, qid)]
        assert q["maxOffset"] == len(mine) and q["bytes"] == sum(m["totalSize"] for m in mine)
        assert q["lastStoreTimestamp"] == mine[-1]["storeTimestamp"]
    r = run(["print-msg", "-s", root, "-t", "TopicA", "--begin", 1700000000005, "--end", 1700000000100, "--json"])
    assert [(g["queueId"], g["queueOffset"], g["msgId"]) for g in jlines(r)] == [
        (m["queueId"], m["queueOffset"], m["offsetMsgId"]) for m in sorted(
            (m for m in msgs if m["topic"] == "TopicA" and 1700000000005 <= m["storeTimestamp"] <= 1700000000100),
            key=lambda m: (m["queueId"], m["queueOffset"]))]
    r = run(["print-msg", "-s", root, "-t", "TopicB", "--begin", T0, "--end", "now", "--tags", "标签", "--json"])
    assert [g["tags"] for g in jlines(r)] == ["标签"]
    r = run(["dump-cq", "-s", root, "-t", "TopicA", "-q", "0", "--json"])
    assert [u["message"]["keys"] for u in jlines(r)] == [m["keyList"] for m in msgs if
                                                         (m["topic"], m["queueId"]) == ("TopicA", 0)]


def test_a_damaged_queue_does_not_hide_the_others(store):
    root, acks = store
    (root / "consumequeue" / "TopicA" / "1" / f"{0:020d}").write_bytes(b"\1" * 150)   # not a multiple of 20
    r = run(["queues", "-s", root, "--json"])
    assert r.exit_code == 3
    doc = json.loads(r.stdout)
    broken = next(q for q in doc["queues"] if q["queueId"] == 1)
    assert broken["maxOffset"] is None and "not a multiple of 20" in broken["problems"][0]
    assert [q["maxOffset"] for q in doc["queues"] if q["queueId"] != 1] == [10, 10]
    r = run(["print-msg", "-s", root, "-t", "TopicA", "--begin", T0, "--end", "now", "--json"])
    assert r.exit_code == 3 and len(jlines(r)) == 20
    assert [(q["topic"], q["queueId"]) for q in said(r, "queue-unreadable")] == [("TopicA", 1)]
    assert_one_line_error(run(["dump-cq", "-s", root, "-t", "TopicA", "-q", "1"]), 2, "not a multiple of 20")


def test_pop_retry_v2_topic_is_a_topic_the_store_may_hold(tmp_path):
    """A broker with enableRetryTopicV2 writes %RETRY%<group>+<topic> (KeyBuilder.buildPopRetryTopicV2): its
    consume-queue directory is listed and read like any other; '+' stays refused anywhere else."""
    root = tmp_path / "store"
    retry = "%RETRY%G_POP+TopicA"
    put_jsonl(root, sample(4, queues=1, topic=retry))
    doc = json.loads(run(["queues", "-s", root, "--json"]).stdout)
    assert [(q["topic"], q["maxOffset"]) for q in doc["queues"]] == [(retry, 4)]
    r = run(["dump-cq", "-s", root, "-t", retry, "-q", "0", "--json"])
    assert r.exit_code == 0 and [u["message"]["keys"] for u in jlines(r)] == [[f"k{i}"] for i in range(4)]
    assert topic_problem("TopicA+B") is not None and topic_problem("%RETRY%G+") is not None


def test_print_msg_reports_an_unreadable_unit_whose_index_bound_is_open(tmp_path):
    """Messages stored in one second: an index item's time is bounded only from above there (format 5.6), so a
    unit whose head cannot be read could not be placed in the range; it is visited and reported (exit 3), never
    left out unsaid."""
    root = tmp_path / "s"
    acks = put_jsonl(root, [{"topic": "T", "keys": "k", "queueId": i % 2, "body": "x" * 200} for i in range(60)])
    victim = next(a for a in acks if a["commitLogOffset"] >= 4096 and a["queueId"] == 0)
    assert not _in_last_segment(root, victim)
    damage_record(root, victim)
    for extra in ([], ["--scan-log"], ["-q", "0"]):
        r = run(["print-msg", "-s", root, "-t", "T", "--begin", "0", "--json", *extra])
        assert r.exit_code == 3, (extra, r.output)
        assert victim["commitLogOffset"] not in {g["commitLogOffset"] for g in jlines(r)}
        assert [(u["queueId"], u["queueOffset"]) for u in said(r, "unit-unreadable")] == [(0, victim["queueOffset"])]
