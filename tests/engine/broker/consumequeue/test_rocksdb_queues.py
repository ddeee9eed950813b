"""RocksDB consume queues and configs (engine.broker.consumequeue.rocksdb, engine.broker.config.rocksdb): every
read command answers on a store whose queues are in RocksDB as on the file store holding the same units, and the
database is read without writing a byte into it or taking its lock."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import put, run, sample_messages
from rocksdb_helpers import SIDE_CAR, move_configs_to_rocksdb, rocksdb_twin, store_units, write_cq_db

OFFSETS = {"TopicA@g1": {"0": 3, "1": 1, "2": 5}, "TopicB@g1": {"0": 2}, "TopicB@g2": {"1": 4}}
TOPICS = {"TopicA": {"topicName": "TopicA", "readQueueNums": 3, "writeQueueNums": 3},
          "TopicB": {"topicName": "TopicB", "readQueueNums": 3, "writeQueueNums": 3}}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(file store, its RocksDB twin, the twin with v1 configs, the twin with v2 configs)."""
    tmp = tmp_path_factory.mktemp("rocks")
    f = tmp / "file"
    msgs = sample_messages(36)
    msgs += sample_messages(3, start=100, topic="SCHEDULE_TOPIC_XXXX", queue_id=2)  # delay level 3
    put(f, msgs, tmp)
    (f / "config").mkdir(exist_ok=True)  # put writes config/topics.json
    (f / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": OFFSETS}))
    (f / "config" / "topics.json").write_text(json.dumps({"topicConfigTable": TOPICS}))
    (f / "config" / "subscriptionGroup.json").write_text(json.dumps(
        {"subscriptionGroupTable": {"g1": {"groupName": "g1"}, "g2": {"groupName": "g2"}}}))
    r = rocksdb_twin(f, tmp / "rocks")
    v1, v2 = tmp / "v1", tmp / "v2"
    shutil.copytree(r, v1)
    move_configs_to_rocksdb(v1, "v1")
    shutil.copytree(r, v2)
    move_configs_to_rocksdb(v2, "v2")
    return f, r, v1, v2


def _json(*args, code=0):
    r = run([*args, "--json"])
    assert r.exit_code == code, r.stdout + r.stderr
    return r


def test_store_mode_and_no_queue_dirs(pair):
    f, r, _, _ = pair
    assert not any(p.is_dir() for p in (r / "consumequeue").iterdir())
    info = run(["info", "-s", r, "--json"])
    assert info.exit_code in (0, 3)


@pytest.mark.parametrize("args", [
    ["queues"],
    ["queues", "-t", "TopicB"],
    ["dump-cq", "-t", "TopicA", "-q", "1", "-n", "100"],
    ["dump-cq", "-t", "TopicB", "-q", "2", "-i", "2", "-n", "3"],
    ["get", "-t", "TopicA", "-q", "0", "-i", "2", "-n", "3"],
    ["print-msg", "-t", "TopicB", "-b", "0"],
    ["print-msg", "-t", "TopicA", "-q", "2", "-b", "1700000003000", "-e", "1700000012000"],
])
def test_read_commands_answer_as_on_files(pair, args):
    f, r, _, _ = pair
    a, b = _json(*args, "-s", f), _json(*args, "-s", r)
    assert a.stdout == b.stdout and a.stdout.strip()


def test_queues_bounds_from_the_offset_table(pair):
    f, r, _, _ = pair
    qs = json.loads(_json("queues", "-s", r).stdout)["queues"]
    units = store_units(f)
    for q in qs:
        mine = [u for u in units if (u[0], u[1]) == (q["topic"], q["queueId"])]
        assert q["maxOffset"] == max(u[2] for u in mine) + 1 and q["minOffset"] == 0


def test_consumers_and_delays_from_rocksdb(pair):
    f, r, v1, v2 = pair
    base = json.loads(_json("consumers", "-s", f).stdout)
    assert base["groups"] and base["sources"]["consumeQueues"] == "file"
    for s, src in ((r, "config/consumerOffset.json"), (v1, "config/consumerOffsets/ (RocksDB)"),
                   (v2, "config/rdb/ (RocksDB)")):
        got = json.loads(_json("consumers", "-s", s).stdout)
        assert got["groups"] == base["groups"]
        assert got["sources"]["consumerOffset.json"] == src and got["sources"]["consumeQueues"] == "rocksdb"
    d0 = json.loads(_json("delays", "-s", f).stdout)
    d1 = json.loads(_json("delays", "-s", r).stdout)
    assert d0["levels"] == d1["levels"] and any(lv["maxOffset"] for lv in d1["levels"])
    assert (d0["consumeQueueSource"], d1["consumeQueueSource"]) == ("file", "rocksdb")


def test_consumers_one_group_v2(pair):
    _, _, _, v2 = pair
    got = json.loads(_json("consumers", "-s", v2, "-g", "g2").stdout)
    assert [(q["topic"], q["queueId"], q["consumerOffset"], q["committed"]) for q in got["groups"][0]["queues"]
            if q["committed"]] == [("TopicB", 1, 4, True)]


def test_v1_json_with_higher_counter_wins(pair, tmp_path):
    _, _, v1, _ = pair
    s = tmp_path / "s"
    shutil.copytree(v1, s)
    (s / "config" / "consumerOffset.json").write_text(json.dumps(
        {"dataVersion": {"counter": 9, "stateVersion": 0, "timestamp": 1}, "offsetTable": {"TopicA@g9": {"0": 1}}}))
    got = json.loads(_json("consumers", "-s", s).stdout)
    assert [g["group"] for g in got["groups"]] == ["g9"]
    assert got["sources"]["consumerOffset.json"] == "config/consumerOffset.json"


def test_unknown_topic_and_queue_refused(pair):
    _, r, _, _ = pair
    for args in (["dump-cq", "-s", r, "-t", "Nope", "-q", "0"], ["dump-cq", "-s", r, "-t", "TopicA", "-q", "9"]):
        got = run(args)
        assert got.exit_code == 2 and "Traceback" not in got.stderr


def test_min_offset_after_expiry(tmp_path):
    """getMinCqOffset: a "min" entry below the commit log's min is corrected by the broker's binary search."""
    from engine.broker.consumequeue.rocksdb import RocksDBConsumeQueueStore
    db = tmp_path / "cq"
    units = [("T", 0, i, 1000 + 100 * i, 100, 0, 1) for i in range(10)]
    write_cq_db(db, units, mins={("T", 0): (1000, 0)})
    with RocksDBConsumeQueueStore(db) as st:
        q = st.queue("T", 0)
        assert q.bounds(0).min_offset == 0 and q.bounds(0).max_offset == 10
        assert q.min_offset(1450) == 5          # the first unit at or above 1450 points at 1500
        assert q.min_offset(99_999) == 10       # every unit below: max + 1
        assert q.all_units()["offset"].tolist() == [1000 + 100 * i for i in range(10)]


# ------------------------------------------------------------------------------------------- the binding


def _state(d: Path) -> dict:
    return {n: (os.stat(d / n).st_size, os.stat(d / n).st_mtime_ns, os.stat(d / n).st_ino) for n in os.listdir(d)}


def test_read_writes_nothing_and_ignores_a_held_lock(pair, tmp_path):
    """rocksdict's read-only open writes rocksdict-config.json beside the database: the shadow open keeps the
    store's database as it was, byte for byte, and reads while another process holds its LOCK."""
    _, r, _, _ = pair
    s = tmp_path / "s"
    shutil.copytree(r, s)
    cq = s / "consumequeue"
    before = _state(cq)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl,sys,time; f=open(sys.argv[1],'r+'); fcntl.lockf(f, fcntl.LOCK_EX|fcntl.LOCK_NB); "
        "print('locked', flush=True); time.sleep(60)"), str(cq / "LOCK")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with open(cq / "LOCK", "r+") as fh:  # the lock is really held
            with pytest.raises(OSError):
                fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        got = _json("queues", "-s", s)
        assert json.loads(got.stdout)["queues"]
        got = _json("dump-cq", "-s", s, "-t", "TopicA", "-q", "0")
    finally:
        holder.kill()
        holder.wait()
    assert _state(cq) == before and not (cq / SIDE_CAR).exists()


def test_rocksdict_read_only_itself_writes_its_sidecar(tmp_path):
    """Why the shadow exists: AccessType.read_only() on the database creates rocksdict-config.json in it."""
    from rocksdict import AccessType, Options, Rdict
    db = tmp_path / "db"
    write_cq_db(db, [("T", 0, 0, 0, 10, 0, 1)])
    assert not (db / SIDE_CAR).exists()
    h = Rdict(str(db), Options(raw_mode=True), column_families={"offset": Options(raw_mode=True)},
              access_type=AccessType.read_only())
    h.close()
    assert (db / SIDE_CAR).exists()


def test_double_write_store_reads_files_by_default(pair, tmp_path):
    f, _, _, _ = pair
    s = tmp_path / "dw"
    rocksdb_twin(f, s, keep_files=True)
    from engine.broker.config.brokerconf import load_config
    from engine.broker.mode import detect_mode
    m = detect_mode(load_config(None, storePathRootDir=str(s)))
    assert (m.consume_queue, m.cq_reads) == ("file+rocksdb", "file")
    got = _json("queues", "-s", s)
    assert "skipped" in got.stdout and json.loads(got.stdout)["skipped"] == []  # RocksDB's files are no damage
    assert got.stdout == _json("queues", "-s", f).stdout


# ------------------------------------------------------------------------------------------- verify-cq


def _damaged(pair, tmp_path, change):
    f, _, _, _ = pair
    units = store_units(f)
    units = change(units)
    s = tmp_path / "bad"
    rocksdb_twin(f, s, units=units)
    return s


def test_verify_cq_clean_on_both_sources(pair):
    f, r, _, _ = pair
    a = json.loads(_json("verify-cq", "-s", f).stdout)
    b = json.loads(_json("verify-cq", "-s", r).stdout)
    assert (a["source"], b["source"]) == ("file", "rocksdb")
    assert a["units"] == b["units"] == len(store_units(f)) and a["problemCount"] == b["problemCount"] == 0


def test_verify_cq_names_a_wrong_store_time_and_tags_code(pair, tmp_path):
    def change(units):
        out = list(units)
        i = next(k for k, u in enumerate(out) if u[:3] == ("TopicA", 1, 2))
        t, q, c, phy, size, tags, ts = out[i]
        out[i] = (t, q, c, phy, size, tags + 1, ts + 5)
        return out
    s = _damaged(pair, tmp_path, change)
    got = _json("verify-cq", "-s", s, code=3)
    rep = json.loads(got.stdout)
    assert rep["problemCount"] == 1
    p = rep["findings"][0]
    assert (p["kind"], p["severity"], p["file"], p["offset"]) == ("cq-unit", "error", "consumequeue/TopicA/1", 2 * 20)
    assert "store time" in p["problem"] and "tagsCode" in p["problem"] and p["brokerWill"]


def test_verify_cq_names_a_missing_unit(pair, tmp_path):
    s = _damaged(pair, tmp_path, lambda units: [u for u in units if u[:3] != ("TopicB", 0, 1)])
    rep = json.loads(_json("verify-cq", "-s", s, "-t", "TopicB", code=3).stdout)
    assert [(p["file"], p["offset"]) for p in rep["findings"]] == [("consumequeue/TopicB/0", 20)]


def test_compare_cq_double_write(pair, tmp_path):
    f, _, _, _ = pair
    same = tmp_path / "same"
    rocksdb_twin(f, same, keep_files=True)
    rep = json.loads(_json("verify-cq", "-s", same, "--compare").stdout)
    assert rep["same"] and rep["unitsCompared"] == len(store_units(f)) and rep["unitsDiffer"] == 0

    def change(units):
        out = [u for u in units if u[:2] != ("TopicB", 2)]
        i = next(k for k, u in enumerate(out) if u[:3] == ("TopicA", 0, 3))
        t, q, c, phy, size, tags, ts = out[i]
        out[i] = (t, q, c, phy, size + 1, tags, ts)
        return out
    other = tmp_path / "other"
    rocksdb_twin(f, other, keep_files=True, units=change(store_units(f)))
    rep = json.loads(_json("verify-cq", "-s", other, "--compare", code=3).stdout)
    assert (rep["onlyInFiles"], rep["unitsDiffer"]) == (1, 1)
    firsts = {(d["topic"], d["queueId"], d["queueOffset"], d["field"]) for d in rep["firstDifferences"]}
    assert ("TopicA", 0, 3, "size") in firsts and ("TopicB", 2, None, "queue") in firsts
    assert run(["verify-cq", "-s", f, "--compare"]).exit_code == 2  # a file store has nothing to compare with
    assert run(["verify-cq", "-s", f, "--source", "bogus"]).exit_code == 2


def test_doctor_on_rocksdb_queues(pair, tmp_path):
    f, r, _, _ = pair
    got = json.loads(run(["doctor", "-s", r, "--json"]).stdout)
    assert not [x for x in got["findings"] if x["kind"].startswith(("cq-", "rocksdb-"))]
    units = store_units(f)
    end = max(u[3] + u[4] for u in units)
    s = tmp_path / "behind"
    shutil.copytree(f, s)
    shutil.rmtree(s / "consumequeue")
    last = max(units, key=lambda u: u[3])
    write_cq_db(s / "consumequeue", [u for u in units if u is not last], checkpoint=last[3])
    got = json.loads(run(["doctor", "-s", s, "--json"]).stdout)
    kinds = {x["kind"]: x for x in got["findings"]}
    assert kinds["cq-behind-log"]["offset"] == last[3] and "rocksdb-cq-past-log" not in kinds
    s2 = tmp_path / "past"
    shutil.copytree(f, s2)
    shutil.rmtree(s2 / "consumequeue")
    write_cq_db(s2 / "consumequeue", units + [(last[0], last[1], last[2] + 1, end + 100, 50, 0, 1)])
    got = json.loads(run(["doctor", "-s", s2, "--json"]).stdout)
    assert {x["kind"] for x in got["findings"]} >= {"rocksdb-cq-past-log"}
    v = run(["verify-cq", "-s", s2, "--json"])
    assert v.exit_code == 3 and json.loads(v.stdout)["findings"][0]["offset"] == (last[2] + 1) * 20
