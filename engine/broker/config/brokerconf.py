"""Broker configuration: the store-related keys of broker.conf, with RocketMQ's defaults."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

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


@dataclass
class BrokerConfig:
    """The subset of MessageStoreConfig rmqtool reads; names are the broker.conf keys."""

    storePathRootDir: str = str(Path.home() / "store")
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
    # True when mappedFileSizeCommitLog was given (conf or option) rather than defaulted.
    commitLogSizeGiven: bool = False
    # True when maxHashSlotNum / maxIndexNum were given (conf or option) or settled from the index files
    # (engine.broker.index.geometry.resolve_index_geometry) rather than defaulted.
    hashSlotNumGiven: bool = False
    indexNumGiven: bool = False
    # True when mappedFileSizeTimerLog was given (conf or option) or settled from the timer-log files
    # (engine.timer.layout.settle_timer_log_size) rather than defaulted.
    timerLogSizeGiven: bool = False
    # True when mappedFileSizeConsumeQueue was given (conf or option) or settled from the queue files
    # (engine.broker.consumequeue.geometry.settle_cq_file_size) rather than defaulted.
    cqFileSizeGiven: bool = False
    # Every key broker.conf sets, as written (None when no broker.conf was read): the store's mode is decided from
    # keys rmqtool has no field for (engine.broker.mode.detect_mode).
    properties: dict | None = field(default=None, compare=False)

    @property
    def root(self) -> Path:
        return Path(self.storePathRootDir)

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
    given = set()
    for f in fields(cfg):
        if f.name not in props or skip(f.name):
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
        setattr(cfg, f.name, val)
        given.add(f.name)
    return given


def load_config(broker_conf: str | os.PathLike | None = None, **overrides) -> BrokerConfig:
    """Defaults, then broker.conf, then explicit overrides (None values ignored)."""
    cfg = BrokerConfig()
    given_size = False
    if broker_conf is not None:
        props = read_properties_file(broker_conf)
        set_from_properties(cfg, props, broker_conf, lambda name: name.endswith("Given") or name == "properties")
        cfg.properties = dict(props)
        given_size = "mappedFileSizeCommitLog" in props
        cfg.hashSlotNumGiven = "maxHashSlotNum" in props
        cfg.indexNumGiven = "maxIndexNum" in props
        cfg.timerLogSizeGiven = "mappedFileSizeTimerLog" in props
        cfg.cqFileSizeGiven = "mappedFileSizeConsumeQueue" in props
    for k, v in overrides.items():
        if v is not None:
            setattr(cfg, k, v)
    if overrides.get("mappedFileSizeCommitLog") is not None:
        given_size = True
    cfg.commitLogSizeGiven = given_size
    cfg.hashSlotNumGiven |= overrides.get("maxHashSlotNum") is not None
    cfg.indexNumGiven |= overrides.get("maxIndexNum") is not None
    cfg.timerLogSizeGiven |= overrides.get("mappedFileSizeTimerLog") is not None
    cfg.cqFileSizeGiven |= overrides.get("mappedFileSizeConsumeQueue") is not None
    cfg.validate()
    return cfg
