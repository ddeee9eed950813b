"""spark-reindex on a real Spark standalone cluster (issue 14 item 9).

A master and one worker are started from the pyspark installation (bin/spark-class, the jars pip installed)
on 127.0.0.1; `rmqtool spark-reindex --master spark://127.0.0.1:PORT` runs as its own process (a driver
that connects to the cluster, executors in the worker) and must write what the inline job writes. Marked
spark_cluster (pyproject.toml); it runs in CI, with everything from PyPI.
"""
from __future__ import annotations

from helpers import REPO
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import put_jsonl, run
from engine.broker.layout import list_index_files

GEOM = ["--hash-slots", "16", "--max-index", "64"]

pytestmark = [pytest.mark.spark_cluster, pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout: float, what: str, logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            tails = "\n".join(p.read_text(errors="replace")[-3000:] for p in logs if p.exists())
            raise AssertionError(f"{what} not ready after {timeout} s\n{tails}")
        time.sleep(0.3)


def spark_env(tmp: Path) -> dict:
    import pyspark

    return {**os.environ, "SPARK_HOME": os.path.dirname(pyspark.__file__), "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(tmp / "logs"), "SPARK_WORKER_DIR": str(tmp / "work"),
            "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """spark://127.0.0.1:PORT with one worker (2 cores, 1 GiB), shut down afterwards."""
    tmp = tmp_path_factory.mktemp("cluster")
    env = spark_env(tmp)
    spark_class = os.path.join(env["SPARK_HOME"], "bin", "spark-class")
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    mlog, wlog = tmp / "master.log", tmp / "worker.log"
    procs = []
    try:
        with open(mlog, "w") as out:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                 "--webui-port", str(free_port())], stdout=out, stderr=subprocess.STDOUT, env=env,
                start_new_session=True))
        wait_for(lambda: "I have been elected leader" in mlog.read_text(errors="replace"), 120, "master",
                 [mlog])
        with open(wlog, "w") as out:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "2",
                 "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(tmp / "work"), url],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        wait_for(lambda: "Registering worker" in mlog.read_text(errors="replace"), 120, "worker", [mlog, wlog])
        yield url, env
    finally:
        for p in reversed(procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def cli(args: list, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**env, "PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "rmqtool", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=REPO)


def index_bytes(d: Path) -> list[bytes]:
    return [p.read_bytes() for p in list_index_files(d)]


def test_spark_reindex_on_a_standalone_cluster_equals_inline(cluster, tmp_path):
    url, env = cluster
    store = tmp_path / "store"
    msgs = [{"topic": ["TopicA", "TopicB"][i % 2], "keys": f"k{i} c{i % 7}", "body": "x" * (i * 37 % 500),
             "storeTimestamp": 1_700_000_000_000 + 500 * i} for i in range(90)]
    put_jsonl(store, msgs)
    assert len(list((store / "commitlog").iterdir())) >= 3
    assert run(["spark-reindex", "--store", store, *GEOM, "--master", "inline", "--out", tmp_path / "inline"]
               ).exit_code == 0
    t = time.monotonic()
    p = cli(["spark-reindex", "--store", store, *GEOM, "--master", url, "--out", tmp_path / "cluster", "--json",
             "--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=1"], env)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["master"] == url and res["segments"] >= 3 and len(res["scanTasks"]) >= 3
    assert index_bytes(tmp_path / "cluster") == index_bytes(tmp_path / "inline") == index_bytes(store / "index")
    assert time.monotonic() - t < 240
    assert not [x for x in (tmp_path / "cluster").iterdir() if x.name.startswith(".")]  # staging, scratch gone


def test_an_unreachable_master_fails_fast_with_one_line(tmp_path):
    store = tmp_path / "store"
    put_jsonl(store, [{"topic": "TopicA", "keys": "k", "body": "b"}])
    dead = f"spark://127.0.0.1:{free_port()}"  # nothing listens there
    t = time.monotonic()
    p = cli(["spark-reindex", "--store", store, *GEOM, "--master", dead, "--out", tmp_path / "o"],
            spark_env(tmp_path), timeout=60)
    elapsed = time.monotonic() - t
    assert p.returncode == 2 and elapsed < 30, (p.returncode, elapsed, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach the Spark master"), lines
    assert not (tmp_path / "o").exists()
    shutil.rmtree(store)
