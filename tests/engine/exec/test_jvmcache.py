"""The local Spark JVM's class-data archive (engine.exec.jvmcache): where it lives, when it is used, made and
refused, and a local job end to end in fresh processes (a first run makes it, a second maps it; same files)."""
from __future__ import annotations

from helpers import REPO
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.exec import jvmcache
from engine.exec.jvmcache import CACHE_ENV, CDS_ENV, ClassArchive, cache_dir
from engine.exec.runners import LOCAL_JVM_OPTIONS

ROOT = REPO


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(d))
    monkeypatch.delenv(CDS_ENV, raising=False)
    monkeypatch.setattr(jvmcache, "archive_key", lambda opts: "k" * 16)  # no Java or Spark needed here
    return d


def test_cache_dir_is_made_private_and_refused_when_others_can_write(cache):
    assert cache_dir() == cache and cache.is_dir()
    assert cache.stat().st_mode & 0o777 == 0o700
    os.chmod(cache, 0o775)  # group-writable: another user could plant an archive (code the JVM loads)
    assert cache_dir() is None
    assert ClassArchive(LOCAL_JVM_OPTIONS).state == "off"


def test_cache_dir_follows_xdg_then_home(tmp_path, monkeypatch):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "rmqtool"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "rmqtool"
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "file"))
    (tmp_path / "file").write_text("not a directory")
    assert cache_dir() is None


def test_states_and_options(cache, monkeypatch):
    a = ClassArchive(LOCAL_JVM_OPTIONS)
    assert a.state == "creating"
    opts = a.options().split()
    listing = [o for o in opts if o.startswith("-XX:DumpLoadedClassList=")]
    assert len(listing) == 1 and Path(listing[0].split("=", 1)[1]).parent == cache
    assert "-Xlog:all=warning:stderr" in opts  # JVM warnings never reach the command's stdout
    a.path.write_bytes(b"archive")
    b = ClassArchive(LOCAL_JVM_OPTIONS)
    assert b.state == "used" and f"-XX:SharedArchiveFile={b.path}" in b.options().split()
    assert "-XX:+VerifySharedSpaces" in b.options().split()
    monkeypatch.setenv(CDS_ENV, "0")
    c = ClassArchive(LOCAL_JVM_OPTIONS)
    assert c.state == "off" and "SharedArchiveFile" not in c.options() and "ClassList" not in c.options()


class FakeJvm:
    """The job's JVM as finish sees it: a pid (of a process that has ended) and a stdin."""

    def __init__(self):
        done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        self.pid = int(done.stdout)
        self.stdin = open(os.devnull, "wb")


FAKE_JAVA = """#!/bin/sh
# -Xshare:dump writes "classes" to the -XX:SharedArchiveFile and exits $DUMP_RC; any other run exits $CHECK_RC
for a; do
  case "$a" in -XX:SharedArchiveFile=*) f="${a#-XX:SharedArchiveFile=}";; -Xshare:dump) dump=1;; esac
done
echo "$*" >> "$(dirname "$0")/calls"
if [ -n "$dump" ] && [ -n "$DUMP_GATE" ]; then  # wait until the test opens the gate (no timing involved)
  n=0; while [ ! -e "$DUMP_GATE" ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done
fi
if [ -n "$dump" ]; then printf classes > "$f"; exit "${DUMP_RC:-0}"; fi
exit "${CHECK_RC:-0}"
"""


@pytest.fixture
def java(tmp_path):
    p = tmp_path / "bin" / "java"
    p.parent.mkdir()
    p.write_text(FAKE_JAVA)
    p.chmod(0o755)
    return p


def wait_for(path: Path, seconds: float = 120) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(0.1)
    return False


def settle_payload(cache: Path, java: Path, pid: int, classes: bytes = b"java/lang/Object\n") -> dict:
    cache.mkdir(mode=0o700, exist_ok=True)
    d = {"pid": pid, "list": str(cache / ".l.classlist"), "dump": str(cache / ".d.partial"),
         "path": str(cache / "a.jsa"), "java": str(java), "args": ["-Xmx1g"], "cp": "/nowhere"}
    Path(d["list"]).write_bytes(classes)
    return d


@pytest.mark.parametrize("dump_rc,check_rc,classes,kept", [(0, 0, b"x\n", True), (1, 0, b"x\n", False),
                                                           (0, 1, b"x\n", False), (0, 0, b"", False)])
def test_settle_keeps_only_an_archive_that_was_made_and_maps(cache, java, monkeypatch, dump_rc, check_rc, classes,
                                                             kept):
    monkeypatch.setenv("DUMP_RC", str(dump_rc))
    monkeypatch.setenv("CHECK_RC", str(check_rc))
    d = settle_payload(cache, java, FakeJvm().pid, classes)
    jvmcache.settle(json.dumps(d))
    assert Path(d["path"]).exists() == kept and list(cache.iterdir()) == ([Path(d["path"])] if kept else [])
    if kept:
        calls = (java.parent / "calls").read_text().splitlines()
        assert "-Xshare:dump" in calls[0] and f"-XX:SharedClassListFile={d['list']}" in calls[0]
        assert "-Xshare:on" in calls[1] and "-XX:+VerifySharedSpaces" in calls[1]
        check = f"-cp /nowhere -Xshare:on -XX:SharedArchiveFile={d['dump']} -XX:+VerifySharedSpaces -version"
        assert calls[1].endswith(check)  # -version after the class path: the launcher stops at it


@pytest.mark.slow
def test_settle_waits_for_the_jvm_to_exit(cache, java):
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.0)"])  # exits unreaped: a zombie
    d = settle_payload(cache, java, slow.pid)
    t = time.monotonic()
    jvmcache.settle(json.dumps(d))
    assert time.monotonic() - t >= 0.8 and Path(d["path"]).exists()
    slow.wait()


@pytest.mark.slow
def test_finish_ends_the_jvm_and_settles_in_a_detached_process(cache, java, monkeypatch, capsys):
    monkeypatch.setattr(jvmcache, "_java_binary", lambda: str(java))
    a = ClassArchive(LOCAL_JVM_OPTIONS)
    a._list.write_bytes(b"java/lang/Object\n")  # what the JVM listed
    jvm = FakeJvm()
    a.finish(jvm, ["-Xmx1g", f"-XX:DumpLoadedClassList={a._list}", "-Dx=y", "-Xlog:disable"], "/cp")
    assert jvm.stdin.closed  # the runner ends the JVM by closing its stdin (PySpark's gateway exits on EOF)
    assert a.state == "creating" and "background" in capsys.readouterr().err
    assert wait_for(a.path) and a.path.read_bytes() == b"classes"
    time.sleep(0.5)
    assert sorted(p.name for p in cache.iterdir()) == [a.path.name]  # class list and partial file removed
    calls = (java.parent / "calls").read_text()
    assert "-Dx=y" not in calls and "DumpLoadedClassList" not in calls and "-Xmx1g" in calls


def test_two_jobs_in_a_row_make_the_archive_once(cache, java, monkeypatch, tmp_path):
    """The second job starts while the first one's archive is still being made: it runs without one ("pending")
    instead of making the same archive again; the job after maps the one archive."""
    monkeypatch.setattr(jvmcache, "_java_binary", lambda: str(java))
    gate = tmp_path / "gate"
    monkeypatch.setenv("DUMP_GATE", str(gate))
    first = ClassArchive(LOCAL_JVM_OPTIONS)
    assert first.state == "creating"
    first._list.write_bytes(b"java/lang/Object\n")
    first.finish(FakeJvm(), ["-Xmx1g"], "/cp")
    claim = cache / f".spark-classes-{'k' * 16}.claim"
    assert claim.is_file() and int(claim.read_text()) != os.getpid()  # the settling process holds it now
    second = ClassArchive(LOCAL_JVM_OPTIONS)
    assert second.state == "pending"
    assert "ClassList" not in second.options() and "SharedArchiveFile" not in second.options()
    second.finish(FakeJvm(), ["-Xmx1g"], "/cp")  # nothing to make: no second settling process
    gate.touch()
    assert wait_for(first.path)
    deadline = time.monotonic() + 60
    while claim.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not claim.exists()
    third = ClassArchive(LOCAL_JVM_OPTIONS)
    assert third.state == "used"
    dumps = [c for c in (java.parent / "calls").read_text().splitlines() if "-Xshare:dump" in c]
    assert len(dumps) == 1


def test_a_claim_whose_process_ended_is_taken_over(cache):
    cache.mkdir(mode=0o700)
    claim = cache / f".spark-classes-{'k' * 16}.claim"
    claim.write_text(str(FakeJvm().pid))  # a job killed while it made the archive
    os.utime(claim, (time.time() - 2 * jvmcache.STALE_PARTIAL_SECONDS,) * 2)
    a = ClassArchive(LOCAL_JVM_OPTIONS)
    assert a.state == "creating" and int(claim.read_text()) == os.getpid()
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        claim.write_text(str(live.pid))  # a job making it now, however long it has run
        os.utime(claim, (time.time() - 2 * jvmcache.STALE_PARTIAL_SECONDS,) * 2)
        assert ClassArchive(LOCAL_JVM_OPTIONS).state == "pending" and claim.exists()
    finally:
        live.stdin.close()
        live.wait()


def test_abandoned_class_lists_and_partial_archives_are_swept(cache):
    cache.mkdir(mode=0o700)
    old = [cache / f".spark-classes-{'k' * 16}.1.partial", cache / f".spark-classes-{'k' * 16}.1.classlist"]
    for p in old:
        p.write_bytes(b"half")
        os.utime(p, (time.time() - 2 * jvmcache.STALE_PARTIAL_SECONDS,) * 2)
    fresh = cache / f".spark-classes-{'k' * 16}.2.classlist"  # a job's JVM writing it now
    fresh.write_bytes(b"half")
    ClassArchive(LOCAL_JVM_OPTIONS)
    assert not any(p.exists() for p in old) and fresh.exists()


def test_the_key_changes_with_the_jvm_options():
    pytest.importorskip("pyspark")
    k1, k2 = jvmcache.archive_key(LOCAL_JVM_OPTIONS), jvmcache.archive_key(LOCAL_JVM_OPTIONS + " -Xmx1g")
    if k1 is None:
        pytest.skip("no java on this machine")
    assert k1 != k2 and len(k1) == 16


@pytest.mark.slow
def test_a_local_job_makes_the_archive_once_then_maps_it(tmp_path):
    """Two spark-reindex runs in fresh processes: the first makes the archive, the second starts its JVM with
    it; both give the inline job's files, and stdout is the JSON result alone."""
    pytest.importorskip("pyspark")
    from helpers import put_jsonl

    store = tmp_path / "store"
    put_jsonl(store, [{"topic": "T", "body": f"m{i}", "keys": [f"k{i}", "shared"]} for i in range(40)])
    env = dict(os.environ, **{CACHE_ENV: str(tmp_path / "cache")})
    env.pop(CDS_ENV, None)  # on, as by default (the suite turns it off for its shared context)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    geom = ["--hash-slots", "16", "--max-index", "64"]

    work = tmp_path / "cwd"
    work.mkdir()

    def job(master: str, out: str) -> dict:
        r = subprocess.run([sys.executable, "-m", "rmqtool", "spark-reindex", "--store", str(store), *geom,
                            "--out", str(tmp_path / out), "--master", master, "--json"],
                           capture_output=True, text=True, env=env, timeout=600, cwd=work)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    first = job("local[1]", "a")
    assert first["sparkClassArchive"] == "creating"  # its JVM listed its classes; the archive is made after
    cache = tmp_path / "cache"
    deadline = time.monotonic() + 600  # made at low priority: about 15 s of one CPU here
    while not list(cache.glob("*.jsa")) and time.monotonic() < deadline:
        time.sleep(0.2)
    second, inline = job("local[1]", "b"), job("inline", "c")
    assert second["sparkClassArchive"] == "used" and inline["sparkClassArchive"] is None
    archives = list(cache.iterdir())
    assert len(archives) == 1 and archives[0].name.endswith(".jsa") and archives[0].stat().st_size > 1 << 20

    def files(d):
        return {p.name: p.read_bytes() for p in (tmp_path / d).iterdir() if p.name[0].isdigit()}
    assert files("a") == files("b") == files("c") and files("c")

    # A truncated archive (the JVM fails as it maps it): deleted, the JVM started without it, the job done.
    data = archives[0].read_bytes()
    archives[0].write_bytes(data[:len(data) // 2])
    third = job("local[1]", "d")
    assert third["sparkClassArchive"] == "rejected" and not archives[0].exists()
    assert files("d") == files("c")
    assert list(work.iterdir()) == []  # no JVM crash report in the working directory
