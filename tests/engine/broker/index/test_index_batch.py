"""IndexService.build_index_batch against per-record build_index: same files, bytes, names, rolls and
on_full_flush calls, on random streams with rolls, the strict endPhyOffset rule (pitfall 23), keyless and
skipped records, Integer.MIN_VALUE hashes and damaged slot values."""
from __future__ import annotations

import random

import numpy as np
import pytest

from engine.broker.index.service import IndexService
from engine.errors import InvalidArgumentError
from engine.java.lang import java_string_hash

POOL = ["T#a", "T#b", "T#Aa", "T#BB", "polygenelubricants", "T#k1", "T#k2", "T#😀", "T#long-key-" + "x" * 40]
assert java_string_hash("polygenelubricants") == -2**31  # abs() keeps it negative: the broker uses 0


class Rec:
    """What build_index reads from a decoded record."""

    def __init__(self, off, ts, keys):
        self.physical_offset, self.store_timestamp, self._keys = off, ts, keys

    def index_keys(self):
        return self._keys


def service(path, slots, items, flushed):
    clock = iter(range(1_700_000_000_000, 1_800_000_000_000, 7))
    return IndexService(path, slots, items, writable=True, on_full_flush=flushed.append, clock=lambda: next(clock))


def random_stream(rng: random.Random, n: int, start_off: int = 0, start_ts: int = 1_700_000_000_000):
    recs, off, ts = [], start_off, start_ts
    for _ in range(n):
        r = rng.random()
        if r < 0.1:
            off = max(off - rng.randrange(0, 400), 0)   # re-dispatched: below (skipped) or equal (indexed again)
        elif r < 0.15:
            pass                                         # the same offset again
        else:
            off += rng.randrange(1, 300)
        ts += rng.choice([0, 1, 999, 1000, 1001, 5000, -3000, 60_000])
        recs.append(Rec(off, ts, [rng.choice(POOL) for _ in range(rng.choice([0, 0, 1, 2, 2, 3, 5]))]))
    return recs


def arrays(recs):
    keys = [k for r in recs for k in r.index_keys()]
    return (np.array([r.physical_offset for r in recs], dtype=np.int64),
            np.array([r.store_timestamp for r in recs], dtype=np.int64),
            np.array([len(r.index_keys()) for r in recs], dtype=np.int32),
            np.array([java_string_hash(k) for k in keys], dtype=np.int32))


def files_of(d):
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def run_both(tmp_path, recs, slots, items, cuts, prefix=(), reopen=False):
    """Per-record build_index in one directory, build_index_batch over the pieces `cuts` makes of recs in the
    other; `prefix` is indexed record by record in both first (and both reopened if `reopen`)."""
    flushed = {"loop": [], "batch": []}
    svcs = {w: service(tmp_path / w, slots, items, flushed[w]) for w in flushed}
    for w, svc in svcs.items():
        for r in prefix:
            svc.build_index(r)
        if reopen:
            svc.close()
            clock_state = svc.clock
            svcs[w] = svc = IndexService(tmp_path / w, slots, items, writable=True,
                                         on_full_flush=flushed[w].append, clock=clock_state)
    for r in recs:
        svcs["loop"].build_index(r)
    bounds = [0, *sorted(cuts), len(recs)]
    for a, b in zip(bounds, bounds[1:]):
        svcs["batch"].build_index_batch(*arrays(recs[a:b]))
    headers = {w: [(f.path.name, f.header) for f in svc.files] for w, svc in svcs.items()}
    for svc in svcs.values():
        svc.close()
    return files_of(tmp_path / "loop"), files_of(tmp_path / "batch"), flushed, headers


@pytest.mark.parametrize("seed", range(40))
def test_batch_equals_per_record_on_random_streams(tmp_path, seed):
    rng = random.Random(seed)
    slots, items = rng.choice([1, 2, 5, 16]), rng.choice([2, 3, 5, 8, 30])
    recs = random_stream(rng, rng.randrange(1, 60))
    cuts = rng.sample(range(1, len(recs)), min(rng.randrange(0, 4), len(recs) - 1)) if len(recs) > 1 else []
    prefix = random_stream(rng, rng.randrange(0, 6), start_off=0, start_ts=1_600_000_000_000)
    loop, batch, flushed, headers = run_both(tmp_path, recs, slots, items, cuts, prefix, reopen=seed % 2 == 0)
    assert list(loop) == list(batch)  # the same files, named by the same clock calls
    for name in loop:
        assert loop[name] == batch[name], name
    assert flushed["loop"] == flushed["batch"]
    assert headers["loop"] == headers["batch"]


def test_a_file_filled_by_the_last_record_rolls_only_when_another_record_comes(tmp_path):
    two = [Rec(100, 1_000_000, ["T#a", "T#b"]), Rec(200, 1_002_000, ["T#a"])]  # 3 items: file of 4 is full
    keyless = [Rec(300, 1_003_000, [])]
    loop, batch, flushed, _ = run_both(tmp_path, two, 4, 4, [])
    assert loop == batch and len(loop) == 1 and flushed["loop"] == flushed["batch"] == []
    loop, batch, flushed, _ = run_both(tmp_path / "next", two + keyless, 4, 4, [2])
    assert loop == batch and len(loop) == 2  # the keyless record rolled the full file, as buildIndex does
    assert flushed["loop"] == flushed["batch"] == [1_002_000]


def test_already_indexed_records_are_skipped_but_the_last_one_repeats(tmp_path):
    first = [Rec(100, 1_000_000, ["T#a"]), Rec(200, 1_001_000, ["T#b"])]
    again = [Rec(100, 1_000_000, ["T#a"]), Rec(200, 1_001_000, ["T#b"]), Rec(250, 1_002_000, ["T#c"])]
    loop, batch, _, headers = run_both(tmp_path, again, 16, 64, [], prefix=first, reopen=True)
    assert loop == batch
    (_, h), = headers["batch"]
    assert h.indexCount - 1 == 4  # a, b, then b (offset == endPhyOffset) and c; a (100 < 200) is skipped


def test_damaged_slot_values_are_followed_as_put_hash_follows_them(tmp_path):
    """A slot value beyond indexCount is ignored by put_hash until the file grows past it."""
    base = [Rec(10 * i, 1_000_000 + i, [f"T#k{i % 3}"]) for i in range(1, 4)]
    more = [Rec(100 + 10 * i, 2_000_000 + i, [POOL[i % len(POOL)]]) for i in range(40)]
    dirs = {}
    for w in ("loop", "batch"):
        svc = service(tmp_path / w, 4, 64, [])
        for r in base:
            svc.build_index(r)
        mm = svc.files[-1]._mm
        for s in range(4):
            mm[40 + 4 * s:44 + 4 * s] = (7 + 3 * s).to_bytes(4, "big")  # heads past indexCount (4)
        if w == "loop":
            for r in more:
                svc.build_index(r)
        else:
            svc.build_index_batch(*arrays(more))
        svc.close()
        dirs[w] = files_of(tmp_path / w)
    assert dirs["loop"] == dirs["batch"]


def test_batch_input_checks(tmp_path):
    svc = service(tmp_path / "i", 4, 8, [])
    ok = (np.array([1]), np.array([5]), np.array([1], dtype=np.int32), np.array([7], dtype=np.int32))
    with pytest.raises(InvalidArgumentError, match="add up"):
        svc.build_index_batch(ok[0], ok[1], np.array([2], dtype=np.int32), ok[3])
    with pytest.raises(InvalidArgumentError, match="one length"):
        svc.build_index_batch(np.array([1, 2]), ok[1], ok[2], ok[3])
    with pytest.raises(InvalidArgumentError, match="negative"):
        svc.build_index_batch(np.array([-1]), *ok[1:])
    assert not (tmp_path / "i").exists()  # nothing was created by a refused batch
    svc.build_index_batch(np.array([], dtype=np.int64), np.array([], dtype=np.int64), np.array([], dtype=np.int32),
                          np.array([], dtype=np.int32))
    assert not (tmp_path / "i").exists()  # an empty batch calls buildIndex for no record: no file either
    svc.build_index_batch(*ok)
    assert len(svc.files) == 1 and svc.files[0].item(1)[1] == 1
    svc.close()
