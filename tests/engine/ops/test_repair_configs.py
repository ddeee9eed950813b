"""rmqtool repair config delayOffset.json / subscriptionGroup.json --from-store: the broker's own files (golden
r1, r2) rebuilt from what the store holds, the delivery rule on stores made to test it, the writer's rules."""
from __future__ import annotations

import json

import pytest

from engine.broker.config.brokerconf import load_config
from engine.java import fastjson
from engine.ops.configrebuild import rebuild_delay_offsets
from helpers import SMALL, assert_one_line_error, lock_held, put_jsonl, run, snapshot, unpack_golden

SCHEDULE = "SCHEDULE_TOPIC_XXXX"


def _lose(store, name: str) -> None:
    """The file torn, its .bak empty: the broker would start with an empty table."""
    p = store / "config" / name
    p.write_bytes(p.read_bytes()[:90])
    (store / "config" / f"{name}.bak").write_bytes(b"")


def _without_version(text: str) -> str:
    """The file's text with its dataVersion (counter and save time) taken out."""
    root = fastjson.loads(text)
    root.pop("dataVersion")
    return fastjson.dumps(root)


def _repair(conf, name: str, *extra: str, code: int = 0):
    r = run(["repair", "config", "-c", conf, name, "--from-store", *extra])
    assert r.exit_code == code, (r.stdout, r.stderr)
    return r


# ------------------------------------------------------------------------------------------- delayOffset.json


def test_delay_offsets_as_the_broker_saved_them_r1(tmp_path):
    """r1 was stopped cleanly: its delayOffset.json is the broker's last word; the rebuild gives the same table,
    encoded the same way (the dataVersion aside)."""
    store, conf = unpack_golden("broker/r1", tmp_path)
    saved = (store / "config/delayOffset.json").read_text()
    _lose(store, "delayOffset.json")
    r = _repair(conf, "delayOffset.json")
    assert "level 18: 0 (0 delivered, 2 pending)" in " ".join(r.stdout.split())
    rebuilt = (store / "config/delayOffset.json").read_text()
    assert fastjson.loads(rebuilt)["offsetTable"] == fastjson.loads(saved)["offsetTable"]
    assert _without_version(rebuilt) == _without_version(saved)
    kept = next((store / "quarantine").iterdir())
    assert json.loads((kept / "manifest.json").read_text())["tool"] == "rmqtool repair config delayOffset.json"


@pytest.mark.parametrize("name", ["broker/r2/killed", "broker/r2/damaged"])
def test_delay_offsets_crashed_stores_r2(tmp_path, name):
    """r2 was killed with -9 long after its delayed messages were delivered (its file was saved since): the
    rebuild agrees with the saved file. --dry-run changes nothing and says the same."""
    store, conf = unpack_golden(name, tmp_path)
    saved = fastjson.loads((store / "config/delayOffset.json").read_text())["offsetTable"]
    before = snapshot(store)
    r = _repair(conf, "delayOffset.json", "--dry-run", "--json")
    assert snapshot(store) == before
    doc = json.loads(r.stdout)
    assert not doc["changed"] and doc["dryRun"]
    assert {int(k): v for k, v in doc["offsetTable"].items()} == saved


def test_delay_offsets_window_passes(tmp_path):
    """A key budget smaller than the queues: more passes, the same answer."""
    store, conf = unpack_golden("broker/r1", tmp_path)
    cfg = load_config(conf)
    whole = rebuild_delay_offsets(cfg)
    small = rebuild_delay_offsets(cfg, max_keys=3)
    assert small.table == whole.table and small.passes > whole.passes == 1


def _scheduled(i: int, level: int, real: str = "T", qid: int = 0) -> dict:
    return {"topic": SCHEDULE, "queueId": level - 1, "uniqKey": f"U{level}-{i}", "bornTimestamp": 1_700_000_000_000 + i,
            "body": f"delayed {level}-{i}",
            "properties": {"REAL_TOPIC": real, "REAL_QID": str(qid), "DELAY": str(level)}}


def _copy(m: dict) -> dict:
    """What messageTimeUp puts: the message in its real topic and queue, DELAY cleared, the rest kept."""
    props = {k: v for k, v in m["properties"].items() if k != "DELAY"}
    return {"topic": props["REAL_TOPIC"], "queueId": int(props["REAL_QID"]), "uniqKey": m["uniqKey"],
            "bornTimestamp": m["bornTimestamp"], "body": m["body"], "properties": props}


def test_delay_offset_is_the_first_message_not_delivered(tmp_path):
    store = tmp_path / "s"
    lvl2 = [_scheduled(i, 2) for i in range(6)]
    lvl5 = [_scheduled(i, 5, qid=1) for i in range(3)]
    lvl5[0]["properties"]["REAL_TOPIC"] = "RMQ_SYS_TRANS_HALF_TOPIC"   # the broker discards it: passed
    # level 2: units 0, 1, 3 delivered (3 after 2 is what a crash between puts can leave: 2 is the answer)
    msgs = lvl2 + lvl5 + [_copy(lvl2[0]), _copy(lvl2[1]), _copy(lvl2[3]), _copy(lvl5[1])]
    # a copy stored BEFORE its unit is another message, not the delivery
    early = _scheduled(9, 3)
    msgs = [_copy(early)] + msgs + [early]
    put_jsonl(store, msgs)
    r = run(["repair", "config", "-s", store, *SMALL, "delayOffset.json", "--from-store", "--json"])
    assert r.exit_code == 0, r.stderr
    got = json.loads(r.stdout)["offsetTable"]
    assert got == {"2": 2, "3": 0, "5": 2}
    text = (store / "config/delayOffset.json").read_text()
    assert '"offsetTable":{2:2,3:0,5:2\n\t}' in text


def test_store_without_schedule_topic_gives_an_empty_table(tmp_path):
    """The broker writes an entry only for a level whose queue it delivered from: none here."""
    store = tmp_path / "s"
    put_jsonl(store, [{"topic": "T", "body": "x"}])
    r = run(["repair", "config", "-s", store, *SMALL, "delayOffset.json", "--from-store"])
    assert r.exit_code == 0, r.stderr
    assert fastjson.loads((store / "config/delayOffset.json").read_text())["offsetTable"] == {}
    assert '"offsetTable":{}' in (store / "config/delayOffset.json").read_text()


# ------------------------------------------------------------------------------------------- subscriptionGroup.json


def test_subscription_groups_as_the_broker_wrote_them_r1(tmp_path):
    """Every group of r1 is named by the store (consumer offsets, %RETRY%/%DLQ% topics) or is the broker's own:
    the rebuilt file is the broker's, byte for byte, but for its dataVersion."""
    store, conf = unpack_golden("broker/r1", tmp_path)
    saved = (store / "config/subscriptionGroup.json").read_text()
    _lose(store, "subscriptionGroup.json")
    r = _repair(conf, "subscriptionGroup.json", "--json")
    doc = json.loads(r.stdout)
    assert sorted(doc["groupsFromStore"]) == ["G_ALL", "G_FAIL", "G_PART"]
    assert any("%DLQ%G_FAIL" in w for w in doc["groupsFromStore"]["G_FAIL"])
    assert any("retryMaxTimes" in n for n in doc["notRecovered"])
    assert any("autoCreateSubscriptionGroup=false" in n for n in doc["notRecovered"])
    assert _without_version((store / "config/subscriptionGroup.json").read_text()) == _without_version(saved)


def test_subscription_groups_keep_what_the_bak_holds(tmp_path):
    """A readable .bak keeps its groups' settings; groups only the store names (a pop retry topic, a consumer
    offset) get the defaults."""
    store, conf = unpack_golden("broker/r1", tmp_path)
    bak = fastjson.loads((store / "config/subscriptionGroup.json.bak").read_text())
    bak["subscriptionGroupTable"]["G_ALL"]["retryMaxTimes"] = 3
    (store / "config/subscriptionGroup.json.bak").write_text(fastjson.dumps(bak))
    (store / "config/subscriptionGroup.json").write_text("{\"dataVer")
    topics = fastjson.loads((store / "config/topics.json").read_text())
    topics["topicConfigTable"]["%RETRY%G_POP+TopicA"] = {"topicName": "%RETRY%G_POP+TopicA", "perm": 6}
    (store / "config/topics.json").write_text(fastjson.dumps(topics))
    _repair(conf, "subscriptionGroup.json")
    table = fastjson.loads((store / "config/subscriptionGroup.json").read_text())["subscriptionGroupTable"]
    assert table["G_ALL"]["retryMaxTimes"] == 3
    assert table["G_POP"]["retryMaxTimes"] == 16 and table["G_POP"]["groupName"] == "G_POP"
    assert "G_POP+TopicA" not in table and "CID_RMQ_SYS_TRANS" in table


# ------------------------------------------------------------------------------------------- the writer's rules


@pytest.mark.parametrize("name", ["delayOffset.json", "subscriptionGroup.json"])
def test_dry_run_and_locked_store(tmp_path, name):
    store, conf = unpack_golden("broker/r1", tmp_path)
    _lose(store, name)
    before = snapshot(store)
    d = json.loads(_repair(conf, name, "--dry-run", "--json").stdout)
    assert (d["dryRun"], d["changed"], d["nothingToDo"]) == (True, False, False) and d["actions"]
    assert snapshot(store) == before
    with lock_held(store):
        r = run(["repair", "config", "-c", conf, name, "--from-store"])
        assert_one_line_error(r, 4)
        assert snapshot(store) == before


def test_bad_delay_levels_is_one_line(tmp_path):
    store, conf = unpack_golden("broker/r1", tmp_path)
    conf.write_text(conf.read_text() + "messageDelayLevel=1x 2s\n")
    r = run(["repair", "config", "-c", conf, "delayOffset.json", "--from-store"])
    assert_one_line_error(r, 2, "messageDelayLevel")
