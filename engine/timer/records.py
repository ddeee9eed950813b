"""The commit-log records timer-log units and rmq_sys_wheel_timer consume-queue units point at (timer §6).

A unit is resolved the way the broker's dequeue reads it: `sizePy` bytes at `offsetPy`, which must lie below the
commit log's end of data and hold one whole record. What the broker does next depends on the record: a timer
message (topic rmq_sys_wheel_timer with REAL_TOPIC, REAL_QID and TIMER_OUT_MS) is fired or rolled; anything else
makes its conversion throw, and its put service retries that forever (RocketMQ #10668).
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.broker.commitlog.log import MISPLACED, CommitLog
from engine.broker.index.keys import split_keys
from engine.broker.commitlog.message import VALID, MessageRecord
from engine.timer.codec import TOMBSTONE_OFFSET
from engine.timer.layout import TIMER_TOPIC

PROP_REAL_TOPIC = "REAL_TOPIC"
PROP_REAL_QID = "REAL_QID"
PROP_TIMER_OUT_MS = "TIMER_OUT_MS"
PROP_TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
PROP_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
PROP_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROP_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROP_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROP_TIMER_DELAY_MS = "TIMER_DELAY_MS"

# Why a unit's record cannot be used (the kinds findings carry).
TOMBSTONE = "tombstone"            # offsetPy -1: written by rmqtool recover, dropped by the broker at once
EXPIRED = "expired"                # below the commit log's first file: deleted by the clean-up
PAST_LOG = "past-commit-log"       # at or past the end of the commit log's data
NOT_A_RECORD = "not-a-record"      # no record starts there (inside a record, damaged bytes, misplaced segment)
SIZE_MISMATCH = "size-mismatch"    # a record starts there, but not one of sizePy bytes
NOT_TIMER = "not-timer-message"    # a record of another topic, or without the timer properties
BAD_CRC = "body-crc"               # a timer message whose body fails its CRC (the broker does not check it)


@dataclass(slots=True)
class TimerRecord:
    """What a timer message's record says (the fields `timer list` shows)."""
    offset: int
    size: int
    topic: str                      # the stored topic (rmq_sys_wheel_timer)
    queue_id: int
    queue_offset: int
    store_timestamp: int
    real_topic: str | None
    real_queue_id: int | None
    uniq_key: str | None
    keys: list[str]
    tags: str | None
    timer_out_ms: int | None
    roll_times: int
    delete_key: str | None          # TIMER_DEL_UNIQKEY: a delete marker (a recall) for `<topic>+<uniqKey>`
    born_timestamp: int = 0

    @property
    def is_delete(self) -> bool:
        return self.delete_key is not None


def build_delete_key(real_topic: str | None, uniq_key: str | None) -> str | None:
    """TimerMessageStore.buildDeleteKey(realTopic, uniqKey): what a delete marker names to cancel a message (None
    for a message without either)."""
    if real_topic is None or uniq_key is None:
        return None
    return f"{real_topic}+{uniq_key}"


@dataclass(slots=True)
class Resolved:
    """A unit's record, or why the broker could not use it (`kind`, one line in `why`)."""
    record: TimerRecord | None
    kind: str = ""
    why: str = ""

    @property
    def ok(self) -> bool:
        return self.record is not None and self.kind in ("", BAD_CRC)


def _int(v: str | None) -> int | None:
    if v is None:
        return None
    try:
        return int(v.strip())
    except ValueError:
        return None


def timer_record(rec: MessageRecord, offset: int) -> TimerRecord:
    p = rec.properties
    return TimerRecord(offset=offset, size=rec.total_size, topic=rec.topic, queue_id=rec.queue_id,
                       queue_offset=rec.queue_offset, store_timestamp=rec.store_timestamp,
                       real_topic=p.get(PROP_REAL_TOPIC), real_queue_id=_int(p.get(PROP_REAL_QID)),
                       uniq_key=rec.uniq_key, keys=split_keys(p.get("KEYS")), tags=rec.tags,
                       timer_out_ms=_int(p.get(PROP_TIMER_OUT_MS)), roll_times=_int(p.get(PROP_TIMER_ROLL_TIMES)) or 0,
                       delete_key=p.get(PROP_TIMER_DEL_UNIQKEY), born_timestamp=rec.born_timestamp)


def timer_problem(r: TimerRecord) -> str:
    """Why the broker's enqueue or dequeue would fail on this record ('' when it is a usable timer message)."""
    if r.topic != TIMER_TOPIC:
        return f"a record of topic {r.topic!r}, not {TIMER_TOPIC}"
    if r.timer_out_ms is None:
        return f"no {PROP_TIMER_OUT_MS} property"
    if r.real_topic is None:
        return f"no {PROP_REAL_TOPIC} property"
    if r.real_queue_id is None and not r.is_delete:
        return f"no {PROP_REAL_QID} property"
    return ""


def resolve(cl: CommitLog, log_end: int, offset: int, size: int, check_crc: bool = False) -> Resolved:
    """The record `sizePy` bytes at `offsetPy` as the broker reads it for a unit (log_end: the commit log's end
    of data)."""
    if offset == TOMBSTONE_OFFSET:
        return Resolved(None, TOMBSTONE, "the unit was emptied by rmqtool recover (its message was lost)")
    if offset < 0 or size <= 0:
        return Resolved(None, NOT_A_RECORD, f"offsetPy {offset} / sizePy {size} cannot address a record")
    if offset < cl.min_offset:
        return Resolved(None, EXPIRED, f"commit-log offset {offset} is below the first commit-log file "
                                       f"({cl.min_offset}): the record was deleted")
    if offset + size > log_end:
        return Resolved(None, PAST_LOG, f"commit-log offset {offset} (+{size}) is past the end of the commit "
                                        f"log's data ({log_end})")
    r = cl.check_at(offset, check_crc=check_crc)
    if r.status == MISPLACED:
        return Resolved(None, NOT_A_RECORD, r.reason)
    if r.status != VALID:
        if check_crc and r.record is None and "CRC" in r.reason:
            plain = cl.check_at(offset, check_crc=False)
            if plain.status == VALID and plain.size == size:
                tr = timer_record(plain.record, offset)
                why = timer_problem(tr)
                if not why:
                    return Resolved(tr, BAD_CRC, f"the record at {offset}: {r.reason} (the broker does not "
                                                 "check it and delivers the body as it is)")
        return Resolved(None, NOT_A_RECORD, f"no record starts at commit-log offset {offset}: {r.reason}")
    if r.size != size:
        return Resolved(None, SIZE_MISMATCH, f"the record at commit-log offset {offset} is {r.size} bytes, the "
                                             f"unit says {size}")
    tr = timer_record(r.record, offset)
    why = timer_problem(tr)
    if why:
        return Resolved(tr, NOT_TIMER, f"commit-log offset {offset} holds {why}")
    return Resolved(tr)
