"""Controller mode (enableControllerMode): the epoch file read and written as CheckpointFile does, shown by info,
checked by doctor, truncated by recover (truncateSuffixByOffset) and clean (truncatePrefixByOffset)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine.broker.config import epochfile as ef
from engine.broker.mode import WRITER_RULES
from helpers import jlines, run

SEG = 4096


def _store(tmp_path: Path, n: int = 30) -> tuple[Path, Path, list[dict]]:
    store = tmp_path / "store"
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={store}\nenableControllerMode=true\nmappedFileSizeCommitLog={SEG}\n"
                    "mappedFileSizeConsumeQueue=6000\n")
    data = "".join(json.dumps({"topic": "T", "body": f"message {i:03d} " + "p" * 40}) + "\n" for i in range(n))
    r = run(["put", "-c", conf, "--from-jsonl", "-", "--json"], input=data)
    assert r.exit_code == 0, r.output
    return store, conf, jlines(r)


# ------------------------------------------------------------------------------------------- the file

def test_text_is_checkpointfiles():
    # CheckpointFile's own example: "2 (size) / 773307083 (crc32) / 7-7000 / 8-8000"
    es = [ef.EpochEntry(7, 7000), ef.EpochEntry(8, 8000)]
    assert ef.serialize(es) == b"2\n773307083\n7-7000\n8-8000\n"
    got = ef.parse(ef.serialize(es))
    assert [(e.epoch, e.start_offset, e.end_offset) for e in got] == [(7, 7000, 8000), (8, 8000, ef.LONG_MAX)]
    assert ef.parse(b"2\n0\n7-7000\n8-8000\n")[1].epoch == 8       # CRC 0: not checked
    with pytest.raises(ef.EpochFileError):
        ef.parse(b"3\n773307083\n7-7000\n8-8000\n")                 # the count disagrees
    with pytest.raises(ef.EpochFileError):
        ef.parse(b"2\n12345\n7-7000\n8-8000\n")                     # the CRC disagrees
    with pytest.raises(ef.EpochFileError) as e:
        ef.parse(b"x\n0\n")
    assert e.value.fatal                                            # NumberFormatException: the broker stops


def test_write_keeps_bak_and_read_falls_back(tmp_path):
    p = tmp_path / "epochFileCheckpoint"
    first, second = [ef.EpochEntry(1, 0)], [ef.EpochEntry(1, 0), ef.EpochEntry(2, 500)]
    assert ef.write(p, first) and not (tmp_path / "epochFileCheckpoint.bak").exists()
    ef.write(p, second)
    assert p.read_bytes() == ef.serialize(second)
    assert (tmp_path / "epochFileCheckpoint.bak").read_bytes() == ef.serialize(first)
    assert not ef.write(p, [])                                      # CheckpointFile.write of nothing writes nothing
    assert p.read_bytes() == ef.serialize(second)
    p.write_bytes(p.read_bytes().replace(b"2-500", b"2-501"))        # the CRC fails: the broker reads the .bak
    r = ef.read(p)
    assert r.source == "bak" and [e.epoch for e in r.entries] == [1] and r.file_problem
    p.write_bytes(b"oops\n")
    r = ef.read(p)
    assert r.fatal and r.entries == []                              # no fallback past a parse error


def test_truncations():
    es = ef.parse(ef.serialize([ef.EpochEntry(1, 0), ef.EpochEntry(2, 3000), ef.EpochEntry(3, 5000)]))
    cut = ef.truncate_suffix_by_offset(es, 5000)
    assert [(e.epoch, e.end_offset) for e in cut] == [(1, 3000), (2, ef.LONG_MAX)]
    assert ef.truncate_suffix_by_offset(es, 0) == []
    assert [e.epoch for e in ef.truncate_prefix_by_offset(es, 2999)] == [1, 2, 3]  # epoch 1 ends at 3000 > 2999
    assert [e.epoch for e in ef.truncate_prefix_by_offset(es, 3000)] == [2, 3]     # ends at 3000 <= 3000: gone
    assert [e.epoch for e in ef.truncate_prefix_by_offset(es, 4999)] == [2, 3]
    assert [e.epoch for e in ef.truncate_prefix_by_offset(es, 10**12)] == [3]      # the last never ends


def test_writer_rules_controller():
    assert {"put", "recover", "clean"} <= WRITER_RULES["controller"]


# ------------------------------------------------------------------------------------------- info, doctor, recover

def test_info_doctor_recover(tmp_path):
    store, conf, acks = _store(tmp_path)
    end = acks[-1]["commitLogOffset"] + acks[-1]["storeSize"]
    cut_at = acks[-5]["commitLogOffset"]
    epoch = store / "epochFileCheckpoint"
    ef.write(epoch, [ef.EpochEntry(1, 0), ef.EpochEntry(2, 1000), ef.EpochEntry(3, cut_at + 10)])
    r = run(["info", "-c", conf, "--json"])
    assert r.exit_code == 0, r.output
    ep = json.loads(r.stdout)["epochFile"]
    assert [(e["epoch"], e["startOffset"]) for e in ep["entries"]] == [(1, 0), (2, 1000), (3, cut_at + 10)]
    assert ep["source"] == "file" and ep["problems"] == []
    r = run(["doctor", "-c", conf, "--json"])
    assert not [f for f in json.loads(r.stdout)["findings"] if f["kind"].startswith("epoch")]
    # the last records are lost (zeroed): the commit log ends before epoch 3 starts
    seg = store / "commitlog" / f"{cut_at // SEG * SEG:020d}"
    with open(seg, "r+b") as f:
        f.seek(cut_at % SEG)
        f.write(bytes(end - cut_at))
    r = run(["info", "-c", conf, "--json"])
    assert [p["kind"] for p in json.loads(r.stdout)["epochFile"]["problems"]] == ["past-end"]
    r = run(["doctor", "-c", conf, "--json"])
    assert r.exit_code == 3, r.output
    f = [f for f in json.loads(r.stdout)["findings"] if f["kind"] == "epoch-past-log"]
    assert len(f) == 1 and f[0]["severity"] == "error" and f[0]["fix"].startswith("rmqtool recover")
    before = epoch.read_bytes()
    r = run(["recover", "-c", conf, "--json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert [e["epoch"] for e in plan["epochFile"]["after"]] == [1, 2]
    assert epoch.read_bytes() == ef.serialize([ef.EpochEntry(1, 0), ef.EpochEntry(2, 1000)])
    assert (store / "epochFileCheckpoint.bak").read_bytes() == before
    kept = list((store / plan["quarantineDir"]).glob("epochFileCheckpoint*"))
    assert kept and kept[0].read_bytes() == before
    r = run(["doctor", "-c", conf, "--json"])
    d = json.loads(r.stdout)
    assert not [f for f in d["findings"] if f["kind"].startswith("epoch")]
    assert [(e["epoch"], e["startOffset"]) for e in d["summary"]["read"]["epochs"]] == [(1, 0), (2, 1000)]


def test_recover_removes_an_epoch_file_left_with_none(tmp_path):
    store, conf, acks = _store(tmp_path)
    end = acks[-1]["commitLogOffset"] + acks[-1]["storeSize"]
    epoch = store / "epochFileCheckpoint"
    ef.write(epoch, [ef.EpochEntry(5, end + 100)])
    r = run(["recover", "-c", conf, "--json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert plan["epochFile"]["action"] == "remove" and plan["epochFile"]["after"] == []
    assert not epoch.exists()  # CheckpointFile cannot write no entries: the broker would load the stale ones
    assert [p.name for p in (store / plan["quarantineDir"]).glob("epochFileCheckpoint*")]


def test_clean_truncates_the_prefix(tmp_path):
    store, conf, acks = _store(tmp_path, n=60)
    segs = sorted((store / "commitlog").iterdir())
    assert len(segs) >= 3
    epoch = store / "epochFileCheckpoint"
    second = int(segs[1].name)
    ef.write(epoch, [ef.EpochEntry(1, 0), ef.EpochEntry(2, 100), ef.EpochEntry(3, second + 50)])
    before = epoch.read_bytes()
    old = 1_000_000_000
    for p in segs:
        os.utime(p, (old, old))
    r = run(["clean", "-c", conf, "--force-now", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    new_min = d["minCommitLogOffsetAfter"]
    assert new_min > second
    # CleanCommitLogService: truncateEpochFilePrefix(minPhyOffset - 1) drops the epochs ending at or before it
    want = ef.truncate_prefix_by_offset(ef.parse(before), new_min - 1)
    assert [e.epoch for e in want] == [3]
    assert epoch.read_bytes() == ef.serialize(want)
    assert (store / "epochFileCheckpoint.bak").read_bytes() == before
