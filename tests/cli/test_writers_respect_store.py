"""Issue 23 items 1, 2, 3, 5, 7, 8, 9: writers that respect the store they are given (its index geometry, a
directory that is not a store), a store that costs what it holds, answers that do not depend on store times going
forward, input that is probably a mistake, whether a rebuilt index equals the old one, and leftovers. Every case
goes through the CLI, on stores written by put and on the real broker's store (tests/golden/broker/r1)."""
from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from helpers import assert_one_line_error, run, said, snapshot, unpack_golden

T0 = 1_700_000_000_000
BIG = ["--hash-slots", "1000", "--max-index", "4000"]  # 84,040-byte index files
SMALL_LOG = ["--commitlog-file-size", "65536"]          # where the commit log's segment size does not matter


def put(store: Path, messages: list[dict], *args, code: int = 0):
    data = "".join(json.dumps(m) + "\n" for m in messages)
    r = run(["put", "--store", store, "--from-jsonl", "-", "--json", *args], input=data)
    assert r.exit_code == code, r.output
    return r


def msgs(n: int, start: int = 0, keys: int = 1, topic: str = "T") -> list[dict]:
    return [{"topic": topic, "keys": [f"k{i}-{j}" for j in range(keys)], "body": f"body {i}", "queueId": i % 2,
             "storeTimestamp": T0 + 1000 * i} for i in range(start, start + n)]


def index_sizes(store: Path) -> list[int]:
    return [p.stat().st_size for p in sorted((store / "index").iterdir()) if p.name.isdigit()]


def reindex(store: Path, *args, code: int = 0) -> dict | object:
    r = run(["spark-reindex", "--store", store, "--master", "inline", "--json", *args])
    assert r.exit_code == code, r.output
    return json.loads(r.stdout) if code == 0 else r


def found(store: Path, key: str, *args) -> list[int]:
    r = run(["query-key", "--store", store, "--topic", "T", "--key", key, "--json", *args])
    assert r.exit_code == 0, r.output
    return [json.loads(line)["commitLogOffset"] for line in r.stdout.splitlines()]


def allocated(root: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in Path(root).rglob("*") if p.is_file())


# ------------------------------------------------------------------------------ 1. the store's index geometry


def test_reindex_then_put_without_flags_keep_the_store_geometry(tmp_path):
    """The issue's case: a store written with --hash-slots 1000 --max-index 4000, then spark-reindex without
    flags (it rebuilt it with the default 420 MB geometry), then put without flags (it refused the store)."""
    store = tmp_path / "s"
    put(store, msgs(30), *BIG, *SMALL_LOG)
    assert index_sizes(store) == [84040]
    out = reindex(store)
    assert (out["hashSlotNum"], out["indexNum"]) == (1000, 4000) and index_sizes(store) == [84040]
    assert out["sameAsBefore"] is True
    put(store, msgs(5, start=30))
    assert index_sizes(store) == [84040]
    assert len(found(store, "k32-0")) == 1
    assert run(["inspect-index", "--store", store, "--verify"]).exit_code == 0


def test_full_index_files_keep_their_geometry(tmp_path):
    store = tmp_path / "s"
    put(store, msgs(40, keys=2), "--hash-slots", "8", "--max-index", "32", *SMALL_LOG)  # 120 items: files roll
    before = index_sizes(store)
    assert len(before) == 4 and set(before) == {40 + 4 * 8 + 20 * 32}
    out = reindex(store)
    assert (out["hashSlotNum"], out["indexNum"]) == (8, 32) and out["sameAsBefore"] is True
    assert index_sizes(store) == before
    put(store, msgs(10, start=40, keys=2))
    assert set(index_sizes(store)) == {712} and len(found(store, "k45-1")) == 1


def test_a_geometry_the_index_files_do_not_have_needs_new_geometry(tmp_path):
    store = tmp_path / "s"
    put(store, msgs(30), *BIG, *SMALL_LOG)   # small segments: snapshot() hashes every byte
    before = snapshot(store)
    for cmd in (["spark-reindex", "--store", store, "--master", "inline"], ["put", "--store", store, "-t", "T",
                                                                            "--body", "x"]):
        r = run([*cmd, "--hash-slots", "10", "--max-index", "40"])
        assert_one_line_error(r, 2, "--hash-slots 1000 --max-index 4000")
        assert "--new-geometry" in r.stderr
        assert snapshot(store) == before  # nothing written
    r = reindex(store, "--new-geometry", code=2)
    assert_one_line_error(r, 2, "--hash-slots and --max-index")
    out = reindex(store, "--hash-slots", "10", "--max-index", "40", "--new-geometry")
    assert out["sameAsBefore"] is False and set(index_sizes(store)) == {880}
    put(store, msgs(5, start=30))  # the new geometry is now the store's
    assert set(index_sizes(store)) == {880} and len(found(store, "k33-0")) == 1


def test_writers_refuse_index_files_they_cannot_tell_apart(tmp_path):
    from engine.broker.index.file import IndexFile

    store = tmp_path / "s"
    put(store, msgs(3), "--commitlog-file-size", "4096")
    shutil.rmtree(store / "index")
    (store / "index").mkdir()
    IndexFile.create(store / "index" / "20240101000000000", 32, 64).close()  # no item, not the 1:4 ratio
    before = snapshot(store)
    for cmd in (["put", "--store", store, "-t", "T", "--body", "x"],
                ["spark-reindex", "--store", store, "--master", "inline"],
                ["recover", "--store", store, "--dry-run"]):
        assert_one_line_error(run(cmd), 2, "cannot tell the index geometry")
        assert snapshot(store) == before
    r = run(["put", "--store", store, "-t", "T", "--body", "x", "--hash-slots", "32", "--max-index", "64"])
    assert r.exit_code == 0, r.output


def test_recover_repairs_the_index_in_the_files_geometry(tmp_path):
    store = tmp_path / "s"
    put(store, msgs(40, keys=2), "--hash-slots", "8", "--max-index", "32", "--commitlog-file-size", "8192")
    last = sorted(p for p in (store / "index").iterdir() if p.name.isdigit())[-1]
    with open(last, "r+b") as f:  # a damaged item in the newest file
        f.seek(40 + 4 * 8 + 20 * 3)
        f.write(b"\xff" * 20)
    (store / "abort").write_text("")
    sizes = index_sizes(store)
    r = run(["recover", "--store", store])
    assert r.exit_code == 0, r.output
    assert index_sizes(store) == sizes
    assert run(["inspect-index", "--store", store, "--verify"]).exit_code == 0


def test_the_real_brokers_store_keeps_its_geometry(tmp_path):
    store = unpack_golden("broker/r1", tmp_path).store
    assert index_sizes(store) == [84040, 84040]
    out = reindex(store)  # no broker.conf, no flags: the files tell
    assert (out["hashSlotNum"], out["indexNum"]) == (1000, 4000) and index_sizes(store) == [84040, 84040]
    assert out["sameAsBefore"] is True  # the broker's files, named by its clock, hold what the rebuild holds


# ------------------------------------------------------------------------------ 2. a directory that is not a store


def test_put_refuses_a_directory_that_is_not_a_store(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    for args in (["-t", "T", "--body", "x"], ["--from-jsonl", "-"]):
        r = run(["put", "--store", home, *args], input=json.dumps({"topic": "T", "body": "x"}) + "\n")
        assert_one_line_error(r, 2, "--create")
        assert sorted(os.listdir(home)) == ["notes.txt"]  # no commitlog/, no lock, no abort
    r = run(["put", "--store", home, "-t", "T", "--body", "x", "--create"])
    assert r.exit_code == 0, r.output
    assert (home / "commitlog").is_dir() and (home / "notes.txt").read_text() == "mine"
    empty = tmp_path / "empty"
    empty.mkdir()
    for target in (empty, tmp_path / "missing" / "store"):
        assert run(["put", "--store", target, "-t", "T", "--body", "x"]).exit_code == 0
    kept = tmp_path / "configured"  # a store so far made of its config only is a store
    (kept / "config").mkdir(parents=True)
    assert run(["put", "--store", kept, "-t", "T", "--body", "x"]).exit_code == 0


# ------------------------------------------------------------------------------ 3. a store costs what it holds


@pytest.mark.slow   # the default geometry on purpose: 1 GiB segments, a rebuild of 420 MB index files
def test_a_store_costs_what_it_holds(tmp_path):
    store = tmp_path / "s"
    messages = [{"topic": "T", "keys": [f"k{i}"], "body": f"hello {i}", "queueId": i % 4} for i in range(1000)]
    put(store, messages)  # the default geometry: 1 GiB segments, 5,000,000 x 20,000,000 index files
    seg = store / "commitlog" / ("0" * 20)
    assert seg.stat().st_size == 1 << 30  # the broker's file size, sparse as the broker's
    assert allocated(store) <= 40 << 20, allocated(store)
    put(store, messages)  # a second put continues in the allocated room
    assert allocated(store) <= 40 << 20, allocated(store)
    r = run(["dump-commitlog", "--store", store, "--json"])
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 2000
    assert len(found(store, "k999")) == 2
    out = reindex(store)  # the rebuilt index is sparse too, and so is the old one it keeps
    assert out["sameAsBefore"] is True
    backup = Path(out["backupDir"])
    assert allocated(backup) <= 22 << 20 and allocated(store / "index") <= 22 << 20


@pytest.mark.slow   # a 64 MiB quarantine copy, read back whole
def test_quarantine_copies_are_sparse(tmp_path):
    import hashlib

    store = tmp_path / "s"
    put(store, msgs(5))
    seg = store / "commitlog" / ("0" * 20)
    with open(seg, "r+b") as f:  # debris after the end of data: at 1 MiB and 64 MiB past it, a hole between
        f.seek(1 << 20)
        f.write(b"\x17" * 100)
        f.seek(64 << 20)
        f.write(b"\x2a" * 100)
    (store / "abort").write_text("")
    r = run(["recover", "--store", store, "--json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    qdir = store / plan["quarantineDir"]
    manifest = json.loads((qdir / "manifest.json").read_text())
    kept = [e for e in manifest["entries"] if e["kind"] == "range" and e["how"] == "copied"]
    assert kept and kept[0]["length"] > 60 << 20
    copy = qdir / kept[0]["stored"]
    assert copy.stat().st_size == kept[0]["length"] and copy.stat().st_blocks * 512 <= 1 << 20
    data = copy.read_bytes()
    assert hashlib.sha256(data).hexdigest() == kept[0]["sha256"]
    assert data[(1 << 20) - kept[0]["offset"]:][:100] == b"\x17" * 100


# ------------------------------------------------------------------------------ 5. store times that go back


def test_answers_do_not_depend_on_store_times_going_forward(tmp_path):
    store = tmp_path / "s"
    times = [T0, T0 + 60_000, T0 + 120_000, T0 - 3_600_000, T0 - 3_500_000]
    r = put(store, [{"topic": "T", "keys": [f"k{i}"], "body": "b", "storeTimestamp": t} for i, t in enumerate(times)],
            *BIG)
    (back,) = said(r, "store-time-went-back")
    assert (back["messages"], back["storeTimestamp"], back["previousStoreTimestamp"]) == (2, times[3], times[2])
    for i, t in enumerate(times):  # every message, by a range around its own store time
        assert len(found(store, f"k{i}", "--begin", str(t - 30_000), "--end", str(t + 30_000))) == 1, i
    raw = run(["query-key", "--store", store, "--topic", "T", "--key", "k1", "--raw", "--json",
               "--begin", str(T0 + 30_000), "--end", str(T0 + 90_000)])
    assert raw.exit_code == 0 and json.loads(raw.stdout)["phyOffsets"] == []  # the broker's own answer, kept
    assert len(said(raw, "index-file-skipped-by-header")) == 1   # said, with why, as the broker's walk skips it
    v = run(["inspect-index", "--store", store, "--verify", "--json"])
    assert v.exit_code == 3
    assert [(f["kind"], f["severity"]) for f in json.loads(v.stdout)["verify"]["findings"]] == [
        ("index-structure", "error")]   # the header's endTimestamp before its beginTimestamp, and nothing else


def test_store_time_going_back_at_an_index_roll(tmp_path):
    store = tmp_path / "s"
    # 31 items per file: the second file starts an hour before the first one ends
    first = [{"topic": "T", "keys": [f"a{i}"], "body": "b", "storeTimestamp": T0 + 1000 * i} for i in range(15)]
    second = [{"topic": "T", "keys": [f"b{i}"], "body": "b", "storeTimestamp": T0 - 3_600_000 + 1000 * i}
              for i in range(15)]
    put(store, first + second, "--hash-slots", "8", "--max-index", "32")
    assert len(index_sizes(store)) == 2
    for m in first + second:
        t = m["storeTimestamp"]
        assert len(found(store, m["keys"][0], "--begin", str(t - 500), "--end", str(t + 500))) == 1, m


# ------------------------------------------------------------------------------ 7. input that is probably a mistake


def test_an_unknown_field_stops_the_run_at_its_line(tmp_path):
    store = tmp_path / "s"
    lines = [{"topic": "T", "body": "one"}, {"topic": "T", "body": "two"}, {"topic": "T", "bodyy": "three"},
             {"topic": "T", "body": "four"}]
    r = put(store, lines, code=2)
    assert_one_line_error(r, 2, "<stdin>:3:")
    assert "'bodyy'" in r.stderr and "2 message(s) before it were stored" in r.stderr
    assert len(r.stdout.splitlines()) == 2
    dump = run(["dump-commitlog", "--store", store, "--json"])
    assert [json.loads(x)["body"] for x in dump.stdout.splitlines()] == ["one", "two"]


def test_the_json_output_can_be_put_again(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    put(a, [{"topic": "T", "keys": ["k"], "body": "text", "properties": {"p": "v"}},
            {"topic": "T", "body": "\u00ff\u0001 binary?", "tags": "t"}])
    for body in ("auto", "hex", "base64"):
        dump = run(["dump-commitlog", "--store", a, "--json", *(["--body", body] if body != "auto" else [])])
        target = b / body
        r = run(["put", "--store", target, "--from-jsonl", "-"], input=dump.stdout)
        assert r.exit_code == 0, r.output
        again = run(["dump-commitlog", "--store", target, "--json"])
        assert [json.loads(x)["body"] for x in again.stdout.splitlines()] == ["text", "\u00ff\u0001 binary?"]


def test_put_needs_a_body_and_takes_an_empty_one(tmp_path):
    store = tmp_path / "s"
    assert_one_line_error(run(["put", "--store", store, "-t", "T"]), 2, "--body")
    assert not store.exists()
    r = run(["put", "--store", store, "-t", "T", "--body", "", "--json"])
    assert r.exit_code == 0, r.output
    off = json.loads(r.stdout)["commitLogOffset"]
    got = run(["get", "--store", store, "--offset", off, "--json"])
    assert json.loads(got.stdout)["body"] == ""


# ------------------------------------------------------------------------------ 8. the same index as before?


def test_spark_reindex_says_whether_the_index_is_the_same(tmp_path):
    store = tmp_path / "s"
    put(store, msgs(40, keys=2), "--hash-slots", "8", "--max-index", "32", *SMALL_LOG)
    assert reindex(store)["sameAsBefore"] is True
    last = sorted(p for p in (store / "index").iterdir() if p.name.isdigit())[-1]
    with open(last, "r+b") as f:  # one slot of the newest file changed
        f.seek(40)
        head = struct.unpack(">i", f.read(4))[0]
        f.seek(40)
        f.write(struct.pack(">i", head ^ 1))
    assert reindex(store)["sameAsBefore"] is False
    assert reindex(store)["sameAsBefore"] is True  # the first rebuild put the slot back
    out = tmp_path / "out"  # --out: compared with the store's index, which it would replace
    assert reindex(store, "--out", out)["sameAsBefore"] is True
    assert reindex(store, "--dry-run")["sameAsBefore"] is None


# ------------------------------------------------------------------------------ 9. leftovers


def test_dump_a_segment_copied_out_of_its_store(tmp_path):
    store = tmp_path / "s"
    put(store, msgs(60), "--commitlog-file-size", "4096")
    alone = tmp_path / "copied"
    alone.mkdir()
    for name in ("00000000000000004096",):
        shutil.copy(store / "commitlog" / name, alone / name)
    shutil.copy(store / "commitlog" / "00000000000000004096", alone / "renamed.bin")
    want = run(["dump-commitlog", "--store", store, "--files", "00000000000000004096", "--json"])
    assert want.exit_code == 0 and want.stdout
    for f in (alone / "00000000000000004096", alone / "renamed.bin"):
        got = run(["dump-commitlog", "--files", f, "--json"])
        assert got.exit_code == 0, got.output
        assert got.stdout.replace(f.name, "00000000000000004096") == want.stdout  # entries name their file
    r1 = unpack_golden("broker/r1", tmp_path / "r1").store
    seg = sorted((r1 / "commitlog").iterdir())[0]
    shutil.copy(seg, alone / seg.name)
    got = run(["dump-commitlog", "--files", alone / seg.name, "--json"])
    want = run(["dump-commitlog", "--store", r1, "--files", seg.name, "--json"])
    assert got.exit_code == want.exit_code == 0 and got.stdout == want.stdout and len(got.stdout.splitlines()) > 100
    assert_one_line_error(run(["dump-commitlog", "--files", alone / "missing"]), 2, "missing")


def test_print_msg_begin_alone_means_until_the_end(tmp_path):
    store = tmp_path / "s"
    put(store, msgs(20))
    r = run(["print-msg", "--store", store, "--topic", "T", "--begin", str(T0 + 5000), "--json"])
    assert r.exit_code == 0, r.output
    assert sorted(json.loads(x)["storeTimestamp"] for x in r.stdout.splitlines()) == [T0 + 1000 * i
                                                                                    for i in range(5, 20)]


def test_recover_reports_directories_with_invalid_topic_names(tmp_path):
    store = tmp_path / "s"
    put(store, msgs(5))
    (store / "consumequeue" / "bad topic!" / "0").mkdir(parents=True)
    read = run(["queues", "--store", store])
    assert "bad topic!" in read.stderr
    for args in (["--dry-run"], []):
        r = run(["recover", "--store", store, *args])
        assert r.exit_code == 0, r.output
        assert "consumequeue/bad topic!" in r.stderr and "not a valid topic name" in r.stderr
        r = run(["recover", "--store", store, "--json", *args])
        assert [e["path"] for e in json.loads(r.stdout)["skippedEntries"]] == ["consumequeue/bad topic!"]
    assert (store / "consumequeue" / "bad topic!" / "0").is_dir()  # left alone


def test_query_key_reports_a_misplaced_record(tmp_path):
    store = tmp_path / "s"
    put(store, msgs(60), "--commitlog-file-size", "4096")
    log = store / "commitlog"
    a, b = log / "00000000000000000000", log / "00000000000000004096"
    a.rename(log / "x")
    b.rename(a)
    (log / "x").rename(b)
    for key in ("k1-0", "k30-0"):
        r = run(["query-key", "--store", store, "--topic", "T", "--key", key, "--json"])
        assert r.exit_code == 3, r.output
        (partial,) = said(r, "partial-answer")
        assert partial["misplaced"] and partial["damagedIndexFiles"] == []
