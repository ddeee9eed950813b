"""The fast paths of spark-reindex (issue 13 item 6) give what the plain forms give: the radix order of the
index builder's chains, the counting sort of key lengths, the entry columns and pieces handed to the build
without copies, and the Spark runner answering the plan's questions from its scan files without a job."""
from __future__ import annotations

import numpy as np
import pytest

from engine.broker.index.build import slot_order
from engine.broker.index.keycolumns import by_length
from engine.jobs.broker_index import scan_range, spark_reindex
from engine.jobs.broker_plan import (accepted_count, entry_columns, entry_records, file_pieces, make_plan,
                                     probe_range)
from engine.progress import no_progress
from engine.broker.commitlog.ranges import segment_ranges
from helpers import fuzz_config, fuzz_store, index_bytes


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_slot_order_is_the_stable_order_by_slot(dtype):
    rnd = np.random.default_rng(11)
    for top, n in [(1, 50), (7, 1000), (65535, 4000), (65537, 4000), (2**31 - 1, 5000), (5_000_000, 200_000)]:
        slots = rnd.integers(0, top, n).astype(dtype)
        slots[: n // 10] = slots[n // 2: n // 2 + n // 10]  # plenty of shared slots: ties keep put order
        got = slot_order(slots)
        assert np.array_equal(got, np.argsort(slots, kind="stable"))


def test_slot_chains_are_the_same_by_radix_or_by_composite_sort(monkeypatch):
    from engine.broker.index import build

    rnd = np.random.default_rng(13)
    for top, n in [(1, 20), (997, 30_000), (5_000_000, 100_000), (2**31 - 1, 5000)]:
        slots = rnd.integers(0, top, n).astype(np.int32)
        radix = build.slot_chains(slots)
        monkeypatch.setattr(build, "RADIX_MAX_ITEMS", 0)
        composite = build.slot_chains(slots)
        monkeypatch.undo()
        assert all(np.array_equal(a, b) for a, b in zip(radix[:3], composite[:3])) and radix[3] == composite[3]
        assert radix[0].dtype == composite[0].dtype == np.int32 and radix[2].dtype == composite[2].dtype


def test_length_order_is_the_stable_order_for_any_length():
    rnd = np.random.default_rng(12)
    for top in (1, 40, 65535, 65536, 1 << 20):
        lengths = rnd.integers(0, top + 1, 3000)
        assert np.array_equal(by_length(lengths), np.argsort(lengths, kind="stable"))
    assert len(by_length(np.empty(0, dtype=np.int64))) == 0


def test_entry_columns_and_pieces_equal_the_record_gather(tmp_path):
    # A record's keys share its offset and time; the pieces of a range lying wholly in one file are the
    # scan's columns themselves (no copy), the pieces of a range cut between files are copies.
    fuzz_store(tmp_path / "s", 8)
    cfg = fuzz_config(tmp_path / "s")
    scans = [scan_range(u) for u in segment_ranges(cfg, 1 << 30)]  # whole segments: exact starts
    from engine.exec.runners import InlineRunner

    plan = make_plan(InlineRunner(scans), [sc.summary() for sc in scans], 16, 64)
    whole = cut = 0
    for sc in scans:
        for state in [(0, False), (0, True), (int(sc.rec_phy.max()) // 2 if sc.records else 0, True)]:
            hashes, phy, ts = entry_columns(sc, state)
            rec_no = entry_records(sc, state)
            assert np.array_equal(phy, sc.rec_phy[rec_no]) and np.array_equal(ts, sc.rec_ts[rec_no])
            assert len(hashes) == len(rec_no) == accepted_count(sc, state)
        if not sc.keys:
            continue
        for _, (_, h, _, _) in file_pieces(sc, plan):
            if len(h) == plan.entries[plan.position(sc.index)]:
                whole += 1
                assert np.shares_memory(h, sc.key_hash) or plan.filtered[plan.position(sc.index)]
            else:
                cut += 1
                assert not np.shares_memory(h, sc.key_hash)
    assert whole and cut  # the fuzzed store has both kinds


@pytest.mark.slow
def test_spark_answers_plan_questions_from_the_scan_files(spark, tmp_path, monkeypatch):
    from engine.exec.runners import InlineRunner, SparkRunner

    fuzz_store(tmp_path / "s", 9)
    cfg = fuzz_config(tmp_path / "s")
    units = segment_ranges(cfg, 6000)
    runner = SparkRunner("local[2]")  # the shared session
    try:
        got = runner.scan(units, no_progress, scan_range, scratch=str(tmp_path / "scratch"))
        want = InlineRunner().scan(units, no_progress, scan_range)
        assert [d["records"] for d in got] == [d["records"] for d in want]
        inline = InlineRunner([scan_range(u) for u in settled_units(units, want)])
        req = {d["index"]: (0, True) for d in got}
        probes = {d["index"]: ((0, False), [0], None) for d in got if d["keys"]}
        monkeypatch.setattr(runner.sc, "runJob", lambda *a, **k: pytest.fail("a Spark job for a plan question"))
        assert runner.ask(accepted_count, req) == inline.ask(accepted_count, req)
        assert runner.ask(probe_range, probes) == inline.ask(probe_range, probes)
    finally:
        runner.close()
    # The whole job on Spark still equals the inline one.
    spark_reindex(cfg, out=tmp_path / "inline", master="inline", range_bytes=6000)
    spark_reindex(cfg, out=tmp_path / "spark", master="local[2]", range_bytes=6000)
    assert index_bytes(tmp_path / "spark") == index_bytes(tmp_path / "inline")


def settled_units(units, summaries):
    """The ranges as the exact walk reaches them (their settled starts), for a scan in this process."""
    by_index = {d["index"]: d for d in summaries}
    out = []
    for u in units:
        d = by_index[u.index]
        out.append(u.voided() if d["end_kind"] == "void" else u.exact(d["first"]) if d["first"] is not None else u)
    return out


@pytest.mark.slow
def test_a_local_job_jvm_runs_with_the_local_jvm_options(spark):
    # The shared context was started by SparkRunner("local[2]"): the client compiler only, the serial collector.
    from engine.exec.runners import LOCAL_JVM_OPTIONS

    args = list(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert set(LOCAL_JVM_OPTIONS.split()) <= set(args)
    assert any(a.startswith("-Dlog4j2.configurationFile=") for a in args)  # the runner's own options are kept
