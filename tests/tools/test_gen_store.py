"""bench/gen_store.py writes what `rmqtool put` writes: a small generated store against put of the same messages."""
from __future__ import annotations

from helpers import REPO
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from engine.broker.config.checkpoint import Checkpoint
from helpers import data_bytes, run



def gen_module():
    spec = importlib.util.spec_from_file_location("gen_store", REPO / "bench" / "gen_store.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gen_store"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_generated_store_is_byte_identical_to_put(tmp_path):
    g = gen_module()
    spec = g.GenSpec(messages=700, body_size=120, topics=3, queues_per_topic=2, keys_per_message=2,
                     commitlog_file_size=32768, cq_file_size=2000, hash_slots=64, max_index=256)
    res = g.gen_store(tmp_path / "gen", spec)
    assert res.messages == 700 and res.segments > 2 and len(res.index_files) > 3
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(g.message_json(spec, i)) + "\n" for i in range(700)))
    geom = ["--commitlog-file-size", "32768", "--cq-file-size", "2000", "--hash-slots", "64", "--max-index", "256"]
    r = run(["put", "--store", tmp_path / "put", "--from-jsonl", inp, "--json", *geom])
    assert r.exit_code == 0, r.stderr
    acks = [json.loads(line) for line in r.stdout.splitlines()]
    assert acks[-1]["commitLogOffset"] == (699 // ((32768 - 8) // res.record_size)) * 32768 + \
        (699 % ((32768 - 8) // res.record_size)) * res.record_size
    a, b = data_bytes(tmp_path / "gen"), data_bytes(tmp_path / "put")
    assert sorted(a) == sorted(b)
    assert [k for k in a if a[k] != b[k]] == []
    assert Checkpoint.load(tmp_path / "gen" / "checkpoint") == Checkpoint.load(tmp_path / "put" / "checkpoint")
    r = run(["inspect-index", "--store", tmp_path / "gen", "--verify", *geom[:2], *geom[4:]])
    assert r.exit_code == 0, r.stdout
