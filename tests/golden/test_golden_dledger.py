"""rmqtool against the store a real RocketMQ 5.3.x broker wrote with the DLedger commit log (tests/golden/modes/dledger,
DLedger 0.3.1.2): the read commands give what the broker and its clients answered, offsets included (entry pos + 48).
"""
from __future__ import annotations

import base64
import json

import pytest

from engine.broker.config.brokerconf import load_config
from engine.broker.index import keyquery
from engine.broker.store import MessageStore
from engine.java.lang import LONG_MAX
from helpers import GOLDEN, assert_consumers_match, assert_queues_match, jsonl, run, unpack_golden

SET = GOLDEN / "modes" / "dledger"


@pytest.fixture(scope="module")
def gold(tmp_path_factory):
    return unpack_golden("modes/dledger", tmp_path_factory.mktemp("dledger"))


def _lines(text: str) -> list[dict]:
    return [json.loads(x) for x in text.split("\n") if x]


def _admin() -> dict:
    return json.loads((SET / "answers" / "admin.json").read_text())


def test_dump_commitlog_reads_every_entry_with_the_brokers_offsets(gold):
    """Every message of the entry log, one BLANK (the padding entry of segment 0), the offsets the clients got:
    each sent message's offsetMsgId names the record dump-commitlog shows there, with its topic, queue, keys,
    tags, UNIQ_KEY and body."""
    r = run(["dump-commitlog", "-c", gold.conf, "--json", "--body", "base64"])
    assert r.exit_code == 0, r.stderr
    rows = _lines(r.stdout)
    msgs = [x for x in rows if x["type"] == "MESSAGE"]
    assert [(x["type"], x["commitLogOffset"], x["size"]) for x in rows if x["type"] != "MESSAGE"] == [
        ("BLANK", 1_047_812, 764)]
    assert len(msgs) == 1039  # entries 0..1038 (README), one message each
    by_off = {m["commitLogOffset"]: m for m in msgs}
    assert msgs[0]["commitLogOffset"] == 48 and msgs[-1]["commitLogOffset"] + msgs[-1]["storeSize"] == 1_197_757
    sent = jsonl(SET / "sent.jsonl")
    checked = 0
    for s in sent:
        if "offsetMsgId" not in s:  # transactional sends report no offsetMsgId
            continue
        off = int(s["offsetMsgId"][16:], 16)
        m = by_off[off]
        assert m["msgId"] == s["offsetMsgId"]
        assert m["uniqKey"] == s["props"]["UNIQ_KEY"] == s["msgId"]
        if s["type"].startswith(("tx-", "delay-")):
            continue  # stored first in RMQ_SYS_TRANS_HALF_TOPIC / SCHEDULE_TOPIC_XXXX
        assert (m["topic"], m["queueId"], m["queueOffset"]) == (s["topic"], s["queueId"], s["queueOffset"]), s["seq"]
        assert m.get("tags") == s.get("tags") and m["properties"].get("KEYS") == s["props"].get("KEYS")
        if not s["type"].startswith("big-"):  # compressed on the wire: the stored body is the compressed one
            assert base64.b64decode(m["body"]) == base64.b64decode(s["bodyB64"])
        checked += 1
    assert checked > 900


def test_get_by_offset_msg_id_and_uniq_key_answers_viewmessage(gold, tmp_path):
    qs = jsonl(SET / "answers" / "queries.jsonl")
    by_id = [q for q in qs if q["q"] == "viewMessage(offsetMsgId)" and "hit" in q]
    assert len(by_id) > 200
    ids = tmp_path / "ids.txt"
    ids.write_text("".join(q["id"] + "\n" for q in by_id))
    r = run(["get", "-c", gold.conf, "--from-file", ids, "--json"])
    assert r.exit_code == 0, r.stderr
    got = _lines(r.stdout)
    assert [(g["topic"], g["queueId"], g["queueOffset"], g["commitLogOffset"], g["storeSize"], g["bodyCRC"])
            for g in got] == [(q["hit"]["topic"], q["hit"]["queueId"], q["hit"]["queueOffset"],
                               q["hit"]["commitLogOffset"], q["hit"]["storeSize"], q["hit"]["bodyCRC"])
                              for q in by_id]
    by_uniq = [q for q in qs if q["q"] == "viewMessage(topic,uniqKey)" and "hit" in q][:40]
    for q in by_uniq[:5]:
        r = run(["get", "-c", gold.conf, "-m", q["id"], "--topic", q["topic"], "--json"])
        assert r.exit_code == 0, r.stderr
        assert json.loads(r.stdout)["commitLogOffset"] == q["hit"]["commitLogOffset"]


def test_query_key_answers_every_querymessage_of_the_broker(gold):
    """All 1,203 queryMessage answers: the broker's raw answer (queryOffset over the index, unverified) is the
    broker's hits, offsets and all, and every message rmqtool verifies against the DLedger log is one of them (the
    verified answer is stricter on store time, never wider); one query through the CLI gives the same."""
    qs = [q for q in jsonl(SET / "answers" / "queries.jsonl") if q["q"] == "queryMessage"]
    assert len(qs) == 1203
    found = 0
    with MessageStore(load_config(gold.conf)) as st:
        for q in qs:
            end = min(q["end"], LONG_MAX)
            want = [h["commitLogOffset"] for h in q["broker"].get("hits", [])]
            raw = keyquery.query_raw(st, q["topic"], q["key"], q["maxNum"], q["begin"], end)
            assert sorted(raw.phy_offsets) == sorted(want), q
            res = keyquery.query(st, q["topic"], q["key"], q["maxNum"], q["begin"], end)
            assert {m.physical_offset for m in res.messages} <= set(want), q
            assert all(m.topic == q["topic"] for m in res.messages)
            found += len(res.messages)
    assert found > 2000
    q = next(q for q in qs if len(q["broker"].get("hits", [])) > 3)
    r = run(["query-key", "-c", gold.conf, "--topic", q["topic"], "--key", q["key"], "--raw", "--json",
             "--begin", str(q["begin"]), "--end", str(min(q["end"], LONG_MAX))])
    assert r.exit_code == 0, r.stderr
    assert sorted(json.loads(r.stdout)["phyOffsets"]) == sorted(h["commitLogOffset"] for h in q["broker"]["hits"])


def test_queues_and_consumers_answer_examine_topic_and_consume_stats(gold):
    admin = _admin()
    theirs = assert_queues_match(run(["queues", "-c", gold.conf, "--json"]), admin)
    assert any(v[1] > 300 for v in theirs.values())
    assert_consumers_match(run(["consumers", "-c", gold.conf, "--json"]), admin)


def test_info_gives_the_brokers_min_and_max_offsets_and_doctor_checks_the_entries(gold):
    rt = _admin()["brokerRuntime"]
    r = run(["info", "-c", gold.conf, "--json"])
    assert r.exit_code == 0, r.stderr
    cl = json.loads(r.stdout)["commitLog"]
    assert (cl["minOffset"], cl["maxOffset"]) == (int(rt["commitLogMinOffset"]), int(rt["commitLogMaxOffset"]))
    assert cl["segments"] == 2 and cl["dledger"]["committedOffset"] == int(rt["commitLogMaxOffset"])
    assert cl["dledger"]["checkpointCommittedIndex"] == 1038
    r = run(["doctor", "-c", gold.conf, "--json"])
    assert r.exit_code == 0, r.stdout
    d = json.loads(r.stdout)
    assert d["healthy"] and "DLedger commit log" in d["summary"]["checked"]
    dl = d["summary"]["read"]["dledger"]
    assert (dl["entries"], dl["records"], dl["firstIndex"], dl["lastIndex"], dl["endOffset"]) == (
        1039, 1039, 0, 1038, 1_197_757)


def test_print_msg_dump_cq_and_inspect_index_verify(gold):
    r = run(["dump-cq", "-c", gold.conf, "--topic", "TopicA", "--queue-id", "3", "--json"])
    assert r.exit_code == 0, r.stderr
    units = _lines(r.stdout)
    assert (units[0]["commitLogOffset"], units[0]["size"], units[0]["status"]) == (48, 531, "OK")
    assert all(u["status"] == "OK" for u in units)
    r = run(["inspect-index", "-c", gold.conf, "--verify", "--json"])
    assert r.exit_code == 0, r.stdout + r.stderr
    v = [x["verify"] for x in _lines(r.stdout)]
    assert v and all(x["ok"] for x in v) and sum(x["itemsChecked"] for x in v) == 3669
    sent = [s for s in jsonl(SET / "sent.jsonl") if s["topic"] == "TopicOrder"]
    r = run(["print-msg", "-c", gold.conf, "--topic", "TopicOrder", "--begin", "0", "--end", str(LONG_MAX), "--json"])
    assert r.exit_code == 0, r.stderr
    assert sorted(m["commitLogOffset"] for m in _lines(r.stdout)) == sorted(
        int(s["offsetMsgId"][16:], 16) for s in sent)


# ------------------------------------------------------------------------------------------- the switched store

SWITCH = GOLDEN / "modes" / "dledger-switch"


@pytest.fixture(scope="module")
def switched(tmp_path_factory):
    """modes/dledger-switch: a file-commit-log store a DLedger broker took over (dividedCommitlogOffset 2,097,152)."""
    import tarfile

    dest = tmp_path_factory.mktemp("switch")
    with tarfile.open(SWITCH / "store.tar.gz") as tf:  # holes of the --sparse archive stay holes
        tf.extractall(dest, filter="data")
    conf = dest / "broker.conf"
    conf.write_text((SWITCH / "broker_dledger.conf").read_text().replace("<store>", str(dest / "store")))
    return conf


def test_a_switched_store_is_read_across_the_divide_as_the_broker_served_it(switched, tmp_path):
    r = run(["dump-commitlog", "-c", switched, "--json"])
    assert r.exit_code == 0, r.stderr
    rows = _lines(r.stdout)
    assert [(x["type"], x["commitLogOffset"]) for x in rows if x["type"] != "MESSAGE"][-1] == ("BLANK", 1_227_328)
    msgs = {x["commitLogOffset"]: x for x in rows if x["type"] == "MESSAGE"}
    sent = jsonl(SWITCH / "sent.jsonl")
    assert len(msgs) == len(sent) == 1100
    for s in sent:
        m = msgs[int(s["offsetMsgId"][16:], 16)]
        assert (m["topic"], m["queueId"], m["queueOffset"], m["uniqKey"]) == (
            s["topic"], s["queueId"], s["queueOffset"], s["msgId"])
    assert min(o for o in msgs if o >= 2_097_152) == 2_097_200  # the first entry's message: pos + 48
    info = json.loads(run(["info", "-c", switched, "--json"]).stdout)["commitLog"]
    assert (info["minOffset"], info["maxOffset"], info["dledger"]["dividedCommitlogOffset"]) == (0, 2_817_342,
                                                                                                   2_097_152)
    admin = json.loads((SWITCH / "answers" / "admin.json").read_text())
    q = json.loads(run(["queues", "-c", switched, "--json"]).stdout)["queues"]
    mine = {(x["topic"], x["queueId"]): (x["minOffset"], x["maxOffset"]) for x in q}
    theirs = {(t, int(k)): (v["min"], v["max"]) for t, qs in admin["topicStats"].items() for k, v in qs.items()}
    assert {k: mine.get(k, (0, 0)) for k in theirs} == theirs
    qs = jsonl(SWITCH / "answers" / "queries.jsonl")
    by_id = [x for x in qs if x["q"] == "viewMessage(offsetMsgId)" and "hit" in x]
    ids = tmp_path / "ids.txt"
    ids.write_text("".join(x["id"] + "\n" for x in by_id))
    r = run(["get", "-c", switched, "--from-file", ids, "--json"])
    assert r.exit_code == 0, r.stderr
    assert [g["commitLogOffset"] for g in _lines(r.stdout)] == [x["hit"]["commitLogOffset"] for x in by_id]
    assert any(x["hit"]["commitLogOffset"] < 2_097_152 for x in by_id) and any(
        x["hit"]["commitLogOffset"] > 2_097_152 for x in by_id)
    with MessageStore(load_config(switched)) as st:
        for x in (x for x in qs if x["q"] == "queryMessage"):
            raw = keyquery.query_raw(st, x["topic"], x["key"], x["maxNum"], x["begin"], min(x["end"], LONG_MAX))
            assert sorted(raw.phy_offsets) == sorted(h["commitLogOffset"] for h in x["broker"].get("hits", [])), x
    r = run(["doctor", "-c", switched, "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["summary"]["read"]["dledger"]["entries"] == 400


def test_spark_reindex_on_the_dledger_store_is_byte_identical_to_the_brokers_index(gold, switched, tmp_path):
    """The index rebuilt from the entries (range by range: records inside entries, entry headers skipped) is the
    broker's own index file byte for byte; on the switched store it spans both logs as the broker's does."""
    out = tmp_path / "ix"
    r = run(["spark-reindex", "-c", gold.conf, "--out", out, "--master", "inline", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["messages"], d["keysIndexed"], d["sameAsBefore"]) == (1039, 3669, True)
    built = sorted(p for p in out.iterdir() if p.name.isdigit())
    theirs = sorted((gold.store / "index").iterdir())
    assert [p.read_bytes() for p in built] == [p.read_bytes() for p in theirs]
    r = run(["spark-reindex", "-c", switched, "--out", tmp_path / "sw", "--master", "inline", "--json"])
    assert r.exit_code == 0, r.output
    assert (json.loads(r.stdout)["messages"], json.loads(r.stdout)["sameAsBefore"]) == (1100, True)
