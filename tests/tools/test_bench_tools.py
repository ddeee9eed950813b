"""The bench tools the reindex tests and benchmarks rely on: the vectorised store generator
(bench/reindex_store.py) and the kill-point harness (bench/killpoints.py) in its subprocess form."""
from __future__ import annotations

from helpers import REPO
import sys
from pathlib import Path

import pytest

from engine.broker.commitlog.message import BLANK, VALID, check_message, encode_record
from helpers import put_jsonl

sys.path.insert(0, str(REPO / "bench"))
import killpoints  # noqa: E402
import reindex_store  # noqa: E402


def test_generated_segment_equals_encode_record_message_by_message(tmp_path):
    size = 64 * 1024
    path = tmp_path / f"{size:020d}"
    per = reindex_store.gen_segment(path, 1, size)
    data = path.read_bytes()
    assert len(data) == size and per == (size - 8) // reindex_store.MSG_SIZE
    variants = {}
    for j in range(per):
        n = per + j  # segment 1
        pos = j * reindex_store.MSG_SIZE
        c = check_message(data, pos)  # body CRC checked too
        assert c.status == VALID and c.record.physical_offset == size + pos
        body = c.record.body
        variants.setdefault(n % 64, body)
        assert data[pos:pos + c.size] == encode_record(reindex_store.message(n, size + pos, body))
        assert c.record.keys == [f"order-{n:08d}", f"user-{n % 100000:05d}"]
    assert check_message(data, per * reindex_store.MSG_SIZE).status == BLANK
    assert len(set(variants.values())) == min(64, per)


@pytest.mark.slow
def test_killpoints_subprocess_kills_at_the_kth_change(tmp_path):
    store = tmp_path / "store"
    put_jsonl(store, [{"topic": "TopicA", "keys": f"k{i}", "body": "b"} for i in range(20)])
    args = ["spark-reindex", "--store", store, "--hash-slots", "16", "--max-index", "64", "--master", "inline"]
    run = killpoints.run_killed(args, 2)
    assert run.killed and run.kill_point.startswith("2 ") and len(run.calls) == 2
    done = killpoints.run_killed(args, 0)
    assert done.returncode == 0 and not done.killed and len(done.calls) > 2, done.stderr
