"""The store's mode (engine.broker.mode) and the write guard (engine.broker.write.guard): every mode a 5.x broker
writes is named by info and doctor, and every writer refuses a mode it cannot write as the broker does, dry runs
included, with exit 2 and no file changed."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.broker.config.brokerconf import load_config
from engine.broker.mode import WRITER_RULES, WRITERS, detect_mode, writer_kind
from dledger_helpers import make_dledger_in_place
from helpers import SEG_GEOM, put, run, sample_messages, snapshot


def _fake_rocksdb(d: Path) -> None:
    """A RocksDB database (CURRENT and a MANIFEST make it one for detection): an empty consume-queue database as
    RocksDBConsumeQueueStore leaves it (rmqtool reads RocksDB now, so the database must open)."""
    from rocksdb_helpers import write_cq_db
    write_cq_db(d, [])


def _conf(tmp: Path, store: Path, **keys) -> Path:
    p = tmp / "broker.conf"
    lines = [f"storePathRootDir={store}", "mappedFileSizeCommitLog=4096", "maxHashSlotNum=16", "maxIndexNum=64"]
    p.write_text("\n".join(lines + [f"{k}={v}" for k, v in keys.items()]) + "\n")
    return p


@pytest.fixture(scope="module")
def base_store(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("modebase")
    store = tmp / "store"
    put(store, sample_messages(30), tmp)
    return store


def _copy(base: Path, tmp: Path) -> Path:
    dest = tmp / "store"
    shutil.copytree(base, dest)
    return dest


def _dledger(store: Path, tmp: Path) -> tuple[Path, dict]:
    """A store a DLedger broker wrote: its entries in dledger-n0/data (tests/dledger_helpers.py), no commitlog/."""
    make_dledger_in_place(store, tmp)
    return _conf(tmp, store, enableDLegerCommitLog="true", dLegerSelfId="n0", dLegerGroup="broker-a"), {
        "commitLog": "dledger", "dledgerDir": "dledger-n0/", "features": ["dledger-commitlog"]}


def _dledger_switched(store: Path, tmp: Path):
    """A file store taken over by a DLedger broker: commitlog/ below dividedCommitlogOffset, entries after it."""
    make_dledger_in_place(store, tmp, old_count=10)
    return _conf(tmp, store, enableDLegerCommitLog="true", dLegerSelfId="n0"), {
        "commitLog": "dledger", "oldFileCommitLog": True, "features": ["dledger-commitlog+old-file-commitlog"]}


def _rocksdb_cq(store: Path, tmp: Path):
    shutil.rmtree(store / "consumequeue")
    _fake_rocksdb(store / "consumequeue")
    return None, {"consumeQueue": "rocksdb", "rocksdbConsumeQueueDir": "consumequeue/"}


def _rocksdb_cq_new(store: Path, tmp: Path):
    shutil.rmtree(store / "consumequeue")
    _fake_rocksdb(store / "consumequeue_r")
    return None, {"consumeQueue": "rocksdb", "rocksdbConsumeQueueDir": "consumequeue_r/"}


def _combined(store: Path, tmp: Path):
    _fake_rocksdb(store / "consumequeue")
    return _conf(tmp, store, rocksdbCQDoubleWriteEnable="true"), {"consumeQueue": "file+rocksdb"}


def _configs_v1(store: Path, tmp: Path):
    for name in ("topics", "subscriptionGroups", "consumerOffsets"):
        _fake_rocksdb(store / "config" / name)
    return None, {"configs": "rocksdb-v1"}


def _configs_v2(store: Path, tmp: Path):
    _fake_rocksdb(store / "config" / "rdb")
    return _conf(tmp, store, configManagerVersion="v2"), {"configs": "rocksdb-v2"}


def _configs_metadata(store: Path, tmp: Path):
    _fake_rocksdb(store / "config" / "metadata")
    return None, {"configs": "rocksdb-metadata"}


def _controller(store: Path, tmp: Path):
    from engine.broker.config import epochfile

    epochfile.write(store / "epochFileCheckpoint", [epochfile.EpochEntry(1, 0)])  # as CheckpointFile writes it
    return _conf(tmp, store, enableControllerMode="true"), {"controller": True, "epochFile": "epochFileCheckpoint"}


def _lmq(store: Path, tmp: Path):
    return _conf(tmp, store, enableLmq="true", enableMultiDispatch="true"), {"lmq": True, "multiDispatch": True}


def _lmq_files(store: Path, tmp: Path):
    (store / "consumequeue" / "%LMQ%orders" / "0").mkdir(parents=True)
    return None, {"lmq": True}


def _batch(store: Path, tmp: Path):
    d = store / "batchconsumequeue" / "BatchTopic" / "0"
    d.mkdir(parents=True)
    (d / "00000000000000000000").write_bytes(b"\0" * 46)
    return None, {"batchConsumeQueue": True}


def _compaction(store: Path, tmp: Path):
    d = store / "compaction" / "compactionLog" / "CompactTopic" / "0"
    d.mkdir(parents=True)
    (d / "00000000000000000000").write_bytes(b"\0" * 64)
    return None, {"compaction": True}


def _conflict(store: Path, tmp: Path):
    data = store / "dledger-n0" / "data"
    data.mkdir(parents=True)
    (data / "00000000000000000000").write_bytes(b"\0" * 64)
    return _conf(tmp, store, enableDLegerCommitLog="false"), {"commitLog": "dledger"}


MODES = {"dledger": _dledger, "dledger-switched": _dledger_switched, "rocksdb-cq": _rocksdb_cq,
         "rocksdb-cq-new": _rocksdb_cq_new, "combined": _combined, "configs-v1": _configs_v1,
         "configs-v2": _configs_v2, "configs-metadata": _configs_metadata, "controller": _controller,
         "lmq": _lmq, "lmq-files": _lmq_files, "batch": _batch, "compaction": _compaction, "conflict": _conflict}


def _store_args(store: Path, conf: Path | None, geometry: bool = True) -> list[str]:
    """The arguments naming the store: its broker.conf, else -s (with the geometry options for commands that
    take them; info and doctor read it from the files)."""
    return ["-c", str(conf)] if conf is not None else ["-s", str(store), *(SEG_GEOM if geometry else [])]


@pytest.fixture(params=sorted(MODES))
def mode_store(request, base_store, tmp_path):
    store = _copy(base_store, tmp_path)
    conf, expect = MODES[request.param](store, tmp_path)
    return request.param, store, conf, expect


def test_file_store_is_the_file_store(base_store, tmp_path):
    store = _copy(base_store, tmp_path)
    r = run(["info", "-s", store, "--json"])
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)["mode"]
    assert m["fileStore"] is True and m["features"] == [] and m["unsupportedReads"] == []
    assert all(w["allowed"] for w in m["writers"]) and len(m["writers"]) == len(WRITERS)


def test_detect_mode_and_info_name_it(mode_store):
    name, store, conf, expect = mode_store
    cfg = load_config(conf, storePathRootDir=None if conf else str(store))
    m = detect_mode(cfg).as_dict()
    for k, v in expect.items():
        assert m[k] == v, (name, k, m[k])
    assert m["fileStore"] is False
    assert m["evidence"], "every mode says what spoke for it"
    r = run(["info", *_store_args(store, conf, geometry=False), "--json"])
    assert r.exit_code in (0, 3), r.output
    info_mode = json.loads(r.stdout)["mode"]
    assert info_mode == m
    # a mode rmqtool cannot read, or a conflict, is never an exit 0
    assert (r.exit_code == 3) == bool(m["unsupportedReads"] or m["conflicts"]), (name, r.exit_code)


def test_conflict_is_reported(base_store, tmp_path):
    store = _copy(base_store, tmp_path)
    conf, _ = _conflict(store, tmp_path)
    m = detect_mode(load_config(conf))
    assert m.conflicts and "enableDLegerCommitLog=false" in m.conflicts[0]
    r = run(["doctor", "-c", str(conf), "--json"])
    assert r.exit_code == 3
    kinds = {f["kind"] for f in json.loads(r.stdout)["findings"]}
    assert "mode-conflict" in kinds


def test_doctor_names_the_mode_and_never_prints_a_refused_fix(mode_store):
    name, store, conf, _ = mode_store
    r = run(["doctor", *_store_args(store, conf, geometry=False), "--json"])
    assert r.exit_code in (0, 3), r.output
    d = json.loads(r.stdout)
    assert d["mode"]["fileStore"] is False
    kinds = [f["kind"] for f in d["findings"]]
    assert "store-mode" in kinds
    if d["mode"]["unsupportedReads"]:
        assert not d["healthy"] and "mode-not-checked" in kinds
    cfg = load_config(conf, storePathRootDir=None if conf else str(store))
    mode = detect_mode(cfg)
    for cmd in d["commands"]:
        words = cmd.split()[1:3]
        writer = " ".join(words) if words[0] == "repair" else words[0]
        assert mode.write_refusal(writer) is None, (name, cmd)


def _writer_commands(args: list[str]) -> list[tuple[str, list[str]]]:
    return [
        ("put", ["put", *args, "-t", "TopicA", "--body", "x"]),
        ("recover", ["recover", *args, "--dry-run"]),
        ("recover", ["recover", *args]),
        ("clean", ["clean", *args, "--dry-run", "--force-now"]),
        ("clean", ["clean", *args, "--force-now"]),
        ("repair config", ["repair", "config", *args, "topics.json", "--from-store"]),
        ("repair config", ["repair", "config", *args, "topics.json", "--from-store", "--dry-run"]),
        ("repair consume-queue", ["repair", "consume-queue", *args]),
        ("repair timer", ["repair", "timer", *args]),
        ("spark-reindex", ["spark-reindex", *args, "--replace", "--master", "inline"]),
    ]


def test_every_writer_refuses_a_mode_it_cannot_write(mode_store):
    name, store, conf, _ = mode_store
    cfg = load_config(conf, storePathRootDir=None if conf else str(store))
    mode = detect_mode(cfg)
    before = snapshot(store.parent)
    refused = 0
    for writer, argv in _writer_commands(_store_args(store, conf)):
        if mode.write_refusal(writer) is None:
            continue
        r = run(argv)
        assert r.exit_code == 2, (name, argv, r.output)
        err = r.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in r.output, (argv, r.stderr)
        assert mode.name in err[0], (argv, err[0])
        refused += 1
    assert snapshot(store.parent) == before, name  # nothing changed, not even a lock file
    expected = sum(1 for w, _ in _writer_commands([]) if mode.write_refusal(w) is not None)
    assert refused == expected


def test_put_with_a_dledger_conf_writes_no_file_commit_log(tmp_path):
    """The issue's case: `put -c broker.conf` of a DLedger broker into its store (or a new one) makes no commitlog/."""
    store = tmp_path / "store"
    conf = _conf(tmp_path, store, enableDLegerCommitLog="true", dLegerSelfId="n0")
    r = run(["put", "-c", str(conf), "-t", "TopicA", "--body", "x"])
    assert r.exit_code == 2
    assert not (store / "commitlog").exists() and not store.exists()


def test_writer_rules_cover_every_writer():
    kinds = {writer_kind(w) for w in WRITERS}
    assert kinds == {"put", "recover", "clean", "repair config", "repair consume-queue", "repair timer",
                     "spark-reindex", "tiered"}
    for feature, allowed in WRITER_RULES.items():
        assert allowed <= kinds, feature
    assert WRITER_RULES["dledger"] == frozenset({"spark-reindex"})  # the index is IndexService's in every mode


# ------------------------------------------------------------------------------ real brokers' stores of each mode

GOLDEN_MODES = {
    # set: (features, unsupported parts before their readers, conf file)
    "modes/dledger": (["dledger-commitlog"], "broker.conf"),
    "modes/rocksdb": (["rocksdb-consume-queue", "rocksdb-v1-configs"], "broker.conf"),
    "modes/lmq": (["lmq", "multi-dispatch"], "broker.conf"),
    "modes/doublewrite": (["file+rocksdb-consume-queue"], "broker.conf"),
    "modes/dledger-switch": (["dledger-commitlog+old-file-commitlog"], "broker_dledger.conf"),
    "broker/r1": ([], "broker.conf"),
}


def _unpack_set(name: str, dest: Path, conf_name: str) -> tuple[Path, Path]:
    """A copy of a golden set's store and its broker.conf pointing at the copy (sets with several confs too)."""
    import tarfile

    from helpers import GOLDEN

    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(GOLDEN / name / "store.tar.gz") as tf:
        tf.extractall(dest, filter="data")
    conf = dest / "broker.conf"
    src = GOLDEN / name / conf_name
    if not src.exists():
        src = GOLDEN / name / ".." / conf_name
    conf.write_text(src.read_text().replace("<store>", str(dest / "store")).replace("<SET>", str(dest)))
    return dest / "store", conf


@pytest.mark.parametrize("name", sorted(GOLDEN_MODES))
def test_real_broker_stores_are_told_apart(name, tmp_path):
    """Each mode a real 5.3.x broker wrote (tests/golden/modes) is decided the same from its broker.conf and from
    its files alone, with no conflict; the classic r1 store is the file store."""
    features, conf_name = GOLDEN_MODES[name]
    store, conf = _unpack_set(name, tmp_path, conf_name)
    by_conf = detect_mode(load_config(conf))
    by_files = detect_mode(load_config(None, storePathRootDir=str(store)))
    assert by_conf.features() == features and not by_conf.conflicts
    # %LMQ% queue directories are only made by a broker that multi-dispatches: the files say both
    assert by_files.features() == features and not by_files.conflicts
    assert by_conf.is_file_store == (features == [])
    before = snapshot(store)
    r = run(["put", "-c", str(conf), "-t", "TopicA", "--body", "x"])
    assert (r.exit_code == 2) == (by_conf.write_refusal("put") is not None), r.output
    if r.exit_code == 2:
        assert snapshot(store) == before
