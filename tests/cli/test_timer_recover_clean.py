"""recover and clean keep the timer store consistent (timer §8, §10), driven through the CLI."""
from __future__ import annotations

import json
import os
import time

import pytest

from engine.broker.commitlog.log import open_commitlog
from engine.broker.config.brokerconf import load_config
from engine.timer.codec import TOMBSTONE_OFFSET, UNIT_SIZE
from engine.timer.layout import TimerGeometry
from engine.timer.pending import scan_pending
from engine.timer.store import TimerStore
from helpers import make_timer_store, patch_file, run, snapshot, t1_answer

FILE2 = "00000000000000008192"


def _now_after_stop() -> int:
    return t1_answer("checkpoint.json")["savedStoreFiles"]["checkpoint"]["lastReadTimeMs"] + 10_000


def _ndjson(r) -> list[dict]:
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def _record_boundary_at_or_after(conf, offset: int) -> tuple[int, int]:
    """(first record start at or after offset, end of the commit log's data)."""
    cl = open_commitlog(load_config(conf))
    try:
        start = next(e.offset for e in cl.scan(0, check_crc=False) if e.offset >= offset)
        return start, cl.find_end()
    finally:
        cl.close()


@pytest.mark.slow
def test_recover_after_a_commit_log_cut_keeps_the_timer_store_consistent(t1):
    store, conf = t1
    cfg = load_config(conf)
    before = _ndjson(run(["timer", "list", "-c", conf, "--json"]))
    with TimerStore(cfg) as ts:
        res = scan_pending(ts)
        offsets = list(res.rows["offset"]) + list(res.cancelled["offset"]) + [mk.offset for mk in res.markers]
    cut, end = _record_boundary_at_or_after(conf, 120_000)
    lost = [o for o in offsets if o >= cut]
    # The machine lost the pages of the commit log's tail: zeros from a record boundary to the end of data.
    patch_file(store / "commitlog" / "00000000000000000000", cut, bytes(end - cut))
    snap = snapshot(store)
    r = run(["recover", "-c", conf, "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert snapshot(store) == snap  # a dry run changes nothing
    t = plan["timer"]
    assert t["pendingLost"] == len(lost) > 0
    assert t["cut"] is not None and t["newEnd"] < t["validEndBefore"]
    assert any("timer-log" in a for a in plan["actions"]) and any("timercheck" in a for a in plan["actions"])
    r = run(["recover", "-c", conf, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["timer"]["pendingLost"] == len(lost)
    # what is left: every pending message whose record survives, nothing that points at the cut
    after = _ndjson(run(["timer", "list", "-c", conf, "--json"]))
    assert {m["uniqKey"] for m in after} == {m["uniqKey"] for m in before
                                            if m["commitLogOffset"] + m["storeSize"] <= cut}
    v = run(["timer", "verify", "-c", conf, "--now", str(_now_after_stop()), "--json"])
    assert v.exit_code == 0, v.stdout
    with TimerStore(cfg) as ts:
        seen = []
        scan_pending(ts, on_unit=lambda u, r: seen.append(u.offset_py))
        assert seen and max(seen) < cut
        assert ts.checkpoint.cp.lastTimerLogFlushPos == ts.end.end == t["newEnd"]
        assert ts.checkpoint.cp.masterTimerQueueOffset <= ts.timer_queue.max_offset_in_queue
    q = next((store / "quarantine").iterdir())
    manifest = json.loads((q / "manifest.json").read_text())
    assert manifest["complete"] and manifest["timer"]["pendingLost"] == len(lost)
    assert any(e["path"] == f"timerlog/{FILE2}" for e in manifest["entries"])
    assert any(e["path"] == "timerwheel" for e in manifest["entries"])
    again = json.loads(run(["recover", "-c", conf, "--json"]).stdout)
    assert not again["changed"] and not again["timer"]["slotsChanged"]


def test_recover_empties_a_unit_whose_record_it_replaces(t1):
    """A damaged record in the middle of the log gets a placeholder; the live unit that pointed at it gets offsetPy
    -1 (the broker drops it instead of stalling on the placeholder)."""
    store, conf = t1
    first = t1_answer("pending.jsonl")[0]
    seg = store / "commitlog" / "00000000000000000000"
    data = seg.read_bytes()
    cl = open_commitlog(load_config(conf))
    body = cl.check_at(first["commitLogOffset"]).record.body
    cl.close()
    at = data.index(body, first["commitLogOffset"]) + len(body) // 2  # a body byte: its CRC fails
    patch_file(seg, at, bytes([data[at] ^ 0xFF]))
    with TimerStore(load_config(conf)) as ts:
        rows = scan_pending(ts).rows
        pos = int(rows["pos"][rows["offset"] == first["commitLogOffset"]][0])
    r = run(["recover", "-c", conf, "--json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert [x["timerLogPosition"] for x in plan["timer"]["tombstones"]] == [pos]
    assert [m["uniqKey"] for m in plan["timer"]["lost"]] == [first["uniqKey"]]
    unit = (store / "timerlog" / "00000000000000000000").read_bytes()[pos:pos + UNIT_SIZE]
    assert int.from_bytes(unit[28:36], "big", signed=True) == TOMBSTONE_OFFSET
    v = json.loads(run(["timer", "verify", "-c", conf, "--now", str(_now_after_stop()), "--json"]).stdout)
    assert v["ok"] and [f["offset"] for f in v["findings"] if f["kind"] == "unit-tombstone"] == [pos]
    after = {m["uniqKey"] for m in _ndjson(run(["timer", "list", "-c", conf, "--json"]))}
    assert after == {m["uniqKey"] for m in t1_answer("pending.jsonl")} - {first["uniqKey"]}


def _old(paths, hours: float) -> None:
    t = time.time() - hours * 3600
    for p in paths:
        os.utime(p, (t, t))


def test_clean_says_which_pending_timer_messages_lose_their_record(tmp_path):
    now = int(time.time() * 1000)
    conf, puts = make_timer_store(tmp_path / "s", 40, fire_base=now + 3_600_000, write_ms=now - 1000,
                                  read_ms=now - 1000)
    root = tmp_path / "s"
    segs = sorted((root / "commitlog").iterdir())
    assert len(segs) >= 4 and len(list((root / "timerlog").iterdir())) >= 4
    assert run(["timer", "verify", "-c", conf]).exit_code == 0  # the store as a broker would have written it
    _old(segs, 100)
    new_min = int(segs[-1].name)
    doomed = [p for p in puts if p.commitLogOffset < new_min]
    r = run(["clean", "-c", conf, "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert plan["minCommitLogOffsetAfter"] == new_min
    assert plan["timer"]["pendingLost"] == len(doomed) and plan["timer"]["pendingTimerMessages"] == len(puts)
    assert {m["commitLogOffset"] for m in plan["timer"]["lost"]} == {p.commitLogOffset for p in doomed}
    text = run(["clean", "-c", conf, "--dry-run"])
    assert f"{len(doomed)} pending timer message(s) lose their record" in text.stderr
    # --keep-timer-messages: the first segment holds a pending record, so nothing goes
    keep = json.loads(run(["clean", "-c", conf, "--dry-run", "--json", "--keep-timer-messages"]).stdout)
    assert keep["commitLog"]["deleted"] == [] and "pending timer message" in keep["commitLog"]["stoppedBecause"]
    assert keep["timer"]["pendingLost"] == 0
    # the broker's rule for the timer log: files whose last unit points below the new minimum, never the last
    geometry = TimerGeometry.of(load_config(conf))
    at = geometry.offset_for_last_unit
    logs = sorted((root / "timerlog").iterdir())

    def last_unit_offset(p):
        return int.from_bytes(p.read_bytes()[at + 28:at + 36], "big", signed=True)

    expect = []
    for p in logs[:-1]:
        if last_unit_offset(p) >= new_min:
            break
        expect.append(p.name)
    assert [os.path.basename(x) for x in plan["timer"]["timerLogFilesDeleted"]] == expect and expect
    r = run(["clean", "-c", conf, "--json"])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (root / "timerlog").iterdir()) == [p.name for p in logs if p.name not in expect]
    left = _ndjson(run(["timer", "list", "-c", conf, "--json"]))
    assert {m["commitLogOffset"] for m in left} == {p.commitLogOffset for p in puts if p.commitLogOffset >= new_min}
    v = json.loads(run(["timer", "verify", "-c", conf, "--json"]).stdout)
    # the pending messages below the new minimum are lost, as the broker loses them: their units or records are gone
    assert {f["kind"] for f in v["findings"] if f["severity"] != "info"} <= {"record-expired",
                                                                             "chain-into-deleted-file"}
    assert v["checked"]["pendingMessages"] == len(left)


def test_clean_help_states_the_timer_rule():
    r = run(["clean", "--help"])
    assert r.exit_code == 0
    flat = " ".join(r.stdout.split())
    assert "--keep-timer-messages" in flat and "by age alone" in flat and "timer-log files" in flat


def test_a_store_without_timer_files_is_left_alone(tmp_path):
    now = int(time.time() * 1000)
    conf, _ = make_timer_store(tmp_path / "s", 3, fire_base=now + 60_000, write_ms=now, read_ms=now)
    root = tmp_path / "s"
    for p in [root / "timerwheel", root / "config" / "timercheck"] + list((root / "timerlog").iterdir()):
        p.unlink()
    (root / "timerlog").rmdir()
    plan = json.loads(run(["recover", "-c", conf, "--dry-run", "--json"]).stdout)
    assert plan["timer"] is None
    assert json.loads(run(["clean", "-c", conf, "--dry-run", "--json"]).stdout)["timer"] is None
