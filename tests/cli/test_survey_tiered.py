"""rmqtool doctor and rmqtool info on a store with a tiered store configured (broker.conf's tieredStoreFilePath):
the golden tiered-flat sets as RocketMQ left them are healthy, damage injected into copies is found with what the
broker does, and where doctor prints a fix, running it leaves a tiered store doctor calls healthy."""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
from pathlib import Path

import pytest

from helpers import GOLDEN, run, snapshot, tiered_store

FLAT = GOLDEN / "tiered-flat"
META = "tieredStoreMetadata.json"


def doctor(conf: Path, code: int) -> dict:
    r = run(["doctor", "-c", conf, "--json"])
    assert r.exit_code == code, r.output
    return json.loads(r.stdout)


def tiered(doc: dict) -> list[dict]:
    return [f for f in doc["findings"] if f["kind"].startswith("tiered-")]


def run_fix(f: dict) -> None:
    words = shlex.split(f["fix"])
    assert words[0] == "rmqtool"
    r = run(words[1:])
    assert r.exit_code == 0, r.output


def segment_files(tier: Path, kind: str) -> list[Path]:
    return sorted(p for p in tier.rglob("*") if p.is_file() and p.parent.name == kind)


@pytest.mark.parametrize("name", ["f1_basic", "f3_index"])
def test_golden_tiered_sets_are_healthy(tmp_path, name):
    store, tier, conf = tiered_store(tmp_path, name)
    before = snapshot(store), snapshot(tier)
    doc = doctor(conf, 0)
    assert "tiered store" in doc["summary"]["checked"]
    assert tiered(doc) == [] and doc["healthy"]
    assert (snapshot(store), snapshot(tier)) == before   # doctor never writes


def test_index_read_with_another_slot_count_is_an_error(tmp_path):
    """f3's INDEX segments were compacted with 128 slots; a broker.conf without the key reads them with
    RocketMQ's default 5,000,000 (format pitfall 40): every key query misses."""
    store, tier, conf = tiered_store(tmp_path, "f3_index", geometry=False)
    doc = doctor(conf, 3)
    found = tiered(doc)
    assert {f["kind"] for f in found} == {"tiered-index-geometry"}
    assert sorted(Path(f["file"]) for f in found) == segment_files(tier, "INDEX")
    assert all(f["severity"] == "error" and f["fix"] is None and "128" in f["problem"] for f in found)
    assert all("tieredStoreIndexFileMaxHashSlotNum" in f["problem"] for f in found)


def test_torn_metadata_fixed_from_its_bak(tmp_path):
    store, tier, conf = tiered_store(tmp_path, "f1_basic")
    main = store / "config" / META
    shutil.copy(main, store / "config" / (META + ".bak"))   # a .bak of the same state (the save before the last)
    main.write_bytes(main.read_bytes()[:100])
    doc = doctor(conf, 0)
    (f,) = tiered(doc)
    assert f["kind"] == "tiered-metadata-from-bak" and f["severity"] == "warning"
    assert f["file"] == f"config/{META}" and "loads the .bak" in f["brokerWill"]
    assert f["fix"].startswith("rmqtool repair config ") and f["fix"].endswith(f"{META} --from-bak")
    run_fix(f)
    doc = doctor(conf, 0)
    assert tiered(doc) == [] and "tiered store" in doc["summary"]["checked"]
    assert main.read_bytes() == (store / "config" / (META + ".bak")).read_bytes()


def test_lost_metadata_rebuilt_from_the_files(tmp_path):
    store, tier, conf = tiered_store(tmp_path, "f1_basic")
    for f in (META, META + ".bak"):
        (store / "config" / f).unlink()
    doc = doctor(conf, 3)
    (f,) = tiered(doc)
    assert f["kind"] == "tiered-metadata-lost" and f["severity"] == "error"
    assert "forgets every tiered segment" in f["brokerWill"]
    assert f["fix"].startswith("rmqtool tiered rebuild-metadata ")
    run_fix(f)
    doc = doctor(conf, 0)
    assert tiered(doc) == []


def test_torn_metadata_and_bak_need_a_person(tmp_path):
    store, tier, conf = tiered_store(tmp_path, "f1_basic")
    for f in (META, META + ".bak"):
        p = store / "config" / f
        p.write_bytes(p.read_bytes()[:50])
    doc = doctor(conf, 3)
    (f,) = tiered(doc)
    assert f["kind"] == "tiered-metadata-lost" and f["fix"] is None
    assert "only a person can decide" in f["problem"] and "rmqtool tiered rebuild-metadata" in f["problem"]


def _drop_first_segment(tier: Path, store: Path) -> dict:
    """A listed COMMIT_LOG segment that is not the last of its queue, gone."""
    p = segment_files(tier, "COMMIT_LOG")[0]
    os.unlink(p)
    return {"tiered-segment-missing": ("error", p)}


def _stray_segment(tier: Path, store: Path) -> dict:
    """A segment file the metadata does not list (an interrupted dispatch), after the queue's last one."""
    first = segment_files(tier, "CONSUME_QUEUE")[0]
    last = max(first.parent.iterdir(), key=lambda q: int(q.name[8:]))   # names sort by their MD5 prefix
    base = int(last.name[8:]) + last.stat().st_size   # where the broker's next segment of the queue would start
    p = last.with_name(hashlib.md5(str(base).encode()).hexdigest()[:8] + f"{base:020d}")   # flat-store §2
    p.write_bytes(b"\0" * 40)
    return {"tiered-segment-unlisted": ("warning", p)}


def _garbage_local_index(tier: Path, store: Path) -> dict:
    d = store / "tiered_index_file"
    d.mkdir()
    (d / "1795781499000").write_bytes(b"not an index file" * 300)
    return {"tiered-index-local-unloadable": ("error", Path("tiered_index_file/1795781499000"))}


@pytest.mark.parametrize("damage", [_drop_first_segment, _stray_segment, _garbage_local_index])
def test_injected_damage_is_found_with_what_the_broker_does(tmp_path, damage):
    store, tier, conf = tiered_store(tmp_path, "f1_basic")
    want = damage(tier, store)
    ((kind, (severity, path)),) = want.items()
    doc = doctor(conf, 3 if severity == "error" else 0)
    got = [f for f in tiered(doc) if f["kind"] == kind]
    assert got, doc["findings"]
    f = got[0]
    assert f["severity"] == severity and Path(f["file"]) == path and f["fix"] is None
    assert f["brokerWill"] and "only a person can decide" in f["problem"]
    r = run(["doctor", "-c", conf])   # the text form names the kind under the file
    assert kind in r.stdout


def test_tiered_store_missing_while_the_metadata_lists_segments(tmp_path):
    store, tier, conf = tiered_store(tmp_path, "f1_basic")
    shutil.rmtree(tier)
    doc = doctor(conf, 3)
    (f,) = tiered(doc)
    assert f["kind"] == "tiered-store-missing" and str(tier) in f["problem"] and f["fix"] is None


def test_not_configured_is_said_not_checked(tmp_path):
    store, tier, conf = tiered_store(tmp_path, "f1_basic")
    r = run(["doctor", "-s", store, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert "tiered store" not in doc["summary"]["checked"] and tiered(doc) == []
    assert any("tieredStoreFilePath" in n for n in doc["notes"])
    r = run(["doctor", "-s", store, "-T", tier, "--json"])   # -T configures it without broker.conf
    assert r.exit_code == 0 and "tiered store" in json.loads(r.stdout)["summary"]["checked"]


def test_info_shows_the_external_tiered_store(tmp_path):
    store, tier, conf = tiered_store(tmp_path, "f3_index")
    r = run(["info", "-c", conf, "--json"])
    assert r.exit_code == 0, r.output
    flat = json.loads(r.stdout)["tiered"]["flatStore"]
    params = json.loads((FLAT / "f3_index" / "params.json").read_text())["brokers"][0]
    queues = params["messagesPerQueue"]
    assert flat["path"] == str(tier) and flat["exists"] and flat["broker"] == "broker-a"
    assert flat["queues"] == flat["metadataQueues"] == len(queues)
    assert flat["topics"] == flat["metadataTopics"] == len({q.split("/")[0] for q in queues})
    assert flat["segments"] == {t: len(segment_files(tier, t)) for t in ("COMMIT_LOG", "CONSUME_QUEUE", "INDEX")}
    assert flat["segments"]["INDEX"] == len(params["indexSegments"])
    assert flat["bytes"]["apparent"] == sum(p.stat().st_size for p in tier.rglob("*") if p.is_file())
    text = run(["info", "-c", conf])
    assert text.exit_code == 0 and "tiered store" in text.stdout and str(len(queues)) + " queue(s)" in text.stdout
    # without broker.conf the tier is unknown: no flatStore
    r = run(["info", "-s", store, "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["tiered"]["flatStore"] is None
    shutil.rmtree(tier)
    r = run(["info", "-c", conf])
    assert r.exit_code == 3 and "tieredStoreFilePath" in r.stderr   # the metadata lists segments it cannot find
    for f in (META, META + ".bak"):
        (store / "config" / f).unlink()
    r = run(["info", "-c", conf, "--json"])   # a broker that has tiered nothing yet: no directory is made before
    assert r.exit_code == 0 and json.loads(r.stdout)["tiered"]["flatStore"]["exists"] is False
