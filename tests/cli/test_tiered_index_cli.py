"""CLI tests for tiered index files: tiered inspect-index and tiered compact-index on files and directories, and the
key query of a tiered_index_file directory (engine.tiered.index.query_tiered_key; its old CLI spelling,
query-key --tiered-dir, is gone: CHANGELOG.md).

Expectations come from the golden vectors written by RocketMQ's own Java classes (tests/golden/tiered/t2_full)
and from format §9; the flat commit log used for verification is laid out here by hand after
format §9.1 / the POSIX backend (md5 prefixes computed with hashlib, not with the engine).
"""
from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import pytest

from helpers import GOLDEN, assert_one_line_error, put_jsonl, run, snapshot

#: The keys of a located problem (engine.findings) in every --json verify.
FINDING_KEYS = {"kind", "severity", "file", "offset", "problem", "brokerWill"}

T2 = GOLDEN / "tiered" / "t2_full"
PARAMS = json.loads((T2 / "params.json").read_text())
QUERIES = [json.loads(line) for line in (T2 / "queries.jsonl").read_text().splitlines() if line.strip()]
PUTS = [json.loads(line) for line in (T2 / "puts.jsonl").read_text().splitlines() if line.strip()]
BEGIN = PARAMS["beginTimestamp"]
K0_HASH = 1903091695  # stored (sign-flipped) hash of TopicF#k0, from queries.jsonl
SLOTS = PARAMS["tieredStoreIndexFileMaxHashSlotNum"]


def jlines(r) -> list[dict]:
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def pairs(items) -> set[tuple[int, int]]:
    return {(i["queueId"], i["offset"]) for i in items}


@pytest.fixture
def work(tmp_path) -> Path:
    for name in ("unsealed.bin", "compacted.bin"):
        shutil.copy(T2 / name, tmp_path / name)
    return tmp_path


@pytest.fixture
def tdir(tmp_path) -> Path:
    """A tiered_index_file directory holding the golden unsealed file under its begin timestamp."""
    d = tmp_path / "tiered_index_file"
    d.mkdir()
    shutil.copy(T2 / "unsealed.bin", d / str(BEGIN))
    return d


# ---------------------------------------------------------------- inspect-index


@pytest.mark.parametrize("name,layout,size", [("unsealed.bin", "unsealed", PARAMS["unsealedFileSize"]),
                                              ("compacted.bin", "compacted", PARAMS["compactedSize"])])
def test_inspect_header_of_both_layouts(work, name, layout, size):
    r = run(["tiered", "inspect-index", work / name, "--json"])
    assert r.exit_code == 0, r.output
    h = json.loads(r.stdout)
    assert h["layout"] == layout and h["file"] == name
    assert h["magic"] == PARAMS["END_MAGIC_CODE"] and h["magicName"] == "END"
    assert h["beginTimestamp"] == PARAMS["beginTimestamp"] and h["endTimestamp"] == PARAMS["endTimestamp"]
    assert h["hashSlotCount"] == PARAMS["hashSlotCount"] and h["indexItemCount"] == PARAMS["indexItemCount"]
    assert h["hashSlotNum"] == SLOTS and h["fileSize"] == size
    if layout == "unsealed":
        assert h["indexNum"] == PARAMS["tieredStoreIndexFileMaxIndexNum"]
    t = run(["tiered", "inspect-index", work / name])
    assert t.exit_code == 0 and layout in t.stdout and "END" in t.stdout and str(PARAMS["indexItemCount"]) in t.stdout


def test_inspect_tiered_dir_lists_numeric_files(work, tdir):
    shutil.copy(T2 / "compacted.bin", tdir / str(BEGIN + 5))
    (tdir / "notes.txt").write_text("ignored: not numeric")
    r = run(["tiered", "inspect-index", "--tiered-dir", tdir, "--json"])
    assert r.exit_code == 0, r.output
    rows = jlines(r)
    assert [(x["file"], x["layout"]) for x in rows] == [(str(BEGIN), "unsealed"), (str(BEGIN + 5), "compacted")]


def test_walk_slot_unsealed_chain_equals_compacted_range(work):
    slot = K0_HASH % SLOTS
    u = json.loads(run(["tiered", "inspect-index", work / "unsealed.bin", "--walk-slot", slot, "--json"]).stdout)
    c = json.loads(run(["tiered", "inspect-index", work / "compacted.bin", "--walk-slot", slot, "--json"]).stdout)
    assert u["stop"] == "end" and c["stop"] == "end"
    assert u["items"] and all(i["slot"] == slot for i in u["items"])
    # Compaction copies each chain newest first (format §9.4): same items, same order.
    strip = [(i["hashCode"], i["queueId"], i["offset"], i["size"], i["timeDiff"]) for i in u["items"]]
    assert strip == [(i["hashCode"], i["queueId"], i["offset"], i["size"], i["timeDiff"]) for i in c["items"]]
    assert c["itemsLength"] == 28 * len(c["items"])
    # The chain ends at an item whose itemIndex is 0, and every link points to an older item.
    nums = [i["item"] for i in u["items"]]
    assert nums == sorted(nums, reverse=True) and u["items"][-1]["itemIndex"] == 0
    # --walk-key hashes TOPIC#KEY with the tiered rules and lands on the same slot; the k0 items are those
    # the Java query returned for the full window.
    w = json.loads(run(["tiered", "inspect-index", work / "unsealed.bin", "--walk-key", "TopicF#k0", "--json"]).stdout)
    assert w["slot"] == slot and w["hashCode"] == K0_HASH
    full = next(q for q in QUERIES if q["key"] == "k0" and q["maxCount"] == 64 and q["beginTime"] == 0
                and q["endTime"] == 2**63 - 1)
    assert pairs(i for i in w["items"] if i["hashCode"] == K0_HASH) == pairs(full["unsealed"])
    t = run(["tiered", "inspect-index", work / "compacted.bin", "--walk-key", "TopicF#k0"])
    assert t.exit_code == 0 and sum(ln.split()[-1:] == ["match"] for ln in t.stdout.splitlines()) == len(full["unsealed"]) and "other key" in t.stdout
    assert "stopped:" in t.stdout


def test_walk_limit_and_min_value_key(work):
    r = run(["tiered", "inspect-index", work / "unsealed.bin", "--walk-slot", "14", "--count", "2", "--json"])
    w = json.loads(r.stdout)
    assert len(w["items"]) == 2 and w["stop"] == "limit"
    # Integer.MIN_VALUE % 16 == 0: the key lands in slot 0 and its stored hash stays negative.
    m = json.loads(run(["tiered", "inspect-index", work / "unsealed.bin", "--walk-key", f"TopicF#{PARAMS['minValueKey']}",
                        "--json"]).stdout)
    assert m["slot"] == 0 and m["hashCode"] == -(2**31)
    assert any(i["hashCode"] == -(2**31) for i in m["items"])


def test_stats_both_layouts(work):
    su = json.loads(run(["tiered", "inspect-index", work / "unsealed.bin", "--stats", "--json"]).stdout)["stats"]
    sc = json.loads(run(["tiered", "inspect-index", work / "compacted.bin", "--stats", "--json"]).stdout)["stats"]
    n = PARAMS["indexItemCount"]
    for s in (su, sc):
        assert s["chainedItems"] == n and s["usedSlots"] == PARAMS["hashSlotCount"] and s["emptySlots"] == 0
        assert sum(int(k) * v for k, v in s["chainLengthHistogram"].items()) == n
    assert su["chainLengthHistogram"] == sc["chainLengthHistogram"]
    assert su["layout"] == "unsealed" and sc["layout"] == "compacted"
    t = run(["tiered", "inspect-index", work / "unsealed.bin", "--stats"])
    assert t.exit_code == 0 and "chain-length histogram" in t.stdout


def test_verify_ok_on_golden_and_exit_3_on_damage(work):
    for name in ("unsealed.bin", "compacted.bin"):
        r = run(["tiered", "inspect-index", work / name, "--verify", "--json"])
        assert r.exit_code == 0, r.output
        v = json.loads(r.stdout)["verify"]
        assert v["ok"] and v["findings"] == [] and v["indexItemCount"] == PARAMS["indexItemCount"]
    # Unsealed: a slot head beyond indexItemCount.
    d = bytearray((work / "unsealed.bin").read_bytes())
    struct.pack_into(">i", d, 28 + 8 * 3, 150)
    (work / "bad_unsealed").write_bytes(bytes(d))
    # (Geometry inference refuses a slot table pointing past indexItemCount, so the geometry is given.)
    r = run(["tiered", "inspect-index", work / "bad_unsealed", "--verify", "--hash-slots", SLOTS])
    assert r.exit_code == 3, r.output
    assert "slot" in r.stdout and "problem" in r.stdout
    # Compacted: slot 3's range length no longer a multiple of 28.
    c = bytearray((work / "compacted.bin").read_bytes())
    start, length = struct.unpack_from(">ii", c, 28 + 8 * 3)
    struct.pack_into(">i", c, 28 + 8 * 3 + 4, length - 1)
    (work / "bad_compacted").write_bytes(bytes(c))
    r = run(["tiered", "inspect-index", work / "bad_compacted", "--verify", "--json"])
    assert r.exit_code == 3
    v = json.loads(r.stdout.splitlines()[0])["verify"]
    assert not v["ok"] and v["problemCount"] == len(v["findings"]) > 0
    assert all(set(p) == FINDING_KEYS and (p["kind"], p["severity"], p["file"]) == ("tiered-index-file", "error",
                                                                                  "bad_compacted")
               for p in v["findings"])
    assert any("28" in p["problem"] for p in v["findings"])


# ---------------------------------------------------------------- compact-index


def test_compact_index_is_byte_identical_to_java(work):
    before = snapshot(work)
    out = work / "out" / "c.bin"
    out.parent.mkdir()
    r = run(["tiered", "compact-index", work / "unsealed.bin", "--out", out, "--json"])
    assert r.exit_code == 0, r.output
    assert out.read_bytes() == (T2 / "compacted.bin").read_bytes()
    s = json.loads(r.stdout)
    assert s["bytesBefore"] == PARAMS["unsealedFileSize"] and s["bytesAfter"] == PARAMS["compactedSize"]
    assert s["itemsWritten"] == s["indexItemCount"] == PARAMS["indexItemCount"] and s["hashSlotNum"] == SLOTS
    after = snapshot(work)
    assert {k: after[k] for k in before} == before  # the input (and its neighbours) untouched
    assert sorted(p.name for p in out.parent.iterdir()) == ["c.bin"]  # no temporary file left behind
    # An existing --out is kept unless --force.
    out.write_bytes(b"keep me")
    r = run(["tiered", "compact-index", work / "unsealed.bin", "--out", out])
    assert_one_line_error(r, contains="--force")
    assert out.read_bytes() == b"keep me"
    r = run(["tiered", "compact-index", work / "unsealed.bin", "--out", out, "--force"])
    assert r.exit_code == 0 and "2928" in r.stdout
    assert out.read_bytes() == (T2 / "compacted.bin").read_bytes()
    # The mapped form equals the uploaded bytes when every item is reachable (params: ...EqualsReturnedBuffer).
    r = run(["tiered", "compact-index", work / "unsealed.bin", "--out", work / "m.bin", "--mapped"])
    assert r.exit_code == 0 and (work / "m.bin").read_bytes() == (T2 / "compacted.bin").read_bytes()
    # The output is recognised as a compacted tiered file.
    h = json.loads(run(["tiered", "inspect-index", out, "--json"]).stdout)
    assert h["layout"] == "compacted" and h["status"] == "UPLOAD"


def test_compact_index_bad_inputs_write_nothing(work, tmp_path):
    (work / "trunc").write_bytes((T2 / "unsealed.bin").read_bytes()[:3000])
    broker = GOLDEN / "indexfile" / "a_small" / "index.bin"
    before = snapshot(work)
    cases = [
        ([work / "compacted.bin"], "already compacted"),
        ([broker], "not a tiered index file"),
        ([work / "trunc"], "truncated"),
        ([work / "missing"], "does not exist"),
        ([work / "unsealed.bin", "--hash-slots", "15"], "hash_slot_num=15"),
    ]
    for args, text in cases:
        assert_one_line_error(run(["tiered", "compact-index", *args, "--out", work / "o.bin"]), contains=text)
    assert_one_line_error(run(["tiered", "compact-index", work / "unsealed.bin", "--out", work / "nodir" / "o.bin"]),
                          contains="does not exist")
    assert_one_line_error(run(["tiered", "compact-index", work / "unsealed.bin", "--out", work / "unsealed.bin", "--force"]),
                          contains="input")
    assert snapshot(work) == before


# ---------------------------------------------------------------- query-key --tiered-dir


#: The answers' options as TieredKeyQuery fields (the old `query-key --tiered-dir` spelled them so).
ASK_OPTIONS = {"--begin": ("begin", int), "--end": ("end", int), "--count": ("max_num", int),
               "--tiered-metadata": ("tiered_metadata", Path), "--topic-id": ("topic_id", int),
               "--store": ("store", Path), "--tiered-store-path": ("tiered_store_path", Path),
               "--cluster-name": ("cluster_name", str), "--hash-slots": ("hash_slots", int),
               "--max-index": ("max_index", int), "--tiered-hash-slots": ("tiered_hash_slots", int)}


def ask(tdir, topic, key, *extra):
    """query_tiered_key over a tiered_index_file directory, answered as a run: its items (and with --explain its
    rejected ones) as JSON lines on stdout, its notes on stderr; exit 2 with one error line on bad input."""
    from types import SimpleNamespace

    from engine.errors import StoreError
    from engine.tiered.index import TieredKeyQuery, query_tiered_key

    fields = dict(max_num=64, begin=0, end=2**63 - 1)
    flags, args = {"--raw": "raw", "--unique-key": "unique", "--explain": None}, list(extra)
    explain = False
    while args:
        opt = args.pop(0)
        if opt in flags:
            explain |= opt == "--explain"
            if flags[opt]:
                fields[flags[opt]] = True
            continue
        name, conv = ASK_OPTIONS[opt]
        fields[name] = conv(args.pop(0))
    try:
        ans = query_tiered_key(TieredKeyQuery(Path(tdir), topic, key, **fields))
    except (StoreError, OSError, ValueError) as e:  # what rmqtool.cli.handles_errors answers with exit 2
        return SimpleNamespace(exit_code=2, stdout="", stderr=f"error: {e}\n", output=f"error: {e}\n",
                               exception=None, notes=[])
    lines = [json.dumps(i) for i in ans.items] + ([json.dumps({"rejected": r}) for r in ans.rejected]
                                                  if explain else [])
    return SimpleNamespace(exit_code=0, stdout="".join(f"{x}\n" for x in lines), stderr="".join(
        f"{n}\n" for n in ans.notes), output="", exception=None, notes=ans.notes)


def noted(r, kind: str) -> list[dict]:
    """The fields of the notes of `kind` an answer of ask() has (engine.findings.Note)."""
    return [n.fields for n in r.notes if getattr(n, "kind", None) == kind]


def tquery(tdir, key, *extra, topic="TopicF"):
    """The answer of query_tiered_key and its kept items."""
    r = ask(tdir, topic, key, *extra)
    assert r.exit_code == 0, r.output
    return r, [x for x in jlines(r) if "rejected" not in x]


def selectable(q) -> bool:
    # format §9.7: a file is queried only when its begin timestamp (file name) lies in [begin, end].
    return q["beginTime"] <= BEGIN <= q["endTime"] and isinstance(q["unsealed"], list)


def test_query_tiered_dir_reproduces_java_unsealed_answers(tdir):
    checked = 0
    for q in filter(selectable, QUERIES):
        r, items = tquery(tdir, q["key"], "--begin", q["beginTime"], "--end", q["endTime"], "--count", q["maxCount"])
        want = pairs(q["unsealed"])
        if len(q["unsealed"]) <= q["maxCount"]:
            assert pairs(items) == want, q
        else:
            # The file may return maxCount+1 items; the service merge keeps maxCount of them.
            assert len(items) == q["maxCount"] and pairs(items) <= want, q
        for it in items:
            assert it["file"] == str(BEGIN) and it["time"] == BEGIN + it["timeDiff"] * 1000
            assert it["time"] <= q["endTime"] and it["time"] >= q["beginTime"]
        checked += 1
    assert checked >= 8
    # Unverified answers say so on stderr.
    r, items = tquery(tdir, "k0")
    assert len(items) == 4 and [n["items"] for n in noted(r, "items-unverified")] == [4]


def test_query_file_selection_and_merge_across_files(tdir):
    # begin after the file's begin timestamp: the file is not a candidate even though items match in time.
    late = next(q for q in QUERIES if q["key"] == "k0" and q["beginTime"] > BEGIN and q["unsealed"])
    r, items = tquery(tdir, "k0", "--begin", late["beginTime"])
    (none,) = noted(r, "no-item")   # the file is not selected: its begin timestamp is before --begin
    assert items == [] and (none["filesSelected"], none["candidates"]) == (0, 0) and none["filesTotal"] >= 1
    # A compacted copy under another timestamp answers the same items: merged by queueId-offset, not doubled.
    shutil.copy(T2 / "compacted.bin", tdir / str(BEGIN + 1))
    _, items = tquery(tdir, "k0")
    full = next(q for q in QUERIES if q["key"] == "k0" and q["maxCount"] == 64 and q["beginTime"] == 0
                and q["endTime"] == 2**63 - 1)
    assert pairs(items) == pairs(full["compacted"]) and len(items) == len(full["compacted"])
    # The files answer newest first and a later put of a held queueId-offset replaces the item (Java's map put;
    # with its parallel files either copy can win): each pair once, from one of the two files.
    assert len({i["file"] for i in items}) == 1 and {i["file"] for i in items} <= {str(BEGIN), str(BEGIN + 1)}
    _, items = tquery(tdir, "k0", "--count", "2")
    assert len(items) == 2
    _, none = tquery(tdir, "k23")
    assert none == []


def write_metadata(path: Path, topic_ids: dict[str, int]) -> Path:
    # fastjson style, integer map keys unquoted (format §1.2).
    topics = ",".join(f'"{t}":{{"topicId":{i},"topic":"{t}","reserveTime":-1,"status":0,"updateTimestamp":1}}'
                      for t, i in topic_ids.items())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"topicSerialNumber":' + str(max(topic_ids.values(), default=0)) +
                    ',"topicMetadataTable":{' + topics + '},"queueMetadataTable":{"TopicF":{0:{"queue":'
                    '{"topic":"TopicF","brokerName":"broker-a","queueId":0},"minOffset":0,"maxOffset":50}}},'
                    '"commitLogFileSegmentTable":{},"consumeQueueFileSegmentTable":{},"indexFileSegmentTable":{}}')
    return path


def test_query_topic_id_filter(tdir, tmp_path):
    meta = write_metadata(tmp_path / "m.json", {"TopicF": 7, "Other": 8})
    _, items = tquery(tdir, "k0", "--tiered-metadata", meta)
    assert len(items) == 4 and {i["topicId"] for i in items} == {7}
    meta8 = write_metadata(tmp_path / "m8.json", {"TopicF": 8})
    r, items = tquery(tdir, "k0", "--tiered-metadata", meta8, "--explain")
    assert items == []
    rej = [x["rejected"] for x in jlines(r) if "rejected" in x]
    assert len(rej) == 4 and all("topicId 7" in x["reason"] for x in rej)
    # The topic missing from the metadata: the broker answers nothing.
    r, items = tquery(tdir, "k0", "--tiered-metadata", write_metadata(tmp_path / "m0.json", {"Other": 7}))
    assert items == [] and [(n["topic"], n["dropped"]) for n in noted(r, "topic-not-in-metadata")] == [("TopicF", 4)]
    # --topic-id, and the metadata found under --store's config/.
    assert tquery(tdir, "k0", "--topic-id", "9")[1] == []
    assert len(tquery(tdir, "k0", "--topic-id", "7", "--raw")[1]) == 4
    store = tmp_path / "store"
    write_metadata(store / "config" / "tieredStoreMetadata.json", {"TopicF": 8})
    (store / "commitlog").mkdir()
    r, items = tquery(tdir, "k0", "--store", store, "--explain")
    assert items == [] and len([x for x in jlines(r) if "rejected" in x]) == 4
    # Without any metadata nothing is filtered, and stderr says so.
    r, items = tquery(tdir, "k0")
    assert len(items) == 4 and len(noted(r, "no-tiered-metadata")) == 1


# ---------------------------------------------------------------- verification against messages


def md5_8(s: str) -> str:
    return hashlib.md5(s.encode()).hexdigest()[:8]


def record_of_size(topic, queue_id, keys, uniq, ts, phy, size):
    from engine.broker.commitlog.message import MessageRecord, encode_record

    props = {"KEYS": " ".join(keys)}
    if uniq:
        props["UNIQ_KEY"] = uniq
    rec = MessageRecord(topic=topic, queue_id=queue_id, store_timestamp=ts, born_timestamp=ts,
                        physical_offset=phy, properties=props)
    pad = size - len(encode_record(rec))
    assert pad >= 0
    rec.body = b"x" * pad
    data = encode_record(rec)
    assert len(data) == size
    return data


def build_flat_commitlog(root: Path, mutate=None) -> Path:
    """POSIX tiered backend layout (format §9.1) holding the golden puts' records at their tiered offsets."""
    cluster, broker, base = "DefaultCluster", "broker-a", 49152
    segs: dict[int, bytearray] = {}
    for p in PUTS:
        uniq = next((k for k in p["keys"] if k.startswith("u")), None)
        keys = [k for k in p["keys"] if k != uniq]
        if mutate:
            keys = mutate(p, keys)
        data = record_of_size(p["topic"], p["queueId"], keys, uniq, p["timestamp"], p["offset"], p["size"])
        buf = segs.setdefault(p["queueId"], bytearray())
        pos = p["offset"] - base
        if len(buf) < pos + len(data):
            buf.extend(bytes(pos + len(data) - len(buf)))
        buf[pos:pos + len(data)] = data
    for qid, buf in segs.items():
        d = root / f"{md5_8(cluster)}_{cluster}" / broker / "TopicF" / str(qid) / "COMMIT_LOG"
        d.mkdir(parents=True)
        (d / f"{md5_8(str(base))}{base:020d}").write_bytes(bytes(buf))
    return root


def test_query_verified_in_tiered_commitlog(tdir, tmp_path):
    tsp = build_flat_commitlog(tmp_path / "tiered")
    r, items = tquery(tdir, "k0", "--tiered-store-path", tsp)
    assert len(items) == 4 and all(i["verifiedBy"] == "tiered-commitlog" for i in items)
    for i in items:
        m = i["message"]
        assert m["topic"] == "TopicF" and "k0" in m["keys"] and m["queueId"] == i["queueId"]
        assert m["commitLogOffset"] == i["offset"] and m["storeSize"] == i["size"]
    # UNIQ_KEY: the tiered index holds it beside the KEYS (format §9.6), so the default check finds it as the
    # broker does; --unique-key accepts the UNIQ_KEY only, and a KEYS token is then rejected.
    assert len(tquery(tdir, "u1", "--tiered-store-path", tsp, "--unique-key")[1]) == 1
    _, items = tquery(tdir, "u1", "--tiered-store-path", tsp)
    assert len(items) == 1 and items[0]["message"]["uniqKey"] == "u1"
    r, items = tquery(tdir, "k0", "--tiered-store-path", tsp, "--unique-key", "--explain")
    assert items == [] and "UNIQ_KEY" in jlines(r)[0]["rejected"]["reason"]


def test_tiered_commitlog_drops_collisions(tdir, tmp_path):
    # The record at one k0 offset carries another key: a hash collision from the index's point of view.
    victim = 59024
    tsp = build_flat_commitlog(tmp_path / "tiered", lambda p, keys: ["zz"] if p["offset"] == victim else keys)
    r, items = tquery(tdir, "k0", "--tiered-store-path", tsp, "--explain")
    assert len(items) == 3 and victim not in {i["offset"] for i in items}
    rej = [x["rejected"] for x in jlines(r) if "rejected" in x]
    assert [x["offset"] for x in rej] == [victim] and "collision" in rej[0]["reason"]
    # A damaged record is dropped too, with the decoder's reason.
    seg = next((tsp).rglob("COMMIT_LOG/*"))
    data = bytearray(seg.read_bytes())
    qid = int(seg.parent.parent.name)
    off = next(p["offset"] for p in PUTS if p["queueId"] == qid and "k0" in p["keys"])
    data[off - 49152 + 4] ^= 0xFF  # magic code
    seg.write_bytes(bytes(data))
    r, items = tquery(tdir, "k0", "--tiered-store-path", tsp, "--explain")
    assert off not in {i["offset"] for i in items}
    assert any(x["rejected"]["offset"] == off and "magic" in x["rejected"]["reason"] for x in jlines(r)
               if "rejected" in x)
    assert_one_line_error(ask(tdir, "TopicF", "k0", "--tiered-store-path", tmp_path / "nope"),
                          contains="not a directory")
    assert_one_line_error(ask(tdir, "TopicF", "k0", "--tiered-store-path", tsp, "--cluster-name", "Other"),
                          contains="Other")


def test_query_verified_through_local_store(tmp_path):
    from engine.tiered.index.file import IndexStoreFile

    store = tmp_path / "store"
    t0 = 1_700_000_100_000
    msgs = [{"topic": "TL", "keys": ["kk"], "body": "b" * (10 + i), "storeTimestamp": t0 + 700 * i,
             "queueId": i % 2} for i in range(6)]
    msgs.append({"topic": "TL", "keys": ["other"], "body": "c", "storeTimestamp": t0 + 9000, "queueId": 0})
    acks = put_jsonl(store, msgs)
    d = tmp_path / "tiered_index_file"
    d.mkdir()
    fb = t0 - 1500  # messages reach tiered storage later than the file was created, or earlier: both fine
    with IndexStoreFile.create(d / str(fb), 8, 32, fb) as f:
        for i, a in enumerate(acks[:6]):
            f.put_key("TL", 3, a["queueId"], ["kk"], 1000 * i, a["storeSize"], a["storeTimestamp"])
        # An item with no local copy (expired locally), and one whose second holds a message without the key.
        f.put_key("TL", 3, 0, ["kk"], 9000, 222, t0 + 50_000)
        f.put_key("TL", 3, 0, ["kk"], 9500, acks[6]["storeSize"], acks[6]["storeTimestamp"])
    before = snapshot(tmp_path)
    r = ask(d, "TL", "kk", "--store", store, "--hash-slots", "16", "--max-index", "64")
    assert r.exit_code == 0, r.output
    items = jlines(r)
    assert len(items) == 8
    verified = [i for i in items if i["verifiedBy"] == "local-store"]
    assert sorted(i["message"]["commitLogOffset"] for i in verified) == sorted(a["commitLogOffset"] for a in acks[:6])
    for i in verified:
        assert i["message"]["storeSize"] == i["size"] and i["message"]["queueId"] == i["queueId"]
    lost = {i["offset"]: i for i in items if i["verifiedBy"] is None}
    assert set(lost) == {9000, 9500}
    assert "not found" in lost[9000]["unverifiedReason"] and "do not match" in lost[9500]["unverifiedReason"]
    assert "2 item(s) could not be located" in r.stderr
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------- read-only and bad input


def test_read_only_tiered_commands_leave_files_identical(work, tdir, tmp_path):
    meta = write_metadata(tmp_path / "m.json", {"TopicF": 7})
    before = snapshot(tmp_path)
    cmds = [
        ["tiered", "inspect-index", work / "unsealed.bin"], ["tiered", "inspect-index", work / "compacted.bin", "--verify"],
        ["tiered", "inspect-index", work / "unsealed.bin", "--stats", "--walk-slot", "2"],
        ["tiered", "inspect-index", "--tiered-dir", tdir, "--verify", "--stats"],
    ]
    for c in cmds:
        r = run(c)
        assert r.exit_code == 0, (c, r.output)
    assert ask(tdir, "TopicF", "k0", "--tiered-metadata", meta).exit_code == 0
    assert snapshot(tmp_path) == before
    for p in (work / "unsealed.bin", tdir / str(BEGIN)):
        p.chmod(0o444)
    try:
        assert run(["tiered", "inspect-index", work / "unsealed.bin", "--verify"]).exit_code == 0
        assert len(tquery(tdir, "k0")[1]) == 4
    finally:
        for p in (work / "unsealed.bin", tdir / str(BEGIN)):
            p.chmod(0o644)


def test_bad_inputs_one_line_errors(work, tdir, tmp_path):
    broker_dir = tmp_path / "broker_index"
    broker_dir.mkdir()
    shutil.copy(GOLDEN / "indexfile" / "a_small" / "index.bin", broker_dir / "20231114221320000")
    (work / "trunc").write_bytes((T2 / "unsealed.bin").read_bytes()[:3000])
    (work / "short").write_bytes((T2 / "unsealed.bin").read_bytes()[:20])
    (tmp_path / "bad.json").write_text("{not json")
    cases = [
        (["tiered", "inspect-index", work / "trunc"], "truncated"),
        (["tiered", "inspect-index", work / "short"], "28-byte"),
        (["tiered", "inspect-index", work / "unsealed.bin", "--hash-slots", "15"], "hash_slot_num=15"),
        (["tiered", "inspect-index", work / "unsealed.bin", "--walk-slot", "16"], "out of range"),
        (["tiered", "inspect-index", work / "unsealed.bin", "--walk-key", "no-hash-sign"], "TOPIC#KEY"),
        (["tiered", "inspect-index", "--tiered-dir", broker_dir], "not a tiered index file"),
        (["tiered", "inspect-index"], "--tiered-store-path"),
        (["tiered", "inspect-index", "--tiered-dir", tmp_path / "missing"], "does not exist"),
        (["tiered", "inspect-index", work / "unsealed.bin", "--tiered-dir", tdir], "not both"),
    ]
    asked = [((broker_dir,), "not a tiered index file"),
             ((tdir, "--tiered-metadata", tmp_path / "bad.json"), "tiered metadata"),
             ((tdir, "--tiered-metadata", tmp_path / "absent.json"), "does not exist"),
             ((tdir, "--tiered-hash-slots", "15"), "hash_slot_num=15")]
    before = snapshot(tmp_path)
    for args, text in cases:
        assert_one_line_error(run(args), contains=text)
    for (d, *extra), text in asked:
        assert_one_line_error(ask(d, "TopicF", "k0", *extra), contains=text)
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------- the old spellings are gone


def test_old_spellings_are_refused(work, tdir):
    """compact-index, inspect-index on tiered files, query-key --tiered-dir and spark-reindex --format were the
    spellings of before the `tiered` group; the tool was never released, so they are gone (CHANGELOG.md): each is
    a usage error (exit 2) that changes nothing."""
    before = snapshot(work)
    assert_one_line_error(run(["compact-index", work / "unsealed.bin", "-o", work / "old.bin"]), 2)
    assert_one_line_error(run(["inspect-index", work / "unsealed.bin", "--stats"]), 2, "tiered inspect-index")
    assert_one_line_error(run(["inspect-index", "--tiered-dir", tdir]), 2)
    assert_one_line_error(run(["query-key", "--tiered-dir", tdir, "-t", "TopicF", "-k", "k0"]), 2)
    assert_one_line_error(run(["spark-reindex", "-s", work, "--format", "tiered"]), 2)
    assert snapshot(work) == before
    top = run(["--help"]).stdout
    assert "compact-index" not in top and "tiered" in top
