"""`put --from-jsonl FILE` with the parse shared by a helper process (engine.broker.write.jsonl.ParseHelper): the same
store, the same acknowledgements and the same stops as the in-process read, whichever process parses the line
that stops the run. The threshold and the read size are lowered so that a small file takes the helper path and
is cut into many blocks, parsed in turn by the two processes."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

import engine.broker.write.jsonl as jsonl
from helpers import SMALL, assert_one_line_error, run

T0 = 1_700_000_000_000
GEOM = ["--hash-slots", "64", "--max-index", "512", "--commitlog-file-size", "65536", "--cq-file-size", "600"]


def lines(n: int, uniq: bool = True) -> list[str]:
    out = []
    for i in range(n):
        m = {"topic": f"T{i % 2}", "keys": [f"k{i}"], "body": f"body {i} " + "x" * (i % 37), "storeTimestamp": T0 + i,
             "queueId": i % 3}
        if uniq:
            m["uniqKey"] = f"U{i:030d}"
        out.append(json.dumps(m))
    return out


def files_of(store: Path) -> dict[str, str]:
    """sha256 of every file, index files by position (their names are creation times); config/topics.json by its
    topics (its DataVersion holds the time it was written)."""
    from engine.java import fastjson

    out = {}
    for p in sorted(store.rglob("*")):
        if p.is_file() and p.name != "lock":
            rel = p.relative_to(store)
            key = f"index#{sorted(store.joinpath('index').iterdir()).index(p)}" if rel.parts[0] == "index" else str(rel)
            data = p.read_bytes()
            if str(rel) == "config/topics.json":
                data = fastjson.dumps(fastjson.loads(data)["topicConfigTable"]).encode()
            out[key] = hashlib.sha256(data).hexdigest()
    return out


@pytest.fixture
def helper_on(monkeypatch):
    monkeypatch.setattr(jsonl, "PARSE_HELPER_MIN_BYTES", 0)
    monkeypatch.setattr(jsonl, "READ_CHUNK", 2048)  # blocks of a few lines: many blocks for each process
    started = []
    real = jsonl.ParseHelper.__init__

    def init(self, *a, **k):
        started.append(1)
        real(self, *a, **k)
    monkeypatch.setattr(jsonl.ParseHelper, "__init__", init)
    return started


def put_file(tmp_path: Path, name: str, text: str, *extra):
    f = tmp_path / f"{name}.jsonl"
    f.write_text(text)
    return run(["put", "--store", tmp_path / name, *GEOM, "--from-jsonl", f, "--json", *extra]), f


def test_the_helper_writes_what_the_process_alone_writes(tmp_path, monkeypatch, helper_on):
    text = "\n".join(lines(600)) + "\n"
    r_helper, _ = put_file(tmp_path, "h", text)
    assert r_helper.exit_code == 0, r_helper.output
    assert helper_on, "the helper path was not taken"
    monkeypatch.setattr(jsonl, "PARSE_HELPER_MIN_BYTES", 1 << 62)
    r_alone, _ = put_file(tmp_path, "a", text)
    assert r_alone.exit_code == 0 and len(helper_on) == 1
    assert r_helper.stdout == r_alone.stdout and len(r_helper.stdout.splitlines()) == 600
    assert files_of(tmp_path / "h") == files_of(tmp_path / "a")
    acks = [json.loads(x) for x in r_helper.stdout.splitlines()]
    assert [a["uniqKey"] for a in acks] == [f"U{i:030d}" for i in range(600)]


def test_generated_uniq_keys_are_distinct_across_the_two_processes(tmp_path, helper_on):
    r, _ = put_file(tmp_path, "h", "\n".join(lines(500, uniq=False)) + "\n", "--sync-flush")
    assert r.exit_code == 0, r.output
    keys = [json.loads(x)["uniqKey"] for x in r.stdout.splitlines()]
    assert len(keys) == 500 and len(set(keys)) == 500
    assert len({k[:12] for k in keys}) == 2  # the writer's ids and the helper's (its own pid and random bits)
    d = run(["dump-commitlog", "--store", tmp_path / "h", "--json"])
    assert [m["uniqKey"] for m in map(json.loads, d.stdout.splitlines()) if m["type"] == "MESSAGE"] == keys


@pytest.mark.parametrize("bad_line", [3, 40, 77, 150, 333])
@pytest.mark.parametrize("bad", ["{not json", '{"topic": "T", "queueId": -5}', "[1, 2]"])
def test_a_bad_line_stops_the_run_where_it_would_without_the_helper(tmp_path, monkeypatch, helper_on, bad_line, bad):
    good = lines(400)
    text = "\n".join(good[:bad_line - 1] + [bad] + good[bad_line - 1:]) + "\n"
    r, f = put_file(tmp_path, "h", text)
    assert_one_line_error(r, code=2, contains=f"{f}:{bad_line}:")
    assert f"{bad_line - 1} message(s) before it were stored" in r.stderr
    assert len(r.stdout.splitlines()) == bad_line - 1
    monkeypatch.setattr(jsonl, "PARSE_HELPER_MIN_BYTES", 1 << 62)
    r2, f2 = put_file(tmp_path, "a", text)
    assert r2.stderr.replace(str(f2), "F") == r.stderr.replace(str(f), "F")
    assert r2.stdout == r.stdout
    assert files_of(tmp_path / "h") == files_of(tmp_path / "a")


def test_not_utf8_in_the_helpers_part_is_reported_with_its_line(tmp_path, helper_on):
    good = [x.encode() for x in lines(300)]
    f = tmp_path / "in.jsonl"
    f.write_bytes(b"\n".join(good[:200] + [b'{"topic": "\xff"}'] + good[200:]) + b"\n")
    r = run(["put", "--store", tmp_path / "s", *GEOM, "--from-jsonl", f])
    assert_one_line_error(r, code=2, contains=":201: not UTF-8")
    assert "200 message(s) before it were stored" in r.stderr


def test_a_helper_that_dies_is_a_one_line_error_after_the_batches_before_it(tmp_path, monkeypatch, helper_on):
    real = jsonl._parse_in_helper

    def dies(conn, reader, fd, queue_id, name):
        monkeypatch.setattr(jsonl, "_block_batches", _dies_after(jsonl._block_batches, 2))
        real(conn, reader, fd, queue_id, name)
    monkeypatch.setattr(jsonl, "_parse_in_helper", dies)
    r, _ = put_file(tmp_path, "h", "\n".join(lines(600)) + "\n")
    assert_one_line_error(r, contains="the process parsing the JSONL input ended unexpectedly (exit code 7)")
    acks = [json.loads(x) for x in r.stdout.splitlines()]
    assert 0 < len(acks) < 600 and [a["uniqKey"] for a in acks] == [f"U{i:030d}" for i in range(len(acks))]
    d = run(["dump-commitlog", "--store", tmp_path / "h", "--json"])
    assert sum(json.loads(x)["type"] == "MESSAGE" for x in d.stdout.splitlines()) == len(acks)


def _dies_after(fn, n: int):
    calls = [0]

    def wrapped(*a, **k):
        calls[0] += 1
        if calls[0] > n:
            os._exit(7)
        return fn(*a, **k)
    return wrapped


def test_small_files_and_stdin_are_read_in_process(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(jsonl.ParseHelper, "__init__", lambda *a, **k: started.append(1))
    r, _ = put_file(tmp_path, "s", "\n".join(lines(50)) + "\n")
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 50
    r = run(["put", "--store", tmp_path / "s2", *SMALL, "--from-jsonl", "-", "--json"], input="\n".join(lines(5)) + "\n")
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 5
    assert not started


def test_a_killed_writer_leaves_no_helper_and_its_output_ends(tmp_path):
    """SIGKILL of `rmqtool put` (a crash): its helper process ends too (its next send finds no reader) and does
    not hold the writer's stdout open, so a reader of the output sees it end at once."""
    import contextlib
    import signal
    import subprocess
    import sys
    import threading
    import time

    f = tmp_path / "big.jsonl"
    with open(f, "w") as out:
        for line in lines(40_000):
            out.write(line + " " * 200 + "\n")  # about 10 MB: over PARSE_HELPER_MIN_BYTES
    assert f.stat().st_size >= jsonl.PARSE_HELPER_MIN_BYTES
    p = subprocess.Popen([sys.executable, "-m", "rmqtool", "put", "--store", str(tmp_path / "s"), *GEOM,
                          "--from-jsonl", str(f), "--json", "--sync-flush"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    first = p.stdout.readline()
    assert json.loads(first)["uniqKey"] == "U" + "0" * 30
    kids = []
    for t in Path(f"/proc/{p.pid}/task").iterdir():
        kids += [int(c) for c in (t / "children").read_text().split()]
    assert kids, "the put has no helper process"
    p.send_signal(signal.SIGKILL)
    got = []
    reader = threading.Thread(target=lambda: got.append(p.stdout.read()), daemon=True)
    reader.start()
    reader.join(10)  # EOF once the writer is gone, unless the helper holds the pipe
    p.wait()
    if reader.is_alive():
        for k in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(k, signal.SIGKILL)
        pytest.fail("the writer's stdout did not end when it was killed: its helper holds it")
    acked = 1 + len(got[0].splitlines())
    assert acked < 40_000
    def running(pid: int) -> bool:
        try:
            return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 10
    while any(map(running, kids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = [k for k in kids if running(k)]
    for k in alive:
        os.kill(k, signal.SIGKILL)
    assert not alive, f"helper processes left running: {alive}"
