"""tiered clean / verify and the read commands on damaged or unusual input (copies of the f1 vector)."""
from __future__ import annotations

import builtins
import json
import mmap
import os

import pytest

from engine.tiered.flat.layout import md5_prefix, offset_to_file_name
from engine.tiered.flat.metadata import TieredMetadata
from helpers import assert_one_line_error, run, snapshot
from tiered_flat_helpers import F1_META, F1_TIER, copy_f1, edit_metadata

CUT = 1795394240850   # between TopicTest/0's COMMIT_LOG 3925 (ends ...240804) and CONSUME_QUEUE 200 (...240910)
NOW = CUT + 72 * 3_600_000


def tiered(*args, meta=None, tier=None):
    return run(["tiered", *args, "--tiered-store-path", tier or F1_TIER, "--metadata", meta or F1_META])


@pytest.fixture
def f1copy(tmp_path):
    return copy_f1(tmp_path / "s")


def test_clean_dry_run_then_for_real(f1copy):
    tier, meta = f1copy
    before = snapshot(tier.parent)
    r = tiered("clean", "--reserved-hours", "72", "--now", str(NOW), "--dry-run", "--json", tier=tier, meta=meta)
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert snapshot(tier.parent) == before
    tt0 = [d for d in plan["delete"] if d["topic"] == "TopicTest" and d["queueId"] == 0]
    assert [(d["fileType"], d["baseOffset"]) for d in tt0] == [("CONSUME_QUEUE", 0), ("COMMIT_LOG", 0),
                                                               ("COMMIT_LOG", 3925)]
    assert all(d["endTimestamp"] < CUT for d in plan["delete"])
    r = tiered("clean", "--reserved-hours", "72", "--now", str(NOW), "--json", tier=tier, meta=meta)
    assert r.exit_code == 0 and json.loads(r.stdout)["delete"] == plan["delete"]
    for d in plan["delete"]:
        assert not (tier / d["file"]).exists()
    md = TieredMetadata.decode(meta.read_bytes())
    assert [e.base_offset for e in md.segment_entries("broker-a/TopicTest/0", 0)] == [7947, 11634, 15658, 19345]
    bak = TieredMetadata.decode(meta.with_name(meta.name + ".bak").read_bytes())   # one change behind
    assert sum(len(bak.segment_entries(p, t)) for p in bak.paths() for t in (0, 1)) == \
        sum(len(md.segment_entries(p, t)) for p in md.paths() for t in (0, 1)) + 1
    # CONSUME_QUEUE 200 stays while the records of its first units are gone: the min offset hides them.
    (row,) = [json.loads(x) for x in tiered("queues", "--topic", "TopicTest", "--json", tier=tier, meta=meta)
              .stdout.splitlines() if json.loads(x)["queueId"] == 0]
    assert row["consumeQueueMinOffset"] == 14 and row["commitLogMinOffset"] == 7947
    g = json.loads(tiered("get", "--topic", "TopicTest", "-q", "0", "-i", "11", "--json", tier=tier, meta=meta).stdout)
    assert g["status"] == "OFFSET_TOO_SMALL" and g["nextBeginOffset"] == 14
    units = [json.loads(x) for x in tiered("dump-cq", "--topic", "TopicTest", "-q", "0", "--json", tier=tier,
                                           meta=meta).stdout.splitlines()]
    assert units[0]["queueOffset"] == 10 and [u["storeTimestamp"] for u in units[:4]] == [-1] * 4
    assert units[4]["storeTimestamp"] > 0
    t = tiered("offset-by-time", "--topic", "TopicTest", "-q", "0", "--timestamp", str(1795394240822),
               "--timestamp", "0", "--json", tier=tier, meta=meta)
    rows = [json.loads(x) for x in t.stdout.splitlines()]
    assert t.exit_code == 3 and "error" in rows[0] and rows[1]["result"] == 14
    v = tiered("verify", "--json", tier=tier, meta=meta)
    assert v.exit_code == 0, v.output
    assert "tiered-units-past-retention" in [f["kind"] for f in json.loads(v.stdout)["findings"]]
    again = tiered("clean", "--reserved-hours", "72", "--now", str(NOW), "--json", tier=tier, meta=meta)
    assert json.loads(again.stdout)["files"] == 0


def test_clean_honours_topic_reserve_time_and_removes_everything_expired(f1copy):
    tier, meta = f1copy
    edit_metadata(meta, lambda md: setattr(md.topic("tiered_orders"), "reserve_time", 1))
    r = tiered("clean", "--reserved-hours", "100000", "--now", str(NOW), "--json", tier=tier, meta=meta)
    plan = json.loads(r.stdout)
    assert {d["topic"] for d in plan["delete"]} == {"tiered_orders"} and plan["files"] == 2 * (7 + 4)
    assert not list((tier / "212d6b50_DefaultCluster/broker-a/tiered_orders").rglob("*/*/*"))
    md = TieredMetadata.decode(meta.read_bytes())
    assert md.segment_entries("broker-a/tiered_orders/0", 0) == [] and md.queue("tiered_orders", 0) is not None


def _damage(tier, rel: str, pos: int, data: bytes) -> None:
    with open(tier / rel, "r+b") as f:
        f.seek(pos)
        f.write(data)


Q0 = "212d6b50_DefaultCluster/broker-a/TopicTest/0"


@pytest.mark.parametrize("how,expect", [
    ("phy", "PHYSICALOFFSET"), ("torn", "no whole record"), ("unit", "no such record starts"),
    ("past", "past the record of the last consume-queue unit"), ("prefix", "MD5 prefix"),
    ("meta_size", "metadata says"), ("qoffset", "breaks the sequence"), ("orphan", "does not list")])
def test_verify_names_file_and_offset_of_each_problem(f1copy, how, expect):
    tier, meta = f1copy
    cl1 = f"{Q0}/COMMIT_LOG/{offset_to_file_name(3925)}"
    last = f"{Q0}/COMMIT_LOG/{offset_to_file_name(19345)}"
    if how == "phy":
        _damage(tier, cl1, 918 + 28, (1).to_bytes(8, "big"))
    elif how == "torn":
        os.truncate(tier / last, 4000)
    elif how == "unit":
        _damage(tier, f"{Q0}/CONSUME_QUEUE/{offset_to_file_name(200)}", 20 * 3 + 8, (7).to_bytes(4, "big"))
    elif how == "past":   # a whole record after the last one a unit points at (an interrupted dispatch)
        data = bytearray((tier / last).read_bytes())
        unit = (tier / Q0 / "CONSUME_QUEUE" / offset_to_file_name(600)).read_bytes()[-20:]
        off, size = int.from_bytes(unit[:8], "big") - 19345, int.from_bytes(unit[8:12], "big")
        rec = bytearray(data[off:off + size])
        rec[28:36] = (19345 + len(data)).to_bytes(8, "big")
        rec[20:28] = (40).to_bytes(8, "big")
        with open(tier / last, "ab") as f:
            f.write(rec)
    elif how == "prefix":
        p = tier / cl1
        p.rename(p.with_name("00000000" + p.name[8:]))
    elif how == "meta_size":
        edit_metadata(meta, lambda md: setattr(md.segment("broker-a/TopicTest/0", 0, 3925), "size", 4000))
    elif how == "qoffset":
        _damage(tier, cl1, 918 + 20, (99).to_bytes(8, "big"))
    elif how == "orphan":
        (tier / Q0 / "CONSUME_QUEUE" / offset_to_file_name(800)).write_bytes(b"")
    r = tiered("verify", tier=tier, meta=meta)
    assert r.exit_code == 3, r.output
    lines = r.stdout.strip().splitlines()
    assert lines and any(expect in line for line in lines), lines
    assert all(line.startswith("212d6b50_DefaultCluster/broker-a/") or line.startswith("00000000")
               or "/" in line for line in lines)
    hit = next(line for line in lines if expect in line)
    assert "TopicTest/0" in hit
    if how in ("phy", "unit", "qoffset", "torn", "meta_size"):
        assert ": offset " in hit
    j = json.loads(tiered("verify", "--json", tier=tier, meta=meta).stdout)
    assert j["ok"] is False and j["problemCount"] > 0
    problems = j["findings"][:j["problemCount"]]   # the problems, then the notes
    assert all(set(f) == {"kind", "severity", "file", "offset", "problem", "brokerWill"} for f in j["findings"])
    assert all(f["kind"].startswith("tiered-") and f["severity"] in ("error", "warning", "info") for f in problems)
    assert any(expect in f["problem"] and (f["offset"] is not None) == (": offset " in hit) for f in problems)


def test_metadata_fallbacks(f1copy, tmp_path):
    tier, meta = f1copy
    meta.write_text('{"commitLogFileSegmentTable":{')   # damaged: the broker falls back to the .bak
    r = tiered("queues", "--json", tier=tier, meta=meta)
    assert r.exit_code == 0 and "using tieredStoreMetadata.json.bak" in r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(rows) == 4 and rows[-1]["consumeQueueMaxOffset"] == 40   # last segment size from its file
    s = tiered("segments", "--topic", "tiered_orders", "-q", "1", "--json", tier=tier, meta=meta)
    last = [json.loads(x) for x in s.stdout.splitlines()][-1]
    assert last["size"] == 200 and last["metadata"] == {"size": 0}
    meta.with_name(meta.name + ".bak").write_text("")
    r = tiered("queues", "--json", tier=tier, meta=meta)
    assert r.exit_code == 0 and "segment lists come from the files" in r.stderr
    assert [json.loads(x)["consumeQueueMaxOffset"] for x in r.stdout.splitlines()] == [40] * 4
    g = json.loads(tiered("get", "--topic", "TopicTest", "-q", "1", "-i", "39", "--json", tier=tier, meta=meta).stdout)
    assert g["status"] == "FOUND" and g["messages"][0]["queueOffset"] == 39
    r = run(["tiered", "queues", "--tiered-store-path", tier, "--json"])
    assert r.exit_code == 0 and "no metadata file given" in r.stderr and len(r.stdout.splitlines()) == 4
    t = run(["tiered", "offset-by-time", "--tiered-store-path", tier, "--topic", "TopicTest", "-q", "0",
             "--timestamp", "1795394240930", "--json"])
    assert json.loads(t.stdout)["result"] == json.loads(tiered("offset-by-time", "--topic", "TopicTest", "-q", "0",
                                                               "--timestamp", "1795394240930", "--json").stdout)["result"]


def test_bad_input_is_one_line_exit_2(f1copy, tmp_path):
    tier, meta = f1copy
    (tmp_path / "empty").mkdir()
    assert_one_line_error(run(["tiered", "queues", "--tiered-store-path", tmp_path / "empty"]), 2,
                          "not a tiered store root")
    assert_one_line_error(run(["tiered", "queues", "--tiered-store-path", tmp_path / "nope"]), 2, "does not exist")
    assert_one_line_error(run(["tiered", "queues"]), 2, "--tiered-store-path")
    assert_one_line_error(tiered("segments", "--topic", "Nope", "-q", "0"), 2, "not tiered")
    assert_one_line_error(tiered("segments", "--topic", "TopicTest", "-q", "9"), 2, "queues: 0, 1")
    assert_one_line_error(tiered("segments", "--topic", "../x", "-q", "0"), 2)
    assert_one_line_error(tiered("get", "--topic", "TopicTest", "-q", "0", "-i", "0", "--count", "0"), 2)
    assert_one_line_error(tiered("offset-by-time", "--topic", "TopicTest", "-q", "0", "--timestamp", "x"), 2)
    assert_one_line_error(tiered("offset-by-time", "--topic", "TopicTest", "-q", "0", "--timestamp", "1",
                                 "--boundary", "middle"), 2, "lower or upper")
    assert_one_line_error(tiered("queues", "--broker-name", "broker-b"), 2, "brokers there: broker-a")
    (tier / "29feaecb_Cluster_B" / "broker-x").mkdir(parents=True)
    assert_one_line_error(run(["tiered", "queues", "--tiered-store-path", tier]), 2, "Cluster_B, DefaultCluster")
    assert md5_prefix("Cluster_B") == "29feaecb"
    ok = run(["tiered", "queues", "--tiered-store-path", tier, "--cluster-name", "DefaultCluster", "--metadata", meta])
    assert ok.exit_code == 0
    # A segment file whose name does not parse: read commands skip it with a warning, verify reports it.
    (tier / Q0 / "CONSUME_QUEUE" / "garbage").write_bytes(b"x")
    dc = ["--cluster-name", "DefaultCluster"]
    r = tiered("get", "--topic", "TopicTest", "-q", "0", "-i", "3", "--json", *dc, tier=tier, meta=meta)
    assert r.exit_code == 0 and "garbage" in r.stderr and "warning" in r.stderr
    v = tiered("verify", *dc, "--json", tier=tier, meta=meta)
    assert v.exit_code == 3
    bad = [f for f in json.loads(v.stdout)["findings"] if f["kind"] == "tiered-segment-name"]
    assert [f["file"].rsplit("/", 1)[-1] for f in bad] == ["garbage"], bad


def test_read_commands_never_open_a_file_writable(monkeypatch, f1copy):
    tier, meta = f1copy
    seen = []
    real_open, real_os_open, real_mmap = builtins.open, os.open, mmap.mmap
    watched = str(tier.parent)

    def os_open(path, flags, *a, **k):
        if str(path).startswith(watched) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC):
            seen.append(("os.open", path))
        return real_os_open(path, flags, *a, **k)

    def b_open(file, mode="r", *a, **k):
        if str(file).startswith(watched) and any(c in mode for c in "wax+"):
            seen.append(("open", file))
        return real_open(file, mode, *a, **k)

    def mm(*a, **k):
        if k.get("access", mmap.ACCESS_WRITE) != mmap.ACCESS_READ:
            seen.append(("mmap", a))
        return real_mmap(*a, **k)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", b_open)
    monkeypatch.setattr(mmap, "mmap", mm)
    before = snapshot(tier.parent)
    q = ["--topic", "TopicTest", "-q", "1"]
    for args in (["queues"], ["segments", *q], ["get", *q, "-i", "5", "-n", "30"], ["get", *q, "-i", "0", "--raw"],
                 ["offset-by-time", *q, "--timestamp", "1795394240930"], ["dump-cq", *q], ["verify"],
                 ["clean", "--reserved-hours", "1", "--dry-run"]):
        r = tiered(*args, tier=tier, meta=meta)
        assert r.exit_code == 0, (args, r.output)
    assert seen == [] and snapshot(tier.parent) == before


def test_rebuild_after_partial_retention_keeps_the_recorded_begin(f1copy, tmp_path):
    """Issue 25 item 8(b): retention removed the COMMIT_LOG files under the first units of CONSUME_QUEUE 200. The
    broker keeps that segment's recorded beginTimestamp; rebuild-metadata --from keeps it too, while without --from
    it can only take the oldest surviving record's (and says so)."""
    tier, meta = f1copy
    assert tiered("clean", "--reserved-hours", "72", "--now", str(NOW), tier=tier, meta=meta).exit_code == 0
    old = TieredMetadata.decode(meta.read_bytes())
    (recorded,) = [e for e in old.segment_entries("broker-a/TopicTest/0", 1) if e.base_offset == 200]
    out = tmp_path / "rebuilt.json"
    r = run(["tiered", "rebuild-metadata", "--tiered-store-path", tier, "--out", out, "--from", meta, "--json"])
    assert r.exit_code == 0, r.output
    (kept,) = [e for e in TieredMetadata.decode(out.read_bytes()).segment_entries("broker-a/TopicTest/0", 1)
               if e.base_offset == 200]
    assert (kept.begin_timestamp, kept.end_timestamp) == (recorded.begin_timestamp, recorded.end_timestamp)
    r = run(["tiered", "rebuild-metadata", "--tiered-store-path", tier, "--out", tmp_path / "plain.json", "--json"])
    (guessed,) = [e for e in TieredMetadata.decode((tmp_path / "plain.json").read_bytes())
                  .segment_entries("broker-a/TopicTest/0", 1) if e.base_offset == 200]
    assert guessed.begin_timestamp > recorded.begin_timestamp
    assert any("first records are gone" in w for w in json.loads(r.stdout)["warnings"])
