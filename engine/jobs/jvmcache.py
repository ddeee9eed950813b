"""A class-data archive for the local Spark JVM (JDK application class-data sharing, AppCDS).

Starting a local Spark JVM is mostly loading and linking Spark's classes: about 4 s of the 5-7 s a local
spark-reindex spends before and around its work on a 2-CPU machine. A dynamic class-data archive holds those
classes already parsed and verified; a JVM started with it maps the archive instead and starts about 2.5 s
sooner (bench/bench_reindex.py measures both).

The first local job with no archive runs its JVM with -XX:ArchiveClassesAtExit=<a file of its own>; when the
job closes, the runner ends that JVM (it writes the archive as it exits) and renames the file into place, so a
reader sees a whole archive or none, and two first runs at once each write their own file. Every later local
job maps it with -XX:SharedArchiveFile. The JVM checks an archive against itself and its class path, and its
CRCs (-XX:+VerifySharedSpaces), before it uses one, and runs without it when they differ (-Xshare:auto, the
default); an archive the JVM cannot even start with (a truncated file makes it fail as it maps the file) is
deleted and the JVM started again without it. So a stale or damaged archive costs only the saving, never the
job. The archive's name carries a digest of the Java binary, the Spark jars and the JVM options, so an upgrade
makes a new one.

Where: $RMQTOOL_CACHE_DIR, else $XDG_CACHE_HOME/rmqtool, else ~/.cache/rmqtool (made 0700). It is used only
when it belongs to this user and nobody else can write to it (an archive is code the JVM loads). About 70 MB
per Java and Spark version; deleting it is always safe. RMQTOOL_SPARK_CDS=0 turns the archive off; so does a
spark.driver.extraJavaOptions of the user's (it replaces the runner's JVM options).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Optional

CDS_ENV = "RMQTOOL_SPARK_CDS"
CACHE_ENV = "RMQTOOL_CACHE_DIR"
#: How long the runner waits for the archiving JVM to write its archive and exit when the job closes.
DUMP_WAIT_SECONDS = 120


def cache_dir() -> Optional[Path]:
    """The user's rmqtool cache directory, made if missing; None when there is none safe to use."""
    base = os.environ.get(CACHE_ENV)
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME")
        home = os.path.expanduser("~")
        if xdg and os.path.isabs(xdg):
            base = os.path.join(xdg, "rmqtool")
        elif home and home != "~" and os.path.isabs(home):
            base = os.path.join(home, ".cache", "rmqtool")
        else:
            return None
    path = Path(base)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return path


def _java_binary() -> Optional[str]:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.exists(java) else None


def _spark_jars() -> Optional[Path]:
    home = os.environ.get("SPARK_HOME")
    if not home:
        try:
            import pyspark
        except ImportError:
            return None
        home = os.path.dirname(pyspark.__file__)
    jars = Path(home) / "jars"
    return jars if jars.is_dir() else None


def archive_key(jvm_options: str) -> Optional[str]:
    """A digest of what the archive depends on: the Java binary, the Spark jars, the JVM options."""
    java, jars = _java_binary(), _spark_jars()
    if java is None or jars is None:
        return None
    h = hashlib.sha256()
    try:
        st = os.stat(java)
        h.update(f"{java}\0{st.st_size}\0{st.st_mtime_ns}\0{jvm_options}\0{jars}\0".encode())
        for entry in sorted(os.scandir(jars), key=lambda e: e.name):
            s = entry.stat()
            h.update(f"{entry.name}\0{s.st_size}\0{s.st_mtime_ns}\0".encode())
    except OSError:
        return None
    return h.hexdigest()[:16]


def _drop_stale_partials(where: Path) -> None:
    """Archives left half-written by a job that was killed before its JVM exited (their pid is gone)."""
    try:
        for p in where.glob(".spark-classes-*.partial"):
            try:
                pid = int(p.name.rsplit(".", 2)[-2])
                os.kill(pid, 0)
            except ProcessLookupError:
                p.unlink(missing_ok=True)
            except (ValueError, OSError):
                continue
    except OSError:
        pass


class ClassArchive:
    """The archive for one local JVM: the options to start it with, and what to do when it has exited.

    state: "used" (an archive is mapped), "creating" (this JVM writes one as it exits), then "created" or
    "failed" (its JVM did not exit cleanly with one written), "rejected" (the JVM could not start with the
    archive: deleted, the JVM started without it), or "off" (none: turned off, no safe cache directory, or no
    Java or Spark found)."""

    def __init__(self, jvm_options: str):
        self.state, self.path, self._dump = "off", None, None
        if os.environ.get(CDS_ENV, "1").strip().lower() in ("0", "off", "no", "false"):
            return
        where, key = cache_dir(), archive_key(jvm_options)
        if where is None or key is None:
            return
        self.path = where / f"spark-classes-{key}.jsa"
        _drop_stale_partials(where)
        if self.path.is_file():
            self.state = "used"
        else:
            self.state = "creating"
            self._dump = where / f".spark-classes-{key}.{os.getpid()}.partial"

    def reject(self) -> None:
        """The JVM did not start with the archive (damaged in a way its checks miss): run without it, and let
        the next local job write a new one in its place."""
        self.state = "rejected"
        try:
            self.path.unlink()
        except OSError:
            pass

    def options(self) -> str:
        """JVM options: the archive's, and the JVM's own warnings sent to its stderr (the job's Spark log)
        instead of its stdout (the command's output)."""
        logs = "-Xlog:disable -Xlog:all=warning:stderr"
        if self.state == "used":  # its CRCs checked first: a damaged archive is ignored, not mapped
            return f"-XX:SharedArchiveFile={self.path} -XX:+VerifySharedSpaces {logs}"
        if self.state == "creating":
            return f"-XX:ArchiveClassesAtExit={self._dump} {logs}"
        return logs

    def finish(self, gateway_proc) -> None:
        """After the job's SparkContext stopped: when this JVM writes an archive, end it (its stdin closed:
        PySpark's gateway exits on EOF), wait for it, and move a whole archive into place."""
        if self.state != "creating" or gateway_proc is None:
            return
        print(f"rmqtool: saving Spark's classes for faster starts of later local jobs (once): {self.path}",
              file=sys.stderr, flush=True)
        try:
            if gateway_proc.stdin is not None:
                gateway_proc.stdin.close()
            code = gateway_proc.wait(DUMP_WAIT_SECONDS)
            if code == 0 and self._dump.is_file() and self._dump.stat().st_size > 0:
                os.replace(self._dump, self.path)
                self.state = "created"
            else:
                self.state = "failed"
        except Exception as e:  # noqa: BLE001 - the archive is an optimisation: the job's result stands
            self.state = "failed"
            print(f"rmqtool: note: no Spark class archive written ({type(e).__name__}: {e})", file=sys.stderr)
        finally:
            try:
                self._dump.unlink()
            except OSError:
                pass
