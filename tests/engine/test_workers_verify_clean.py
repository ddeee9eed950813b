"""--workers N on `tiered verify`, `timer verify` and `clean` (its survey) (issue 32): the per-queue and per-chunk
work runs on worker processes with the same JSON (clock values aside) and exit code as on one; a worker that dies
fails the command cleanly (one line, exit 1, no file changed)."""
from __future__ import annotations

import json
import shutil

import pytest

from helpers import (SEG_GEOM, assert_one_line_error, cli, put, sample_messages, snapshot)
from tiered_flat_helpers import F1_META, F1_TIER

CQ = ["--cq-file-size", "200"]  # ten units a consume-queue file: clean deletes some
GEOM = [*SEG_GEOM, *CQ]
NOW = "2026-11-27T12:20:00Z"  # after the t1 broker's stop: the time rules judged as then


def _json(r, swap: tuple = ("", "")) -> dict:
    d = json.loads(r.stdout.replace(*swap) if swap[0] else r.stdout)
    d.pop("now", None)  # clean's plan is stamped with the clock
    return d


def _both(*args: str) -> tuple:
    return cli(*args, "--workers", "1", code=None), cli(*args, "--workers", "2", code=None)


def _tier_copy(tmp_path):
    tier = tmp_path / "tier"
    shutil.copytree(F1_TIER, tier)
    return tier


def _flip(path, pos: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= 0xFF
    path.write_bytes(bytes(data))


def test_tiered_verify_same_json_on_the_golden_tier(jobs):
    one, two = _both("tiered", "verify", "--tiered-store-path", str(F1_TIER), "--metadata", str(F1_META), "--json")
    assert one.exit_code == two.exit_code == 0
    assert _json(one) == _json(two)
    assert (_json(two)["queues"], _json(two)["records"], _json(two)["units"]) == (4, 160, 160)
    assert "_check_segments" in {n for n, _ in jobs}  # the queues' records and units were checked on workers


def test_tiered_verify_same_findings_on_a_damaged_tier(tmp_path, jobs):
    tier = _tier_copy(tmp_path)
    queue = next(tier.glob("*/broker-a/TopicTest/0"))
    _flip(queue / "COMMIT_LOG" / ("cfcd2084" + "0" * 20), 4)            # the first record's magic
    cq = sorted((queue / "CONSUME_QUEUE").iterdir())[-1]
    _flip(cq, 3)                                                           # a unit's commit-log offset
    one, two = _both("tiered", "verify", "--tiered-store-path", str(tier), "--metadata", str(F1_META), "--json")
    assert one.exit_code == two.exit_code == 3
    a, b = _json(one), _json(two)
    assert a == b and a["problemCount"] >= 2
    assert {"tiered-record-damaged", "tiered-cq-unit"} <= {f["kind"] for f in a["findings"]}
    assert "_check_segments" in {n for n, _ in jobs}


def test_timer_verify_same_json(t1, jobs):
    _, conf = t1
    one, two = _both("timer", "verify", "-c", str(conf), "--now", NOW, "--json")
    assert one.exit_code == two.exit_code == 0
    assert _json(one) == _json(two) and _json(one)["checked"]["pendingMessages"] > 50
    assert "_walk_job" in {n for n, _ in jobs}  # the chains walked and their records read on workers


def test_timer_verify_same_json_with_a_damaged_record(t1, jobs):
    store, conf = t1
    first = json.loads(cli("timer", "list", "-c", str(conf), "--json").stdout.splitlines()[0])
    seg = store / "commitlog" / ("0" * 20)
    _flip(seg, first["commitLogOffset"] + first["storeSize"] - 3)  # in the body: a CRC the check finds bad
    one, two = _both("timer", "verify", "-c", str(conf), "--now", NOW, "--json")
    assert one.exit_code == two.exit_code == 3
    a, b = _json(one), _json(two)
    assert a == b and a["counts"]["error"] + a["counts"]["warning"] >= 1
    assert any(f["offset"] == first["commitLogOffset"] or str(first["commitLogOffset"]) in f["problem"]
               for f in a["findings"])


def test_clean_dry_run_same_plan_on_the_timer_store(t1, jobs):
    store, conf = t1
    before = snapshot(store)
    one, two = _both("clean", "-c", str(conf), "--dry-run", "--force-now", "--json")
    assert one.exit_code == two.exit_code == 0
    a, b = _json(one), _json(two)
    assert a == b and a["timer"]["pendingTimerMessages"] > 50
    assert {"_survey_queues", "_walk_job"} <= {n for n, _ in jobs}
    assert snapshot(store) == before


def test_clean_same_plan_and_same_files_on_many_queues(tmp_path, jobs):
    store = tmp_path / "m"
    put(store, sample_messages(300), tmp_path, *CQ)
    other = tmp_path / "copy"
    shutil.copytree(store, other)
    dry = _both("clean", "-s", str(store), "--dry-run", "--force-now", "--json", *GEOM)
    assert dry[0].exit_code == dry[1].exit_code == 0 and _json(dry[0]) == _json(dry[1])
    d = _json(dry[0])
    assert d["consumeQueues"]["queues"] and d["consumeQueues"]["deleted"]
    one = cli("clean", "-s", str(store), "--force-now", "--json", *GEOM, "--workers", "1")
    two = cli("clean", "-s", str(other), "--force-now", "--json", *GEOM, "--workers", "2")
    assert _json(one) == _json(two, (str(other), str(store))) and _json(one)["commitLog"]["deleted"]
    left = sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file())
    assert left == sorted(str(p.relative_to(other)) for p in other.rglob("*") if p.is_file())
    assert "_survey_queues" in {n for n, _ in jobs}


def test_a_killed_worker_fails_tiered_verify_cleanly(killed):
    r = cli("tiered", "verify", "--tiered-store-path", str(F1_TIER), "--metadata", str(F1_META), "--json",
            "--workers", "2", code=None)
    assert_one_line_error(r, 1)
    assert r.stdout == ""


def test_a_killed_worker_fails_timer_verify_cleanly(t1, killed):
    _, conf = t1
    r = cli("timer", "verify", "-c", str(conf), "--now", NOW, "--json", "--workers", "2", code=None)
    assert_one_line_error(r, 1)
    assert r.stdout == ""


def test_a_killed_worker_fails_clean_cleanly(t1, killed):
    store, conf = t1
    before = snapshot(store)
    for extra in (["--dry-run"], []):
        r = cli("clean", "-c", str(conf), "--force-now", "--json", "--workers", "2", *extra, code=None)
        assert_one_line_error(r, 1)
        assert r.stdout == ""
    assert snapshot(store) == before  # nothing deleted
    assert cli("clean", "-c", str(conf), "--dry-run", "--json", "--workers", "1", code=None).exit_code != 4  # unlocked
