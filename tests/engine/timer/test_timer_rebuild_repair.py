"""The timer store's writers, tested through the engine API on small stores (tests/helpers.py make_timer_store:
12 timer messages, timer-log files of 276 bytes = 5 units of 52 bytes and a blank of 16): the rebuild from the
timer log (engine.timer.rebuild, `repair timer`) and the repair that follows a commit-log cut (engine.timer.repair,
`recover`). Each test asserts the bytes written, that a second plan finds nothing to do, and that the store then
verifies clean."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from engine.broker.commitlog.message import VALID
from engine.broker.config.brokerconf import load_config
from engine.ops.footprint.quarantine import MANIFEST, Quarantine
from engine.timer.codec import UNIT_SIZE
from engine.timer.files import read_checkpoint
from engine.timer.layout import SLOT_SIZE, TimerLayout
from engine.timer.rebuild import PREV_AT, REREAD_MS, apply_timer_rebuild, plan_timer_rebuild
from engine.timer.repair import apply_timer_repair, plan_timer_repair
from engine.timer.verify import verify_timer
from helpers import make_timer_store, patch_file

T0 = 1_700_000_000_000
COUNT = 12
LOG_FILE = 276                      # 5 units and a 16-byte blank per timer-log file
FILES = ["00000000000000000000", "00000000000000000276", "00000000000000000552"]
END = 2 * LOG_FILE + 2 * UNIT_SIZE  # units 10 and 11 in the third file


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("timerstore")
    make_timer_store(d / "s", COUNT, fire_base=T0 + 3_600_000, write_ms=T0, read_ms=T0, timer_log_size=LOG_FILE)
    return d


@pytest.fixture
def store(pristine, tmp_path):
    """(broker config, layout, the pristine files by store-relative name): a fresh copy per test."""
    shutil.copytree(pristine / "s", tmp_path / "s")
    conf = tmp_path / "s.conf"
    conf.write_text((pristine / "s.conf").read_text().replace(str(pristine / "s"), str(tmp_path / "s")))
    cfg = load_config(conf)
    return cfg, TimerLayout.of(cfg), _files(pristine / "s")


def _files(root: Path) -> dict[str, bytes]:
    """Every file of the store but the quarantine, by store-relative name: its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.relative_to(root).parts[0] == "quarantine"}


def _apply(cfg, apply, plan, tool: str) -> dict:
    """Carry a plan out with a quarantine, as the commands do; returns the quarantine's manifest."""
    q = Quarantine(Path(cfg.root), tool=tool)
    q.open()
    apply(cfg, plan, q)
    q.write_manifest(True)
    return json.loads((q.dir / MANIFEST).read_text())


def _verifies_clean(cfg) -> None:
    rep = verify_timer(cfg, now=T0 + 1_000)
    assert rep.ok and rep.errors == [], [f.as_dict() for f in rep.findings]


def _wheel_slot(layout, index: int) -> bytes:
    with open(layout.wheel, "rb") as fh:
        fh.seek(index * SLOT_SIZE)
        return fh.read(SLOT_SIZE)


# ---- rebuild (engine.timer.rebuild) ------------------------------------------------------------------------

def test_rebuild_of_an_intact_store_changes_nothing(store):
    cfg, layout, before = store
    plan = plan_timer_rebuild(cfg)
    d = plan.as_dict()
    assert plan.nothing_to_do and d["actions"] == [] and d["unitsRelinked"] == 0
    assert (d["unitsWalked"], d["timerLogEnd"], d["slots"]) == (COUNT, END, COUNT)
    _verifies_clean(cfg)


def test_rebuild_relinks_a_broken_prev_pos_and_writes_only_that_field(store):
    cfg, layout, before = store
    log1 = layout.log_dir / FILES[1]
    at = 2 * UNIT_SIZE + PREV_AT                    # unit 7 (the third of the second file): its prevPos
    patch_file(log1, at, (12345).to_bytes(8, "big"))  # points into the middle of a unit
    plan = plan_timer_rebuild(cfg)
    assert plan.relinked == 1 and list(plan.relinks) == [FILES[1]]
    pos, prev = plan.relinks[FILES[1]]
    assert pos.tolist() == [at] and prev.tolist() == [-1]  # each message has its own slot: the first of its chain
    manifest = _apply(cfg, apply_timer_rebuild, plan, "rmqtool repair timer")
    assert _files(Path(cfg.root)) == before  # the pristine bytes again, to the byte, and nothing else changed
    kept = [e for e in manifest["entries"] if e["path"] == f"timerlog/{FILES[1]}"]
    assert len(kept) == 1 and manifest["complete"] is True
    assert plan_timer_rebuild(cfg).nothing_to_do  # idempotent
    _verifies_clean(cfg)


def test_rebuild_writes_a_lost_wheel_as_the_enqueue_wrote_it(store):
    cfg, layout, before = store
    os.remove(layout.wheel)
    plan = plan_timer_rebuild(cfg)
    assert plan.wheel_changed and len(plan.slots) == COUNT and plan.as_dict()["wheelRewritten"] is True
    _apply(cfg, apply_timer_rebuild, plan, "rmqtool repair timer")
    assert layout.wheel.read_bytes() == before["timerwheel"]
    assert plan_timer_rebuild(cfg).nothing_to_do
    _verifies_clean(cfg)


def test_rebuild_writes_a_missing_checkpoint_from_the_walk(store):
    cfg, layout, before = store
    os.remove(layout.checkpoint)
    plan = plan_timer_rebuild(cfg)
    cp = plan.as_dict()["checkpoint"]
    assert cp["lastTimerLogFlushPos"] == END and cp["lastTimerQueueOffset"] == COUNT
    assert cp["lastReadTimeMs"] == T0 - REREAD_MS  # the last unit's write time, less the re-read margin
    _apply(cfg, apply_timer_rebuild, plan, "rmqtool repair timer")
    f = read_checkpoint(layout.checkpoint)
    got = f.cp
    assert f.whole and got.lastTimerLogFlushPos == END and got.lastTimerQueueOffset == COUNT
    assert got.lastReadTimeMs == T0 - REREAD_MS
    assert plan_timer_rebuild(cfg).nothing_to_do
    _verifies_clean(cfg)


def test_rebuild_pads_a_short_timer_log_file_and_moves_a_stranger_out(store):
    cfg, layout, before = store
    log1 = layout.log_dir / FILES[1]
    os.truncate(log1, 4 * UNIT_SIZE)             # the file lost its last unit and blank
    (layout.log_dir / "notes.txt").write_bytes(b"x" * 7)
    plan = plan_timer_rebuild(cfg)
    fixes = {f.name: (f.action, f.length, f.size) for f in plan.file_fixes}
    assert fixes == {FILES[1]: ("pad", 4 * UNIT_SIZE, LOG_FILE), "notes.txt": ("move", 7, LOG_FILE)}
    manifest = _apply(cfg, apply_timer_rebuild, plan, "rmqtool repair timer")
    assert os.path.getsize(log1) == LOG_FILE
    data = log1.read_bytes()
    assert data[:4 * UNIT_SIZE] == before[f"timerlog/{FILES[1]}"][:4 * UNIT_SIZE] and not any(data[4 * UNIT_SIZE:])
    assert not (layout.log_dir / "notes.txt").exists()
    assert {e["path"] for e in manifest["entries"]} >= {f"timerlog/{FILES[1]}", "timerlog/notes.txt"}
    again = plan_timer_rebuild(cfg)
    assert again.file_fixes == [] and again.relinks == {}


# ---- repair after a commit-log cut (engine.timer.repair) -----------------------------------------------------

def _cut_commitlog(cfg, at: int) -> None:
    """What recovery leaves of the commit log: its data ends at `at` (a record boundary)."""
    seg = Path(cfg.root) / "commitlog" / "00000000000000000000"
    os.truncate(seg, at)


def test_repair_with_nothing_removed_changes_nothing(store):
    cfg, layout, before = store
    plan = plan_timer_repair(cfg, _data_end(cfg), [], COUNT)
    assert plan is not None and not plan.changed and plan.as_dict()["unitsRemoved"] == 0
    assert plan.as_dict()["newEnd"] == END and plan.as_dict()["filesDeleted"] == []


def _data_end(cfg) -> int:
    from engine.broker.commitlog.log import open_commitlog

    cl = open_commitlog(cfg)
    try:
        return cl.find_end()
    finally:
        cl.close()


def test_repair_after_a_cut_removes_the_units_past_it_and_empties_their_slots(store, tmp_path):
    cfg, layout, before = store
    # The records of messages 9, 10 and 11 go: the cut is at message 9's record.
    from engine.broker.commitlog.log import open_commitlog

    cl = open_commitlog(cfg)
    try:
        offsets = [e.offset for e in cl.scan(0, check_crc=False) if e.kind == VALID]  # (a segment's blank aside)
    finally:
        cl.close()
    assert len(offsets) == COUNT
    cut = offsets[9]
    plan = plan_timer_repair(cfg, cut, [], 9)
    d = plan.as_dict()
    unit9 = LOG_FILE + 4 * UNIT_SIZE
    assert plan.changed and (d["cut"], d["newEnd"], d["unitsRemoved"]) == (unit9, unit9, 3)
    assert (d["zeroFile"], d["zeroFrom"], d["zeroTo"]) == (FILES[1], 4 * UNIT_SIZE, LOG_FILE)
    assert d["filesDeleted"] == [FILES[2]] and d["pendingLost"] == 3
    assert [s["after"] for s in d["slotsChanged"]] == [None, None, None]
    emptied = [s["index"] for s in d["slotsChanged"]]
    manifest = _apply(cfg, apply_timer_repair, plan, "rmqtool recover")
    _cut_commitlog(cfg, cut)
    # bytes: the first file as it was, the second's units 5..8 as they were and zeros after, the third gone
    assert (layout.log_dir / FILES[0]).read_bytes() == before[f"timerlog/{FILES[0]}"]
    data = (layout.log_dir / FILES[1]).read_bytes()
    assert data[:4 * UNIT_SIZE] == before[f"timerlog/{FILES[1]}"][:4 * UNIT_SIZE] and not any(data[4 * UNIT_SIZE:])
    assert not (layout.log_dir / FILES[2]).exists()
    assert all(_wheel_slot(layout, i) == bytes(SLOT_SIZE) for i in emptied)
    assert {e["path"] for e in manifest["entries"]} >= {f"timerlog/{FILES[1]}", f"timerlog/{FILES[2]}"}
    # the same store made with the 9 messages that remain has the same wheel
    ref = tmp_path / "ref"
    ref.mkdir()
    make_timer_store(ref / "s", 9, fire_base=T0 + 3_600_000, write_ms=T0, read_ms=T0, timer_log_size=LOG_FILE)
    assert layout.wheel.read_bytes() == (ref / "s" / "timerwheel").read_bytes()
    again = plan_timer_repair(cfg, cut, [], 9)
    assert not again.changed and again.as_dict()["unitsRemoved"] == 0  # idempotent
    _verifies_clean(cfg)
