"""dump-commitlog's filters (issue 14 item 5): --topic, --begin/--end, --from-offset/--to-offset, --files, --body,
--body-dir and --max-message-size, through the CLI on stores written by `put` and on the golden commit log."""
from __future__ import annotations

import base64
import json
import shutil
from datetime import datetime

import pytest

from helpers import GOLDEN, assert_one_line_error, built_store, put_jsonl, run, said, snapshot

T0 = 1_700_000_000_000
BODY_AT = 88      # where the body starts in a v4-host record (format §2.2)


def sample(n=60):
    return [{"topic": "TopicU" if i % 3 == 0 else "TopicT", "queueId": i % 2, "storeTimestamp": T0 + i * 1000,
             "body": f"body {i}", "keys": f"k{i}"} for i in range(n)]


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "store"
    return root, built_store(f"{__name__}.store", root, lambda r: put_jsonl(r, sample()))  # put once per run


def jlines(r):
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def messages(r):
    return [j for j in jlines(r) if j["type"] == "MESSAGE"]


def seg_name(off):
    return f"{off - off % 4096:020d}"


def flip_body(root, ack):
    seg = root / "commitlog" / seg_name(ack["commitLogOffset"])
    data = bytearray(seg.read_bytes())
    data[ack["commitLogOffset"] % 4096 + BODY_AT] ^= 0xFF
    seg.write_bytes(bytes(data))


def test_topic_and_time_filters(store):
    root, acks = store
    r = run(["dump-commitlog", "-s", root, "--topic", "TopicU", "--json"])
    assert r.exit_code == 0, r.output
    assert [m["commitLogOffset"] for m in messages(r)] == [a["commitLogOffset"] for a in acks if a["topic"] == "TopicU"]
    assert {j["type"] for j in jlines(r)} <= {"MESSAGE", "BLANK"}
    r = run(["dump-commitlog", "-s", root, "--begin", T0 + 10_000, "--end", T0 + 14_000, "--json"])
    assert [m["storeTimestamp"] for m in messages(r)] == [T0 + i * 1000 for i in range(10, 15)]
    r = run(["dump-commitlog", "-s", root, "--topic", "TopicT", "--begin", T0 + 10_000, "--end", T0 + 14_000, "--json"])
    assert [m["storeTimestamp"] for m in messages(r)] == [T0 + i * 1000 for i in (10, 11, 13, 14)]
    r = run(["dump-commitlog", "-s", root, "--topic", "Nope", "--json"])
    assert_one_line_error(r, 2, "topic 'Nope' is not in the store")  # a typo is no empty answer (issue 23 item 6)
    assert r.stdout == "" and "'TopicT'" in r.stderr and "'TopicU'" in r.stderr


def test_end_given_as_a_date_means_the_end_of_that_day(tmp_path):
    day = datetime(2024, 3, 5).astimezone()
    last = int(datetime(2024, 3, 5, 23, 59, 59, 999000).astimezone().timestamp() * 1000)
    first = int(day.timestamp() * 1000)
    root = tmp_path / "s"
    put_jsonl(root, [{"topic": "T", "storeTimestamp": t, "body": "x"} for t in (first - 1, first, last, last + 1)])
    r = run(["dump-commitlog", "-s", root, "--begin", "2024-03-05", "--end", "2024-03-05", "--json"])
    assert r.exit_code == 0, r.output
    assert [m["storeTimestamp"] for m in messages(r)] == [first, last]
    r = run(["dump-commitlog", "-s", root, "--begin", "now-1h", "--json"])
    assert r.exit_code == 0 and messages(r) == []


def test_offset_range_seeks_and_the_from_alias_still_works(store):
    root, acks = store
    a, b = acks[3]["commitLogOffset"], acks[9]["commitLogOffset"]
    r = run(["dump-commitlog", "-s", root, "--from-offset", a, "--to-offset", b, "--json"])
    assert r.exit_code == 0, r.output
    assert [m["commitLogOffset"] for m in messages(r)] == [x["commitLogOffset"] for x in acks[3:9]]
    # --to-offset need not be a record boundary: records starting before it are shown
    r = run(["dump-commitlog", "-s", root, "--from-offset", a, "--to-offset", b + 1, "--json"])
    assert messages(r)[-1]["commitLogOffset"] == b
    # damage before the range is never read, damage inside it is reported (exit 3)
    flip_body(root, acks[1])
    r = run(["dump-commitlog", "-s", root, "--from-offset", a, "--to-offset", b, "--json"])
    assert r.exit_code == 0 and "CORRUPT" not in r.stdout
    r = run(["dump-commitlog", "-s", root, "--to-offset", b, "--json"])
    assert r.exit_code == 3 and [j["commitLogOffset"] for j in jlines(r) if j["type"] == "CORRUPT"] == \
        [acks[1]["commitLogOffset"]]


def test_from_offset_inside_a_record_names_the_records_around_it(store):
    root, acks = store
    a, b = acks[1]["commitLogOffset"], acks[2]["commitLogOffset"]
    r = run(["dump-commitlog", "-s", root, "--from-offset", a + 4])
    assert_one_line_error(r, 2, f"(records start at {a} and {b})")
    last = [x for x in acks if seg_name(x["commitLogOffset"]) == seg_name(0)][-1]
    r = run(["dump-commitlog", "-s", root, "--from-offset", 4090])   # in the BLANK filler's zero tail
    assert_one_line_error(r, 2, f"the last record of its segment starts at {last['commitLogOffset']}; the next "
                          "segment starts at 4096")


def test_files_dump_only_those_segments(store):
    root, acks = store
    names = sorted(p.name for p in (root / "commitlog").iterdir())
    assert len(names) >= 3
    r = run(["dump-commitlog", "-s", root, "--files", names[1], "--json"])
    assert r.exit_code == 0, r.output
    want = [x["commitLogOffset"] for x in acks if seg_name(x["commitLogOffset"]) == names[1]]
    assert [m["commitLogOffset"] for m in messages(r)] == want
    assert [j["type"] for j in jlines(r)][-1] == "BLANK"
    r = run(["dump-commitlog", "-s", root, "--files", f"{names[2]},{names[0]}", "--topic", "TopicU", "--json"])
    want = [x["commitLogOffset"] for x in acks if seg_name(x["commitLogOffset"]) in (names[0], names[2])
            and x["topic"] == "TopicU"]
    assert [m["commitLogOffset"] for m in messages(r)] == want
    r = run(["dump-commitlog", "-s", root, "--files", str(root / "commitlog" / names[1]), "--files", names[1],
             "--json"])
    in_one = [x for x in acks if seg_name(x["commitLogOffset"]) == names[1]]
    assert r.exit_code == 0 and len(messages(r)) == len(in_one)
    # the range and the files together: their intersection
    a = next(x for x in acks if seg_name(x["commitLogOffset"]) == names[1])
    r = run(["dump-commitlog", "-s", root, "--files", names[0], "--from-offset", a["commitLogOffset"], "--json"])
    assert r.exit_code == 0 and jlines(r) == []
    # damage in another file is not read
    flip_body(root, acks[1])
    assert run(["dump-commitlog", "-s", root, "--files", names[1]]).exit_code == 0


def test_body_modes(store):
    root, acks = store
    a = acks[4]
    base = ["dump-commitlog", "-s", root, "--from-offset", a["commitLogOffset"], "--count", "1", "--json"]
    raw = b"body 4"
    j = jlines(run(base + ["--body", "hex"]))[0]
    assert (j["body"], j["bodyEncoding"]) == (raw.hex(), "hex")
    j = jlines(run(base + ["--body", "base64"]))[0]
    assert (base64.b64decode(j["body"]), j["bodyEncoding"]) == (raw, "base64")
    j = jlines(run(base + ["--body", "utf8"]))[0]
    assert j["body"] == "body 4" and "bodyEncoding" not in j
    j = jlines(run(base + ["--body", "none"]))[0]
    assert j["body"] is None and j["commitLogOffset"] == a["commitLogOffset"]
    assert jlines(run(base))[0]["body"] == "body 4"


def test_body_dir_writes_one_file_per_message(store, tmp_path):
    root, acks = store
    out = tmp_path / "bodies"
    r = run(["dump-commitlog", "-s", root, "--topic", "TopicU", "--body-dir", out, "--json"])
    assert r.exit_code == 0, r.output
    want = {f"{x['commitLogOffset']:020d}.body": f"body {i}".encode() for i, x in enumerate(acks)
            if x["topic"] == "TopicU"}
    assert {p.name: p.read_bytes() for p in out.iterdir()} == want
    (written,) = said(r, "bodies-written")
    assert (written["bodies"], written["storedOnly"], written["dir"]) == (len(want), 0, str(out))


@pytest.mark.parametrize("where", ["store", "store/commitlog", "store/sub/dir"])
def test_body_dir_inside_the_store_is_refused(store, where):
    root, _ = store
    before = snapshot(root)
    target = root.parent / where
    r = run(["dump-commitlog", "-s", root, "--body-dir", target])
    assert_one_line_error(r, 2, "inside the store")
    assert snapshot(root) == before and (where != "store/sub/dir" or not target.exists())


def test_body_dir_through_a_symlink_into_the_store_is_refused(store, tmp_path):
    root, _ = store
    link = tmp_path / "link"
    link.symlink_to(root / "commitlog")
    before = snapshot(root)
    assert_one_line_error(run(["dump-commitlog", "-s", root, "--body-dir", link]), 2, "inside the store")
    assert snapshot(root) == before


def test_body_dir_must_be_new_or_empty(store, tmp_path):
    root, _ = store
    d = tmp_path / "full"
    d.mkdir()
    (d / "keep").write_text("mine")
    assert_one_line_error(run(["dump-commitlog", "-s", root, "--body-dir", d]), 2, "not empty")
    assert [p.name for p in d.iterdir()] == ["keep"]


def test_max_message_size_reports_bigger_records_as_corrupt(tmp_path):
    root = tmp_path / "s"
    acks = put_jsonl(root, [{"topic": "T", "body": "x" * (500 if i == 2 else 10)} for i in range(5)])
    r = run(["dump-commitlog", "-s", root, "--max-message-size", "300", "--json"])
    assert r.exit_code == 3
    kinds = [(j["type"], j["commitLogOffset"]) for j in jlines(r)]
    assert kinds[:3] == [("MESSAGE", acks[0]["commitLogOffset"]), ("MESSAGE", acks[1]["commitLogOffset"]),
                         ("CORRUPT", acks[2]["commitLogOffset"])]
    assert "above the maximum message size 300" in jlines(r)[2]["reason"]
    assert all(o != acks[3]["commitLogOffset"] for _k, o in kinds)   # its size was not trusted to skip it
    assert run(["dump-commitlog", "-s", root, "--max-message-size", "4096"]).exit_code == 0


@pytest.mark.parametrize("args,contains", [
    (["--begin", "2024-03-06", "--end", "2024-03-05"], "is after --end"),
    (["--begin", "yesterday"], "--begin"),
    (["--begin", "1700000000"], "--begin"),                       # epoch seconds: refused with a hint
    (["--from-offset", "5"], "not a record boundary: bad magic code"),
    (["--from-offset", "-3"], "negative"),
    (["--from-offset", "100", "--to-offset", "100"], "not above --from-offset"),
    (["--from", "0"], "no such option"),                          # the old spelling of --from-offset is gone
    (["--files", "00000000000000000001"], "not a commit-log segment of this store"),
    (["--files", "/etc/passwd"], "not a commit-log segment"),
    (["--files", "../../00000000000000000000"], "not a commit-log segment"),
    (["--files", "/tmp/00000000000000000000"], "not a commit-log segment"),
    (["--body", "raw", "--json"], "--body 'raw'"),
    (["--body", "hex"], "add --json"),
    (["--max-message-size", "0"], "--max-message-size 0 is out of range"),
    (["--max-message-size", str(2**31)], "out of range"),
    (["--count", "0"], "--count 0 is out of range"),
    (["--topic", ""], "--topic is empty"),
])
def test_bad_filters_are_one_line_errors(store, args, contains):
    root, _ = store
    before = snapshot(root)
    r = run(["dump-commitlog", "-s", root, *args])
    assert_one_line_error(r, 2, contains)
    assert r.stdout == ""
    assert snapshot(root) == before


# ------------------------------------------------------------------------------------------- golden

G = GOLDEN / "commitlog"
EXPECTED = [json.loads(line) for line in (G / "messages.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture
def golden(tmp_path):
    d = tmp_path / "g" / "commitlog"
    d.mkdir(parents=True)
    for name in ("00000000000000000000", "00000000000000004096"):
        shutil.copy(G / name, d / name)
    return tmp_path / "g"


def test_golden_filters(golden, tmp_path):
    msgs = [m for m in EXPECTED if m["type"] == "MESSAGE"]
    r = run(["dump-commitlog", "-s", golden, "--files", "00000000000000004096", "--json", "--body", "hex"])
    assert r.exit_code == 0, r.output
    got = messages(r)
    assert [m["commitLogOffset"] for m in got] == [m["physicalOffset"] for m in msgs if m["physicalOffset"] >= 4096]
    by_off = {m["physicalOffset"]: m for m in msgs}
    r = run(["dump-commitlog", "-s", golden, "--json", "--body", "hex"])
    for j in messages(r):
        x = by_off[j["commitLogOffset"]]
        assert j["body"] == x.get("uncompressedBodyHex", x["bodyHex"]), x
    long_topic = next(m["topic"] for m in msgs if len(m["topic"]) == 150)
    r = run(["dump-commitlog", "-s", golden, "--topic", long_topic, "--json"])
    assert [m["commitLogOffset"] for m in messages(r)] == [m["physicalOffset"] for m in msgs if m["topic"] == long_topic]
    ts = sorted(m["storeTimestamp"] for m in msgs)
    r = run(["dump-commitlog", "-s", golden, "--begin", ts[2], "--end", ts[4], "--json"])
    assert sorted(m["storeTimestamp"] for m in messages(r)) == ts[2:5]
    out = tmp_path / "gb"
    assert run(["dump-commitlog", "-s", golden, "--body-dir", out]).exit_code == 0
    for m in msgs:
        want = bytes.fromhex(m.get("uncompressedBodyHex", m["bodyHex"]))
        assert (out / f"{m['physicalOffset']:020d}.body").read_bytes() == want
