"""Measurement helpers for the benchmarks: peak memory (VmHWM) of a process or a process tree, dropping the
page cache, a description of the machine, and how much a second CPU really adds right now."""
from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import threading


def proc_kb(pid: int | str, field: str, name: str = "status") -> int:
    """A kB figure of /proc/<pid>/<name> (status: VmHWM, RssAnon...; smaps_rollup: Pss_Anon...), 0 when the
    process is gone or the field is missing."""
    try:
        with open(f"/proc/{pid}/{name}") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def vmhwm_kb(pid: int | str = "self") -> int:
    return proc_kb(pid, "VmHWM")


def compile_package(repo) -> None:
    """Write the bytecode of rmqtool and its engine, as installing a package does (pip compiles what it
    installs), so timed commands do not compile the project's modules on every run when PYTHONDONTWRITEBYTECODE
    is set (this machine sets it)."""
    import compileall
    from pathlib import Path

    for d in ("engine", "rmqtool"):
        compileall.compile_dir(str(Path(repo) / d), quiet=1)


def children(pid: int) -> list[int]:
    """The pids of a process's children and their descendants (/proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                kids = [int(c) for c in open(f"/proc/{p}/task/{t}/children").read().split()]
            except OSError:
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def machine() -> dict:
    cpu = "?"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal")) // 1024
    import numpy

    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    except (OSError, IndexError):
        java = "?"
    try:
        import pyspark
        spark = pyspark.__version__
    except ImportError:
        spark = "-"
    return {"nproc": os.cpu_count(), "mem_mib": mem, "cpu": cpu, "loadavg_at_start": open("/proc/loadavg").read().split()[:3],
            "kernel": platform.release(),
            "python": platform.python_version(), "numpy": numpy.__version__, "pyspark": spark, "java": java}


_SPIN = "import time,sys\nt=time.perf_counter()\nx=0\nfor i in range(10_000_000): x+=i\nprint(time.perf_counter()-t)"


def cpu_scaling() -> dict:
    """A CPU-bound Python loop alone, then two copies at once: how much the second vCPU really adds."""
    solo = float(subprocess.run([sys.executable, "-c", _SPIN], capture_output=True, text=True).stdout)
    ps = [subprocess.Popen([sys.executable, "-c", _SPIN], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    pair = [float(p.communicate()[0]) for p in ps]
    return {"solo_s": round(solo, 2), "two_at_once_s": [round(x, 2) for x in pair],
            "throughput_x": round(2 * solo / max(pair), 2)}


class TreeSampler:
    """Peak VmHWM of every process below a pid (the JVM, the Python workers, the driver)."""

    def __init__(self, pid: int):
        self.pid, self.peaks, self._stop = pid, {}, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()

    def _tree(self) -> list[int]:
        parent = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    parent[int(d)] = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    pass
        out, todo = [], [self.pid]
        while todo:
            p = todo.pop()
            out.append(p)
            todo.extend(c for c, pp in parent.items() if pp == p)
        return out

    def _run(self):
        while not self._stop.wait(0.1):
            for pid in self._tree():
                hwm = vmhwm_kb(pid)
                if not hwm:
                    continue
                try:
                    cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                exe = cmd.split(" ")[0]
                label = ("jvm" if exe.endswith("java") else "pyspark worker" if "pyspark" in cmd
                         else "rmqtool (driver, inline workers)" if "rmqtool" in cmd else None)
                if label is None:  # short-lived helpers (shell, rm) are not part of the job's footprint
                    continue
                key = (pid, label)
                self.peaks[key] = max(self.peaks.get(key, 0), hwm)

    def by_label(self) -> dict:
        out: dict[str, list[int]] = {}
        for (pid, label), kb in self.peaks.items():
            out.setdefault(label, []).append(kb)
        return {k: {"processes": len(v), "max_mib": round(max(v) / 1024), "sum_mib": round(sum(v) / 1024)}
                for k, v in out.items()}


def med(xs):
    return statistics.median(xs)


