"""Broker configuration: the store-related keys of broker.conf, with RocketMQ's defaults.

A BrokerConfig is frozen: it is settled once (defaults < broker.conf < options: load_config; then the
geometry the store's files say where neither gave it: settled_with) and nothing downstream writes into it. A
settling step returns a new BrokerConfig (settled_with), never changes the caller's; `sources` records where each
geometry value came from ("option", "broker.conf", "files", "default"), and the store's mode, decided once per
settled configuration (engine.broker.mode.detect_mode), travels with it (cached).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Callable, Iterator, Mapping

from engine.broker.commitlog.message import DEFAULT_DELAY_LEVELS
from engine.broker.index.file import check_index_geometry
from engine.errors import InvalidArgumentError
from engine.java.lang import INT_MAX

COMMITLOG_FILE_SIZE = 1024 * 1024 * 1024
CQ_STORE_UNIT_SIZE = 20
CONSUME_QUEUE_FILE_SIZE = 300_000 * CQ_STORE_UNIT_SIZE
MAX_HASH_SLOT_NUM = 5_000_000
MAX_INDEX_NUM = 5_000_000 * 4
#: MessageStoreConfig's timer defaults (RIP-43, timer §1).
TIMER_LOG_FILE_SIZE = 100 * 1024 * 1024
TIMER_PRECISION_MS = 1000
TIMER_ROLL_WINDOW_SLOT = 3600 * 24 * 2
TIMER_MAX_DELAY_SEC = 3600 * 24 * 3
#: setTimerPrecisionMs snaps any configured value to one of these (the largest not above it, at least 100).
TIMER_PRECISIONS = (100, 200, 500, 1000)


class FrozenMap(Mapping):
    """A read-only mapping (picklable, unlike MappingProxyType: a configuration goes to worker processes)."""

    def __init__(self, items=()):
        self._items = dict(items)

    def __getitem__(self, key):
        return self._items[key]

    def __iter__(self) -> Iterator:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"FrozenMap({self._items!r})"


#: The geometry keys whose source a settled configuration records (BrokerConfig.sources).
GEOMETRY_KEYS = ("maxHashSlotNum", "maxIndexNum", "mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue",
                 "mappedFileSizeTimerLog")
#: Where a geometry value came from, strongest first: the rule "option > broker.conf > files > default".
FROM_OPTION, FROM_CONF, FROM_FILES, FROM_DEFAULT = "option", "broker.conf", "files", "default"


@dataclass(frozen=True)
class BrokerConfig:
    """The subset of MessageStoreConfig rmqtool reads; names are the broker.conf keys. Frozen: settled once."""

    storePathRootDir: Path = Path.home() / "store"  # a str given here (broker.conf's text) is held as a Path
    storePathCommitLog: str | None = None
    mappedFileSizeCommitLog: int = COMMITLOG_FILE_SIZE
    mappedFileSizeConsumeQueue: int = CONSUME_QUEUE_FILE_SIZE
    maxHashSlotNum: int = MAX_HASH_SLOT_NUM
    maxIndexNum: int = MAX_INDEX_NUM
    messageIndexEnable: bool = True
    messageIndexSafe: bool = False
    maxMsgsNumBatch: int = 64
    fileReservedTime: int = 72
    maxMessageSize: int = 1024 * 1024 * 4
    checkCRCOnRecover: bool = True
    # The timer store (timer §1): on by default in RocketMQ 5.
    timerWheelEnable: bool = True
    mappedFileSizeTimerLog: int = TIMER_LOG_FILE_SIZE
    timerPrecisionMs: int = TIMER_PRECISION_MS
    timerRollWindowSlot: int = TIMER_ROLL_WINDOW_SLOT
    timerMaxDelaySec: int = TIMER_MAX_DELAY_SEC
    timerSkipUnknownError: bool = False
    # The delay levels of ScheduleMessageService (SCHEDULE_TOPIC_XXXX queue id = level - 1).
    messageDelayLevel: str = DEFAULT_DELAY_LEVELS
    # Every key broker.conf sets, as written (None when no broker.conf was read): the store's mode is decided from
    # keys rmqtool has no field for (engine.broker.mode.detect_mode).
    properties: Mapping[str, str] | None = field(default=None, compare=False)
    # Where each of GEOMETRY_KEYS came from (FROM_OPTION, FROM_CONF, FROM_FILES, FROM_DEFAULT).
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    # What is worked out once per settled configuration (the store's mode: cached()); shared by the configurations
    # settled_with() derives from this one, which differ only in geometry.
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: the constructor's own normalisation
        set_(self, "storePathRootDir", Path(self.storePathRootDir))
        if self.properties is not None and not isinstance(self.properties, FrozenMap):
            set_(self, "properties", FrozenMap(self.properties))
        set_(self, "sources", FrozenMap({k: self.sources.get(k, FROM_DEFAULT) for k in GEOMETRY_KEYS}))

    @property
    def root(self) -> Path:
        return self.storePathRootDir

    def source(self, key: str) -> str:
        """Where the geometry value `key` (one of GEOMETRY_KEYS) came from."""
        return self.sources[key]

    # Whether a geometry value was given (conf or option) or settled from the files rather than defaulted: the
    # index geometry by engine.broker.index.geometry.resolve_index_geometry, the queue-file size by
    # engine.broker.consumequeue.geometry.settle_cq_file_size, the timer-log size by
    # engine.timer.layout.settle_timer_log_size (the commit log's segments take theirs from the files themselves).
    @property
    def commitLogSizeGiven(self) -> bool:
        return self.sources["mappedFileSizeCommitLog"] != FROM_DEFAULT

    @property
    def hashSlotNumGiven(self) -> bool:
        return self.sources["maxHashSlotNum"] != FROM_DEFAULT

    @property
    def indexNumGiven(self) -> bool:
        return self.sources["maxIndexNum"] != FROM_DEFAULT

    @property
    def timerLogSizeGiven(self) -> bool:
        return self.sources["mappedFileSizeTimerLog"] != FROM_DEFAULT

    @property
    def cqFileSizeGiven(self) -> bool:
        return self.sources["mappedFileSizeConsumeQueue"] != FROM_DEFAULT

    def settled_with(self, source: str = FROM_FILES, **values) -> "BrokerConfig":
        """This configuration with geometry values settled (from the files, by default): a new BrokerConfig
        sharing this one's cached mode; this one is left as it is."""
        bad = set(values) - set(GEOMETRY_KEYS)
        if bad:
            raise ValueError(f"settled_with sets geometry only, not {sorted(bad)}")
        sources = dict(self.sources)
        sources.update({k: source for k in values if k in GEOMETRY_KEYS})
        out = replace(self, sources=sources, **values)
        object.__setattr__(out, "_memo", self._memo)
        return out

    def cached(self, key: str, make: Callable[[], object]):
        """What make() answers for this settled configuration, worked out once (the store's mode, the index
        geometry its files say); a None answer is not kept (asked again)."""
        memo = self._memo
        if memo.get(key) is None:
            memo[key] = make()
        return memo[key]

    @property
    def commitlog_dirs(self) -> list[Path]:
        if self.storePathCommitLog:
            return [Path(p) for p in self.storePathCommitLog.split(",") if p.strip()]
        return [self.root / "commitlog"]

    @property
    def cq_file_size(self) -> int:
        # The broker rounds the configured size up to a whole number of units (format §1).
        n = self.mappedFileSizeConsumeQueue
        return -(-n // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE

    @property
    def timer_precision_ms(self) -> int:
        """timerPrecisionMs as the broker holds it: its setter snaps the configured value (timer §1)."""
        return snap_timer_precision(self.timerPrecisionMs)

    def validate(self) -> None:
        if not 0 < self.mappedFileSizeCommitLog <= INT_MAX:
            raise InvalidArgumentError(f"mappedFileSizeCommitLog {self.mappedFileSizeCommitLog} must be in 1..{INT_MAX}")
        if not 0 < self.mappedFileSizeConsumeQueue <= INT_MAX:
            raise InvalidArgumentError(f"mappedFileSizeConsumeQueue {self.mappedFileSizeConsumeQueue} must be in 1..{INT_MAX}")
        check_index_geometry(self.maxHashSlotNum, self.maxIndexNum)
        if self.maxMsgsNumBatch <= 0:
            raise InvalidArgumentError(f"maxMsgsNumBatch {self.maxMsgsNumBatch} must be positive")
        if not 0 < self.mappedFileSizeTimerLog <= INT_MAX:
            raise InvalidArgumentError(f"mappedFileSizeTimerLog {self.mappedFileSizeTimerLog} must be in 1..{INT_MAX}")


def snap_timer_precision(configured: int) -> int:
    """MessageStoreConfig.setTimerPrecisionMs: the largest of 100, 200, 500, 1000 not above the value (100 below)."""
    out = TIMER_PRECISIONS[0]
    for p in TIMER_PRECISIONS[1:]:
        if configured < p:
            return out
        out = p
    return out


def _parse_bool(v: str) -> bool:
    return v.strip().lower() == "true"


def read_properties_file(path: str | os.PathLike) -> dict[str, str]:
    """java.util.Properties-style key=value text (comments, ':' or '=' separators, '\\' continuations)."""
    out: dict[str, str] = {}
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise InvalidArgumentError(f"cannot read broker config {path}: {e.strerror}") from None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        for i, ch in enumerate(line):
            if ch in "=:":
                out[line[:i].strip()] = line[i + 1:].strip()
                break
        else:
            out[line] = ""
    return out


def set_from_properties(cfg, props: dict[str, str], source, skip=lambda name: False) -> set[str]:
    """Set each field of the dataclass `cfg` that `props` names, except those skip(name) keeps out: an int, a
    bool as Boolean.parseBoolean reads it, else the text. Returns the names set; a number that does not parse is
    an InvalidArgumentError naming `source`."""
    values = parse_properties(cfg, props, source, skip)
    for name, val in values.items():
        setattr(cfg, name, val)
    return set(values)


def parse_properties(cls, props: dict[str, str], source, skip=lambda name: False) -> dict[str, object]:
    """The values `props` gives the fields of the dataclass (class or instance) `cls`, except those skip(name)
    keeps out: an int, a bool as Boolean.parseBoolean reads it, else the text; a number that does not parse is
    an InvalidArgumentError naming `source`."""
    out: dict[str, object] = {}
    for f in fields(cls):
        if f.name not in props or skip(f.name) or not f.init:
            continue
        raw = props[f.name]
        try:
            if f.type in ("int", int):
                val = int(raw)
            elif f.type in ("bool", bool):
                val = _parse_bool(raw)
            else:
                val = raw
        except ValueError:
            raise InvalidArgumentError(f"{source}: {f.name}={raw!r} is not a valid number") from None
        out[f.name] = val
    return out


def load_config(broker_conf: str | os.PathLike | None = None, **overrides) -> BrokerConfig:
    """Defaults, then broker.conf, then explicit overrides (None values ignored): the settled, frozen
    configuration, with where each geometry value came from (BrokerConfig.sources)."""
    values: dict[str, object] = {}
    sources: dict[str, str] = {}
    if broker_conf is not None:
        props = read_properties_file(broker_conf)
        values = parse_properties(BrokerConfig, props, broker_conf,
                                  lambda name: name in ("properties", "sources"))
        values["properties"] = dict(props)
        sources.update({k: FROM_CONF for k in GEOMETRY_KEYS if k in props})
    for k, v in overrides.items():
        if v is not None:
            values[k] = v
            if k in GEOMETRY_KEYS:
                sources[k] = FROM_OPTION
    cfg = BrokerConfig(**values, sources=sources)
    cfg.validate()
    return cfg
