"""spark-reindex: the scan, the plan and the published files, against the broker's incremental index path."""
from __future__ import annotations

import json
import random
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from helpers import (GOLDEN, READ_GEOM, T0, assert_one_line_error, index_bytes, keyed_record as krec, lock_held,
                     multikey_messages, place, put_jsonl, rec, run, seg_infos, snapshot, write_segments)
from engine.broker.config.checkpoint import Checkpoint
from engine.broker.index.file import IndexFile
from engine.broker.index.service import IndexService
from engine.broker.layout import list_index_files
from engine.broker.commitlog.message import (TRANSACTION_COMMIT_TYPE, TRANSACTION_PREPARED_TYPE,
                                             TRANSACTION_ROLLBACK_TYPE, MessageRecord, check_message, encode_record,
                                             serialize_properties)
from engine.exec.runners import InlineRunner
from engine.jobs.broker_index import rebuild_from_scans, scan_buffer, scan_range, stream_from_scans
from engine.jobs.broker_plan import PlanStream, make_plan
from reindex_oracles import scan_from_records, scan_segment_reference


# ============================================================================ helpers


@pytest.fixture(scope="module")
def put_store(tmp_path_factory) -> Path:
    """A store written by `rmqtool put` (the broker's incremental index path), rolling >= 3 index files."""
    store = tmp_path_factory.mktemp("reindex") / "store"
    put_jsonl(store, multikey_messages(70))
    assert len(list_index_files(store / "index")) >= 3
    assert len(list((store / "commitlog").iterdir())) >= 3
    return store


@pytest.fixture
def store(put_store, tmp_path) -> Path:
    s = tmp_path / "store"
    shutil.copytree(put_store, s)
    return s


def reindex(store, *extra, master="inline"):
    return run(["spark-reindex", "--store", store, *READ_GEOM, "--master", master, *extra])


def assert_same_scan(a, b):
    for f in ("rec_phy", "rec_ts", "rec_nkeys", "key_hash"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    for f in ("bytes_scanned", "end_kind", "end_offset", "length_mismatches", "rollbacks", "phy_mismatches"):
        assert getattr(a, f) == getattr(b, f), (f, getattr(a, f), getattr(b, f))


# ============================================================================ scan

def test_fast_scan_equals_reference_on_the_golden_commit_log(tmp_path):
    paths = []
    for name in json.loads((GOLDEN / "commitlog" / "params.json").read_text())["files"]:
        paths.append(GOLDEN / "commitlog" / name)
    for seg in seg_infos(paths):
        fast, ref = scan_range(seg), scan_segment_reference(seg)
        assert_same_scan(fast, ref)
        assert fast.records > 0
    first = scan_range(seg_infos(paths)[0])
    assert first.end_kind == "blank" and first.keys > first.records  # UNIQ_KEY plus KEYS tokens


def test_fast_scan_edge_cases_equal_reference(tmp_path):
    recs = [
        rec(props={"UNIQ_KEY": "U1", "KEYS": "a  b a "}),                                     # empty/repeated tokens
        rec(props_raw=b"UNIQ_KEY\x01first\x02UNIQ_KEY\x01second\x02KEYS\x01k1\x02"),         # last duplicate wins
        rec(props_raw=b"UNIQ_KEY\x01kept\x02UNIQ_KEY\x01\x02KEYS\x01\x02"),                 # empty values dropped
        rec(props_raw=b"X\x01v UNIQ_KEY\x01no\x02KEYS\x01a\x01b c\x02"),                    # names only at entry start
        rec(props_raw=b"\x02\x02KEYS\x01\xff\xfe bad\xe2\x82 \xc3\xa9\x02UNIQ_KEY\x01\xf0\x9f\x98\x80"),  # bad UTF-8
        rec(props_raw=b"KEYS\x01only"),                                                       # no trailing 0x02
        rec(props_raw=b"TAGS\x01t\x02"),                                                     # nothing to index
        rec(props_raw=b""),
        rec(topic="Топик😀", props={"KEYS": "ключ 😀 plain"}),
        rec(topic="V" * 150, props={"KEYS": "long-topic"}),                                  # v2 record
        rec(props={"KEYS": "rolled"}, sys_flag=TRANSACTION_ROLLBACK_TYPE),
        rec(props={"KEYS": "half"}, sys_flag=TRANSACTION_PREPARED_TYPE),
        rec(props={"KEYS": "commit"}, sys_flag=TRANSACTION_COMMIT_TYPE),
        rec(props={"KEYS": "v6"}, born_host=bytes(range(16)), store_host=bytes(range(16, 32))),
        rec(props={"KEYS": "polygenelubricants"}, topic=""),
    ]
    for i, r in enumerate(recs):
        r.store_timestamp = T0 + i
    blobs = place(recs, 1 << 20)
    # A LENGTH_MISMATCH record: TOTALSIZE 5 bytes larger than its fields (skipped, the walk goes on).
    lm = bytearray(encode_record(rec(props={"KEYS": "mismatch"}))) + b"\x07" * 5
    struct.pack_into(">i", lm, 0, len(lm))
    blobs.insert(3, bytes(lm))
    paths = write_segments(tmp_path, blobs, 1 << 20)
    seg = seg_infos(paths)[0]
    fast, ref = scan_range(seg), scan_segment_reference(seg)
    assert_same_scan(fast, ref)
    assert fast.length_mismatches == 1 and fast.rollbacks == 1 and fast.end_kind == "zero"
    # U1 a b a / second k1 / kept / (mismatch not dispatched) "a\x01b" c
    assert fast.rec_nkeys.tolist()[:4] == [4, 2, 1, 2] and fast.records == len(recs)


def test_fast_scan_stops_at_a_corrupt_record_like_the_walk(tmp_path):
    recs = [rec(props={"KEYS": f"k{i}"}, store_timestamp=T0 + i) for i in range(6)]
    blobs = place(recs, 8192)
    bad = bytearray(blobs[2])
    props_len = len(serialize_properties(recs[2].properties).encode())
    bad[len(bad) - 2 - props_len - len(recs[2].topic) - 1] = 0xFF  # negative v1 topic length: CORRUPT, rest lost
    blobs[2] = bytes(bad)
    paths = write_segments(tmp_path, blobs, 8192)
    seg = seg_infos(paths)[0]
    fast, ref = scan_range(seg), scan_segment_reference(seg)
    assert_same_scan(fast, ref)
    assert fast.end_kind == "corrupt" and fast.records == 2
    data = Path(seg.path).read_bytes()
    for window in (1, 500):
        assert_same_scan(scan_buffer(data, seg, window=window), ref)


def test_fast_scan_fuzzed_properties_equal_reference(tmp_path):
    rnd = random.Random(11)
    parts = [b"UNIQ_KEY", b"KEYS", b"\x01", b"\x02", b" ", b"  ", b"a", b"bc", "é".encode(), b"\xff", b"\xe2\x82",
             "😀".encode(), b"TAGS", b"\x00", b"#"]
    recs = []
    names = [b"UNIQ_KEY", b"KEYS", b"KEYS", b"TAGS", b"", b"UNIQ_KEY ", b"\x01KEYS"]

    def noise(k):
        return b"".join(rnd.choice(parts) for _ in range(rnd.randrange(0, k)))

    for i in range(1500):
        if rnd.random() < 0.2:
            raw = noise(14)
        else:  # entries that look right, with noise in names, separators and values
            entries = [rnd.choice(names) + rnd.choice([b"\x01", b"\x01", b"", b"\x01\x01"]) + noise(6)
                       for _ in range(rnd.randrange(1, 5))]
            raw = b"\x02".join(entries) + rnd.choice([b"", b"\x02", b"\x02\x02"])
        recs.append(rec(topic=rnd.choice(["T", "Tö", ""]), props_raw=raw, store_timestamp=T0 + i,
                        sys_flag=rnd.choice([0, 0, 0, TRANSACTION_ROLLBACK_TYPE])))
    paths = write_segments(tmp_path, place(recs, 64 * 1024), 64 * 1024)
    total_keys = 0
    for seg in seg_infos(paths):
        fast, ref = scan_range(seg), scan_segment_reference(seg)
        assert_same_scan(fast, ref)
        total_keys += fast.keys
        data = Path(seg.path).read_bytes()
        for window in (1, 700, 5000):  # records decoded in many small batches: same answer
            assert_same_scan(scan_buffer(data, seg, window=window), ref)
    assert total_keys > 500


# ============================================================================ plan vs the incremental path

def incremental(records, slots, items, tmp_path) -> list[bytes]:
    """IndexService.build_index over the records (what the broker's dispatcher does), then a shutdown flush."""
    d = tmp_path / f"inc{random.random()}"
    clock = iter(range(T0, T0 + 10**9))
    svc = IndexService(d, slots, items, writable=True, clock=lambda: next(clock))
    for r in records:
        svc.build_index(r)
    svc.flush_all()
    svc.close()
    return index_bytes(d)


def rebuilt(records, slots, items, tmp_path, cuts=()) -> list[bytes]:
    """The reindex plan + builder over the same records, split into segments at `cuts`; the inline job's
    range-by-range plan and build (PlanStream, FileStream) give the same plan and the same files."""
    bounds = [0, *cuts, len(records)]
    scans = [scan_from_records(records[a:b], index=i) for i, (a, b) in enumerate(zip(bounds, bounds[1:]))]
    d = tmp_path / f"re{random.random()}"
    paths = rebuild_from_scans(scans, slots, items, d)
    names = [p.name for p in paths]
    assert names == [p.name for p in list_index_files(d)]  # names increase in put order
    got = [p.read_bytes() for p in paths]
    streamed = stream_from_scans(scans, slots, items, tmp_path / f"st{random.random()}")
    assert [p.name for p in streamed] == names and [p.read_bytes() for p in streamed] == got
    summaries = [sc.summary() for sc in scans]
    planner = PlanStream(slots, items)
    for sc in scans:
        planner.add(sc.summary(), sc)
    assert planner.finish() == make_plan(InlineRunner(scans), summaries, slots, items)
    return got


def test_already_indexed_rule_with_offsets_going_backwards(tmp_path):
    # Offsets that repeat or go back (re-dispatch, copied segments): the record is skipped whole when its
    # offset is below the current file's endPhyOffset; equal offsets are indexed again (pitfall 23).
    recs = [krec(100, T0, "a b"), krec(50, T0 + 1, "c"), krec(100, T0 + 2, "d"), krec(300, T0 + 3, "e f g"),
            krec(200, T0 + 4, "h"), krec(-5, T0 + 5, "neg"), krec(300, T0 + 6, "i"), krec(400, T0 + 7, ""),
            krec(350, T0 + 8, "j"), krec(500, T0 + 9, "k", sys_flag=TRANSACTION_ROLLBACK_TYPE), krec(600, T0 + 10, "l")]
    want = incremental(recs, 4, 5, tmp_path)
    assert len(want) >= 3
    for cuts in [(), (2,), (1, 4, 8), (3, 5, 9, 10)]:
        assert rebuilt(recs, 4, 5, tmp_path, cuts) == want, cuts


def test_exactly_full_file_then_more_records_creates_an_empty_seeded_file(tmp_path):
    # 4 keys fill a 5-item file; the next dispatched record (keyless here) makes the broker roll anyway.
    base = [krec(10, T0, "a b"), krec(20, T0 + 1500, "c d")]
    for tail in ([], [krec(30, T0 + 3000)], [krec(30, T0 + 3000, "r", sys_flag=TRANSACTION_ROLLBACK_TYPE)],
                 [krec(5, T0 + 3000, "old")]):
        recs = base + tail
        want = incremental(recs, 4, 5, tmp_path)
        assert len(want) == (1 if not tail else 2)
        for cuts in [(), (2,), (1, 2)][: len(recs)]:
            assert rebuilt(recs, 4, 5, tmp_path, [c for c in cuts if c < len(recs)]) == want
    empty = want[-1]
    assert struct.unpack(">qqqqii", empty[:40]) == (T0 + 1500, T0 + 1500, 20, 20, 0, 1)


def test_only_keyless_records_still_create_one_file(tmp_path):
    recs = [krec(0, T0), krec(10, T0 + 1, "x", sys_flag=TRANSACTION_ROLLBACK_TYPE)]
    want = incremental(recs, 4, 5, tmp_path)
    assert len(want) == 1 and rebuilt(recs, 4, 5, tmp_path) == want
    assert rebuilt([], 4, 5, tmp_path) == [] == incremental([], 4, 5, tmp_path)


@pytest.mark.parametrize("seed", range(12))
def test_random_records_equal_the_incremental_path(seed, tmp_path):
    rnd = random.Random(seed)
    recs, off, ts = [], 0, T0
    for i in range(rnd.randrange(1, 120)):
        off += rnd.choice([0, 37, 100, 100, 250, -60])         # mostly forward, sometimes equal or back
        ts += rnd.choice([0, 300, 999, 1000, 2500, -4000])    # clock steps back too
        keys = " ".join(rnd.choice(["a", "b", "", "Aa", "BB", "polygenelubricants", f"k{i}"])
                        for _ in range(rnd.randrange(0, 5)))
        recs.append(krec(off, ts, keys, uniq=f"U{i}" if rnd.random() < 0.5 else None,
                         sys_flag=rnd.choice([0, 0, 0, TRANSACTION_ROLLBACK_TYPE, TRANSACTION_PREPARED_TYPE])))
    slots, items = rnd.choice([(1, 2), (3, 4), (4, 6), (16, 9)])
    want = incremental(recs, slots, items, tmp_path)
    cuts = sorted(rnd.sample(range(1, len(recs)), min(3, len(recs) - 1))) if len(recs) > 1 else []
    assert rebuilt(recs, slots, items, tmp_path, cuts) == want


# ============================================================================ CLI, inline

def test_inline_rebuild_is_byte_identical_to_put(store, tmp_path):
    want = index_bytes(store / "index")
    before = snapshot(store)
    r = reindex(store, "--out", tmp_path / "out", "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert index_bytes(tmp_path / "out") == want
    assert res["indexFiles"] == len(want) >= 3 and res["keysIndexed"] > res["messages"] == 70
    assert res["segments"] == len(list((store / "commitlog").iterdir())) and res["bytesRead"] > 0
    # --out leaves the store alone: no backup, no checkpoint change (the lock file may be created).
    after = snapshot(store)
    after.pop("lock", None), before.pop("lock", None)
    assert after == before and res["indexMsgTimestamp"] is None


def test_rebuild_into_the_store_keeps_a_backup_and_moves_the_checkpoint(store):
    want = index_bytes(store / "index")
    old_names = [p.name for p in list_index_files(store / "index")]
    cp_before = Checkpoint.load(store / "checkpoint")
    r = reindex(store, "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert index_bytes(store / "index") == want
    backup = Path(res["backupDir"])
    assert backup.parent == store and backup.name.startswith("index.bak-")
    assert [p.name for p in list_index_files(backup)] == old_names and index_bytes(backup) == want
    cp = Checkpoint.load(store / "checkpoint")
    ends = []
    for p in list_index_files(store / "index"):
        with IndexFile.open(p, 16, 64) as f:
            ends.append(f.header.endTimestamp)
    newest_end = max(ends)
    assert cp.indexMsgTimestamp == res["indexMsgTimestamp"] == newest_end
    assert cp.indexMsgTimestamp > cp_before.indexMsgTimestamp  # the last (not full) file is covered too
    assert (cp.physicMsgTimestamp, cp.logicsMsgTimestamp, cp.confirmPhyOffset) == (
        cp_before.physicMsgTimestamp, cp_before.logicsMsgTimestamp, cp_before.confirmPhyOffset)
    assert not [p for p in store.iterdir() if ".reindex-" in p.name]  # no staging left behind
    # The store still answers queries through the rebuilt index.
    q = run(["query-key", "--store", store, *READ_GEOM, "--topic", "TopicA", "--key", "c1", "--json"])
    assert q.exit_code == 0 and q.stdout.strip()


def test_replace_removes_the_old_index(store):
    want = index_bytes(store / "index")
    r = reindex(store, "--replace", "--json")
    assert r.exit_code == 0, r.output
    assert index_bytes(store / "index") == want
    assert not [p for p in store.iterdir() if p.name.startswith("index.bak")]
    res = json.loads(r.stdout)
    assert res["replaced"] is True and res["backupDir"] is None


def test_rebuild_after_the_index_is_gone(store):
    want = index_bytes(store / "index")
    shutil.rmtree(store / "index")
    r = reindex(store, "--json")
    assert r.exit_code == 0, r.output
    assert index_bytes(store / "index") == want and json.loads(r.stdout)["backupDir"] is None


def test_dry_run_writes_nothing(store, tmp_path):
    before = snapshot(store)
    r = reindex(store, "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["dryRun"] and res["indexFiles"] == len(list_index_files(store / "index"))
    assert snapshot(store) == before
    r = reindex(store, "--dry-run", "--out", tmp_path / "nowhere", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["dryRun"] is True and not (tmp_path / "nowhere").exists()
    assert snapshot(store) == before


def test_out_dir_with_index_files_needs_replace(store, tmp_path):
    out = tmp_path / "out"
    assert reindex(store, "--out", out).exit_code == 0
    (out / "20000101000000000").write_bytes(b"stale")
    (out / "notes.txt").write_text("keep me")
    assert_one_line_error(reindex(store, "--out", out), contains="--replace")
    r = reindex(store, "--out", out, "--replace")
    assert r.exit_code == 0, r.output
    assert index_bytes(out) == index_bytes(store / "index") and (out / "notes.txt").exists()


def test_unclean_store_is_refused(store):
    (store / "abort").write_text("4242")
    before = snapshot(store)
    assert_one_line_error(reindex(store), contains="recover")
    assert_one_line_error(reindex(store, "--dry-run"), contains="recover")
    assert snapshot(store) == before


def test_locked_store_is_refused(store):
    with lock_held(store, by_rmqtool=True):
        before = snapshot(store)
        assert_one_line_error(reindex(store), code=4, contains="locked")
        assert snapshot(store) == before
    assert reindex(store).exit_code == 0


def test_bad_inputs_give_one_line_errors(store, tmp_path):
    (tmp_path / "plain").mkdir()
    assert_one_line_error(run(["spark-reindex", "--store", tmp_path / "plain", "--master", "inline"]),
                          contains="not a RocketMQ store")
    assert_one_line_error(run(["spark-reindex", "--store", tmp_path / "missing", "--master", "inline"]),
                          contains="does not exist")
    assert_one_line_error(run(["spark-reindex", "--master", "inline"]), contains="--store")
    assert_one_line_error(run(["spark-reindex", "--store", store, "--hash-slots", "0", "--master", "inline"]),
                          contains="geometry")
    assert_one_line_error(run(["spark-reindex", "--store", store, "--hash-slots", "500000000", "--max-index",
                               "500000000", "--master", "inline"]), contains="int")
    assert_one_line_error(run(["spark-reindex", "--store", store, "--commitlog-file-size", "1000",
                               "--master", "inline"]), contains="commitlog")
    (tmp_path / "afile").write_text("x")
    assert_one_line_error(reindex(store, "--out", tmp_path / "afile"))


def test_corrupt_record_is_reported_and_the_rest_indexed(tmp_path):
    root = tmp_path / "s"
    recs = [rec(props={"KEYS": f"k{i}", "UNIQ_KEY": f"U{i}"}, store_timestamp=T0 + 10 * i) for i in range(40)]
    blobs = place(recs, 2048)
    paths = write_segments(root, blobs, 2048)
    data = bytearray(paths[0].read_bytes())
    data[4:8] = b"\x00\x00\x00\x01"  # first record's magic destroyed: segment 0 is unreadable
    paths[0].write_bytes(bytes(data))
    r = run(["spark-reindex", "--store", root, *READ_GEOM, "--master", "inline", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["anomalies"] and "warning" in r.stderr
    assert 0 < res["messages"] < 40 and res["keysIndexed"] == 2 * res["messages"]


# ============================================================================ Spark (local mode)


@pytest.mark.slow
def test_spark_rebuild_is_byte_identical_to_put(spark, store, tmp_path):
    want = index_bytes(store / "index")
    r = reindex(store, "--out", tmp_path / "out", "--json", master="local[2]")
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["master"] == "local[2]" and res["indexFiles"] == len(want) >= 3
    assert index_bytes(tmp_path / "out") == want
    assert not list((tmp_path / "out").glob(".*"))  # no temporary or staging names left


@pytest.mark.slow
def test_spark_into_store_with_backup_and_checkpoint(spark, store):
    want = index_bytes(store / "index")
    r = reindex(store, "--json", master="local[2]")
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert index_bytes(store / "index") == want == index_bytes(Path(res["backupDir"]))
    assert Checkpoint.load(store / "checkpoint").indexMsgTimestamp == res["indexMsgTimestamp"] > 0


@pytest.mark.slow
def test_spark_handles_offsets_going_backwards_like_inline(spark, tmp_path):
    # Records whose PHYSICALOFFSET fields go back across segments exercise the "already indexed" filter job.
    root = tmp_path / "s"
    recs = [rec(props={"KEYS": f"k{i} c{i % 3}"}, store_timestamp=T0 + 700 * i) for i in range(60)]
    blobs = place(recs, 2048, fake_phy=lambda i, pos: pos - 5000 if i % 9 == 4 else pos)
    write_segments(root, blobs, 2048)
    outs = {}
    for master in ("inline", "local[2]"):
        r = run(["spark-reindex", "--store", root, "--hash-slots", "8", "--max-index", "9", "--master", master,
                 "--out", tmp_path / master, "--json"])
        assert r.exit_code == 0, r.output
        outs[master] = (json.loads(r.stdout), index_bytes(tmp_path / master))
    (ri, bi), (rs, bs) = outs["inline"], outs["local[2]"]
    assert bi == bs and len(bi) >= 3
    assert ri["skippedAlreadyIndexed"] == rs["skippedAlreadyIndexed"] > 0
    # And both equal the broker's incremental path over the decoded records.
    decoded = []
    for seg in seg_infos(sorted((root / "commitlog").iterdir())):
        data = Path(seg.path).read_bytes()
        pos = 0
        while True:
            c = check_message(data, pos, check_crc=False)
            if c.status != "VALID":
                break
            decoded.append(c.record)
            pos += c.size
    assert incremental(decoded, 8, 9, tmp_path) == bi
