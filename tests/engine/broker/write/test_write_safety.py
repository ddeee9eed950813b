"""Issue 10 items 1, 2, 8 and 9: full disks and short writes, hostile names and numbers, the output contract,
JSONL input. Faults are injected through the engine's own calls (os.pwrite, os.posix_fallocate, os.fdatasync);
bench/disk_full.py runs the same on a real size-limited tmpfs."""
from __future__ import annotations

from helpers import REPO
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from helpers import SMALL, assert_one_line_error, put_jsonl, run, said, snapshot
from engine.broker.config.brokerconf import load_config
from engine.broker.write.batch import MessageBatch
from engine.broker.store import MessageStore
from engine.fsutil import DiskFullError, WriteFailedError, data_extents, map_readonly

T0 = 1_700_000_000_000


def msgs(n: int, start: int = 0, topic: str = "T", body: str = "b" * 150) -> list[dict]:
    return [{"topic": topic, "keys": [f"k{i}", "all"], "body": body, "storeTimestamp": T0 + i, "queueId": i % 2}
            for i in range(start, start + n)]


def small_cfg(root: Path):
    return load_config(None, storePathRootDir=str(root), mappedFileSizeCommitLog=4096, maxHashSlotNum=16,
                       maxIndexNum=64, mappedFileSizeConsumeQueue=200)


def batch_of(messages: list[dict]) -> MessageBatch:
    b = MessageBatch()
    for m in messages:
        b.add_json(m)
    return b


def readable(store: Path, acks) -> None:
    """Every acknowledged message is where its acknowledgement says, and found by its key."""
    with MessageStore(small_cfg(store)) as st:
        for a in acks:
            rec = st.get(a["commitLogOffset"])
            assert rec.uniq_key == a["uniqKey"] and rec.queue_offset == a["queueOffset"]
        for a in acks[:: max(1, len(acks) // 5)]:
            assert a["commitLogOffset"] in [m.physical_offset for m in st.query("T", a["uniqKey"], unique=True).messages]


def dump_kinds(store: Path) -> list[str]:
    r = run(["dump-commitlog", "--store", store, "--json"])
    return [json.loads(line)["type"] for line in r.stdout.splitlines()]


def fail_fallocate_after(monkeypatch, calls: int):
    real = os.posix_fallocate
    seen = [0]

    def fake(fd, offset, length):
        # Index files are not counted: the write path measures their room before a batch (a real full disk fails
        # that check first), and this fake does not take the room away.
        if os.path.basename(os.path.dirname(os.readlink(f"/proc/self/fd/{fd}"))) == "index":
            return real(fd, offset, length)
        if os.fstat(fd).st_blocks * 512 >= offset + length:
            return real(fd, offset, length)  # allocated already (files are allocated from the start): no new room
        seen[0] += 1
        if seen[0] > calls:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, offset, length)
    monkeypatch.setattr(os, "posix_fallocate", fake)


# ------------------------------------------------------------------------------------- 1. full disk


def test_full_disk_at_a_segment_roll_stops_cleanly_between_messages(tmp_path, monkeypatch):
    store = tmp_path / "s"
    first = put_jsonl(store, msgs(8))
    fail_fallocate_after(monkeypatch, 0)  # no new file can be allocated any more
    with MessageStore(small_cfg(store), writable=True) as st:
        res = st.put_batch(batch_of(msgs(40, start=8)))
        assert isinstance(res.error, DiskFullError) and 0 < len(res) < 40
        assert str(store) in str(res.error) and "free" in str(res.error)
        acks = [r.as_dict() for r in res.results()]
    monkeypatch.undo()
    assert not (store / "abort").exists()  # a clean stop: the store needs no recovery
    kinds = dump_kinds(store)
    assert kinds.count("MESSAGE") == 8 + len(acks) and set(kinds) <= {"MESSAGE", "BLANK"}
    readable(store, first + acks)
    more = put_jsonl(store, msgs(5, start=100))  # room again: the store takes more
    readable(store, first + acks + more)


def test_full_disk_cli_names_the_store_and_free_space_and_acks_what_was_stored(tmp_path, monkeypatch):
    store = tmp_path / "s"
    put_jsonl(store, msgs(3))
    fail_fallocate_after(monkeypatch, 2)
    data = "".join(json.dumps(m) + "\n" for m in msgs(60, start=3))
    r = run(["put", "--store", store, *SMALL, "--from-jsonl", "-", "--json"], input=data)
    assert_one_line_error(r, code=2, contains=f"store {store} has")
    acks = [json.loads(line) for line in r.stdout.splitlines()]
    assert "free" in r.stderr and f"; {len(acks)} message(s) before it were stored" in r.stderr
    assert f"<stdin>:{len(acks) + 1}:" in r.stderr  # the first message not stored
    monkeypatch.undo()
    assert 0 < len(acks) < 60 and not (store / "abort").exists()
    readable(store, acks)


def test_short_write_is_undone_and_leaves_the_store_for_recover(tmp_path, monkeypatch):
    store = tmp_path / "s"
    first = put_jsonl(store, msgs(2, body="x"))
    real = os.pwrite

    def short(fd, data, pos):
        if len(data) > 1000:  # the commit-log chunk of the next batch: half of it, then the disk is full
            n = real(fd, bytes(data)[: len(data) // 2], pos)
            short.partial = (fd, pos, n)
            os.pwrite = fail
            return n
        return real(fd, data, pos)

    def fail(fd, data, pos):
        if short.partial and pos != short.partial[1]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, pos)  # the undo: zeros over the bytes the failed write managed
    short.partial = None
    monkeypatch.setattr(os, "pwrite", short)
    with pytest.raises(WriteFailedError, match="free"):
        with MessageStore(small_cfg(store), writable=True) as st:
            st.put_batch(batch_of(msgs(12, start=2, body="x")))
    monkeypatch.undo()
    assert (store / "abort").exists()  # interrupted half-way: the next writer must recover first
    seg = (store / "commitlog" / ("0" * 20)).read_bytes()
    fd, pos, n = short.partial
    assert seg[pos:pos + n] == bytes(n)  # no half record that looks like data
    assert dump_kinds(store) == ["MESSAGE", "MESSAGE"]
    r = run(["recover", "--store", store, "--commitlog-file-size", "4096", "--hash-slots", "16", "--max-index", "64"])
    assert r.exit_code == 0, r.output
    readable(store, first)


def test_failed_flush_acknowledges_nothing_of_the_batch(tmp_path, monkeypatch):
    store = tmp_path / "s"
    put_jsonl(store, msgs(2))

    def eio(fd):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(os, "fdatasync", eio)
    data = "".join(json.dumps(m) + "\n" for m in msgs(5, start=2))
    r = run(["put", "--store", store, *SMALL, "--from-jsonl", "-", "--json", "--sync-flush"], input=data)
    assert_one_line_error(r, code=2, contains="flush failed")
    assert r.stdout == ""


def test_index_room_is_checked_before_a_new_index_file_is_started(tmp_path, monkeypatch):
    import engine.broker.write.writer as pw

    store = tmp_path / "s"
    first = put_jsonl(store, msgs(4))  # 12 of the 63 items of the first index file
    monkeypatch.setattr(pw, "free_bytes", lambda path: 10_000)  # less than one more index file needs
    with MessageStore(small_cfg(store), writable=True) as st:
        res = st.put_batch(batch_of(msgs(30, start=4)))
    assert isinstance(res.error, DiskFullError) and "index file needs" in str(res.error)
    assert len(res) == (63 - 12) // 3  # exactly the messages whose keys fit the current file
    assert len(list((store / "index").iterdir())) == 1
    monkeypatch.undo()
    readable(store, first + [r.as_dict() for r in res.results()])


def test_read_mapping_never_touches_holes(tmp_path):
    p = tmp_path / "sparse"
    with open(p, "wb") as f:
        f.truncate(1 << 20)
        f.seek(8192)
        f.write(b"x" * 5000)
        f.seek(600_000)
        f.write(b"end")
    fd = os.open(p, os.O_RDONLY)
    try:
        ext = data_extents(fd, 1 << 20)
        assert ext is None or all(a <= 8192 and b >= 13192 for a, b in ext[:1])
        m = map_readonly(fd, 1 << 20)
        assert len(m) == 1 << 20 and bytes(m) == p.read_bytes()
        with pytest.raises(TypeError):
            m[0] = 1
        m.close()
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------- 2. names, numbers


@pytest.mark.parametrize("args,text", [
    (["--topic", "../../escape"], "topic"), (["--topic", "a/b"], "topic"), (["--topic", "t" * 128], "limit"),
    (["--topic", "T", "--queue-id", "99999999999"], "queue id"), (["--topic", "T", "--queue-id", "-1"], "queue id"),
    (["--topic", "T", "--store-timestamp", str(10**20)], "Java long"),
    (["--topic", "T", "--keys", "a\u0001b"], "separator"), (["--topic", "T", "--tags", "t\u0002"], "separator"),
    (["--topic", "T", "--property", "a=b\u0002c"], "separator"), (["--topic", "T", "--property", "a\u0001=b"], "separator"),
])
def test_bad_names_and_numbers_are_refused_before_anything_is_written(tmp_path, args, text):
    store = tmp_path / "s"
    r = run(["put", "--store", store, *SMALL, "--body", "x", *args])
    assert_one_line_error(r, code=2, contains=text)
    assert not store.exists() and not (tmp_path / "escape").exists()
    put_jsonl(store, msgs(1))
    before = snapshot(store)
    assert_one_line_error(run(["put", "--store", store, *SMALL, "--body", "x", *args]), code=2)
    assert snapshot(store) == before  # no abort marker either


@pytest.mark.parametrize("field,value", [("queueId", 2**31), ("queueId", -1), ("flag", 2**31), ("sysFlag", -2**31 - 1),
                                         ("storeTimestamp", 2**63), ("bornTimestamp", 10**30),
                                         ("preparedTransactionOffset", -2**63 - 1), ("topic", "x\u0000y"),
                                         ("keys", "a\u0002")])
def test_out_of_range_jsonl_fields_are_one_line_errors(tmp_path, field, value):
    store = tmp_path / "s"
    bad = {"topic": "T", "body": "x", field: value}
    r = run(["put", "--store", store, *SMALL, "--from-jsonl", "-"], input=json.dumps(bad) + "\n")
    assert_one_line_error(r, code=2, contains="<stdin>:1:")
    assert "0 message(s) before it were stored" in r.stderr and not store.exists()


def test_system_topics_stay_writable(tmp_path):
    store = tmp_path / "s"
    topics = ["SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_TRACE", "%RETRY%grp", "%DLQ%grp"]
    acks = put_jsonl(store, [{"topic": t, "body": "x", "properties": {"DELAY": "3"}} for t in topics])
    assert [a["topic"] for a in acks] == topics


def test_links_out_of_the_store_are_never_followed(tmp_path):
    store, outside = tmp_path / "s", tmp_path / "outside"
    put_jsonl(store, msgs(2))
    outside.mkdir()
    (store / "consumequeue" / "Linked").symlink_to(outside, target_is_directory=True)
    r = run(["put", "--store", store, *SMALL, "--topic", "Linked", "--body", "x"])
    assert_one_line_error(r, code=2, contains="symlink")
    assert list(outside.iterdir()) == []
    seg = store / "commitlog" / f"{4096 * 5:020d}"
    seg.symlink_to(outside / "target")
    r = run(["dump-commitlog", "--store", store, "--json"])
    assert r.exit_code == 0 and not (outside / "target").exists()
    assert [Path(w["file"]).name for w in said(r, "symlink")] == [seg.name]   # warned of, never followed
    assert_one_line_error(run(["put", "--store", store, *SMALL, "--topic", "T", "--body", "x"]), code=2,
                          contains="symlink")
    (store / "abort").symlink_to(outside / "abort")
    assert not (outside / "abort").exists()


# ------------------------------------------------------------------------------------- 8. output contract


def _cli(*args: str, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "rmqtool", *args], env=env, cwd=REPO, **kw)


def test_json_acks_go_to_stdout_when_stderr_is_a_terminal(tmp_path):
    import pty

    store = tmp_path / "s"
    master, slave = pty.openpty()
    try:
        data = "".join(json.dumps(m) + "\n" for m in msgs(30))
        p = _cli("put", "--store", str(store), *SMALL, "--from-jsonl", "-", "--json", input=data.encode(),
                 stdout=subprocess.PIPE, stderr=slave, timeout=60)
    finally:
        os.close(slave)
        os.close(master)
    assert p.returncode == 0
    acks = [json.loads(line) for line in p.stdout.decode().splitlines()]
    assert len(acks) == 30 and [a["queueOffset"] for a in acks[:4]] == [0, 0, 1, 1]


@pytest.mark.parametrize("cmd", ["put", "dump-commitlog"])
def test_a_closed_pipe_ends_quietly(tmp_path, cmd):
    store = tmp_path / "s"
    put_jsonl(store, msgs(40))
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(m) + "\n" for m in msgs(3000, start=40)))
    args = ["put", "--store", store, *SMALL, "--from-jsonl", inp, "--json"] if cmd == "put" else \
        ["dump-commitlog", "--store", store, "--json"]
    line = " ".join(f"'{a}'" for a in [sys.executable, "-m", "rmqtool", *map(str, args)])
    p = subprocess.run(["bash", "-c", f"set -o pipefail; {line} 2>{tmp_path}/err | head -1"], cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)
    assert len(p.stdout.splitlines()) == 1 and json.loads(p.stdout)
    assert (tmp_path / "err").read_text() == ""  # no traceback, no error line
    assert p.returncode == 0  # a closed pipe is an answer delivered (docs/output-contract.md)
    assert not (store / "abort").exists()
    assert "MESSAGE" in dump_kinds(store)


def test_tilde_is_expanded_in_path_options(tmp_path):
    from rmqtool.app import app

    home = tmp_path / "home"
    home.mkdir()
    (home / "in.jsonl").write_text(json.dumps(msgs(1)[0]) + "\n")
    r = CliRunner().invoke(app, ["put", "--store", "~/st", *SMALL, "--from-jsonl", "~/in.jsonl", "--json"],
                           env={"HOME": str(home)})
    assert r.exit_code == 0, r.output
    assert (home / "st" / "commitlog").is_dir() and not Path("~").exists()
    r = CliRunner().invoke(app, ["dump-commitlog", "--store", "~/st", "--json"], env={"HOME": str(home)})
    assert r.exit_code == 0 and json.loads(r.stdout.splitlines()[0])["topic"] == "T"


# ------------------------------------------------------------------------------------- 9. JSONL input


def test_a_bad_line_commits_the_good_prefix_and_says_so(tmp_path):
    store = tmp_path / "s"
    f = tmp_path / "in.jsonl"
    good = [json.dumps(m) for m in msgs(3)]
    f.write_text("\n".join([good[0], "", good[1], "{not json", good[2]]) + "\n")
    r = run(["put", "--store", store, *SMALL, "--from-jsonl", f, "--json"])
    assert_one_line_error(r, code=2, contains=f"{f}:4: not JSON")
    assert "2 message(s) before it were stored" in r.stderr
    acks = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(acks) == 2 and dump_kinds(store) == ["MESSAGE", "MESSAGE"]
    readable(store, acks)


@pytest.mark.parametrize("bad,line", [('{"topic": "T"} {"topic": "T"}', 2), ('{"topic":\n "T"}', 2),
                                      ('{"topic": "T", "queueId": -5}', 2), ('[1, 2]', 2), ('"x"', 2)])
def test_every_line_holds_exactly_one_message(tmp_path, bad, line):
    store = tmp_path / "s"
    r = run(["put", "--store", store, *SMALL, "--from-jsonl", "-"], input=json.dumps(msgs(1)[0]) + "\n" + bad + "\n")
    assert_one_line_error(r, code=2, contains=f"<stdin>:{line}:")
    assert "1 message(s) before it were stored" in r.stderr


def test_bom_crlf_and_a_missing_last_newline_are_accepted(tmp_path):
    store = tmp_path / "s"
    f = tmp_path / "in.jsonl"
    f.write_bytes(b"\xef\xbb\xbf" + b"\r\n".join(json.dumps(m).encode() for m in msgs(3)))
    r = run(["put", "--store", store, *SMALL, "--from-jsonl", f, "--json"])
    assert r.exit_code == 0, r.output
    assert len(r.stdout.splitlines()) == 3


def test_not_utf8_is_reported_with_its_line(tmp_path):
    f = tmp_path / "in.jsonl"
    f.write_bytes(json.dumps(msgs(1)[0]).encode() + b"\n" + b'{"topic": "\xff"}\n')
    r = run(["put", "--store", tmp_path / "s", *SMALL, "--from-jsonl", f])
    assert_one_line_error(r, code=2, contains=":2: not UTF-8")


@pytest.mark.parametrize("fail_at", range(1, 12))
def test_a_full_disk_at_any_allocation_leaves_a_clean_readable_store(tmp_path, monkeypatch, fail_at):
    """Whichever allocation fails first (a segment, a consume-queue file, at a roll or not), the batch stops
    between two messages: no BLANK-less segment, no unit without its record, every acknowledged message found."""
    store = tmp_path / "s"
    first = put_jsonl(store, msgs(3))
    fail_fallocate_after(monkeypatch, fail_at)
    many = [{**m, "queueId": i % 5} for i, m in enumerate(msgs(80, start=3))]
    with MessageStore(small_cfg(store), writable=True) as st:
        res = st.put_batch(batch_of(many))
        acks = [r.as_dict() for r in res.results()]
    monkeypatch.undo()
    assert res.error is not None and len(acks) < 80
    assert not (store / "abort").exists()
    assert set(dump_kinds(store)) <= {"MESSAGE", "BLANK"} and dump_kinds(store).count("MESSAGE") == 3 + len(acks)
    readable(store, first + acks)
    from engine.broker.consumequeue.queue import ConsumeQueue

    units = sum(ConsumeQueue(store, "T", q, 200).max_offset_in_queue for q in range(5))
    assert units == 3 + len(acks)


def test_jsonl_batches_start_small_and_keep_line_numbers():
    import io

    from engine.broker.write.jsonl import read_jsonl

    data = b"".join(json.dumps({"topic": "T", "i": i}).encode() + (b"\n\n" if i % 10 == 0 else b"\n")
                    for i in range(1000))
    got = list(read_jsonl(io.BytesIO(data), "x", batch_lines=256))
    assert [len(objs) for objs, _, _ in got][:3] == [58, 116, 233]  # 64, 128, 256 lines (blank ones included)
    assert max(len(lines) for _, lines, _ in got) <= 256
    objs = [o for batch, _, _ in got for o in batch]
    lines = [n for _, ls, _ in got for n in ls]
    assert [o["i"] for o in objs] == list(range(1000)) and all(e is None for _, _, e in got)
    assert lines[:3] == [1, 3, 4] and lines[-1] == 1000 + 100  # every tenth message is followed by a blank line
