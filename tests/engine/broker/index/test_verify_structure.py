"""inspect-index --verify's structure check of an index file's items (engine.broker.index.verify.check_structure):
every item with a negative key hash, a prevIndex that is not an older item, a prevIndex to an item of another slot
or a negative timeDiff is reported, by its number, as a plain reading of the items (the oracle below) finds it."""
from __future__ import annotations

import json
import random
import struct

import pytest

from helpers import SEG_GEOM, cli, item_at, put_store

SLOTS = 16  # SEG_GEOM's --hash-slots


@pytest.fixture
def store(tmp_path):
    return put_store(tmp_path / "m")


def _items(data: bytes, n: int) -> list[list[int]]:
    """[hash, phyOffset, timeDiff, prevIndex] of items 1..n."""
    return [list(struct.unpack_from(">iqii", data, item_at(k))) for k in range(1, n + 1)]


def _oracle(items: list[list[int]]) -> list[str]:
    """The per-item problems from the rules as the format states them (format §5.6), listed as the check lists
    them for a file of one chunk: by kind (hashes, prevIndex, slots, timeDiff), each kind in item order."""
    slot = lambda h: h % SLOTS if h >= 0 else 0  # noqa: E731 (a negative hash is damage: counted in slot 0)
    kinds: list[list[str]] = [[], [], [], []]
    for num, (h, _phy, tdiff, prev) in enumerate(items, 1):
        if h < 0:
            kinds[0].append(f"item {num}: negative key hash {h} (the broker stores abs(hash))")
        if prev < 0 or prev >= num:
            kinds[1].append(f"item {num}: prevIndex {prev} does not point at an older item")
        elif prev > 0 and slot(items[prev - 1][0]) != slot(h):
            kinds[2].append(f"item {num}: prevIndex {prev} is an item of another slot")
        if tdiff < 0:
            kinds[3].append(f"item {num}: negative timeDiff {tdiff}")
    return [p for kind in kinds for p in kind]


def _problems(store, name: str, workers: int) -> tuple[list[str], str]:
    """The file's structure problems about items, and the whole report (every file's, in order)."""
    r = cli("inspect-index", "-s", str(store), "--verify", "--json", *SEG_GEOM, "--workers", str(workers), code=None)
    assert r.exit_code == 3, r.stdout
    for line in r.stdout.splitlines():
        doc = json.loads(line)["verify"]
        if doc["file"] == name:
            return [f["problem"] for f in doc["findings"]
                    if f["kind"] == "index-structure" and f["problem"].startswith("item ")], r.stdout
    raise AssertionError(f"no report for {name}")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_item_damage_is_reported_as_the_items_say(store, seed):
    rnd = random.Random(seed)
    path = sorted((store / "index").iterdir())[0]
    data = bytearray(path.read_bytes())
    n = struct.unpack_from(">i", data, 36)[0] - 1  # header indexCount: items 1..count-1
    assert n > 40
    for num in rnd.sample(range(1, n + 1), 12):
        at = item_at(num)
        kind = rnd.choice(["hash", "prev-ahead", "prev-negative", "prev-other", "tdiff"])
        if kind == "hash":
            struct.pack_into(">i", data, at, -rnd.randrange(1, 1 << 31))
        elif kind == "prev-ahead":
            struct.pack_into(">i", data, at + 16, rnd.randrange(num, num + 50))
        elif kind == "prev-negative":
            struct.pack_into(">i", data, at + 16, -rnd.randrange(1, 1 << 31))
        elif kind == "prev-other" and num > 1:
            struct.pack_into(">i", data, at + 16, rnd.randrange(1, num))  # some older item, of any slot
        else:
            struct.pack_into(">i", data, at + 12, -rnd.randrange(1, 1 << 31))
    path.write_bytes(bytes(data))
    want = _oracle(_items(bytes(data), n))
    assert len(want) >= 8
    one, report = _problems(store, path.name, 1)
    two, report2 = _problems(store, path.name, 2)
    assert one == two == want
    # and the items' findings (their keys and times against the log, a segment per job) as on one worker
    assert report2 == report and '"kind": "index-item"' in report
