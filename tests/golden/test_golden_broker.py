"""rmqtool against stores a real RocketMQ 5.3.x broker wrote (tests/golden/broker, tests/golden/timer/t2), and what
that broker and its clients answered on them: bodies as consumers received them, the pre-allocated segment of a
killed broker, the broker's logical truncation, UNIQ_KEY lookups across copies.
"""
from __future__ import annotations

import base64
import json

from helpers import BROKER_R1, BROKER_R2, assert_consumers_match, assert_queues_match, jsonl, run, said, unpack_golden


def _body(j: dict, mode: str = "auto") -> bytes:
    if j.get("bodyEncoding") == "base64" or mode == "base64":
        return base64.b64decode(j["body"])
    if mode == "hex":
        return bytes.fromhex(j["body"])
    return j["body"].encode("utf-8")


def _lines(text: str) -> list[dict]:
    return [json.loads(x) for x in text.split("\n") if x]  # bodies may hold U+2028: never str.splitlines


# ------------------------------------------------------------------------------------------ compressed bodies


def test_every_delivery_body_equals_the_body_rmqtool_reads(r1_store, tmp_path):
    """consumed_G_ALL.jsonl: the body each delivery carried, for every record of r1 a consumer received (ZLIB,
    ZSTD and LZ4 bodies among them); `get --from-file` reads the same records."""
    delivered = jsonl(BROKER_R1 / "answers" / "consumed_G_ALL.jsonl")
    codecs = {d["sysFlag"] >> 8 & 7 for d in delivered if d["topic"] == "TopicBig"}
    assert codecs == {1, 2, 3}  # LZ4, ZSTD, ZLIB
    asked = tmp_path / "offsets.txt"
    asked.write_text("".join(f"{d['commitLogOffset']}\n" for d in delivered))
    r = run(["get", "-s", r1_store, "--from-file", asked, "--json"])
    assert r.exit_code == 0, r.stderr
    got = _lines(r.stdout)
    assert [g["commitLogOffset"] for g in got] == [d["commitLogOffset"] for d in delivered]
    seen = set()
    for d, g in zip(delivered, got):
        assert _body(g) == base64.b64decode(d["bodyB64"]), d["commitLogOffset"]
        assert g["bodyCRC"] == d["bodyCRC"] and "compressionError" not in g
        seen.add(g.get("compression"))
    assert seen == {None, "zlib", "zstd", "lz4"}


def _big(delivered=None) -> dict[int, bytes]:
    """commit-log offset -> the body the consumer received, for TopicBig (the compressed bodies)."""
    delivered = delivered or jsonl(BROKER_R1 / "answers" / "consumed_G_ALL.jsonl")
    return {d["commitLogOffset"]: base64.b64decode(d["bodyB64"]) for d in delivered if d["topic"] == "TopicBig"}


def test_dump_commitlog_decodes_bodies_in_every_body_mode_and_body_dir(r1_store, tmp_path):
    want = _big()
    for mode in ("auto", "utf8", "hex", "base64", "none"):
        r = run(["dump-commitlog", "-s", r1_store, "--topic", "TopicBig", "--json", "--body", mode])
        assert r.exit_code == 0, r.stderr
        got = {j["commitLogOffset"]: j for j in _lines(r.stdout) if j["type"] == "MESSAGE"}  # BLANKs are shown too
        assert set(got) == set(want)
        for off, j in got.items():
            if mode == "none":
                assert j["body"] is None
            elif mode == "utf8":
                assert j["body"] == want[off].decode("utf-8", "replace")
            else:
                assert _body(j, mode) == want[off], (mode, off)
    out = tmp_path / "bodies"
    r = run(["dump-commitlog", "-s", r1_store, "--topic", "TopicBig", "--body-dir", out])
    assert r.exit_code == 0, r.stderr
    assert {int(p.stem): p.read_bytes() for p in out.glob("*.body")} == want


def test_query_key_print_msg_and_tiered_get_show_decoded_bodies(r1_store, tmp_path):
    delivered = jsonl(BROKER_R1 / "answers" / "consumed_G_ALL.jsonl")
    want = _big(delivered)
    for d in (d for d in delivered if d["topic"] == "TopicBig"):
        r = run(["query-key", "-s", r1_store, "--topic", "TopicBig", "--key", d["keys"].split(" ")[0], "--json"])
        assert r.exit_code == 0, r.stderr
        assert [_body(j) for j in _lines(r.stdout)] == [want[d["commitLogOffset"]]]
    r = run(["print-msg", "-s", r1_store, "--topic", "TopicBig", "--begin", "0", "--end", "now", "--json"])
    assert r.exit_code == 0, r.stderr
    assert {j["commitLogOffset"]: _body(j) for j in _lines(r.stdout)} == want

    flat, meta = tmp_path / "flat", tmp_path / "meta.json"
    where = ["-T", flat, "--metadata", meta, "--cluster-name", "C", "--broker-name", "B"]
    r = run(["tiered", "dispatch", "-s", r1_store, *where, "-t", "TopicBig", "--master", "inline"])
    assert r.exit_code == 0, r.output
    by_key = {d["keys"]: want[d["commitLogOffset"]] for d in delivered if d["topic"] == "TopicBig"}
    got = {}
    for q in range(4):
        r = run(["tiered", "get", *where, "-t", "TopicBig", "-q", q, "-i", 0, "-n", 32, "--json"])
        assert r.exit_code == 0, r.output
        got.update({" ".join(m["keys"]): _body(m) for m in json.loads(r.stdout)["messages"]})
    assert got == by_key


# ------------------------------------------------------------------------------------------ the pre-allocated segment


def _admin(where) -> dict:
    return json.loads((where / "answers" / "admin.json").read_text())


def _dump(store, *extra) -> tuple[int, list[dict], str]:
    r = run(["dump-commitlog", "-s", store, "--json", *extra])
    return r.exit_code, _lines(r.stdout), r.stderr


def test_a_killed_brokers_preallocated_segment_is_the_end_of_data(tmp_path):
    """A broker killed with -9 leaves the next commit-log segment allocated and all zero (r2/killed: 0 blocks;
    timer/t2 likewise): the end of data, as the broker's recovery reads it, not damage."""
    killed = unpack_golden("broker/r2/killed", tmp_path / "r2").store
    assert not any((killed / "commitlog" / "00000000000003145728").read_bytes())
    code, entries, err = _dump(killed, "--body", "none")
    assert code == 0, err
    assert {e["type"] for e in entries} == {"MESSAGE", "BLANK"}
    last = entries[-1]
    # the broker that restarted on a copy of it answered commitLogMaxOffset = the end of the last record
    assert last["commitLogOffset"] + last["storeSize"] == int(_admin(BROKER_R2 / "killed")["brokerRuntime"]
                                                             ["commitLogMaxOffset"])

    t2 = unpack_golden("timer/t2", tmp_path / "t2").store
    code, entries, err = _dump(t2, "--body", "none")
    assert code == 0 and entries and {e["type"] for e in entries} == {"MESSAGE"}, err
    assert sorted(p.name for p in (t2 / "commitlog").iterdir())[-1] == "00000000000016777216"


def test_data_after_a_zero_area_is_still_damage(tmp_path):
    """The rule is the broker's: segments that hold nothing but zeros after the data. One byte written in the
    pre-allocated segment makes the zero tail before it a missing BLANK filler again (the broker would cut there)."""
    store = unpack_golden("broker/r2/killed", tmp_path).store
    with open(store / "commitlog" / "00000000000003145728", "r+b") as f:
        f.seek(500_000)
        f.write(b"\x01")
    code, entries, err = _dump(store, "--body", "none")
    assert code == 3
    bad = [e for e in entries if e["type"] == "CORRUPT"]
    assert [e["commitLogOffset"] for e in bad] == [2117276] and "no BLANK filler" in bad[0]["reason"]


def test_recover_deletes_the_preallocated_segment_as_the_broker_does(tmp_path):
    store = unpack_golden("broker/r2/killed", tmp_path).store
    r = run(["recover", "-s", store, "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert plan["commitLog"]["segmentsDeleted"] == ["00000000000003145728"]
    assert (store / "commitlog" / "00000000000003145728").exists()
    r = run(["recover", "-s", store])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (store / "commitlog").iterdir()) == [
        "00000000000000000000", "00000000000001048576", "00000000000002097152"]
    code, entries, err = _dump(store, "--body", "none")
    assert code == 0 and entries[-1]["commitLogOffset"] + entries[-1]["storeSize"] == 2117276


def test_a_preallocated_segment_written_with_zeros_is_unwritten_too(tmp_path):
    """warmMapedFileEnable=true makes the broker write the zeros of the segment it allocates ahead: no holes, still
    nothing written."""
    store = unpack_golden("broker/r2/killed", tmp_path).store
    seg = store / "commitlog" / "00000000000003145728"
    seg.write_bytes(bytes(seg.stat().st_size))
    assert seg.stat().st_blocks * 512 >= seg.stat().st_size
    code, entries, err = _dump(store, "--body", "none")
    assert code == 0, err


# ------------------------------------------------------------------------------------------ logical truncation


def _stats_equal(store, answers, consumers: bool = True) -> None:
    """queues and consumers answer what the broker answered (examineTopicStats, examineConsumeStats)."""
    admin = _admin(answers)
    assert_queues_match(run(["queues", "-s", store, "--json"]), admin)
    if consumers:
        assert_consumers_match(run(["consumers", "-s", store, "--json"]), admin)


def test_queues_and_consumers_answer_what_the_broker_answered(r1_store, tmp_path):
    _stats_equal(r1_store, BROKER_R1)
    # killed/answers come from a broker that went on running on a copy: its consumers' offsets are not in the store
    _stats_equal(unpack_golden("broker/r2/killed", tmp_path / "k").store, BROKER_R2 / "killed", consumers=False)
    recovered = unpack_golden("broker/r2/recovered_by_broker", tmp_path / "r").store
    _stats_equal(recovered, BROKER_R2 / "recovered_by_broker")


def test_a_broker_recovered_store_is_read_as_that_broker_serves_it(tmp_path):
    """r2/recovered_by_broker: the broker's recovery stopped at the damaged TopicFlood record (damage.json) and
    truncated logically; TopicFlood/0's units up to 300 stay in its file, the broker serves 184."""
    store = unpack_golden("broker/r2/recovered_by_broker", tmp_path / "r2").store
    damage = json.loads((BROKER_R2 / "damaged" / "damage.json").read_text())["damagedRecord"]
    cut_at, cut_q = damage["commitLogOffset"], damage["queueOffset"]
    broker_max = _admin(BROKER_R2 / "recovered_by_broker")["topicStats"]["TopicFlood"]["000"]["max"]
    assert cut_q == broker_max == 184

    r = run(["queues", "-s", store, "-t", "TopicFlood", "--json"])
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    (q,) = doc["queues"]
    assert (q["maxOffset"], q["truncatedUnits"]) == (184, 300 - 184)
    t = doc["logicalTruncation"]
    assert t["commitLogEnd"] == cut_at and "CRC" in t["reason"] and t["cutUnits"] == 116
    (note,) = said(r, "logical-truncation")
    assert (note["commitLogEnd"], note["cutUnits"], note["queues"]) == (cut_at, 116, 1)

    r = run(["dump-cq", "-s", store, "-t", "TopicFlood", "-q", 0, "-i", 182, "-n", 10, "--json"])
    assert r.exit_code == 0
    assert [u["status"] for u in _lines(r.stdout)] == ["OK", "OK"]  # cut at the broker's max
    r = run(["dump-cq", "-s", store, "-t", "TopicFlood", "-q", 0, "-i", 184, "-n", 3, "--json"])
    assert r.exit_code == 0 and [(u["queueOffset"], u["status"]) for u in _lines(r.stdout)] == [
        (184, "CUT"), (185, "CUT"), (186, "CUT")]
    assert _lines(r.stdout)[0]["commitLogOffset"] == cut_at
    assert [n["commitLogEnd"] for n in said(r, "logical-truncation")] == [cut_at]

    r = run(["get", "-s", store, "-t", "TopicFlood", "-q", 0, "-i", 183, "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["queueOffset"] == 183
    r = run(["get", "-s", store, "-t", "TopicFlood", "-q", 0, "-i", 184])
    assert r.exit_code == 2 and "max offset is 184" in r.stderr and "logical truncation" in r.stderr

    r = run(["print-msg", "-s", store, "-t", "TopicFlood", "--begin", 0, "--end", "now", "--json"])
    assert r.exit_code == 0 and [j["queueOffset"] for j in _lines(r.stdout)] == list(range(184))
    assert [n["commitLogEnd"] for n in said(r, "logical-truncation")] == [cut_at]

    # the tier-out tiers what the broker serves
    where = ["-T", tmp_path / "flat", "--metadata", tmp_path / "meta.json", "--cluster-name", "C", "--broker-name", "B"]
    r = run(["tiered", "dispatch", "-s", store, *where, "-t", "TopicFlood", "--master", "inline", "--json"])
    assert r.exit_code == 0 and [n["commitLogEnd"] for n in said(r, "logical-truncation")] == [cut_at], r.output
    r = run(["tiered", "queues", *where, "--json"])
    assert [(q["topic"], q["consumeQueueMaxOffset"]) for q in _lines(r.stdout)] == [("TopicFlood", 184)], r.stdout

    # what its consumer received of TopicFlood: the same 184 messages
    got = [d for d in jsonl(BROKER_R2 / "recovered_by_broker" / "answers" / "consumed_G_VERIFY_D.jsonl")
           if d["topic"] == "TopicFlood"]
    assert sorted(d["queueOffset"] for d in got) == list(range(184))


def test_the_damaged_store_before_any_broker_is_read_the_same_way(tmp_path):
    """r2/damaged (abort marker, the damaged record in the middle segment): a broker's abnormal recovery scans
    from the checkpoint's segment and stops at the same record; the readers serve what it served."""
    r = run(["queues", "-s", unpack_golden("broker/r2/damaged", tmp_path).store, "-t", "TopicFlood", "--json"])
    assert r.exit_code == 0
    (q,) = json.loads(r.stdout)["queues"]
    assert q["maxOffset"] == 184 and json.loads(r.stdout)["logicalTruncation"]["mode"] == "abnormal"


# ------------------------------------------------------------------------------------------ UNIQ_KEY without --topic


def test_get_by_uniq_key_answers_the_delivered_copy_and_names_the_others(r1_store, tmp_path):
    """r1's viewMessage(topic, uniqKey) answers: the record a consumer of the message's own topic received, for
    delayed, transactional and retried messages too; `get -m` without --topic answers the same record and names
    the other copies (SCHEDULE_TOPIC_XXXX, RMQ_SYS_TRANS_HALF_TOPIC, %RETRY%, %DLQ%) on stderr."""
    asked = [q for q in jsonl(BROKER_R1 / "answers" / "queries.jsonl") if q["q"] == "viewMessage(topic,uniqKey)"]
    found = [q for q in asked if "hit" in q]
    missing = [q for q in asked if "hit" not in q]
    assert len(found) > 200 and missing
    ids = tmp_path / "ids.txt"
    ids.write_text("".join(q["id"] + "\n" for q in found))
    r = run(["get", "-s", r1_store, "--from-file", ids, "--json"])
    assert r.exit_code == 0, r.stderr
    got = _lines(r.stdout)
    assert [(g["topic"], g["queueId"], g["queueOffset"], g["commitLogOffset"]) for g in got] == [
        (q["hit"]["topic"], q["hit"]["queueId"], q["hit"]["queueOffset"], q["hit"]["commitLogOffset"]) for q in found]

    sent = {s["msgId"]: s for s in jsonl(BROKER_R1 / "sent.jsonl")}
    for kind, others in (("delay", "SCHEDULE_TOPIC_XXXX"), ("tx", "RMQ_SYS_TRANS_HALF_TOPIC"),
                         ("retry", "%DLQ%G_FAIL")):
        q = next(q for q in found if sent[q["id"]]["type"].startswith(kind)
                 and (kind != "retry" or "kFailAlways" in json.dumps(sent[q["id"]])))
        r = run(["get", "-s", r1_store, "-m", q["id"], "--json"])
        assert r.exit_code == 0, r.stderr
        assert json.loads(r.stdout)["commitLogOffset"] == q["hit"]["commitLogOffset"]
        copies = said(r, "uniq-key-copy")
        assert others in {c["topic"] for c in copies} and {c["uniqKey"] for c in copies} == {q["id"]}, (kind, r.stderr)
        assert not any(c["delivered"] for c in copies if c["topic"] == others)

    # Never delivered (a rollback, a 2-hour delay still waiting): the broker's view finds no message in the topic;
    # get shows the copy there is, and says it was not delivered.
    for q in missing:
        r = run(["get", "-s", r1_store, "-m", q["id"], "--json"])
        assert r.exit_code == 0, r.stderr
        assert json.loads(r.stdout)["topic"] in ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC")
        (shown,) = said(r, "uniq-key-not-delivered")
        assert shown["topic"] == json.loads(r.stdout)["topic"] and shown["delivered"] is False


# ------------------------------------------------------------------------------------------ the recovery placeholder


def test_recover_keeps_the_messages_after_the_damage_and_says_what_consumers_receive(tmp_path):
    """r2/damaged: the broker's recovery cut TopicFlood at the damaged record (184 messages); recover keeps the
    183 after it and puts a placeholder where the damaged one was. The plan says what a consumer receives there,
    the placeholder says what it replaces, and list_placeholders finds it from the quarantine manifest."""
    from engine.broker.config.brokerconf import load_config
    from engine.broker.store import MessageStore
    from engine.ops.recovery import list_placeholders

    damage = json.loads((BROKER_R2 / "damaged" / "damage.json").read_text())
    dr = damage["damagedRecord"]
    store = unpack_golden("broker/r2/damaged", tmp_path).store
    r = run(["recover", "-s", store, "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "TopicFlood/0 queue offset 184" in r.stdout and "rmq_sys_rmqtool_quarantine" in r.stderr
    assert "RMQTOOL_QUARANTINED" in r.stderr and "`rmqtool info`" in r.stderr
    r = run(["recover", "-s", store, "--json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert plan["placeholders"] == [{"commitLogOffset": dr["commitLogOffset"], "size": dr["storeSize"],
                                     "origin": {"topic": "TopicFlood", "queueId": 0, "queueOffset": 184}}]

    r = run(["get", "-s", store, "-t", "TopicFlood", "-q", 0, "-i", 184, "--count", 2, "--json"])
    got = _lines(r.stdout)
    # the placeholder is shown as what it is (issue 34 item 5): rmqtool's own record, not a mismatch, exit 0
    assert r.exit_code == 0 and [g["queueOffset"] for g in got] == [184, 185]
    assert got[0]["placeholder"]["origin"]["queueOffset"] == 184 and "placeholder" not in got[1]
    ph = json.loads(run(["get", "-s", store, "--offset", dr["commitLogOffset"], "--json"]).stdout)
    assert ph["topic"] == "rmq_sys_rmqtool_quarantine" and ph["tags"] is None and ph["keys"] == []
    assert (ph["queueId"], ph["queueOffset"], ph["storeSize"]) == (0, 184, dr["storeSize"])
    props = ph["properties"]
    assert (props["RMQTOOL_ORIGIN_TOPIC"], props["RMQTOOL_ORIGIN_QUEUE_ID"], props["RMQTOOL_ORIGIN_QUEUE_OFFSET"]) \
        == ("TopicFlood", "0", "184")
    manifest = store / props["RMQTOOL_QUARANTINED"]
    assert json.loads(manifest.read_text())["complete"]
    assert set(base64.b64decode(ph["body"]) if ph.get("bodyEncoding") else ph["body"].encode()) <= {0}

    with MessageStore(load_config(None, storePathRootDir=str(store))) as st:
        (p,) = list_placeholders(st)
    assert (p.commitLogOffset, p.size, p.origin, p.present) == (
        dr["commitLogOffset"], dr["storeSize"], {"topic": "TopicFlood", "queueId": 0, "queueOffset": 184}, True)
    assert p.manifest == props["RMQTOOL_QUARANTINED"] and "CRC" in p.reason
    # every flood message but the damaged one is still there to consume
    r = run(["queues", "-s", store, "-t", "TopicFlood", "--json"])
    assert json.loads(r.stdout)["queues"][0]["maxOffset"] == 368 and not json.loads(r.stdout)["logicalTruncation"]
