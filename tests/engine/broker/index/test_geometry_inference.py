"""Read commands infer the index geometry from the index files (issue 14 item 6): the golden vectors, stores
written by `put` with several geometries, files without items, ambiguous and damaged sizes, flags and broker.conf
that still win (engine.broker.index.geometry.resolve_index_geometry)."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from engine.broker.config.brokerconf import load_config
from engine.broker.index.file import index_file_size
from engine.broker.index.geometry import Candidates, index_file_facts, infer_index_geometry, resolve_index_geometry
from engine.broker.index.file import IndexFile
from engine.errors import GeometryError
from helpers import GOLDEN, assert_one_line_error, put_jsonl, run, snapshot

GOLDEN_FILES = ["a_small", "c_seeded", "d_full"]


def jlines(r):
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def params(scenario):
    return json.loads((GOLDEN / "indexfile" / scenario / "params.json").read_text())


@pytest.mark.parametrize("scenario", GOLDEN_FILES)
def test_golden_files_tell_their_geometry(scenario):
    p = GOLDEN / "indexfile" / scenario / "index.bin"
    want = params(scenario)
    f = index_file_facts(p)
    assert f[1] == want["fileTotalSize"] == index_file_size(want["hashSlotNum"], want["indexNum"])
    assert infer_index_geometry([f], f[1]) == (want["hashSlotNum"], want["indexNum"])
    cfg = resolve_index_geometry(load_config(None), [p])
    assert (cfg.maxHashSlotNum, cfg.maxIndexNum) == (want["hashSlotNum"], want["indexNum"])


def test_golden_c_seeded_needs_the_items_to_decide():
    """32 slots x 64 items is not the 1:4 ratio and its size fits dozens of geometries: the items decide."""
    p = GOLDEN / "indexfile" / "c_seeded" / "index.bin"
    f = index_file_facts(p)
    assert len(Candidates(f[1], f[2], f[3])) > 10 and Candidates(f[1], f[2], f[3]).ratio() is None


@pytest.mark.parametrize("scenario", GOLDEN_FILES)
def test_inspect_index_walks_golden_files_without_flags(scenario):
    p = GOLDEN / "indexfile" / scenario / "index.bin"
    want = params(scenario)
    text = (GOLDEN / "indexfile" / scenario / "queries.jsonl").read_text()
    queries = [json.loads(line) for line in text.splitlines()]
    full = [q for q in queries if q["begin"] == 0 and q["end"] == 2**63 - 1 and q["maxNum"] >= 64]
    assert full
    for q in full[:4]:
        r = run(["inspect-index", p, "--walk-key", q["key"], "--json", "--count", "1000"])
        assert r.exit_code == 0, r.output
        walk = jlines(r)[0]
        kh = abs(q["keyHashCode"]) if q["keyHashCode"] != -2**31 else 0
        assert walk["slot"] == kh % want["hashSlotNum"]
        got = [i["phyOffset"] for i in walk["items"] if i["keyHash"] == kh]
        assert got == q["result"], q
    h = jlines(run(["inspect-index", p, "--json"]))[0]
    assert h["fill"] == round((h["indexCount"] - 1) / (want["indexNum"] - 1), 5)


GEOMETRIES = [(16, 64), (32, 64), (50, 100), (7, 300), (100, 100)]


def put_store(root, slots, items, n=150):
    geom = ["--hash-slots", str(slots), "--max-index", str(items), "--commitlog-file-size", "4096",
            "--cq-file-size", "200"]
    return put_jsonl(root, [{"topic": "T", "queueId": i % 2, "keys": f"k{i % 9}", "body": f"b{i}"} for i in range(n)],
                     geom)


@pytest.mark.parametrize("slots,items", GEOMETRIES)
def test_read_commands_need_no_geometry_flags(tmp_path, slots, items):
    root = tmp_path / "s"
    acks = put_store(root, slots, items)
    sizes = {p.stat().st_size for p in (root / "index").iterdir()}
    assert sizes == {index_file_size(slots, items)}
    flags = ["--hash-slots", slots, "--max-index", items]
    before = snapshot(root)
    for args in (["query-key", "-t", "T", "-k", "k4", "--json"], ["inspect-index", "--json"],
                 ["inspect-index", "--verify"], ["get", "-m", acks[17]["uniqKey"], "--json"]):
        plain, given = run([args[0], "-s", root, *args[1:]]), run([args[0], "-s", root, *args[1:], *flags])
        assert plain.exit_code == 0, (args, plain.output)
        assert plain.stdout == given.stdout, args
    assert len(jlines(run(["query-key", "-s", root, "-t", "T", "-k", "k4", "--json"]))) == \
        len([a for i, a in enumerate(acks) if i % 9 == 4])
    one = sorted((root / "index").iterdir())[0]
    r = run(["inspect-index", one, "--walk-slot", "0", "--json"])
    assert r.exit_code == 0, r.output
    r = run(["recover", "-s", root, "--dry-run"])
    assert r.exit_code == 0, r.output
    assert snapshot(root) == before


def test_one_flag_given_the_other_is_inferred(tmp_path):
    root = tmp_path / "s"
    put_store(root, 32, 64)
    cfg = resolve_index_geometry(load_config(None, storePathRootDir=str(root), maxHashSlotNum=32))
    assert (cfg.maxHashSlotNum, cfg.maxIndexNum) == (32, 64)
    cfg = resolve_index_geometry(load_config(None, storePathRootDir=str(root), maxIndexNum=64))
    assert (cfg.maxHashSlotNum, cfg.maxIndexNum) == (32, 64)
    r = run(["query-key", "-s", root, "-t", "T", "-k", "k1", "--hash-slots", "32", "--json"])
    assert r.exit_code == 0 and jlines(r)


def test_flags_and_broker_conf_still_win(tmp_path):
    root = tmp_path / "s"
    put_store(root, 32, 64)
    before = snapshot(root)
    r = run(["query-key", "-s", root, "-t", "T", "-k", "k1", "--hash-slots", "16", "--max-index", "64"])
    assert_one_line_error(r, 2, "16 slots x 64 items")
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={root}\nmaxHashSlotNum=16\nmaxIndexNum=64\n")
    r = run(["inspect-index", "-c", conf])
    assert_one_line_error(r, 2, "16 slots x 64 items")
    conf.write_text(f"storePathRootDir={root}\nmaxHashSlotNum=32\n")  # half given: the other from the files
    assert run(["inspect-index", "-c", conf]).exit_code == 0
    assert snapshot(root) == before


def test_file_without_items_and_no_ratio_is_ambiguous(tmp_path):
    root = tmp_path / "s"
    put_jsonl(root, [{"topic": "T", "body": "x"}], ["--commitlog-file-size", "4096"])  # a store, index aside
    shutil.rmtree(root / "index")
    (root / "index").mkdir()
    IndexFile.create(root / "index" / "20240101000000000", 32, 64).close()
    before = snapshot(root)
    r = run(["query-key", "-s", root, "-t", "T", "-k", "k"])
    assert_one_line_error(r, 2, "cannot tell the index geometry")
    err = r.stderr
    assert "give --hash-slots and --max-index" in err and "in all)" in err
    listed = re.findall(r"--hash-slots (\d+) --max-index (\d+)", err)
    assert len(listed) == 5 and all(index_file_size(int(s), int(i)) == 1448 for s, i in listed)
    r = run(["inspect-index", "-s", root])
    assert_one_line_error(r, 2, "cannot tell the index geometry")
    r = run(["query-key", "-s", root, "-t", "T", "-k", "k", "--hash-slots", "32", "--max-index", "64", "--json"])
    assert r.exit_code == 0
    assert snapshot(root) == before


def test_file_without_items_with_the_ratio_takes_the_broker_default(tmp_path):
    p = tmp_path / "20240101000000000"
    IndexFile.create(p, 16, 64).close()
    cfg = resolve_index_geometry(load_config(None), [p])
    assert (cfg.maxHashSlotNum, cfg.maxIndexNum) == (16, 64)
    r = run(["inspect-index", p, "--json"])
    # the header as stored: a file created and never written holds zeros (the broker's load() would read 1)
    assert r.exit_code == 0 and jlines(r)[0]["indexCount"] == 0


def test_empty_store_keeps_the_defaults(tmp_path):
    root = tmp_path / "s"
    put_jsonl(root, [{"topic": "T", "body": "x"}], ["--commitlog-file-size", "4096"])
    shutil.rmtree(root / "index")
    cfg = resolve_index_geometry(load_config(None, storePathRootDir=str(root)))
    assert (cfg.maxHashSlotNum, cfg.maxIndexNum) == (5_000_000, 20_000_000)
    r = run(["query-key", "-s", root, "-t", "T", "-k", "k", "--json"])
    assert r.exit_code == 0 and r.stdout == ""


def test_a_size_no_geometry_gives_is_an_error(tmp_path):
    p = tmp_path / "20240101000000000"
    p.write_bytes(bytes(1385))
    with pytest.raises(GeometryError, match="no index geometry gives that size"):
        resolve_index_geometry(load_config(None), [p])
    r = run(["inspect-index", p])
    assert_one_line_error(r, 2, "no index geometry gives that size")


def test_a_damaged_odd_file_does_not_decide(tmp_path):
    root = tmp_path / "s"
    put_store(root, 50, 100, n=300)
    files = sorted((root / "index").iterdir())
    assert len(files) >= 3
    with open(files[0], "r+b") as fh:
        fh.truncate(1000)
    r = run(["query-key", "-s", root, "-t", "T", "-k", "k2", "--json"])
    assert r.exit_code == 3 and jlines(r)              # answered from the healthy files, the odd one reported
    assert files[0].name in r.stderr


def test_a_large_ambiguous_size_is_decided_by_the_items(tmp_path):
    """5000 slots x 7000 items: not the 1:4 ratio, hundreds of candidates; the items pick one (vectorised)."""
    p = tmp_path / "20240101000000000"
    f = IndexFile.create(p, 5000, 7000)
    for i in range(3000):
        f.put_key(f"T#key-{i % 1234}", 1000 + 100 * i, 1_700_000_000_000 + i)
    f.close()
    facts = index_file_facts(p)
    assert len(Candidates(facts[1], facts[2], facts[3])) > 100
    assert infer_index_geometry([facts], facts[1]) == (5000, 7000)
    r = run(["inspect-index", p, "--walk-key", "T#key-7", "--json"])
    assert r.exit_code == 0 and len([i for i in jlines(r)[0]["items"]]) >= 2


def _fits_one_read_per_field(path, geometry, index_count):
    """The reference: engine.broker.index.geometry.fits as it was, one read per field (what the batched one must
    answer on every file)."""
    import os

    from engine.broker.index.file import INDEX_HEADER_SIZE
    from engine.broker.index.geometry import sample_items

    s, i = geometry
    fd = os.open(path, os.O_RDONLY)
    try:
        def i32(pos):
            b = os.pread(fd, 4, pos)
            return int.from_bytes(b, "big", signed=True) if len(b) == 4 else -1
        base = INDEX_HEADER_SIZE + 4 * s
        if os.pread(fd, 20, base) != bytes(20):
            return False
        for k in sample_items(index_count):
            if k >= i:
                return False
            item = base + 20 * k
            key_hash, time_diff, prev = i32(item), i32(item + 12), i32(item + 16)
            if key_hash < 0 or time_diff < 0 or not 0 <= prev < k:
                return False
            slot = key_hash % s
            if not k <= i32(INDEX_HEADER_SIZE + 4 * slot) < i:
                return False
            if prev and (i32(base + 20 * prev) < 0 or i32(base + 20 * prev) % s != slot):
                return False
        return True
    finally:
        os.close(fd)


def test_fits_answers_as_one_read_per_field(tmp_path):
    """fits() reads the sampled items in runs; on a healthy file, on damaged copies (bytes flipped in items and
    slots, a file cut short) and under wrong geometries it answers as the field-by-field reads do."""
    import random

    from engine.broker.index.geometry import fits

    p = tmp_path / "f"
    f = IndexFile.create(str(p), 40, 200)
    for n in range(180):
        f.put_key(f"T#k{n % 53}", 1000 + n * 10, 1_700_000_000_000 + n)
    f.close()
    good = p.read_bytes()
    rnd = random.Random(11)
    cases = [good, good[:len(good) - 1500], good[:2000]]
    for _ in range(40):
        b = bytearray(good)
        for _ in range(rnd.randrange(1, 4)):
            at = rnd.randrange(40, len(b))
            b[at] ^= 1 << rnd.randrange(8)
        cases.append(bytes(b))
    answers = set()
    for data in cases:
        p.write_bytes(data)
        for geo in [(40, 200), (20, 202), (60, 198), (39, 200)]:
            for count in (181, 100, 2):
                want = _fits_one_read_per_field(p, geo, count)
                assert fits(p, geo, count) == want, (geo, count)
                answers.add(want)
    assert answers == {True, False}
