"""The local Spark JVM's class-data archive (engine.jobs.jvmcache): where it lives, when it is used, made and
refused, and a local job end to end in fresh processes (a first run makes it, a second maps it; same files)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.jobs import jvmcache
from engine.jobs.jvmcache import CACHE_ENV, CDS_ENV, ClassArchive, cache_dir
from engine.jobs.runners import LOCAL_JVM_OPTIONS

ROOT = Path(__file__).resolve().parent.parent


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
    dump = [o for o in opts if o.startswith("-XX:ArchiveClassesAtExit=")]
    assert len(dump) == 1 and Path(dump[0].split("=", 1)[1]).parent == cache
    assert "-Xlog:all=warning:stderr" in opts  # JVM warnings never reach the command's stdout
    a.path.write_bytes(b"archive")
    b = ClassArchive(LOCAL_JVM_OPTIONS)
    assert b.state == "used" and f"-XX:SharedArchiveFile={b.path}" in b.options().split()
    monkeypatch.setenv(CDS_ENV, "0")
    c = ClassArchive(LOCAL_JVM_OPTIONS)
    assert c.state == "off" and "SharedArchiveFile" not in c.options() and "ArchiveClassesAtExit" not in c.options()


class FakeJvm:
    """A gateway process that 'writes' its archive when it exits."""

    def __init__(self, dump: Path | None, code: int = 0, data: bytes = b"classes"):
        self.dump, self.code, self.data = dump, code, data
        self.stdin = open(os.devnull, "wb")

    def wait(self, timeout=None):
        assert self.stdin.closed  # the runner ends the JVM by closing its stdin (PySpark's gateway exits on EOF)
        if self.dump is not None:
            self.dump.write_bytes(self.data)
        return self.code


def test_finish_moves_a_whole_archive_into_place(cache, capsys):
    a = ClassArchive(LOCAL_JVM_OPTIONS)
    a.finish(FakeJvm(a._dump))
    assert a.state == "created" and a.path.read_bytes() == b"classes"
    assert sorted(p.name for p in cache.iterdir()) == [a.path.name]  # no partial file left
    assert "once" in capsys.readouterr().err


@pytest.mark.parametrize("code,data", [(1, b"classes"), (0, b"")])
def test_finish_drops_the_archive_of_a_jvm_that_failed_or_wrote_nothing(cache, code, data):
    a = ClassArchive(LOCAL_JVM_OPTIONS)
    a.finish(FakeJvm(a._dump, code, data))
    assert a.state == "failed" and not a.path.exists()
    assert list(cache.iterdir()) == []


def test_a_killed_run_s_partial_archive_is_removed_by_the_next(cache):
    cache.mkdir(mode=0o700)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = cache / f".spark-classes-{'k' * 16}.{int(dead.stdout)}.partial"
    stale.write_bytes(b"half")
    mine = cache / f".spark-classes-{'k' * 16}.{os.getpid()}.partial"  # a live run's: kept
    mine.write_bytes(b"half")
    ClassArchive(LOCAL_JVM_OPTIONS)
    assert not stale.exists() and mine.exists()


def test_the_key_changes_with_the_jvm_options():
    pytest.importorskip("pyspark")
    k1, k2 = jvmcache.archive_key(LOCAL_JVM_OPTIONS), jvmcache.archive_key(LOCAL_JVM_OPTIONS + " -Xmx1g")
    if k1 is None:
        pytest.skip("no java on this machine")
    assert k1 != k2 and len(k1) == 16


def test_a_local_job_makes_the_archive_once_then_maps_it(tmp_path):
    """Two spark-reindex runs in fresh processes: the first makes the archive, the second starts its JVM with
    it; both give the inline job's files, and stdout is the JSON result alone."""
    pytest.importorskip("pyspark")
    from helpers import put_jsonl

    store = tmp_path / "store"
    put_jsonl(store, [{"topic": "T", "body": f"m{i}", "keys": [f"k{i}", "shared"]} for i in range(40)])
    env = dict(os.environ, **{CACHE_ENV: str(tmp_path / "cache")})
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

    first, second = job("local[1]", "a"), job("local[1]", "b")
    inline = job("inline", "c")
    assert first["spark_class_archive"] == "created" and second["spark_class_archive"] == "used"
    assert inline["spark_class_archive"] is None
    archives = list((tmp_path / "cache").iterdir())
    assert len(archives) == 1 and archives[0].name.endswith(".jsa") and archives[0].stat().st_size > 1 << 20

    def files(d):
        return {p.name: p.read_bytes() for p in (tmp_path / d).iterdir() if p.name[0].isdigit()}
    assert files("a") == files("b") == files("c") and files("c")

    # A truncated archive (the JVM fails as it maps it): deleted, the JVM started without it, the job done.
    data = archives[0].read_bytes()
    archives[0].write_bytes(data[:len(data) // 2])
    third = job("local[1]", "d")
    assert third["spark_class_archive"] == "rejected" and not archives[0].exists()
    assert files("d") == files("c")
    assert list(work.iterdir()) == []  # no JVM crash report in the working directory
