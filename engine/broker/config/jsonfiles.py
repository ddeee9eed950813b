"""The broker's config/*.json files, read as its ConfigManager loads them (format §1.2).

The files are fastjson text (unquoted numeric map keys: engine.java.fastjson). ConfigManager.load reads
`<name>`; when it is missing, empty or does not decode, it reads `<name>.bak` instead (the copy persist() keeps of
the previous save). The broker also deletes the bad main file; rmqtool only reads (files are opened read-only),
and says on stderr which file it read and why.

Shapes (fastjson beans, fields in any order, unknown fields ignored as fastjson does):
  consumerOffset.json      {"offsetTable": {"<topic>@<group>": {<queueId>: <next queue offset>, ...}, ...}}
  delayOffset.json         {"offsetTable": {<delayLevel>: <next offset in SCHEDULE_TOPIC_XXXX/(level-1)>, ...}}
  topics.json              {"topicConfigTable": {"<topic>": {"readQueueNums": 4, "writeQueueNums": 4, ...}}}
  subscriptionGroup.json   {"subscriptionGroupTable": {"<group>": {"groupName": ..., "consumeEnable": ...}}}
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

from engine import findings
from engine.broker.layout import StoreLayout, is_regular_file
from engine.errors import StoreError
from engine.java import fastjson
from engine.java.concurrent import int_hash, iteration_order, string_hash

CONSUMER_OFFSET = "consumerOffset.json"
DELAY_OFFSET = "delayOffset.json"
TOPICS = "topics.json"
SUBSCRIPTION_GROUP = "subscriptionGroup.json"
BAK_SUFFIX = ".bak"
#: ConsumerOffsetManager.TOPIC_GROUP_SEPARATOR
TOPIC_GROUP_SEPARATOR = "@"
#: TopicConfig.defaultReadQueueNums / defaultWriteQueueNums: what a topic entry without the field gets.
DEFAULT_QUEUE_NUMS = 16
#: The initial capacities of the broker's tables (`new ConcurrentHashMap<>(n)`): they decide the order in which
#: the broker writes their entries (ScheduleMessageService.offsetTable, SubscriptionGroupManager's tables).
DELAY_OFFSET_TABLE_CAPACITY = 32
SUBSCRIPTION_GROUP_TABLE_CAPACITY = 1024
#: The groups SubscriptionGroupManager.init puts in its table before it loads the file, in that order (MixAll's
#: names); CID_ONSAPI_* and CID_ONS-HTTP-PROXY and CID_RMQ_SYS_TRANS set consumeBroadcastEnable, the default.
SYSTEM_GROUPS = ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
                 "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER", "CID_RMQ_SYS_TRANS")
#: A config file larger than this is refused rather than parsed (memory bound: the whole text is held).
MAX_CONFIG_BYTES = 256 * 1024 * 1024


class Note(findings.Note):
    """A config note (engine.findings.Note) with the config file it is about, if any, as its field `file`; --json
    of consumers and delays lists it as {"kind", "note"[, "file"]}. Plain strings in a notes list are kind "note"."""

    def __new__(cls, kind: str, text: str, file: str | None = None) -> "Note":
        return super().__new__(cls, kind, text, **({} if file is None else {"file": file}))

    @property
    def file(self) -> str | None:
        return self.fields.get("file")

    def as_dict(self) -> dict:
        d = {"kind": self.kind, "note": str(self)}
        if self.file is not None:
            d["file"] = self.file
        return d


def notes_json(notes) -> list[dict]:
    """A notes list as --json gives it: one {"kind", "note"[, "file"]} per note."""
    return [n.as_dict() if isinstance(n, Note) else {"kind": "note", "note": str(n)} for n in notes]


class ConfigFileError(StoreError):
    """A config file (and its .bak) cannot be read as the broker would read it."""


class ShapeError(ValueError):
    """fastjson text that does not map onto the broker's bean (fastjson would throw)."""


@dataclass
class ConfigFile:
    """One config file as loaded: the decoded table, the file it came from, and what went wrong on the way."""
    name: str
    value: object = None
    source: str | None = None          # "config/<name>" or "config/<name>.bak"; None when neither was read
    notes: list[str] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.source is not None


@dataclass
class TopicConfig:
    topicName: str
    readQueueNums: int = DEFAULT_QUEUE_NUMS
    writeQueueNums: int = DEFAULT_QUEUE_NUMS
    perm: int = 6
    order: bool = False

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def load_config_file(layout: StoreLayout, name: str, decode: Callable[[object], object], required: bool = True,
                     empty=None) -> ConfigFile:
    """ConfigManager.load for config/<name>: the main file, else <name>.bak.

    Neither file present: the broker starts with an empty table; so do we (`empty`), with a note. A damaged
    main file without a usable .bak, or a damaged .bak: ConfigFileError when `required`, else a note and no value.
    """
    main = layout.config_file(name)
    rel = f"config/{name}"
    res = ConfigFile(name)
    why_main = _read(main, decode, res)
    if why_main is None:
        res.source = rel
        return res
    bak = layout.config_file(name + BAK_SUFFIX)
    why_bak = _read(bak, decode, res)
    if why_bak is None:
        res.source = rel + BAK_SUFFIX
        res.notes.append(Note("config-bak-read", f"{rel} {why_main}: read {name}{BAK_SUFFIX} instead, as the "
                              "broker does (it holds the save before the last one)", rel))
        return res
    absent = ("is missing", "is empty")
    if why_main in absent and why_bak in absent:
        res.value = empty
        res.notes.append(Note("config-missing", f"{rel} {why_main} and {name}{BAK_SUFFIX} {why_bak}: the broker "
                              "would start with an empty table", rel))
        return res
    if why_bak in absent:
        msg = (f"{rel} {why_main} and {name}{BAK_SUFFIX} {why_bak}: the broker would start with an empty "
               "table (and delete the damaged file)")
    else:
        msg = f"{rel} {why_main}, and {name}{BAK_SUFFIX} {why_bak}: the broker would not start"
    if required:
        raise ConfigFileError(msg)
    res.notes.append(Note("config-unreadable", msg, rel))
    return res


@dataclass
class ConfigFileState:
    """What ConfigManager.load meets in config/<name> and config/<name>.bak, each read on its own: None when the
    file decodes, else why not ("is missing", "is empty", "is damaged (...)", ...). For `rmqtool doctor`."""
    name: str
    main_problem: str | None
    bak_problem: str | None
    main_size: int = 0

    @property
    def start_fails(self) -> bool:
        """ConfigManager.loadBak returns false only when the .bak has text that does not decode."""
        return self.main_problem is not None and self.bak_problem not in (None, "is missing", "is empty")


def config_file_state(layout: StoreLayout, name: str, decode: Callable[[object], object] = lambda v: v
                      ) -> ConfigFileState:
    """Both files of config/<name> checked separately, read-only (the doctor's view of ConfigManager.load)."""
    main = layout.config_file(name)
    st = ConfigFileState(name, _read(main, decode, ConfigFile(name)),
                         _read(layout.config_file(name + BAK_SUFFIX), decode, ConfigFile(name)))
    if is_regular_file(main):
        st.main_size = os.path.getsize(main)
    return st


def _read(path, decode, res: ConfigFile) -> str | None:
    """Decode one file into res.value; None when it worked, else why not ("is missing", "is damaged: ...")."""
    if not os.path.lexists(path):
        return "is missing"
    if not is_regular_file(path):
        return "is not a regular file (a symlink or a directory; not followed)"
    try:
        size = os.path.getsize(path)
        if size > MAX_CONFIG_BYTES:
            return f"is {size} bytes, over rmqtool's limit of {MAX_CONFIG_BYTES} for a config file"
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if not raw.strip():
        return "is empty"
    try:
        res.value = decode(fastjson.loads(raw))
    except fastjson.FastjsonError as e:
        return f"is damaged ({e})"
    except ShapeError as e:
        return f"is not in the broker's shape ({e})"
    return None


# ------------------------------------------------------------------------------------------- decoders


def _table(root, field_name: str) -> dict:
    """root[field_name] as a map; a missing field or a JSON null is an empty table (fastjson leaves it null)."""
    if root is None:
        return {}
    if not isinstance(root, dict):
        raise ShapeError(f"the root is a {_kind(root)}, not an object")
    table = root.get(field_name)
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise ShapeError(f'"{field_name}" is a {_kind(table)}, not an object')
    return table


def _int_key(k, where: str) -> int:
    """A map key fastjson turns into an Integer: a bare number, or a string of digits."""
    if isinstance(k, int) and not isinstance(k, bool):
        return k
    if isinstance(k, str) and k.strip().lstrip("-").isdigit():
        return int(k)
    raise ShapeError(f"{where}: key {k!r} is not a number")


def _long(v, where: str) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    raise ShapeError(f"{where}: {v!r} is not a number")


def decode_consumer_offsets(root) -> dict[str, dict[int, int]]:
    """ConsumerOffsetManager: {"topic@group": {queueId: offset}} in file order."""
    out: dict[str, dict[int, int]] = {}
    for key, queues in _table(root, "offsetTable").items():
        if not isinstance(key, str):
            raise ShapeError(f"offsetTable key {key!r} is not a string")
        if queues is None:
            out[key] = {}
            continue
        if not isinstance(queues, dict):
            raise ShapeError(f'offsetTable["{key}"] is a {_kind(queues)}, not an object')
        out[key] = {_int_key(q, key): _long(v, f"{key} queue {q}") for q, v in queues.items()}
    return out


def decode_delay_offsets(root) -> dict[int, int]:
    """ScheduleMessageService (DelayOffsetSerializeWrapper): {delayLevel: offset}."""
    return {_int_key(k, "offsetTable"): _long(v, f"delay level {k}")
            for k, v in _table(root, "offsetTable").items()}


def decode_topics(root) -> dict[str, TopicConfig]:
    """TopicConfigManager (TopicConfigSerializeWrapper): the topics and their queue counts."""
    out: dict[str, TopicConfig] = {}
    for name, tc in _table(root, "topicConfigTable").items():
        if not isinstance(tc, dict):
            raise ShapeError(f'topicConfigTable["{name}"] is a {_kind(tc)}, not an object')
        cfg = TopicConfig(str(tc.get("topicName") or name))
        for f in ("readQueueNums", "writeQueueNums", "perm"):
            if tc.get(f) is not None:
                setattr(cfg, f, _long(tc[f], f"topic {name} {f}"))
        cfg.order = bool(tc.get("order", False))
        out[str(name)] = cfg
    return out


def decode_subscription_groups(root) -> dict[str, dict]:
    """SubscriptionGroupManager: {group: its SubscriptionGroupConfig fields}."""
    out: dict[str, dict] = {}
    for name, cfg in _table(root, "subscriptionGroupTable").items():
        if not isinstance(cfg, dict):
            raise ShapeError(f'subscriptionGroupTable["{name}"] is a {_kind(cfg)}, not an object')
        out[str(name)] = cfg
    return out


def split_topic_group(key: str) -> tuple[str, str] | None:
    """`topic@group` as the broker splits it (Java String.split drops trailing empty parts; exactly two parts
    count, other keys are skipped by whichTopicByConsumer)."""
    parts = key.split(TOPIC_GROUP_SEPARATOR)
    while parts and parts[-1] == "":
        parts.pop()
    return (parts[0], parts[1]) if len(parts) == 2 else None


def _kind(v) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number",
            float: "number"}.get(type(v), "null" if v is None else type(v).__name__)


# ------------------------------------------------------------------------------------------- the four files


def consumer_offsets(layout: StoreLayout, required: bool = True) -> ConfigFile:
    return load_config_file(layout, CONSUMER_OFFSET, decode_consumer_offsets, required, empty={})


def delay_offsets(layout: StoreLayout, required: bool = True) -> ConfigFile:
    return load_config_file(layout, DELAY_OFFSET, decode_delay_offsets, required, empty={})


def topic_configs(layout: StoreLayout, required: bool = False) -> ConfigFile:
    return load_config_file(layout, TOPICS, decode_topics, required, empty={})


def subscription_groups(layout: StoreLayout, required: bool = False) -> ConfigFile:
    return load_config_file(layout, SUBSCRIPTION_GROUP, decode_subscription_groups, required, empty={})


#: Files the broker loads at start-up through ConfigManager: (name, decoder, what it holds, loss is an error,
#: the loader in RocketMQ's sources). The timer store's timermetrics is checked with the timer store.
CONFIG_FILES = [
    (TOPICS, decode_topics, "topic configs (queue counts, permissions, order flags)", True,
     "TopicConfigManager.load"),
    ("topicQueueMapping.json", None, "static topic queue mappings", False, "TopicQueueMappingManager.load"),
    (CONSUMER_OFFSET, decode_consumer_offsets, "consumer offsets (every group's progress)", True,
     "ConsumerOffsetManager.load"),
    (SUBSCRIPTION_GROUP, decode_subscription_groups, "subscription groups (retry, broadcast, consume settings)",
     True, "SubscriptionGroupManager.load"),
    ("consumerFilter.json", None, "consumer SQL/tag filters (clients register them again)", False,
     "ConsumerFilterManager.load"),
    ("consumerOrderInfo.json", None, "orderly-consumption locks of pop consumers", False,
     "ConsumerOrderInfoManager.load"),
    (DELAY_OFFSET, decode_delay_offsets, "delay-level delivery progress (SCHEDULE_TOPIC_XXXX)", True,
     "ScheduleMessageService.load"),
]


# ------------------------------------------------------------------------------------------- encoders


def data_version(timestamp_ms: int, counter: int = 0) -> dict:
    """DataVersion as fastjson writes it (fields in name order)."""
    return {"counter": counter, "stateVersion": 0, "timestamp": timestamp_ms}


#: TopicConfigManager's topicConfigTable: new ConcurrentHashMap<>(1024).
TOPIC_CONFIG_TABLE_CAPACITY = 1024


def topic_config_entry(topic: str, queue_nums: int, perm: int = 6) -> dict:
    """`new TopicConfig(topic)` with its queue counts and perm as fastjson writes the bean (fields in name order)."""
    return {"attributes": {}, "order": False, "perm": perm, "readQueueNums": queue_nums,
            "topicFilterType": "SINGLE_TAG", "topicName": topic, "topicSysFlag": 0, "writeQueueNums": queue_nums}


def encode_topics(table: dict[str, dict], version: dict) -> str:
    """topics.json as TopicConfigManager.encode(true) writes it (TopicConfigSerializeWrapper): `table` in the order
    its topics were put into the ConcurrentHashMap<>(1024), `version` its DataVersion (data_version)."""
    order = iteration_order(list(table), string_hash, TOPIC_CONFIG_TABLE_CAPACITY)
    return fastjson.dumps({"dataVersion": version, "topicConfigTable": {t: table[t] for t in order}})


def encode_delay_offsets(table: dict[int, int], timestamp_ms: int) -> str:
    """delayOffset.json as ScheduleMessageService.encode(true) writes it: DelayOffsetSerializeWrapper with its
    offsetTable a ConcurrentHashMap<Integer, Long>(32) (format §1.2): integer keys unquoted, in its order."""
    order = iteration_order(sorted(table), int_hash, DELAY_OFFSET_TABLE_CAPACITY)
    return fastjson.dumps({"dataVersion": data_version(timestamp_ms),
                           "offsetTable": {k: table[k] for k in order}})


def default_subscription_group(name: str) -> dict:
    """`new SubscriptionGroupConfig()` with its groupName, as fastjson writes the bean (fields in name order,
    null fields left out: subscriptionDataSet, the retry policies' parameters)."""
    return {"attributes": {}, "brokerId": 0, "consumeBroadcastEnable": True, "consumeEnable": True,
            "consumeFromMinEnable": True, "consumeMessageOrderly": False, "consumeTimeoutMinute": 15,
            "groupName": name, "groupRetryPolicy": {"type": "CUSTOMIZED"}, "groupSysFlag": 0,
            "notifyConsumerIdsChangedEnable": True, "retryMaxTimes": 16, "retryQueueNums": 1,
            "whichBrokerWhenConsumeSlowly": 1}


def encode_subscription_groups(groups: dict[str, dict], forbidden: dict, timestamp_ms: int) -> str:
    """subscriptionGroup.json as SubscriptionGroupManager.encode(true) writes it: `groups` in the order they were
    put into the ConcurrentHashMap<>(1024) (the broker's own groups first, as init puts them)."""
    order = iteration_order(list(groups), string_hash, SUBSCRIPTION_GROUP_TABLE_CAPACITY)
    return fastjson.dumps({"dataVersion": data_version(timestamp_ms), "forbiddenTable": forbidden,
                           "subscriptionGroupTable": {g: groups[g] for g in order}})


def consumer_offset_groups(root) -> set[str]:
    """The groups consumerOffset.json names: the group of every `topic@group` key of its offsetTable (as the
    broker splits them) and the keys of its groupTopicMap."""
    out = set()
    for key in decode_consumer_offsets(root):
        tg = split_topic_group(key)
        if tg is not None:
            out.add(tg[1])
    gtm = root.get("groupTopicMap") if isinstance(root, dict) else None
    if isinstance(gtm, dict):
        out.update(str(g) for g in gtm)
    return out
