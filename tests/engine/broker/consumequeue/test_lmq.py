"""LMQ and multi-dispatch (enableLmq, enableMultiDispatch): put writes INNER_MULTI_QUEUE_OFFSET and the %LMQ% units
as the broker does, recover rebuilds and cuts them, the queue checks accept them; the golden set modes/lmq (a real
broker's store) is reproduced."""
from __future__ import annotations

from helpers import GOLDEN
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from engine.broker.commitlog.message import VALID, check_message, serialize_properties
from engine.broker.consumequeue.lmq import (dispatch_targets, java_split, lmq_offsets_value, topic_allows_lmq,
                                            unit_named_by)
from engine.broker.consumequeue.queue import UNIT_DTYPE
from engine.broker.mode import WRITER_RULES
from helpers import jlines, run, said, snapshot, unpack_golden

LMQ_DIR = "%LMQ%"


def _conf(tmp_path: Path, lmq: bool = True, extra: str = "") -> tuple[Path, Path]:
    store = tmp_path / "store"
    conf = tmp_path / "broker.conf"
    flags = "enableLmq=true\nenableMultiDispatch=true\n" if lmq else ""
    # 1 MiB commit-log files: the broker's default 1 GiB file costs each snapshot() a gigabyte read and hash
    conf.write_text(f"storePathRootDir={store}\nmappedFileSizeCommitLog=1048576\nmappedFileSizeConsumeQueue=6000\n"
                    f"{flags}{extra}")
    return store, conf


MSGS = [
    {"topic": "TopicA", "body": "m1", "tags": "t1", "uniqKey": "U1",
     "properties": {"INNER_MULTI_DISPATCH": "%LMQ%q1,%LMQ%q2"}},
    {"topic": "TopicA", "body": "m2", "uniqKey": "U2", "properties": {"INNER_MULTI_DISPATCH": "%LMQ%q2"}},
    {"topic": "TopicB", "body": "m3", "uniqKey": "U3"},
]


def _put(conf: Path, msgs: list[dict], code: int = 0):
    data = "".join(json.dumps(m) + "\n" for m in msgs)
    r = run(["put", "-c", conf, "--from-jsonl", "-", "--json"], input=data)
    assert r.exit_code == code, r.output
    return r


def _records(conf: Path) -> list[dict]:
    r = run(["dump-commitlog", "-c", conf, "--json"])
    assert r.exit_code == 0, r.output
    return [d for d in jlines(r) if d.get("topic")]


def _units(store: Path, topic: str, qid: int = 0) -> np.ndarray:
    d = store / "consumequeue" / topic / str(qid)
    raw = b"".join(p.read_bytes() for p in sorted(d.iterdir()))
    u = np.frombuffer(raw, dtype=UNIT_DTYPE)
    return u[u["size"] > 0]


def _raw_record(store: Path, off: int) -> bytes:
    data = (store / "commitlog" / "00000000000000000000").read_bytes()
    size = int.from_bytes(data[off:off + 4], "big")
    return data[off:off + size]


# ------------------------------------------------------------------------------------------- the rules

def test_rules_split_join_and_topics():
    assert java_split("%LMQ%a,%LMQ%b,") == ["%LMQ%a", "%LMQ%b"]   # Java drops trailing empty strings
    assert java_split(",") == [] and java_split("a,,b") == ["a", "", "b"]
    assert lmq_offsets_value([3, None, 0]) == "3,,0"               # StringUtils.join: null as empty
    assert not topic_allows_lmq("%RETRY%g") and not topic_allows_lmq("rmq_sys_x")
    assert not topic_allows_lmq("SCHEDULE_TOPIC_XXXX") and topic_allows_lmq("TopicA")
    props = {"INNER_MULTI_DISPATCH": "%LMQ%a,%LMQ%b", "INNER_MULTI_QUEUE_OFFSET": "4,7"}
    t, why = dispatch_targets("TopicA", 3, props, True, True)
    assert why is None and [(x.topic, x.queue_id, x.queue_offset) for x in t] == [("%LMQ%a", 0, 4), ("%LMQ%b", 0, 7)]
    assert dispatch_targets("TopicA", 3, props, True, False) == ([], None)  # no enableMultiDispatch: no units
    assert dispatch_targets("SCHEDULE_TOPIC_XXXX", 3, props, True, True) == ([], None)
    bad = dict(props, INNER_MULTI_QUEUE_OFFSET="4")
    assert dispatch_targets("TopicA", 3, bad, True, True)[1] is not None  # counts differ: the broker writes none
    assert unit_named_by("TopicA", 3, props, "%LMQ%b", 0, 7)
    assert not unit_named_by("TopicA", 3, props, "%LMQ%b", 0, 4)
    assert not unit_named_by("TopicA", 3, props, "%LMQ%c", 0, 7)


def test_writer_rules_lmq():
    assert {"put", "recover", "clean"} <= WRITER_RULES["lmq"]
    assert "repair consume-queue" not in WRITER_RULES["lmq"]


# ------------------------------------------------------------------------------------------- put

def test_put_writes_offsets_and_units(tmp_path):
    store, conf = _conf(tmp_path)
    acks = jlines(_put(conf, MSGS))
    recs = _records(conf)
    offs = [r["properties"].get("INNER_MULTI_QUEUE_OFFSET") for r in recs]
    assert offs == ["0,0", "1", None]
    # the record's properties byte for byte: the message's map with INNER_MULTI_QUEUE_OFFSET put last, written again
    # (LmqDispatch.wrapLmqDispatch + messageProperties2String); TOTALSIZE and the CRCs agree with it
    raw = _raw_record(store, acks[0]["commitLogOffset"])
    r = check_message(raw, 0, len(raw), check_crc=True)
    assert r.status == VALID and r.size == len(raw) == acks[0]["storeSize"]
    want = serialize_properties({"INNER_MULTI_DISPATCH": "%LMQ%q1,%LMQ%q2", "TAGS": "t1", "UNIQ_KEY": "U1",
                                 "INNER_MULTI_QUEUE_OFFSET": "0,0"}).encode()
    assert raw.endswith(len(want).to_bytes(2, "big") + want)
    # a unit per %LMQ% queue: the record's offset, size and tags code, as its own queue's unit
    main = _units(store, "TopicA")
    q1, q2 = _units(store, "%LMQ%q1"), _units(store, "%LMQ%q2")
    assert q1.tolist() == main[:1].tolist()
    assert q2.tolist() == main[:2].tolist()
    assert q1["offset"].tolist() == [acks[0]["commitLogOffset"]]
    # put again: the LMQ offsets continue from the queues' ends
    acks2 = jlines(_put(conf, MSGS))
    offs = [r["properties"].get("INNER_MULTI_QUEUE_OFFSET") for r in _records(conf)]
    assert offs == ["0,0", "1", None, "1,2", "3", None]
    assert _units(store, "%LMQ%q2")["offset"].tolist() == [acks[0]["commitLogOffset"], acks[1]["commitLogOffset"],
                                                          acks2[0]["commitLogOffset"], acks2[1]["commitLogOffset"]]


def test_put_replaces_a_producer_offset(tmp_path):
    store, conf = _conf(tmp_path)
    m = {"topic": "T", "body": "x", "properties": {"INNER_MULTI_QUEUE_OFFSET": "99", "INNER_MULTI_DISPATCH": "%LMQ%z"}}
    _put(conf, [m])
    assert _records(conf)[0]["properties"]["INNER_MULTI_QUEUE_OFFSET"] == "0"


def test_put_without_lmq_ignores_dispatch(tmp_path):
    store, conf = _conf(tmp_path, lmq=False)
    r = _put(conf, MSGS[:2])
    assert [n["messages"] for n in said(r, "lmq-ignored")] == [2]
    recs = _records(conf)
    assert recs[0]["properties"]["INNER_MULTI_DISPATCH"] == "%LMQ%q1,%LMQ%q2"
    assert all("INNER_MULTI_QUEUE_OFFSET" not in x["properties"] for x in recs)
    assert not any(p.name.startswith(LMQ_DIR) for p in (store / "consumequeue").iterdir())


@pytest.mark.parametrize("dispatch", ["TopicX,%LMQ%a", "%LMQ%a,%LMQ%a", "%LMQ%a/b"])
def test_put_refuses_what_the_broker_would_botch(tmp_path, dispatch):
    store, conf = _conf(tmp_path)
    _put(conf, MSGS[2:])
    before = snapshot(store)
    r = _put(conf, [{"topic": "TopicA", "body": "x", "properties": {"INNER_MULTI_DISPATCH": dispatch}}], code=2)
    assert r.stderr.startswith("error:") and "Traceback" not in r.output
    assert snapshot(store) == before


def test_system_topics_are_not_dispatched(tmp_path):
    store, conf = _conf(tmp_path)
    _put(conf, [{"topic": "rmq_sys_x", "body": "x", "properties": {"INNER_MULTI_DISPATCH": "%LMQ%a"}}])
    assert "INNER_MULTI_QUEUE_OFFSET" not in _records(conf)[0]["properties"]
    assert not (store / "consumequeue" / "%LMQ%a").exists()


# ------------------------------------------------------------------------------------------- readers

def test_dump_cq_and_doctor_accept_lmq_units(tmp_path):
    store, conf = _conf(tmp_path)
    _put(conf, MSGS)
    _put(conf, MSGS)
    r = run(["dump-cq", "-c", conf, "-t", "%LMQ%q2", "-q", "0", "--json"])
    assert r.exit_code == 0, r.output
    units = jlines(r)
    assert [u["status"] for u in units] == ["OK"] * 4
    assert [u["message"]["topic"] for u in units] == ["TopicA"] * 4
    # a read by queue offset answers with the record the unit points at, though its QUEUEOFFSET is TopicA's
    r = run(["get", "-c", conf, "-t", "%LMQ%q2", "-q", "0", "--queue-offset", "3", "--json"])
    assert r.exit_code == 0, r.output
    got = jlines(r)
    assert len(got) == 1 and got[0]["topic"] == "TopicA" and got[0]["queueOffset"] == 3
    assert got[0]["properties"]["INNER_MULTI_QUEUE_OFFSET"] == "3"
    r = run(["doctor", "-c", conf, "--json"])
    assert r.exit_code == 0, r.output
    kinds = [f["kind"] for f in json.loads(r.stdout)["findings"]]
    assert not [k for k in kinds if k.startswith(("cq-", "index-", "commitlog"))], kinds


def test_guard_still_refuses_repair_consume_queue(tmp_path):
    store, conf = _conf(tmp_path)
    _put(conf, MSGS)
    before = snapshot(store)
    r = run(["repair", "consume-queue", "-c", conf])
    assert r.exit_code == 2 and "LMQ" in r.stderr
    assert snapshot(store) == before


# ------------------------------------------------------------------------------------------- recover

def test_recover_rebuilds_lmq_queues(tmp_path):
    store, conf = _conf(tmp_path)
    _put(conf, MSGS)
    _put(conf, MSGS)
    cq = store / "consumequeue"
    want = {p.name: (p / "0" / "00000000000000000000").read_bytes() for p in cq.iterdir() if p.name.startswith(LMQ_DIR)}
    assert set(want) == {"%LMQ%q1", "%LMQ%q2"}
    for name in want:
        shutil.rmtree(cq / name)
    r = run(["recover", "-c", conf, "--json"])
    assert r.exit_code == 0, r.output
    added = {q["topic"]: q["unitsAdded"] for q in json.loads(r.stdout)["consumeQueues"]["queues"]}
    assert added == {"%LMQ%q1": 2, "%LMQ%q2": 4}
    assert {n: (cq / n / "0" / "00000000000000000000").read_bytes() for n in want} == want


def test_recover_cuts_lmq_units_past_the_log(tmp_path):
    store, conf = _conf(tmp_path)
    _put(conf, MSGS)
    acks = jlines(_put(conf, MSGS))
    # the second put's records are gone (zeroed): their units, %LMQ% ones included, point past the log's end
    seg = store / "commitlog" / "00000000000000000000"
    with open(seg, "r+b") as f:
        f.seek(acks[0]["commitLogOffset"])
        f.write(bytes(sum(a["storeSize"] for a in acks)))
    r = run(["recover", "-c", conf, "--json"])
    assert r.exit_code == 0, r.output
    assert len(_units(store, "%LMQ%q2")) == 2 and len(_units(store, "%LMQ%q1")) == 1
    _put(conf, MSGS[:1])  # offsets continue from the cut
    assert _records(conf)[-1]["properties"]["INNER_MULTI_QUEUE_OFFSET"] == "1,2"


# ------------------------------------------------------------------------------------------- golden set

GOLDEN_LMQ = "modes/lmq"
LMQS = {"%LMQ%a": 50, "%LMQ%b": 32, "%LMQ%c": 16, "%LMQ%chat-room-1": 16, "%LMQ%d": 8}


@pytest.fixture
def golden_lmq(tmp_path):
    g = unpack_golden(GOLDEN_LMQ, tmp_path / "g")
    return g


def _answers() -> dict:
    return json.loads((GOLDEN / GOLDEN_LMQ / "answers" / "lmq.json").read_text())


def test_golden_lmq_readers(golden_lmq):
    ans = _answers()
    for name, maxq in LMQS.items():
        r = run(["dump-cq", "-c", golden_lmq.conf, "-t", name, "-q", "0", "--count", "100", "--json"])
        assert r.exit_code == 0, r.output
        units = jlines(r)
        assert len(units) == maxq == ans["queues"][name]["maxOffset"]
        assert all(u["status"] == "OK" for u in units)
        assert [(u["commitLogOffset"], u["size"], u["tagsCode"]) for u in units] == \
            [(c["physicOffset"], c["physicSize"], c["tagsCode"]) for c in ans["queues"][name]["cqUnits"]]
    r = run(["doctor", "-c", golden_lmq.conf, "--json"])
    assert r.exit_code == 0, r.output
    assert not [f for f in json.loads(r.stdout)["findings"] if f["severity"] in ("error", "warning")]


def test_golden_lmq_recover_rebuilds_broker_bytes(golden_lmq):
    cq = golden_lmq.store / "consumequeue"
    want = {}
    for name in LMQS:
        want[name] = (cq / name / "0" / "00000000000000000000").read_bytes()
        shutil.rmtree(cq / name)
    r = run(["recover", "-c", golden_lmq.conf, "--json"])
    assert r.exit_code == 0, r.output
    added = {q["topic"]: q["unitsAdded"] for q in json.loads(r.stdout)["consumeQueues"]["queues"]}
    assert added == LMQS
    got = {name: (cq / name / "0" / "00000000000000000000").read_bytes() for name in LMQS}
    assert got == want


def test_golden_lmq_put_assigns_the_brokers_offsets(golden_lmq, tmp_path):
    """The broker's records that went to LMQs, put again in commit-log order into an empty LMQ store without their
    INNER_MULTI_QUEUE_OFFSET, get the same offsets, and the same queue lengths."""
    recs = [x for x in _records(golden_lmq.conf) if "INNER_MULTI_DISPATCH" in x["properties"]
            and topic_allows_lmq(x["topic"])]
    sends = {s["commitLogOffset"]: s["storedQueueOffsets"] for s in _answers()["lmqSends"]}
    assert {x["commitLogOffset"]: x["properties"]["INNER_MULTI_QUEUE_OFFSET"] for x in recs} == sends
    store, conf = _conf(tmp_path)
    msgs = [{"topic": x["topic"], "body": "", "queueId": x["queueId"],
             "properties": {k: v for k, v in x["properties"].items() if k != "INNER_MULTI_QUEUE_OFFSET"}}
            for x in recs]
    _put(conf, msgs)
    again = [x["properties"]["INNER_MULTI_QUEUE_OFFSET"] for x in _records(conf)]
    assert again == [x["properties"]["INNER_MULTI_QUEUE_OFFSET"] for x in recs]
    assert {n: len(_units(store, n)) for n in LMQS} == LMQS
    assert not os.path.exists(store / "consumequeue" / "SCHEDULE_TOPIC_XXXX")
