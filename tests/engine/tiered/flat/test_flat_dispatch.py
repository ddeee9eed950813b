"""tiered dispatch from local stores written with the engine, checked with the readers and verify: the topic filter,
%RETRY% and 127-character topics, eight queues, empty and binary bodies, an IPv6 born host, an oversize record
that stalls a queue, a queue whose tiering starts past 0, two clusters on one root, incremental runs, a time roll,
refusals, and Spark."""
from __future__ import annotations

from helpers import REPO
import base64
import ipaddress
import json
import os
import subprocess
import sys

import pytest

from engine.broker.commitlog.message import MessageRecord, check_message
from engine.tiered.flat.layout import md5_prefix, offset_to_file_name
from engine.tiered.flat.metadata import TieredMetadata
from helpers import assert_one_line_error, lock_held, run, snapshot
from tiered_flat_helpers import (F1_META, F1_TIER, edit_metadata, f1_local_store, f1_messages, put_messages,
                                 run_dispatch, strip_wall_clock, tier_files)

T0 = 1_700_000_000_000
V6 = ipaddress.ip_address("2001:db8::17").packed
LONG = "T" * 127
RETRY = "%RETRY%group_a"


def rec(topic, i, qid=0, body=None, **kw) -> MessageRecord:
    props = {"KEYS": f"k{i}", "TAGS": "TagA", "UNIQ_KEY": f"UNIQ{i:08d}"}
    return MessageRecord(topic=topic, body=body if body is not None else f"{topic}/{qid}/{i}".encode() * 3,
                         queue_id=qid, store_timestamp=T0 + i, born_timestamp=T0 + i, properties=props, **kw)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """One local store with every kind of topic and message; tiered out inline once."""
    d = tmp_path_factory.mktemp("mixed")
    recs = [rec(RETRY, 0), rec(LONG, 1), rec("rmq_sys_internal", 2), rec("TBW102", 3), rec("broker-a", 4),
            rec("%LMQ%lmq1", 5), rec("DefaultCluster", 6)]
    i = 10
    for n in range(6):
        for q in range(8):
            body = b"" if (n, q) == (1, 2) else (bytes(range(256)) * 3 if (n, q) == (2, 3) else None)
            extra = {"born_host": V6, "born_port": 4321} if (n, q) == (3, 5) else {}
            recs.append(rec("TopicA", i, q, body, **extra))
            i += 1
    recs += [rec(RETRY, i + k) for k in range(12)] + [rec(LONG, i + 20 + k) for k in range(12)]
    local = put_messages(d / "local", recs)
    res = run_dispatch(local, d / "tier")
    return d, local, res, recs


def cli(d, *args):
    return run(["tiered", *args, "--tiered-store-path", d / "tier", "--store", d / "local"])


def jlines(r, code: int = 0):
    assert r.exit_code == code, r.output
    return [json.loads(x) for x in r.stdout.splitlines()]


def test_mixed_store_tiers_what_the_filter_lets_through(mixed):
    d, local, res, recs = mixed
    assert res.problems == [] and res.messages == 48 + 13 + 13
    assert [t["topic"] for t in res.new_topics] == [RETRY, LONG, "TopicA"]   # commit-log order of first messages
    assert sum("MessageStoreTopicFilter" in w for w in res.warnings) == 5
    rows = jlines(cli(d, "queues", "--json"))
    assert sorted((r["topic"], r["queueId"]) for r in rows) == sorted([(RETRY, 0), (LONG, 0)] +
                                                                      [("TopicA", q) for q in range(8)])
    assert {r["topic"]: r["topicId"] for r in rows} == {RETRY: 0, LONG: 1, "TopicA": 2}
    assert all(r["consumeQueueMinOffset"] == 0 and r["commitLogMinOffset"] == 0 for r in rows)
    names = {p.name for p in (d / "tier" / f"{md5_prefix('DefaultCluster')}_DefaultCluster" / "broker-a").iterdir()}
    assert names == {RETRY, LONG, "TopicA"}
    v = cli(d, "verify", "--json")
    assert v.exit_code == 0, v.output
    assert "tiered-ipv6-store-time" in [f["kind"] for f in json.loads(v.stdout)["findings"]]


def test_mixed_store_reads_back_every_message(mixed):
    d, local, res, recs = mixed
    by_queue = {}
    for r in recs:
        by_queue.setdefault((r.topic, r.queue_id), []).append(r)
    for (topic, qid), want in by_queue.items():
        if topic not in ("TopicA", RETRY, LONG):
            continue
        g = json.loads(cli(d, "get", "--topic", topic, "-q", qid, "-i", "0", "-n", "100", "--json").stdout)
        assert g["status"] == "FOUND" and g["nextBeginOffset"] == len(want) == g["maxOffset"]
        for m, w in zip(g["messages"], want):
            body = base64.b64decode(m["body"]) if m.get("bodyEncoding") else m["body"].encode()
            assert body == w.body and m["keys"] == w.keys and m["storeTimestamp"] == w.store_timestamp
            assert m["topic"] == topic and m["magicVersion"] == "V1"
    # The IPv6 record: the plugin reads its store time at byte 56, i.e. the born address's last 8 bytes (23).
    g = json.loads(cli(d, "get", "--topic", "TopicA", "-q", 5, "-i", 3, "--json").stdout)
    assert g["messages"][0]["bornHost"].startswith("[2001:db8") and g["messages"][0]["storeTimestamp"] > T0
    segs = jlines(cli(d, "segments", "--topic", "TopicA", "-q", 5, "--json"))
    assert any(s["fileType"] == "COMMIT_LOG" and s["beginTimestamp"] == 23 for s in segs)
    units = jlines(cli(d, "dump-cq", "--topic", "TopicA", "-q", 5, "--json"))
    assert units[3]["storeTimestamp"] == 23
    t = jlines(cli(d, "offset-by-time", "--topic", "TopicA", "-q", 5, "--timestamp", "23", "--json"))
    assert t[0]["result"] == 0   # the broker's own answer: the first message's time (> 23) clamps to min


def test_oversize_record_stalls_the_queue(tmp_path):
    recs = [rec("big", 0), rec("big", 1), rec("big", 2, body=b"x" * 5000), rec("big", 3)]
    local = put_messages(tmp_path / "local", recs)
    args = ["tiered", "dispatch", "--store", local, "--tiered-store-path", tmp_path / "tier", "--broker-name",
            "broker-a", "--commitlog-max-size", "4096", "--consume-queue-max-size", "200", "--master", "inline",
            "--json"]
    r = run(args)
    doc = json.loads(r.stdout)
    assert r.exit_code == 3 and len(doc["problems"]) == 1 and doc["problems"][0] in r.stderr   # said on stderr too
    (q,) = doc["queues"]
    assert (q["toOffset"], q["stalledAt"], q["stalledRecordSize"]) == (2, 2, recs[2].total_size)
    qdir = tmp_path / "tier" / f"{md5_prefix('DefaultCluster')}_DefaultCluster" / "broker-a" / "big" / "0"
    cl = sorted((qdir / "COMMIT_LOG").iterdir(), key=lambda p: int(p.name[8:]))
    assert len(cl) == 2 and cl[1].stat().st_size == 0 and cl[1].name == offset_to_file_name(cl[0].stat().st_size)
    md = TieredMetadata.decode((local / "config" / "tieredStoreMetadata.json").read_bytes())
    last = md.segment_entries("broker-a/big/0", 0)[-1]
    assert (last.size, last.begin_timestamp, last.end_timestamp) == (0, 2**63 - 1, 2**63 - 1)
    before = snapshot(tmp_path)
    r2 = run(args)
    assert r2.exit_code == 3 and json.loads(r2.stdout)["queues"][0]["messages"] == 0
    assert snapshot(tmp_path) == before
    t = ["--tiered-store-path", tmp_path / "tier", "--store", local]
    v = run(["tiered", "verify", *t, "--json"])
    assert v.exit_code == 0 and "tiered-queue-stalled" in [f["kind"] for f in json.loads(v.stdout)["findings"]]
    (row,) = jlines(run(["tiered", "queues", *t, "--json"]))
    assert row["maxStoreTimestamp"] == 2**63 - 1 and row["consumeQueueMaxOffset"] == 2


def test_queue_whose_tiering_starts_past_zero(tmp_path):
    recs = [rec("late", i, body=b"b" * 100) for i in range(300)]
    local = put_messages(tmp_path / "local", recs, commitlog_size=4096)
    segs = sorted((local / "commitlog").iterdir())
    for p in segs[: len(segs) // 2]:   # the local store's retention removed the older commit-log files
        p.unlink()
    res = run_dispatch(local, tmp_path / "tier")
    (q,) = res.queues
    start = q["fromOffset"]
    assert 100 < start == q["localMinOffset"] and q["toOffset"] == 300 and res.problems == []
    qdir = tmp_path / "tier" / f"{md5_prefix('DefaultCluster')}_DefaultCluster" / "broker-a" / "late" / "0"
    assert min((p for p in (qdir / "CONSUME_QUEUE").iterdir()), key=lambda p: int(p.name[8:])).name == \
        offset_to_file_name(start * 20)
    assert (qdir / "COMMIT_LOG" / offset_to_file_name(0)).exists()
    t = ["--tiered-store-path", tmp_path / "tier", "--store", local, "--topic", "late", "-q", "0"]
    g = json.loads(run(["tiered", "get", *t, "-i", start - 1, "--json"]).stdout)
    assert g["status"] == "OFFSET_TOO_SMALL" and g["minOffset"] == start and g["maxOffset"] == 300
    g = json.loads(run(["tiered", "get", *t, "-i", start, "--json"]).stdout)
    assert g["messages"][0]["queueOffset"] == start and g["messages"][0]["commitLogOffset"] == 0
    assert json.loads(run(["tiered", "offset-by-time", *t, "--timestamp", "0", "--json"]).stdout)["result"] == start
    assert run(["tiered", "verify", "--tiered-store-path", tmp_path / "tier", "--store", local]).exit_code == 0


def test_two_clusters_on_one_root(tmp_path):
    a = put_messages(tmp_path / "a", [rec("ta", i) for i in range(5)])
    b = put_messages(tmp_path / "b", [rec("tb", i) for i in range(7)])
    run_dispatch(a, tmp_path / "tier", cluster="ClusterA", broker="broker-a")
    run_dispatch(b, tmp_path / "tier", cluster="Cluster_B", broker="broker-b")
    assert_one_line_error(run(["tiered", "queues", "--tiered-store-path", tmp_path / "tier"]), 2,
                          "several clusters (ClusterA, Cluster_B)")
    r = run(["tiered", "queues", "--tiered-store-path", tmp_path / "tier", "--cluster-name", "Cluster_B", "--store", b,
             "--json"])
    (row,) = jlines(r)
    assert (row["cluster"], row["broker"], row["topic"], row["consumeQueueMaxOffset"]) == ("Cluster_B", "broker-b",
                                                                                           "tb", 7)
    assert (tmp_path / "tier" / "29feaecb_Cluster_B").is_dir()


def test_incremental_dispatch_gives_the_one_shot_files(tmp_path):
    local = f1_local_store(tmp_path / "local", limit=70)
    first = run_dispatch(local, tmp_path / "tier")
    assert first.messages == 70
    from engine.broker.config.brokerconf import load_config
    from engine.broker.store import MessageStore
    rest = sorted(f1_messages(), key=lambda m: m["originalCommitLogOffset"])[70:]
    cfg = load_config(None, storePathRootDir=str(local), mappedFileSizeCommitLog=1 << 20, mappedFileSizeConsumeQueue=400)
    with MessageStore(cfg, writable=True) as st:
        for m in rest:
            st.put(check_message(base64.b64decode(m["recordBase64"]), 0).record)
    second = run_dispatch(local, tmp_path / "tier")
    assert second.messages == 90 and second.new_topics == []
    assert tier_files(tmp_path / "tier") == tier_files(F1_TIER)
    mine = TieredMetadata.decode((local / "config" / "tieredStoreMetadata.json").read_bytes())
    theirs = TieredMetadata.decode(F1_META.read_bytes())
    for p in theirs.paths():
        for ft in (0, 1):
            assert [(e.base_offset, e.size, e.begin_timestamp, e.end_timestamp) for e in mine.segment_entries(p, ft)] \
                == [(e.base_offset, e.size, e.begin_timestamp, e.end_timestamp) for e in theirs.segment_entries(p, ft)]


def test_time_roll_and_empty_segment_are_read_as_the_broker_does(tmp_path):
    local = f1_local_store(tmp_path / "local")
    run_dispatch(local, tmp_path / "tier")
    meta = local / "config" / "tieredStoreMetadata.json"
    qdir = tmp_path / "tier" / "212d6b50_DefaultCluster" / "broker-a" / "TopicTest"
    seg0 = qdir / "0" / "COMMIT_LOG" / offset_to_file_name(0)
    data = seg0.read_bytes()
    cut = 1836   # a time roll after queue offset 2: [0, 1836) and [1836, 3925)
    seg0.write_bytes(data[:cut])
    (qdir / "0" / "COMMIT_LOG" / offset_to_file_name(cut)).write_bytes(data[cut:])
    ts = [int.from_bytes(data[p + 56:p + 64], "big") for p in (0, 245, 1498, 1836, 2129, 2680, 3432, 3698)]

    def roll(md):
        md.flush_segment("broker-a/TopicTest/0", 0, 0, cut, min(ts[:3]), max(ts[:3]), 1)
        md.flush_segment("broker-a/TopicTest/0", 0, cut, 3925 - cut, min(ts[3:]), max(ts[3:]), 1)
        end = md.segment_entries("broker-a/TopicTest/1", 0)[-1]
        md.flush_segment("broker-a/TopicTest/1", 0, end.base_offset + end.size, 0, 2**63 - 1, 2**63 - 1, 1)
    edit_metadata(meta, roll)
    tail = md_tail = TieredMetadata.decode(meta.read_bytes()).segment_entries("broker-a/TopicTest/1", 0)[-1]
    (qdir / "1" / "COMMIT_LOG" / offset_to_file_name(md_tail.base_offset)).write_bytes(b"")
    t = ["--tiered-store-path", tmp_path / "tier", "--store", local]
    v = run(["tiered", "verify", *t, "--json"])
    assert v.exit_code == 0, v.output
    stalled = [f for f in json.loads(v.stdout)["findings"] if f["kind"] == "tiered-queue-stalled"]
    assert [f["file"].split("/")[-3:-1] for f in stalled] == [["1", "COMMIT_LOG"]], stalled
    q0 = ["--topic", "TopicTest", "-q", "0"]
    for o in range(40):
        g = json.loads(run(["tiered", "get", *t, *q0, "-i", o, "--json"]).stdout)
        assert g["status"] == "FOUND" and g["messages"][0]["queueOffset"] == o
    b = json.loads(run(["tiered", "get", *t, *q0, "-i", "0", "-n", "4096", "--raw", "--json"]).stdout)
    assert b["nextBeginOffset"] == 20 and len(b["messages"]) == 8   # the cut now falls after the second segment
    rows = {r["queueId"]: r for r in jlines(run(["tiered", "queues", *t, "--topic", "TopicTest", "--json"]))}
    assert rows[1]["maxStoreTimestamp"] == 2**63 - 1 and rows[0]["segments"]["COMMIT_LOG"] == 7
    assert tail.size == 0
    c = json.loads(run(["tiered", "clean", *t, "--reserved-hours", "1", "--now", str(2 * 1795394242349),
                        "--json"]).stdout)
    assert c["files"] == 4 * 4 + 7 + 8 + 7 + 7 and not list(qdir.rglob("*/*/?*"))


def test_dispatch_refusals_and_dry_run(tmp_path):
    local = f1_local_store(tmp_path / "local", limit=20)
    base = ["tiered", "dispatch", "--store", local, "--broker-name", "broker-a", "--master", "inline"]
    before = snapshot(tmp_path)
    r = run([*base, "--tiered-store-path", tmp_path / "tier", "--dry-run", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["messages"] == 20 and snapshot(tmp_path) == before
    assert not (tmp_path / "tier").exists()
    assert_one_line_error(run([*base, "--tiered-store-path", local / "commitlog" / "t"]), 2, "overlaps")
    assert_one_line_error(run([*base[:2], "--tiered-store-path", tmp_path / "t"]), 2, "--store")
    assert_one_line_error(run([*base, "--tiered-store-path", tmp_path / "t", "--consume-queue-max-size", "10"]), 2)
    (tmp_path / "t2" / "212d6b50_DefaultCluster" / "broker-a" / "X" / "0").mkdir(parents=True)
    assert_one_line_error(run([*base, "--tiered-store-path", tmp_path / "t2"]), 2, "rebuild-metadata")
    with lock_held(local):
        assert_one_line_error(run([*base, "--tiered-store-path", tmp_path / "t3"]), 4, "locked")
    assert not (tmp_path / "t3").exists()


KILL_SCRIPT = r"""
import os, signal, sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests"]
limit = int(sys.argv[4])
calls = [0]
def hook(real):
    def wrapped(*a, **k):
        calls[0] += 1
        if calls[0] == limit:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*a, **k)
    return wrapped
os.pwrite, os.write, os.replace, os.rename, os.fsync = (hook(os.pwrite), hook(os.write), hook(os.replace),
                                                        hook(os.rename), hook(os.fsync))
from pathlib import Path
from tiered_flat_helpers import run_dispatch
r = run_dispatch(Path(sys.argv[2]), Path(sys.argv[3]), tieredStoreCommitLogMaxSize=2048,
                 tieredStoreConsumeQueueMaxSize=60)
print(calls[0], len(r.problems))
"""


@pytest.mark.slow
def test_dispatch_killed_at_any_point_then_rerun_is_byte_identical(tmp_path):
    root = str(REPO)
    script = tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT)
    local = f1_local_store(tmp_path / "local", limit=16)   # 4 messages per queue, small segments: rolls everywhere

    def go(tier, limit):
        return subprocess.run([sys.executable, str(script), root, str(local), str(tier), str(limit)],
                              capture_output=True, text=True, timeout=120)

    ref = go(tmp_path / "ref", 0)
    assert ref.returncode == 0, ref.stderr
    total = int(ref.stdout.split()[0])
    meta = local / "config" / "tieredStoreMetadata.json"
    want = (tier_files(tmp_path / "ref"), meta.read_bytes(), meta.with_name(meta.name + ".bak").read_bytes())
    assert total > 20
    # the first metadata persist (new queues), the segment writes, the final metadata persist (.bak, main)
    points = sorted({1, 2, 4, 6} | set(range(total - 6, total + 1)) | set(range(8, total - 6, max(1, total // 8))))
    for k in points:
        meta.unlink()
        meta.with_name(meta.name + ".bak").unlink()
        tier = tmp_path / f"t{k}"
        killed = go(tier, k)
        assert killed.returncode == -9, (k, killed.stdout, killed.stderr)
        again = go(tier, 0)
        assert again.returncode == 0 and again.stdout.split()[1] == "0", (k, again.stdout, again.stderr)
        got = (tier_files(tier), meta.read_bytes(), meta.with_name(meta.name + ".bak").read_bytes())
        assert got == want, k


@pytest.mark.slow
def test_spark_dispatch_is_byte_identical_to_inline(spark, tmp_path):  # noqa: F811
    local = f1_local_store(tmp_path / "local")
    res = run_dispatch(local, tmp_path / "tier", master="local[2]")
    assert res.master.startswith("local") and res.messages == 160 and res.problems == []
    assert tier_files(tmp_path / "tier") == tier_files(F1_TIER)
    got = (local / "config" / "tieredStoreMetadata.json").read_text()
    assert strip_wall_clock(got) == strip_wall_clock(F1_META.read_text())


def test_dispatch_never_writes_past_a_file_shorter_than_its_metadata(tmp_path):
    local = f1_local_store(tmp_path / "local", limit=40)
    run_dispatch(local, tmp_path / "tier")
    put = sorted(f1_messages(), key=lambda m: m["originalCommitLogOffset"])[40:80]
    from engine.broker.config.brokerconf import load_config
    from engine.broker.store import MessageStore
    cfg = load_config(None, storePathRootDir=str(local), mappedFileSizeCommitLog=1 << 20, mappedFileSizeConsumeQueue=400)
    with MessageStore(cfg, writable=True) as st:
        for m in put:
            st.put(check_message(base64.b64decode(m["recordBase64"]), 0).record)
    md = TieredMetadata.decode((local / "config" / "tieredStoreMetadata.json").read_bytes())
    last = md.segment_entries("broker-a/TopicTest/0", 0)[-1]
    qdir = tmp_path / "tier" / "212d6b50_DefaultCluster" / "broker-a" / "TopicTest" / "0"
    os.truncate(qdir / "COMMIT_LOG" / offset_to_file_name(last.base_offset), last.size - 10)
    before = snapshot(tmp_path / "tier")
    for dry in (True, False):
        res = run_dispatch(local, tmp_path / "tier", dry_run=dry)
        bad = [p for p in res.problems if p.startswith("TopicTest/0:")]
        assert bad and "metadata says more than the file holds" in bad[0]
        assert [q for q in res.queues if (q["topic"], q["queueId"]) == ("TopicTest", 0)][0]["messages"] == 0
    after = snapshot(tmp_path / "tier")
    assert {k: v for k, v in after.items() if "TopicTest/0/" in k} == \
        {k: v for k, v in before.items() if "TopicTest/0/" in k}
    fresh = run_dispatch(local, tmp_path / "tier2", metadata=tmp_path / "m2.json")   # a new tier: no problem
    assert fresh.problems == [] and fresh.messages == 80


def test_queue_whose_messages_all_expired_gets_neither_files_nor_metadata(tmp_path):
    """Issue 25 item 8(a): a new queue whose local messages retention removed before its first dispatch; the
    broker makes its flat file only when a message comes, so the tier gets neither files nor metadata for it."""
    recs = [rec("gone", i, body=b"g" * 100) for i in range(60)] + [rec("late", 100 + i, body=b"b" * 100)
                                                                     for i in range(200)]
    local = put_messages(tmp_path / "local", recs, commitlog_size=4096)
    segs = sorted((local / "commitlog").iterdir())
    last_gone = max(i for i, p in enumerate(segs) if b"gone" in p.read_bytes())
    assert last_gone < len(segs) - 2
    for p in segs[:last_gone + 1]:   # the local retention removed every file that held a "gone" record
        p.unlink()
    res = run_dispatch(local, tmp_path / "tier")
    rows = {q["topic"]: q for q in res.queues}
    assert rows["gone"]["messages"] == 0 and "neither files nor metadata" in rows["gone"]["skipped"]
    assert rows["late"]["messages"] > 0 and res.problems == []
    broker = tmp_path / "tier" / f"{md5_prefix('DefaultCluster')}_DefaultCluster" / "broker-a"
    assert not (broker / "gone").exists() and (broker / "late").is_dir()
    md = TieredMetadata.decode((local / "config" / "tieredStoreMetadata.json").read_bytes())
    assert md.topic("gone") is None and md.topic("late") is not None
    v = run(["tiered", "verify", "--tiered-store-path", tmp_path / "tier", "--store", local])
    assert v.exit_code == 0, v.output


def test_dispatch_and_the_tiered_index_job_keep_the_same_topics(tmp_path):
    """Issue 25 item 8(c): one tiered topic filter (MessageStoreTopicFilter + TopicValidator at RocketMQ 8fc57f1468):
    the tier-out and the tiered index job keep exactly the same topics. The *_SYNC names are not system topics
    there; the cluster's reply topic is (TopicConfigManager adds it at start-up)."""
    names = ["TopicA", "RMQ_SYS_TOPIC_CONFIG_SYNC", "RMQ_SYS_TRACE_TOPIC", "DefaultCluster_REPLY_TOPIC",
             "broker-a", "DefaultCluster", "rmq_sys_REVIVE_LOG_DefaultCluster", "rmq_sys_x", "%LMQ%l", "%RETRY%g",
             "SCHEDULE_TOPIC_XXXX", "TBW102"]
    local = put_messages(tmp_path / "local", [rec(t, i) for i, t in enumerate(names)])
    res = run_dispatch(local, tmp_path / "tier")
    tiered = {q["topic"] for q in res.queues if q["messages"]}
    assert tiered == {"TopicA", "RMQ_SYS_TOPIC_CONFIG_SYNC", "%RETRY%g"}
    r = run(["tiered", "reindex", "-s", local, "--broker-name", "broker-a", "-o", tmp_path / "idx", "--master",
             "inline", "--hash-slots", "16", "--max-index", "64", "--json"])
    assert r.exit_code == 0, r.output
    assert {t["topic"] for t in json.loads(r.stdout)["topics"]} == tiered


def test_as_consumer_is_what_a_pull_receives(tmp_path):
    """Issue 25 item 8(f): getMessageAsync reads ahead into its cache, then hands over messages until the pull's
    count or until they reach maxTransferBytesOnMessageInMemory (256 KiB): two 130 KiB messages, where reading by
    queue offset gives all thirteen."""
    big = b"x" * (130 * 1024)
    local = put_messages(tmp_path / "local", [rec("Big", i, body=big) for i in range(13)], commitlog_size=4 << 20)
    run_dispatch(local, tmp_path / "tier", tieredStoreCommitLogMaxSize=1 << 26,
                 tieredStoreConsumeQueueMaxSize=1 << 20)
    t = ["tiered", "get", "-T", tmp_path / "tier", "-s", local, "-t", "Big", "-q", "0", "-i", "0", "--json"]
    every = json.loads(run([*t, "-n", "32"]).stdout)
    assert len(every["messages"]) == 13 and every["nextBeginOffset"] == 13
    r = run([*t, "-n", "32", "--as-consumer"])
    assert r.exit_code == 0, r.output
    pull = json.loads(r.stdout)
    assert pull["status"] == "FOUND" and [m["queueOffset"] for m in pull["messages"]] == [0, 1]
    assert pull["nextBeginOffset"] == 2 and "read-ahead cached 13" in r.stderr
    one = json.loads(run([*t, "-n", "1", "--as-consumer"]).stdout)
    assert [m["queueOffset"] for m in one["messages"]] == [0] and one["nextBeginOffset"] == 1
    # The broker's byte limit and its cache switch come from broker.conf.
    conf = tmp_path / "broker.conf"
    conf.write_text("maxTransferBytesOnMessageInMemory=1048576\n")
    wide = json.loads(run([*t, "-n", "32", "--as-consumer", "-c", conf]).stdout)
    assert len(wide["messages"]) == 8   # 8 x 130 KiB >= 1 MiB
    conf.write_text("readAheadCacheEnable=false\n")
    nocache = json.loads(run([*t, "-n", "5", "--as-consumer", "-c", conf]).stdout)
    assert len(nocache["messages"]) == 5 and nocache["nextBeginOffset"] == 5
    assert_one_line_error(run([*t, "--as-consumer", "--raw"]), contains="not both")
    end = json.loads(run(["tiered", "get", "-T", tmp_path / "tier", "-s", local, "-t", "Big", "-q", "0", "-i", "13",
                          "--as-consumer", "--json"]).stdout)
    assert end["status"] == "OFFSET_OVERFLOW_ONE" and end["messages"] == []
