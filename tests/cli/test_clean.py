"""rmqtool clean: expired commit-log segments by mtime (oldest first, never the last), consume-queue and index
files below the new minimum, corrected minimum queue offsets, --force-now, --dry-run, symlinks."""
from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from helpers import snapshot
from rmqtool.app import app

SEG = 4096
CQ = 200  # 10 units per consume-queue file
GEOM = ["--commitlog-file-size", str(SEG), "--hash-slots", "16", "--max-index", "64"]
HOUR = 3600
runner = CliRunner()


def cli(*args: str, code: int | None = 0):
    r = runner.invoke(app, list(args))
    if code is not None:
        assert r.exit_code == code, f"exit {r.exit_code}: {r.stdout}\n{r.stderr}"
    return r


def build(tmp: Path, n: int = 130) -> tuple[Path, list[dict]]:
    store = tmp / "s"
    msgs = [{"topic": "T", "queueId": 0, "keys": [f"k{i}"], "uniqKey": f"U{i:06d}",
             "storeTimestamp": 1_700_000_000_000 + i * 1000, "body": f"message {i} " + "y" * (i % 23)}
            for i in range(n)]
    inp = tmp / "in.jsonl"
    inp.write_text("".join(json.dumps(m) + "\n" for m in msgs))
    r = cli("put", "--store", str(store), "--json", "--from-jsonl", str(inp), "--cq-file-size", str(CQ), *GEOM)
    return store, [json.loads(line) for line in r.stdout.splitlines()]


def segments(store: Path) -> list[Path]:
    return sorted((store / "commitlog").iterdir())


def age(path: Path, hours: float) -> None:
    t = time.time() - hours * HOUR
    os.utime(path, (t, t), follow_symlinks=False)


def clean_json(store: Path, *extra: str, code: int = 0) -> dict:
    return json.loads(cli("clean", "--store", str(store), "--json", *extra, *GEOM, code=code).stdout)


def hashes(store: Path) -> dict:
    """Content hash and mtime of every file: "changes nothing" means neither moves."""
    return snapshot(store)


def index_headers(store: Path) -> list[tuple[str, int]]:
    files = sorted((p for p in (store / "index").iterdir() if p.name.isdigit()), key=lambda p: (len(p.name), p.name))
    return [(p.name, struct.unpack(">qqqqii", p.read_bytes()[:40])[3]) for p in files]


def deleted_names(d: dict, kind: str) -> list[str]:
    section = {"commitlog": "commitLog", "consumequeue": "consumeQueues", "index": "index"}[kind]
    return [Path(i["path"]).name for i in d[section]["deleted"]]


def test_expired_segments_go_oldest_first_and_stop_at_the_first_unexpired(tmp_path):
    store, acks = build(tmp_path)
    segs = segments(store)
    assert len(segs) >= 5
    for p, h in zip(segs, [200, 100, 10, 300]):
        age(p, h)
    for p in segs[4:]:
        age(p, 500)  # old, but the last segment is never deleted and nothing after an unexpired one goes
    idx_before = index_headers(store)
    d = clean_json(store)
    assert deleted_names(d, "commitlog") == [segs[0].name, segs[1].name]
    assert segs[2].name in d["commitLog"]["stoppedBecause"]
    assert [p.name for p in segments(store)] == [p.name for p in segs[2:]]
    new_min = int(segs[2].name)
    assert d["minCommitLogOffsetBefore"] == 0 and d["minCommitLogOffsetAfter"] == new_min
    # Consume-queue files whose last unit is below the new minimum, never the last file (format §8.3).
    cq_dir = store / "consumequeue" / "T" / "0"
    n_files = -(-len(acks) // 10)
    expected_cq = [f"{k * CQ:020d}" for k in range(n_files - 1) if acks[k * 10 + 9]["commitLogOffset"] < new_min]
    assert expected_cq and deleted_names(d, "consumequeue") == expected_cq
    assert sorted(p.name for p in cq_dir.iterdir()) == [f"{k * CQ:020d}" for k in range(len(expected_cq), n_files)]
    first_kept = next(i for i, a in enumerate(acks) if a["commitLogOffset"] >= new_min)
    (q,) = d["consumeQueues"]["queues"]
    assert (q["minOffsetBefore"], q["minOffsetAfter"], q["maxOffset"]) == (0, first_kept, len(acks))
    # Index files whose endPhyOffset is below the new minimum, oldest first, never the newest.
    expected_idx = []
    for name, end_phy in idx_before[:-1]:
        if end_phy >= new_min:
            break
        expected_idx.append(name)
    assert expected_idx and deleted_names(d, "index") == expected_idx
    assert [n for n, _ in index_headers(store)] == [n for n, _ in idx_before[len(expected_idx):]]
    assert d["bytesFreed"] > 0 and d["filesDeleted"] == 2 + len(expected_cq) + len(expected_idx)
    # What is left still works: a message in a kept segment by key, and a clear error for a deleted one.
    last = acks[-1]
    r = cli("query-key", "--store", str(store), "--topic", "T", "--key", f"k{len(acks) - 1}", "--json", *GEOM)
    assert json.loads(r.stdout)["commitLogOffset"] == last["commitLogOffset"]
    r = cli("get", "--store", str(store), "--offset", "0", "--commitlog-file-size", str(SEG), code=2)
    assert r.stderr.count("\n") == 1
    # Clean-up leaves a store recovery has nothing to say about.
    rec = json.loads(cli("recover", "--store", str(store), "--json", *GEOM).stdout)
    assert rec["consistent"] and not rec["changed"]


def test_nothing_expired_deletes_nothing(tmp_path):
    store, _ = build(tmp_path)
    before = hashes(store)
    d = clean_json(store)
    assert d["filesDeleted"] == 0 and "not expired" in d["commitLog"]["stoppedBecause"]
    assert hashes(store) == before


def test_force_now_deletes_every_segment_but_the_last(tmp_path):
    store, acks = build(tmp_path)
    segs = segments(store)
    d = clean_json(store, "--force-now")
    assert deleted_names(d, "commitlog") == [p.name for p in segs[:-1]]
    assert segments(store) == [segs[-1]]
    assert len(list((store / "index").iterdir())) >= 1  # the newest index file stays
    r = cli("get", "--store", str(store), "--offset", str(acks[-1]["commitLogOffset"]), "--commitlog-file-size",
            str(SEG), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["msgId"] == acks[-1]["msgId"]


def test_dry_run_changes_nothing_and_lists_what_clean_deletes(tmp_path):
    store, _ = build(tmp_path)
    for p in segments(store)[:3]:
        age(p, 100)
    before = hashes(store)
    plan = clean_json(store, "--dry-run")
    human = cli("clean", "--store", str(store), "--dry-run", *GEOM).stdout
    assert hashes(store) == before
    assert "would delete" in human and "dry run" in human
    done = clean_json(store)
    for kind in ("commitlog", "consumequeue", "index"):
        assert deleted_names(done, kind) == deleted_names(plan, kind)
    assert plan["bytesFreed"] == done["bytesFreed"] > 0


def test_reserved_hours_option_and_broker_conf(tmp_path):
    store, _ = build(tmp_path)
    segs = segments(store)
    age(segs[0], 5)
    age(segs[1], 0.5)
    assert clean_json(store, "--dry-run")["filesDeleted"] == 0
    d = clean_json(store, "--reserved-hours", "2", "--dry-run")
    assert deleted_names(d, "commitlog") == [segs[0].name]
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={store}\nfileReservedTime=4\nmappedFileSizeCommitLog={SEG}\n")
    d = json.loads(cli("clean", "--broker-conf", str(conf), "--json", "--dry-run").stdout)
    assert d["reservedHours"] == 4 and deleted_names(d, "commitlog") == [segs[0].name]
    r = cli("clean", "--store", str(store), "--reserved-hours", "-1", code=2)
    assert r.stderr.count("\n") == 1 and "negative" in r.stderr


def test_symlinks_leading_outside_are_reported_and_left(tmp_path):
    store, _ = build(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    segs = segments(store)
    # The oldest segment lives outside the store, behind a symlink.
    target = outside / segs[0].name
    segs[0].rename(target)
    segs[0].symlink_to(target)
    # A topic directory and an index file that lead outside.
    fake_q = outside / "topic" / "0"
    fake_q.mkdir(parents=True)
    for k in range(3):
        (fake_q / f"{k * CQ:020d}").write_bytes(struct.pack(">qiq", 0, 10, 0) * 10)
    (store / "consumequeue" / "Evil").symlink_to(outside / "topic")
    fake_idx = outside / "idx"
    fake_idx.write_bytes(bytes(2000))
    (store / "index" / "10000000000000000").symlink_to(fake_idx)  # sorts first: the oldest index file
    for p in segs:
        age(p, 500)
    age(target, 500)
    outside_before = {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()}
    d = clean_json(store, "--force-now")
    reasons = {s["path"]: s["reason"] for s in d["skipped"]}
    assert "outside the store" in reasons[f"commitlog/{segs[0].name}"]
    assert "outside the store" in reasons["consumequeue/Evil"]
    assert "outside the store" in reasons["index/10000000000000000"]
    assert d["commitLog"]["deleted"] == [] and segs[0].name in d["commitLog"]["stoppedBecause"]
    assert d["index"]["deleted"] == []
    assert segs[0].is_symlink() and all(p.exists() for p in segs)
    assert {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()} == outside_before
    human = cli("clean", "--store", str(store), "--dry-run", *GEOM).stdout
    assert "left alone" in human


def test_unclean_store_is_refused_but_dry_run_works(tmp_path):
    store, _ = build(tmp_path)
    for p in segments(store)[:2]:
        age(p, 100)
    (store / "abort").write_text("1")
    before = hashes(store)
    r = cli("clean", "--store", str(store), *GEOM, code=2)
    assert r.stderr.count("\n") == 1 and "recover" in r.stderr
    assert hashes(store) == before
    r = cli("clean", "--store", str(store), "--dry-run", *GEOM)
    assert "recover" in r.stderr
    assert hashes(store) == before


@pytest.mark.parametrize("args", [["--store", "/nonexistent/store"], []])
def test_bad_arguments_are_one_line_errors(args):
    r = cli("clean", *args, code=2)
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
