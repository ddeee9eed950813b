"""rmqtool doctor and rmqtool repair: the golden stores as the broker left them, and for every fixable finding
kind a damaged copy, the commands doctor prints run as printed, and doctor calling the store healthy after."""
from __future__ import annotations

import json
import os
import shlex
import struct
from pathlib import Path

import pytest

from helpers import lock_held, patch_file, run, snapshot, unpack_golden


def doctor_json(conf: Path, *extra, code: int) -> dict:
    """doctor's report, which must come with exit `code` (3 exactly when a finding is an error: output contract)."""
    r = run(["doctor", "-c", conf, "--json", *extra])
    doc = json.loads(r.stdout)
    assert r.exit_code == code, (r.stderr, doc["findings"])
    assert (code == 3) == bool(kinds(doc, "error")), doc["findings"]
    return doc


def kinds(doc: dict, severity: str | None = None) -> set[str]:
    return {f["kind"] for f in doc["findings"] if severity is None or f["severity"] == severity}


def run_fixes(doc: dict) -> None:
    """Every command doctor says to run, exactly as printed (parsed as a shell would)."""
    assert doc["commands"], "no fix offered"
    for cmd in doc["commands"]:
        words = shlex.split(cmd)
        assert words[0] == "rmqtool"
        r = run(words[1:])
        assert r.exit_code == 0, f"{cmd}: {r.stdout} {r.stderr}"


# ------------------------------------------------------------------------------------------- golden stores


def test_golden_broker_store_healthy(tmp_path):
    store, conf = unpack_golden("broker/r1", tmp_path)
    before = snapshot(store)
    doc = doctor_json(conf, code=0)
    assert doc["healthy"] and not doc["findings"]
    assert snapshot(store) == before  # doctor never writes


def test_golden_timer_t1_healthy(tmp_path):
    store, conf = unpack_golden("timer/t1", tmp_path)
    doc = doctor_json(conf, code=0)
    assert not kinds(doc, "warning")
    assert "timer store" in doc["summary"]["checked"]


@pytest.mark.parametrize("name", ["broker/r2/killed", "timer/t2"])
def test_crashed_stores_need_the_brokers_recovery(tmp_path, name):
    """Killed with -9: the abort marker is there, the pre-allocated next segment lies after the end; the broker
    recovers both by itself (it booted on copies of both), so they are not errors, and recover is the fix."""
    store, conf = unpack_golden(name, tmp_path)
    doc = doctor_json(conf, code=0)
    f = {x["kind"]: x for x in doc["findings"]}
    assert f["abort-marker"]["file"] == "abort" and f["abort-marker"]["fix"].startswith("rmqtool recover ")
    assert "commitlog-file-after-end" in f
    est = doc["summary"]["estimates"]["brokerRecovery"]
    assert est["bytesToScan"] > 0 and est["estimatedSeconds"] >= 0
    run_fixes(doc)
    doc = doctor_json(conf, code=0)
    assert "abort-marker" not in kinds(doc)
    assert not (store / "abort").exists()


def test_damaged_record_is_an_error_recover_fixes(tmp_path):
    """r2/damaged: two flipped body bytes mid-log; the broker's CRC check truncates there (it lost everything
    after the record, recovered_by_broker/)."""
    store, conf = unpack_golden("broker/r2/damaged", tmp_path)
    doc = doctor_json(conf, code=3)
    bad = [f for f in doc["findings"] if f["kind"] == "commitlog-damaged-record"]
    assert bad and bad[0]["severity"] == "error" and bad[0]["offset"] is not None
    assert "1793690" in bad[0]["problem"]
    run_fixes(doc)
    doctor_json(conf, code=0)


# ------------------------------------------------------------------------------------------- damage, then fixes

def _torn(path: Path, n: int) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:n])


def _r1_cases():
    def cfg_from_bak(s):
        _torn(s / "config/consumerOffset.json", 300)

    def topics_lost(s):
        _torn(s / "config/topics.json", 300)
        (s / "config/topics.json.bak").write_bytes(b"")

    def topics_unloadable(s):
        _torn(s / "config/topics.json", 300)
        _torn(s / "config/topics.json.bak", 200)

    def delay_offsets_lost(s):
        _torn(s / "config/delayOffset.json", 60)
        (s / "config/delayOffset.json.bak").write_bytes(b"")

    def groups_unloadable(s):
        _torn(s / "config/subscriptionGroup.json", 300)
        _torn(s / "config/subscriptionGroup.json.bak", 200)

    def groups_lost(s):
        _torn(s / "config/subscriptionGroup.json", 300)
        (s / "config/subscriptionGroup.json.bak").write_bytes(b"")

    def segment_size(s):
        os.truncate(s / "commitlog/00000000000001048576", 524288)

    def abort_clean(s):
        (s / "abort").write_text("123")

    def index_header(s):
        name = sorted(os.listdir(s / "index"))[0]
        patch_file(s / "index" / name, 0, bytes(40))

    return [("config-from-bak", "warning", cfg_from_bak), ("config-lost", "error", topics_lost),
            ("config-unloadable", "error", topics_unloadable), ("config-lost", "error", delay_offsets_lost),
            ("config-unloadable", "error", groups_unloadable), ("config-lost", "error", groups_lost),
            ("commitlog-segment-size", "error", segment_size),
            ("abort-marker", "info", abort_clean), ("index-untrusted", "warning", index_header)]


@pytest.mark.parametrize("kind,severity,damage", _r1_cases(), ids=[c[2].__name__ for c in _r1_cases()])
def test_broker_store_damage_fixed(tmp_path, kind, severity, damage):
    store, conf = unpack_golden("broker/r1", tmp_path)
    damage(store)
    doc = doctor_json(conf, code=3 if severity == "error" else 0)
    found = [f for f in doc["findings"] if f["kind"] == kind]
    assert found and found[0]["severity"] == severity, doc["findings"]
    assert found[0]["fix"] and found[0]["fix"].startswith("rmqtool ")
    if found[0]["file"] in ("config/delayOffset.json", "config/subscriptionGroup.json"):
        assert found[0]["fix"].endswith(f"{found[0]['file'][7:]} --from-store")
    run_fixes(doc)
    doc = doctor_json(conf, code=0)
    assert kind not in kinds(doc)
    assert any((store / "quarantine").iterdir()) or kind == "abort-marker"


def test_torn_config_with_empty_bak_needs_a_person(tmp_path):
    """consumerOffset.json torn, .bak empty: the real broker started with no consumer offsets without a word."""
    store, conf = unpack_golden("broker/r1", tmp_path)
    _torn(store / "config/consumerOffset.json", 300)
    (store / "config/consumerOffset.json.bak").write_bytes(b"")
    doc = doctor_json(conf, code=3)
    f = next(x for x in doc["findings"] if x["kind"] == "config-lost")
    assert f["severity"] == "error" and f["fix"] is None
    assert "restore config/consumerOffset.json from a backup" in f["problem"]
    assert "mqadmin resetOffsetByTime" in f["problem"] and "consumeFromWhere" in f["problem"]
    assert "no consumer offsets" in f["brokerWill"]
    # the person decides: accept the empty table
    r = run(["repair", "config", "-c", conf, "consumerOffset.json", "--empty"])
    assert r.exit_code == 0, r.stderr
    doctor_json(conf, code=0)


def test_empty_last_consume_queue_file(tmp_path):
    store, conf = unpack_golden("broker/r1", tmp_path)
    q = store / "consumequeue/TopicB/0"
    first = sorted(os.listdir(q))[0]
    (q / f"{int(first) + 6000:020d}").write_bytes(bytes(6000))
    doc = doctor_json(conf, code=0)
    f = next(x for x in doc["findings"] if x["kind"] == "cq-empty-last-file")
    assert f["file"] == f"consumequeue/TopicB/0/{int(first) + 6000:020d}" and "--topic TopicB" in f["fix"]
    before = snapshot(store)
    r = run(shlex.split(f["fix"])[1:] + ["--dry-run", "--json"])
    d = json.loads(r.stdout)
    assert r.exit_code == 0 and (d["dryRun"], d["changed"]) == (True, False) and d["actions"]
    assert snapshot(store) == before
    run_fixes(doc)
    doc = doctor_json(conf, code=0)
    assert "cq-empty-last-file" not in kinds(doc)
    manifest = next((store / "quarantine").iterdir()) / "manifest.json"
    assert json.loads(manifest.read_text())["tool"] == "rmqtool repair consume-queue"


# ------------------------------------------------------------------------------------------- the timer store


def _unit_positions(store: Path) -> list[tuple[Path, int]]:
    out = []
    for name in sorted(os.listdir(store / "timerlog")):
        p = store / "timerlog" / name
        data = p.read_bytes()
        for at in range(0, len(data) - 52 + 1, 52):
            size, _, magic = struct.unpack_from(">iqi", data, at)
            if size != 52 or (magic | 0xF) != 0xF:
                break
            out.append((p, at))
    return out


def _t1_cases():
    def wheel_length(s):
        os.truncate(s / "timerwheel", 1000)

    def wheel_missing(s):
        os.unlink(s / "timerwheel")

    def timercheck_missing(s):
        os.unlink(s / "config/timercheck")

    def timercheck_torn(s):
        os.truncate(s / "config/timercheck", 20)

    def metrics(s):
        (s / "config/timermetrics").write_text("{\"dataVer")
        (s / "config/timermetrics.bak").write_text("{\"tim")

    def cycle(s):
        # the last unit of a live chain pointing at itself
        p, at = _unit_positions(s)[-1]
        start = int(p.name)
        patch_file(p, at + 4, struct.pack(">q", start + at))

    def file_size(s):
        last = sorted(os.listdir(s / "timerlog"))[-1]
        os.truncate(s / "timerlog" / last, 4096)

    def misnamed(s):
        (s / "timerlog" / "notes.txt").write_text("x")

    return [("wheel-length", wheel_length), ("wheel-missing", wheel_missing),
            ("timercheck-missing", timercheck_missing), ("timercheck-torn", timercheck_torn),
            ("timermetrics-unloadable", metrics), ("chain-cycle", cycle), ("timerlog-file-size", file_size),
            ("timerlog-misnamed", misnamed)]


@pytest.mark.slow
@pytest.mark.parametrize("kind,damage", _t1_cases(), ids=[c[0] for c in _t1_cases()])
def test_timer_damage_fixed(tmp_path, kind, damage):
    store, conf = unpack_golden("timer/t1", tmp_path)
    damage(store)
    now = ["--now", "2026-11-27T12:00:00Z"]
    doc = doctor_json(conf, *now, code=3)
    found = [f for f in doc["findings"] if f["kind"] == kind]
    assert found and found[0]["severity"] == "error", doc["findings"]
    assert found[0]["fix"].startswith("rmqtool repair timer ")
    before = snapshot(store)
    r = run(["repair", "timer", "-c", conf, "--dry-run", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["actions"] and snapshot(store) == before
    run_fixes(doc)
    doctor_json(conf, *now, code=0)


def test_repair_timer_keeps_the_pending_list(tmp_path):
    """A rebuilt wheel (from a missing one) gives back every pending message of the golden set."""
    store, conf = unpack_golden("timer/t1", tmp_path)
    want = run(["timer", "list", "-c", conf, "--json"])
    os.unlink(store / "timerwheel")
    r = run(["repair", "timer", "-c", conf])
    assert r.exit_code == 0, r.stderr
    got = run(["timer", "list", "-c", conf, "--json"])
    assert sorted(want.stdout.splitlines()) == sorted(got.stdout.splitlines())
    again = run(["repair", "timer", "-c", conf, "--json"])
    d = json.loads(again.stdout)
    assert again.exit_code == 0 and d["nothingToDo"] is True and d["changed"] is False and d["actions"] == []


# ------------------------------------------------------------------------------------------- the contract


def test_text_form_fits_and_ends_with_commands(tmp_path):
    store, conf = unpack_golden("timer/t1", tmp_path)
    os.truncate(store / "timerwheel", 1000)
    _torn(store / "config/topics.json", 100)
    r = run(["doctor", "-c", conf])
    assert r.exit_code == 3
    lines = r.stdout.splitlines()
    # a single word (a path longer than the line) is never cut: the command must still run when pasted
    assert all(len(x) <= 80 or len(x.strip().rstrip("\\").split()) == 1 for x in lines), lines
    at = lines.index("commands to run, in this order:")
    cmds = " ".join(x.strip().rstrip("\\") for x in lines[at + 1:])
    assert "rmqtool repair timer" in cmds and "rmqtool repair config" in cmds
    assert lines[0] in ("config/topics.json", "timerwheel")  # worst first: both are errors, by file name


def test_bad_input_and_locked_store(tmp_path):
    r = run(["doctor", "-s", tmp_path / "nope"])
    assert r.exit_code == 2 and r.stderr.startswith("error:")
    store, conf = unpack_golden("broker/r1", tmp_path)
    r = run(["repair", "config", "-c", conf, "topics.json"])
    assert r.exit_code == 2 and "exactly one of" in r.stderr
    r = run(["repair", "config", "-c", conf, "notes.json", "--empty"])
    assert r.exit_code == 2
    r = run(["repair", "config", "-c", conf, "consumerOffset.json", "--from-store"])
    assert r.exit_code == 2 and "cannot be rebuilt" in r.stderr
    with lock_held(store):
        doc = doctor_json(conf, code=0)
        assert doc["lockedByBroker"] and "store-locked" in kinds(doc, "info")
        r = run(["repair", "config", "-c", conf, "topics.json", "--empty"])
        assert r.exit_code == 4
