"""The timer store (docs/timer-store-format.md): the golden set timer/t1 read through the CLI and the engine,
faults injected into copies of it, and what a broker killed with -9 leaves."""
from __future__ import annotations

import json
import os
import random
import re

import pytest

from engine.broker.config.brokerconf import load_config, snap_timer_precision
from engine.broker.layout import StoreLayout
from engine.timer import inspect_timer, list_pending, pending_messages, verify_timer
from engine.timer.codec import BLANK_MAGIC_CODE, UNIT_SIZE, TimerCheckpoint
from engine.timer.layout import SLOTS_TOTAL, WHEEL_LENGTH, TimerGeometry, TimerLayout
from engine.timer.store import TimerStore
from engine.timer.write import TimerStoreWriter
from helpers import TIMER_T1, assert_one_line_error, patch_file, run, snapshot, t1_answer, unpack_golden

FILE2 = "00000000000000008192"


def _now_after_stop() -> int:
    """A time just after the t1 broker stopped (the time rules of verify depend on it)."""
    return t1_answer("checkpoint.json")["savedStoreFiles"]["checkpoint"]["lastReadTimeMs"] + 10_000


def _ndjson(r) -> list[dict]:
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def _verify(conf, *extra):
    return run(["timer", "verify", "-c", conf, "--now", _now_after_stop(), *extra])


# ==================================================================== configuration and geometry


def test_broker_conf_gives_the_timer_geometry_with_the_brokers_rules(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("storePathRootDir=/x\ntimerPrecisionMs=300\ntimerRollWindowSlot=1\nmappedFileSizeTimerLog=8192\n")
    g = TimerGeometry.of(load_config(conf))
    assert g.precision_ms == 200  # setTimerPrecisionMs snaps to 100/200/500/1000
    assert g.roll_window_slots == SLOTS_TOTAL - 60  # below 2: clamped to the wheel minus the blank slots
    assert g.log_file_size == 8192 and g.offset_for_last_unit == 8112
    d = TimerGeometry.of(load_config(None, storePathRootDir="/x"))
    assert (d.precision_ms, d.roll_window_slots, d.log_file_size) == (1000, 172800, 100 * 1024 * 1024)
    assert [snap_timer_precision(v) for v in (1, 199, 200, 999, 1000, 10**6)] == [100, 100, 200, 500, 1000, 1000]
    assert BLANK_MAGIC_CODE == -875286124 and WHEEL_LENGTH == 2 * 604800 * 32


# ==================================================================== the golden set, through the CLI


def test_list_is_the_brokers_pending_set(t1):
    store, conf = t1
    r = run(["timer", "list", "-c", conf, "--json"])
    assert r.exit_code == 0, r.output
    got = _ndjson(r)
    want = t1_answer("pending.jsonl")
    assert len(got) == len(want)
    assert ({(g["uniqKey"], g["fireAtMs"], g["topic"], g["queueId"]) for g in got}
            == {(w["uniqKey"], w["fireAtMs"], w["topic"], w["queueId"]) for w in want})
    by_key = {w["uniqKey"]: w for w in want}
    for g in got:
        w = by_key[g["uniqKey"]]
        assert g["keys"] == w["keys"].split() and g["tags"] == w["tags"]
        # a rolled message's unit points at its latest roll copy, which carries one roll
        assert (g["state"] == "rolled") == (g["rollTimes"] == 1)
    assert [g["fireAtMs"] for g in got] == sorted(g["fireAtMs"] for g in got)
    # rolled when due at least timerRollWindowSlot (90 s here) after it was enqueued: parked in a nearer slot
    window = TimerGeometry.of(load_config(conf)).roll_window_slots * 1000
    assert {g["uniqKey"] for g in got if g["state"] == "rolled"} == {
        w["uniqKey"] for w in want if w["fireAtMs"] - w["storeTimestamp"] >= window}
    assert all((g["state"] == "rolled") == (g["slotTimeMs"] != g["fireAtMs"]) for g in got)
    never = {x["uniqKey"] for x in t1_answer("recalled.jsonl")} | {x["uniqKey"] for x in
                                                                    t1_answer("pending_delaylevel.jsonl")}
    assert not never & {g["uniqKey"] for g in got}
    assert "3 recalled" in r.stderr


def test_list_filters_and_text_table(t1, monkeypatch):
    store, conf = t1
    want = t1_answer("pending.jsonl")
    cut = sorted(w["fireAtMs"] for w in want)[len(want) // 2]
    r = run(["timer", "list", "-c", conf, "--json", "--topic", "TimerB", "--due-after", str(cut)])
    assert r.exit_code == 0, r.output
    assert {g["uniqKey"] for g in _ndjson(r)} == {w["uniqKey"] for w in want
                                                   if w["topic"] == "TimerB" and w["fireAtMs"] >= cut}
    r = run(["timer", "list", "-c", conf, "--json", "--due-before", str(cut)])
    assert len(_ndjson(r)) == sum(w["fireAtMs"] < cut for w in want)
    r = run(["timer", "list", "-c", conf, "--json", "--topic", "NoSuchTopic"])   # the output contract's unknown topic
    assert_one_line_error(r, 2, contains="'NoSuchTopic'")
    assert_one_line_error(run(["timer", "list", "-c", conf, "--due-after", "now", "--due-before", "now-1h"]), 2)
    assert_one_line_error(run(["timer", "list", "-c", conf, "--due-after", "yesterday"]), 2)
    monkeypatch.setenv("COLUMNS", "80")
    r = run(["timer", "list", "-c", conf])
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert sum(bool(re.match(r"\d{4}-\d\d-\d\d ", line)) for line in lines) == len(want)  # one row each
    assert all(len(line) <= 80 for line in lines)
    assert lines[0].split()[:3] == ["fireAt", "topic", "qid"]


def test_inspect_reads_the_checkpoint_and_metrics_as_the_broker_did(t1):
    store, conf = t1
    r = run(["timer", "inspect", "-c", conf, "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    saved = t1_answer("checkpoint.json")["savedStoreFiles"]
    cp = {k: d["checkpoint"][k] for k in saved["checkpoint"]}
    assert cp == saved["checkpoint"]
    assert d["metrics"]["timingCount"] == saved["metrics"]["timingCount"]
    assert d["metrics"]["dataVersion"] == saved["metrics"]["dataVersion"]
    w, log = d["wheel"], d["timerLog"]
    assert w["length"] == w["expectedLength"] and w["lengthOk"]
    assert w["live"] == len(w["liveSlots"]) and w["live"] + w["stale"] == w["nonZeroSlots"]
    assert all(s["chain"] == "complete" and s["num"] == sum(-n if "delete" in k else n
                                                            for k, n in s["unitsByMagic"].items())
               for s in w["liveSlots"])
    # one unit per rmq_sys_wheel_timer/0 unit enqueued, and the log ends where the checkpoint says it was flushed
    assert log["units"] == saved["checkpoint"]["lastTimerQueueOffset"] == d["enqueue"]["cursor"]
    assert log["validEnd"] == saved["checkpoint"]["lastTimerLogFlushPos"]
    full = log["files"][0]
    assert full["units"] == (8192 - 16) // UNIT_SIZE and full["blankSize"] == 8192 - full["blankAt"]
    assert d["enqueue"]["toEnqueue"] == 0
    r = run(["timer", "inspect", "-c", conf])
    assert r.exit_code == 0 and "lastTimerLogFlushPos" in r.stdout


@pytest.mark.slow
def test_verify_passes_and_nothing_is_written(t1):
    store, conf = t1
    before = snapshot(store)
    r = _verify(conf)
    assert r.exit_code == 0, r.output
    assert not [line for line in r.stdout.splitlines() if not line.startswith("info: ")]
    rj = json.loads(_verify(conf, "--json").stdout)
    assert rj["ok"] and rj["counts"]["error"] == 0 and rj["checked"]["pendingMessages"] == len(
        t1_answer("pending.jsonl"))
    run(["timer", "list", "-c", conf])
    run(["timer", "inspect", "-c", conf])
    assert snapshot(store) == before


def test_the_engine_api_for_the_doctor(t1):
    store, conf = t1
    cfg = load_config(conf)
    rep = verify_timer(cfg, now=_now_after_stop())
    assert rep.ok and all(set(f.as_dict()) == {"kind", "severity", "file", "offset", "problem", "brokerWill"}
                          for f in rep.findings)
    msgs = pending_messages(cfg)
    assert len(msgs) == len(t1_answer("pending.jsonl")) and all(isinstance(m, dict) for m in msgs)
    ins = inspect_timer(cfg).as_dict()
    assert ins["geometry"]["mappedFileSizeTimerLog"] == 8192
    with list_pending(cfg, topic="TimerOrd") as res:
        got = list(res)
    assert got and len(got) == len(res) and {m.topic for m in got} == {"TimerOrd"}


def test_writer_rebuilds_the_brokers_timer_log_and_wheel_byte_for_byte(t1, tmp_path):
    """Replaying t1's units through TimerStoreWriter (doEnqueue's roll rule, blanks, slots) from their records'
    TIMER_OUT_MS and write times gives the broker's own files."""
    store, conf = t1
    cfg = load_config(conf)
    with TimerStore(cfg) as ts:
        out = TimerStoreWriter(TimerLayout(StoreLayout(tmp_path / "rebuilt")), ts.geometry)
        for seg in ts.log.segments:
            stop, _ = ts.log.file_end(seg)
            for _, units in ts.log.chunks(seg, upto=stop):
                for u in units:
                    rec = ts.resolve(int(u["offset_py"]), int(u["size_py"])).record
                    out.enqueue(int(u["offset_py"]), int(u["size_py"]), rec.timer_out_ms, int(u["write_ms"]),
                                rec.real_topic, delete=rec.is_delete)
        out.write(TimerCheckpoint())
        for seg in ts.log.segments:
            assert (tmp_path / "rebuilt" / "timerlog" / seg.path.name).read_bytes() == seg.path.read_bytes()
        assert (tmp_path / "rebuilt" / "timerwheel").read_bytes() == ts.layout.wheel.read_bytes()


def test_commands_need_a_store(tmp_path):
    assert_one_line_error(run(["timer", "list", "-s", tmp_path]), 2, "not a RocketMQ store")
    (tmp_path / "commitlog").mkdir()
    assert_one_line_error(run(["timer", "verify", "-s", tmp_path]), 2, "no timer store")
    assert_one_line_error(run(["timer", "inspect"]), 2)


def test_without_broker_conf_the_timer_log_files_give_their_size(t1):
    """No mappedFileSizeTimerLog given: the files' one size is the store's (t1's 8,192, not the default 100 MiB), so a
    healthy store reads healthy and no repair is offered; a file whose size differs from the others' is still
    wrong, and broker.conf still decides when it says."""
    store, conf = t1
    assert json.loads(run(["timer", "inspect", "-s", store, "--json"]).stdout)["timerLog"]["fileSize"] == 8192
    assert run(["timer", "verify", "-s", store]).exit_code == 0
    doc = json.loads(run(["doctor", "-s", store, "--json"]).stdout)
    assert doc["healthy"] and doc["summary"]["error"] == 0 and not any("timer" in c for c in doc["commands"]), doc["commands"]
    os.truncate(store / "timerlog" / FILE2, 4096)
    found = json.loads(run(["timer", "verify", "-s", store, "--json"]).stdout)["findings"]
    assert [f["file"] for f in found if f["kind"] == "timerlog-file-size"] == [f"timerlog/{FILE2}"]
    os.truncate(store / "timerlog" / FILE2, 8192)
    (store / "b.conf").write_text(conf.read_text().replace("mappedFileSizeTimerLog=8192", "mappedFileSizeTimerLog=16384"))
    r = run(["timer", "verify", "-c", store / "b.conf", "--json"])
    assert r.exit_code == 3 and "timerlog-file-size" in {f["kind"] for f in json.loads(r.stdout)["findings"]}


# ==================================================================== faults injected into copies


def _fault_truncated_log(store):
    os.truncate(store / "timerlog" / FILE2, 4000)


def _fault_past_commitlog(store):
    patch_file(store / "timerlog" / "00000000000000000000", 7020 + 28, (10 ** 9).to_bytes(8, "big"))


def _fault_cycle(store):
    patch_file(store / "timerlog" / FILE2, 11104 - 8192 + 4, (11104).to_bytes(8, "big"))


def _fault_wheel_length(store):
    with open(store / "timerwheel", "ab") as f:
        f.write(bytes(32))


def _fault_torn_timercheck(store):
    os.truncate(store / "config" / "timercheck", 20)


# The last column: timer list's exit code. 3 only where a unit the broker will read points at no message (output
# contract); the other faults leave every listed unit resolvable (list walks the log, not the wheel's chains).
FAULTS = [
    (_fault_truncated_log, "timerlog-file-size", f"timerlog/{FILE2}", None, 0),
    (_fault_past_commitlog, "unit-past-commit-log", "timerlog/00000000000000000000", 7020, 3),
    (_fault_cycle, "chain-cycle", f"timerlog/{FILE2}", 11104 - 8192, 0),
    (_fault_wheel_length, "wheel-length", "timerwheel", 0, 0),
    (_fault_torn_timercheck, "timercheck-torn", "config/timercheck", 20, 0),
]


@pytest.mark.slow
@pytest.mark.parametrize("fault,kind,file,offset,list_code", FAULTS, ids=[f[1] for f in FAULTS])
def test_each_fault_is_located_and_nothing_changes(t1, fault, kind, file, offset, list_code):
    store, conf = t1
    fault(store)
    before = snapshot(store)
    r = _verify(conf)
    assert r.exit_code == 3, r.output
    assert "Traceback" not in r.output
    where = file + (f"@{offset}" if offset is not None else "")
    assert any(line.startswith("error: " + where + ": ") for line in r.stdout.splitlines()), r.stdout
    found = [f for f in json.loads(_verify(conf, "--json").stdout)["findings"] if f["kind"] == kind]
    assert found and found[0]["severity"] == "error" and found[0]["file"] == file and found[0]["offset"] == offset
    assert found[0]["brokerWill"]
    for cmd, code in ((["timer", "list", "-c", conf], list_code), (["timer", "inspect", "-c", conf], 0),
                      (["timer", "list", "-c", conf, "--json"], list_code)):
        r = run(cmd)
        assert r.exit_code == code, r.output
        assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
        assert "Traceback" not in r.output
    assert snapshot(store) == before


def test_wrong_wheel_length_says_the_broker_will_not_start(t1):
    store, conf = t1
    _fault_wheel_length(store)
    f = [x for x in verify_timer(load_config(conf), now=_now_after_stop()).findings if x.kind == "wheel-length"][0]
    assert "does not start" in f.broker_will and str(WHEEL_LENGTH) in f.problem


# ==================================================================== a broker killed with -9


def test_a_torn_tail_loses_nothing_once_recovered(t1):
    """The pages of the timer log after lastTimerLogFlushPos never reached the disk (zeros from the middle of a unit
    on): the readers report it, and after `recover` every pending message is back (re-enqueued from
    rmq_sys_wheel_timer/0)."""
    store, conf = t1
    patch_file(store / "timerlog" / FILE2, 2000, bytes(8192 - 2000))
    rep = json.loads(_verify(conf, "--json").stdout)
    kinds = {f["kind"] for f in rep["findings"] if f["severity"] == "error"}
    assert {"timerlog-last-unit-unreadable", "slot-past-log-end"} <= kinds
    assert run(["timer", "list", "-c", conf]).exit_code == 0
    r = run(["recover", "-c", conf])
    assert r.exit_code == 0, r.output
    assert _verify(conf).exit_code == 0
    got = _ndjson(run(["timer", "list", "-c", conf, "--json"]))
    assert {g["uniqKey"] for g in got} == {w["uniqKey"] for w in t1_answer("pending.jsonl")}
    assert any(g["state"] == "queued" for g in got)


def test_garbage_tail_and_slots_past_the_end_are_reported_not_fatal(t1):
    store, conf = t1
    # the garbage overwrites the sizePy of the unit across byte 3000: a unit the broker reads that names no
    # message, so verify and list answer in part (3); inspect reads no unit (0)
    patch_file(store / "timerlog" / FILE2, 3000, random.Random(3000).randbytes(2000))
    for cmd, code in (("verify", 3), ("list", 3), ("inspect", 0)):
        r = run(["timer", cmd, "-c", conf, "--json"] + (["--now", str(_now_after_stop())] if cmd == "verify" else []))
        assert r.exit_code == code and "Traceback" not in r.output, r.output
    assert run(["recover", "-c", conf]).exit_code == 0
    assert _verify(conf).exit_code == 0


def test_log_ending_at_a_file_start_after_a_28_byte_blank(t1):
    """The broker's start-up reads the blank's magic as sizePy and throws; recover deletes the empty file so the
    log ends at the blank."""
    store, conf = t1
    patch_file(store / "timerlog" / FILE2, 0, bytes(8192))
    r = json.loads(_verify(conf, "--json").stdout)
    f = [x for x in r["findings"] if x["kind"] == "timerlog-end-unreadable"]
    assert f and f[0]["file"] == "timerlog/00000000000000000000" and f[0]["offset"] == 8192 - 24
    assert run(["recover", "-c", conf]).exit_code == 0
    assert not (store / "timerlog" / FILE2).exists()
    assert _verify(conf).exit_code == 0
    assert len(_ndjson(run(["timer", "list", "-c", conf, "--json"]))) == len(t1_answer("pending.jsonl"))


def test_after_a_kill_the_list_is_what_the_restarted_broker_fired(tmp_path):
    """timer/t2: a broker killed with -9 mid-traffic. Every message the restarted broker fired (TIMER_DEQUEUE_MS
    after the restart) is listed, and every listed message due before the end of the restart window (minus 15 s)
    was fired. (restart_delivered.jsonl also holds 66 receipts of records fired before the kill, whose
    TIMER_DEQUEUE_MS is before it: the consumer received them again, its offsets not having been saved.)"""
    store, conf = unpack_golden("timer/t2", tmp_path / "t2")
    timeline = t1_answer("timeline.json", "t2")
    r = run(["timer", "list", "-c", conf, "--json"])
    assert r.exit_code == 0, r.output
    listed = {g["uniqKey"]: g for g in _ndjson(r)}
    receipts = t1_answer("restart_delivered.jsonl", "t2")
    fired = {x["uniqKey"] for x in receipts if x["TIMER_DEQUEUE_MS"] >= timeline["restartStartMs"]}
    assert fired and fired <= set(listed)
    again = [x for x in receipts if x["TIMER_DEQUEUE_MS"] < timeline["brokerStopOrKillMs"]]
    assert len(again) == sum(x["firedBeforeSave"] for x in receipts)
    due = {k for k, g in listed.items() if g["fireAtMs"] <= timeline["restartEndMs"] - 15_000}
    assert due and due <= {x["uniqKey"] for x in receipts}
    assert not set(listed) & {x["uniqKey"] for x in t1_answer("recalled.jsonl", "t2")}
    v = run(["timer", "verify", "-c", conf, "--now", str(timeline["restartStartMs"])])
    assert v.exit_code == 0, v.stdout
    r = run(["recover", "-c", conf, "--json"])
    assert r.exit_code == 0 and not json.loads(r.stdout)["timer"]["slotsChanged"]
    assert {g["uniqKey"] for g in _ndjson(run(["timer", "list", "-c", conf, "--json"]))} == set(listed)


def test_the_set_is_where_the_tests_expect_it():
    assert (TIMER_T1 / "store.tar.gz").is_file() and (TIMER_T1 / "answers" / "pending.jsonl").is_file()
