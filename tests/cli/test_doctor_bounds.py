"""doctor's work is bounded as the broker's start-up is (docs/performance.md): it walks the commit log from the
broker's recovery window, not from the current index file's first item, and says what it walked; --deep walks
it all. Consume-queue files are read up to their last written unit (holes and zero tails skipped), with the same
answers as reading every unit."""
from __future__ import annotations

from helpers import REPO
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.broker.config.brokerconf import CQ_STORE_UNIT_SIZE
from engine.broker.consumequeue.queue import UNIT, UNIT_DTYPE, ConsumeQueue, last_nonzero_end
from engine.ops.recovery.scan import read_queue
from helpers import cfg_for, put_jsonl, run

# 4 KiB segments, one index file big enough for every key: recover checks that file's items from its first.
GEOM = ["--hash-slots", "16", "--max-index", "4096", "--commitlog-file-size", "4096", "--cq-file-size", "2000"]


def doctor_doc(store: Path, *extra: str) -> dict:
    r = run(["doctor", "-s", store, *GEOM, "--json", *extra])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_doctor_walks_the_brokers_window_not_the_whole_index_span(tmp_path):
    store = tmp_path / "s"
    put_jsonl(store, [{"topic": "TopicA", "keys": f"k{i}", "body": "x" * 300} for i in range(120)], GEOM)
    segs = sorted(int(p.name) for p in (store / "commitlog").iterdir())
    assert len(segs) >= 8 and len(list((store / "index").iterdir())) == 1
    plan = json.loads(run(["recover", "-s", store, *GEOM, "--dry-run", "--json"]).stdout)
    assert plan["scanStartOffset"] == 0  # recover checks the current index file from its first item
    doc = doctor_doc(store)
    read = doc["summary"]["read"]
    assert doc["healthy"] and read["brokerWindow"] is True
    assert read["commitLogFrom"] >= segs[-3] > 0  # at most the last three segments (a clean stop)
    assert read["commitLogTo"] == plan["maxOffsetAfter"]
    assert read["commitLogBytes"] == read["commitLogTo"] - read["commitLogFrom"]
    deep = doctor_doc(store, "--deep")["summary"]["read"]
    assert deep["commitLogFrom"] == 0 and deep["brokerWindow"] is False and deep["records"] == 120


def test_doctor_still_finds_damage_in_its_window(tmp_path):
    store = tmp_path / "s"
    put_jsonl(store, [{"topic": "TopicA", "keys": f"k{i}", "body": "x" * 300} for i in range(120)], GEOM)
    last = sorted((store / "commitlog").iterdir())[-1]
    with open(last, "r+b") as f:  # the body of the last segment's first record
        f.seek(200)
        f.write(b"\xff" * 8)
    r = run(["doctor", "-s", store, *GEOM, "--json"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 3 and "commitlog-damaged-record" in {f["kind"] for f in doc["findings"]}


def _queue_file(tmp_path: Path, size: int, units: dict[int, tuple[int, int, int]], allocate: bool) -> Path:
    d = tmp_path / "consumequeue" / "T" / "0"
    d.mkdir(parents=True)
    p = d / f"{0:020d}"
    with open(p, "wb") as f:
        if allocate:
            f.write(bytes(size))  # every byte allocated, zeros after the units (a warmed or copied file)
        else:
            f.truncate(size)      # sparse past what is written, as the broker's files
        for i, u in units.items():
            f.seek(i * CQ_STORE_UNIT_SIZE)
            f.write(UNIT.pack(*u))
    return p


@pytest.mark.parametrize("allocate", [False, True])
def test_queue_reads_stop_at_the_last_written_unit(tmp_path, allocate):
    size = 300_000 * CQ_STORE_UNIT_SIZE // 100  # 3,000 units
    units = {i: (1000 + 100 * i, 100, 7) for i in range(50)}
    units[40] = (0, 0, 0)              # a hole in the units: the valid prefix ends there
    units[2500] = (9_999, 100, 7)      # a stale unit far after them, past a hole of the sparse file
    p = _queue_file(tmp_path, size, units, allocate)
    cq = ConsumeQueue(tmp_path, "T", 0, size)
    try:
        seg = cq.queue.segments[0]
        assert cq.written_units(seg) == 2501
        whole = np.frombuffer(p.read_bytes(), dtype=UNIT_DTYPE)
        bad = np.flatnonzero((whole["offset"] < 0) | (whole["size"] <= 0))
        assert cq.max_offset_in_queue == int(bad[0]) == 40
    finally:
        cq.close()

    class Cfg:  # what read_queue takes from the broker config
        cq_file_size = size

    qs = read_queue(tmp_path, Cfg, "T", 0)
    nz = np.flatnonzero(whole.view(np.uint8).reshape(len(whole), -1).any(axis=1))
    assert qs.files == [(p.name, 0, (int(nz[-1]) + 1) * CQ_STORE_UNIT_SIZE)]
    assert qs.stale == int(np.count_nonzero(nz >= 40)) == 10  # units 41-49 and 2500
    assert qs.max_phys == 1000 + 100 * 39 + 100


def test_last_nonzero_end_skips_holes_and_zero_tails(tmp_path):
    import mmap

    p = tmp_path / "f"
    with open(p, "wb") as f:
        f.truncate(5 << 20)
        f.seek(3 << 20)
        f.write(b"\x00\x01\x00")
    fd = os.open(p, os.O_RDONLY)
    try:
        m = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        assert last_nonzero_end(m, fd) == (3 << 20) + 2
        m.close()
    finally:
        os.close(fd)


@pytest.mark.slow
def test_bench_doctor_small(tmp_path):
    """The benchmark's CI-sized run: both stores healthy, doctor's walk the same at both sizes."""
    r = subprocess.run([sys.executable, str(REPO / "bench" / "bench_doctor.py"), "--small", "--runs", "1",
                        "--workdir", str(tmp_path)], capture_output=True, text=True, cwd=REPO, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [line for line in r.stdout.splitlines() if line.startswith("| 0.")]
    assert len(rows) == 2
    walked = [float(row.split(" | ")[8].split()[0].replace(",", "")) for row in rows]  # "N MiB from OFFSET"
    assert max(walked) <= 3 * 16  # at most the broker's three 16 MiB segments, at 48 and at 192 MiB of log
    assert "doctor: worst" in r.stdout.splitlines()[-1]
