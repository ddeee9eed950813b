"""The tiered index writers (tiered reindex, tiered compact-index) take the tiered index geometry as the readers
do (broker.conf, then the options, then the store's tiered index files: local tiered_index_file/ files and the
INDEX segments of the tier), refuse in one line when it cannot be told, and never write another geometry than
the existing files' unless --new-geometry asks for it (issue 23 item 1). Through the CLI."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.tiered.index import IndexStoreFile
from helpers import GOLDEN, SMALL, assert_one_line_error, run

F3 = GOLDEN / "tiered-flat" / "f3_index"
F3_SLOTS, F3_ITEMS = 128, 2000          # f3's params.json: the geometry its INDEX segments were written with
T2 = GOLDEN / "tiered" / "t2_full"
T2_PARAMS = json.loads((T2 / "params.json").read_text())
META = "tieredStoreMetadata.json"


@pytest.fixture
def f3_store(tmp_path) -> tuple[Path, Path]:
    """(local store, tier): a store written by put (topics the f3 tier holds), f3's tier and its metadata."""
    store, tier = tmp_path / "store", tmp_path / "tiered"
    lines = [json.dumps({"topic": "TopicTest", "queueId": i % 2, "keys": [f"k{i}"], "body": f"m{i}"})
             for i in range(20)]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    r = run(["put", "-s", store, *SMALL, "--from-jsonl", tmp_path / "in.jsonl"])
    assert r.exit_code == 0, r.output
    shutil.copytree(F3 / "store" / "tiered", tier)
    (store / "config").mkdir(exist_ok=True)
    shutil.copy(F3 / "store" / "broker-a" / "config" / META, store / "config" / META)
    return store, tier


def reindex(store: Path, out: Path, *extra) -> object:
    return run(["tiered", "reindex", "-s", store, "-o", out, "--broker-name", "broker-a", "--master", "inline",
                "--json", *extra])


def slot_counts(out: Path) -> set[int]:
    counts = set()
    for p in sorted(out.iterdir()):
        if p.name.isdigit():
            r = run(["tiered", "inspect-index", p, "--json"])
            assert r.exit_code == 0, r.output
            counts.add(json.loads(r.stdout)["hashSlotNum"])
    return counts


def test_reindex_keeps_the_slot_count_of_the_index_segments(f3_store, tmp_path):
    store, tier = f3_store
    out = tmp_path / "out"
    # The INDEX segments state their slot count but not the item capacity: refused, nothing written.
    assert_one_line_error(reindex(store, out, "-T", tier), code=2, contains="--max-index")
    assert not out.exists()
    r = reindex(store, out, "-T", tier, "--max-index", str(F3_ITEMS))
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["hashSlotNum"] == F3_SLOTS and slot_counts(out) == {F3_SLOTS}


def test_reindex_refuses_another_geometry_unless_asked(f3_store, tmp_path):
    store, tier = f3_store
    out = tmp_path / "out"
    r = reindex(store, out, "-T", tier, "--hash-slots", "1000", "--max-index", "4000")
    assert_one_line_error(r, code=2, contains="--new-geometry")
    assert f"{F3_SLOTS} (" in r.stderr and "1000" in r.stderr and not out.exists()
    r = reindex(store, out, "-T", tier, "--hash-slots", "1000", "--max-index", "4000", "--new-geometry")
    assert r.exit_code == 0, r.output
    assert slot_counts(out) == {1000}
    # --new-geometry names no geometry by itself
    assert_one_line_error(reindex(store, tmp_path / "o2", "-T", tier, "--new-geometry"), code=2,
                          contains="--hash-slots and --max-index")


def test_reindex_takes_broker_conf_first(f3_store, tmp_path):
    store, tier = f3_store
    conf = tmp_path / "broker.conf"
    base = f"storePathRootDir={store}\ntieredStoreFilePath={tier}\nbrokerName=broker-a\n"
    conf.write_text(base + f"tieredStoreIndexFileMaxHashSlotNum={F3_SLOTS}\ntieredStoreIndexFileMaxIndexNum={F3_ITEMS}\n")
    r = run(["tiered", "reindex", "-c", conf, "-o", tmp_path / "out", "--master", "inline", "--json"])
    assert r.exit_code == 0, r.output
    assert slot_counts(tmp_path / "out") == {F3_SLOTS}
    # A broker.conf without the keys means RocketMQ's defaults: not the files' geometry, so refused.
    conf.write_text(base)
    r = run(["tiered", "reindex", "-c", conf, "-o", tmp_path / "out2", "--master", "inline"])
    assert_one_line_error(r, code=2, contains="5000000")
    assert not (tmp_path / "out2").exists()


def test_reindex_without_the_tier_cannot_read_the_segments(f3_store, tmp_path):
    store, _tier = f3_store
    r = reindex(store, tmp_path / "out")
    assert_one_line_error(r, code=2, contains="--tiered-store-path")
    r = reindex(store, tmp_path / "out", "--hash-slots", str(F3_SLOTS), "--max-index", str(F3_ITEMS))
    assert r.exit_code == 0, r.output


def test_reindex_takes_the_local_files_geometry(tmp_path):
    """A local tiered index file (t2: 16 slots x 100 items) tells both numbers."""
    store = tmp_path / "store"
    assert run(["put", "-s", store, *SMALL, "-t", "TopicA", "-k", "a", "--body", "x"]).exit_code == 0
    (store / "tiered_index_file").mkdir()
    shutil.copy(T2 / "unsealed.bin", store / "tiered_index_file" / str(T2_PARAMS["beginTimestamp"]))
    r = reindex(store, tmp_path / "out")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["hashSlotNum"], d["indexNum"]) == (T2_PARAMS["tieredStoreIndexFileMaxHashSlotNum"],
                                                 T2_PARAMS["tieredStoreIndexFileMaxIndexNum"])
    r = reindex(store, tmp_path / "out2", "--max-index", "200")
    assert_one_line_error(r, code=2, contains="--new-geometry")


def test_compact_index_keeps_broker_conf_geometry(tmp_path):
    d = tmp_path / "tiered_index_file"
    d.mkdir()
    src = d / str(T2_PARAMS["beginTimestamp"])
    shutil.copy(T2 / "unsealed.bin", src)
    conf = tmp_path / "broker.conf"
    conf.write_text(f"tieredStoreIndexFileMaxHashSlotNum={T2_PARAMS['tieredStoreIndexFileMaxHashSlotNum']}\n"
                    f"tieredStoreIndexFileMaxIndexNum={T2_PARAMS['tieredStoreIndexFileMaxIndexNum']}\n")
    r = run(["tiered", "compact-index", src, "-o", tmp_path / "c.bin", "-c", conf])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "c.bin").read_bytes() == (T2 / "compacted.bin").read_bytes()
    # broker.conf leaves the keys out: the broker would read the upload with 5,000,000 slots
    conf.write_text("brokerName=broker-a\n")
    r = run(["tiered", "compact-index", src, "-o", tmp_path / "d.bin", "-c", conf])
    assert_one_line_error(r, code=2, contains="--new-geometry")
    assert not (tmp_path / "d.bin").exists()
    r = run(["tiered", "compact-index", src, "-o", tmp_path / "d.bin", "-c", conf, "--new-geometry", "--hash-slots",
             "16", "--max-index", "100"])
    assert r.exit_code == 0 and (tmp_path / "d.bin").read_bytes() == (T2 / "compacted.bin").read_bytes()


def test_compact_index_refuses_a_file_unlike_its_neighbours(tmp_path):
    """A file compacted beside tiered index files of another geometry would be uploaded among them."""
    d = tmp_path / "tiered_index_file"
    d.mkdir()
    src = d / str(T2_PARAMS["beginTimestamp"])
    shutil.copy(T2 / "unsealed.bin", src)
    other = d / str(T2_PARAMS["beginTimestamp"] + 1000)
    with IndexStoreFile.create(other, 32, 100, T2_PARAMS["beginTimestamp"] + 1000) as f:   # the public engine API
        for i in range(40):   # enough items for its geometry to be told from the file
            assert f.put_key("T", 0, 0, [f"k{i}"], 100 * i, 100, T2_PARAMS["beginTimestamp"] + 1500) == "SUCCESS"
    r = run(["tiered", "compact-index", src, "-o", tmp_path / "c.bin"])
    assert_one_line_error(r, code=2, contains="different hash slot counts")
    assert not (tmp_path / "c.bin").exists()
    r = run(["tiered", "compact-index", src, "-o", tmp_path / "c.bin", "--new-geometry", "--hash-slots", "16",
             "--max-index", "100"])
    assert r.exit_code == 0, r.output
