"""inspect-index --verify on workers a segment per job (issue 32): each job walks one segment with the items that
point into it, and the report is the one the walk in order gives; a segment the walk in order would not enter
at its first record with nothing carried over (damage at its start, the log ending before it, an item between
records) sends the file back to the walk in order. Checked through the CLI, one worker against two."""
from __future__ import annotations

import json

import pytest

from engine.broker.index.file import ITEM_SIZE
from helpers import SEG, SEG_GEOM, cli, item_at, patch, put_store


@pytest.fixture
def store(tmp_path):
    return put_store(tmp_path / "m")


def _verify(store, workers: int) -> tuple[int, list[dict]]:
    r = cli("inspect-index", "-s", str(store), "--verify", "--json", *SEG_GEOM, "--workers", str(workers), code=None)
    return r.exit_code, [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def _names(jobs) -> set[str]:
    return {name for name, _ in jobs}


@pytest.fixture
def in_order(monkeypatch):
    """Where each walk in order of the verification (in this process) started."""
    from engine.broker.index import verify

    starts: list[int] = []
    real = verify.walk

    def spy(cl, start=None, **kw):
        starts.append(start)
        return real(cl, start, **kw)

    monkeypatch.setattr(verify, "walk", spy)
    return starts


def _walked_again(jobs, in_order) -> set[int]:
    """The files (where their walk starts) whose segment jobs were followed by the walk in order (sent back to
    it). A file's first segment job starts where its walk in order would (its first item: i0 = 0 here, no items
    expired)."""
    firsts = {args[5] for name, args in jobs if name == "_segment_job" and args[7] == 0}  # (a, i0: see submit)
    return firsts & set(in_order)


def _same_on_one_and_two(store, jobs, in_order) -> list[dict]:
    code1, one = _verify(store, 1)
    assert not jobs and in_order  # one worker: no job handed out, every file walked in order
    in_order.clear()
    code2, two = _verify(store, 2)
    assert (code1, one) == (code2, two) and len(one) > 2
    return two


def _index_files(store):
    return sorted((store / "index").iterdir())


def test_sound_store_verified_a_segment_per_job(store, jobs, in_order):
    docs = _same_on_one_and_two(store, jobs, in_order)
    assert "_segment_job" in _names(jobs) and not in_order  # no file walked in order
    assert all(d["verify"]["ok"] for d in docs)
    # every segment the files' items point into is one job (a file's first from its first item's record)
    seg_starts = {args[5] - args[5] % SEG for name, args in jobs if name == "_segment_job"}
    assert len(seg_starts) > 5


def test_item_problems_of_every_segment_listed_as_in_order(store, jobs, in_order):
    # Wrong key hashes and times in items that point into several segments: each job lists its own, and the report
    # lists them as the walk in order does (63 items: more than the 50 of one kind).
    f = _index_files(store)[1]
    for n in range(1, 64):  # (a file of 64 items holds 63: item 0 is never written)
        patch(f, item_at(n), (0x7ABCDEF0 + n).to_bytes(4, "big"))            # the key hash
    for n in range(3, 64, 5):
        patch(f, item_at(n) + 12, (999_999).to_bytes(4, "big", signed=True))  # the timeDiff
    docs = _same_on_one_and_two(store, jobs, in_order)
    assert "_segment_job" in _names(jobs) and not in_order  # no file walked in order
    rep = next(d["verify"] for d in docs if d["verify"]["file"] == f.name)
    assert not rep["ok"] and rep["problemCount"] >= 63 and len(rep["findings"]) >= 50
    # (a changed hash also puts the item in the wrong slot's chain: structure findings too)
    items = {(x["offset"] - item_at(0)) // ITEM_SIZE for x in rep["findings"] if x["kind"] == "index-item"}
    assert len(items) >= 40 and items <= set(range(1, 64))
    assert all(d["verify"]["ok"] for d in docs if d["verify"]["file"] != f.name)


def test_damage_at_a_segment_start_sends_the_file_to_the_walk_in_order(store, jobs, in_order):
    # The first record of a segment in the middle of a file's range is torn (its TOTALSIZE): the walk in order
    # resynchronises there with the store time of the segment before, which a job starting there lacks.
    seg = sorted((store / "commitlog").iterdir())[6]
    patch(seg, 0, b"\x7f\xff\xff\xf0")
    docs = _same_on_one_and_two(store, jobs, in_order)
    again = _walked_again(jobs, in_order)
    assert again and min(again) <= 6 * SEG
    assert any(not d["verify"]["ok"] for d in docs)


def test_the_log_ending_before_a_segment_sends_the_file_to_the_walk_in_order(store, jobs, in_order):
    # A segment in the middle is zeroed: the walk in order ends the log there (nothing valid follows... but the
    # later segments hold records: a segment tail) and the items after are judged as the walk in order does.
    segs = sorted((store / "commitlog").iterdir())
    patch(segs[8], 0, bytes(SEG))
    docs = _same_on_one_and_two(store, jobs, in_order)
    assert _walked_again(jobs, in_order)
    assert any(not d["verify"]["ok"] for d in docs)
