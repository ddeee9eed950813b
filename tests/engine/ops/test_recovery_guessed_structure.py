"""Recovery walks the log while the index files' structure checks run, on facts read from the items' ends
(engine.ops.recovery.trust: quick_structure), among them that the items are in log order, so that where the walk
starts inside a file is found by bisection (ItemJoin); a check that finds otherwise makes the walk run again with
the verdicts. The plan is then the one made with every check done before the walk, nothing of the first walk
left in it."""
from __future__ import annotations

import json
import struct

import pytest

from helpers import SEG_GEOM, cli, item_at, put_store


@pytest.fixture
def store(tmp_path):
    return put_store(tmp_path / "m")


def _plan(store) -> tuple[int, dict]:
    r = cli("recover", "-s", str(store), "--dry-run", "--json", *SEG_GEOM, code=None)
    doc = json.loads(r.stdout)

    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if "second" not in k.lower() and k not in ("elapsed", "timings")}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x
    return r.exit_code, strip(doc)


@pytest.mark.parametrize("damage", ["none", "items-go-down"])
def test_the_walk_beside_the_checks_plans_as_with_the_checks_first(store, monkeypatch, damage):
    from engine.ops.recovery import trust

    # Segments expired by clean: the newest index file has items below the log's first segment, so the walk
    # starts inside it (those items are taken on trust: how many, ItemJoin.good, is found by bisection).
    assert json.loads(cli("clean", "--store", str(store), "--force-now", "--json", *SEG_GEOM).stdout)["commitLog"]
    f = sorted((store / "index").iterdir())[-1]
    if damage == "items-go-down":
        data = bytearray(f.read_bytes())
        a, b = item_at(6) + 4, item_at(7) + 4  # items 6 and 7's phyOffset
        pa, pb = struct.unpack_from(">q", data, a)[0], struct.unpack_from(">q", data, b)[0]
        assert pa < pb
        struct.pack_into(">q", data, a, pb)
        struct.pack_into(">q", data, b, pa)
        f.write_bytes(bytes(data))
    joins = []
    real = trust.ItemJoin.__init__

    def spy(self, x, lo, keys_from=0):
        real(self, x, lo, keys_from)
        joins.append((x.name, self.good, x.count, x.structure.monotone))

    monkeypatch.setattr(trust.ItemJoin, "__init__", spy)
    beside = _plan(store)
    assert any(name == f.name and 0 < good < count for name, good, count, _ in joins), joins
    joins.clear()
    monkeypatch.setattr(trust, "quick_structure", lambda f: None)  # every check done before the walk
    first = _plan(store)
    assert beside == first  # (the walk done again left the first walk's prefixEndReason behind: fixed)
    if damage == "items-go-down":
        assert joins == [] or any(not monotone for *_, monotone in joins)
        assert f.name in json.dumps(first[1]["index"])  # the file is judged (not kept as it is)
