"""Broker IndexFile golden vectors: rebuild byte for byte, reproduce every recorded answer."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from helpers import GOLDEN
from engine.broker.index.build import build_index_file
from engine.broker.index.file import IndexFile

SCENARIOS = sorted(p.name for p in (GOLDEN / "indexfile").iterdir() if p.is_dir())


def load(name):
    d = GOLDEN / "indexfile" / name
    params = json.loads((d / "params.json").read_text())
    puts = [json.loads(l) for l in (d / "puts.jsonl").read_text().splitlines() if l.strip()]
    queries = [json.loads(l) for l in (d / "queries.jsonl").read_text().splitlines() if l.strip()]
    tm = [json.loads(l) for l in (d / "time_matched.jsonl").read_text().splitlines() if l.strip()]
    return d, params, puts, queries, tm


def test_scenarios_cover_a_full_file_a_seeded_file_and_a_refused_put():
    """The vectors exercise what the tests below rely on: a file filled to its last item, a file started with
    the previous file's end offset and time (IndexService rolling), and a put the full file refuses."""
    params = {name: load(name)[1] for name in SCENARIOS}
    assert {"a_small", "c_seeded", "d_full"} <= set(params)
    small, seeded, full = params["a_small"], params["c_seeded"], params["d_full"]
    assert small["isWriteFull"] and small["accepted"] == small["putKeyCalls"] == small["indexNum"] - 1
    assert seeded["constructorEndPhyOffset"] > 0 and seeded["constructorEndTimestamp"] > 0
    assert not seeded["isWriteFull"]
    assert full["isWriteFull"] and full["accepted"] == full["indexNum"] - 1 < full["putKeyCalls"]


@pytest.mark.parametrize("name", SCENARIOS)
def test_rebuild_with_put_key_is_byte_identical(name, tmp_path):
    d, p, puts, queries, tm = load(name)
    f = IndexFile.create(tmp_path / "20231114221320000", p["hashSlotNum"], p["indexNum"],
                         p["constructorEndPhyOffset"], p["constructorEndTimestamp"])
    returned = [f.put_key(u["key"], u["phyOffset"], u["storeTimestamp"]) for u in puts]
    assert returned == [u["returned"] for u in puts]
    assert sum(returned) == p["accepted"]
    assert f.is_write_full() == p["isWriteFull"]
    f.flush()
    f.close()
    built = (tmp_path / "20231114221320000").read_bytes()
    assert len(built) == p["fileTotalSize"]
    assert built == (d / "index.bin").read_bytes()


@pytest.mark.parametrize("name", SCENARIOS)
def test_vectorized_builder_is_byte_identical(name, tmp_path):
    d, p, puts, _, _ = load(name)
    acc = [u for u in puts if u["returned"]]
    n = build_index_file(tmp_path / "x", [u["key"] for u in acc], np.array([u["phyOffset"] for u in acc]),
                         np.array([u["storeTimestamp"] for u in acc]), p["hashSlotNum"], p["indexNum"],
                         p["constructorEndPhyOffset"], p["constructorEndTimestamp"])
    assert n == len(acc)
    assert (tmp_path / "x").read_bytes() == (d / "index.bin").read_bytes()


@pytest.mark.parametrize("name", SCENARIOS)
def test_header_values(name):
    d, p, _, _, _ = load(name)
    with IndexFile.open(d / "index.bin", p["hashSlotNum"], p["indexNum"]) as f:
        h = f.header
        assert (h.beginTimestamp, h.endTimestamp, h.endPhyOffset) == (
            p["headerBeginTimestamp"], p["headerEndTimestamp"], p["headerEndPhyOffset"])
        assert h.indexCount - 1 == p["accepted"]


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("which", ["golden", "rebuilt"])
def test_queries_and_time_matched(name, which, tmp_path):
    d, p, puts, queries, tm = load(name)
    path = d / "index.bin"
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    if which == "rebuilt":
        f = IndexFile.create(tmp_path / "f", p["hashSlotNum"], p["indexNum"], p["constructorEndPhyOffset"],
                             p["constructorEndTimestamp"])
        for u in puts:
            f.put_key(u["key"], u["phyOffset"], u["storeTimestamp"])
        f.flush()
        f.close()
        path = tmp_path / "f"
    with IndexFile.open(path, p["hashSlotNum"], p["indexNum"]) as f:
        assert not f.writable
        for q in queries:
            got = f.select_phy_offsets(q["key"], q["maxNum"], q["begin"], q["end"])
            assert got == q["result"], q
        for q in tm:
            assert f.is_time_matched(q["begin"], q["end"]) == q["result"], q
    assert hashlib.sha256((d / "index.bin").read_bytes()).hexdigest() == before


def test_golden_hash_codes_match_java():
    from engine.java.lang import java_string_hash
    for name in SCENARIOS:
        _, _, puts, queries, _ = load(name)
        for u in puts:
            assert java_string_hash(u["key"]) == u["hashCode"]
        for q in queries:
            assert java_string_hash(q["key"]) == q["keyHashCode"]
