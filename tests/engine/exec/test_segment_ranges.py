"""Segment ranges (engine.exec.ranges): a segment cut into byte ranges that are scanned apart, each guessing
where its first record starts, settles to the one sequential walk, for both index formats, inline and Spark."""
from __future__ import annotations

import numpy as np
import pytest

from engine.broker.commitlog.message import encode_record
from engine.broker.commitlog.records import SegmentEnd, decode_segment
from engine.jobs.broker_index import scan_range, spark_reindex
from engine.broker.commitlog.ranges import find_record_start, segment_ranges
from engine.exec.ranges import RangeChain, segment_ends, settle
from engine.jobs.tiered_index import scan_range_tiered, tiered_reindex
from helpers import FUZZ_SEG, T0, fuzz_config, fuzz_store, index_bytes, rec, record_starts



def settled(units, scan_fn):
    """What SparkRunner.scan does, in this process: every range from its guess, then settle."""
    scans = {u.index: scan_fn(u) for u in units}
    rounds = []

    def rescan(redo):
        rounds.append(len(redo))
        for u in redo:
            scans[u.index] = scan_fn(u)
        return [scans[u.index].summary() for u in redo]

    settle(units, {i: s.summary() for i, s in scans.items()}, rescan)
    return [scans[u.index] for u in units], rounds


def sequential(units, scan_fn):
    chain, out = RangeChain(), []
    for u in units:
        sc = scan_fn(chain.exact(u))
        chain.record(sc.summary())
        out.append(sc)
    return out


def columns(scans, names):
    return {f: np.concatenate([getattr(s, f) for s in scans]).tolist() for f in names}


@pytest.mark.parametrize("step", [300, 1500, 5000])
def test_guessed_ranges_settle_to_the_sequential_walk(tmp_path, step):
    fuzz_store(tmp_path, 1)
    cfg = fuzz_config(tmp_path)
    whole = sequential(segment_ranges(cfg, FUZZ_SEG), scan_range)
    units = segment_ranges(cfg, step)
    assert any(u.start is None for u in units)
    got, rounds = settled(units, scan_range)
    names = ("rec_phy", "rec_ts", "rec_nkeys", "key_hash")
    assert columns(got, names) == columns(whole, names)
    for f in ("length_mismatches", "rollbacks", "phy_mismatches", "bytes_scanned"):
        assert sum(getattr(s, f) for s in got) == sum(getattr(s, f) for s in whole), f
    ends = segment_ends([s.summary() for s in got])
    assert ends == segment_ends([s.summary() for s in whole])
    assert [e["end_kind"] for e in ends][2] == "corrupt"
    if step == 300:
        assert rounds, "a range starting inside an embedded chain should have guessed wrong"


def test_tiered_guessed_ranges_settle_to_the_sequential_walk(tmp_path):
    fuzz_store(tmp_path, 2)
    cfg = fuzz_config(tmp_path)
    whole = sequential(segment_ranges(cfg, FUZZ_SEG), scan_range_tiered)
    got, _ = settled(segment_ranges(cfg, 700), scan_range_tiered)
    assert columns(got, ("rec_qid", "rec_size", "rec_ts", "rec_nkeys", "key_hash")) == \
        columns(whole, ("rec_qid", "rec_size", "rec_ts", "rec_nkeys", "key_hash"))
    topics = [[s.topics[t] for t in s.rec_topic] for s in got]
    assert sum(topics, []) == sum(([s.topics[t] for t in s.rec_topic] for s in whole), [])


def test_find_record_start_needs_a_chain_of_headers(tmp_path):
    fuzz_store(tmp_path, 3)
    data = (tmp_path / "commitlog" / f"{0:020d}").read_bytes()
    starts, _end = record_starts(data)
    for begin in (1, 500, 3000, 9000):
        guess = find_record_start(data, begin, None)
        real = next(s for s in starts if s >= begin)
        assert guess is not None and guess >= begin and guess <= real
    assert find_record_start(bytes(4096), 0, None) is None


def test_jobs_with_small_ranges_are_byte_identical(tmp_path):
    fuzz_store(tmp_path / "s", 4)
    cfg = fuzz_config(tmp_path / "s")
    outs = {}
    for step in (FUZZ_SEG, 1000, 333):
        r = spark_reindex(cfg, out=tmp_path / f"b{step}", master="inline", range_bytes=step)
        outs[step] = index_bytes(tmp_path / f"b{step}")
        t = tiered_reindex(cfg, tmp_path / f"t{step}", master="inline", hash_slot_num=8, index_num=40,
                           range_bytes=step)
        outs[("t", step)] = index_bytes(tmp_path / f"t{step}")
        assert r.segments == len(list((tmp_path / "s" / "commitlog").iterdir())) and r.anomalies
        assert len(r.scan_tasks) >= r.segments and t.index_files > 1
        assert all(x["started"] >= r.scan_started and x["seconds"] >= 0 for x in r.scan_tasks)
    assert outs[FUZZ_SEG] == outs[1000] == outs[333] and len(outs[FUZZ_SEG]) >= 3
    assert outs[("t", FUZZ_SEG)] == outs[("t", 1000)] == outs[("t", 333)]


@pytest.mark.slow
def test_spark_with_guessed_ranges_equals_inline(spark, tmp_path):
    fuzz_store(tmp_path / "s", 5)
    cfg = fuzz_config(tmp_path / "s")
    spark_reindex(cfg, out=tmp_path / "inline", master="inline")
    r = spark_reindex(cfg, out=tmp_path / "spark", master="local[2]", range_bytes=6000)
    assert index_bytes(tmp_path / "spark") == index_bytes(tmp_path / "inline")
    assert len(r.scan_tasks) > r.segments and all(t["seconds"] >= 0 for t in r.scan_tasks)


def test_decode_segment_reads_a_record_that_ends_the_buffer():
    # Fields of width 1, 2 or 4 in the last 8 bytes of the buffer (here PROPERTIESLEN, 0) are read in place.
    r = rec(props_raw=b"", store_timestamp=T0)
    data = encode_record(r) * 3
    items = list(decode_segment(data, 0))
    batch, end = items[0], items[-1]
    assert isinstance(end, SegmentEnd) and end.pos == len(data) and end.kind == "zero"
    assert len(batch) == 3 and batch.props_len.tolist() == [0, 0, 0] and batch.length_ok.all()
    assert batch.store_ts.tolist() == [T0] * 3


@pytest.mark.slow
def test_inline_worker_pool_equals_the_sequential_walk(tmp_path, monkeypatch):
    # Big commit logs are scanned by forked workers, ranges from guessed starts, and scans beyond the memory
    # budget wait on disk: the same files as range by range in memory.
    from engine.exec import runners

    fuzz_store(tmp_path / "s", 6)
    cfg = fuzz_config(tmp_path / "s")
    spark_reindex(cfg, out=tmp_path / "seq", master="inline", range_bytes=900)
    tiered_reindex(cfg, tmp_path / "tseq", master="inline", hash_slot_num=8, index_num=40, range_bytes=900)
    monkeypatch.setattr(runners, "INLINE_PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(runners, "INLINE_MEMORY_BUDGET", 0)
    r = spark_reindex(cfg, out=tmp_path / "pool", master="inline", range_bytes=900)
    tiered_reindex(cfg, tmp_path / "tpool", master="inline", hash_slot_num=8, index_num=40, range_bytes=900)
    assert index_bytes(tmp_path / "pool") == index_bytes(tmp_path / "seq") and r.index_files >= 3
    assert index_bytes(tmp_path / "tpool") == index_bytes(tmp_path / "tseq")


@pytest.mark.slow
def test_runners_run_other_per_item_work(spark):
    # The tiered flat store's dispatch runs its per-queue function through the same runners.
    from types import SimpleNamespace

    from engine.exec.runners import InlineRunner, SparkRunner

    def work(item):  # pickled by value for the Spark workers (this module is not importable there)
        return SimpleNamespace(index=item.index, summary=lambda: {"index": item.index, "double": 2 * item.index})

    items = [SimpleNamespace(index=i) for i in range(5)]
    seen = []
    got = InlineRunner().scan(items, lambda phase, done, total: seen.append(done), scan_fn=work)
    assert [d["double"] for d in got] == [0, 2, 4, 6, 8] and seen == [1, 2, 3, 4, 5]
    got = SparkRunner("local[2]").scan(items, lambda *a: None, scan_fn=work)
    assert sorted(d["double"] for d in got) == [0, 2, 4, 6, 8]
