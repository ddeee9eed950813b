"""Operator parity (issue 14 item 4): the broker's config/*.json files (fastjson text, the .bak fallback), consumer
progress and the delay-level queues, through the CLI on stores written by `put`."""
from __future__ import annotations

import json

import pytest

from engine.broker.commitlog.message import parse_delay_levels
from engine.broker.config import jsonfiles
from engine.broker.layout import StoreLayout
from engine.java import fastjson
from engine.java.concurrent import ConcurrentHashMap, int_hash, string_hash
from engine.errors import InvalidArgumentError
from helpers import assert_one_line_error, put_jsonl, run, said, snapshot

T0 = 1_700_000_000_000
DATA_VERSION = {"counter": 3, "stateVersion": 0, "timestamp": T0}


def chm(pairs, key_hash):
    """A map in the iteration order the broker's ConcurrentHashMap writes it in."""
    m = ConcurrentHashMap(key_hash)
    for k, v in pairs:
        m.put(k, v)
    return dict(m.items())


def offset_file(table: dict) -> str:
    """consumerOffset.json as ConsumerOffsetManager.encode(true) writes it (fastjson PrettyFormat, bean fields
    in name order, Integer queue ids as bare keys)."""
    inner = {k: chm(v.items(), int_hash) for k, v in table.items()}
    return fastjson.dumps({"dataVersion": DATA_VERSION, "offsetTable": chm(inner.items(), string_hash)})


def delay_file(table: dict) -> str:
    return fastjson.dumps({"dataVersion": DATA_VERSION, "offsetTable": chm(table.items(), int_hash)})


def topics_file(topics: dict) -> str:
    table = {name: {"attributes": {}, "order": False, "perm": 6, "readQueueNums": n, "topicFilterType": "SINGLE_TAG",
                    "topicName": name, "topicSysFlag": 0, "writeQueueNums": n} for name, n in topics.items()}
    return fastjson.dumps({"dataVersion": DATA_VERSION, "topicConfigTable": chm(table.items(), string_hash)})


def groups_file(names) -> str:
    table = {g: {"brokerId": 0, "consumeBroadcastEnable": True, "consumeEnable": True, "consumeFromMinEnable": True,
                 "groupName": g, "retryMaxTimes": 16, "retryQueueNums": 1} for g in names}
    return fastjson.dumps({"dataVersion": DATA_VERSION, "forbiddenTable": {},
                           "subscriptionGroupTable": chm(table.items(), string_hash)})


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "store"
    msgs = [{"topic": "TopicA", "queueId": i % 4, "storeTimestamp": T0 + i * 1000, "body": f"m{i}"} for i in range(20)]
    msgs += [{"topic": "TopicB", "queueId": 0, "storeTimestamp": T0 + 50_000 + i, "body": "b"} for i in range(3)]
    acks = put_jsonl(root, msgs)
    cfg = root / "config"
    cfg.mkdir(exist_ok=True)
    (cfg / "consumerOffset.json").write_text(offset_file({
        "TopicA@g1": {0: 5, 1: 2, 2: 0}, "TopicB@g1": {0: 3}, "TopicA@g2": {0: 1},
        "%RETRY%g1@g1": {0: 0}, "bad-key": {0: 1}}))
    (cfg / "topics.json").write_text(topics_file({"TopicA": 4, "TopicB": 1}))
    (cfg / "subscriptionGroup.json").write_text(groups_file(["g1", "g2", "g3"]))
    return root, acks


def progress(r):
    doc = json.loads(r.stdout)
    return {g["group"]: {(q["topic"], q["queueId"]): q for q in g["queues"]} for g in doc["groups"]}, doc


def test_the_files_are_in_the_brokers_text_form(store):
    root, _ = store
    text = (root / "config" / "consumerOffset.json").read_text()
    assert '\t"offsetTable":{' in text and "\t\t\"TopicB@g1\":{0:3\n\t\t}" in text   # bare Integer keys
    assert not text.endswith("\n")


def test_consumer_progress_like_mqadmin(store):
    root, acks = store
    r = run(["consumers", "-s", root, "--json"])
    assert r.exit_code == 0, r.output
    got, doc = progress(r)
    assert set(got) == {"g1", "g2"}
    assert got["g1"][("%RETRY%g1", 0)]["committed"]      # the retry topic's offsets belong to g1 too
    g1 = got["g1"]
    # TopicA has readQueueNums 4: queue 3 has no committed offset and counts from 0
    assert sorted(k for k in g1 if k[0] == "TopicA") == [("TopicA", q) for q in range(4)]
    q0 = g1[("TopicA", 0)]
    assert (q0["brokerOffset"], q0["consumerOffset"], q0["diff"], q0["committed"]) == (5, 5, 0, True)
    q1 = g1[("TopicA", 1)]
    assert (q1["brokerOffset"], q1["consumerOffset"], q1["diff"]) == (5, 2, 3)
    last = next(a for a in acks if a["topic"] == "TopicA" and a["queueId"] == 1 and a["queueOffset"] == 1)
    assert q1["lastTimestamp"] == last["storeTimestamp"]
    q3 = g1[("TopicA", 3)]
    assert (q3["consumerOffset"], q3["diff"], q3["committed"], q3["lastTimestamp"]) == (0, 5, False, None)
    assert g1[("TopicB", 0)]["diff"] == 0
    assert next(g for g in doc["groups"] if g["group"] == "g1")["diffTotal"] == 0 + 3 + 5 + 5 + 0
    assert any(n["kind"] == "offset-key-skipped" and "'bad-key'" in n["note"] for n in doc["notes"])
    assert doc["sources"]["consumerOffset.json"] == "config/consumerOffset.json"


def test_consumers_one_group_table_and_unknown_group(store):
    root, _ = store
    r = run(["consumers", "-s", root, "--group", "g2"])
    assert r.exit_code == 0, r.output
    assert "g2: diff total 19 over 4 queue(s)" in r.stdout and "g1" not in r.stdout
    r = run(["consumers", "-s", root, "--group", "g3", "--json"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["groups"] == [{"group": "g3", "diffTotal": 0, "queues": []}]
    assert [n["kind"] for n in doc["notes"]] == ["offset-key-skipped", "group-without-offset"]
    assert [(d["note"], d["message"]) for d in said(r)] == [(n["kind"], n["note"]) for n in doc["notes"]]  # on stderr
    assert_one_line_error(run(["consumers", "-s", root, "--group", "nope"]), 2, "no consumer group 'nope'")


def test_consumers_topic_missing_from_topics_json(store):
    root, _ = store
    (root / "config" / "topics.json").write_text(topics_file({"TopicA": 2}))
    got, doc = progress(run(["consumers", "-s", root, "--json"]))
    assert sorted(k for k in got["g1"] if k[0] == "TopicA") == [("TopicA", 0), ("TopicA", 1)]
    assert ("TopicB", 0) in got["g1"]
    assert "TopicB" in [n["note"].split()[0] for n in doc["notes"] if n["kind"] == "topic-not-in-topics-json"]


def test_bak_fallback_for_missing_empty_and_damaged_files(store):
    root, _ = store
    cfg = root / "config"
    good = (cfg / "consumerOffset.json").read_text()
    (cfg / "consumerOffset.json.bak").write_text(offset_file({"TopicA@g1": {0: 4}}))
    for main in ("", "{\n\t\"offsetTable\":{\n\t\t\"TopicA@g1\":{0:5,1:", '{"offsetTable":[1,2]}', None):
        if main is None:
            (cfg / "consumerOffset.json").unlink()
        else:
            (cfg / "consumerOffset.json").write_text(main)
        before = snapshot(root)
        r = run(["consumers", "-s", root, "--json"])
        assert r.exit_code == 0, r.output
        got, doc = progress(r)
        assert got["g1"][("TopicA", 0)]["consumerOffset"] == 4
        assert [(n["kind"], n["file"]) for n in doc["notes"]] == [("config-bak-read", "config/consumerOffset.json")]
        assert doc["sources"]["consumerOffset.json"] == "config/consumerOffset.json.bak"
        assert snapshot(root) == before          # never deletes the bad file, as the broker would
    (cfg / "consumerOffset.json").write_text(good)
    got, _ = progress(run(["consumers", "-s", root, "--json"]))
    assert got["g1"][("TopicA", 0)]["consumerOffset"] == 5


def test_config_errors_are_one_line(store):
    root, _ = store
    cfg = root / "config"
    (cfg / "consumerOffset.json").write_text("{\"offsetTable\":{")
    assert_one_line_error(run(["consumers", "-s", root]), 2, "config/consumerOffset.json is damaged")
    (cfg / "consumerOffset.json.bak").write_text("{]")
    assert_one_line_error(run(["consumers", "-s", root]), 2, "the broker would not start")
    (cfg / "consumerOffset.json").unlink()
    (cfg / "consumerOffset.json.bak").unlink()
    assert_one_line_error(run(["consumers", "-s", root]), 2, "is missing")
    (cfg / "consumerOffset.json").write_text('{"offsetTable":{"TopicA@g1":{"x":1}}}')
    assert_one_line_error(run(["consumers", "-s", root]), 2, "not in the broker's shape")
    (cfg / "consumerOffset.json").write_text(offset_file({"TopicA@g1": {0: 1}}))
    (cfg / "topics.json").write_bytes(b"\xff\xfe")
    r = run(["consumers", "-s", root, "--json"])    # topics.json is optional: a note, and the queues on disk
    notes = json.loads(r.stdout)["notes"]
    assert r.exit_code == 0 and [(n["kind"], n["file"]) for n in notes] == [("config-unreadable", "config/topics.json")]
    (cfg / "topics.json").unlink()
    (cfg / "topics.json").symlink_to("/etc/passwd")
    r = run(["consumers", "-s", root, "--json"])
    assert r.exit_code == 0
    assert [(n["note"], n["file"]) for n in said(r)] == [("config-unreadable", "config/topics.json")]  # on stderr too


def test_config_reader_shapes(tmp_path):
    layout = StoreLayout(tmp_path)
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config" / "delayOffset.json").write_text("{'offsetTable':{\"1\":7, 2:9L,},/* c */}")
    f = jsonfiles.delay_offsets(layout)
    assert f.value == {1: 7, 2: 9} and f.source == "config/delayOffset.json"
    (tmp_path / "config" / "topics.json").write_text('{"topicConfigTable":{"T":{"topicName":"T"}}}')
    assert jsonfiles.topic_configs(layout).value["T"].readQueueNums == 16   # TopicConfig's default
    assert jsonfiles.split_topic_group("T@g") == ("T", "g")
    assert jsonfiles.split_topic_group("T@") is None and jsonfiles.split_topic_group("a@b@c") is None
    missing = jsonfiles.subscription_groups(layout)
    assert not missing.found and missing.value == {} and [n.kind for n in missing.notes] == ["config-missing"]


# ------------------------------------------------------------------------------------------- delays


@pytest.fixture
def delay_store(tmp_path):
    root = tmp_path / "store"
    msgs = []
    for level, n in ((1, 3), (3, 4)):
        for i in range(n):
            msgs.append({"topic": "SCHEDULE_TOPIC_XXXX", "queueId": level - 1, "storeTimestamp": T0 + i * 100,
                         "properties": {"DELAY": str(level), "REAL_TOPIC": "TopicA", "REAL_QID": "0"},
                         "body": f"d{level}-{i}"})
    acks = put_jsonl(root, msgs)
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "delayOffset.json").write_text(delay_file({1: 1, 3: 99}))
    return root, acks


def test_delays_offsets_pending_and_next_delivery(delay_store):
    root, acks = delay_store
    r = run(["delays", "-s", root, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["messageDelayLevel"].startswith("1s 5s 10s")
    lv = {x["delayLevel"]: x for x in doc["levels"]}
    assert set(lv) == {1, 3}
    one = lv[1]
    assert (one["queueId"], one["maxOffset"], one["delayOffset"], one["pending"]) == (0, 3, 1, 2)
    assert one["nextStoreTimestamp"] == T0 + 100 and one["nextDeliverTimestamp"] == T0 + 100 + 1000
    assert one["lastDeliverTimestamp"] == T0 + 200 + 1000
    three = lv[3]   # offset 99 is past the queue's max 4: the broker corrects it to 4 at load
    assert (three["delayOffset"], three["effectiveOffset"], three["pending"]) == (99, 4, 0)
    assert three["nextDeliverTimestamp"] is None
    assert [n["kind"] for n in three["notes"]] == ["offset-corrected"]
    t = run(["delays", "-s", root])
    assert t.exit_code == 0 and "nextDelivery" in t.stdout and "10s" in t.stdout


def test_delays_levels_from_broker_conf(delay_store, tmp_path):
    root, _ = delay_store
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={root}\nmessageDelayLevel=2s 1m\n")
    r = run(["delays", "-c", conf, "--json"])
    assert r.exit_code == 0, r.output
    lv = {x["delayLevel"]: x for x in json.loads(r.stdout)["levels"]}
    assert lv[1]["delay"] == "2s" and lv[1]["delayMs"] == 2000
    assert lv[3]["delay"] is None and "level-not-delivered" in [n["kind"] for n in lv[3]["notes"]]
    # the stored delivery time (computed with the default 1s) disagrees with 2s: said, not hidden
    assert {n["kind"] for n in lv[1]["notes"]} == {"delivery-time-mismatch"}
    assert lv[1]["nextDeliverTimestamp"] == T0 + 100 + 1000
    conf.write_text(f"storePathRootDir={root}\nmessageDelayLevel=1s  5x\n")
    assert_one_line_error(run(["delays", "-c", conf]), 2, "the broker would not start")


def test_delays_missing_and_damaged_offsets(delay_store):
    root, _ = delay_store
    (root / "config" / "delayOffset.json").unlink()
    r = run(["delays", "-s", root, "--json"])
    assert r.exit_code == 0
    notes = json.loads(r.stdout)["notes"]
    assert [(n["kind"], n["file"]) for n in notes] == [("config-missing", "config/delayOffset.json")]
    lv = {x["delayLevel"]: x for x in json.loads(r.stdout)["levels"]}
    assert lv[1]["pending"] == 3 and lv[3]["pending"] == 4      # the broker starts every level at 0
    (root / "config" / "delayOffset.json").write_text("{offsetTable:{1:")
    assert_one_line_error(run(["delays", "-s", root]), 2, "config/delayOffset.json is damaged")


def test_parse_delay_levels_is_the_brokers():
    assert parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")[-1] == 7_200_000
    assert parse_delay_levels("1d 2h ") == [86_400_000, 7_200_000]
    for bad, why in (("", "names no level"), (" 1s", "level 1 is ''"), ("1s 5", "level 2 is '5'"),
                     ("1x", "level 1 is '1x'"), ("s", "level 1 is 's'")):
        with pytest.raises(InvalidArgumentError, match=why):
            parse_delay_levels(bad)


def test_consumers_damaged_queue_and_bad_topic_names(store):
    root, _ = store
    (root / "consumequeue" / "TopicA" / "2" / f"{0:020d}").write_bytes(b"\1" * 150)
    (root / "config" / "consumerOffset.json").write_text(offset_file({"TopicA@g1": {0: 5}, "../../etc@g1": {0: 1}}))
    r = run(["consumers", "-s", root, "--json"])
    assert r.exit_code == 3, r.output
    got, _ = progress(r)
    assert got["g1"][("TopicA", 2)]["brokerOffset"] is None
    assert "cannot be read" in got["g1"][("TopicA", 2)]["note"]
    assert got["g1"][("TopicA", 0)]["diff"] == 0
    assert "not a valid topic name" in got["g1"][("../../etc", 0)]["note"]
    assert "1 consume queue(s) could not be read: g1 TopicA/2" in r.stderr
