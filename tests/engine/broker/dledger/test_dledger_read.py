"""The read commands on DLedger stores (enableDLegerCommitLog=true) written as DLedger 0.3.1.2 writes them
(tests/dledger_helpers.py): the same answers as on the file store holding the same messages, with the broker's
offsets (entry pos + 48); a store switched from a file commit log read on both sides of dividedCommitlogOffset;
damaged entries reported with their offset (exit 3); writers refused (exit 2, nothing changed)."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from dledger_helpers import SELF_ID, dledger_copy
from engine.broker.dledger.entry import (BAD, BODY_OFFSET, END, ENTRY, PADDING, check_entry, encode_entry,
                                         encode_index_unit, padding)
from helpers import assert_one_line_error, jlines, put, run, sample_messages, snapshot

SEG = 4096
N = 40
OLD = 15   # messages kept in the old file commit log of the switched store


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dledger")
    fs = tmp / "file"
    put(fs, sample_messages(N), tmp)
    fconf = tmp / "file.conf"
    fconf.write_text(f"storePathRootDir={fs}\nmappedFileSizeCommitLog={SEG}\nmaxHashSlotNum=16\nmaxIndexNum=64\n")
    d = tmp / "d"
    mapping = dledger_copy(fs, d, SEG)
    m = tmp / "m"
    mixed = dledger_copy(fs, m, SEG, old_count=OLD)
    return {"file": fs, "fconf": fconf, "conf": d / "broker.conf", "store": d / "store", "map": mapping,
            "mconf": m / "broker.conf", "mstore": m / "store", "mmap": mixed}


def _file(stores, *args):
    """The same command on the file store (its broker.conf written by the fixture: the same geometry)."""
    return run([args[0], "-c", stores["fconf"], *args[1:]])


def _dl(stores, *args, conf="conf"):
    return run([args[0], "-c", stores[conf], *args[1:]])


def _no_offsets(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in ("commitLogOffset", "msgId")}


def _data_file(store: Path, offset: int) -> tuple[Path, int]:
    start = offset - offset % SEG
    return store / f"dledger-{SELF_ID}" / "data" / f"{start:020d}", offset - start


# ------------------------------------------------------------------------------------------- the entry codec

def test_entry_codec_reads_what_it_writes_and_names_each_kind_of_damage():
    body = b"\x00\x00\x00\x5b" + bytes(87)
    buf = bytearray(encode_entry(body, 7, 2, 4096 + 0) + padding(40))
    ok = check_entry(buf, 0, len(buf), 4096)
    assert (ok.kind, ok.size, ok.header.index, ok.header.term, ok.header.pos, ok.header.body_size) == (
        ENTRY, 48 + 91, 7, 2, 4096, 91)
    assert check_entry(buf, 139, len(buf), 4096).kind == PADDING
    assert check_entry(bytes(16), 0, 16, 0).kind == END
    assert check_entry(buf, 0, len(buf), 0).kind == BAD                       # pos is not where it lies
    bad = bytearray(buf)
    bad[40:44] = struct.pack(">i", 12345)                                     # bodyCrc: DLedger writes 0
    assert "bodyCrc" in check_entry(bad, 0, len(bad), 4096).reason
    assert "torn" in check_entry(buf, 0, 100, 4096).reason                    # the entry runs past the file
    assert encode_index_unit(4096, 139, 7, 2) == struct.pack(">iqiqq", 1, 4096, 139, 7, 2)


# ------------------------------------------------------------------------------------------- same answers

def test_dump_commitlog_gives_the_file_stores_messages_at_the_brokers_offsets(stores):
    a, b = _file(stores, "dump-commitlog", "--json"), _dl(stores, "dump-commitlog", "--json")
    assert a.exit_code == b.exit_code == 0, b.stderr
    fa = [x for x in jlines(a) if x["type"] == "MESSAGE"]
    fb = [x for x in jlines(b) if x["type"] == "MESSAGE"]
    assert len(fb) == N and [_no_offsets(x) for x in fa] == [_no_offsets(x) for x in fb]
    assert [stores["map"][x["commitLogOffset"]] for x in fa] == [x["commitLogOffset"] for x in fb]
    blanks = [x for x in jlines(b) if x["type"] == "BLANK"]
    assert blanks and all(x["commitLogOffset"] + x["size"] == (x["commitLogOffset"] // SEG + 1) * SEG for x in blanks)
    store = stores["store"]
    for x in fb:  # each offset is inside its entry: the header 48 bytes before it says so
        p, pos = _data_file(store, x["commitLogOffset"])
        data = p.read_bytes()
        e = check_entry(data, pos - BODY_OFFSET, len(data), x["commitLogOffset"] - pos)
        assert e.kind == ENTRY and e.header.body_size == x["storeSize"]
    # --from-offset takes a message's offset, as on a file store
    r = _dl(stores, "dump-commitlog", "--json", "--from-offset", str(fb[5]["commitLogOffset"]))
    assert r.exit_code == 0 and [x["commitLogOffset"] for x in jlines(r) if x["type"] == "MESSAGE"] == [
        x["commitLogOffset"] for x in fb[5:]]
    r = _dl(stores, "dump-commitlog", "--from-offset", str(fb[5]["commitLogOffset"] - BODY_OFFSET))
    assert_one_line_error(r, 2)


def test_get_query_key_and_print_msg_answer_as_on_the_file_store(stores):
    fmsgs = [x for x in jlines(_file(stores, "dump-commitlog", "--json")) if x["type"] == "MESSAGE"]
    dmsgs = [x for x in jlines(_dl(stores, "dump-commitlog", "--json")) if x["type"] == "MESSAGE"]
    for i in (0, 17, N - 1):
        by_off = _dl(stores, "get", "--offset", str(dmsgs[i]["commitLogOffset"]), "--json")
        by_id = _dl(stores, "get", "-m", dmsgs[i]["msgId"], "--json")
        by_uniq = _dl(stores, "get", "-m", dmsgs[i]["uniqKey"], "--json")
        want = _file(stores, "get", "--offset", str(fmsgs[i]["commitLogOffset"]), "--json")
        assert by_off.exit_code == by_id.exit_code == by_uniq.exit_code == want.exit_code == 0, by_off.stderr
        got = [json.loads(r.stdout) for r in (by_off, by_id, by_uniq)]
        assert got[0] == got[1] == got[2]
        assert _no_offsets(got[0]) == _no_offsets(json.loads(want.stdout))
        assert got[0]["commitLogOffset"] == stores["map"][fmsgs[i]["commitLogOffset"]]
    r = _dl(stores, "get", "--offset", str(dmsgs[3]["commitLogOffset"] - BODY_OFFSET), "--json")
    assert r.exit_code != 0 and "Traceback" not in r.output
    for topic, key in (("TopicA", "k4"), ("TopicB", "g7"), ("TopicA", "k5")):
        a, b = _file(stores, "query-key", "--topic", topic, "--key", key, "--json"), \
            _dl(stores, "query-key", "--topic", topic, "--key", key, "--json")
        assert a.exit_code == b.exit_code == 0
        assert [stores["map"][x["commitLogOffset"]] for x in jlines(a)] == [x["commitLogOffset"] for x in jlines(b)]
        assert [_no_offsets(x) for x in jlines(a)] == [_no_offsets(x) for x in jlines(b)]
    assert len(jlines(b)) == 0 and len(jlines(_dl(stores, "query-key", "--topic", "TopicA", "--key", "k4",
                                                    "--json"))) == 1
    args = ["print-msg", "--topic", "TopicB", "--begin", "0", "--end", "now", "--json"]
    a, b = _file(stores, *args), _dl(stores, *args)
    assert a.exit_code == b.exit_code == 0 and len(jlines(b)) == N // 2
    assert [_no_offsets(x) for x in jlines(a)] == [_no_offsets(x) for x in jlines(b)]


def test_queues_dump_cq_inspect_index_info_and_doctor(stores):
    a, b = _file(stores, "queues", "--json"), _dl(stores, "queues", "--json")
    assert a.exit_code == b.exit_code == 0
    qa, qb = json.loads(a.stdout)["queues"], json.loads(b.stdout)["queues"]
    assert [(q["topic"], q["queueId"], q["minOffset"], q["maxOffset"]) for q in qa] == \
        [(q["topic"], q["queueId"], q["minOffset"], q["maxOffset"]) for q in qb]
    assert sum(q["maxOffset"] for q in qb) == N
    a, b = _file(stores, "dump-cq", "--topic", "TopicA", "--queue-id", "1", "--json"), \
        _dl(stores, "dump-cq", "--topic", "TopicA", "--queue-id", "1", "--json")
    assert [stores["map"][u["commitLogOffset"]] for u in jlines(a)] == [u["commitLogOffset"] for u in jlines(b)]
    assert all(u["status"] == "OK" for u in jlines(b)) and jlines(b)
    r = _dl(stores, "inspect-index", "--verify", "--json")
    assert r.exit_code == 0, r.stdout
    assert all(x["verify"]["ok"] for x in jlines(r)) and sum(x["verify"]["itemsChecked"] for x in jlines(r)) > N
    info = json.loads(_dl(stores, "info", "--json").stdout)["commitLog"]
    last = max(stores["map"].values())
    size = next(x["storeSize"] for x in jlines(_dl(stores, "dump-commitlog", "--json"))
                if x.get("commitLogOffset") == last)
    assert (info["minOffset"], info["maxOffset"]) == (0, last + size)
    assert info["dledger"]["committedOffset"] == last + size and info["dledger"]["dividedCommitlogOffset"] == 0
    r = _dl(stores, "doctor", "--json")
    assert r.exit_code == 0, r.stdout
    d = json.loads(r.stdout)
    assert d["healthy"] and d["summary"]["read"]["dledger"]["entries"] == N
    assert d["summary"]["read"]["records"] == N and d["mode"]["commitLog"] == "dledger"
    assert not [f for f in d["findings"] if f["kind"] == "mode-not-checked"]


def test_a_store_switched_from_a_file_commit_log_is_read_on_both_sides(stores):
    """commitlog/ below dividedCommitlogOffset (its last file ended by setRecoverPosition's BLANK), the DLedger
    files from there: dump, get and queues see every message at the broker's offsets."""
    r = _dl(stores, "dump-commitlog", "--json", conf="mconf")
    assert r.exit_code == 0, r.stderr
    msgs = [x for x in jlines(r) if x["type"] == "MESSAGE"]
    fmsgs = [x for x in jlines(_file(stores, "dump-commitlog", "--json")) if x["type"] == "MESSAGE"]
    assert [x["commitLogOffset"] for x in msgs] == [stores["mmap"][x["commitLogOffset"]] for x in fmsgs]
    assert [x["commitLogOffset"] for x in msgs[:OLD]] == [x["commitLogOffset"] for x in fmsgs[:OLD]]
    divided = msgs[OLD]["commitLogOffset"] - BODY_OFFSET
    assert divided % SEG == 0 and divided > msgs[OLD - 1]["commitLogOffset"]
    info = json.loads(_dl(stores, "info", "--json", conf="mconf").stdout)["commitLog"]
    assert info["dledger"]["dividedCommitlogOffset"] == divided and info["minOffset"] == 0
    for i in (OLD - 1, OLD, N - 1):
        g = _dl(stores, "get", "--offset", str(msgs[i]["commitLogOffset"]), "--json", conf="mconf")
        assert g.exit_code == 0 and json.loads(g.stdout)["uniqKey"] == fmsgs[i]["uniqKey"]
    q = json.loads(_dl(stores, "queues", "--json", conf="mconf").stdout)["queues"]
    assert sum(x["maxOffset"] for x in q) == N and all(x["truncatedUnits"] == 0 for x in q)
    d = _dl(stores, "doctor", "--json", conf="mconf")
    assert d.exit_code == 0, d.stdout


@pytest.mark.parametrize("conf", ["conf", "mconf"], ids=["dledger", "switched"])
@pytest.mark.parametrize("way", ["segment jobs", "helpers"])
def test_the_walk_on_helpers_answers_as_alone_on_entry_files(stores, monkeypatch, conf, way):
    # DLedger data files hold entries around the records. A segment per job (verify's): a segment's first record
    # comes after its entry's header, which the job's walk steps over as the walk in order does. With helpers
    # (the walk in order, here verify's with its segment jobs turned off): the windows decoded from them go to the
    # helpers as their columns, as a plain segment's. Either way verify and doctor answer as on one worker.
    import re

    from helpers import spy

    from engine import workers
    from engine.broker.commitlog import walk as logwalk
    from engine.broker.index import verify

    monkeypatch.setattr(logwalk, "HELPER_MIN_WINDOW", 300)  # several windows per file
    if way == "helpers":
        monkeypatch.setattr(verify, "_segment_ranges", lambda *args: [])
    handed = spy(monkeypatch, logwalk.CrcHelper, "submit", lambda self, fut: fut is not None)
    names: list[str] = []
    real = workers.WorkerPool.submit
    monkeypatch.setattr(workers.WorkerPool, "submit", lambda self, fn, *a: names.append(fn.__name__) or real(
        self, fn, *a))
    cmds = (("inspect-index", "--verify"), ("doctor",))
    for cmd in cmds:
        one, two = (_dl(stores, *cmd, "--json", "--workers", n, conf=conf) for n in ("1", "2"))
        assert one.exit_code == two.exit_code == 0, (cmd, two.stderr)
        strip = lambda r: re.sub(r'"[a-zA-Z]*[sS]econds": [0-9.e-]+', "", r.stdout)
        assert strip(one) == strip(two) and one.stdout, cmd
    if way == "helpers":
        assert handed and all(handed)
    else:
        assert not handed and "_segment_job" in names


# ------------------------------------------------------------------------------------------- damage

def _damaged(stores, tmp_path, how) -> tuple[Path, int]:
    """A copy of the DLedger store with one entry damaged by `how(data, pos)`; the damaged message's offset."""
    import shutil

    dest = tmp_path / "x"
    shutil.copytree(stores["store"].parent, dest)
    conf = dest / "broker.conf"
    conf.write_text(conf.read_text().replace(str(stores["store"]), str(dest / "store")))
    msgs = [x for x in jlines(_dl(stores, "dump-commitlog", "--json")) if x["type"] == "MESSAGE"]
    off = msgs[N // 2]["commitLogOffset"]
    p, pos = _data_file(dest / "store", off)
    data = bytearray(p.read_bytes())
    how(data, pos - BODY_OFFSET, msgs[N // 2]["storeSize"])
    p.write_bytes(bytes(data))
    return conf, off


@pytest.mark.parametrize("case", ["bad-magic", "bad-body-crc", "torn", "body-bytes"])
def test_a_damaged_entry_is_exit_3_with_its_offset_and_no_traceback(stores, tmp_path, case):
    def how(data, at, size):
        if case == "bad-magic":
            data[at:at + 4] = struct.pack(">i", 9)
        elif case == "bad-body-crc":
            data[at + 40:at + 44] = struct.pack(">i", 0x1234567)
        elif case == "torn":  # the tail of the entry never reached the disk
            data[at + 48 + size // 2:at + 48 + size] = bytes(size - size // 2)
        else:
            data[at + 48 + 90] ^= 0xFF  # a byte of the body (after the 84-byte header and BODYLEN)
    conf, off = _damaged(stores, tmp_path, how)
    entry = off - BODY_OFFSET
    r = run(["dump-commitlog", "-c", conf, "--json"])
    assert r.exit_code == 3 and "Traceback" not in r.output
    bad = [x for x in jlines(r) if x["type"] == "CORRUPT"]
    assert bad and bad[0]["commitLogOffset"] in (off, entry), bad
    assert str(entry) in bad[0]["reason"] or bad[0]["commitLogOffset"] == off
    good = [x for x in jlines(r) if x["type"] == "MESSAGE"]
    assert 0 < len(good) < N and off not in {x["commitLogOffset"] for x in good}
    r = run(["doctor", "-c", conf, "--json"])
    assert r.exit_code == 3 and "Traceback" not in r.output
    d = json.loads(r.stdout)
    assert not d["healthy"]
    errs = [f for f in d["findings"] if f["severity"] == "error"]
    assert errs and (str(entry) in errs[0]["problem"] or str(off) in errs[0]["problem"])
    r = run(["get", "-c", conf, "--offset", str(off), "--json"])
    assert r.exit_code in (2, 3) and "Traceback" not in r.output and r.stderr.strip()
    # queues as the broker serves them: DLedger's recovery ends the log at a bad entry header (the units after it
    # are cut), not at a bad record inside a sound entry (DLedger reads no record; the units stay)
    q = json.loads(run(["queues", "-c", conf, "--json"]).stdout)["queues"]
    cut = sum(x["truncatedUnits"] for x in q)
    assert (cut > 0) == (case == "bad-magic"), (case, cut)
    if case != "bad-magic":  # a sound entry: the walk goes on after it, every other message is dumped
        assert len(good) == N - 1


# ------------------------------------------------------------------------------------------- writers refused

@pytest.mark.parametrize("args", [["recover"], ["clean", "--force-now"], ["put", "-t", "TopicA", "--body", "x"]])
def test_writers_refuse_a_dledger_store_and_change_nothing(stores, tmp_path, args):
    before = snapshot(stores["store"])
    r = run([args[0], "-c", stores["conf"], *args[1:]])
    assert_one_line_error(r, 2, contains="DLedger")
    assert snapshot(stores["store"]) == before


def test_spark_reindex_rebuilds_the_index_from_the_entries(stores, tmp_path):
    """The index is the broker's IndexService in every mode: rebuilt from the DLedger entries (and the old file
    commit log of a switched store) it holds what the store's index holds."""
    for conf, store in (("conf", "store"), ("mconf", "mstore")):
        before = snapshot(stores[store])
        r = _dl(stores, "spark-reindex", "--out", str(tmp_path / conf), "--master", "inline", "--json", conf=conf)
        assert r.exit_code == 0, r.output
        d = json.loads(r.stdout)
        assert (d["messages"], d["sameAsBefore"], d["anomalies"]) == (N, True, []), d
        after = snapshot(stores[store])
        after.pop("lock", None)  # the job takes the store lock (an empty lock file, as the broker's)
        assert after == before


def test_doctor_reports_an_index_unit_that_disagrees_with_its_entry_as_a_rebuild(stores, tmp_path):
    """DLedger rebuilds its index from the first unit that disagrees with the data (the data wins): a warning
    naming the entry, not damage; units past the data are what recover truncates (info)."""
    import shutil

    dest = tmp_path / "x"
    shutil.copytree(stores["store"].parent, dest)
    conf = dest / "broker.conf"
    conf.write_text(conf.read_text().replace(str(stores["store"]), str(dest / "store")))
    idx = dest / "store" / f"dledger-{SELF_ID}" / "index" / f"{0:020d}"
    data = bytearray(idx.read_bytes())
    data[7 * 32 + 24:7 * 32 + 32] = struct.pack(">q", 5)          # unit 7: term 5, the entry says 1
    data[N * 32:N * 32 + 32] = encode_index_unit(999_999, 100, N, 1)  # a unit after the last entry
    idx.write_bytes(bytes(data))
    r = run(["doctor", "-c", conf, "--json"])
    assert r.exit_code == 0, r.stdout
    found = {f["kind"]: f for f in json.loads(r.stdout)["findings"]}
    assert found["dledger-index-unit"]["severity"] == "warning" and found["dledger-index-unit"]["offset"] == 7 * 32
    assert "term 5" in found["dledger-index-unit"]["problem"]
    assert found["dledger-index-after-end"]["severity"] == "info"
