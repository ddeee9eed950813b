"""IndexService semantics: which keys, rolling with seeded files, re-dispatch duplicates, query pruning."""
from __future__ import annotations

import pytest

from engine.broker.index.file import IndexFile, time_diff_seconds
from engine.broker.index.service import IndexService
from engine.broker.commitlog.message import TRANSACTION_ROLLBACK_TYPE
from engine.errors import InvalidArgumentError
from helpers import keyed_record as rec


def service(tmp_path, slots=8, items=6, **kw):
    clock = iter(range(1_700_000_000_000, 1_800_000_000_000, 7))
    return IndexService(tmp_path / "index", slots, items, writable=True, clock=lambda: next(clock), **kw)


def test_keys_indexed_per_message():
    r = rec(100, 5, keys="a  b a", uniq="U1")
    assert r.index_keys() == ["T#U1", "T#a", "T#b", "T#a"]  # empty token skipped, no de-duplication
    assert rec(1, 1, keys="a", sys_flag=TRANSACTION_ROLLBACK_TYPE).index_keys() == []


def test_roll_seeds_new_file_and_flushes_full_one(tmp_path):
    flushed = []
    svc = service(tmp_path, on_full_flush=flushed.append)
    t0 = 1_700_000_000_000
    for i in range(4):  # 2 keys each, 5 items per file
        svc.build_index(rec(1000 * (i + 1), t0 + 2500 * i, keys=f"k{i} common"))
    assert len(svc.files) == 2
    first, second = svc.files
    assert first.is_write_full() and first.header.endPhyOffset == 3000
    assert flushed == [first.header.endTimestamp]  # indexMsgTimestamp advances only on a full file's flush
    # The keys of message 3 straddle the roll: "k2" went to file 1, "common" retried in file 2.
    assert second.header.beginPhyOffset == 3000 and second.header.beginTimestamp == t0 + 5000
    # Item 1 of the rolled file: timeDiff against the seed (the previous end time), begin then overwritten.
    ih, off, d, prev = second.item(1)
    assert off == 3000 and d == time_diff_seconds(t0 + 5000, first.header.endTimestamp) == 0
    svc.build_index(rec(9000, t0 + 60_000, keys="late"))
    ih, off, d, prev = second.item(second.header.indexCount - 1)
    assert d == 55  # relative to the file's begin (message 3's time), truncated seconds
    names = [f.path.name for f in svc.files]
    assert names == sorted(names) and len(set(names)) == len(names)
    svc.close()


def test_redispatch_skips_indexed_records_but_repeats_the_last(tmp_path):
    svc = service(tmp_path, items=64)
    for i in range(3):
        svc.build_index(rec(100 * (i + 1), 1000 + i, keys=f"k{i}"))
    f = svc.files[-1]
    count = f.header.indexCount
    assert svc.build_index(rec(100, 1000, keys="k0")) == 0          # offset < endPhyOffset: skipped
    assert svc.build_index(rec(300, 1002, keys="k2")) == 1          # offset == endPhyOffset: indexed again
    assert f.header.indexCount == count + 1
    assert f.select_phy_offsets("T#k2", 64, 0, 2**63 - 1) == [300, 300]
    svc.close()


def test_query_offsets_prunes_by_file_begin_and_clamps(tmp_path):
    svc = service(tmp_path, items=4)  # 3 items per file
    t0 = 1_700_000_000_000
    for i in range(9):
        svc.build_index(rec(10 * (i + 1), t0 + 10_000 * i, keys="k"))
    assert len(svc.files) == 3
    assert svc.query_offsets("T#k", 64, 0, 2**63 - 1) == [90, 80, 70, 60, 50, 40, 30, 20, 10]
    assert svc.query_offsets("T#k", 4, 0, 2**63 - 1) == [90, 80, 70, 60]
    # begin inside file 2: file 3 (newest) searched, then file 2, whose begin < begin stops the walk.
    assert svc.query_offsets("T#k", 64, t0 + 45_000, 2**63 - 1) == [90, 80, 70, 60]
    # Offset 40 is item 1 of the rolled file 2: its timeDiff was taken against the seed (file 1's end,
    # 10 s earlier) but decodes against its own time, so it reads as t0+40 s and the broker misses it (format §5.6).
    assert svc.query_offsets("T#k", 64, t0 + 20_000, t0 + 30_000) == [30]
    # A file that begins before `begin` ends the walk even when an older file still has matching items.
    svc.files[0].header.endTimestamp = t0 + 90_000  # as if file 1 held a late message
    assert svc.query_offsets("T#k", 64, t0 + 45_000, 2**63 - 1) == [90, 80, 70, 60]
    svc.close()


def test_put_key_refuses_read_only(tmp_path):
    f = IndexFile.create(tmp_path / "f", 4, 8)
    f.put_key("a", 1, 1)
    f.flush()
    f.close()
    g = IndexFile.open(tmp_path / "f", 4, 8)
    with pytest.raises(InvalidArgumentError, match="is open read-only"):
        g.put_key("b", 2, 2)
    g.close()


def test_fresh_file_header_before_and_after_flush(tmp_path):
    f = IndexFile.create(tmp_path / "f", 4, 8, end_phy_offset=77, end_timestamp=5000)
    raw = (tmp_path / "f").read_bytes()
    assert int.from_bytes(raw[36:40], "big") == 0  # unused file: 0 at offset 36 until flushed
    assert int.from_bytes(raw[16:24], "big") == 77 and int.from_bytes(raw[0:8], "big") == 5000
    f.flush()
    assert int.from_bytes((tmp_path / "f").read_bytes()[36:40], "big") == 1
    f.close()


def test_time_diff_rules():
    assert time_diff_seconds(5_999, 1_000) == 4
    assert time_diff_seconds(500, 1_000) == 0               # negative clamped to 0
    assert time_diff_seconds(10**15, 0) == 0                 # begin <= 0 -> 0
    assert time_diff_seconds(10**15, 1) == 2**31 - 1         # clamped to INT_MAX
