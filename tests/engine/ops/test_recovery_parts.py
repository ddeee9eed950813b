"""Building blocks of engine.ops: the chunked index builder equals the whole-file builder, placeholders are
records the broker accepts and skips, the walk resynchronises past damage but not into stale data."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from engine.broker.commitlog.log import open_commitlog
from engine.broker.config.brokerconf import load_config
from engine.broker.index.build import build_index_file_from_hashes
from engine.broker.commitlog.message import TRANSACTION_ROLLBACK_TYPE, VALID, check_message
from engine.broker.index.write import IndexFileBuilder, build_index_file_chunked
from engine.broker.commitlog.walk import HOLE, LOG_END, Gap, Window, walk
from engine.ops.recovery.apply import placeholder_record
from engine.broker.commitlog.placeholder import QUARANTINE_TOPIC
from engine.ops.recovery.plan import MIN_HOLE
from engine.ops.recovery.placeholder import Origin
from helpers import spy
from helpers import SEG, cfg_for, patch, put, sample_messages, seg_file


@pytest.mark.parametrize("trial", range(12))
def test_chunked_builder_writes_the_bytes_of_the_whole_file_builder(tmp_path, trial):
    rng = np.random.default_rng(trial)
    slots, items = int(rng.integers(1, 40)), int(rng.integers(2, 200))
    n = int(rng.integers(0, items))
    h = rng.integers(-2**31, 2**31, n).astype(np.int32)
    if n > 2:
        h[1] = -2**31  # abs(Integer.MIN_VALUE): the broker uses 0
    phy = np.sort(rng.integers(0, 10**6, n))
    ts = np.sort(rng.integers(0, 10**7, n)) + 1_700_000_000_000
    seed = (int(rng.integers(1, 1000)), 1_699_999_999_000) if trial % 2 else (0, 0)
    build_index_file_from_hashes(tmp_path / "whole", h, phy, ts, slots, items, *seed)
    build_index_file_chunked(tmp_path / "chunked", h, phy, ts, slots, items, *seed, chunk=int(rng.integers(1, 9)))
    assert (tmp_path / "whole").read_bytes() == (tmp_path / "chunked").read_bytes()
    same = IndexFileBuilder(slots, items, *seed, compare=tmp_path / "whole")
    same.add(h, phy, ts)
    assert same.finish()
    same.close()
    if n > 2:
        j = n // 2
        resumed = IndexFileBuilder(slots, items, *seed, path=tmp_path / "resumed")
        resumed.resume(tmp_path / "whole", j, int(ts[j - 1]))
        resumed.add(h[j:], phy[j:], ts[j:])
        resumed.finish()
        resumed.close()
        assert (tmp_path / "resumed").read_bytes() == (tmp_path / "whole").read_bytes()
        short = IndexFileBuilder(slots, items, *seed, compare=tmp_path / "whole")
        short.add(h[:-1], phy[:-1], ts[:-1])
        assert not short.finish()
        short.close()


@pytest.mark.parametrize("length", [MIN_HOLE, MIN_HOLE + 1, 150, 1000, 65536])
def test_placeholder_is_a_valid_rollback_record_of_exactly_the_hole(length):
    data = placeholder_record(4096 * 7 + 100, length, 1_700_000_000_123, "20260101-000000-1")
    assert len(data) == length
    r = check_message(data, 0, len(data), check_crc=True)
    assert r.status == VALID and r.size == length
    rec = r.record
    assert rec.tx_type == TRANSACTION_ROLLBACK_TYPE and rec.index_keys() == []
    assert rec.physical_offset == 4096 * 7 + 100 and rec.store_timestamp == 1_700_000_000_123
    if length >= 200:
        assert rec.topic == QUARANTINE_TOPIC and "RMQTOOL_QUARANTINED" in rec.properties


@pytest.mark.parametrize("length", [MIN_HOLE, 120, 150, 250, 300, 1000])
def test_placeholder_names_the_message_it_replaces_when_it_fits(length):
    """What a consumer reading the unit receives (engine.ops.recovery.placeholder): the unit's queue and queue
    offset in the record, and the origin and the manifest in its properties as far as the hole holds them."""
    origin = Origin("TopicFlood", 3, 184)
    data = placeholder_record(4096, length, 1_700_000_000_123, "quarantine/x/manifest.json", origin)
    r = check_message(data, 0, len(data), check_crc=True)
    assert r.status == VALID and r.size == length == len(data)
    rec = r.record
    assert (rec.queue_id, rec.queue_offset) == (3, 184) and rec.index_keys() == []
    if length >= 300:
        assert rec.properties == {"RMQTOOL_QUARANTINED": "quarantine/x/manifest.json",
                                  "RMQTOOL_ORIGIN_TOPIC": "TopicFlood", "RMQTOOL_ORIGIN_QUEUE_ID": "3",
                                  "RMQTOOL_ORIGIN_QUEUE_OFFSET": "184"}
    elif rec.properties:
        assert set(rec.properties) <= {"RMQTOOL_QUARANTINED", "RMQTOOL_ORIGIN_TOPIC", "RMQTOOL_ORIGIN_QUEUE_ID",
                                       "RMQTOOL_ORIGIN_QUEUE_OFFSET"}


def events(store):
    cfg = load_config(None, storePathRootDir=str(store), mappedFileSizeCommitLog=SEG)
    cl = open_commitlog(cfg)
    try:
        out = []
        for e in walk(cl):
            if isinstance(e, Window):
                out.extend(int(x) for x in e.offsets)
            elif isinstance(e, Gap):
                out.append((e.kind, e.offset, e.end_offset))
        return out
    finally:
        cl.close()


def test_walk_resynchronises_at_the_next_valid_record(tmp_path):
    store = tmp_path / "s"
    acks = put(store, sample_messages(30), tmp_path)
    p, pos = seg_file(store, acks[3]["commitLogOffset"])
    patch(p, pos + 4, b"\x00\x00\x00\x00")  # magic gone
    ev = events(store)
    gap = (HOLE, acks[3]["commitLogOffset"], acks[4]["commitLogOffset"])
    assert gap in ev
    assert [e for e in ev if isinstance(e, int)] == [a["commitLogOffset"] for i, a in enumerate(acks) if i != 3]


def test_walk_does_not_resynchronise_into_stale_records(tmp_path):
    """Records older than the last valid one, after the end, are what an earlier truncation left (pitfall 13):
    the log ends where the valid data ends."""
    store = tmp_path / "s"
    acks = put(store, sample_messages(12, start=0), tmp_path)
    end = acks[-1]["commitLogOffset"] + acks[-1]["storeSize"]
    p, pos = seg_file(store, acks[2]["commitLogOffset"])
    stale = bytearray(p.read_bytes()[pos:pos + acks[2]["storeSize"]])
    struct.pack_into(">q", stale, 28, end + 40)  # a valid older record stored right where it lies
    garbage = b"\x11" * 40
    rec = check_message(bytes(stale), 0, len(stale), check_crc=True)
    assert rec.status == VALID
    q, qpos = seg_file(store, end)
    patch(q, qpos, garbage + bytes(stale))
    ev = events(store)
    assert ev[-1][0] == LOG_END and ev[-1][1] == end


def test_the_helper_process_finds_what_the_walk_alone_finds(tmp_path, monkeypatch):
    """Long walks check CRCs and extract keys in a helper process; forced on for a small store, the plan (with
    a damaged body, a record torn inside its properties and an unreadable checkpoint, so every key is checked)
    is the same as without it."""
    import engine.ops.recovery.scan as scan
    from engine.ops.recovery import plan_recovery

    store = tmp_path / "s"
    acks = put(store, sample_messages(90), tmp_path)
    p, pos = seg_file(store, acks[7]["commitLogOffset"])
    patch(p, pos + 95, b"\xee")
    q, qpos = seg_file(store, acks[60]["commitLogOffset"])
    patch(q, qpos + acks[60]["storeSize"] - 14, b"99")  # UNIQ00000060 -> UNIQ00000099: the CRC does not see it
    (store / "checkpoint").write_bytes(b"\xff" * 4096)
    (store / "abort").write_text("1")
    alone = plan_recovery(cfg_for(store), full_scan=True).as_dict()
    monkeypatch.setattr(scan, "PARALLEL_CRC_BYTES", 0)
    helped = plan_recovery(cfg_for(store), full_scan=True).as_dict()
    assert helped == alone
    assert [x["offset"] for x in helped["skipped"]] == [acks[7]["commitLogOffset"]]
    assert helped["index"]["rebuilt"]  # the torn properties no longer carry the keys the index has


def test_the_helpers_prefetched_candidates_change_nothing(tmp_path, monkeypatch):
    """A long walk's helper also finds the next window's record candidates (decode_segment's prefetch, when it
    extracts no keys); with small windows, over a log with a damaged body and a torn record, the walk yields
    the same records and gaps as the walk alone."""
    import engine.broker.commitlog.records as records
    import engine.broker.commitlog.walk as logread

    store = tmp_path / "s"
    acks = put(store, sample_messages(300), tmp_path)
    p, pos = seg_file(store, acks[7]["commitLogOffset"])
    patch(p, pos + 95, b"\xee")
    q, qpos = seg_file(store, acks[200]["commitLogOffset"])
    patch(q, qpos, b"\x00\x00\x00\x05")  # TOTALSIZE 5: the walk resynchronises after it
    cfg = load_config(None, storePathRootDir=str(store), mappedFileSizeCommitLog=SEG)
    monkeypatch.setattr(records, "_VECTOR_MIN", 0)
    used = spy(monkeypatch, logread.CrcHelper, "prefetch", lambda self, f: f is not None)

    def run(parallel):
        cl = open_commitlog(cfg)
        try:
            out = []
            for e in walk(cl, 0, window=700, parallel_crc=parallel):
                if isinstance(e, Window):
                    out.append(e.offsets.tolist())
                elif isinstance(e, Gap):
                    out.append((e.kind, e.offset, e.end_offset, e.reason))
            return out
        finally:
            cl.close()
    alone = run(False)
    helped = run(True)
    assert used and all(used)
    assert helped == alone
    holes = [e[1] for e in alone if isinstance(e, tuple) and e[0] == HOLE]
    assert holes == [acks[7]["commitLogOffset"], acks[200]["commitLogOffset"]]


def test_verify_with_the_helper_process_reports_what_it_reports_alone(tmp_path, monkeypatch):
    import engine.broker.index.verify as vl
    from helpers import run

    store = tmp_path / "s"
    acks = put(store, sample_messages(90), tmp_path)
    q, qpos = seg_file(store, acks[60]["commitLogOffset"])
    patch(q, qpos + acks[60]["storeSize"] - 14, b"99")  # UNIQ00000060 -> UNIQ00000099
    args = ["inspect-index", "--store", store, "--verify", "--json", "--commitlog-file-size", str(SEG),
            "--hash-slots", "16", "--max-index", "64"]
    alone = run(args)
    monkeypatch.setattr(vl, "PARALLEL_BYTES", 0)
    helped = run(args)
    assert alone.exit_code == helped.exit_code == 3
    assert alone.stdout == helped.stdout and "no key of the message" in helped.stdout


def test_topic_groups_name_every_records_queue_across_windows():
    """TopicGroups keeps its groups from window to window; every record's group is its own (topic, queue id),
    for short topics, long ones that differ only in the middle (the same hash: compared byte for byte), and
    new queues that appear in later windows."""
    import random
    from pathlib import Path

    from engine.broker.commitlog.message import MessageRecord, encode_record
    from engine.broker.commitlog.records import RecordBatch, decode_segment
    from engine.broker.commitlog.segments import Segment
    from engine.broker.commitlog.walk import TopicGroups

    rnd = random.Random(3)
    topics = ["A", "TopicB", "AAAAAAAA-one-BBBBBBBB", "AAAAAAAA-two-BBBBBBBB", "AAAAAAAA-xyz-BBBBBBBB", "%RETRY%g1"]
    buf, want = bytearray(), []
    for i in range(400):
        t = rnd.choice(topics[:3] if i < 150 else topics)  # later windows bring new groups
        qid = rnd.randrange(3)
        buf += encode_record(MessageRecord(topic=t, body=b"x" * rnd.randrange(50), queue_id=qid,
                                           physical_offset=len(buf)))
        want.append((t, qid))
    buf = bytes(buf)
    seg = Segment(Path("/nonexistent/00000000000000000000"), 0, len(buf), len(buf))
    groups, got = TopicGroups(), []
    for item in decode_segment(buf, window=2000):
        if isinstance(item, RecordBatch):
            inv, keys = groups(Window(seg, buf, item))
            got += [keys[g] for g in inv.tolist()]
    assert got == want
    assert len(groups.keys) == len(set(want))


@pytest.mark.parametrize("cq_damage", ["none", "garbage", "backwards", "missing-units"])
def test_queue_hints_change_no_plan(tmp_path, monkeypatch, cq_damage):
    """The recovery walk follows the record starts its consume queues hold (scan.QueueHints); with the queues
    sane or damaged (offsets into the middle of records, offsets going back, units lost) and the log damaged
    (a bad body, a torn record), the plan is the one the walk makes without hints."""
    import engine.broker.commitlog.records as records
    import engine.ops.recovery.scan as scan
    from engine.ops.recovery import plan_recovery

    store = tmp_path / "s"
    acks = put(store, sample_messages(240), tmp_path)
    p, pos = seg_file(store, acks[30]["commitLogOffset"])
    patch(p, pos + 95, b"\xee")
    q, qpos = seg_file(store, acks[150]["commitLogOffset"])
    patch(q, qpos, b"\x00\x00\x00\x05")
    cq = sorted((store / "consumequeue" / "TopicA" / "1").iterdir())[0]
    units = bytearray(cq.read_bytes())
    if cq_damage == "garbage":
        for u in (3, 9, 17):
            struct.pack_into(">q", units, u * 20, acks[40]["commitLogOffset"] + 17)
    elif cq_damage == "backwards":
        struct.pack_into(">q", units, 12 * 20, 5)
    elif cq_damage == "missing-units":
        units[5 * 20:] = bytes(len(units) - 5 * 20)
    cq.write_bytes(bytes(units))
    ck = bytearray((store / "checkpoint").read_bytes())
    ck[:24] = struct.pack(">qqq", 1000, 1000, 1000)  # older than every record: the walk starts at the first one
    (store / "checkpoint").write_bytes(bytes(ck))
    (store / "abort").write_text("1")
    monkeypatch.setattr(records, "_VECTOR_MIN", 0)
    monkeypatch.setattr(scan, "WALK_WINDOW", 1500)
    monkeypatch.setattr(scan, "HINT_MAX_QUEUES", -1)  # no hints
    alone = plan_recovery(cfg_for(store)).as_dict()
    assert alone["scanStartOffset"] == 0
    monkeypatch.setattr(scan, "HINT_MAX_QUEUES", 1024)
    asked = spy(monkeypatch, scan.QueueHints, "__call__", lambda self, got: len(got))
    hinted = plan_recovery(cfg_for(store)).as_dict()
    assert sum(asked) > 100  # the queues did name record starts
    assert hinted == alone
    assert [x["offset"] for x in hinted["skipped"]] == [acks[30]["commitLogOffset"], acks[150]["commitLogOffset"]]


def test_the_helper_keeps_no_finished_job(tmp_path, monkeypatch):
    """CrcHelper drops the jobs it knows are done: each holds its result (a window's key columns), and a long
    walk over many windows must not keep them all (memory would grow with the log): at most HELPER_JOBS are
    outstanding, beyond which this process checks the window itself."""
    import engine.broker.commitlog.records as records
    import engine.broker.commitlog.walk as logread

    store = tmp_path / "s"
    put(store, sample_messages(300), tmp_path)
    cfg = load_config(None, storePathRootDir=str(store), mappedFileSizeCommitLog=SEG)
    monkeypatch.setattr(records, "_VECTOR_MIN", 0)
    held = spy(monkeypatch, logread.CrcHelper, "_track", lambda self, busy: len(self.jobs))
    cl = open_commitlog(cfg)
    try:
        windows = sum(isinstance(e, Window) for e in walk(cl, 0, window=700, parallel_crc=True, parallel_keys=True))
    finally:
        cl.close()
    assert windows > 20 and len(held) >= windows
    assert max(held) <= logread.HELPER_JOBS  # the windows handed out, waiting or running
