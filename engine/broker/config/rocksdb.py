"""Topics, subscription groups and consumer offsets kept in RocksDB (format §11.5), read as the broker loads them,
and the one choice between them and config/*.json (load_topics, load_subscription_groups, load_consumer_offsets:
the readers call these, never jsonfiles directly, so the mode decides).

v1 (storeType=defaultRocksDB; broker/config/v1/RocksDB*Manager, RocksDBConfigManager, ConfigRocksDBStorage):
one database a table, config/topics/, config/subscriptionGroups/, config/consumerOffsets/. The default column
family maps a name (topic, group, topic@group) to its JSON (TopicConfig, SubscriptionGroupConfig,
RocksDBOffsetSerializeWrapper {"offsetTable": {queueId: offset}}); the kvDataVersion column family holds the
table's DataVersion JSON under "kvDataVersionKey". At load the broker merges config/<table>.json over it when
that file's dataVersion counter is higher (RocksDB*Manager.merge): so do we.

v2 (configManagerVersion=v2; broker/config/v2: ConfigStorage, ConfigHelper, TableId, TablePrefix, RecordPrefix,
SerializationType): one database, config/rdb/, default column family, big-endian keys
  [TablePrefix.TABLE=1][TableId:int16][RecordPrefix.DATA=2][len:int16][name]  -> [SerializationType.JSON=1][JSON]
for topics (TableId 3) and subscription groups (4), and for consumer offsets (1)
  [1][1:int16][2][groupLen:int16][group][CTRL_1][topicLen:int16][topic][CTRL_1][queueId:int32] -> offset:int64
with each table's [1][TableId][RecordPrefix.DATA_VERSION=1]"data_version" -> stateVersion, timestamp, counter.
LMQ offsets are skipped, as ConsumerOffsetManagerV2 loads them.

config/metadata/ (newer releases) is named by the mode and not read here.
"""
from __future__ import annotations

import struct
from pathlib import Path

from engine.broker.config import jsonfiles
from engine.broker.config.jsonfiles import ConfigFile, ConfigFileError
from engine.broker.layout import StoreLayout
from engine.broker.mode import (JSON_CONFIGS, LMQ_PREFIX, ROCKSDB_CONFIGS_V1, ROCKSDB_CONFIGS_V2, StoreMode,
                                is_rocksdb_dir)
from engine.java import fastjson

#: ConfigRocksDBStorage's column families and data-version key.
KV_DATA_VERSION_CF = "kvDataVersion"
KV_DATA_VERSION_KEY = b"kvDataVersionKey"
#: config/v2 TableId, TablePrefix, RecordPrefix, SerializationType values.
TABLE_CONSUMER_OFFSET, TABLE_PULL_OFFSET, TABLE_TOPIC, TABLE_SUBSCRIPTION_GROUP = 1, 2, 3, 4
TABLE_PREFIX = 1
RECORD_DATA_VERSION, RECORD_DATA = 1, 2
SERIALIZATION_JSON = 1
DATA_VERSION_KEY = b"data_version"
CTRL_1 = 1

#: (v1 directory, JSON file, jsonfiles decoder, v2 table id) of each table.
TABLES = {
    "topics": ("topics", jsonfiles.TOPICS, jsonfiles.decode_topics, TABLE_TOPIC),
    "subscriptionGroups": ("subscriptionGroups", jsonfiles.SUBSCRIPTION_GROUP, jsonfiles.decode_subscription_groups,
                           TABLE_SUBSCRIPTION_GROUP),
    "consumerOffsets": ("consumerOffsets", jsonfiles.CONSUMER_OFFSET, jsonfiles.decode_consumer_offsets,
                        TABLE_CONSUMER_OFFSET),
}


def _json(raw: bytes, where: str):
    try:
        return fastjson.loads(raw)
    except fastjson.FastjsonError as e:
        raise ConfigFileError(f"{where} is damaged ({e})") from None


def _rel(path: Path, layout: StoreLayout) -> str:
    try:
        return Path(path).relative_to(layout.root).as_posix() + "/"
    except ValueError:
        return str(path)


# ------------------------------------------------------------------------------------------- v1


def read_v1(layout: StoreLayout, table: str) -> ConfigFile:
    """One v1 table: its database decoded as the broker's RocksDB*Manager.decode* does, then merged with
    config/<table>.json when that file's dataVersion counter is higher (RocksDB*Manager.merge)."""
    from engine.broker.rocksdbread import ReadOnlyDB
    dirname, json_name, decode, _tid = TABLES[table]
    path = layout.config_dir / dirname
    rel = _rel(path, layout)
    res = ConfigFile(json_name)
    if not is_rocksdb_dir(path):
        res.value = {}
        res.notes.append(f"{rel} holds no RocksDB database: the broker would start with an empty table")
        res.source = None
        return _merge_json(layout, json_name, decode, res, -1)
    entries = {}
    counter = 0
    with ReadOnlyDB(path) as db:
        for k, v in db.items("default"):
            try:
                name = k.decode()
            except UnicodeDecodeError:
                res.notes.append(f"{rel}: a key that is not UTF-8 ({k[:40]!r}); skipped")
                continue
            entries[name] = _json(v, f"{rel} entry {name!r}")
        dv = db.get(KV_DATA_VERSION_CF, KV_DATA_VERSION_KEY)
        if dv:
            ver = _json(dv, f"{rel} kvDataVersion")
            counter = int(ver.get("counter", 0)) if isinstance(ver, dict) else 0
    try:
        if table == "topics":
            res.value = decode({"topicConfigTable": entries})
        elif table == "subscriptionGroups":
            res.value = decode({"subscriptionGroupTable": entries})
        else:
            res.value = decode({"offsetTable": {k: (v or {}).get("offsetTable") if isinstance(v, dict) else v
                                                for k, v in entries.items()}})
    except jsonfiles.ShapeError as e:
        raise ConfigFileError(f"{rel} is not in the broker's shape ({e})") from None
    res.source = rel + " (RocksDB)"
    return _merge_json(layout, json_name, decode, res, counter)


def _merge_json(layout: StoreLayout, json_name: str, decode, res: ConfigFile, kv_counter: int) -> ConfigFile:
    """RocksDB*Manager.merge: a config/<name> (or .bak) whose dataVersion counter is higher than the database's
    replaces the table."""
    main, bak = layout.config_file(json_name), layout.config_file(json_name + jsonfiles.BAK_SUFFIX)
    if not (main.exists() or bak.exists()):
        return res
    ver = jsonfiles.load_config_file(layout, json_name, lambda root: (root or {}).get("dataVersion")
                                     if isinstance(root, dict) else None, required=False)
    counter = (ver.value or {}).get("counter", 0) if isinstance(ver.value, dict) else 0
    try:
        counter = int(counter)
    except (TypeError, ValueError):
        counter = 0
    if counter > kv_counter:
        js = jsonfiles.load_config_file(layout, json_name, decode, required=False, empty={})
        if js.found:
            js.notes.append(f"config/{json_name} has dataVersion counter {counter}, above the RocksDB table's "
                            f"{kv_counter}: the broker loads it over the database (RocksDB*Manager.merge)")
            return js
    return res


# ------------------------------------------------------------------------------------------- v2


def _i16(b: bytes, at: int) -> int:
    return struct.unpack_from(">h", b, at)[0]


def read_v2(layout: StoreLayout, table: str) -> ConfigFile:
    """One table of config/rdb/ as the config/v2 managers load it."""
    from engine.broker.rocksdbread import ReadOnlyDB, prefix_end
    _dir, json_name, decode, tid = TABLES[table]
    path = layout.config_dir / "rdb"
    rel = _rel(path, layout)
    res = ConfigFile(json_name)
    if not is_rocksdb_dir(path):
        res.value = {}
        res.notes.append(f"{rel} holds no RocksDB database: the broker would start with an empty table")
        return res
    prefix = bytes([TABLE_PREFIX]) + struct.pack(">h", tid) + bytes([RECORD_DATA])
    entries: dict = {}
    with ReadOnlyDB(path) as db:
        for k, v in db.items("default", prefix, prefix_end(prefix)):
            try:
                if tid == TABLE_CONSUMER_OFFSET:
                    glen = _i16(k, 4)
                    group = k[6:6 + glen].decode()
                    tlen = _i16(k, 7 + glen)
                    topic = k[9 + glen:9 + glen + tlen].decode()
                    qid = struct.unpack_from(">i", k, 10 + glen + tlen)[0]
                    if len(k) != 14 + glen + tlen or len(v) != 8:
                        raise ValueError("length")
                    if topic.startswith(LMQ_PREFIX):
                        continue
                    entries.setdefault(f"{topic}{jsonfiles.TOPIC_GROUP_SEPARATOR}{group}", {})[qid] = \
                        struct.unpack(">q", v)[0]
                else:
                    n = _i16(k, 4)
                    name = k[6:6 + n].decode()
                    if len(k) != 6 + n or not v or v[0] != SERIALIZATION_JSON:
                        raise ValueError("layout")
                    entries[name] = _json(v[1:], f"{rel} entry {name!r}")
            except (ValueError, UnicodeDecodeError, struct.error):
                res.notes.append(f"{rel}: an entry not in the broker's layout (key {k[:40]!r}); skipped")
    try:
        if table == "topics":
            res.value = decode({"topicConfigTable": entries})
        elif table == "subscriptionGroups":
            res.value = decode({"subscriptionGroupTable": entries})
        else:
            res.value = decode({"offsetTable": entries})
    except jsonfiles.ShapeError as e:
        raise ConfigFileError(f"{rel} is not in the broker's shape ({e})") from None
    res.source = rel + " (RocksDB)"
    return res


# ------------------------------------------------------------------------------------------- the choice


def _load(layout: StoreLayout, mode: StoreMode | None, table: str, json_loader, required: bool) -> ConfigFile:
    kind = mode.configs if mode is not None else JSON_CONFIGS
    if kind == ROCKSDB_CONFIGS_V1:
        return read_v1(layout, table)
    if kind == ROCKSDB_CONFIGS_V2:
        return read_v2(layout, table)
    res = json_loader(layout, required)
    if kind != JSON_CONFIGS:  # config/metadata/: not read
        res.notes.append(f"this store keeps its configs in RocksDB ({kind}), which rmqtool does not read: "
                         f"the table shown comes from config/{res.name}, which the broker may not use")
    return res


def load_topics(layout: StoreLayout, mode: StoreMode | None = None, required: bool = False) -> ConfigFile:
    """The topic table from where the broker loads it (mode: detect_mode's answer; None reads the JSON files)."""
    return _load(layout, mode, "topics", jsonfiles.topic_configs, required)


def load_subscription_groups(layout: StoreLayout, mode: StoreMode | None = None,
                             required: bool = False) -> ConfigFile:
    return _load(layout, mode, "subscriptionGroups", jsonfiles.subscription_groups, required)


def load_consumer_offsets(layout: StoreLayout, mode: StoreMode | None = None, required: bool = True) -> ConfigFile:
    return _load(layout, mode, "consumerOffsets", jsonfiles.consumer_offsets, required)
