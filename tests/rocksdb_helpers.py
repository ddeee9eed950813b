"""RocksDB stores for the tests, written with rocksdict in the broker's exact key and value layouts: the
consume-queue database as RocksDBConsumeQueueTable and RocksDBConsumeQueueOffsetTable write it, and the v1 and v2
config databases as RocksDBConfigManager and the config/v2 managers write them."""
from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

from engine.broker.consumequeue.rocksdb import (CHECKPOINT_TOPIC, cq_key, cq_value, offset_key, offset_value)

SIDE_CAR = "rocksdict-config.json"


def _open(path: Path, cfs: tuple[str, ...]):
    from rocksdict import Options, Rdict
    o = Options(raw_mode=True)
    o.create_if_missing(True)
    o.create_missing_column_families(True)
    return Rdict(str(path), o, column_families={n: Options(raw_mode=True) for n in cfs})


def _close(db, path: Path) -> None:
    db.close()
    (path / SIDE_CAR).unlink(missing_ok=True)  # rocksdict's own file: a broker's database has none


def write_cq_db(path: Path, units, mins: dict | None = None, checkpoint: int | None = None) -> None:
    """A consume-queue database from units (topic, queueId, cqOffset, phyOffset, size, tagsCode, storeTime): one
    default-CF entry a unit, a "max" entry per queue naming its last unit (the dispatch's putMaxPhyAndCqOffset), a
    "min" entry per queue (mins[(topic, qid)] = (phy, cq); default: its first unit) and the CHECKPOINT_TOPIC
    entry (default: the end of the last unit)."""
    path.mkdir(parents=True, exist_ok=True)
    db = _open(path, ("offset",))
    off = db.get_column_family("offset")
    last: dict = {}
    first: dict = {}
    end = 0
    for t, q, c, phy, size, tags, ts in units:
        db[cq_key(t, q, c)] = cq_value(phy, size, tags, ts)
        if (t, q) not in last or c > last[(t, q)][1]:
            last[(t, q)] = (phy, c)
        if (t, q) not in first or c < first[(t, q)][1]:
            first[(t, q)] = (phy, c)
        end = max(end, phy + size)
    for (t, q), (phy, c) in last.items():
        off[offset_key(t, q, True)] = offset_value(phy, c)
    for (t, q), (phy, c) in {**first, **(mins or {})}.items():
        off[offset_key(t, q, False)] = offset_value(phy, c)
    off[offset_key(CHECKPOINT_TOPIC, 0, True)] = struct.pack(">q", end if checkpoint is None else checkpoint)
    _close(db, path)


def store_units(store: Path) -> list[tuple]:
    """Every unit of a file store's consume queues with the store time of its record (what the dispatch hands
    RocksDBConsumeQueueTable)."""
    from engine.broker.config.brokerconf import load_config
    from engine.broker.store import MessageStore

    out = []
    with MessageStore(load_config(None, storePathRootDir=str(store))) as st:
        for t, q in st.layout.list_queues().queues:
            cq = st.consume_queue(t, q)
            for i, u in enumerate(cq.all_units().tolist()):
                if i < cq.min_logic_offset // 20:
                    continue
                rec = st.get(u[0], check_crc=False)
                out.append((t, q, i, u[0], u[1], u[2], rec.store_timestamp))
    return out


def rocksdb_twin(store: Path, dest: Path, keep_files: bool = False, units=None) -> Path:
    """A copy of a file store whose consume queues are in RocksDB in consumequeue/ itself, as a
    storeType=defaultRocksDB broker at the golden commit keeps them (keep_files: the file queues stay too, as a
    double-writing broker leaves them)."""
    shutil.copytree(store, dest)
    units = store_units(store) if units is None else units
    cq = dest / "consumequeue"
    if not keep_files:
        shutil.rmtree(cq)
    write_cq_db(cq, units)
    return dest


# ------------------------------------------------------------------------------------------- configs


def write_config_v1(config_dir: Path, topics: dict, groups: dict, offsets: dict, counter: int = 1) -> None:
    """config/topics, config/subscriptionGroups, config/consumerOffsets as RocksDB*Manager write them: key = the
    name, value = its JSON (TopicConfig, SubscriptionGroupConfig, RocksDBOffsetSerializeWrapper), and the
    kvDataVersion column family's kvDataVersionKey = the DataVersion JSON."""
    dv = json.dumps({"counter": counter, "stateVersion": 0, "timestamp": 1_700_000_000_000}).encode()
    for name, table, wrap in (("topics", topics, None), ("subscriptionGroups", groups, None),
                              ("consumerOffsets", offsets, "offsetTable")):
        p = config_dir / name
        p.mkdir(parents=True, exist_ok=True)
        db = _open(p, ("kvDataVersion", "forbidden"))
        for k, v in table.items():
            db[k.encode()] = json.dumps({wrap: v} if wrap else v).encode()
        db.get_column_family("kvDataVersion")[b"kvDataVersionKey"] = dv
        _close(db, p)


def _v2_key(table: int, name: str) -> bytes:
    b = name.encode()
    return b"\x01" + struct.pack(">h", table) + b"\x02" + struct.pack(">h", len(b)) + b


def write_config_v2(config_dir: Path, topics: dict, groups: dict, offsets: dict) -> None:
    """config/rdb as the config/v2 managers write it: [1][tableId:int16][2][len:int16][name] -> [1][JSON] for
    topics (3) and groups (4); consumer offsets (1): [1][1:int16][2][len][group][1][len][topic][1][queueId:int32]
    -> offset:int64; data versions [1][tableId][1]"data_version" -> three int64."""
    p = config_dir / "rdb"
    p.mkdir(parents=True, exist_ok=True)
    db = _open(p, ())
    for table, items in ((3, topics), (4, groups)):
        for k, v in items.items():
            db[_v2_key(table, k)] = b"\x01" + json.dumps(v).encode()
        db[b"\x01" + struct.pack(">h", table) + b"\x01data_version"] = struct.pack(">qqq", 0, 1_700_000_000_000, 1)
    for key, queues in offsets.items():
        topic, group = key.split("@")
        g, t = group.encode(), topic.encode()
        for qid, o in queues.items():
            k = (b"\x01" + struct.pack(">h", 1) + b"\x02" + struct.pack(">h", len(g)) + g + b"\x01"
                 + struct.pack(">h", len(t)) + t + b"\x01" + struct.pack(">i", int(qid)))
            db[k] = struct.pack(">q", o)
    _close(db, p)


def config_tables_of(store: Path) -> tuple[dict, dict, dict]:
    """(topics, groups, offsets) of a store's config/*.json, as the tables to write into RocksDB."""
    c = store / "config"
    topics = json.loads((c / "topics.json").read_text())["topicConfigTable"] if (c / "topics.json").exists() else {}
    groups = (json.loads((c / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
              if (c / "subscriptionGroup.json").exists() else {})
    offsets = (json.loads((c / "consumerOffset.json").read_text())["offsetTable"]
               if (c / "consumerOffset.json").exists() else {})
    return topics, groups, offsets


def move_configs_to_rocksdb(store: Path, version: str = "v1") -> None:
    """Replace the store's config JSON files by the RocksDB databases of `version` holding the same tables."""
    topics, groups, offsets = config_tables_of(store)
    c = store / "config"
    for n in ("topics.json", "subscriptionGroup.json", "consumerOffset.json"):
        for s in ("", ".bak"):
            if (c / (n + s)).exists():
                os.unlink(c / (n + s))
    (write_config_v1 if version == "v1" else write_config_v2)(c, topics, groups, offsets)
