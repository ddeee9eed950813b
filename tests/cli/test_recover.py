"""rmqtool recover: both modes, the broker's own damage test, crash states against an uninterrupted put,
the index the broker would lose (RocketMQ issues 3868, 8007), --dry-run, the lock."""
from __future__ import annotations

from helpers import REPO
import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engine.broker.config.checkpoint import Checkpoint
from engine.broker.consumequeue.queue import ConsumeQueue, list_queues
from engine.broker.layout import list_index_files
from engine.ops.recovery import apply_recovery, plan_recovery
from helpers import (SEG, SEG_GEOM, assert_all_found, cfg_for, cli, data_bytes, found, patch, put,
                     recover_json, sample_messages, seg_file, snapshot, verify_ok)



def crash_put(store: Path, msgs: list[dict], tmp: Path) -> None:
    """Put with sync flush in another process that then dies without any shutdown (as SIGKILL leaves it)."""
    inp = tmp / f"crash-{time.monotonic_ns()}.jsonl"
    inp.write_text("".join(json.dumps(m) + "\n" for m in msgs))
    code = textwrap.dedent(f"""
        import json, os
        from engine.broker.config.brokerconf import load_config
        from engine.broker.store import MessageStore, message_from_json
        cfg = load_config(None, storePathRootDir={str(store)!r}, mappedFileSizeCommitLog={SEG},
                          maxHashSlotNum=16, maxIndexNum=64)
        st = MessageStore(cfg, writable=True, create=True)
        for line in open({str(inp)!r}):
            st.put(message_from_json(json.loads(line)), sync_flush=True)
        os._exit(9)
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 9, r.stderr
    assert (store / "abort").exists()


def hashes(store: Path) -> dict:
    """Content hash and mtime of every file: "changes nothing" means neither moves."""
    return snapshot(store)


def assert_same_data(a: Path, b: Path) -> None:
    da, db = data_bytes(a), data_bytes(b)
    assert sorted(da) == sorted(db)
    diff = [k for k in da if da[k] != db[k]]
    assert not diff, f"differs from an uninterrupted put: {diff}"


# ------------------------------------------------------------------------------------------- consistent


def test_consistent_store_is_left_byte_identical(tmp_path):
    store = tmp_path / "s"
    put(store, sample_messages(80), tmp_path)
    before = hashes(store)
    r = cli("recover", "--store", str(store), *SEG_GEOM)  # the text view: exit 0 (cli checks it)
    assert r.stdout.strip() and hashes(store) == before
    d = recover_json(store)
    assert d["consistent"] and d["mode"] == "normal" and not d["changed"] and d["actions"] == []
    assert hashes(store) == before


def test_dry_run_changes_nothing_and_predicts_the_repair(tmp_path):
    store = tmp_path / "s"
    acks = put(store, sample_messages(60), tmp_path)
    last = acks[-1]
    p, pos = seg_file(store, last["commitLogOffset"])
    patch(p, pos + 30, bytes(20))  # a torn record
    (store / "abort").write_text("1")
    before = hashes(store)
    plan = recover_json(store, "--dry-run")
    human = cli("recover", "--store", str(store), "--dry-run", *SEG_GEOM).stdout
    assert hashes(store) == before
    assert "dry run" in human and "would" in human
    assert plan["dryRun"] and not plan["changed"]
    assert plan["maxOffsetAfter"] == last["commitLogOffset"]
    assert plan["truncatedRecords"] == 1 and plan["truncatedBytes"] == last["storeSize"]
    assert plan["consumeQueues"]["unitsRemoved"] == 1
    done = recover_json(store)
    for k in ("maxOffsetAfter", "truncatedBytes", "truncatedRecords", "recordsScanned", "scanStartOffset"):
        assert done[k] == plan[k], k
    assert done["consumeQueues"]["unitsRemoved"] == plan["consumeQueues"]["unitsRemoved"]
    assert done["index"]["rebuilt"] == plan["index"]["rebuilt"]
    assert not (store / "abort").exists()


# ------------------------------------------------------------------------------------------- broker's damage test


@pytest.mark.parametrize("abort", [False, True], ids=["normal", "abnormal"])
def test_broker_damage_last_message(tmp_path, abort):
    """DefaultMessageStoreTest.test_recover_damageLastMessage / test_recover_abort: 16 zero bytes from the topic
    length of the last message; recovery ends the log at that message and the queue at 100 units."""
    store = tmp_path / "s"
    sent = sample_messages(101, topic="recoverTopic", queue_id=0)
    acks = put(store, sent, tmp_path)
    last_phy = acks[99]["commitLogOffset"] + acks[99]["storeSize"]
    assert last_phy == acks[100]["commitLogOffset"]
    p, pos = seg_file(store, last_phy)
    body_len = struct.unpack(">i", p.read_bytes()[pos + 84:pos + 88])[0]
    patch(p, pos + 84 + body_len + 4, bytes(16))
    if abort:
        (store / "abort").write_text("")  # 4.9.x leaves it empty
    d = recover_json(store)
    assert d["mode"] == ("abnormal" if abort else "normal")
    assert d["maxOffsetAfter"] == last_phy
    assert d["lastValidOffset"] == acks[99]["commitLogOffset"]
    assert d["truncatedRecords"] == 1
    assert "length mismatch" in d["stopReason"] or "corrupt" in d["stopReason"]
    cq = ConsumeQueue(store, "recoverTopic", 0, 6_000_000)
    try:
        assert cq.max_offset_in_queue == 100
    finally:
        cq.close()
    assert not (store / "abort").exists()
    cp = Checkpoint.load(store / "checkpoint")
    assert cp.confirmPhyOffset == acks[99]["commitLogOffset"]
    assert cp.physicMsgTimestamp == sent[99]["storeTimestamp"]
    verify_ok(store)
    assert found(store, "recoverTopic", "k100") == []  # the damaged message is gone from the index too
    assert found(store, "recoverTopic", "k99") == [acks[99]["commitLogOffset"]]
    # The store takes new messages right where the damaged one was.
    new = put(store, sample_messages(1, start=500, topic="recoverTopic", queue_id=0), tmp_path)
    assert new[0]["commitLogOffset"] == last_phy and new[0]["queueOffset"] == 100
    verify_ok(store)


# ------------------------------------------------------------------------------------------- crash states


def test_crash_recovery_matches_an_uninterrupted_put(tmp_path):
    """A writer killed after its last sync-flushed put: after recover, the commit log, consume queues and index
    are byte for byte what one uninterrupted put of the same messages writes, and stay so as puts go on."""
    crashed, reference = tmp_path / "crashed", tmp_path / "reference"
    first, second, third = sample_messages(40), sample_messages(45, start=40), sample_messages(20, start=85)
    put(crashed, first, tmp_path)
    crash_put(crashed, second, tmp_path)
    d = recover_json(crashed)
    assert d["mode"] == "abnormal"
    put(reference, first + second, tmp_path)
    assert_same_data(crashed, reference)
    verify_ok(crashed)
    put(crashed, third, tmp_path)
    put(reference, third, tmp_path)
    assert_same_data(crashed, reference)


def test_torn_record_and_lost_index_file_after_a_crash(tmp_path):
    """The last record half written and the newest index file gone: recover drops the record, its units and
    index items, and rebuilds the index file; equal to a put without the dropped message."""
    crashed, reference = tmp_path / "crashed", tmp_path / "reference"
    first, second = sample_messages(30), sample_messages(39, start=30)  # the last record does not start a segment
    put(crashed, first, tmp_path)
    crash_put(crashed, second, tmp_path)
    with_keys = list_index_files(crashed / "index")
    # The torn write: the record's length and magic made it, the rest did not.
    cfg = cfg_for(crashed)
    plan = plan_recovery(cfg)
    last = plan.last_valid_offset
    p, pos = seg_file(crashed, last)
    size = struct.unpack(">i", p.read_bytes()[pos:pos + 4])[0]
    patch(p, pos + 8, bytes(size - 8))
    with_keys[-1].unlink()
    d = recover_json(crashed)
    assert d["maxOffsetAfter"] == last and d["truncatedRecords"] == 1
    assert d["consumeQueues"]["unitsRemoved"] == 1
    assert d["index"]["created"] or d["index"]["rebuilt"]
    put(reference, first + second[:-1], tmp_path)
    assert_same_data(crashed, reference)
    verify_ok(crashed)
    assert found(crashed, second[-1]["topic"], second[-1]["keys"][0]) == []


def test_index_the_broker_would_delete_is_kept_findable(tmp_path):
    """RocketMQ 3868/8007: after a crash the broker deletes every index file newer than indexMsgTimestamp and
    re-indexes only from its recovery start. With an old indexMsgTimestamp and no newer index files left,
    rmqtool re-indexes every surviving message."""
    store = tmp_path / "s"
    sent = sample_messages(90)
    acks = put(store, sent, tmp_path)
    files = list_index_files(store / "index")
    assert len(files) >= 4
    original = [f.read_bytes() for f in files]
    for f in files[1:]:
        f.unlink()  # what the broker's IndexService.load(lastExitOK=false) leaves
    cp = Checkpoint.load(store / "checkpoint")
    cp.indexMsgTimestamp = 0
    cp.save(store / "checkpoint")
    (store / "abort").write_text("1")
    d = recover_json(store)
    assert d["index"]["created"] or d["index"]["rebuilt"]
    assert [f.read_bytes() for f in list_index_files(store / "index")] == original
    verify_ok(store)
    assert_all_found(store, acks, sent)


def test_consume_queue_units_are_re_dispatched(tmp_path):
    """Consume queues lost their unflushed tail (and one queue entirely) in a crash; the checkpoint's
    logicsMsgTimestamp says how far they were flushed, so recovery re-dispatches from there (format §7.4, §7.5)."""
    store = tmp_path / "s"
    sent = sample_messages(50)
    put(store, sent, tmp_path)
    before = data_bytes(store)
    q = store / "consumequeue" / "TopicA" / "0" / f"{0:020d}"
    patch(q, 20 * 3, bytes(20 * 3))  # a hole: units after it are stale and must not survive
    shutil.rmtree(store / "consumequeue" / "TopicB" / "1")
    cp = Checkpoint.load(store / "checkpoint")
    cp.logicsMsgTimestamp = sent[0]["storeTimestamp"]
    cp.save(store / "checkpoint")
    (store / "abort").write_text("1")
    d = recover_json(store)
    assert d["brokerStartSegment"] == f"{0:020d}"
    assert d["consumeQueues"]["unitsRemoved"] == 3 and d["consumeQueues"]["unitsAdded"] > 6
    assert data_bytes(store) == before


def test_no_check_crc_keeps_a_record_with_a_bad_body(tmp_path):
    store = tmp_path / "s"
    acks = put(store, sample_messages(30), tmp_path)
    last = acks[-1]
    p, pos = seg_file(store, last["commitLogOffset"])
    data = p.read_bytes()
    patch(p, pos + 90, bytes([data[pos + 90] ^ 0x55]))  # inside the body
    (store / "abort").write_text("1")
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    d = recover_json(copy, "--no-check-crc")
    assert d["maxOffsetAfter"] == last["commitLogOffset"] + last["storeSize"] and not d["checkCrc"]
    d = recover_json(store)
    assert d["maxOffsetAfter"] == last["commitLogOffset"] and "CRC" in d["stopReason"]


def test_index_safe_starts_at_the_index_durable_point(tmp_path):
    store = tmp_path / "s"
    sent = sample_messages(90)
    put(store, sent, tmp_path)
    cp = Checkpoint.load(store / "checkpoint")
    cp.indexMsgTimestamp = sent[5]["storeTimestamp"]
    cp.save(store / "checkpoint")
    (store / "abort").write_text("1")
    plain = recover_json(store, "--dry-run")
    safe = recover_json(store, "--dry-run", "--index-safe")
    assert safe["indexSafe"] and not plain["indexSafe"]
    assert safe["brokerStartSegment"] == f"{0:020d}"
    assert plain["brokerStartSegment"] > safe["brokerStartSegment"]


def test_full_scan_keeps_every_valid_record_after_a_damaged_one(tmp_path):
    """Damage the checkpoint says cannot be there (an old segment) is outside the broker's scan, and rmqtool's
    default scan too. --full-scan finds it, keeps every valid record after it (issue 10 item 4), copies the
    damaged bytes to the quarantine and puts a placeholder record the broker accepts in their place."""
    store = tmp_path / "s"
    sent = sample_messages(90)
    acks = put(store, sent, tmp_path)
    victim = acks[5]
    p, pos = seg_file(store, victim["commitLogOffset"])
    data = p.read_bytes()
    patch(p, pos + 90, bytes([data[pos + 90] ^ 0x01]))  # one flipped bit in an old body
    damaged = p.read_bytes()[pos:pos + victim["storeSize"]]
    d = recover_json(store, "--dry-run")
    assert d["consistent"] and d["scanStartOffset"] > victim["commitLogOffset"]
    dry = recover_json(store, "--full-scan", "--dry-run")
    d = recover_json(store, "--full-scan")
    assert d["fullScan"] and d["scanStartOffset"] == 0
    assert d["maxOffsetAfter"] == acks[-1]["commitLogOffset"] + acks[-1]["storeSize"]
    assert d["truncatedRecords"] == 0 and d["truncatedBytes"] == 0
    assert [(x["offset"], x["bytes"], x["repair"]) for x in d["skipped"]] == \
        [(victim["commitLogOffset"], victim["storeSize"], "placeholder")]
    assert "CRC" in d["skipped"][0]["reason"]
    assert dry["skipped"] == d["skipped"] and dry["actions"] == d["actions"]
    # The damaged bytes are in the quarantine, named in its manifest.
    qdir = store / d["quarantineDir"]
    manifest = json.loads((qdir / "manifest.json").read_text())
    assert manifest["complete"]
    (entry,) = [e for e in manifest["entries"] if e["kind"] == "range" and e["path"].startswith("commitlog")]
    assert entry["offset"] == pos and entry["length"] == victim["storeSize"]
    assert (qdir / entry["stored"]).read_bytes() == damaged
    # In their place: a valid ROLLBACK record (the broker's recovery walks on; no unit, no index key).
    r = cli("get", "--store", str(store), "--offset", str(victim["commitLogOffset"]), "--json", *SEG_GEOM[:2])
    got = json.loads(r.stdout)
    assert got["topic"] == "rmq_sys_rmqtool_quarantine" and got["transactionType"] == "ROLLBACK"
    assert got["storeSize"] == victim["storeSize"]
    verify_ok(store)
    kept = [(a, m) for i, (a, m) in enumerate(zip(acks, sent)) if i != 5]
    assert_all_found(store, [a for a, _ in kept], [m for _, m in kept])
    assert found(store, sent[5]["topic"], sent[5]["keys"][0]) == []
    again = recover_json(store, "--full-scan")
    assert again["consistent"] and not again["changed"] and again["skipped"] == []


@pytest.mark.parametrize("kind", ["garbage", "short", "missing"])
def test_unreadable_checkpoint_rewinds_and_is_rewritten(tmp_path, kind):
    store = tmp_path / "s"
    sent = sample_messages(40)
    acks = put(store, sent, tmp_path)
    cp = store / "checkpoint"
    if kind == "garbage":
        cp.write_bytes(b"\xff" * 4096)
    elif kind == "short":
        cp.write_bytes(cp.read_bytes()[:12])
    else:
        cp.unlink()
    (store / "abort").write_text("1")
    r = cli("get", "--store", str(store), "--offset", "0", "--commitlog-file-size", str(SEG), code=None)
    assert r.exit_code == 0 or len(r.stderr.strip().splitlines()) == 1
    d = recover_json(store)
    assert not d["checkpointReadable"] and d["brokerStartSegment"] == f"{0:020d}"
    got = Checkpoint.load(cp)
    assert got.physicMsgTimestamp == sent[-1]["storeTimestamp"]
    assert got.confirmPhyOffset == acks[-1]["commitLogOffset"]
    verify_ok(store)


def test_segments_after_the_end_are_deleted_and_the_tail_zeroed(tmp_path):
    store = tmp_path / "s"
    acks = put(store, sample_messages(30), tmp_path)
    segs = sorted((store / "commitlog").iterdir())
    end = acks[-1]["commitLogOffset"] + acks[-1]["storeSize"]
    # Stale bytes after the end (what the broker's truncation leaves) and two segments after the last one.
    p, pos = seg_file(store, end)
    patch(p, pos + 10, b"stale bytes")
    nxt = int(segs[-1].name) + SEG
    (store / "commitlog" / f"{nxt:020d}").write_bytes(bytes(SEG))
    (store / "commitlog" / f"{nxt + SEG:020d}").write_bytes(os.urandom(SEG))
    d = recover_json(store)
    assert d["maxOffsetAfter"] == end
    assert d["commitLog"]["segmentsDeleted"] == [f"{nxt:020d}", f"{nxt + SEG:020d}"]
    assert sorted((store / "commitlog").iterdir()) == segs
    assert not any(p.read_bytes()[pos:])


def test_an_interrupted_recovery_is_recovered_again(tmp_path, monkeypatch):
    """Crash in the middle of applying (after the commit log was cut, before the index was written)."""
    import engine.ops.recovery.apply as rec

    store, reference = tmp_path / "s", tmp_path / "ref"
    first = sample_messages(69)
    put(store, first[:30], tmp_path)
    crash_put(store, first[30:], tmp_path)
    cfg = cfg_for(store)
    plan = plan_recovery(cfg)
    p, pos = seg_file(store, plan.last_valid_offset)
    size = struct.unpack(">i", p.read_bytes()[pos:pos + 4])[0]
    patch(p, pos + 84, bytes(size - 84))  # torn: the header made it to disk, the rest did not
    plan = plan_recovery(cfg)
    assert plan.truncated_records == 1 and plan.index.changed

    def boom(*a, **kw):
        raise KeyboardInterrupt("power cut")

    monkeypatch.setattr(rec, "_publish_index", boom)
    with pytest.raises(KeyboardInterrupt):
        apply_recovery(cfg, plan)
    monkeypatch.undo()
    assert (store / "abort").exists()  # still marked unclean
    d = recover_json(store)
    assert d["mode"] == "abnormal"
    put(reference, first[:-1], tmp_path)
    assert_same_data(store, reference)
    verify_ok(store)


def test_writer_killed_before_its_first_write(tmp_path):
    """Only the abort marker exists (put died right after marking the store): put refuses, recover clears it."""
    store = tmp_path / "s"
    store.mkdir()
    (store / "abort").write_text("4242")
    r = cli("put", "--store", str(store), "--topic", "T", "--body", "x", *SEG_GEOM, code=2)
    assert "recover" in r.stderr
    d = recover_json(store)
    assert d["mode"] == "abnormal" and d["maxOffsetAfter"] == 0 and not (store / "abort").exists()
    assert put(store, sample_messages(3), tmp_path)[0]["commitLogOffset"] == 0


def test_not_a_store_is_a_one_line_error(tmp_path):
    (tmp_path / "empty").mkdir()
    r = cli("recover", "--store", str(tmp_path / "empty"), code=2)
    assert r.stderr.count("\n") == 1 and "not a RocketMQ store" in r.stderr


def test_wrong_index_geometry_is_refused_not_rebuilt(tmp_path):
    store = tmp_path / "s"
    put(store, sample_messages(30), tmp_path)
    (store / "abort").write_text("1")
    before = hashes(store)
    r = cli("recover", "--store", str(store), "--commitlog-file-size", str(SEG), "--hash-slots", "32",
            "--max-index", "64", code=2)
    assert r.stderr.count("\n") == 1 and "--hash-slots 16 --max-index 64" in r.stderr
    assert hashes(store) == before


# ------------------------------------------------------------------------------------------- the lock


@pytest.fixture
def locked(tmp_path):
    """Hold the store lock from another process (fcntl locks are per process)."""
    procs = []

    def lock(store: Path):
        code = ("import sys, time\nfrom engine.broker.config.lock import StoreLock\nStoreLock(sys.argv[1]).acquire()\n"
                "print('locked', flush=True)\ntime.sleep(60)\n")
        p = subprocess.Popen([sys.executable, "-c", code, str(store)], cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "locked"
        procs.append(p)
        return p

    yield lock
    for p in procs:
        p.kill()
        p.wait()


@pytest.mark.parametrize("command", [
    ["recover"],
    ["clean", "--force-now"],
    ["put", "--topic", "TopicA", "--body", "x"],
])
def test_locked_store_is_refused_and_unchanged(tmp_path, locked, command):
    store = tmp_path / "s"
    acks = put(store, sample_messages(40), tmp_path)
    p, pos = seg_file(store, acks[-1]["commitLogOffset"])
    patch(p, pos + 20, bytes(8))
    if command[0] != "put":
        (store / "abort").write_text("1")
    before = hashes(store)
    locked(store)
    r = cli(command[0], "--store", str(store), *command[1:], *SEG_GEOM, code=4)
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and "locked" in r.stderr
    assert hashes(store) == before
    # Read-only commands still work on a locked store; recover --dry-run says the plan may be stale.
    r = cli("recover", "--store", str(store), "--dry-run", *SEG_GEOM)
    assert "locked" in r.stderr
    assert hashes(store) == before


def test_recover_dispatches_a_stored_topic_longer_than_a_client_may_send(tmp_path):
    """RocketMQ 5 stores a topic of more than 127 characters in the v2 record layout (the golden commit log holds one
    of 150): recover dispatches it like any other (a put of such a topic is still refused)."""
    from helpers import GOLDEN, run

    store = tmp_path / "s"
    (store / "commitlog").mkdir(parents=True)
    for seg in ("00000000000000000000", "00000000000000004096"):
        shutil.copy(GOLDEN / "commitlog" / seg, store / "commitlog" / seg)
    expected = [json.loads(line) for line in (GOLDEN / "commitlog" / "messages.jsonl").read_text().splitlines()]
    long_topic = next(m["topic"] for m in expected if len(m["topic"]) > 127)
    r = run(["recover", "--store", store, "--commitlog-file-size", "4096", "--json"])
    assert r.exit_code == 0, r.stderr
    queues = {(t, q) for t, q in list_queues(store)}
    assert {(m["topic"], m["queueId"]) for m in expected if m["type"] == "MESSAGE"} <= queues
    r = run(["queues", "--store", store, "--topic", long_topic, "--json"])
    assert r.exit_code == 0, r.stderr
    assert [q["maxOffset"] for q in json.loads(r.stdout)["queues"]] == [1]
    r = run(["put", "--store", store, "--topic", long_topic, "--body", "x", "--commitlog-file-size", "4096"])
    assert r.exit_code == 2 and "127" in r.stderr
