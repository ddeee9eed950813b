"""The vectorized index builder and bulk hashing: byte-identical to IndexFile.put_key in a loop."""
from __future__ import annotations

import json
import random
import struct

import numpy as np
import pytest

from helpers import GOLDEN
from engine.errors import InvalidArgumentError
from engine.broker.index.build import ITEM_DTYPE, slot_chains, build_index_file, build_index_file_from_hashes
from engine.broker.index.file import IndexFile
from engine.java.hashes import hash_code_units, java_string_hashes
from engine.java.lang import INT_MAX, java_string_hash

SCENARIOS = sorted(p.name for p in (GOLDEN / "indexfile").iterdir() if p.is_dir())
NASTY = ["", "polygenelubricants", "Aa", "BB", "😀", "T#😀x", "\ud800", "é#ß", "x" * 300, "T#k\x00", "\x00"]


def put_key_file(path, keys, phy, ts, slots, items, seed_phy=0, seed_ts=0, flush=False) -> bytes:
    f = IndexFile.create(path, slots, items, seed_phy, seed_ts)
    for k, o, t in zip(keys, phy, ts):
        assert f.put_key(k, int(o), int(t))
    if flush:
        f.flush()
    f.close()
    return path.read_bytes()


def golden(name):
    d = GOLDEN / "indexfile" / name
    p = json.loads((d / "params.json").read_text())
    puts = [json.loads(l) for l in (d / "puts.jsonl").read_text().splitlines() if l.strip()]
    return d, p, [u for u in puts if u["returned"]]


# ---------------------------------------------------------------------------- golden vectors, both paths

@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("form", ["list", "unicode-array", "hashes"])
def test_golden_files_through_every_input_form(name, form, tmp_path):
    d, p, acc = golden(name)
    keys = [u["key"] for u in acc]
    phy = np.array([u["phyOffset"] for u in acc], dtype=np.int64)
    ts = np.array([u["storeTimestamp"] for u in acc], dtype=np.int64)
    args = (p["hashSlotNum"], p["indexNum"], p["constructorEndPhyOffset"], p["constructorEndTimestamp"])
    out = tmp_path / "f"
    if form == "hashes":
        n = build_index_file_from_hashes(out, np.array([u["hashCode"] for u in acc], dtype=np.int32), phy, ts, *args)
    else:
        n = build_index_file(out, keys if form == "list" else np.array(keys), phy, ts, *args)
    assert n == len(acc)
    assert out.read_bytes() == (d / "index.bin").read_bytes()


def test_golden_hash_codes_match_bulk_hashing():
    for name in SCENARIOS:
        _, _, acc = golden(name)
        got = java_string_hashes([u["key"] for u in acc])
        assert got.tolist() == [u["hashCode"] for u in acc]


# ---------------------------------------------------------------------------- bulk hashing

class LazyKeys:
    """A lazily sliced sequence: slices are built on demand (as lists or 'U' arrays)."""

    def __init__(self, keys, as_array):
        self.keys, self.as_array, self.slices = keys, as_array, 0

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, sl):
        self.slices += 1
        part = self.keys[sl]
        return np.array(part, dtype=str) if self.as_array else part


def random_keys(n, seed=1):
    rnd = random.Random(seed)
    alphabet = "aZ09#-_ éß中ключ😀𝄞\u0000\ud800\udfff"
    keys = list(NASTY)
    keys += ["".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 40))) for _ in range(n)]
    return keys


def test_bulk_hash_equals_scalar_for_every_input_form():
    keys = random_keys(3000)
    want = np.array([java_string_hash(k) for k in keys], dtype=np.int32)
    assert np.array_equal(java_string_hashes(keys, chunk=101), want)
    assert np.array_equal(java_string_hashes(iter(keys), chunk=101), want)  # no len(): islice chunks
    lazy = LazyKeys(keys, as_array=False)
    assert np.array_equal(java_string_hashes(lazy, chunk=256), want)
    assert lazy.slices == -(-len(keys) // 256)
    # numpy 'U' arrays cannot keep trailing NULs: compare them on keys without one.
    u_keys = [k for k in keys if not k.endswith("\x00")]
    u_want = np.array([java_string_hash(k) for k in u_keys], dtype=np.int32)
    assert np.array_equal(java_string_hashes(np.array(u_keys), chunk=97), u_want)
    assert np.array_equal(java_string_hashes(LazyKeys(u_keys, as_array=True), chunk=97), u_want)
    assert np.array_equal(java_string_hashes(np.array(u_keys, dtype=object)), u_want)


def test_bulk_hash_check_values():
    got = java_string_hashes(["TopicTest#MessageKey", "TagA", "polygenelubricants", "Tópico#ключ😀", ""])
    assert got.tolist() == [638347386, 2598919, -2147483648, -143114948, 0]
    assert java_string_hashes(np.array(["polygenelubricants", "Tópico#ключ😀"])).tolist() == [-2147483648, -143114948]
    assert java_string_hashes([]).dtype == np.int32 and len(java_string_hashes(np.array([], dtype=str))) == 0


def test_bulk_hash_rejects_non_strings():
    with pytest.raises(TypeError):
        java_string_hashes(np.arange(3))
    with pytest.raises(TypeError):
        java_string_hashes(["a", 3])


def test_hash_code_units_on_bytes_and_long_strings():
    toks = [b"", b"a", b"abc", b"x" * 5000, b"", b"Aa", b"BB"] + [bytes([65 + i % 26]) * (i % 13) for i in range(500)]
    units = np.frombuffer(b"".join(toks), dtype=np.uint8)
    lengths = np.array([len(t) for t in toks])
    got = hash_code_units(units, lengths)
    assert got.tolist() == [java_string_hash(t.decode()) for t in toks]
    same = hash_code_units(np.frombuffer(b"abcabc", dtype=np.uint8), np.array([3, 3]))
    assert same.tolist() == [java_string_hash("abc")] * 2


# ---------------------------------------------------------------------------- builder vs put_key

def _case(n, seed, ts_mode):
    rnd = random.Random(seed)
    keys = random_keys(n, seed)[:n]
    phy = np.array(sorted(rnd.randrange(0, 10**9) for _ in range(n)), dtype=np.int64)
    base = 1_700_000_000_000
    if ts_mode == "increasing":
        ts = base + np.cumsum(np.array([rnd.randrange(0, 2500) for _ in range(n)], dtype=np.int64))
    elif ts_mode == "backwards":  # the clock steps back: negative deltas clamp to 0
        ts = base + np.array([rnd.randrange(-5000, 5000) for _ in range(n)], dtype=np.int64)
    elif ts_mode == "nonpositive-begin":  # beginTimestamp <= 0: every timeDiff is 0
        ts = np.array([0] + [rnd.randrange(-10**6, 10**12) for _ in range(n - 1)], dtype=np.int64)
    else:  # huge gaps: timeDiff saturates at Integer.MAX_VALUE seconds
        ts = np.array([1] + [rnd.choice([2, 10**13, 2**62]) for _ in range(n - 1)], dtype=np.int64)
    return keys, phy, ts


@pytest.mark.parametrize("ts_mode", ["increasing", "backwards", "nonpositive-begin", "saturating"])
@pytest.mark.parametrize("geom", [(1, 50), (7, 120), (16, 64), (4096, 300)])
@pytest.mark.parametrize("seed_values", [(0, 0), (123456, 1_699_999_000_000), (-5, -7)])
def test_builder_equals_put_key_loop(ts_mode, geom, seed_values, tmp_path):
    slots, items = geom
    n = items - 1 if slots != 7 else items // 2  # full files and partly filled ones
    keys, phy, ts = _case(n, hash((ts_mode, geom)) & 0xFFFF, ts_mode)
    want = put_key_file(tmp_path / "a", keys, phy, ts, slots, items, *seed_values)
    got_n = build_index_file(tmp_path / "b", keys, phy, ts, slots, items, *seed_values)
    assert got_n == n
    assert (tmp_path / "b").read_bytes() == want


def test_item_one_of_a_seeded_file_is_relative_to_the_seed(tmp_path):
    # Pitfall 22: item 1's timeDiff uses the seed (previous file's end time), then begin is overwritten.
    seed_ts = 1_700_000_000_000
    ts = np.array([seed_ts + 7300, seed_ts + 8200], dtype=np.int64)
    build_index_file(tmp_path / "f", ["T#a", "T#b"], np.array([10, 20]), ts, 8, 16, 5, seed_ts)
    with IndexFile.open(tmp_path / "f", 8, 16) as f:
        assert f.item(1)[2] == 7 and f.item(2)[2] == 0
        assert f.header.beginTimestamp == seed_ts + 7300 and f.header.beginPhyOffset == 10
    assert (tmp_path / "f").read_bytes() == put_key_file(tmp_path / "g", ["T#a", "T#b"], [10, 20], ts, 8, 16, 5, seed_ts)


def test_min_value_hash_goes_to_slot_zero_with_hash_zero(tmp_path):
    keys = ["polygenelubricants", "a", "polygenelubricants"]
    build_index_file(tmp_path / "f", keys, np.array([1, 2, 3]), np.array([5, 6, 7]), 5, 10)
    with IndexFile.open(tmp_path / "f", 5, 10) as f:
        assert f.item(1)[0] == 0 and f.item(3)[0] == 0 and f.item(3)[3] == 1  # chained behind item 1
        assert f.slot_value(0) == 3
        assert f.select_phy_offsets("polygenelubricants", 10, 0, 10**15) == [3, 1]


def test_empty_file_keeps_the_seeds_and_writes_no_count(tmp_path):
    assert build_index_file(tmp_path / "f", [], np.array([], dtype=np.int64), np.array([], dtype=np.int64),
                            4, 8, 77, 88) == 0
    assert (tmp_path / "f").read_bytes() == put_key_file(tmp_path / "g", [], [], [], 4, 8, 77, 88)
    assert struct.unpack(">qqqqii", (tmp_path / "f").read_bytes()[:40]) == (88, 88, 77, 77, 0, 0)


def test_builder_rejects_bad_input(tmp_path):
    with pytest.raises(InvalidArgumentError, match="do not fit"):
        build_index_file(tmp_path / "f", ["a"] * 8, np.arange(8), np.arange(8), 4, 8)
    with pytest.raises(InvalidArgumentError, match="same length"):
        build_index_file(tmp_path / "f", ["a", "b"], np.arange(3), np.arange(2), 4, 8)
    with pytest.raises(InvalidArgumentError, match="geometry"):
        build_index_file(tmp_path / "f", [], np.arange(0), np.arange(0), 0, 8)
    with pytest.raises(InvalidArgumentError, match="32-bit"):
        build_index_file_from_hashes(tmp_path / "f", np.array([2**31]), np.arange(1), np.arange(1), 4, 8)


def test_java_long_wrap_in_time_diff(tmp_path):
    # Java computes storeTimestamp - beginTimestamp in long arithmetic: it wraps, then is clamped.
    ts = np.array([1, -(2**63)], dtype=np.int64)
    build_index_file(tmp_path / "f", ["a", "b"], np.array([1, 2]), ts, 4, 8)
    with IndexFile.open(tmp_path / "f", 4, 8) as f:
        assert f.item(2)[2] == INT_MAX  # -(2^63) - 1 wraps to 2^63 - 1: huge and positive


def test_slot_chains_against_a_loop():
    rnd = np.random.default_rng(5)
    for slots_n, n in [(1, 10), (3, 1000), (1000, 5000), (70000, 3000)]:
        slots = rnd.integers(0, slots_n, n)
        prev, head_slots, head_items, used = slot_chains(slots)
        heads = np.zeros(slots_n, dtype=np.int32)
        heads[head_slots] = head_items
        last = {}
        want_prev = []
        for i, s in enumerate(slots, 1):
            want_prev.append(last.get(int(s), 0))
            last[int(s)] = i
        assert prev.tolist() == want_prev
        want_heads = np.zeros(slots_n, dtype=np.int32)
        for s, i in last.items():
            want_heads[s] = i
        assert np.array_equal(heads, want_heads) and used == len(last)


def test_a_larger_file_equals_put_key(tmp_path):
    n, slots, items = 20_000, 997, 20_001
    keys = [f"TopicBench#order-{i}" for i in range(n)]
    phy = np.arange(n, dtype=np.int64) * 1021
    ts = 1_700_000_000_000 + np.arange(n, dtype=np.int64) * 37
    want = put_key_file(tmp_path / "a", keys, phy, ts, slots, items)
    build_index_file(tmp_path / "b", np.array(keys), phy, ts, slots, items)
    assert (tmp_path / "b").read_bytes() == want
    items_arr = np.frombuffer(want, dtype=ITEM_DTYPE, count=n, offset=40 + 4 * slots + 20)
    assert items_arr["phy"].tolist() == phy.tolist()
