"""The f1 vector (files written by RocketMQ's own TieredMessageStore): every one of the 1,348 recorded answers
through the engine API and through the CLI; dispatch and rebuild-metadata give the vector's bytes back."""
from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict

import pytest

from engine.tiered.flat.config import TieredConfig
from engine.tiered.flat.metadata import TieredMetadata
from engine.tiered.flat.rebuild import rebuild_metadata
from engine.tiered.flat.segments import TieredReadError
from engine.tiered.flat.store import open_flat_store
from helpers import run
from tiered_flat_helpers import (CLOCK, F1_BAK, F1_META, F1_TIER, f1_expected, f1_local_store, run_dispatch,
                                 strip_wall_clock, tier_files)

EXPECTED = f1_expected()
TIER = ["--tiered-store-path", F1_TIER, "--metadata", F1_META]


def test_vector_is_complete():
    assert len(EXPECTED) == 1348
    assert Counter(e["kind"] for e in EXPECTED) == {"time": 992, "get": 176, "cq": 160, "segments": 8, "batch": 8,
                                                     "queue": 4}


@pytest.fixture(scope="module")
def f1():
    st = open_flat_store(F1_TIER, F1_META, None, None, TieredConfig())
    yield st
    st.close()


def _same_message(got, exp: dict) -> None:
    assert hashlib.sha256(got.record).hexdigest() == exp["recordSha256"]
    assert got.tags_code == exp["tagCode"] and got.queue_offset == exp["resultQueueOffset"]


def test_engine_reproduces_every_answer(f1):
    for e in EXPECTED:
        fq = f1.queue(e["topic"], e["queueId"])
        k = e["kind"]
        if k == "queue":
            assert (fq.min_offset, fq.max_offset, fq.commit_log.min_offset, fq.commit_log.commit_offset,
                    fq.first_message_offset, fq.min_store_timestamp, fq.max_store_timestamp, fq.topic_id,
                    fq.reserved_hours(), fq.is_flat_file_init) == \
                (e["consumeQueueMinOffset"], e["consumeQueueCommitOffset"], e["commitLogMinOffset"],
                 e["commitLogCommitOffset"], e["firstMessageOffset"], e["minStoreTimestamp"], e["maxStoreTimestamp"],
                 e["topicId"], e["fileReservedHours"], e["isFlatFileInit"]), e
            assert fq.min_store_timestamp == e["earliestMessageTime"]
        elif k == "segments":
            f = fq.commit_log if e["fileType"] == "COMMIT_LOG" else fq.consume_queue
            assert (f.min_offset, f.commit_offset) == (e["minOffset"], e["commitOffset"])
            assert [(s.base, s.size, s.min_ts, s.max_ts, s.file_name, s.file_len) for s in f.segments] == \
                [(s["baseOffset"], s["size"], s["minTimestamp"], s["maxTimestamp"], s["fileName"], s["fileBytes"])
                 for s in e["segments"]]
        elif k == "cq":
            assert fq.unit(e["queueOffset"]) == (e["commitLogOffset"], e["size"], e["tagsCode"])
            assert fq.message_store_timestamp(e["queueOffset"]) == e["storeTimestampByOffset"]
        elif k in ("get", "batch"):
            r = fq.get(e["queueOffset"], 1) if k == "get" else fq.batch(e["queueOffset"], e["batchSize"])
            assert (r.status, r.next_begin_offset, r.min_offset, r.max_offset, len(r.messages)) == \
                (e["status"], e["nextBeginOffset"], e["minOffset"], e["maxOffset"], e["messageCount"]), e
            for got, want in zip(r.messages, e["messages"]):
                _same_message(got, want)
        elif k == "time":
            try:
                got = fq.offset_by_time(e["timestamp"], e["boundary"])
            except TieredReadError:
                got = "error"
            assert got == e.get("result", "error"), e


def _cli_json(args) -> list[dict]:
    r = run(["tiered", *args, *TIER, "--json"])
    assert r.exit_code == 0, r.output
    return [json.loads(line) for line in r.stdout.splitlines()]


@pytest.mark.slow
def test_cli_reproduces_every_answer():
    by = defaultdict(list)
    for e in EXPECTED:
        by[(e["kind"], e["topic"], e["queueId"])].append(e)
    rows = {(r["topic"], r["queueId"]): r for r in _cli_json(["queues"])}
    for (kind, topic, qid), es in sorted(by.items()):
        q = ["--topic", topic, "--queue-id", qid]
        if kind == "queue":
            e, r = es[0], rows[(topic, qid)]
            for f in ("consumeQueueMinOffset", "consumeQueueMaxOffset", "commitLogMinOffset", "commitLogMaxOffset",
                      "minStoreTimestamp", "maxStoreTimestamp", "topicId", "firstMessageOffset", "fileReservedHours"):
                assert r[f] == e[f], f
            assert r["cluster"] == e["cluster"] and r["broker"] == e["broker"]
        elif kind == "segments":
            segs = _cli_json(["segments", *q])
            for e in es:
                got = [s for s in segs if s["fileType"] == e["fileType"]]
                assert [(s["baseOffset"], s["size"], s["beginTimestamp"], s["endTimestamp"], s["fileName"],
                         s["fileBytes"]) for s in got] == \
                    [(s["baseOffset"], s["size"], s["minTimestamp"], s["maxTimestamp"], s["fileName"], s["fileBytes"])
                     for s in e["segments"]]
                assert all("metadata" not in s for s in got)
        elif kind == "cq":
            units = {u["queueOffset"]: u for u in _cli_json(["dump-cq", *q])}
            assert len(units) == len(es)
            for e in es:
                u = units[e["queueOffset"]]
                assert (u["commitLogOffset"], u["size"], u["tagsCode"], u["storeTimestamp"]) == \
                    (e["commitLogOffset"], e["size"], e["tagsCode"], e["storeTimestampByOffset"])
        elif kind in ("get", "batch"):
            for e in es:
                extra = ["--count", e["batchSize"], "--raw"] if kind == "batch" else []
                (r,) = _cli_json(["get", *q, "--queue-offset", e["queueOffset"], *extra])
                assert (r["status"], r["nextBeginOffset"], r["minOffset"], r["maxOffset"], len(r["messages"])) == \
                    (e["status"], e["nextBeginOffset"], e["minOffset"], e["maxOffset"], e["messageCount"])
                for m, w in zip(r["messages"], e["messages"]):
                    assert m["queueOffset"] == w["resultQueueOffset"] and m["storeSize"] == w["recordLength"]
                    assert m["tagsCode"] == w["tagCode"]
                    if kind == "get":
                        for f in ("msgId", "uniqKey", "topic", "queueId", "commitLogOffset", "bodyCRC", "flag",
                                  "sysFlag", "bornTimestamp", "bornHost", "storeTimestamp", "storeHost",
                                  "reconsumeTimes", "preparedTransactionOffset", "properties", "tags"):
                            assert m[f] == w[f], f
                        assert " ".join(m["keys"]) == w["keys"]
        elif kind == "time":
            for b in ("LOWER", "UPPER"):
                sel = [e for e in es if e["boundary"] == b]
                args = [a for e in sel for a in ("--timestamp", e["timestamp"])]
                got = _cli_json(["offset-by-time", *q, "--boundary", b.lower(), *args])
                assert [(g["timestamp"], g["boundary"], g.get("result")) for g in got] == \
                    [(e["timestamp"], b, e.get("result")) for e in sel]


def test_metadata_codec_round_trips_text_and_decode_model():
    for p in (F1_META, F1_BAK):
        md = TieredMetadata.decode(p.read_bytes())
        assert md.topic_serial == 1 and len(md.loaded_queues()) == 4
    # A broker that loaded the file copies every inner map presized: 7 entries -> 32 buckets, another order.
    text = F1_META.read_text()
    again = TieredMetadata.decode(text).encode()
    assert again != text and strip_wall_clock(again) != strip_wall_clock(text)
    assert TieredMetadata.decode(again).encode() == again
    assert not text.endswith("\n") and '"broker-a/TopicTest/1":{0:{' in text


def test_rebuild_from_files_with_bak_gives_the_vector_back(tmp_path):
    out = tmp_path / "tieredStoreMetadata.json"
    r = run(["tiered", "rebuild-metadata", "--tiered-store-path", F1_TIER, "--broker-name", "broker-a", "--out", out,
             "--from", F1_BAK, "--json"])
    assert r.exit_code == 0, r.output
    assert out.read_bytes() == F1_META.read_bytes()   # every wall-clock time comes from the .bak here
    res = json.loads(r.stdout)
    assert res["queues"] == 4 and res["segments"] == {"COMMIT_LOG": 27, "CONSUME_QUEUE": 16, "INDEX": 0}
    res2 = rebuild_metadata(F1_TIER, None, tmp_path / "plain.json", clock=lambda: 5)
    assert strip_wall_clock((tmp_path / "plain.json").read_text()) == strip_wall_clock(F1_META.read_text())
    assert [t["topic"] for t in res2.new_topics] == ["TopicTest", "tiered_orders"] and res2.warnings
    again = run(["tiered", "rebuild-metadata", "--tiered-store-path", F1_TIER, "--out", out])
    assert again.exit_code == 2 and "exists" in again.stderr


def test_dispatch_of_the_f1_records_gives_the_vector(tmp_path):
    local = f1_local_store(tmp_path / "local")
    res = run_dispatch(local, tmp_path / "tier")
    assert res.problems == [] and res.messages == 160 and res.bytes == 93828 and res.metadata_written
    assert [t["topic"] for t in res.new_topics] == ["TopicTest", "tiered_orders"]
    assert tier_files(tmp_path / "tier") == tier_files(F1_TIER)
    meta = local / "config" / "tieredStoreMetadata.json"
    for mine, theirs in ((meta, F1_META), (meta.with_name(meta.name + ".bak"), F1_BAK)):
        got = mine.read_text()
        assert strip_wall_clock(got) == strip_wall_clock(theirs.read_text())
        assert f'"createTimestamp":{CLOCK}' in got
    again = run_dispatch(local, tmp_path / "tier")
    assert again.messages == 0 and not again.metadata_written
    assert tier_files(tmp_path / "tier") == tier_files(F1_TIER)


def test_verify_says_the_vector_is_whole():
    r = run(["tiered", "verify", *TIER])
    assert r.exit_code == 0 and r.stdout == ""
    assert "4 queue(s), 43 segment(s), 160 record(s), 160 unit(s): whole" in r.stderr
    j = json.loads(run(["tiered", "verify", *TIER, "--json"]).stdout)
    assert j["ok"] and j["findings"] == [] and j["problemCount"] == j["noteCount"] == 0


def test_raw_batch_read_says_what_it_left_out():
    q = ["--topic", "TopicTest", "--queue-id", "0", "--queue-offset", "0", "--count", "4096"]
    raw = run(["tiered", "get", *q, "--raw", *TIER, "--json"])
    assert raw.exit_code == 0
    got = json.loads(raw.stdout)
    assert (got["nextBeginOffset"], len(got["messages"])) == (20, 14)
    assert "covered 20 units and left out 6 message(s)" in raw.stderr
    whole = json.loads(run(["tiered", "get", *q, *TIER, "--json"]).stdout)
    assert [m["queueOffset"] for m in whole["messages"]] == list(range(40)) and whole["nextBeginOffset"] == 40
    assert whole["messages"][20]["storeSize"] > 0 and "left out" not in run(["tiered", "get", *q, *TIER]).stderr
