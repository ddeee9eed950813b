"""Shared fixtures (helpers live in tests/helpers.py)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.broker.config.brokerconf import load_config
from engine.broker.consumequeue.queue import ConsumeQueue
from engine.broker.layout import topic_problem
from engine.broker.commitlog.message import TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, VALID
from engine.broker.store import MessageStore
from helpers import GOLDEN, die_first, unpack_golden


#: Environment variables a pytest-xdist worker finds set that the run did not set: every worker of pytest-xdist
#: 3.8.0 starts with COLUMNS=80 and LINES=24 (a terminal size exported as it starts), and rmqtool's tables read
#: COLUMNS (rmqtool.tables.terminal_width): a test run on a worker would see 80 columns, not piped output.
_CONTROLLER_ENV = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist, in the controller: tell each worker the terminal variables as the run has them."""
    node.workerinput["rmqtool_env"] = {k: os.environ.get(k) for k in _CONTROLLER_ENV}


def pytest_configure(config):
    """In a pytest-xdist worker: the terminal variables as the controller has them (set, or not set)."""
    for k, v in getattr(config, "workerinput", {}).get("rmqtool_env", {}).items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session", autouse=True)
def _rmqtool_cache(tmp_path_factory):
    """Local Spark JVMs the suite starts make no class-data archive (engine.exec.jvmcache): the shared one
    would write it only as the run ends. tests/engine/exec/test_jvmcache.py turns it on where it tests it, and a cache
    directory of the run's keeps it out of the user's cache whatever happens."""
    from engine.exec.jvmcache import CACHE_ENV, CDS_ENV

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, str(tmp_path_factory.mktemp("rmqtool-cache")))
        mp.setenv(CDS_ENV, "0")
        yield


@pytest.fixture(scope="session", autouse=True)
def _one_click_command():
    """typer's CliRunner turns the Typer app into its click command on every invoke (about 0.3 s of signature
    and type-hint evaluation for rmqtool's 20 commands, more than most commands take on a test store); the
    command is built once per app instead and reused, as one process running the CLI uses it."""
    import typer.testing

    built: dict[int, tuple[object, object]] = {}
    build = typer.testing._get_command

    def get_command(app):
        got = built.get(id(app))
        if got is None or got[0] is not app:
            got = built[id(app)] = (app, build(app))
        return got[1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(typer.testing, "_get_command", get_command)
        yield


@pytest.fixture(scope="session")
def golden() -> Path:
    return GOLDEN


@pytest.fixture
def r1_store(tmp_path) -> Path:
    """A fresh copy of broker/r1's store (the archive is unpacked once per run, then copied for each test)."""
    return unpack_golden("broker/r1", tmp_path / "r1").store


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def golden_store(tmp_path):
    """The golden commit log (written by RocketMQ's encoder) with consume queues dispatched by the engine."""
    root = tmp_path / "g"
    (root / "commitlog").mkdir(parents=True)
    for name in ("00000000000000000000", "00000000000000004096"):
        shutil.copy(GOLDEN / "commitlog" / name, root / "commitlog" / name)
    cfg = load_config(None, storePathRootDir=str(root), mappedFileSizeConsumeQueue=200)
    with MessageStore(cfg) as st:
        cqs = {}
        for e in st.walk():
            rec = e.record
            if e.kind != VALID or rec.tx_type not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
                continue
            if topic_problem(rec.topic):
                continue  # the 150-character topic: a client's name rules are the ones checked here
            key = (rec.topic, rec.queue_id)
            cqs.setdefault(key, ConsumeQueue(root, *key, 200, writable=True))
            cqs[key].put(e.offset, e.size, rec.tags_code(), rec.queue_offset)
        for cq in cqs.values():
            cq.close()
    return root, [json.loads(line) for line in (GOLDEN / "commitlog" / "messages.jsonl").read_text().splitlines()]


@pytest.fixture(scope="session")
def spark():
    """One local Spark context shared by every Spark test (commands reuse it)."""
    pytest.importorskip("pyspark")
    from engine.exec.runners import SparkRunner

    runner = SparkRunner("local[2]")  # one context shared by every Spark test; commands reuse it
    runner.sc.setLogLevel("ERROR")
    yield runner.sc
    runner.close()


def pytest_collection_modifyitems(config, items):
    """A test that asks for the Spark context starts a JVM: it must carry the slow mark (README, "Tests")."""
    unmarked = [item.nodeid for item in items if "spark" in getattr(item, "fixturenames", ())
                and item.get_closest_marker("slow") is None]
    if unmarked:
        raise pytest.UsageError(f"tests using the spark fixture must be marked @pytest.mark.slow: {unmarked}")


@pytest.fixture
def t1(tmp_path):
    """A fresh copy of the timer/t1 broker store: (store root, broker.conf pointing at it)."""
    return unpack_golden("timer/t1", tmp_path / "t1")


@pytest.fixture
def jobs(monkeypatch):
    """(function name, args) of every job handed to a worker process (engine.workers.WorkerPool.submit): proof
    that the work ran on workers, and how it was cut."""
    from engine import workers

    seen: list[tuple[str, tuple]] = []
    real = workers.WorkerPool.submit

    def submit(self, fn, *args):
        seen.append((fn.__name__, args))
        return real(self, fn, *args)

    monkeypatch.setattr(workers.WorkerPool, "submit", submit)
    return seen


@pytest.fixture
def killed(monkeypatch):
    """Every job handed to a worker process kills the worker that runs it (helpers.die_first)."""
    from engine import workers

    real = workers.WorkerPool.submit
    monkeypatch.setattr(workers.WorkerPool, "submit", lambda self, fn, *args: real(self, die_first, fn, *args))
