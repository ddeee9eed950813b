"""rmqtool against a store a real RocketMQ 5.3.x broker wrote with storeType=defaultRocksDB (tests/golden/modes/
rocksdb: consume queues in RocksDB in consumequeue/, topics, subscription groups and consumer offsets in the v1
RocksDB config databases): every reader answers what the broker answered, and reads the databases without
changing a byte of them."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import GOLDEN, jsonl, run, unpack_golden

SET = GOLDEN / "modes" / "rocksdb"
ADMIN = json.loads((SET / "answers" / "admin.json").read_text()) if (SET / "answers").exists() else {}


@pytest.fixture(scope="module")
def golden_rocks(tmp_path_factory):
    return unpack_golden("modes/rocksdb", tmp_path_factory.mktemp("grocks"))


def _json(*args, code=0):
    r = run([*args, "--json"])
    assert r.exit_code == code, r.stdout[-2000:] + r.stderr[-2000:]
    return r


def _state(root: Path) -> dict:
    out = {}
    for d in ("consumequeue", "config/topics", "config/subscriptionGroups", "config/consumerOffsets"):
        for n in sorted(os.listdir(root / d)):
            st = os.stat(root / d / n)
            out[f"{d}/{n}"] = (st.st_size, st.st_mtime_ns)
    return out


def test_mode_is_rocksdb_queues_and_v1_configs(golden_rocks):
    from engine.broker.config.brokerconf import load_config
    from engine.broker.mode import detect_mode
    m = detect_mode(load_config(str(golden_rocks.conf)))
    assert (m.consume_queue, m.cq_reads, m.configs) == ("rocksdb", "rocksdb", "rocksdb-v1")


def test_queues_answer_examine_topic_stats(golden_rocks):
    before = _state(golden_rocks.store)
    qs = json.loads(_json("queues", "-c", golden_rocks.conf).stdout)["queues"]
    mine = {(q["topic"], q["queueId"]): (q["minOffset"], q["maxOffset"]) for q in qs}
    theirs = {(t, int(q)): (v["min"], v["max"]) for t, s in ADMIN["topicStats"].items() for q, v in s.items()}
    assert {k: mine.get(k, (0, 0)) for k in theirs} == theirs
    assert sum(v[1] for v in theirs.values()) == sum(q["messages"] for q in qs) > 0
    # lastUpdateTimestamp: the store time of the queue's last message
    for q in qs:
        t = ADMIN["topicStats"].get(q["topic"], {}).get(f"{q['queueId']:03d}")
        if t and t["max"]:
            assert q["lastStoreTimestamp"] == t["lastUpdateTimestamp"], q
    assert _state(golden_rocks.store) == before   # nothing written: no rocksdict-config.json, no LOG, no OPTIONS


def test_consumers_answer_examine_consume_stats(golden_rocks):
    got = json.loads(_json("consumers", "-c", golden_rocks.conf).stdout)
    assert got["sources"]["consumerOffset.json"] == "config/consumerOffsets/ (RocksDB)"
    assert got["sources"]["topics.json"] == "config/topics/ (RocksDB)"
    assert got["sources"]["consumeQueues"] == "rocksdb"
    mine = {(g["group"], f"{q['topic']}/{q['queueId']:03d}"): (q["brokerOffset"], q["consumerOffset"])
            for g in got["groups"] for q in g["queues"]}
    theirs = {(g, k): (q["brokerOffset"], q["consumerOffset"]) for g, v in ADMIN["consumeStats"].items()
              if "queues" in v for k, q in v["queues"].items()}
    assert theirs and {k: mine.get(k) for k in theirs} == theirs
    lasts = {(g["group"], f"{q['topic']}/{q['queueId']:03d}"): q["lastTimestamp"] for g in got["groups"]
             for q in g["queues"]}
    want = {(g, k): q["lastTimestamp"] for g, v in ADMIN["consumeStats"].items() if "queues" in v
            for k, q in v["queues"].items() if q["consumerOffset"] > 0}
    assert want and {k: lasts.get(k) for k in want} == want


@pytest.mark.parametrize("group", ["G_ALL", "G_PART"])
def test_dump_cq_and_get_answer_the_deliveries(golden_rocks, group):
    """Every delivered message is the one dump-cq and get --queue-offset find at its queue offset."""
    got = [m for m in jsonl(SET / "answers" / f"consumed_{group}.jsonl")
           if not m["topic"].startswith(("%RETRY%", "%DLQ%"))]
    assert got
    by_queue: dict = {}
    for m in got:
        by_queue.setdefault((m["topic"], m["queueId"]), []).append(m)
    for (t, q), ms in sorted(by_queue.items()):
        units = [json.loads(line) for line in _json("dump-cq", "-c", golden_rocks.conf, "-t", t, "-q", str(q),
                                                    "-n", "100000").stdout.splitlines()]
        at = {u["queueOffset"]: u for u in units}
        for m in ms:
            u = at[m["queueOffset"]]
            assert u["status"] == "OK" and u["commitLogOffset"] == m["commitLogOffset"], (t, q, m["queueOffset"])
            assert u["size"] == m["storeSize"] and u["message"]["uniqKey"] == m["uniqKey"]
    m = got[len(got) // 2]
    r = json.loads(_json("get", "-c", golden_rocks.conf, "-t", m["topic"], "-q", str(m["queueId"]),
                         "-i", str(m["queueOffset"])).stdout.splitlines()[0])
    assert r["commitLogOffset"] == m["commitLogOffset"] and r["uniqKey"] == m["uniqKey"]


def test_verify_cq_finds_every_unit_matching(golden_rocks):
    rep = json.loads(_json("verify-cq", "-c", golden_rocks.conf).stdout)
    assert rep["source"] == "rocksdb" and rep["problemCount"] == 0
    assert rep["units"] == 1039   # every record of the commit log has its unit (README: 1,039 rows)


def test_delays_read_the_schedule_queues_from_rocksdb(golden_rocks):
    got = json.loads(_json("delays", "-c", golden_rocks.conf).stdout)
    assert got["consumeQueueSource"] == "rocksdb"
    theirs = {int(q) + 1: v["max"] for q, v in ADMIN["topicStats"].get("SCHEDULE_TOPIC_XXXX", {}).items()}
    mine = {lv["delayLevel"]: lv["maxOffset"] for lv in got["levels"]}
    assert theirs and {k: mine.get(k, 0) for k in theirs} == theirs


def test_info_and_doctor_read_the_rocksdb_store(golden_rocks):
    info = json.loads(run(["info", "-c", golden_rocks.conf, "--json"]).stdout)
    cq = info["consumeQueues"]
    assert (cq["source"], cq["topics"]) == ("rocksdb", 14)   # the README's 14 topics with units
    assert cq["queues"] == sum(1 for v in ADMIN["topicStats"].values() for q in v.values() if q["max"])
    r = run(["doctor", "-c", golden_rocks.conf, "--json"])
    assert r.exit_code == 0, r.stdout + r.stderr
    # the mode named, and nothing else: no JSON config missing, no file queue behind the log, nothing unchecked
    assert [f["kind"] for f in json.loads(r.stdout)["findings"]] == ["store-mode"]
