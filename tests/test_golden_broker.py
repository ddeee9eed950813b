"""rmqtool against stores a real RocketMQ 5.3.x broker wrote (tests/golden/broker, tests/golden/timer/t2), and what
that broker and its clients answered on them: bodies as consumers received them, the pre-allocated segment of a
killed broker, the broker's logical truncation, UNIQ_KEY lookups across copies.
"""
from __future__ import annotations

import base64
import json

from helpers import BROKER_R1, BROKER_R2, TIMER_T2, copy_store, jsonl, run, unpack_store


def _body(j: dict, mode: str = "auto") -> bytes:
    if j.get("bodyEncoding") == "base64" or mode == "base64":
        return base64.b64decode(j["body"])
    if mode == "hex":
        return bytes.fromhex(j["body"])
    return j["body"].encode("utf-8")


def _lines(text: str) -> list[dict]:
    return [json.loads(x) for x in text.split("\n") if x]  # bodies may hold U+2028: never str.splitlines


# ------------------------------------------------------------------------------------------ compressed bodies


def test_every_delivery_body_equals_the_body_rmqtool_reads(r1_store, tmp_path):
    """consumed_G_ALL.jsonl: the body each delivery carried, for every record of r1 a consumer received (ZLIB,
    ZSTD and LZ4 bodies among them); `get --from-file` reads the same records."""
    delivered = jsonl(BROKER_R1 / "answers" / "consumed_G_ALL.jsonl")
    codecs = {d["sysFlag"] >> 8 & 7 for d in delivered if d["topic"] == "TopicBig"}
    assert codecs == {1, 2, 3}  # LZ4, ZSTD, ZLIB
    asked = tmp_path / "offsets.txt"
    asked.write_text("".join(f"{d['commitLogOffset']}\n" for d in delivered))
    r = run(["get", "-s", r1_store, "--from-file", asked, "--json"])
    assert r.exit_code == 0, r.stderr
    got = _lines(r.stdout)
    assert [g["commitLogOffset"] for g in got] == [d["commitLogOffset"] for d in delivered]
    seen = set()
    for d, g in zip(delivered, got):
        assert _body(g) == base64.b64decode(d["bodyB64"]), d["commitLogOffset"]
        assert g["bodyCRC"] == d["bodyCRC"] and "compressionError" not in g
        seen.add(g.get("compression"))
    assert seen == {None, "zlib", "zstd", "lz4"}


def _big(delivered=None) -> dict[int, bytes]:
    """commit-log offset -> the body the consumer received, for TopicBig (the compressed bodies)."""
    delivered = delivered or jsonl(BROKER_R1 / "answers" / "consumed_G_ALL.jsonl")
    return {d["commitLogOffset"]: base64.b64decode(d["bodyB64"]) for d in delivered if d["topic"] == "TopicBig"}


def test_dump_commitlog_decodes_bodies_in_every_body_mode_and_body_dir(r1_store, tmp_path):
    want = _big()
    for mode in ("auto", "utf8", "hex", "base64", "none"):
        r = run(["dump-commitlog", "-s", r1_store, "--topic", "TopicBig", "--json", "--body", mode])
        assert r.exit_code == 0, r.stderr
        got = {j["commitLogOffset"]: j for j in _lines(r.stdout) if j["type"] == "MESSAGE"}  # BLANKs are shown too
        assert set(got) == set(want)
        for off, j in got.items():
            if mode == "none":
                assert j["body"] is None
            elif mode == "utf8":
                assert j["body"] == want[off].decode("utf-8", "replace")
            else:
                assert _body(j, mode) == want[off], (mode, off)
    out = tmp_path / "bodies"
    r = run(["dump-commitlog", "-s", r1_store, "--topic", "TopicBig", "--body-dir", out])
    assert r.exit_code == 0, r.stderr
    assert {int(p.stem): p.read_bytes() for p in out.glob("*.body")} == want


def test_query_key_print_msg_and_tiered_get_show_decoded_bodies(r1_store, tmp_path):
    delivered = jsonl(BROKER_R1 / "answers" / "consumed_G_ALL.jsonl")
    want = _big(delivered)
    for d in (d for d in delivered if d["topic"] == "TopicBig"):
        r = run(["query-key", "-s", r1_store, "--topic", "TopicBig", "--key", d["keys"].split(" ")[0], "--json"])
        assert r.exit_code == 0, r.stderr
        assert [_body(j) for j in _lines(r.stdout)] == [want[d["commitLogOffset"]]]
    r = run(["print-msg", "-s", r1_store, "--topic", "TopicBig", "--begin", "0", "--end", "now", "--json"])
    assert r.exit_code == 0, r.stderr
    assert {j["commitLogOffset"]: _body(j) for j in _lines(r.stdout)} == want

    flat, meta = tmp_path / "flat", tmp_path / "meta.json"
    where = ["-T", flat, "--metadata", meta, "--cluster-name", "C", "--broker-name", "B"]
    r = run(["tiered", "dispatch", "-s", r1_store, *where, "-t", "TopicBig", "--master", "inline"])
    assert r.exit_code == 0, r.output
    by_key = {d["keys"]: want[d["commitLogOffset"]] for d in delivered if d["topic"] == "TopicBig"}
    got = {}
    for q in range(4):
        r = run(["tiered", "get", *where, "-t", "TopicBig", "-q", q, "-i", 0, "-n", 32, "--json"])
        assert r.exit_code == 0, r.output
        got.update({" ".join(m["keys"]): _body(m) for m in json.loads(r.stdout)["messages"]})
    assert got == by_key


# ------------------------------------------------------------------------------------------ the pre-allocated segment


def _admin(where) -> dict:
    return json.loads((where / "answers" / "admin.json").read_text())


def _dump(store, *extra) -> tuple[int, list[dict], str]:
    r = run(["dump-commitlog", "-s", store, "--json", *extra])
    return r.exit_code, _lines(r.stdout), r.stderr


def test_a_killed_brokers_preallocated_segment_is_the_end_of_data(r2_stores, tmp_path):
    """A broker killed with -9 leaves the next commit-log segment allocated and all zero (r2/killed: 0 blocks;
    timer/t2 likewise): the end of data, as the broker's recovery reads it, not damage."""
    killed = r2_stores["killed"]
    assert not any((killed / "commitlog" / "00000000000003145728").read_bytes())
    code, entries, err = _dump(killed, "--body", "none")
    assert code == 0, err
    assert {e["type"] for e in entries} == {"MESSAGE", "BLANK"}
    last = entries[-1]
    # the broker that restarted on a copy of it answered commitLogMaxOffset = the end of the last record
    assert last["commitLogOffset"] + last["storeSize"] == int(_admin(BROKER_R2 / "killed")["brokerRuntime"]
                                                             ["commitLogMaxOffset"])

    t2 = unpack_store(TIMER_T2 / "store.tar.gz", tmp_path / "t2")
    code, entries, err = _dump(t2, "--body", "none")
    assert code == 0 and entries and {e["type"] for e in entries} == {"MESSAGE"}, err
    assert sorted(p.name for p in (t2 / "commitlog").iterdir())[-1] == "00000000000016777216"


def test_data_after_a_zero_area_is_still_damage(r2_stores, tmp_path):
    """The rule is the broker's: segments that hold nothing but zeros after the data. One byte written in the
    pre-allocated segment makes the zero tail before it a missing BLANK filler again (the broker would cut there)."""
    store = copy_store(r2_stores["killed"], tmp_path / "s")
    with open(store / "commitlog" / "00000000000003145728", "r+b") as f:
        f.seek(500_000)
        f.write(b"\x01")
    code, entries, err = _dump(store, "--body", "none")
    assert code == 3
    bad = [e for e in entries if e["type"] == "CORRUPT"]
    assert [e["commitLogOffset"] for e in bad] == [2117276] and "no BLANK filler" in bad[0]["reason"]


def test_recover_deletes_the_preallocated_segment_as_the_broker_does(r2_stores, tmp_path):
    store = copy_store(r2_stores["killed"], tmp_path / "s")
    r = run(["recover", "-s", store, "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert plan["commitLog"]["segmentsDeleted"] == ["00000000000003145728"]
    assert (store / "commitlog" / "00000000000003145728").exists()
    r = run(["recover", "-s", store])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (store / "commitlog").iterdir()) == [
        "00000000000000000000", "00000000000001048576", "00000000000002097152"]
    code, entries, err = _dump(store, "--body", "none")
    assert code == 0 and entries[-1]["commitLogOffset"] + entries[-1]["storeSize"] == 2117276


def test_a_preallocated_segment_written_with_zeros_is_unwritten_too(r2_stores, tmp_path):
    """warmMapedFileEnable=true makes the broker write the zeros of the segment it allocates ahead: no holes, still
    nothing written."""
    store = copy_store(r2_stores["killed"], tmp_path / "s")
    seg = store / "commitlog" / "00000000000003145728"
    seg.write_bytes(bytes(seg.stat().st_size))
    assert seg.stat().st_blocks * 512 >= seg.stat().st_size
    code, entries, err = _dump(store, "--body", "none")
    assert code == 0, err
