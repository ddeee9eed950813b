"""engine.java.concurrent (ConcurrentHashMap iteration order) against the JVM: committed JVM output, and a live
JVM run of tests/java/ChmOrderProbe.java over fresh random histories when javac is on the machine."""
from __future__ import annotations

from helpers import TESTS
import shutil
import subprocess
from pathlib import Path

import pytest

from chm_probe import fixed_cases, random_cases, replay
from engine.java.concurrent import ConcurrentHashMap, iteration_order, long_hash, spread, string_hash, table_size_for

JAVA_DIR = TESTS / "java"


def test_committed_cases_are_the_generator_output():
    assert (JAVA_DIR / "chm_cases.txt").read_text() == fixed_cases()


def test_model_reproduces_committed_jvm_output():
    want = (JAVA_DIR / "chm_expected.txt").read_text()
    got = replay((JAVA_DIR / "chm_cases.txt").read_text())
    assert got.count("\n") == want.count("\n") > 800
    for g, w in zip(got.splitlines(), want.splitlines()):
        assert g == w


def test_f1_commitlog_map_order_and_sizing_rules():
    # flat-store §6: the f1 vector's first commit-log map, and the presize table of the copy constructor.
    assert iteration_order([0, 3810, 7701, 11506, 15423, 19217, 23123], long_hash) == \
        [0, 19217, 3810, 11506, 23123, 7701, 15423]
    for m, n in ((0, 16), (5, 16), (6, 32), (10, 32), (11, 64), (21, 64), (22, 128)):
        assert ConcurrentHashMap.copy_of([(k, 0) for k in range(m)], long_hash).table_size == n, m
    assert ConcurrentHashMap(string_hash, 1024).size_ctl == 2048
    assert spread(-1) == 0x7FFF0000
    assert spread(0x12345678) == (0x12345678 ^ 0x1234) & 0x7FFFFFFF
    assert [table_size_for(c) for c in (0, 1, 2, 3, 17, 1 << 30)] == [1, 1, 2, 4, 32, 1 << 30]


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    if not shutil.which("javac") or not shutil.which("java"):
        pytest.skip("no JDK on this machine (CI has Java 17)")
    out = tmp_path_factory.mktemp("chm")
    subprocess.run(["javac", "-d", str(out), str(JAVA_DIR / "ChmOrderProbe.java")], check=True, capture_output=True)

    def run(script: str) -> str:
        f = out / "script.txt"
        f.write_text(script)
        return subprocess.run(["java", "-cp", str(out), "ChmOrderProbe", str(f)], check=True, capture_output=True,
                              text=True).stdout
    return run


@pytest.mark.slow
def test_committed_expected_is_what_this_jvm_prints(probe):
    assert probe((JAVA_DIR / "chm_cases.txt").read_text()) == (JAVA_DIR / "chm_expected.txt").read_text()


@pytest.mark.slow
def test_random_histories_match_a_live_jvm(probe):
    script = "".join(random_cases(seed, 12) for seed in range(100, 104))
    want = probe(script)
    got = replay(script)
    assert want.count("\n") > 100
    assert got == want
