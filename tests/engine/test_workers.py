"""--workers N (issue 32): the bulk commands run their per-segment work on N worker processes
(engine.workers) with the same answer as on one: byte for byte for files written, the same JSON (timings
aside), the same exit code; a worker that dies makes the command fail cleanly; a bad N is a one-line error."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal

import pytest

from helpers import (FUZZ_SEG, SEG, SEG_GEOM, assert_one_line_error, cfg_for, child_pids, cli, fuzz_store, index_bytes,
                     item_at, patch, proc_state, put_store, sample_messages, seg_file, snapshot)

FUZZ_GEOM = ["--commitlog-file-size", str(FUZZ_SEG), "--hash-slots", "16", "--max-index", "64"]
FUZZ_LOG = FUZZ_GEOM[:2]  # dump-commitlog takes the segment size only
SEG_LOG = SEG_GEOM[:2]
#: Keys whose values come from the clock, not the store: timings, and the names of index files made now.
CLOCK = {"seconds", "elapsedSeconds", "elapsed", "durationMs", "timings", "rate", "mbPerSecond", "created", "file",
         "when", "at", "startedAt", "finishedAt"}


def _no_timings(x):
    if isinstance(x, dict):
        return {k: _no_timings(v) for k, v in x.items() if k not in CLOCK and "second" not in k.lower()}
    if isinstance(x, list):
        return [_no_timings(v) for v in x]
    return x


def _docs(text: str) -> list:
    """The JSON documents of an output (one, or NDJSON), clock values left out (an index file made now is named
    for the time: 17 digits; a quarantine for the time and the pid)."""
    text = re.sub(r"quarantine/\d{8}-\d{6}-\d+", "quarantine/NOW", re.sub(r"\b\d{17}\b", "NOW", text))
    return [_no_timings(json.loads(line)) for line in text.splitlines() if line.strip()]


@pytest.fixture
def fuzz(tmp_path):
    """A multi-segment log with damage of every kind a walk stops or resynchronises at."""
    fuzz_store(tmp_path / "s", 5)
    return tmp_path / "s"


@pytest.fixture
def many(tmp_path):
    """A sound store of many small segments, with index files and consume queues (put)."""
    return put_store(tmp_path / "m")


def _both(*args: str) -> tuple:
    one = cli(*args, "--workers", "1", code=None)
    two = cli(*args, "--workers", "2", code=None)
    return one, two


def test_dump_json_is_the_same_bytes_with_one_and_two_workers(fuzz):
    one, two = _both("dump-commitlog", "-s", str(fuzz), "--json", *FUZZ_LOG)
    assert one.exit_code == two.exit_code == 3  # damage met: the same exit on both
    assert one.stdout == two.stdout and one.stdout.count("\n") > 200
    types = {json.loads(line)["type"] for line in one.stdout.splitlines()}
    assert {"MESSAGE", "CORRUPT"} <= types


def test_dump_json_with_filters_and_an_offset_range(many):
    segs = sorted(p.name for p in (many / "commitlog").iterdir())
    args = ("dump-commitlog", "-s", str(many), "--json", "--topic", "TopicA", "--from-offset", str(int(segs[2])),
            "--to-offset", str(int(segs[-3])), *SEG_LOG)
    one, two = _both(*args)
    assert one.exit_code == two.exit_code == 0
    assert one.stdout == two.stdout
    rows = [r for r in map(json.loads, one.stdout.splitlines()) if r["type"] == "MESSAGE"]
    assert rows and {r["topic"] for r in rows} == {"TopicA"}
    assert all(int(segs[2]) <= r["commitLogOffset"] < int(segs[-3]) for r in rows)


def test_dump_json_of_chosen_files(many):
    segs = sorted(p.name for p in (many / "commitlog").iterdir())
    one, two = _both("dump-commitlog", "-s", str(many), "--json", "--files", f"{segs[1]},{segs[4]}", *SEG_LOG)
    assert one.exit_code == two.exit_code == 0 and one.stdout == two.stdout
    offs = [json.loads(line)["commitLogOffset"] for line in one.stdout.splitlines()]
    assert offs == sorted(offs) and len(offs) > 2


def _dump_to_file(store, out, *args: str, encoding: str = "utf-8") -> tuple[int, bytes, str]:
    """dump-commitlog --json in a process of its own, its stdout a file (a file descriptor: the workers write their
    segments' lines to it themselves when it is UTF-8); (exit code, the file's bytes, stderr)."""
    import subprocess
    import sys

    from helpers import REPO

    with open(out, "wb") as f:
        p = subprocess.run([sys.executable, "-m", "rmqtool", "dump-commitlog", "-s", str(store), "--json", *args],
                           cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO), PYTHONIOENCODING=encoding), stdout=f,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    return p.returncode, out.read_bytes(), p.stderr


def test_dump_json_to_an_output_that_is_not_utf8(fuzz, tmp_path):
    """A Latin-1 stdout takes the lines through the text layer (the workers spool, this process writes): the same
    bytes on one worker and two, the topic "Tö" in Latin-1."""
    one = _dump_to_file(fuzz, tmp_path / "one", *FUZZ_LOG, "--workers", "1", encoding="latin-1")
    two = _dump_to_file(fuzz, tmp_path / "two", *FUZZ_LOG, "--workers", "2", encoding="latin-1")
    assert one[0] == two[0] == 3 and one[1] == two[1]
    assert '"topic": "Tö"'.encode("latin-1") in one[1]


def test_dump_json_workers_write_to_the_output_in_log_order(fuzz, many, tmp_path):
    """With a real stdout each worker writes its segment's lines itself when its turn comes: the same file and
    exit as one process's, with damage (exit 3), with a range cut by --to-offset, with chosen files (two ranges),
    with a segment file missing (the GAP line written here, between the workers' lines), and with an empty
    segment file after the end of data (its job is passed over)."""
    segs = sorted(p.name for p in (many / "commitlog").iterdir())
    (many / "commitlog" / f"{int(segs[-1]) + SEG:020d}").write_bytes(bytes(SEG))  # preallocated, never written
    holed = tmp_path / "holed"
    shutil.copytree(many, holed)
    (holed / "commitlog" / segs[3]).unlink()  # a GAP line (this process's) between two workers' segments
    cases = [(fuzz, [*FUZZ_LOG], 3), (many, [*SEG_LOG], 0),
             (many, ["--to-offset", str(int(segs[-4]) + 700), *SEG_LOG], 0),
             (many, ["--files", f"{segs[1]},{segs[4]},{segs[5]}", *SEG_LOG], 0), (holed, [*SEG_LOG], 3)]
    for store, args, code in cases:
        got = {n: _dump_to_file(store, tmp_path / f"out-{n}", *args, "--workers", str(n)) for n in (1, 2, 3)}
        assert {g[0] for g in got.values()} == {code}, got[2][2]
        assert got[1][1] == got[2][1] == got[3][1] and got[1][1].count(b"\n") > 10
        assert (b'"type": "GAP"' in got[1][1]) == (store == holed)
        assert got[1][1] == cli("dump-commitlog", "-s", str(store), "--json", *args, "--workers", "1",
                                code=code).stdout_bytes  # and as the in-process run (no file descriptor) writes it


def test_dump_json_workers_hold_spill_and_take_their_turn(fuzz, monkeypatch, tmp_path):
    """The engine's worker dump into a file descriptor, with HOLD_BYTES so small that a worker whose turn has not
    come spills what it holds to a spool file, then writes it out first when its turn comes: the same bytes as
    one process's dump, and no spool file left."""
    import tempfile
    import time

    from engine.broker.commitlog import dump
    from engine.commands.dump_commitlog import dump_commitlog, dump_filter, entry_json
    from helpers import fuzz_config

    monkeypatch.setattr(dump, "HOLD_BYTES", 600)  # (the forked workers inherit it)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    spools, path = [], tmp_path / "out"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        from engine import workers

        workers.use(2)
        try:
            with dump_commitlog(fuzz_config(fuzz), dump_filter(None, 0, 2**63 - 1, None, None, None, None, True),
                                json_out=True, out_fd=fd) as ans:
                assert ans.spooled
                for e in ans.entries:
                    if hasattr(e, "take"):
                        if not spools:
                            time.sleep(0.5)  # the first jobs run to their end before their turn: they spilled
                            spools += [q.name for q in tmp_path.glob("rmqtool-dump-*/*")]
                            assert spools
                        seg = e.take()
                        assert seg.path is None and list(seg.chunks()) == []  # written by its worker
                    else:
                        os.write(fd, (entry_json(e) + "\n").encode())
        finally:
            workers.use(None)
    finally:
        os.close(fd)
    one = cli("dump-commitlog", "-s", str(fuzz), "--json", *FUZZ_LOG, "--workers", "1", code=3).stdout_bytes
    assert path.read_bytes() == one and one.count(b"\n") > 200
    assert not list(tmp_path.glob("rmqtool-dump-*"))  # the spool files written out and removed


def test_dump_json_to_a_closed_pipe_ends_quietly(long_dump):
    """`| head -c 100`: the worker writing when the reader goes away gets EPIPE; the command ends as one process
    does (exit 0, nothing on stderr) and leaves no worker behind."""
    import subprocess
    import sys

    from helpers import REPO

    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONIOENCODING="utf-8")
    p = subprocess.Popen([sys.executable, "-m", "rmqtool", "dump-commitlog", "-s", str(long_dump), "--json",
                          *SEG_LOG, "--workers", "2"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    head = p.stdout.read(100)
    kids = set(child_pids(p.pid))
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 0 and err == "" and head.startswith(b'{"')
    assert kids and all(proc_state(k).startswith(("z", "zombie")) for k in kids)  # gone (or not yet reaped)


def test_recover_full_scan_same_report_and_same_files(many, tmp_path):
    path, pos = seg_file(many, 5 * SEG + 300)
    patch(path, pos, b"\xff\xfe")  # damage in the middle of the log: the walk resynchronises past it
    other = tmp_path / "copy"
    shutil.copytree(many, other)
    one = cli("recover", "-s", str(many), "--full-scan", "--json", *SEG_GEOM, "--workers", "1", code=None)
    two = cli("recover", "-s", str(other), "--full-scan", "--json", *SEG_GEOM, "--workers", "2", code=None)
    assert one.exit_code == two.exit_code and one.exit_code in (0, 3)
    assert _docs(one.stdout) == _docs(two.stdout.replace(str(other), str(many))) and one.stdout
    snap_a, snap_b = _by_role(many), _by_role(other)
    assert snap_a == snap_b and len(snap_a) > 10


def _by_role(store) -> dict:
    """The store's files and their bytes, index files (named for the time they were made) in their order."""
    out = {}
    for p in sorted(store.rglob("*")):
        if p.is_file() and "quarantine" not in p.parts and p.name not in ("lock", "abort"):
            rel = p.relative_to(store)
            name = f"index#{len(out)}" if rel.parts[0] == "index" else str(rel)
            out[name] = p.read_bytes()
    return out


@pytest.mark.parametrize("n", ["2", "3"])
def test_many_windows_per_segment_on_helpers(many, tmp_path, monkeypatch, n):
    # With helpers a segment is cut into several windows (HELPER_MIN_WINDOW at least) that they check while this
    # process decodes the next: small windows here, so several are in flight within each segment, damage among them.
    from engine.broker.commitlog import walk as logread

    path, pos = seg_file(many, 7 * SEG + 500)
    patch(path, pos, b"\x00\x01\x02")
    other = tmp_path / "copy"
    shutil.copytree(many, other)
    one = cli("recover", "-s", str(many), "--full-scan", "--json", *SEG_GEOM, "--workers", "1", code=None)
    monkeypatch.setattr(logread, "HELPER_MIN_WINDOW", 300)
    two = cli("recover", "-s", str(other), "--full-scan", "--json", *SEG_GEOM, "--workers", n, code=None)
    assert one.exit_code == two.exit_code
    assert _docs(one.stdout) == _docs(two.stdout.replace(str(other), str(many)))
    assert _by_role(many) == _by_role(other)
    v1 = cli("inspect-index", "-s", str(many), "--verify", "--json", *SEG_GEOM, "--workers", "1", code=None)
    v2 = cli("inspect-index", "-s", str(many), "--verify", "--json", *SEG_GEOM, "--workers", n, code=None)
    assert v1.exit_code == v2.exit_code and _docs(v1.stdout) == _docs(v2.stdout)


@pytest.mark.parametrize("queue", [4, 1, 0], ids=["on-helpers", "shared", "here"])
def test_walk_windows_shared_with_helpers_same_answers(fuzz, monkeypatch, queue):
    # recover --full-scan and doctor where the walk cannot go a segment per job (an index file whose items are
    # not in log order; inspect-index --verify's walk in order: test_many_windows_per_segment_on_helpers): this
    # process decodes the windows in order and hands each one's CRCs and keys to a helper, or checks it itself
    # while the helpers have HELPER_JOBS windows each (CrcHelper); on a log with damage of every kind the answers
    # are the same as on one worker, whoever checked which window (all on the helper, shared as timing falls, all
    # here), and where a segment's start was decoded ahead (at the end of the one before).
    from helpers import spy

    from engine import workers
    from engine.broker.commitlog import walk as logwalk

    from engine.ops.recovery import scanjobs

    monkeypatch.setattr(scanjobs, "usable", lambda joins, segments: False)  # (a segment per job: below)
    monkeypatch.setattr(logwalk, "HELPER_MIN_WINDOW", 300)  # several windows per segment
    monkeypatch.setattr(logwalk, "HELPER_JOBS", queue)
    handed = spy(monkeypatch, workers.WorkerPool, "submit", lambda self, fut: fut is not None)
    here = spy(monkeypatch, logwalk.CrcHelper, "local", lambda self, job: job[0])
    adopted = spy(monkeypatch, logwalk.CrcHelper, "adopt", lambda self, got: got is not None)
    for cmd in (("recover", "--dry-run", "--full-scan"), ("doctor",)):
        one, two = _both(*cmd, "-s", str(fuzz), "--json", *FUZZ_GEOM)
        assert one.exit_code == two.exit_code, cmd
        assert _docs(one.stdout) == _docs(two.stdout) and one.stdout, cmd
    assert bool(handed) == (queue > 0)
    assert here or queue  # with no room on the helper every window is checked here
    assert any(adopted)  # a segment's first windows were decoded and handed out while the one before ended


@pytest.fixture
def local_walks(monkeypatch):
    """The store time each segment walked by the recovery's own process (not a job) carried in."""
    from engine.ops.recovery import scan

    carried: list[int] = []
    real = scan.walk

    def spy(cl, start=None, **kw):
        if "last_ts" in kw:
            carried.append(kw["last_ts"])
        return real(cl, start, **kw)

    monkeypatch.setattr(scan, "walk", spy)
    return carried


def test_recovery_walk_a_segment_per_job_same_answers(fuzz, jobs, local_walks):
    # recover --full-scan and doctor on two workers walk a segment per job (engine.ops.recovery.scanjobs) and put
    # the segments' answers together in order; a segment whose job meets damage before its first record is walked
    # by the command's process, carrying the store time of the record before it. On a log with damage of every
    # kind the answers are the same as on one worker.
    for cmd in (("recover", "--dry-run", "--full-scan"), ("doctor",)):
        one, two = _both(*cmd, "-s", str(fuzz), "--json", *FUZZ_GEOM)
        assert one.exit_code == two.exit_code, cmd
        assert _docs(one.stdout) == _docs(two.stdout) and one.stdout, cmd
    names = {name for name, _ in jobs}
    assert "segment_job" in names and "_worker_window" not in names


def test_recovery_segment_torn_at_its_start_walked_here(many, tmp_path, jobs, local_walks):
    # The first record of a segment in the middle is torn: its job cannot judge what follows (it lacks the store
    # time before it), so this process walks that segment, carrying it; the plan and the files recover writes
    # are the same as on one worker.
    path, _ = seg_file(many, 9 * SEG)
    patch(path, 0, b"\x7f\xff\xff\xf0")
    other = tmp_path / "copy"
    shutil.copytree(many, other)
    one = cli("recover", "-s", str(many), "--full-scan", "--json", *SEG_GEOM, "--workers", "1", code=None)
    assert not jobs and not local_walks
    two = cli("recover", "-s", str(other), "--full-scan", "--json", *SEG_GEOM, "--workers", "2", code=None)
    assert one.exit_code == two.exit_code
    assert _docs(one.stdout) == _docs(two.stdout.replace(str(other), str(many)))
    assert _by_role(many) == _by_role(other)
    assert "segment_job" in {name for name, _ in jobs}
    assert local_walks and all(ts > 0 for ts in local_walks)


def test_recovery_items_left_before_a_segment_of_filler_only(many, jobs):
    # A segment that is a BLANK filler from its start has no window: the items the segment before it left (one
    # pointing into that segment's filler) and its own wait for the next window, whose first fails the first of
    # them, as the walk in order does (a job that took none of its items changes nothing).
    from engine.broker.commitlog.message import BLANK_MAGIC_CODE
    from engine.broker.index.file import IndexFile

    hit = None
    for p in sorted((many / "index").iterdir()):
        with IndexFile.open(p, 16, 64) as f:
            phy = f.items_array()["phy"].astype("int64").tolist()  # items 1..indexCount-1 (item 0: never written)
        for k in range(2, 20):
            before = [n for n, x in enumerate(phy, 1) if k * SEG <= x < (k + 1) * SEG]
            if before and any((k + 1) * SEG <= x < (k + 2) * SEG for x in phy):
                hit = (p, before[-1], k)
                break
        if hit:
            break
    assert hit is not None
    path, n, k = hit  # items of the file point into segments k and k + 1; k + 1 becomes a filler from its start
    patch(path, item_at(n) + 4, ((k + 1) * SEG - 4).to_bytes(8, "big"))  # item n's phyOffset: into k's filler
    seg, _ = seg_file(many, (k + 1) * SEG)
    patch(seg, 0, SEG.to_bytes(4, "big") + BLANK_MAGIC_CODE.to_bytes(4, "big", signed=True))
    one, two = _both("recover", "--dry-run", "--full-scan", "-s", str(many), "--json", *SEG_GEOM)
    assert one.exit_code == two.exit_code
    assert _docs(one.stdout) == _docs(two.stdout)
    assert f"points at {(k + 1) * SEG - 4}" in one.stdout and "segment_job" in {name for name, _ in jobs}


def test_recover_plan_and_doctor_same_json(fuzz):
    for cmd in (("recover", "--dry-run"), ("doctor",)):
        one, two = _both(*cmd, "-s", str(fuzz), "--json", *FUZZ_GEOM)
        assert one.exit_code == two.exit_code, cmd
        assert _docs(one.stdout) == _docs(two.stdout) and one.stdout, cmd


def test_inspect_index_verify_same_json(many):
    one, two = _both("inspect-index", "-s", str(many), "--verify", "--json", *SEG_GEOM)
    assert one.exit_code == two.exit_code == 0
    assert _docs(one.stdout) == _docs(two.stdout) and len(_docs(one.stdout)) > 2


def test_inspect_index_stats_same_json(many):
    one, two = _both("inspect-index", "-s", str(many), "--stats", "--json", *SEG_GEOM)
    assert one.exit_code == two.exit_code == 0
    docs = _docs(one.stdout)
    assert docs == _docs(two.stdout) and len(docs) > 2 and all("stats" in d for d in docs)


def test_spark_reindex_inline_same_files(many, tmp_path):
    for n in ("1", "2"):
        cli("spark-reindex", "-s", str(many), "--master", "inline", "--out", str(tmp_path / f"o{n}"), *SEG_GEOM,
            "--workers", n)
    a, b = index_bytes(tmp_path / "o1"), index_bytes(tmp_path / "o2")
    assert a == b and a


def test_spark_reindex_inline_builds_while_the_workers_scan(many, tmp_path):
    # The inline job plans and builds range by range as the scan goes: an index file is written (and fsynced)
    # before the last range is scanned, on the workers as in one process, and the files are the same.
    from engine import workers
    from engine.jobs.broker_index import spark_reindex

    files = {}
    for n in (1, 2):
        events = []
        workers.use(n)
        try:
            r = spark_reindex(cfg_for(many), out=tmp_path / f"o{n}", master="inline",
                              progress=lambda phase, done, total: events.append((phase, done, total)))
        finally:
            workers.use(None)
        scans = [e for e in events if e[0] == "scan"]
        last_scan = events.index(scans[-1])
        assert scans[-1][1] == scans[-1][2] == r.segments > 2
        assert any(e[0] == "build" for e in events[:last_scan]), events
        assert r.index_files >= 2 and 0 < r.build_seconds <= r.scan_seconds
        files[n] = index_bytes(tmp_path / f"o{n}")
    assert files[1] == files[2] and len(files[1]) == r.index_files


def test_a_failure_while_placing_stops_the_reindex_workers_at_once(many, tmp_path, monkeypatch):
    # The inline reindex places each range while the workers scan the next: an error in this process stops them
    # before it propagates (the generator is closed, not left to the garbage collector), and nothing is published.
    from engine import workers
    from engine.jobs import broker_plan
    from engine.jobs.broker_index import spark_reindex

    real, seen = broker_plan.PlanStream.add, []
    before = set(child_pids(os.getpid()))  # children of this process that are not the job's (pytest-xdist, ...)

    def add(self, summary, scan):
        if self.plan.ranges:
            seen.append([k for k in child_pids(os.getpid()) if k not in before])
            raise RuntimeError("placing failed")
        return real(self, summary, scan)

    monkeypatch.setattr(broker_plan.PlanStream, "add", add)
    workers.use(2)
    try:
        with pytest.raises(RuntimeError) as failed:
            spark_reindex(cfg_for(many), out=tmp_path / "o", master="inline")
        assert seen and seen[0]  # the workers were running when it failed
        assert not [k for k in seen[0] if os.path.exists(f"/proc/{k}") and "zombie" not in proc_state(k)]
    finally:
        workers.use(None)
        del failed
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


@pytest.mark.parametrize("bad", ["0", "-3", "100000"])
def test_bad_worker_counts_are_one_line_errors(many, bad):
    before = snapshot(many)
    r = cli("recover", "-s", str(many), "--workers", bad, *SEG_GEOM, code=None)
    assert_one_line_error(r, 2)
    assert snapshot(many) == before


def _die_sending():
    """A worker's job that dies in the middle of sending a result: the head of a 1 MiB message, a few bytes of it,
    then SIGKILL (as a worker stopped by close() while it sends one)."""
    import struct
    import sys

    results = sys._getframe(1).f_locals["result_queue"]  # concurrent.futures' _process_worker, which runs the job
    os.write(results._writer.fileno(), struct.pack("!i", 1 << 20) + b"\x80")
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_worker_that_died_sending_is_a_dead_worker_and_close_ends_the_pool(monkeypatch):
    # The pool's manager thread reads the rest of that result for ever and never marks the pool broken: waiting
    # for the answer must still end in WorkerDiedError, and close() must end that thread (the interpreter's exit
    # hook joins it: a walk that stopped its helpers mid-send hung at exit).
    import time

    from engine import workers

    monkeypatch.setattr(workers, "DEATH_CHECK", 0.2)
    pool = workers.WorkerPool(1)
    fut = pool.submit(_die_sending)
    procs = list(pool._pool._processes.values())
    manager = pool._pool._executor_manager_thread
    t0 = time.monotonic()
    with pytest.raises(workers.WorkerDiedError):
        pool.result(fut)
    assert time.monotonic() - t0 < 10 and procs and not any(p.is_alive() for p in procs)
    assert manager.is_alive()  # (stuck reading)
    t0 = time.monotonic()
    pool.close()
    assert not manager.is_alive() and time.monotonic() - t0 < 5


def test_a_killed_worker_fails_recover_cleanly(many, killed):
    before = snapshot(many)
    r = cli("recover", "-s", str(many), "--full-scan", "--json", *SEG_GEOM, "--workers", "2", code=None)
    assert_one_line_error(r, 1)
    assert r.stdout == ""
    assert snapshot(many) == before  # nothing published
    again = cli("recover", "-s", str(many), "--dry-run", "--json", *SEG_GEOM, "--workers", "1", code=None)
    assert again.exit_code != 4  # the lock was released


def test_a_killed_worker_fails_dump_cleanly(fuzz, killed):
    r = cli("dump-commitlog", "-s", str(fuzz), "--json", *FUZZ_LOG, "--workers", "2", code=None)
    assert_one_line_error(r, 1)


def test_a_worker_killed_while_another_waits_for_its_turn(fuzz, monkeypatch, tmp_path):
    """The workers write to the output themselves: the second segment's worker is killed while the others run or
    wait for their turn. The dump fails (WorkerDiedError: the pool is broken, every worker stopped) and what is in
    the output is a beginning of the one-process dump (cut where it failed, as a command that fails midway), no
    line of a later segment before an earlier one."""
    from engine import workers
    from engine.broker.commitlog import dump
    from engine.commands.dump_commitlog import dump_commitlog, dump_filter
    from helpers import die_first, fuzz_config

    real = workers.WorkerPool.submit

    def submit(self, fn, *args):
        return real(self, die_first, fn, *args) if fn is dump._json_segment and args[-1] == 1 else \
            real(self, fn, *args)

    monkeypatch.setattr(workers.WorkerPool, "submit", submit)
    path = tmp_path / "out"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    workers.use(2)
    entries = None
    try:
        with pytest.raises(workers.WorkerDiedError):
            with dump_commitlog(fuzz_config(fuzz), dump_filter(None, 0, 2**63 - 1, None, None, None, None, True),
                                json_out=True, out_fd=fd) as ans:
                entries = ans.entries
                for e in entries:
                    if hasattr(e, "take"):
                        e.take()
    finally:
        if entries is not None:
            entries.close()  # (the pool closed now, not when the generator is collected)
        workers.use(None)
        os.close(fd)
    one = cli("dump-commitlog", "-s", str(fuzz), "--json", *FUZZ_LOG, "--workers", "1", code=3).stdout_bytes
    assert one.startswith(path.read_bytes())


def test_a_killed_worker_fails_verify_cleanly(many, killed):
    r = cli("inspect-index", "-s", str(many), "--verify", "--json", *SEG_GEOM, "--workers", "2", code=None)
    assert_one_line_error(r, 1)


def test_a_killed_worker_fails_stats_cleanly(many, killed):
    r = cli("inspect-index", "-s", str(many), "--stats", "--json", *SEG_GEOM, "--workers", "2", code=None)
    assert_one_line_error(r, 1)


def test_a_killed_worker_fails_spark_reindex_cleanly(many, tmp_path, killed):
    out = tmp_path / "o"
    r = cli("spark-reindex", "-s", str(many), "--master", "inline", "--out", str(out), *SEG_GEOM, "--workers", "2",
            code=None)
    assert_one_line_error(r, 1)
    assert not out.exists() or not any(out.iterdir())  # nothing published


def test_default_is_the_cpus_this_process_may_use():
    from engine import workers

    workers.use(None)
    assert workers.count() == len(os.sched_getaffinity(0)) and not workers.asked()
    workers.use(3)
    assert workers.count() == 3 and workers.asked()
    workers.use(None)
    with pytest.raises(ValueError):
        workers.use(0)


@pytest.fixture(scope="module")
def long_dump(tmp_path_factory):
    """700 segments of 24 records: a dump of a second or so on two workers. One segment is laid out record by
    record (helpers.place), the others are its copies, each record's PHYSICALOFFSET set to where the copy puts it
    (a sound log to dump; putting 15,000 messages through the CLI made the same log in 4 s)."""
    import struct

    from helpers import place, rec, write_segments

    store = tmp_path_factory.mktemp("long") / "s"
    recs = [rec(topic=m["topic"], body=m["body"].encode(), queue_id=m["queueId"], store_timestamp=m["storeTimestamp"],
                props={"KEYS": " ".join(m["keys"]), "UNIQ_KEY": m["uniqKey"], "TAGS": m["tags"]})
            for m in sample_messages(40)]
    paths = write_segments(store, place(recs, SEG), SEG)
    first = paths[0].read_bytes()
    for p in paths[1:]:
        p.unlink()
    starts = [r.physical_offset for r in recs if r.physical_offset < SEG]
    for n in range(1, 700):
        seg = bytearray(first)
        for pos in starts:
            struct.pack_into(">q", seg, pos + 28, n * SEG + pos)  # PHYSICALOFFSET, at byte 28 of a record
        (store / "commitlog" / f"{n * SEG:020d}").write_bytes(seg)
    return store


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), pytest.param(signal.SIGTERM, 143, marks=pytest.mark.slow)],
                         ids=["sigint", "sigterm"])
def test_a_signal_stops_the_workers(long_dump, sig, code):
    import subprocess
    import sys
    import time

    from helpers import REPO, child_pids, stop_and_reap

    store, geom = long_dump, SEG_LOG
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "rmqtool", "dump-commitlog", "-s", str(store), "--json", *geom,
                          "--workers", "2"], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    kids: set[int] = set()
    t0 = time.time()
    while len(kids) < 2 and time.time() - t0 < 20 and p.poll() is None:
        kids |= set(child_pids(p.pid))
        time.sleep(0.005)
    if p.poll() is not None:
        pytest.skip("the dump finished before the signal could be sent")
    p.stdout = None
    rc, _, err = stop_and_reap(p, sig, kids)  # no worker left behind
    assert rc == code and len(err.strip().splitlines()) == 1 and err.startswith("error: "), err


def _deaf_sleeper(seconds):
    """A job in a worker that no SIGTERM stops (as a worker still starting, with its parent's handler, may be)."""
    import time

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(seconds)
    return seconds


def test_close_ends_a_worker_that_a_sigterm_does_not_stop():
    # close() must leave no process behind: a worker a SIGTERM does not stop is killed (it was left running, and
    # the pool's manager thread, joined by the interpreter's exit hook, waited for it: the test run hung at exit).
    import time

    from engine import workers

    pool = workers.WorkerPool(2)
    futs = [pool.submit(_deaf_sleeper, 60) for _ in range(2)]
    procs = list(pool._pool._processes.values())
    manager = pool._pool._executor_manager_thread
    time.sleep(0.5)  # (both jobs have started)
    t0 = time.monotonic()
    pool.close()
    assert time.monotonic() - t0 < 8
    assert procs and not any(p.is_alive() for p in procs) and not manager.is_alive()
    assert all(f.done() for f in futs)


def test_an_unclosed_pool_does_not_hold_the_interpreter_at_exit(tmp_path):
    # A consumer that stopped taking answers and kept the generator (never closed): at exit every pool still
    # open is closed before concurrent.futures' exit hook joins its manager thread.
    import subprocess
    import sys
    import time

    script = tmp_path / "left_open.py"
    script.write_text(
        "import signal, time\n"
        "from engine import workers\n"
        "def job(s):\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "    time.sleep(s)\n"
        "    return s\n"
        "kept = workers.ordered_map(job, [(0,), (45,), (45,), (45,)], workers=2)\n"
        "print(next(kept), flush=True)\n")
    from helpers import REPO

    t0 = time.monotonic()
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=40, cwd=REPO,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert p.stdout.strip() == "0" and p.returncode == 0, p.stderr
    assert time.monotonic() - t0 < 30
