"""rmqtool info (the store at a glance, read-only) and rmqtool prune (the folders rmqtool left), issue 23 item 4."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from engine import clock
from engine.broker.commitlog.log import CommitLog
from engine.broker.config.lock import StoreLock
from engine.broker.index.file import IndexFile
from engine.broker.layout import list_index_files
from engine.errors import StoreLockedError
from helpers import assert_one_line_error, lock_held, run, sample_workspace, snapshot, spy


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict[str, Path]:
    return sample_workspace(tmp_path_factory.mktemp("infoprune"))


@pytest.fixture
def store(base, tmp_path) -> Path:
    """A copy of the sample store: a recovery placeholder in a quarantine run, an index backup, config files."""
    shutil.copytree(base["store"], tmp_path / "store", symlinks=True)
    return tmp_path / "store"


def info(store: Path, *extra: str, code: int = 0) -> dict:
    r = run(["info", "-s", store, "--json", *extra])
    assert r.exit_code == code, r.output
    return json.loads(r.stdout)


def dump(store: Path) -> list[dict]:
    r = run(["dump-commitlog", "-s", store, "--json"])
    return [json.loads(line) for line in r.stdout.splitlines()]


def test_info_answers_from_headers_and_listings(store, monkeypatch):
    walks = spy(monkeypatch, CommitLog, "walk_segments", lambda self, got: 1)
    opens = spy(monkeypatch, IndexFile, "open", lambda cls, got: 1)
    before = snapshot(store)
    d = info(store)
    assert walks == [] and opens == []  # no commit-log walk, no index file mapped: headers only
    assert snapshot(store) == before    # read-only
    entries = dump(store)
    last = [e for e in entries if e["type"] == "MESSAGE"][-1]
    segs = sorted((store / "commitlog").iterdir())
    cl = d["commitLog"]
    assert cl["minOffset"] == 0 and cl["maxOffset"] == last["commitLogOffset"] + last["storeSize"]
    assert cl["segments"] == len(segs) and cl["segmentSize"] == 4096 and cl["lastSegment"] == segs[-1].name
    assert cl["bytes"]["apparent"] == sum(p.stat().st_size for p in segs)
    assert d["consumeQueues"]["topics"] == 2 and d["consumeQueues"]["queues"] == 4
    ix = d["index"]
    assert ix["files"] == len(list_index_files(store / "index")) and (ix["hashSlotNum"], ix["indexNum"]) == (16, 64)
    times = [e["storeTimestamp"] for e in entries if e["type"] == "MESSAGE"]
    assert ix["firstStoreTimestamp"] == min(times) and ix["lastStoreTimestamp"] == max(times)
    cp = d["checkpoint"]
    assert cp["readable"] and cp["physicMsgTimestamp"] == max(times)
    assert {"logicsMsgTimestamp", "indexMsgTimestamp"} <= set(cp)
    assert d["abort"] == {"present": False, "pid": None} and d["locked"] is False
    assert [c["name"] for c in d["configFiles"]] == ["consumerOffset.json", "topics.json"]
    assert d["tiered"] is None and d["timer"] is None and d["problems"] == []


def test_info_lists_quarantine_runs_with_their_placeholders_and_the_index_backups(store):
    d = info(store)
    (q,) = d["quarantine"]
    assert q["recognised"] and q["complete"] and q["path"].startswith("quarantine/")
    manifest = json.loads((store / q["path"] / "manifest.json").read_text())
    assert q["manifest"]["entries"] == len(manifest["entries"]) and q["bytes"]["apparent"] > 0
    (ph,) = d["placeholders"]
    assert q["placeholderCount"] == 1 and ph["manifest"] == f"{q['path']}/manifest.json" and ph["present"]
    record = next(e for e in dump(store) if e.get("commitLogOffset") == ph["commitLogOffset"])
    assert record["topic"] == "rmq_sys_rmqtool_quarantine" and record["storeSize"] == ph["size"]
    assert ph["origin"] == {"topic": "TopicA", "queueId": 1, "queueOffset": 1}  # the unit that pointed at it
    (b,) = d["backups"]
    assert b["recognised"] and b["name"].startswith("index.bak-") and b["manifest"]["by"] == "spark-reindex"
    assert 0 <= b["ageSeconds"] < 3600
    text = run(["info", "-s", store], env={"COLUMNS": "80"}).stdout
    assert "recovery placeholders" in text and str(ph["commitLogOffset"]) in text and b["name"] in text


def test_info_tells_a_held_lock_without_taking_it(store):
    with lock_held(store) as pid:
        d = info(store)
        assert d["locked"] is True and d["lockHolderPid"] == pid
        assert "held by a live broker or rmqtool" in run(["info", "-s", store]).stdout
        with pytest.raises(StoreLockedError):  # still held by the other process: info took nothing
            StoreLock(store).acquire()
    assert info(store)["locked"] is False


def test_info_abort_checkpoint_timer_and_tiered(store):
    (store / "abort").write_text("4242")
    (store / "timerwheel").write_bytes(b"\0" * 4096)
    (store / "timerlog").mkdir()
    (store / "timerlog" / "00000000000000000000").write_bytes(b"\0" * 8192)
    (store / "config" / "timercheck").write_bytes(b"\0" * 32)
    (store / "tiered_index_file").mkdir()
    (store / "tiered_index_file" / "1700000000000").write_bytes(b"\0" * 100)
    d = info(store)
    assert d["abort"] == {"present": True, "pid": 4242}
    assert d["timer"]["wheel"]["apparent"] == 4096 and d["timer"]["logFiles"] == 1
    assert d["timer"]["logBytes"]["apparent"] == 8192 and d["timer"]["checkpoint"] == 32
    assert d["tiered"]["indexFiles"] == 1 and d["tiered"]["metadata"] is None
    (store / "checkpoint").write_bytes(b"\1" * 12)
    r = run(["info", "-s", store, "--json"])  # shown, no failure: reads do not need it (issue 34 item 9)
    cp = json.loads(r.stdout)["checkpoint"]
    assert r.exit_code == 0 and cp["readable"] is False and "12 bytes" in cp["problem"]


def test_info_refuses_what_is_not_a_store(tmp_path):
    (tmp_path / "x").mkdir()
    assert_one_line_error(run(["info", "-s", tmp_path / "x"]), 2, "is not a RocketMQ store")
    assert_one_line_error(run(["info", "-s", tmp_path / "nope"]), 2, "does not exist")


# ------------------------------------------------------------------ prune


def test_prune_dry_run_lists_and_changes_nothing(store):
    before = snapshot(store)
    r = run(["prune", "-s", store, "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert sorted(x["kind"] for x in d["remove"]) == ["index-backup", "quarantine"] and d["keep"] == []
    assert d["dryRun"] and d["removed"] == [] and d["bytes"]["allocated"] > 0
    assert snapshot(store) == before


def test_prune_removes_its_folders_and_nothing_else(store):
    d = info(store)
    gone = [store / x["path"] for x in d["quarantine"] + d["backups"]]
    others = {k: v for k, v in snapshot(store).items()
              if not any(Path(store / k).is_relative_to(g) for g in gone)}
    r = run(["prune", "-s", store], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("removing 2 folder(s)")  # listed before the first one went
    assert all(not g.exists() for g in gone)
    assert snapshot(store) == others
    assert info(store)["quarantine"] == [] and info(store)["backups"] == []
    again = run(["prune", "-s", store, "--json"])
    assert json.loads(again.stdout)["remove"] == []


def test_prune_keeps_what_it_cannot_recognise_and_says_why(store):
    (store / "index.bak-20240101000000").mkdir()
    (store / "index.bak-20240101000000" / "20240101000000000").write_bytes(b"x")
    (store / "quarantine" / "mine").mkdir()
    (store / "quarantine" / "mine" / "manifest.json").write_text('{"tool": "someone else", "entries": []}')
    run_dir = next((store / "quarantine").glob("2*"))
    doc = json.loads((run_dir / "manifest.json").read_text())
    doc["complete"] = False
    (run_dir / "manifest.json").write_text(json.dumps(doc))
    outside = store.parent / "elsewhere"
    outside.mkdir()
    (outside / "keep").write_text("x")
    os.symlink(outside, store / "quarantine" / "linked")
    r = run(["prune", "-s", store, "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert [x["kind"] for x in d["remove"]] == ["index-backup"]
    why = {x["name"]: x["why"] for x in d["keep"]}
    assert "no rmqtool-backup.json" in why["index.bak-20240101000000"]
    assert "not written by rmqtool (tool 'someone else')" in why["mine"]
    assert "did not finish" in why[run_dir.name]
    assert "linked" not in why and (outside / "keep").exists()  # a link is not followed, nor listed
    assert (store / "index.bak-20240101000000").exists() and run_dir.exists() and (store / "quarantine" / "mine").exists()


def test_prune_older_than(store, monkeypatch):
    d = json.loads(run(["prune", "-s", store, "--older-than", "7d", "--json"]).stdout)
    assert d["remove"] == [] and {x["why"] for x in d["keep"]} == {"newer than --older-than"}
    assert d["olderThanSeconds"] == 7 * 86400
    d = json.loads(run(["prune", "-s", store, "--older-than", "1h", "--json"]).stdout)
    assert d["remove"] == [] and len(d["keep"]) == 2
    now = clock.now_ms()
    monkeypatch.setattr(clock, "now_ms", lambda: now + 3_600_000 + 1_000)  # an hour and a second later
    d = json.loads(run(["prune", "-s", store, "--older-than", "1h", "--json"]).stdout)
    assert len(d["remove"]) == 2 and not list((store / "quarantine").glob("2*"))
    assert info(store)["backups"] == []
    assert_one_line_error(run(["prune", "-s", store, "--older-than", "7"]), 2, "is not a duration")


def test_prune_keeps_index_backups_while_the_store_has_no_index(store):
    shutil.rmtree(store / "index")
    d = json.loads(run(["prune", "-s", store, "--json"]).stdout)
    assert [x["kind"] for x in d["remove"]] == ["quarantine"]
    assert "no index/ directory" in d["keep"][0]["why"]


def test_prune_takes_the_store_lock(store):
    # another process holds the lock (an fcntl lock is per process) and prune runs in this one: one small holder
    # process instead of two rmqtool interpreters
    with lock_held(store):
        child = run(["prune", "-s", store])
        dry = run(["prune", "-s", store, "--dry-run"])
    assert child.exit_code == 4 and child.stderr.startswith("error: ") and "locked" in child.stderr
    assert dry.exit_code == 0
    assert len(info(store)["quarantine"]) == 1
