"""Codecs of the timer store's files (timer §2, §3, §4, §5): wheel slots, timer-log units and blanks, the
timercheck file, the timermetrics JSON. All integers are big-endian, as Java's ByteBuffer writes them.

Single records decode to plain dataclasses; whole files decode to numpy structured arrays (SLOT_DTYPE,
UNIT_DTYPE) so that the readers work on many slots or units at once.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from engine.java import fastjson
from engine.java.lang import to_i32

# ------------------------------------------------------------------------------------------- wheel slot

SLOT = struct.Struct(">qqqii")
SLOT_DTYPE = np.dtype([("time", ">i8"), ("first", ">i8"), ("last", ">i8"), ("num", ">i4"), ("magic", ">i4")])


@dataclass(frozen=True)
class Slot:
    """One wheel slot (timer §2): its time in precision units, the first and last timer-log unit of its chain,
    the unit count (delete markers count -1) and a magic the broker never uses."""
    time: int
    first: int
    last: int
    num: int = 0
    magic: int = 0

    def encode(self) -> bytes:
        return SLOT.pack(self.time, self.first, self.last, self.num, self.magic)

    @classmethod
    def decode(cls, buf, pos: int = 0) -> "Slot":
        return cls(*SLOT.unpack_from(buf, pos))

    @property
    def empty(self) -> bool:
        return self.time == 0 and self.first == 0 and self.last == 0 and self.num == 0 and self.magic == 0


# ------------------------------------------------------------------------------------------- timer-log unit

UNIT = struct.Struct(">iqiqiqiiq")
UNIT_SIZE = UNIT.size  # 52
UNIT_DTYPE = np.dtype([("size", ">i4"), ("prev", ">i8"), ("magic", ">i4"), ("write_ms", ">i8"), ("delay", ">i4"),
                       ("offset_py", ">i8"), ("size_py", ">i4"), ("topic_hash", ">i4"), ("reserved", ">i8")])
#: Where offsetPy starts inside a unit (TimerLog.UNIT_PRE_SIZE_FOR_MSG).
UNIT_PRE_SIZE_FOR_MSG = 28
#: TimerLog.BLANK_MAGIC_CODE: `0xBBCCDDEE ^ 1880681586 + 8` in Java, where + binds before ^ (timer §3).
BLANK_MAGIC_CODE = to_i32(0xBBCCDDEE ^ (1880681586 + 8))
#: A blank is size i32 (bytes left in the file), 0 i64, BLANK_MAGIC_CODE i32.
MIN_BLANK_LEN = 4 + 8 + 4
BLANK = struct.Struct(">iqi")

MAGIC_DEFAULT = 1
MAGIC_ROLL = 1 << 1
MAGIC_DELETE = 1 << 2
#: The offsetPy rmqtool recover writes into a unit whose message is gone (timer §10): the broker's read of it
#: fails at once (no commit-log file holds offset -1) and it drops the unit, as it drops any unreadable one.
TOMBSTONE_OFFSET = -1


def magic_ok(magic: int) -> bool:
    """TimerMessageStore.isMagicOK: only the low four bits may be set."""
    return (magic | 0xF) == 0xF


def is_roll(magic: int) -> bool:
    return bool(magic & MAGIC_ROLL)


def is_delete(magic: int) -> bool:
    return bool(magic & MAGIC_DELETE)


def magic_name(magic: int) -> str:
    if not magic_ok(magic):
        return f"invalid ({magic})"
    parts = []
    if is_delete(magic):
        parts.append("delete")
    if is_roll(magic):
        parts.append("roll")
    return "+".join(parts) or ("normal" if magic & MAGIC_DEFAULT else f"bare ({magic})")


@dataclass(frozen=True, slots=True)
class TimerUnit:
    """One timer-log unit (timer §3). `pos` is its global timer-log position (not stored)."""
    pos: int
    size: int
    prev: int
    magic: int
    write_ms: int
    delay: int
    offset_py: int
    size_py: int
    topic_hash: int
    reserved: int = 0

    @property
    def delayed_ms(self) -> int:
        """currWriteTimeMs + delayTime: the slot time the unit was put in."""
        return self.write_ms + self.delay

    @property
    def valid(self) -> bool:
        """What the broker's recovery accepts as a unit: size 52 and a magic with only the low bits set."""
        return self.size == UNIT_SIZE and magic_ok(self.magic)

    @property
    def blank(self) -> bool:
        return self.magic == BLANK_MAGIC_CODE

    @property
    def delete(self) -> bool:
        return is_delete(self.magic)

    @property
    def roll(self) -> bool:
        return is_roll(self.magic)

    @property
    def tombstone(self) -> bool:
        return self.offset_py == TOMBSTONE_OFFSET

    def encode(self) -> bytes:
        return UNIT.pack(self.size, self.prev, self.magic, self.write_ms, self.delay, self.offset_py, self.size_py,
                         self.topic_hash, self.reserved)

    @classmethod
    def decode(cls, buf, at: int, pos: int) -> "TimerUnit":
        """The unit whose bytes start at buf[at]; `pos` is its global timer-log position."""
        return cls(pos, *UNIT.unpack_from(buf, at))

    def as_dict(self) -> dict:
        return {"position": self.pos, "size": self.size, "prevPos": self.prev, "magic": self.magic,
                "kind": magic_name(self.magic), "currWriteTimeMs": self.write_ms, "delayTime": self.delay,
                "delayedTimeMs": self.delayed_ms, "offsetPy": self.offset_py, "sizePy": self.size_py,
                "topicHash": self.topic_hash}


def encode_unit(prev: int, magic: int, write_ms: int, delayed_ms: int, offset_py: int, size_py: int,
                topic_hash: int) -> bytes:
    """The 52 bytes doEnqueue appends (timer §3)."""
    return UNIT.pack(UNIT_SIZE, prev, magic, write_ms, to_i32(delayed_ms - write_ms), offset_py, size_py,
                     topic_hash, 0)


def encode_blank(remaining: int) -> bytes:
    """The blank TimerLog.append writes when a unit does not fit: 16 bytes, saying how many bytes are left."""
    return BLANK.pack(remaining, 0, BLANK_MAGIC_CODE)


# ------------------------------------------------------------------------------------------- timercheck

CHECKPOINT = struct.Struct(">7q")
CHECKPOINT_FILE_SIZE = 4096  # the broker maps one OS page of the file


@dataclass
class TimerCheckpoint:
    """config/timercheck (timer §4)."""
    lastReadTimeMs: int = 0
    lastTimerLogFlushPos: int = 0
    lastTimerQueueOffset: int = 0
    masterTimerQueueOffset: int = 0
    stateVersion: int = 0
    timestamp: int = 0
    counter: int = 0

    def encode(self) -> bytes:
        return CHECKPOINT.pack(self.lastReadTimeMs, self.lastTimerLogFlushPos, self.lastTimerQueueOffset,
                               self.masterTimerQueueOffset, self.stateVersion, self.timestamp, self.counter)

    @classmethod
    def decode(cls, data: bytes) -> "TimerCheckpoint":
        """As the broker reads it: the file is mapped one page long, so bytes past a short file read as zeros."""
        page = bytes(data[:CHECKPOINT.size]).ljust(CHECKPOINT.size, b"\0")
        return cls(*CHECKPOINT.unpack(page))

    def as_dict(self) -> dict:
        """The broker's own JSON shape of it (GET_TIMER_CHECK_POINT)."""
        return {"lastReadTimeMs": self.lastReadTimeMs, "lastTimerLogFlushPos": self.lastTimerLogFlushPos,
                "lastTimerQueueOffset": self.lastTimerQueueOffset,
                "masterTimerQueueOffset": self.masterTimerQueueOffset,
                "dataVersion": {"counter": self.counter, "stateVersion": self.stateVersion,
                                "timestamp": self.timestamp}}


# ------------------------------------------------------------------------------------------- timermetrics


class MetricsShapeError(ValueError):
    """timermetrics text that fastjson parses but that is not the broker's TimerMetricsSerializeWrapper."""


@dataclass
class TimerMetrics:
    """config/timermetrics (timer §5): the broker's running count of timer messages per real topic."""
    counts: dict = field(default_factory=dict)      # topic -> (count, timeStamp)
    dataVersion: dict = field(default_factory=dict)  # counter, stateVersion, timestamp

    @classmethod
    def decode(cls, text: str | bytes) -> "TimerMetrics":
        root = fastjson.loads(text)
        if root is None:
            return cls()
        if not isinstance(root, dict):
            raise MetricsShapeError("the root is not an object")
        out = cls()
        table = root.get("timingCount") or {}
        if not isinstance(table, dict):
            raise MetricsShapeError('"timingCount" is not an object')
        for topic, m in table.items():
            if not isinstance(m, dict):
                raise MetricsShapeError(f"timingCount[{topic!r}] is not an object")
            out.counts[str(topic)] = (_long(m.get("count", 0), f"timingCount[{topic!r}].count"),
                                      _long(m.get("timeStamp", 0), f"timingCount[{topic!r}].timeStamp"))
        dv = root.get("dataVersion") or {}
        if not isinstance(dv, dict):
            raise MetricsShapeError('"dataVersion" is not an object')
        out.dataVersion = {k: _long(dv.get(k, 0), f"dataVersion.{k}") for k in ("counter", "stateVersion",
                                                                                 "timestamp")}
        return out

    def as_dict(self) -> dict:
        """The broker's JSON shape (GET_TIMER_METRICS)."""
        return {"timingCount": {t: {"timeStamp": ts, "count": c} for t, (c, ts) in self.counts.items()},
                "dataVersion": dict(self.dataVersion)}


def _long(v, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise MetricsShapeError(f"{where} is not a number")
    try:
        return int(v)
    except ValueError:
        raise MetricsShapeError(f"{where} is not a number") from None
