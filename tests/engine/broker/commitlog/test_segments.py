"""Issue 10 item 6: commit-log segments out of place. Readers never return a message from the wrong place as good,
report gaps, overlaps, misnamed and wrong-size files by name and read around them; writers refuse."""
from __future__ import annotations

import json
from pathlib import Path
import os

import pytest

from helpers import SMALL, assert_one_line_error, put_jsonl, run, said, snapshot
from engine.broker.commitlog.log import GAP, MISPLACED, CommitLog
from engine.broker.commitlog.segments import DUPLICATE, MISALIGNED, MISNAMED, SYMLINK, WRONG_SIZE, SegmentQueue
from engine.errors import GeometryError

T0 = 1_700_000_000_000
SEG = 4096


class Store(type(__import__("pathlib").Path())):
    acks: list


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "s")
    s.acks = put_jsonl(s, [{"topic": "T", "keys": [f"k{i}"], "body": "x" * 300, "storeTimestamp": T0 + i}
                           for i in range(40)])
    return s


def seg_path(store, n: int):
    return store / "commitlog" / f"{n * SEG:020d}"


def in_segment(acks, n: int) -> list[dict]:
    return [a for a in acks if a["commitLogOffset"] // SEG == n]


def dump(store):
    r = run(["dump-commitlog", "--store", store, "--json"])
    return r, [json.loads(line) for line in r.stdout.splitlines()]


def test_swapped_segments_never_give_the_wrong_message(store):
    acks = store.acks
    a, b = seg_path(store, 1), seg_path(store, 2)
    tmp = a.with_name("tmp")
    a.rename(tmp), b.rename(a), tmp.rename(b)
    before = snapshot(store)
    victim = in_segment(acks, 1)[0]  # a record boundary in both files: the other file's first record is there
    for args in (["--offset", victim["commitLogOffset"]], ["--msg-id", victim["msgId"]]):
        r = run(["get", "--store", store, *args, "--json"])
        assert_one_line_error(r, code=2, contains="misplaced")
        assert r.stdout == ""
    for x in in_segment(acks, 1)[1:] + in_segment(acks, 2):  # elsewhere: not a record boundary, or misplaced
        assert_one_line_error(run(["get", "--store", store, "--offset", x["commitLogOffset"]]), code=2)
    r = run(["get", "--store", store, "--offset", acks[0]["commitLogOffset"], "--offset", victim["commitLogOffset"],
             "--json"])
    assert r.exit_code == 3 and len(r.stdout.splitlines()) == 1   # 3: damage met, not an address that does not exist
    assert [m["commitLogOffset"] for m in said(r, "message-not-found")] == [victim["commitLogOffset"]]
    r, entries = dump(store)
    assert r.exit_code == 3
    misplaced = [e for e in entries if e["type"] == MISPLACED]
    assert {e["segment"] for e in misplaced} == {a.name, b.name}
    good = [e["commitLogOffset"] for e in entries if e["type"] == "MESSAGE"]
    assert good == [x["commitLogOffset"] for x in acks if x["commitLogOffset"] // SEG not in (1, 2)]
    assert snapshot(store) == before  # the readers changed nothing
    # Appending at the end does not make it worse (the last segment is checked before a writer uses it).
    r = run(["put", "--store", store, *SMALL, "--topic", "T", "--body", "x", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["commitLogOffset"] > acks[-1]["commitLogOffset"]


def test_a_misplaced_last_segment_is_refused_by_writers(store):
    last = sorted((store / "commitlog").iterdir())[-1]
    first = store / "commitlog" / ("0" * 20)
    last.write_bytes(first.read_bytes())  # the last file now holds records that say they are at 0..
    before = snapshot(store)
    r = run(["put", "--store", store, *SMALL, "--topic", "T", "--body", "x"])
    assert_one_line_error(r, code=2, contains="misplaced")
    assert snapshot(store) == before


def test_a_missing_middle_segment_is_a_gap_by_name(store):
    acks = store.acks
    seg_path(store, 2).unlink()
    r, entries = dump(store)
    assert r.exit_code == 3
    gaps = [e for e in entries if e["type"] == GAP]
    assert len(gaps) == 1 and gaps[0]["commitLogOffset"] == 2 * SEG and gaps[0]["size"] == SEG
    assert gaps[0]["segment"] == f"{2 * SEG:020d}"
    assert [(Path(w["file"]).name, w["start"]) for w in said(r, "gap")] == [(seg_path(store, 2).name, 2 * SEG)]
    kept = [a["commitLogOffset"] for a in acks if a["commitLogOffset"] // SEG != 2]
    assert [e["commitLogOffset"] for e in entries if e["type"] == "MESSAGE"] == kept
    r = run(["get", "--store", store, "--offset", in_segment(acks, 2)[0]["commitLogOffset"]])
    assert_one_line_error(r, code=2, contains="gap")
    # The broker loads a queue with a hole and appends to its last file; so does put, and readers still say so.
    r = run(["put", "--store", store, *SMALL, "--topic", "T", "--body", "after-the-gap", "--json"])
    assert r.exit_code == 0, r.stderr
    r, entries = dump(store)
    assert r.exit_code == 3 and len([e for e in entries if e["type"] == GAP]) == 1
    assert [e for e in entries if e["type"] == "MESSAGE"][-1]["body"] == "after-the-gap"


def test_a_wrong_size_file_is_read_around_with_a_warning(store):
    acks = store.acks
    p = seg_path(store, 1)
    p.write_bytes(p.read_bytes()[:1500])
    r, entries = dump(store)
    assert r.exit_code == 3 and [(w["file"], w["start"]) for w in said(r, "wrong-size")] == [(str(p), SEG)]
    corrupt = [e for e in entries if e["type"] == "CORRUPT"]
    assert len(corrupt) == 1 and corrupt[0]["segment"] == p.name
    after = [e["commitLogOffset"] for e in entries if e["type"] == "MESSAGE" and e["commitLogOffset"] >= 2 * SEG]
    assert after == [a["commitLogOffset"] for a in acks if a["commitLogOffset"] >= 2 * SEG]
    r = run(["get", "--store", store, "--offset", acks[-1]["commitLogOffset"], "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["uniqKey"] == acks[-1]["uniqKey"]
    assert [w["file"] for w in said(r, "wrong-size")] == [str(p)]   # the reader still warns
    r = run(["put", "--store", store, *SMALL, "--topic", "T", "--body", "x"])
    assert_one_line_error(r, code=2, contains="1500 bytes")


def test_misnamed_and_misaligned_files_are_reported_not_read(store):
    d = store / "commitlog"
    (d / "00000000000000004096.bak").write_bytes(seg_path(store, 1).read_bytes())
    (d / f"{SEG * 40 + 100:020d}").write_bytes(bytes(SEG))
    r, entries = dump(store)
    assert [Path(w["file"]).name for w in said(r, "misnamed")] == ["00000000000000004096.bak"]
    assert [(Path(w["file"]).name, w["start"]) for w in said(r, "misaligned")] == [(f"{SEG * 40 + 100:020d}",
                                                                                   SEG * 40 + 100)]
    assert len([e for e in entries if e["type"] == "MESSAGE"]) == 40
    cl = CommitLog([d], None)
    assert sorted({p.kind for p in cl.problems}) == [MISALIGNED, MISNAMED]
    cl.close()


def test_problems_are_data_for_recovery(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    for d, n in ((a, 0), (b, 1), (a, 2), (b, 2), (a, 5)):
        (d / f"{n * 100:020d}").write_bytes(bytes(100 if n != 5 else 60))
    (a / f"{700:020d}").symlink_to(a / f"{0:020d}")
    q = SegmentQueue([a, b], None, what="commitlog")
    kinds = {(p.kind, p.start) for p in q.problems}
    assert (DUPLICATE, 200) in kinds and (WRONG_SIZE, 500) in kinds and (SYMLINK, None) in kinds
    assert ("gap", 300) in kinds
    assert [s.start for s in q.segments] == [0, 100, 200, 500] and q.file_size == 100
    assert all(set(p.as_dict()) == {"kind", "path", "start", "detail"} for p in q.problems)
    with pytest.raises(GeometryError, match="refusing to write"):
        q.require_writable()
    q.close()
    with pytest.raises(GeometryError, match="do not have the file size 64"):
        SegmentQueue([a, b], 64)


def test_reads_are_bounded_by_the_real_size(tmp_path):
    d = tmp_path / "cl"
    d.mkdir()
    (d / f"{0:020d}").write_bytes(b"\x01" * 100)
    (d / f"{100:020d}").write_bytes(b"\x02" * 40)  # a short last file
    q = SegmentQueue(d, 100)
    last = q.segments[-1]
    assert len(q.buffer(last)) == 40 and q.read(130, 50) == b"\x02" * 10
    assert os.path.getsize(d / f"{100:020d}") == 40  # reading never grows a file
    q.close()
