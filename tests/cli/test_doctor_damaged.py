"""Issue 34, diagnosis and read side: one fault injected into a copy of a small store (or of a real broker's golden
store), checked through the CLI: doctor's finding (kind, file, offset), what recover and the readers do, and that
the fix doctor prints converges (healthy afterwards, every intact message still readable by key, by id and by
queue offset). The store commands get no geometry flag: segment size, queue file size and index geometry come
from the files, as a user without broker.conf runs them."""
from __future__ import annotations

from helpers import GOLDEN
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers import lock_held, run, said, sample_messages, snapshot, unpack_golden

#: 4 KiB commit-log segments, 10-unit consume-queue files, small index files: every file kind rolls.
GEOM = ["--hash-slots", "16", "--max-index", "64", "--commitlog-file-size", "4096", "--cq-file-size", "200"]
N = 90   # 15 messages in each of six queues


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[Path, list[dict], list[dict]]:
    root = tmp_path_factory.mktemp("pristine")
    store, msgs = root / "s", sample_messages(N)
    src = root / "in.jsonl"
    src.write_text("".join(json.dumps(m) + "\n" for m in msgs))
    r = run(["put", "-s", store, "--from-jsonl", src, "--json", *GEOM])
    assert r.exit_code == 0, r.stderr
    acks = [json.loads(x) for x in r.stdout.splitlines()]
    assert run(["repair", "config", "-s", store, "topics.json", "--from-store"]).exit_code == 0
    shutil.rmtree(store / "quarantine", ignore_errors=True)
    return store, msgs, acks


@pytest.fixture
def store(pristine, tmp_path) -> Path:
    dst = tmp_path / "store"
    shutil.copytree(pristine[0], dst)
    return dst


def doctor(store: Path, *extra: str, code: int | None = None) -> dict:
    r = run(["doctor", "-s", store, "--json", *extra])
    if code is not None:
        assert r.exit_code == code, r.stdout + r.stderr
    assert r.exit_code in (0, 3), r.stderr
    d = json.loads(r.stdout)
    assert d["healthy"] == (r.exit_code == 0)
    return d


def kinds(doc: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for f in doc["findings"]:
        out.setdefault(f["kind"], []).append(f)
    return out


def run_fixes(store: Path, doc: dict) -> None:
    for cmd in doc["commands"]:
        words = cmd.split()
        assert words[0] == "rmqtool"
        r = run(words[1:])
        assert r.exit_code == 0, f"{cmd}: {r.stdout}{r.stderr}"


def converged(store: Path) -> dict:
    """doctor after the fixes: healthy, only warnings or notes left, and no command left to run."""
    doc = doctor(store, "--deep", code=0)
    assert not [f for f in doc["findings"] if f["severity"] == "error"]
    return doc


def assert_readable(store: Path, msgs: list[dict], acks: list[dict], skip: set[int] = frozenset()) -> None:
    """Every intact message by key, by UNIQ_KEY (message id) and by queue offset."""
    for i, (m, a) in enumerate(zip(msgs, acks)):
        if i in skip:
            continue
        if i % 10 == 0:  # by key and by id: a sample keeps the test fast; by queue offset: every message below
            r = run(["query-key", "-s", store, "--topic", m["topic"], "--key", m["keys"][0], "--json"])
            assert r.exit_code == 0, r.stderr
            assert a["commitLogOffset"] in [json.loads(x)["commitLogOffset"] for x in r.stdout.splitlines()]
            r = run(["get", "-s", store, "--msg-id", m["uniqKey"], "--json"])
            assert r.exit_code == 0, r.stderr
            assert json.loads(r.stdout)["commitLogOffset"] == a["commitLogOffset"]
    for topic, qid in {(m["topic"], m["queueId"]) for m in msgs}:
        want = [(a["queueOffset"], a["commitLogOffset"]) for i, (m, a) in enumerate(zip(msgs, acks))
                if (m["topic"], m["queueId"]) == (topic, qid) and i not in skip]
        r = run(["get", "-s", store, "--topic", topic, "--queue-id", str(qid), "--queue-offset", "0", "--count",
                 "100", "--json"])
        got = {json.loads(x)["queueOffset"]: json.loads(x)["commitLogOffset"] for x in r.stdout.splitlines()}
        for q, off in want:
            assert got.get(q) == off, (topic, qid, q)


def seg_of(store: Path, offset: int) -> tuple[Path, int]:
    start = offset - offset % 4096
    return store / "commitlog" / f"{start:020d}", offset % 4096


def flip(path: Path, pos: int, n: int = 2) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(n)
        f.seek(pos)
        f.write(bytes(x ^ 0xFF for x in b))


# ---------------------------------------------------------------- item 3: no commit log

def test_missing_commitlog_is_an_error_and_recover_refuses(store):
    shutil.move(store / "commitlog", store.parent / "commitlog.away")
    doc = doctor(store, code=3)
    (f,) = kinds(doc)["commitlog-missing"]
    assert f["severity"] == "error" and f["fix"] is None
    assert "cq-past-log" not in kinds(doc) and doc["commands"] == []
    before = snapshot(store)
    for extra in ([], ["--dry-run"]):
        r = run(["recover", "-s", store, *extra])
        assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert snapshot(store) == before and not (store / "quarantine").exists()
    shutil.move(store.parent / "commitlog.away", store / "commitlog")  # the manual step: the log is back
    assert doctor(store, "--deep", code=0)["commands"] == []


def test_missing_commitlog_with_a_queue_without_files_prescribes_no_recover(store):
    shutil.move(store / "commitlog", store.parent / "commitlog.away")
    for p in (store / "consumequeue" / "TopicB" / "1").iterdir():
        p.unlink()
    doc = doctor(store, code=3)
    assert {"commitlog-missing", "cq-no-files"} <= set(kinds(doc)) and doc["commands"] == []


# ---------------------------------------------------------------- item 5: the placeholder

def test_placeholder_reads_as_a_placeholder(store, pristine):
    _s, msgs, acks = pristine
    i = next(i for i, a in enumerate(acks) if 4096 <= a["commitLogOffset"] < 8192 - 400)
    a = acks[i]
    seg, pos = seg_of(store, a["commitLogOffset"])
    flip(seg, pos + 100)  # in the body: a CRC mismatch
    doc = doctor(store, "--deep", code=3)
    (f,) = kinds(doc)["commitlog-damaged-record"]
    assert (f["file"], f["offset"]) == (f"commitlog/{seg.name}", pos)   # item 6: the file that holds the bytes
    run_fixes(store, doc)
    converged(store)
    q = ["--topic", msgs[i]["topic"], "--queue-id", str(msgs[i]["queueId"]), "--queue-offset", str(a["queueOffset"])]
    r = run(["get", "-s", store, *q, "--json"])
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d.get("placeholder") is not None and d["topic"] == "rmq_sys_rmqtool_quarantine"
    assert [n["commitLogOffset"] for n in said(r, "placeholder")] == [d["commitLogOffset"]]  # and says what it is
    r = run(["dump-cq", "-s", store, *q, "--count", "1", "--json"])
    assert r.exit_code == 0, r.stderr
    u = json.loads(r.stdout)
    assert u["status"] == "PLACEHOLDER" and u.get("placeholder") is not None
    r = run(["print-msg", "-s", store, "--topic", msgs[i]["topic"], "--queue-id", str(msgs[i]["queueId"]),
             "--begin", "0", "--json"])
    assert r.exit_code == 0, r.stderr
    assert sum("placeholder" in json.loads(x) for x in r.stdout.splitlines()) == 1
    r = run(["get", "-s", store, "--offset", str(a["commitLogOffset"]), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout).get("placeholder") is not None
    assert_readable(store, msgs, acks, skip={i})


# ---------------------------------------------------------------- items 6 and 14: where a finding is

def test_torn_tail_is_filed_under_the_segment_that_holds_it(store, pristine):
    _s, msgs, acks = pristine
    last = max(acks, key=lambda a: a["commitLogOffset"])
    end = last["commitLogOffset"] + last["storeSize"]
    seg, pos = seg_of(store, end)
    assert seg.name != "00000000000000000000"
    with open(seg, "r+b") as f:  # half a record header: a torn tail
        f.seek(pos)
        f.write((300).to_bytes(4, "big") + b"\xda\xa3\x20\xa7" + b"\x01" * 20)
    doc = doctor(store)
    (f,) = kinds(doc)["commitlog-torn-tail"]
    assert (f["file"], f["offset"]) == (f"commitlog/{seg.name}", pos)
    run_fixes(store, doc)
    converged(store)
    assert_readable(store, msgs, acks)


# ---------------------------------------------------------------- items 7 and 14: info's end of the log

def test_info_reports_the_data_end_of_a_killed_brokers_store(tmp_path):
    g = unpack_golden("broker/r2/killed", tmp_path)
    assert (g.store / "commitlog" / "00000000000003145728").exists()
    for how in (["-s", g.store], ["-c", g.conf]):
        r = run(["info", *how, "--json"])
        assert r.exit_code == 0, r.stderr
        assert json.loads(r.stdout)["commitLog"]["maxOffset"] == 2_117_276


def test_info_ends_the_log_at_a_damaged_record_as_the_broker_does(tmp_path):
    g = unpack_golden("broker/r2/damaged", tmp_path)
    damage = json.loads((GOLDEN / "broker/r2/damaged/damage.json").read_text())
    r = run(["info", "-s", g.store, "--json"])
    cl = json.loads(r.stdout)["commitLog"]
    assert cl["maxOffset"] == damage["damagedRecord"]["commitLogOffset"] == 1_793_690
    assert cl["endReason"].startswith("CORRUPT")


# ---------------------------------------------------------------- item 14: a running broker's abort file

def test_running_brokers_abort_file_is_no_unclean_stop(store):
    (store / "abort").write_text(str(os.getpid()))
    with lock_held(store):
        doc = doctor(store)
    k = kinds(doc)
    assert "abort-marker" not in k and k["abort-marker-running"][0]["fix"] is None
    assert doc["lockedByBroker"] is True


# ---------------------------------------------------------------- the rule: every printed fix converges

def _segments(store: Path) -> list[Path]:
    return sorted((store / "commitlog").iterdir())


def _in_segment(acks: list[dict], k: int) -> list[int]:
    """Messages (indexes into acks) whose record is in commit-log segment k, in log order."""
    return sorted((i for i, a in enumerate(acks) if a["commitLogOffset"] // 4096 == k),
                  key=lambda i: acks[i]["commitLogOffset"])


def _swap(a: Path, b: Path) -> None:
    tmp = a.with_name(a.name + ".swap")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)


def _index_files(store: Path) -> list[Path]:
    return sorted((store / "index").iterdir(), key=lambda p: (len(p.name), p.name))


def cl_zeroed_record(store, acks):
    i = _in_segment(acks, 1)[3]
    seg, pos = seg_of(store, acks[i]["commitLogOffset"])
    with open(seg, "r+b") as f:
        f.seek(pos + 4)
        f.write(bytes(64))
    return {i}


def cl_several_records(store, acks):
    lost = set(_in_segment(acks, 2)[2:5])
    for i in lost:
        seg, pos = seg_of(store, acks[i]["commitLogOffset"])
        flip(seg, pos + 100)
    return lost


def cl_truncated_middle(store, acks):
    seg = _segments(store)[1]
    os.truncate(seg, 2048)
    return {i for i in _in_segment(acks, 1) if acks[i]["commitLogOffset"] % 4096 + acks[i]["storeSize"] > 2048}


def cl_swapped(store, acks):
    a, b = _segments(store)[1:3]
    _swap(a, b)
    return set()


def cl_missing_middle(store, acks):
    _segments(store)[2].unlink()
    return set(_in_segment(acks, 2))


def cq_swapped(store, acks):
    d = store / "consumequeue" / "TopicB" / "2"
    _swap(d / "00000000000000000000", d / "00000000000000000200")
    return set()


def cq_cut_middle(store, acks):  # item 13: the broker does not start; only a rebuild from the log gives it back
    os.truncate(store / "consumequeue" / "TopicA" / "0" / "00000000000000000000", 60)
    return set()


def cq_missing(store, acks):  # item 13: the broker does not dispatch the queue again
    for p in (store / "consumequeue" / "TopicB" / "1").iterdir():
        p.unlink()
    return set()


def cq_zeroed_units(store, acks):
    with open(store / "consumequeue" / "TopicA" / "1" / "00000000000000000000", "r+b") as f:
        f.seek(40)
        f.write(bytes(40))
    return set()


def index_header(store, acks):  # item 8
    with open(_index_files(store)[1], "r+b") as f:
        f.seek(32)
        f.write((5000).to_bytes(4, "big") + (99999).to_bytes(4, "big"))
    return set()


def index_slots(store, acks):  # item 8: a zeroed slot table, named by plain doctor
    with open(_index_files(store)[1], "r+b") as f:
        f.seek(40)
        f.write(bytes(4 * 16))
    return set()


def index_truncated(store, acks):
    f = _index_files(store)[1]
    os.truncate(f, f.stat().st_size // 2)
    return set()


def index_missing(store, acks):
    _index_files(store)[1].unlink()
    return set()


def index_swapped(store, acks):
    a, b = _index_files(store)[:2]
    _swap(a, b)
    return set()


def checkpoint_torn(store, acks):
    os.truncate(store / "checkpoint", 20)
    return set()


FAULTS = [cl_zeroed_record, cl_several_records, cl_truncated_middle, cl_missing_middle, cl_swapped, cq_cut_middle,
          cq_missing, cq_zeroed_units, cq_swapped, index_header, index_slots, index_truncated, index_missing,
          index_swapped, checkpoint_torn]


@pytest.mark.parametrize("fault", FAULTS, ids=[f.__name__ for f in FAULTS])
def test_every_printed_fix_converges(store, pristine, fault):
    """The rule behind issue 34: a fault injected, doctor (plain, or --deep when plain sees nothing to do) prints
    the fixes; run in order they leave doctor healthy and every message that was intact readable by key, by id
    and by queue offset. No geometry flag is given anywhere (items 6, 8, 12, 14: the files tell). Torn tails,
    placeholders, checkpoints of garbage and the timer store have tests of their own above and in test_doctor.py
    and test_recover_intact.py."""
    _s, msgs, acks = pristine
    lost = fault(store, acks)
    if fault.__name__.startswith("index_"):  # item 8: one damaged file does not hide the files' geometry
        r = run(["info", "-s", store, "--json"])
        assert r.exit_code == 0, r.stderr
        ix = json.loads(r.stdout)["index"]
        assert (ix["hashSlotNum"], ix["indexNum"]) == (16, 64)
        assert run(["inspect-index", "-s", store]).exit_code in (0, 3)
    doc = doctor(store)
    if fault is cl_missing_middle:  # no fix gives the bytes back: the gap stays an error without a command
        (x,) = kinds(doc)["commitlog-gap"]
        assert (x["severity"], x["fix"]) == ("error", None)
        run_fixes(store, doc)
        doc = doctor(store, "--deep", code=3)
        assert doc["commands"] == [] and {f["kind"] for f in doc["findings"] if f["severity"] != "info"} == {
            "commitlog-gap"}, doc["findings"]
        assert_readable(store, msgs, acks, skip=lost)
        return
    if not doc["commands"]:
        doc = doctor(store, "--deep")
    assert doc["commands"], doc["findings"]
    if fault is cq_swapped:
        (x,) = kinds(doc)["cq-file-misplaced"]
        assert x["file"] == "consumequeue/TopicB/2/00000000000000000000" and "--rebuild" in x["fix"].split()
    if fault in (index_header, index_slots):
        assert [f["file"] for f in kinds(doc)["index-untrusted"]] == [f"index/{_index_files(store)[1].name}"]
    if fault is cq_cut_middle:
        (x,) = kinds(doc)["cq-file-size"]
        assert x["severity"] == "error" and x["fix"].split()[1:3] == ["repair", "consume-queue"]
    if fault is cq_missing:
        (x,) = kinds(doc)["cq-no-files"]
        assert x["fix"].split()[1] == "recover"
    run_fixes(store, doc)
    converged(store)
    assert_readable(store, msgs, acks, skip=lost)


def test_default_size_index_file_with_a_zeroed_slot_table(tmp_path):
    """The broker's default geometry, no flag, one index file (sparse, 420 MB): its slot table zeroed, every
    command still reads the store, names the file, and doctor's fix rebuilds it."""
    msgs = sample_messages(30)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(m) + "\n" for m in msgs))
    store = tmp_path / "s"
    r = run(["put", "-s", store, "--from-jsonl", src, "--json", "--commitlog-file-size", "4096", "--cq-file-size",
             "200"])
    assert r.exit_code == 0, r.stderr
    acks = [json.loads(x) for x in r.stdout.splitlines()]
    (ix,) = (store / "index").iterdir()
    assert ix.stat().st_size == 40 + 4 * 5_000_000 + 20 * 20_000_000
    # zero the slots in use (the rest are zero already: the file stays sparse)
    slots = np.memmap(ix, dtype=">i4", mode="r+", offset=40, shape=(5_000_000,))
    used = np.flatnonzero(slots)
    assert len(used) > 20
    slots[used] = 0
    slots.flush()
    del slots
    m = msgs[4]
    r = run(["query-key", "-s", store, "--topic", m["topic"], "--key", m["keys"][0]])
    assert r.exit_code == 3 and ix.name in r.stderr
    for cmd in (["info", "--json"], ["inspect-index", "--json"]):
        r = run([cmd[0], "-s", store, *cmd[1:]])
        assert r.exit_code in (0, 3) and "geometry" not in r.stderr, r.stderr
    assert json.loads(run(["info", "-s", store, "--json"]).stdout)["index"]["hashSlotNum"] == 5_000_000
    assert run(["recover", "-s", store, "--dry-run"]).exit_code == 0
    doc = doctor(store)
    assert [f["file"] for f in kinds(doc)["index-untrusted"]] == [f"index/{ix.name}"]
    run_fixes(store, doc)
    converged(store)
    assert_readable(store, msgs, acks)


# ---------------------------------------------------------------- items 9 and 11: the checkpoint

@pytest.mark.parametrize("content", [b"", b"\xff" * 8 + os.urandom(4088), b"\x00" * 40 + b"\x5a" * 4056],
                         ids=["empty", "random", "zeros-then-5a"])  # ids the same in every pytest-xdist worker
def test_bad_checkpoint_is_a_finding_not_a_read_failure(store, pristine, content):
    _s, msgs, acks = pristine
    (store / "checkpoint").write_bytes(content)
    m, a = msgs[7], acks[7]
    for args in (["queues", "--json"], ["query-key", "--topic", m["topic"], "--key", m["keys"][0]],
                 ["get", "--msg-id", m["uniqKey"]], ["info", "--json"]):
        r = run([args[0], "-s", store, *args[1:]])
        assert r.exit_code == 0, (args, r.stderr)
    cp = json.loads(run(["info", "-s", store, "--json"]).stdout)["checkpoint"]
    assert cp["readable"] is False and cp["problem"]
    doc = doctor(store)
    (f,) = kinds(doc)["checkpoint-unreadable"]
    assert f["fix"] and f["fix"].split()[1] == "recover"
    assert not any("it is rewritten" in n for n in doc["notes"])  # item 11: doctor does not claim to write
    run_fixes(store, doc)
    doc = converged(store)
    assert "checkpoint-unreadable" not in kinds(doc)
    assert_readable(store, msgs, acks)


# ---------------------------------------------------------------- item 10: names in index/

def test_non_numeric_entry_in_index_dir_is_reported(store):
    (store / "index" / "notes.txt").write_text("x")
    (store / "index" / "123").mkdir()
    k = kinds(doctor(store, code=3))
    assert {(f["file"], f["severity"]) for f in k["index-odd-file"]} == {("index/notes.txt", "warning"),
                                                                          ("index/123", "error")}
    (store / "index" / "notes.txt").unlink()
    (store / "index" / "123").rmdir()
    assert "index-odd-file" not in kinds(doctor(store, code=0))


# ---------------------------------------------------------------- item 13: consume-queue file lengths

def test_cut_consume_queue_file_is_an_error_and_padding_converges(store, pristine):
    _s, msgs, acks = pristine
    f = store / "consumequeue" / "TopicA" / "0" / "00000000000000000200"
    os.truncate(f, 60)  # its last file: 3 of its 5 units left
    doc = doctor(store, code=3)
    (x,) = kinds(doc)["cq-file-size"]
    assert (x["file"], x["severity"], x["fix"]) == ("consumequeue/TopicA/0/00000000000000000200", "error", None)
    assert f"truncate -s 200" in x["problem"]
    os.truncate(f, 200)  # the manual step the finding names
    doc = doctor(store, code=0)
    assert "cq-file-size" not in kinds(doc)
    run_fixes(store, doc)
    converged(store)
    assert_readable(store, msgs, acks)


def test_mixed_consume_queue_file_sizes_name_the_odd_file(store):
    f = store / "consumequeue" / "TopicB" / "2" / "00000000000000000000"
    with open(f, "ab") as fh:
        fh.write(bytes(6000 - 200))
    (x,) = kinds(doctor(store, code=3))["cq-file-size"]
    assert x["file"] == "consumequeue/TopicB/2/00000000000000000000"


@pytest.mark.parametrize("deep", [False, True])
def test_queue_without_files_is_dispatched_again_by_the_fix(store, pristine, deep):
    _s, msgs, acks = pristine
    for p in (store / "consumequeue" / "TopicB" / "1").iterdir():
        p.unlink()
    # The queue file size is given: recover takes the configured one (the store's, once recover takes it from
    # the files: issue 34 item 12).
    doc = doctor(store, "--cq-file-size", "200", *(["--deep"] if deep else []))
    k = kinds(doc)
    (x,) = k["cq-no-files"]
    assert (x["file"], x["severity"]) == ("consumequeue/TopicB/1", "warning")
    assert x["fix"].split()[1:2] == ["recover"] and "--full-scan" in x["fix"].split()
    if deep:
        assert "--full-scan" in k["cq-behind-log"][0]["fix"].split()
    run_fixes(store, doc)
    doc = doctor(store, "--deep", code=0)
    assert not {"cq-no-files", "cq-behind-log", "cq-file-size"} & set(kinds(doc))
    assert_readable(store, msgs, acks)


# ---------------------------------------------------------------- item 17: a consume-queue file of garbage

def test_garbage_consume_queue_file_is_damage_not_an_empty_queue(store):
    f = store / "consumequeue" / "TopicA" / "0" / "00000000000000000000"
    f.write_bytes(b"\xff" * 8 + os.urandom(192))
    r = run(["queues", "-s", store, "--topic", "TopicA", "--json"])
    assert r.exit_code == 3
    q = next(q for q in json.loads(r.stdout)["queues"] if q["queueId"] == 0)
    assert q["problems"] and "00000000000000000000" in q["problems"][0]
    r = run(["dump-cq", "-s", store, "--topic", "TopicA", "--queue-id", "0"])
    assert r.exit_code == 3 and "00000000000000000000" in r.stderr
    for x in kinds(doctor(store)).get("cq-past-log", []):  # item 6: filed under the file that holds the units
        assert x["file"] == "consumequeue/TopicA/0/00000000000000000000" and x["offset"] == 0
