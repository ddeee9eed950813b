"""Settings resolved once (issue 31 item 4): the store configuration is frozen with a Path root, settling the
geometry from the files gives a new configuration (with where each value came from) and never writes into the
caller's, and the store's mode is decided once per settled configuration."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import engine.broker.mode as mode_module
from engine.broker.config.brokerconf import (FROM_CONF, FROM_DEFAULT, FROM_FILES, FROM_OPTION, BrokerConfig,
                                             load_config)
from engine.broker.index.geometry import resolve_index_geometry
from engine.broker.mode import detect_mode
from engine.broker.store import MessageStore
from engine.timer.layout import TimerGeometry
from tests.helpers import SEG_GEOM, cli, put, sample_messages


@pytest.fixture
def store(tmp_path) -> Path:
    """A store whose index files are 16 slots x 64 items (not RocketMQ's default geometry)."""
    root = tmp_path / "store"
    put(root, sample_messages(12), tmp_path, "--create")
    return root


def settings(cfg: BrokerConfig) -> tuple:
    """Every setting of a configuration (its fields as given, not what it caches)."""
    return tuple(getattr(cfg, f.name) if f.name not in ("sources", "properties") else dict(getattr(cfg, f.name) or {})
                 for f in dataclasses.fields(cfg) if f.init)


def test_config_is_frozen_with_a_path_root(tmp_path):
    cfg = load_config(None, storePathRootDir=str(tmp_path))
    assert isinstance(cfg.storePathRootDir, Path) and cfg.root == tmp_path
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.maxHashSlotNum = 7
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.storePathRootDir = tmp_path / "elsewhere"
    with pytest.raises(TypeError):
        cfg.sources["maxHashSlotNum"] = FROM_OPTION


def test_sources_follow_option_over_conf_over_default(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={tmp_path}\nmaxHashSlotNum=32\nmaxIndexNum=128\n")
    cfg = load_config(conf, maxIndexNum=256)
    assert (cfg.maxHashSlotNum, cfg.maxIndexNum) == (32, 256)
    assert cfg.source("maxHashSlotNum") == FROM_CONF
    assert cfg.source("maxIndexNum") == FROM_OPTION
    assert cfg.source("mappedFileSizeCommitLog") == FROM_DEFAULT
    assert cfg.properties["maxHashSlotNum"] == "32"
    with pytest.raises(TypeError):
        cfg.properties["storeType"] = "RocksDB"


def test_resolving_the_geometry_leaves_the_callers_config(store):
    cfg = load_config(None, storePathRootDir=store)
    before = (cfg.maxHashSlotNum, cfg.maxIndexNum, cfg.hashSlotNumGiven, dict(cfg.sources))
    assert not cfg.hashSlotNumGiven and not cfg.indexNumGiven
    settled = resolve_index_geometry(cfg)
    assert (settled.maxHashSlotNum, settled.maxIndexNum) == (16, 64)
    assert settled.hashSlotNumGiven and settled.indexNumGiven  # settled: later opens take it as given
    assert settled.source("maxHashSlotNum") == FROM_FILES and settled.source("maxIndexNum") == FROM_FILES
    assert (cfg.maxHashSlotNum, cfg.maxIndexNum, cfg.hashSlotNumGiven, dict(cfg.sources)) == before


def test_opening_a_store_leaves_the_callers_config(store):
    cfg = load_config(None, storePathRootDir=store)
    before = settings(cfg)
    with MessageStore(cfg) as st:
        assert st.index is not None
        assert (st.config.maxHashSlotNum, st.config.maxIndexNum) == (16, 64)
        assert st.config.source("maxHashSlotNum") == FROM_FILES
    assert settings(cfg) == before
    assert (cfg.maxHashSlotNum, cfg.maxIndexNum) == (BrokerConfig.maxHashSlotNum, BrokerConfig.maxIndexNum)


def test_a_flag_keeps_its_source_when_the_files_settle_the_other(store):
    cfg = load_config(None, storePathRootDir=store, maxHashSlotNum=16)
    settled = resolve_index_geometry(cfg)
    assert settled.maxIndexNum == 64
    assert settled.source("maxHashSlotNum") == FROM_OPTION and settled.source("maxIndexNum") == FROM_FILES


def test_timer_geometry_leaves_the_callers_config(tmp_path):
    cfg = load_config(None, storePathRootDir=tmp_path)
    before = settings(cfg)
    TimerGeometry.of(cfg)
    assert settings(cfg) == before


def test_mode_is_decided_once_per_settled_config(store):
    cfg = load_config(None, storePathRootDir=store)
    first = detect_mode(cfg)
    assert detect_mode(cfg) is first
    assert detect_mode(resolve_index_geometry(cfg)) is first  # a geometry settled from the files keeps it


def _count_modes(monkeypatch) -> list:
    """Every mode decided (each decision makes one StoreMode)."""
    made: list = []
    real = mode_module.StoreMode

    def counting(*args, **kwargs):
        m = real(*args, **kwargs)
        made.append(m)
        return m
    monkeypatch.setattr(mode_module, "StoreMode", counting)
    return made


@pytest.mark.parametrize("args", [
    ["put", "--json", "--topic", "T", "--body", "b", *SEG_GEOM],
    ["recover", "--dry-run", "--json", *SEG_GEOM],
    ["recover", "--json", *SEG_GEOM],
    ["verify-cq", "--json"],
    ["doctor", "--json", *SEG_GEOM],
    ["dump-cq", "--topic", "TopicA", "--queue-id", "0", "--json"],
    ["query-key", "--topic", "TopicA", "--key", "k0", "--json"],
    ["info", "--json"],
])
def test_one_command_decides_the_mode_at_most_once(store, monkeypatch, args):
    made = _count_modes(monkeypatch)
    r = cli(*args[:1], "--store", str(store), *args[1:], code=None)
    assert r.exit_code == 0, (r.exit_code, r.stdout, r.stderr)
    assert len(made) <= 1, len(made)


def test_info_json_says_where_the_geometry_came_from(store, tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("maxHashSlotNum=16\n")
    out = json.loads(cli("info", "--store", str(store), "--broker-conf", str(conf), "--json").stdout)
    geo = out["index"]["geometry"]
    assert geo["hashSlots"] == {"value": 16, "from": FROM_CONF}
    assert geo["maxIndex"] == {"value": 64, "from": FROM_FILES}


def test_the_index_files_are_read_once_per_settled_config(store, monkeypatch):
    import engine.broker.index.geometry as geometry

    read: list = []
    real = geometry.index_file_facts
    monkeypatch.setattr(geometry, "index_file_facts", lambda p: read.append(p) or real(p))
    cfg = load_config(None, storePathRootDir=store)
    first = resolve_index_geometry(cfg)
    n = len(read)
    again = resolve_index_geometry(cfg)
    assert n > 0 and len(read) == n
    assert (again.maxHashSlotNum, again.maxIndexNum, again.source("maxIndexNum")) == (16, 64, FROM_FILES)
    assert (first.maxHashSlotNum, first.maxIndexNum) == (16, 64)


def test_the_tiered_geometry_says_where_each_value_came_from(tmp_path):
    from engine.tiered.flat.config import load_tiered_config
    from engine.tiered.index.table import resolve_geometry

    conf = tmp_path / "broker.conf"
    conf.write_text("tieredStoreIndexFileMaxHashSlotNum=128\ntieredStoreIndexFileMaxIndexNum=2000\n")
    by_conf = resolve_geometry(load_tiered_config(conf, tieredStoreIndexFileMaxIndexNum=4000), [], [])
    assert (by_conf.hash_slot_num, by_conf.index_num) == (128, 4000)
    assert by_conf.sources == {"hashSlots": FROM_CONF, "maxIndex": FROM_OPTION}
    by_option = resolve_geometry(load_tiered_config(None, tieredStoreIndexFileMaxHashSlotNum=64), [], [])
    assert by_option.index_num is None  # each local file's capacity from its size
    assert by_option.sources == {"hashSlots": FROM_OPTION, "maxIndex": FROM_FILES}
    assert resolve_geometry(load_tiered_config(None), [], []).sources == {"hashSlots": FROM_DEFAULT,
                                                                          "maxIndex": FROM_DEFAULT}
