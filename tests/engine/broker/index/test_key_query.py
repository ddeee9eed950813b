"""Key lookups: the fast selectPhyOffset path against a transcription of the broker's loop (healthy and damaged
files), damaged index files during query-key / --raw / inspect-index (a partial answer, exit 3), streamed slot
statistics, and allocation failures."""
from __future__ import annotations

from helpers import REPO
import errno
import json
import random
import struct

import numpy as np
import pytest

from helpers import READ_GEOM, assert_one_line_error, built_store, put_jsonl, run, said, said_kind, said_kinds, snapshot
from engine.broker.index import stats
from engine.broker.index.file import IndexFile
from engine.broker.index.service import IndexService
from engine.broker.layout import list_index_files
from engine.errors import CorruptFileError, StoreError
from engine.fsutil import DiskFullError
from engine.java.lang import LONG_MAX, index_hash, java_string_hash, key_index_hash, to_i64

T0 = 1_700_000_000_000


# ---------------------------------------------------------------------------- the lookup itself


def broker_select(f: IndexFile, kh: int, max_num: int, begin: int, end: int) -> list[int]:
    """IndexFile.selectPhyOffset (format §5.7) line by line; rmqtool bounds the loop the broker never leaves on a
    cycle by the item count, and a read past the buffer ends the broker's walk (its exception is caught)."""
    out: list[int] = []
    count, bt = f.header.indexCount, f.header.beginTimestamp
    n = struct.unpack_from(">i", f._mm, 40 + 4 * (kh % f.hash_slot_num))[0]
    if n <= 0 or n > count or count <= 1:
        return out
    steps = 0
    while len(out) < max_num:
        if n >= f.index_num:
            break
        h, off, d, prev = struct.unpack_from(">iqii", f._mm, 40 + 4 * f.hash_slot_num + 20 * n)
        if d < 0:
            break
        t = to_i64(bt + d * 1000)
        if h == kh and begin <= t <= end:
            out.append(off)
        if prev <= 0 or prev > count or prev == n or t < begin:
            break
        steps += 1
        if steps >= count:
            break
        n = prev
    return out


def random_file(path, rng: random.Random, damage: bool) -> IndexFile:
    slots, items = rng.choice([1, 3, 8]), rng.choice([4, 10, 40])
    f = IndexFile.create(path, slots, items, rng.choice([0, 500]), rng.choice([0, T0 - 5000]))
    ts = T0
    for i in range(rng.randrange(0, items + 3)):
        ts += rng.choice([0, 400, 1000, 2500, -1000])
        f.put_key(f"T#k{rng.randrange(6)}", 1000 + 10 * i, ts)
    mm = f._mm
    for _ in range(rng.randrange(1, 4) if damage else 0):
        n = rng.randrange(0, items)
        where = rng.choice(["prev", "prev", "slot", "diff", "count", "begin"])
        base = 40 + 4 * slots + 20 * n
        if where == "prev":
            struct.pack_into(">i", mm, base + 16, rng.choice([n, n + 1, n + 2, -1, items, items + 5, 1]))
        elif where == "slot":
            struct.pack_into(">i", mm, 40 + 4 * rng.randrange(slots), rng.choice([-1, items, items - 1, 2]))
        elif where == "diff":
            struct.pack_into(">i", mm, base + 12, -1)
        elif where == "count":
            f.header.indexCount = rng.choice([items, items - 1, 0, 1])
        else:
            f.header.beginTimestamp = rng.choice([LONG_MAX - 10, -5, 0])
    return f


@pytest.mark.parametrize("damage", [False, True])
def test_select_matches_the_broker_loop(tmp_path, damage):
    rng = random.Random(7 + damage)
    windows = [(0, LONG_MAX), (T0, T0 + 3000), (T0 + 2000, LONG_MAX), (0, T0 - 1), (T0 + 999, T0 + 1001),
               (LONG_MAX - 5, LONG_MAX)]
    for trial in range(150):
        f = random_file(tmp_path / f"f{trial}", rng, damage)
        for k in range(7):
            kh = index_hash(java_string_hash(f"T#k{k}"))
            for begin, end in windows:
                for max_num in (1, 2, 64):
                    out = [123]  # a result list that already holds something, as across files
                    why = f.select_hash(kh, max_num + 1, begin, end, out)
                    assert out[1:] == broker_select(f, kh, max_num, begin, end), (trial, k, begin, end)
                    if not damage:
                        assert why is None
        f.close()


def test_select_phy_offsets_on_a_full_list_reads_nothing(tmp_path):
    f = IndexFile.create(tmp_path / "f", 4, 8)
    f.put_key("T#a", 5, T0)
    out = [1, 2]
    assert f.select_phy_offsets("T#a", 2, 0, LONG_MAX, out) == [1, 2]
    assert f.select_phy_offsets("T#a", 3, 0, LONG_MAX, out) == [1, 2, 5]
    f.close()


# ---------------------------------------------------------------------------- damaged files in a store


def msg(i):
    return {"topic": "T", "keys": ["common", f"id{i}"], "body": f"m{i}", "storeTimestamp": T0 + 400 * i}


@pytest.fixture
def rolled(tmp_path):
    """A store with at least four index files (63 items each, 3 keys per message)."""
    store = tmp_path / "store"
    acks = built_store(f"{__name__}.rolled", store, lambda r: put_jsonl(r, [msg(i) for i in range(80)]))
    files = list_index_files(store / "index")
    assert len(files) >= 4
    held = {}
    for p in files:
        with IndexFile.open(p, 16, 64) as f:
            held[p.name] = {int(o) for o in f.items_array()["phy"]}
    return store, acks, files, held


def query(store, *extra, key="common"):
    return run(["query-key", "--store", store, *READ_GEOM, "--topic", "T", "--key", key, "--count", "1000", "--json",
                *extra])


def zero_filled(p):
    p.write_bytes(b"\0" * p.stat().st_size)


def header_count(p):
    d = bytearray(p.read_bytes())
    struct.pack_into(">i", d, 36, 9999)
    p.write_bytes(bytes(d))


def truncated(p):
    p.write_bytes(p.read_bytes()[:700])


def zero_header(p):
    d = bytearray(p.read_bytes())
    d[:40] = b"\0" * 40
    p.write_bytes(bytes(d))


@pytest.mark.parametrize("damage", [zero_filled, header_count, truncated, zero_header])
@pytest.mark.parametrize("which", [1, -1])
def test_one_damaged_file_gives_a_partial_answer(rolled, damage, which):
    store, acks, files, held = rolled
    bad = files[which]
    damage(bad)
    before = snapshot(store)
    r = query(store)
    assert r.exit_code == 3, r.output
    assert "Traceback" not in r.output
    (partial,) = said(r)   # one line, whatever the number of damaged files
    assert said_kind(partial) == "partial-answer" and "warning" in partial
    assert [d["file"] for d in partial["damagedIndexFiles"]] == [bad.name] and partial["misplaced"] == []
    got = [json.loads(l)["commitLogOffset"] for l in r.stdout.splitlines()]
    healthy = set().union(*(held[p.name] for p in files if p != bad))
    want = [a["commitLogOffset"] for a in acks if a["commitLogOffset"] in healthy]
    assert got == want and len(want) < len(acks)
    raw = run(["query-key", "--store", store, *READ_GEOM, "--topic", "T", "--key", "common", "--raw", "--json"])
    assert raw.exit_code == 3 and said_kinds(raw) == ["partial-answer"]
    answer = json.loads(raw.stdout)
    assert [d["file"] for d in answer["damagedFiles"]] == [str(bad)]
    assert set(answer["phyOffsets"]) <= healthy and answer["phyOffsets"]
    # a key whose message lives in a healthy file is still found whole
    i = next(i for i, a in enumerate(acks) if a["commitLogOffset"] in held[files[0 if which != 0 else -1].name])
    r = query(store, key=f"id{i}")
    assert r.exit_code == 3 and [json.loads(l)["commitLogOffset"] for l in r.stdout.splitlines()] == [
        acks[i]["commitLogOffset"]]
    assert snapshot(store) == before


def test_a_broken_chain_is_used_up_to_the_break_and_named(rolled):
    store, acks, files, held = rolled
    mid = files[1]
    slot = index_hash(java_string_hash("T#common")) % 16
    d = bytearray(mid.read_bytes())
    head = struct.unpack_from(">i", d, 40 + 4 * slot)[0]
    struct.pack_into(">i", d, 40 + 4 * 16 + 20 * head + 16, head + 1)  # the head links to a newer item
    mid.write_bytes(bytes(d))
    r = query(store)
    assert r.exit_code == 3
    (partial,) = said(r, "partial-answer")
    assert [d["file"] for d in partial["damagedIndexFiles"]] == [mid.name]
    got = {json.loads(l)["commitLogOffset"] for l in r.stdout.splitlines()}
    others = set().union(*(held[p.name] for p in files if p != mid))
    assert others & {a["commitLogOffset"] for a in acks} <= got  # every healthy file answered whole
    assert got <= {a["commitLogOffset"] for a in acks}  # and nothing wrong was returned
    w = run(["inspect-index", mid, *READ_GEOM, "--walk-key", "T#common", "--json"])
    assert w.exit_code == 0 and "newer item" in json.loads(w.stdout)["stop"]


def test_no_file_of_the_geometry_is_an_error_not_a_partial_answer(rolled):
    store, *_ = rolled
    wrong = ["--hash-slots", "5", "--max-index", "20"]   # given, so it wins over the files' geometry (issue 14)
    assert_one_line_error(run(["query-key", "--store", store, *wrong, "--topic", "T", "--key", "common"]), code=2,
                          contains="bytes")
    assert_one_line_error(run(["inspect-index", "--store", store, *wrong]), code=2, contains="bytes")
    # without flags the geometry is read from the files: the same answer as with the right flags
    plain = run(["query-key", "--store", store, "--topic", "T", "--key", "common", "--json"])
    assert plain.exit_code == 0 and plain.stdout == run(["query-key", "--store", store, *READ_GEOM, "--topic", "T",
                                                         "--key", "common", "--json"]).stdout


def test_inspect_index_lists_the_healthy_files_and_names_the_damaged(rolled):
    store, _, files, _ = rolled
    truncated(files[0])
    header_count(files[2])
    r = run(["inspect-index", "--store", store, *READ_GEOM, "--json"])
    assert r.exit_code == 3
    rows = [json.loads(l) for l in r.stdout.splitlines()]
    assert [x["file"] for x in rows] == [p.name for p in files[1:]]  # the wrong-size file has no header row
    assert [x["damage"] is not None for x in rows] == [i == 1 for i in range(len(files) - 1)]
    (line,) = said(r)   # one line, whatever the number of damaged files
    assert said_kind(line) == "index-problems" and not line["verificationFailed"]
    assert [d["file"] for d in line["damagedFiles"]] == [files[0].name, files[2].name]


def test_a_damaged_newest_file_refuses_appends(rolled):
    store, _, files, _ = rolled
    header_count(files[-1])
    with pytest.raises(CorruptFileError, match="recover"):
        IndexService(store / "index", 16, 64, writable=True)
    header_count(files[0])  # only an older file damaged: appends go to the newest as before
    zero_filled(files[-1])
    with pytest.raises(CorruptFileError):
        IndexService(store / "index", 16, 64, writable=True)


def test_index_file_creation_on_a_full_disk_is_an_error_not_sigbus(tmp_path, monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("os.posix_fallocate", full)
    with pytest.raises(DiskFullError, match="free") as e:
        IndexFile.create(tmp_path / "f", 4, 8)
    assert str(tmp_path / "f") in str(e.value) and isinstance(e.value, StoreError)


# ---------------------------------------------------------------------------- streamed statistics


def stats_oracle(f: IndexFile, top: int) -> dict:
    """Per-slot item counts with Python integers (a negative hash counts for slot 0, as inspect-index always did)."""
    counts: dict[int, int] = {}
    for n in range(1, min(f.header.indexCount, f.index_num)):
        h = f.item(n)[0]
        s = h % f.hash_slot_num if h >= 0 else 0
        counts[s] = counts.get(s, 0) + 1
    hist: dict[int, int] = {}
    for c in counts.values():
        hist[c] = hist.get(c, 0) + 1
    occupied = sum(1 for s in range(f.hash_slot_num) if f.slot_value(s) != 0)
    items = sum(counts.values())
    return {"file": f.path.name, "hashSlotNum": f.hash_slot_num, "indexNum": f.index_num, "items": items,
            "occupiedSlots": occupied, "slotOccupancy": occupied / f.hash_slot_num, "fill": items / (f.index_num - 1),
            "meanChainLength": items / len(counts) if counts else 0.0,
            "maxChainLength": max(counts.values(), default=0),
            "chainLengthHistogram": dict(sorted(hist.items())),
            "longestChains": [{"slot": s, "length": c} for s, c in sorted(counts.items(), key=lambda x: (-x[1], x[0]))
                              ][:top]}


@pytest.mark.parametrize("chunk,slot_range", [(1 << 20, 8 << 20), (3, 2), (1, 1)])
def test_streamed_stats_equal_an_oracle(tmp_path, monkeypatch, chunk, slot_range):
    monkeypatch.setattr(stats, "CHUNK_ITEMS", chunk)
    monkeypatch.setattr(stats, "SLOT_RANGE", slot_range)
    rng = random.Random(11)
    for trial in range(25):
        f = random_file(tmp_path / f"f{trial}", rng, damage=trial % 3 == 0)
        for n in range(1, f.index_num, 5):  # some negative hashes too
            struct.pack_into(">i", f._mm, 40 + 4 * f.hash_slot_num + 20 * n, rng.choice([-7, 3, 2**31 - 1]))
        calls = []
        for top in (10, 2):
            got = stats.index_file_stats(f, top=top, progress=lambda *a: calls.append(a))
            assert got == stats_oracle(f, top), trial
        assert calls[-1][1] == calls[-1][2]  # the progress ends at its total
        f.close()


def test_stats_memory_does_not_grow_with_the_items(tmp_path, monkeypatch):
    """Chunks are bounded: a file read with a 1,000-item chunk never holds more than that many items' slots."""
    monkeypatch.setattr(stats, "CHUNK_ITEMS", 1000)
    seen = []
    real = stats._item_slots

    def spy(*a, **kw):
        for s in real(*a, **kw):
            seen.append(len(s))
            yield s
    monkeypatch.setattr(stats, "_item_slots", spy)
    from engine.broker.index.build import build_index_file_from_hashes

    n = 25_000
    build_index_file_from_hashes(tmp_path / "f", np.arange(n, dtype=np.int32) * 7919, np.arange(n), np.arange(n),
                                 64, n + 1)
    with IndexFile.open(tmp_path / "f", 64, n + 1) as f:
        s = stats.index_file_stats(f)
    assert s["items"] == n and max(seen) == 1000 and sum(seen) == n


# ---------------------------------------------------------------------------- the benchmark's Java reference


@pytest.mark.slow
def test_the_java_reference_answers_as_select_phy_offsets(tmp_path):
    """bench/java/IndexLookup.java is what bench_index.py measures against: it must answer every lookup as the
    broker (and select_phy_offsets, checked against the golden vectors) does, collisions and windows included."""
    import subprocess
    from pathlib import Path

    root = REPO
    subprocess.run(["javac", "-d", str(tmp_path), str(root / "bench" / "java" / "IndexLookup.java")], check=True)
    f = IndexFile.create(tmp_path / "f", 7, 200, 100, T0 - 3000)
    keys = ["T#Aa", "T#BB", "polygenelubricants"] + [f"T#k{i}" for i in range(20)]
    rng = random.Random(3)
    for i in range(190):
        f.put_key(rng.choice(keys), 1000 + 7 * i, T0 + 450 * i)
    f.flush()
    (tmp_path / "keys.txt").write_text("".join(k + "\n" for k in keys + ["T#absent"]))
    for begin, end, max_num in ((0, LONG_MAX, 64), (T0 + 10_000, T0 + 40_000, 64), (0, LONG_MAX, 3)):
        r = subprocess.run(["java", "-cp", str(tmp_path), "IndexLookup", str(tmp_path / "f"), "7", "200",
                            str(tmp_path / "keys.txt"), "list", str(begin), str(end), str(max_num)],
                           capture_output=True, text=True, check=True)
        java = [json.loads(line) for line in r.stdout.splitlines()]
        ours = [f.select_phy_offsets(k, max_num, begin, end) for k in keys + ["T#absent"]]
        assert java == ours and any(len(x) > 1 for x in ours)
    f.close()


def test_a_writer_appending_meanwhile_is_not_damage(tmp_path):
    """A reader's header is a snapshot; a broker appending to the newest file makes slot heads point past it.
    The lookup reads the header again instead of calling that damage."""
    w = IndexService(tmp_path / "index", 8, 64, writable=True)
    for i in range(5):
        w.build_index(type("R", (), {"physical_offset": 100 * i, "store_timestamp": T0 + i,
                                     "index_keys": lambda self, i=i: [f"T#k{i % 2}"]})())
    w.flush_all()
    r = IndexService(tmp_path / "index", 8, 64)
    f = w.files[-1]
    for i in range(5, 8):  # the writer goes on: items, slots and header, through its own mapping
        f.put_key("T#k1", 100 * i, T0 + i)
    damaged = []
    assert r.query_offsets("T#k1", 64, 0, LONG_MAX, damaged) == [700, 600, 500, 300, 100] and damaged == []
    f.put_key("T#k0", 800, T0 + 8)
    assert r.query_offsets("T#k0", 64, 0, LONG_MAX, damaged) == [800, 400, 200, 0] and damaged == []
    r.close()
    w.close()


def test_a_new_index_file_never_replaces_what_is_there(tmp_path):
    f = IndexFile.create(tmp_path / "f", 4, 8)
    f.put_key("T#a", 1, T0)
    f.close()
    before = (tmp_path / "f").read_bytes()
    with pytest.raises(FileExistsError):
        IndexFile.create(tmp_path / "f", 4, 8)
    assert (tmp_path / "f").read_bytes() == before
    from engine.broker.layout import index_file_name

    (tmp_path / "index" / index_file_name(T0)).mkdir(parents=True)  # something already bears the clock's name
    svc = IndexService(tmp_path / "index", 4, 8, writable=True, clock=lambda: T0)
    assert svc.last_file_for_write().path.name == str(int(index_file_name(T0)) + 1)
    svc.close()


def test_the_ascii_hash_path_equals_the_utf16_loop():
    """java_string_hash's ASCII path (two base-31 numerals) against String.hashCode's loop, every length."""
    def loop(s):
        h = 0
        data = s.encode("utf-16-be", "surrogatepass")
        for i in range(0, len(data), 2):
            h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
        return h - 2**32 if h >= 2**31 else h

    rng = random.Random(9)
    for n in list(range(0, 70)) + [255, 256, 2047, 2048, 2049, 5000]:
        for alphabet in (128, 32, 0x110000):
            s = "".join(chr(rng.randrange(alphabet)) for _ in range(n))
            assert java_string_hash(s) == loop(s), (n, alphabet)
    assert java_string_hash("polygenelubricants") == -2**31 and java_string_hash("\x7f" * 3000) == loop("\x7f" * 3000)


def test_select_phy_offsets_hashes_every_kind_of_key_as_select_hash(tmp_path):
    """select_phy_offsets hashes a key with key_index_hash (an ASCII key's hashCode computed inline, then abs with
    MIN_VALUE as 0): for ASCII keys of every length, keys hashing to MIN_VALUE and to negative values, non-ASCII
    and lone-surrogate keys, and keys longer than the inline path takes, the hash is index_hash(java_string_hash)
    and the lookup answers as select_hash given that hash."""
    rng = random.Random(11)
    keys = ["", "polygenelubricants", "GydZG_", "Aa", "BB", "键", "k\ud800", "\x7f" * 2048, "a" * 2049, "é" * 3]
    keys += ["".join(chr(rng.randrange(a)) for _ in range(rng.randrange(1, 80))) for a in (128, 128, 0x800) * 30]
    assert any(java_string_hash(k) < 0 for k in keys) and java_string_hash("polygenelubricants") == -2**31
    f = IndexFile.create(tmp_path / "f", 7, 400)
    for i, k in enumerate(keys):
        assert f.put_key(k, 1000 + i, T0 + i)
    for i, k in enumerate(keys):
        assert key_index_hash(k) == index_hash(java_string_hash(k)), k
        want: list[int] = []
        f.select_hash(index_hash(java_string_hash(k)), 64, 0, LONG_MAX, want)
        got = f.select_phy_offsets(k, 64, 0, LONG_MAX)
        assert got == want and 1000 + i in got, k
    f.close()
