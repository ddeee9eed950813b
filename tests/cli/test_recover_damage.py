"""recover on damaged stores (issue 10 items 4 and 5): valid records after damage are kept and findable, the
damaged bytes are quarantined, damaged older index files are rebuilt, the broker's own recovery scan would walk
the repaired log to its end, and nothing is removed without a copy unless --force says so."""
from __future__ import annotations

from helpers import REPO
import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from engine.broker.config.checkpoint import Checkpoint
from engine.broker.layout import list_index_files
from engine.broker.commitlog.message import BLANK, VALID, check_message
from helpers import (SEG, SEG_GEOM, assert_all_found, cfg_for, cli, found, patch, put, recover_json, sample_messages,
                     said, seg_file, spy, verify_ok)


def broker_scan_end(store: Path) -> tuple[int, int]:
    """The broker's recovery scan (format §7.2) from the first segment, with CRCs: (records, end offset)."""
    segs = sorted((store / "commitlog").iterdir())
    records, end = 0, 0
    for i, p in enumerate(segs):
        data = p.read_bytes()
        pos = 0
        while True:
            r = check_message(data, pos, len(data), check_crc=True)
            if r.status == VALID:
                records += 1
                pos += r.size
                continue
            break
        end = int(p.name) + pos
        if r.status != BLANK:
            return records, end  # the broker stops and truncates here
    return records, end


def build(tmp_path: Path, n: int = 90) -> tuple[Path, list[dict], list[dict]]:
    store = tmp_path / "s"
    sent = sample_messages(n)
    return store, put(store, sent, tmp_path), sent


def keys_found_except(store, acks, sent, lost: set[int]) -> None:
    keep = [i for i in range(len(acks)) if i not in lost]
    assert_all_found(store, [acks[i] for i in keep], [sent[i] for i in keep])


def test_zeroed_page_in_the_last_segment_keeps_the_records_after_it(tmp_path):
    store, acks, sent = build(tmp_path)
    last_seg = acks[-1]["commitLogOffset"] // SEG
    in_last = [i for i, a in enumerate(acks) if a["commitLogOffset"] // SEG == last_seg]
    victim = in_last[1]
    p, pos = seg_file(store, acks[victim]["commitLogOffset"])
    patch(p, pos, bytes(acks[victim]["storeSize"]))  # a page that never reached the disk
    (store / "abort").write_text("1")
    d = recover_json(store)
    assert [(x["offset"], x["repair"]) for x in d["skipped"]] == [(acks[victim]["commitLogOffset"], "placeholder")]
    assert d["maxOffsetAfter"] == acks[-1]["commitLogOffset"] + acks[-1]["storeSize"]
    assert broker_scan_end(store) == (len(acks), d["maxOffsetAfter"])
    verify_ok(store)
    keys_found_except(store, acks, sent, {victim})
    assert found(store, sent[victim]["topic"], sent[victim]["keys"][0]) == []
    # The consume queue keeps its positions: later messages have their own queue offsets still.
    r = cli("get", "--store", str(store), "--offset", str(acks[victim + 3]["commitLogOffset"]), "--json", *SEG_GEOM[:2])
    assert json.loads(r.stdout)["queueOffset"] == acks[victim + 3]["queueOffset"]


def test_zeroed_tail_of_an_older_segment_gets_a_blank_filler(tmp_path):
    store, acks, sent = build(tmp_path)
    segs = sorted((store / "commitlog").iterdir())
    older = segs[1]
    lost = [i for i, a in enumerate(acks) if a["commitLogOffset"] // SEG == int(older.name) // SEG][-2:]
    lo = acks[lost[0]]["commitLogOffset"] % SEG
    patch(older, lo, bytes(SEG - lo))
    d = recover_json(store, "--full-scan")
    # one placeholder per lost message, at its own offset (issue 34 item 4), then the filler
    *ph, rep = d["skipped"]
    assert [(r["repair"], r["offset"], r["placeholderFor"]["queueOffset"]) for r in ph] == [
        ("placeholder", acks[i]["commitLogOffset"], acks[i]["queueOffset"]) for i in lost]
    assert rep["repair"] == "blank" and rep["offset"] == acks[lost[-1]]["commitLogOffset"] + acks[lost[-1]]["storeSize"]
    assert d["maxOffsetAfter"] == acks[-1]["commitLogOffset"] + acks[-1]["storeSize"]
    records, end = broker_scan_end(store)
    assert end == d["maxOffsetAfter"] and records == len(acks)  # the placeholders are records
    verify_ok(store)
    keys_found_except(store, acks, sent, set(lost))


def test_swapped_segments_are_renamed_back(tmp_path):
    store, acks, sent = build(tmp_path)
    segs = sorted((store / "commitlog").iterdir())
    a, b = segs[1], segs[2]
    tmp = a.with_name("x")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)
    d = recover_json(store)
    assert sorted((x["from"], x["to"]) for x in d["commitLog"]["segmentRenames"]) == \
        sorted([(a.name, b.name), (b.name, a.name)])
    assert d["skipped"] == [] and d["truncatedRecords"] == 0
    assert broker_scan_end(store) == (len(acks), acks[-1]["commitLogOffset"] + acks[-1]["storeSize"])
    verify_ok(store)
    keys_found_except(store, acks, sent, set())


def older_index(store: Path, i: int = 1) -> Path:
    files = list_index_files(store / "index")
    assert len(files) >= 4
    return files[i]


@pytest.mark.parametrize("damage", ["end-timestamp", "end-offset", "zero-filled", "missing", "renamed"])
def test_damaged_older_index_files_are_rebuilt(tmp_path, damage):
    """Issue 10 item 5: damage in an older, full, flushed index file is noticed, not only in the last one."""
    store, acks, sent = build(tmp_path)
    f = older_index(store)
    if damage == "end-timestamp":
        patch(f, 8, struct.pack(">q", struct.unpack(">q", f.read_bytes()[8:16])[0] + 5000))
    elif damage == "end-offset":
        patch(f, 24, struct.pack(">q", struct.unpack(">q", f.read_bytes()[24:32])[0] - 1))
    elif damage == "zero-filled":
        f.write_bytes(bytes(f.stat().st_size))
    elif damage == "missing":
        f.unlink()
    else:  # the first two files swap names: the sequence is out of order
        first = list_index_files(store / "index")[0]
        tmp = f.with_name("x")
        first.rename(tmp)
        f.rename(first)
        tmp.rename(f)
    before = cli("inspect-index", "--store", str(store), "--verify", *SEG_GEOM, code=None)
    d = recover_json(store)
    assert not d["consistent"] and (d["index"]["rebuilt"] or d["index"]["created"])
    assert d["index"]["problems"], d["index"]
    verify_ok(store)
    keys_found_except(store, acks, sent, set())
    assert recover_json(store)["consistent"]
    if damage not in ("missing", "renamed"):  # each file on its own is fine then; their sequence is not
        assert before.exit_code == 3  # verify saw it too


def test_refuses_without_room_for_the_quarantine_and_force_goes_ahead(tmp_path, monkeypatch):
    import engine.ops.footprint.quarantine as quarantine

    store, acks, sent = build(tmp_path)
    p, pos = seg_file(store, acks[-3]["commitLogOffset"])
    patch(p, pos + 90, b"\xff\xfe")  # a damaged body near the end
    (store / "abort").write_text("1")
    before = {q: q.read_bytes() for q in store.rglob("*") if q.is_file()}
    real = shutil.disk_usage

    def full(path):
        u = real(path)
        return type(u)(u.total, u.total, 0)

    monkeypatch.setattr(quarantine.shutil, "disk_usage", full)
    r = cli("recover", "--store", str(store), *SEG_GEOM, code=2)
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "--force" in err[0] and "overwrite" in err[0]
    assert {q: q.read_bytes() for q in store.rglob("*") if q.is_file()} == before
    d = recover_json(store, "--force")
    assert d["force"] and d["skipped"] and d["maxOffsetAfter"] == acks[-1]["commitLogOffset"] + acks[-1]["storeSize"]
    manifest = json.loads((store / d["quarantineDir"] / "manifest.json").read_text())
    assert any(e["how"] == "not kept" for e in manifest["entries"])
    verify_ok(store)
    keys_found_except(store, acks, sent, {len(acks) - 3})


def test_truncated_tail_is_quarantined(tmp_path):
    store, acks, sent = build(tmp_path)
    last = acks[-1]
    p, pos = seg_file(store, last["commitLogOffset"])
    patch(p, pos + 30, b"\x00" * 20)  # torn
    tail = p.read_bytes()[pos:pos + last["storeSize"]]
    (store / "abort").write_text("1")
    d = recover_json(store)
    assert d["maxOffsetAfter"] == last["commitLogOffset"] and d["truncatedRecords"] == 1
    qdir = store / d["quarantineDir"]
    manifest = json.loads((qdir / "manifest.json").read_text())
    (e,) = [e for e in manifest["entries"] if e["path"] == f"commitlog/{p.name}"]
    assert e["offset"] == pos and (qdir / e["stored"]).read_bytes() == tail[:e["length"]]
    assert any(p.read_bytes()[pos:pos + e["length"]]) is False  # zeroed in the store
    # The old index file and checkpoint are kept too.
    kinds = {x["path"].split("/")[0] for x in manifest["entries"]}
    assert {"commitlog", "index", "checkpoint"} <= kinds


def test_verify_reports_expired_items_as_expired(tmp_path):
    store, acks, sent = build(tmp_path)
    r = cli("clean", "--store", str(store), "--force-now", "--json", *SEG_GEOM)
    assert json.loads(r.stdout)["commitLog"]["deleted"]
    r = cli("inspect-index", "--store", str(store), "--verify", "--json", *SEG_GEOM, code=0)
    reps = [json.loads(line)["verify"] for line in r.stdout.splitlines()]
    assert sum(x["expiredItems"] for x in reps) > 0 and all(x["ok"] for x in reps)


def test_verify_reports_a_zero_filled_index_file(tmp_path):
    store, acks, sent = build(tmp_path)
    f = older_index(store)
    f.write_bytes(bytes(f.stat().st_size))
    r = cli("inspect-index", "--store", str(store), "--verify", "--json", *SEG_GEOM, code=3)
    rep = [json.loads(line)["verify"] for line in r.stdout.splitlines()][1]
    assert rep["zeroFilled"] and not rep["ok"] and "zero-filled" in rep["findings"][0]["problem"]
    assert {k: rep["findings"][0][k] for k in ("kind", "severity", "file", "offset")} == {
        "kind": "index-structure", "severity": "error", "file": f"index/{f.name}", "offset": None}


def test_verify_next_to_a_live_writer_counts_in_flight_items(tmp_path, locked_store):
    """A writer that has written an item and its slot head but not yet the header count (IndexFile.putKey
    order): with the store locked by that writer verify counts it in flight; without the lock it is a problem."""
    store, acks, sent = build(tmp_path)
    f = list_index_files(store / "index")[-1]
    data = f.read_bytes()
    count = struct.unpack(">i", data[36:40])[0]
    slots = 16
    # The writer's next item (number `count`) in slot 3, and slot 3's head pointing at it.
    item = struct.pack(">iqii", 3, acks[-1]["commitLogOffset"], 0, struct.unpack(">i", data[40 + 12:44 + 12])[0])
    patch(f, 40 + 4 * slots + 20 * count, item)
    patch(f, 40 + 4 * 3, struct.pack(">i", count))
    r = cli("inspect-index", "--store", str(store), "--verify", "--json", *SEG_GEOM, code=3)
    key = ["query-key", "--store", str(store), "--topic", sent[-1]["topic"], "--key", sent[-1]["keys"][0], *SEG_GEOM,
           "--json"]
    unlocked = cli(*key, code=None)
    (partial,) = said(unlocked, "partial-answer")   # the newest file is damaged, and said so
    assert [d["file"] for d in partial["damagedIndexFiles"]] == [f.name]
    locked_store(store)
    r = cli("inspect-index", "--store", str(store), "--verify", "--json", *SEG_GEOM, code=0)
    rep = [json.loads(line)["verify"] for line in r.stdout.splitlines()][-1]
    assert rep["liveWriter"] and rep["inFlight"] >= 1 and rep["ok"]
    # query-key asks whether a writer holds the lock only when it meets such an item: in flight, not damage
    locked = cli(*key, code=0)
    assert said(locked, "partial-answer") == []


@pytest.fixture
def locked_store():
    import subprocess
    import sys

    procs = []
    repo = REPO

    def lock(store: Path):
        code = ("import sys, time\nfrom engine.broker.config.lock import StoreLock\nStoreLock(sys.argv[1]).acquire()\n"
                "print('locked', flush=True)\ntime.sleep(60)\n")
        p = subprocess.Popen([sys.executable, "-c", code, str(store)], cwd=repo, stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "locked"
        procs.append(p)

    yield lock
    for p in procs:
        p.kill()
        p.wait()


def test_checkpoint_after_damage_repair_lets_put_continue(tmp_path):
    store, acks, sent = build(tmp_path)
    p, pos = seg_file(store, acks[40]["commitLogOffset"])
    patch(p, pos + 95, b"\x01")
    d = recover_json(store, "--full-scan")
    assert d["skipped"]
    more = put(store, sample_messages(5, start=500), tmp_path)
    assert more[0]["commitLogOffset"] == acks[-1]["commitLogOffset"] + acks[-1]["storeSize"]
    verify_ok(store)
    cp = Checkpoint.load(store / "checkpoint")
    assert cp.confirmPhyOffset == more[-1]["commitLogOffset"]
    assert os.path.isdir(store / "quarantine")


def test_a_rename_interrupted_by_a_crash_is_finished(tmp_path):
    """recover renames swapped segments through temporary names; a crash in between leaves one of them under its
    temporary name, invisible to every reader: the next recover finds it and finishes the job."""
    store, acks, sent = build(tmp_path)
    segs = sorted((store / "commitlog").iterdir())
    segs[1].rename(segs[1].with_name(segs[1].name + ".rmqtool-rename"))
    (store / "abort").write_text("1")
    d = recover_json(store)
    assert d["commitLog"]["segmentRenames"] == [{"from": segs[1].name + ".rmqtool-rename", "to": segs[1].name}]
    assert sorted((store / "commitlog").iterdir()) == segs
    verify_ok(store)
    keys_found_except(store, acks, sent, set())


def _inside_an_older_index_file(store: Path) -> tuple[Path, int]:
    """A segment and a cut in it such that the records lost past the cut are items in the middle of an index
    file a normal recovery of the intact store takes on trust (its first and last items stay intact)."""
    from engine.broker.index.file import IndexFile

    start = recover_json(store, "--dry-run")["scanStartOffset"]
    for p in list_index_files(store / "index"):
        f = IndexFile.open(p, 16, 64)
        try:
            phy = f.items_array()["phy"].astype("int64")
        finally:
            f.close()
        first, last = int(phy[0]), int(phy[-1])
        if not len(phy) or last >= start - SEG or last // SEG == first // SEG:
            continue
        inside = [int(x) for x in phy if first // SEG == int(x) // SEG and int(x) > first]
        if inside:
            seg = first // SEG * SEG
            return store / "commitlog" / f"{seg:020d}", inside[len(inside) // 2] - seg
    raise AssertionError("no index file spans two segments below the scan start")


@pytest.mark.parametrize("how,full", [("short", True), ("long", True),
                                      pytest.param("short", False, marks=pytest.mark.slow)])  # 2000 messages
def test_a_segment_of_the_wrong_size_is_brought_back_to_size(tmp_path, how, full):
    store, acks, sent = build(tmp_path, 90 if full else 2000)
    segs = sorted((store / "commitlog").iterdir())
    victim = segs[1]
    cut = SEG // 2
    if not full:
        victim, cut = _inside_an_older_index_file(store)
    lost = set()
    if how == "short":
        with open(victim, "r+b") as f:
            f.truncate(cut)
        lost = {i for i, a in enumerate(acks) if a["commitLogOffset"] // SEG == int(victim.name) // SEG
                and a["commitLogOffset"] % SEG + a["storeSize"] > cut}
    else:
        with open(victim, "ab") as f:
            f.write(b"extra bytes")
    d = recover_json(store, *(["--full-scan"] if full else []))
    if not full:  # a normal recovery would start after the short segment: it walks the short one all the same
        assert d["scanStartOffset"] <= int(victim.name) < int(d["brokerStartSegment"])
    size_before = cut if how == "short" else SEG + 11
    assert d["commitLog"]["segmentResizes"] == [{"segment": victim.name, "from": size_before, "to": SEG}]
    assert victim.stat().st_size == SEG
    verify_ok(store)
    keys_found_except(store, acks, sent, lost)
    assert recover_json(store)["consistent"]


@pytest.mark.parametrize("damage", ["healthy", "prev-index", "slot-head"])
def test_index_structure_checks_run_during_the_walk(tmp_path, monkeypatch, damage):
    """Issue 13: recovery checks the index files' structure while it walks the log, assuming the checks pass
    (trust.check_index_files). Damage that only the full check sees (a chain pointer to a newer
    item, a slot head naming the wrong item) makes it walk again with the verdicts: the plan is the one made
    with every check done before the walk."""
    import engine.ops.recovery.trust as trust
    from engine.ops.recovery import plan_recovery

    store, acks, sent = build(tmp_path)
    f = older_index(store)
    base = 40 + 4 * 16
    if damage == "prev-index":  # item 5 says its previous item is item 9, a newer one
        patch(f, base + 5 * 20 + 16, struct.pack(">i", 9))
    elif damage == "slot-head":
        slots = struct.unpack(">16i", f.read_bytes()[40:base])
        s = next(i for i, v in enumerate(slots) if v > 1)
        patch(f, 40 + 4 * s, struct.pack(">i", slots[s] - 1))
    (store / "abort").write_text("1")
    settled = spy(monkeypatch, trust.StructureChecks, "settle", lambda self, changed: changed)
    overlapped = plan_recovery(cfg_for(store)).as_dict()
    assert settled[0] is (damage != "healthy")  # the first verdicts; True: the walk was done again
    monkeypatch.setattr(trust, "quick_structure", lambda f: None)  # nothing assumed: every check first
    assert plan_recovery(cfg_for(store)).as_dict() == overlapped
    if damage == "healthy":
        assert overlapped["index"]["problems"] == {}
    else:
        assert list(overlapped["index"]["problems"]) == [f.name]
        d = recover_json(store)
        assert not d["consistent"] and f.name in d["index"]["rebuilt"]
        verify_ok(store)
        keys_found_except(store, acks, sent, set())
