"""A class-data archive for the local Spark JVM (JDK application class-data sharing, AppCDS).

Starting a local Spark JVM is mostly loading, verifying and linking Spark's classes: 3-4 s of the 5-7 s a
local spark-reindex spends before and around its work on a 2-CPU machine. A class-data archive holds those
classes already parsed and verified; a JVM started with it maps the archive instead and starts about 2 s
sooner (bench/bench_reindex.py measures both).

The first local job with no archive runs its JVM with -XX:DumpLoadedClassList=<a file of its own>, which
costs it nothing measurable: the JVM notes the name of each class it loads. When the job closes, the runner
ends the JVM and leaves the rest to a detached process at low priority (settle), so the command does not wait:
it waits for the JVM to exit, has a JVM write an archive of the listed classes (-Xshare:dump, with the job's
class path and options: about 15 s of one CPU here), checks it by starting a JVM that must map it
(-Xshare:on, CRCs verified), and renames it into place; a reader sees a whole, checked archive or none. One
archive is made once: the job that starts making it claims it (a `.claim` file beside it holding the PID of the
process making it: the job, then its settling process), and a job that starts while the claim's process runs
(the next job right after, while the archive is being made) runs without an archive ("pending") instead of
making the same one again; a claim whose process has ended is taken over. Every later local job maps it with -XX:SharedArchiveFile. The
JVM checks an archive against itself and its class path, and its CRCs (-XX:+VerifySharedSpaces), before it
uses one, and runs without it when they differ (-Xshare:auto, the default); an archive the JVM cannot even
start with (a truncated file makes it fail as it maps the file) is deleted and the JVM started again without
it. So a stale or damaged archive costs only the saving, never the job. The archive's name carries a digest
of the Java binary, the Spark jars and the JVM options, so an upgrade makes a new one.

Where: $RMQTOOL_CACHE_DIR, else $XDG_CACHE_HOME/rmqtool, else ~/.cache/rmqtool (made 0700). It is used only
when it belongs to this user and nobody else can write to it (an archive is code the JVM loads). About 80-100 MB
per Java and Spark version; deleting it is always safe. RMQTOOL_SPARK_CDS=0 turns the archive off; so does a
spark.driver.extraJavaOptions of the user's (it replaces the runner's JVM options).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

CDS_ENV = "RMQTOOL_SPARK_CDS"
CACHE_ENV = "RMQTOOL_CACHE_DIR"
#: How long the settling process waits for the job's JVM to exit, and for each JVM it runs itself.
DUMP_WAIT_SECONDS = 600
#: A class list or partial archive this old was abandoned (its settling process was killed).
STALE_PARTIAL_SECONDS = 3600


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
    """Class lists and partial archives left by a settling process that was killed (one finishes in well
    under a minute: a file an hour old is abandoned)."""
    try:
        for p in where.glob(".spark-classes-*"):
            if p.name.endswith(".claim"):
                continue  # a claim goes when its process has ended (_claim), however long it ran
            try:
                if time.time() - p.stat().st_mtime > STALE_PARTIAL_SECONDS:
                    p.unlink()
            except OSError:
                continue
    except OSError:
        pass


def _running(pid: int) -> bool:
    """Whether process pid still runs (an exited one not yet reaped by its parent does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _java(d: dict, *args: str) -> int:
    return subprocess.run([d["java"], *d["args"], "-Xlog:disable", "-XX:ErrorFile=/dev/null", "-cp", d["cp"], *args],
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
                          timeout=DUMP_WAIT_SECONDS).returncode


def settle(payload: str) -> None:
    """The detached process ClassArchive.finish starts: wait for the job's JVM to exit, have a JVM write an
    archive of the classes it listed (the job's class path and options), check the archive by starting a JVM
    that must map it (-Xshare:on, CRCs verified), and move it into place; otherwise remove what was made."""
    d = json.loads(payload)
    listed, dump, path = Path(d["list"]), Path(d["dump"]), Path(d["path"])
    claim = Path(d["claim"]) if d.get("claim") else None
    try:
        os.nice(10)
    except OSError:
        pass
    deadline = time.monotonic() + DUMP_WAIT_SECONDS
    while _running(d["pid"]):
        if time.monotonic() > deadline:
            return  # a JVM this slow to exit: its class list goes with the stale-file sweep
        time.sleep(0.2)
    try:
        if d["java"] and listed.is_file() and listed.stat().st_size > 0:
            made = _java(d, "-Xshare:dump", f"-XX:SharedClassListFile={listed}", f"-XX:SharedArchiveFile={dump}")
            if made == 0 and dump.is_file() and dump.stat().st_size > 0 and \
                    _java(d, "-Xshare:on", f"-XX:SharedArchiveFile={dump}", "-XX:+VerifySharedSpaces", "-version") == 0:
                os.replace(dump, path)
    except (OSError, subprocess.SubprocessError):
        pass
    finally:
        for p in (listed, dump, claim):
            try:
                if p is not None:
                    p.unlink()
            except OSError:
                pass


def _claim(claim: Path) -> bool:
    """Claim the making of an archive for this process (claim: its `.claim` file, holding the maker's PID): False
    while another process that runs holds it; a claim whose process has ended (killed, or it ended without making
    the archive) is taken over."""
    for _ in range(2):
        try:
            fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            try:
                holder = int(claim.read_text().strip() or "0")
            except (OSError, ValueError):
                holder = 0
            if holder > 0 and holder != os.getpid() and _running(holder):
                return False
            try:
                claim.unlink()
            except OSError:
                return False
            continue
        except OSError:
            return False
        try:
            os.write(fd, str(os.getpid()).encode("ascii"))
        finally:
            os.close(fd)
        return True
    return False


def _hand_claim(claim: Optional[Path], pid: Optional[int]) -> None:
    """Pass the claim to process pid (the settling process), or give it up (None)."""
    if claim is None:
        return
    try:
        if pid is None:
            claim.unlink()
        else:
            tmp = claim.with_name(f"{claim.name}.{os.getpid()}")
            tmp.write_text(str(pid))
            os.replace(tmp, claim)
    except OSError:
        pass


_SETTLE = "import sys; sys.path.insert(0, sys.argv[1]); from engine.exec.jvmcache import settle; settle(sys.argv[2])"


class ClassArchive:
    """The archive for one local JVM: the options to start it with, and what to do when it has exited.

    state: "used" (an archive is mapped), "creating" (this JVM lists its classes; the archive is made in
    the background when the job closes), "pending" (another job is making it: this JVM runs without), "failed" (the settling process could not be started), "rejected"
    (the JVM could not start with the archive: deleted, the JVM started without it), or "off" (none: turned
    off, no safe cache directory, or no Java or Spark found)."""

    def __init__(self, jvm_options: str):
        self.state, self.path, self._list, self._dump, self._claim = "off", None, None, None, None
        if os.environ.get(CDS_ENV, "1").strip().lower() in ("0", "off", "no", "false"):
            return
        where, key = cache_dir(), archive_key(jvm_options)
        if where is None or key is None:
            return
        self.path = where / f"spark-classes-{key}.jsa"
        _drop_stale_partials(where)
        if self.path.is_file():
            self.state = "used"
        elif not _claim(where / f".spark-classes-{key}.claim"):
            self.state = "pending"  # being made by another job: made once, then every later job maps it
        else:
            self.state = "creating"
            self._claim = where / f".spark-classes-{key}.claim"
            self._list = where / f".spark-classes-{key}.{os.getpid()}.classlist"
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
            return f"-XX:DumpLoadedClassList={self._list} {logs}"
        return logs

    def end_gateway(self) -> None:
        """End this process's Spark JVM (stopped context, idle gateway), whose class list the archive is made
        from (finish), and forget the gateway: a later SparkContext in this process starts a JVM of its own."""
        from pyspark import SparkContext

        gateway, jvm = SparkContext._gateway, SparkContext._jvm
        proc = getattr(gateway, "proc", None)
        try:
            args = [str(a) for a in
                    jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()]
            class_path = str(jvm.System.getProperty("java.class.path"))
        except Exception:  # noqa: BLE001 - without them the archive cannot be checked: none is kept
            args, class_path, self.state = None, None, "failed"
        try:
            if gateway is not None:
                gateway.shutdown()
        except Exception:  # noqa: BLE001 - the JVM's end is what matters, below
            pass
        if args is not None:
            self.finish(proc, args, class_path)
        else:
            _hand_claim(self._claim, None)
            if proc is not None and proc.stdin is not None:
                proc.stdin.close()
        SparkContext._gateway = None
        SparkContext._jvm = None

    def finish(self, gateway_proc, jvm_args: list[str], class_path: str) -> None:
        """After the job's SparkContext stopped, when this JVM listed its classes: end the JVM (its stdin
        closed: PySpark's gateway exits on EOF) and leave the archive to a detached process (settle), so the
        command does not wait for it. jvm_args, class_path: the JVM's own, for the JVMs settle runs."""
        if self.state != "creating" or gateway_proc is None:
            if self.state == "creating":
                _hand_claim(self._claim, None)
            return
        keep = [a for a in jvm_args if not a.startswith(("-XX:DumpLoadedClassList", "-Xlog", "-XX:ErrorFile", "-D"))]
        payload = json.dumps({"pid": gateway_proc.pid, "list": str(self._list), "dump": str(self._dump),
                              "path": str(self.path), "java": _java_binary(), "args": keep, "cp": class_path,
                              "claim": str(self._claim) if self._claim else None})
        try:
            settling = subprocess.Popen([sys.executable, "-c", _SETTLE, str(Path(__file__).resolve().parents[2]), payload],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             cwd="/", start_new_session=True, close_fds=True)
            _hand_claim(self._claim, settling.pid)
            print(f"rmqtool: an archive of Spark's classes for faster starts of later local jobs is being made "
                  f"(once, in the background, at low priority): {self.path}", file=sys.stderr, flush=True)
        except OSError:
            self.state = "failed"  # the class list goes with the stale-file sweep
            _hand_claim(self._claim, None)
        finally:
            if gateway_proc.stdin is not None:
                gateway_proc.stdin.close()
