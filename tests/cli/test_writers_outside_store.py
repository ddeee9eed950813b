"""What a new user met (issue 33): writers that refuse a directory that is not a store write nothing into it, a
read-only store is reported as read-only (not locked), and the rough edges of items 10 and 12."""
from __future__ import annotations

import errno
import json
import os

import pytest

from helpers import SMALL, assert_one_line_error, put_jsonl, run, snapshot


@pytest.mark.parametrize("args", [
    ["recover"], ["clean", "--force-now"], ["prune"], ["repair", "consume-queue", "--topic", "T", "--queue-id", "0"],
    ["repair", "config", "topics.json", "--from-bak"], ["repair", "timer"]])
@pytest.mark.parametrize("dry", [False, True])
def test_a_directory_that_is_not_a_store_is_refused_with_nothing_written(tmp_path, args, dry):
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    before = snapshot(home)
    cmd = args[:2] if args[0] == "repair" else args[:1]
    r = run([*cmd, "-s", home, *args[len(cmd):], *(["--dry-run"] if dry else [])])
    assert r.exit_code == 2, r.output
    assert snapshot(home) == before and sorted(os.listdir(home)) == ["notes.txt"]  # no lock file


def test_a_read_only_store_is_refused_as_read_only_not_locked(tmp_path, monkeypatch):
    store = tmp_path / "s"
    put_jsonl(store, [{"topic": "T", "body": "a"}])
    from engine.broker.config import lock

    real_open = os.open

    def ro_open(path, flags, *a, **kw):
        if str(path).endswith("/lock") and flags & (os.O_RDWR | os.O_WRONLY | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *a, **kw)
    monkeypatch.setattr(lock.os, "open", ro_open)
    for args in (["put", "-s", store, *SMALL, "--topic", "T", "--body", "b"], ["recover", "-s", store, *SMALL]):
        r = run(args)
        assert_one_line_error(r, 2, contains="read-only")


def test_a_progress_bar_of_unknown_total_draws_no_full_bar():
    import io

    from rich.console import Console
    from rich.progress import Progress

    from rmqtool.render import progress_columns

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80, color_system=None)
    with Progress(*progress_columns(), console=console, auto_refresh=False) as bar:
        task = bar.add_task("put", total=None)
        bar.advance(task, 1234)
        bar.refresh()
        unknown = out.getvalue()
        bar.update(task, total=2468)
        bar.refresh()
        known = out.getvalue()[len(unknown):]
    assert "━" not in unknown and "/?" not in unknown and "1,234" in unknown
    assert "━" in known and "1234/2468" in known


def test_body_file_dash_reads_stdin(tmp_path):
    store = tmp_path / "s"
    r = run(["put", "-s", store, *SMALL, "-t", "T", "--body-file", "-", "--json"], input="abc\x00def\n")
    assert r.exit_code == 0, r.output
    off = json.loads(r.stdout)["commitLogOffset"]
    got = json.loads(run(["get", "-s", store, "--commitlog-file-size", "4096", "--offset", off, "--json"]).stdout)
    assert got["body"] == "abc\x00def\n"


@pytest.mark.parametrize("how", ["option", "jsonl"])
def test_a_negative_store_time_is_refused(tmp_path, how):
    store = tmp_path / "s"
    if how == "option":
        r = run(["put", "-s", store, *SMALL, "-t", "T", "--body", "x", "--store-timestamp", "-5"])
    else:
        r = run(["put", "-s", store, *SMALL, "--from-jsonl", "-"],
                input=json.dumps({"topic": "T", "body": "x", "storeTimestamp": -5}) + "\n")
    assert_one_line_error(r, 2)
    assert r.stdout == "" and not store.exists()


def test_no_acknowledgement_header_when_nothing_was_stored(tmp_path):
    r = run(["put", "-s", tmp_path / "s", *SMALL, "--from-jsonl", "-"], input='{"topic": "T", "bodyy": "x"}\n')
    assert r.exit_code == 2 and r.stdout == ""
    r = run(["put", "-s", tmp_path / "s", *SMALL, "--from-jsonl", "-"], input='{"topic": "T", "body": "x"}\n')
    assert r.exit_code == 0 and r.stdout.splitlines()[0].split("\t")[0] == "commitLogOffset"
    assert len(r.stdout.splitlines()) == 2


def _topics(store) -> dict:
    from engine.java import fastjson

    return fastjson.loads((store / "config" / "topics.json").read_bytes())


def test_put_records_the_topics_it_created_as_a_broker_does(tmp_path):
    from engine.broker.config.jsonfiles import encode_topics
    from engine.java import fastjson

    store = tmp_path / "s"
    put_jsonl(store, [{"topic": "T", "body": "a", "queueId": 5}, {"topic": "SCHEDULE_TOPIC_XXXX", "body": "d"}])
    first = (store / "config" / "topics.json").read_bytes()
    t = _topics(store)
    assert list(t["topicConfigTable"]) == ["T"]  # a system topic is the broker's own
    assert t["topicConfigTable"]["T"]["readQueueNums"] == t["topicConfigTable"]["T"]["writeQueueNums"] == 6
    assert t["topicConfigTable"]["T"]["perm"] == 6 and t["dataVersion"]["counter"] == 1
    assert encode_topics(t["topicConfigTable"], t["dataVersion"]).encode() == first  # fastjson's own text
    assert not (store / "config" / "topics.json.bak").exists()

    put_jsonl(store, [{"topic": "T", "body": "b"}])  # no new topic: nothing written
    assert (store / "config" / "topics.json").read_bytes() == first
    put_jsonl(store, [{"topic": "U", "body": "c"}])
    t = _topics(store)
    assert set(t["topicConfigTable"]) == {"T", "U"} and t["topicConfigTable"]["U"]["writeQueueNums"] == 4
    assert t["dataVersion"]["counter"] == 2
    assert (store / "config" / "topics.json.bak").read_bytes() == first  # ConfigManager.persist's copy
    r = run(["doctor", "-s", store, *SMALL[:-2], "--json"])
    assert r.exit_code == 0, r.output
    assert not [f for f in json.loads(r.stdout)["findings"] if "topics.json" in str(f.get("file"))]
    assert fastjson.loads(first)  # what repair config --from-store reads


def test_a_damaged_topics_json_is_left_for_doctor(tmp_path):
    store = tmp_path / "s"
    put_jsonl(store, [{"topic": "T", "body": "a"}])
    (store / "config" / "topics.json").write_bytes(b'{"topicConfigTable":{"T"')
    put_jsonl(store, [{"topic": "U", "body": "a"}])
    assert (store / "config" / "topics.json").read_bytes() == b'{"topicConfigTable":{"T"'


def test_a_full_disk_at_the_first_put_leaves_no_store_and_reports_the_free_space_it_saw(tmp_path, monkeypatch):
    from engine.broker.write import writer

    seen = []

    def free(path):
        seen.append(str(path))
        return 1000  # less than any index file: the room check fails before anything is stored
    monkeypatch.setattr(writer, "free_bytes", free)
    for store, pre in ((tmp_path / "new", None), (tmp_path / "empty", []), (tmp_path / "mount", ["lost+found"])):
        if pre is not None:
            store.mkdir()
            for name in pre:
                (store / name).mkdir()
        extra = ["--create"] if pre else []
        r = run(["put", "-s", store, *SMALL, "--from-jsonl", "-", "--json", *extra],
                input=json.dumps({"topic": "T", "keys": "k", "body": "x"}) + "\n")
        assert_one_line_error(r, 2, contains="1000 bytes free")
        assert r.stdout == ""
        if pre is None:
            assert not store.exists()
        else:
            assert sorted(os.listdir(store)) == pre
    assert seen


def test_a_tiered_record_cut_short_is_not_called_a_size_mismatch():
    import struct

    from engine.tiered.flat import reader

    rec = struct.pack(">ii", 919, -626843481) + bytes(492)  # TOTALSIZE right, MAGIC V1, only 500 bytes readable
    why = reader._split_problem(rec, 919)
    assert why is not None and "does not match" not in why and "500" in why
    assert "does not match" in reader._split_problem(struct.pack(">ii", 918, -626843481) + bytes(910), 919)


@pytest.mark.parametrize("read_ms", [2**62, -5])
def test_timer_list_says_a_garbage_timercheck_hides_the_wheel(tmp_path, read_ms):
    import struct
    import time

    from helpers import make_timer_store

    now = int(time.time() * 1000)
    conf, _ = make_timer_store(tmp_path / "t", 12, fire_base=now + 3_600_000, write_ms=now - 1000, read_ms=now - 1000)
    r = run(["timer", "list", "-c", conf, "--json"])
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 12
    tc = tmp_path / "t" / "config" / "timercheck"
    data = bytearray(tc.read_bytes())
    data[0:8] = struct.pack(">q", read_ms)
    tc.write_bytes(bytes(data))
    r = run(["timer", "list", "-c", conf, "--json", "-Q"])
    assert r.exit_code == 3 and r.stdout == ""
    assert "config/timercheck" in r.stderr and "12" in r.stderr


def test_an_empty_table_prints_nothing_on_stdout_with_quiet(tmp_path):
    import time

    from helpers import make_timer_store

    now = int(time.time() * 1000)
    conf, _ = make_timer_store(tmp_path / "t", 3, fire_base=now + 3_600_000, write_ms=now - 1000, read_ms=now - 1000)
    r = run(["timer", "list", "-c", conf, "--topic", "TopicT", "--due-before", str(now), "-Q"])
    assert r.exit_code == 0 and r.stdout == "" and r.stderr == ""
    r = run(["timer", "list", "-c", conf, "--topic", "TopicT", "--due-before", str(now)])
    assert r.exit_code == 0 and r.stdout == "" and r.stderr.startswith("note: ")


@pytest.mark.parametrize("master", ["bogus", "local[x]", "spark:/nohost"])
def test_demo_checks_the_master_before_it_writes_anything(tmp_path, master):
    d = tmp_path / "sample"
    r = run(["demo", d, "--master", master, "-n", "10"])
    assert_one_line_error(r, 2)
    assert not d.exists()
    r = run(["spark-reindex", "-s", tmp_path / "none", "--master", master])
    assert r.exit_code == 2


def test_spark_masters_are_accepted():
    from engine.exec.runners import master_problem

    for m in ("inline", "local", "local[2]", "local[*]", "local[4,2]", "local-cluster[2,1,1024]",
              "spark://h:7077", "spark://a:7077,b:7077", "yarn", "k8s://https://h:6443", "mesos://h:5050"):
        assert master_problem(m) is None, m
