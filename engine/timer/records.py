"""The commit-log records timer-log units and rmq_sys_wheel_timer consume-queue units point at (timer §6).

A unit is resolved the way the broker's dequeue reads it: `sizePy` bytes at `offsetPy`, which must lie below the
commit log's end of data and hold one whole record. What the broker does next depends on the record: a timer
message (topic rmq_sys_wheel_timer with REAL_TOPIC, REAL_QID and TIMER_OUT_MS) is fired or rolled; anything else
makes its conversion throw, and its put service retries that forever (RocketMQ #10668).
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from engine.broker.commitlog.log import MISPLACED, CommitLog
from engine.broker.index.keys import split_keys
from engine.broker.commitlog.message import (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, PROP_CRC32, PROP_KEYS,
                                             PROP_REAL_QID, PROP_REAL_TOPIC, PROP_TAGS, PROP_UNIQ_KEY, VALID,
                                             MessageRecord, parse_properties)
from engine.broker.commitlog.records import BufferViews, decode_at
from engine.java.lang import rmq_crc32
from engine.timer.codec import TOMBSTONE_OFFSET
from engine.timer.layout import TIMER_TOPIC

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
STAND_IN = "stand-in"              # not a timer message, but it carries what the broker's timer needs to pass
#                                    over it: TIMER_OUT_MS, and REAL_TOPIC/REAL_QID naming its own topic (rmqtool
#                                    recover's placeholder for a damaged timer message, issue 34 item 1)


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
    return _timer_record(offset, rec.total_size, rec.topic, rec.queue_id, rec.queue_offset, rec.store_timestamp,
                         rec.born_timestamp, rec.properties)


def _timer_record(offset: int, size: int, topic: str, queue_id: int, queue_offset: int, store_ts: int, born_ts: int,
                  p: dict) -> TimerRecord:
    # positional (the fields' order): a third of the cost of keywords, and this runs once per timer message
    return TimerRecord(offset, size, topic, queue_id, queue_offset, store_ts, p.get(PROP_REAL_TOPIC),
                       _int(p.get(PROP_REAL_QID)), p.get(PROP_UNIQ_KEY), split_keys(p.get(PROP_KEYS)),
                       p.get(PROP_TAGS), _int(p.get(PROP_TIMER_OUT_MS)), _int(p.get(PROP_TIMER_ROLL_TIMES)) or 0,
                       p.get(PROP_TIMER_DEL_UNIQKEY), born_ts)


def stand_in(r: TimerRecord) -> bool:
    """A record the broker's timer enqueues and delivers without harm although it is no timer message: TIMER_OUT_MS
    parses, REAL_QID parses and REAL_TOPIC is the record's own topic (the delivered copy goes where it came from;
    recover's placeholder is a ROLLBACK record, so that copy reaches no consume queue)."""
    return (r.topic != TIMER_TOPIC and r.timer_out_ms is not None and r.real_topic == r.topic
            and r.real_queue_id is not None)


def _unusable(tr: TimerRecord, off: int) -> Resolved:
    """resolve()'s answer for a record timer_problem refuses."""
    if stand_in(tr):
        return Resolved(tr, STAND_IN, f"commit-log offset {off} holds a record of topic {tr.topic!r} that stands in "
                                      "for a lost timer message: the broker enqueues it and delivers it to that "
                                      "topic, where no consumer receives it")
    return Resolved(tr, NOT_TIMER, f"commit-log offset {off} holds {timer_problem(tr)}")


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
    if timer_problem(tr):
        return _unusable(tr, offset)
    return Resolved(tr)


@contextmanager
def no_cycle_collection():
    """The cyclic collector paused for a loop that makes many objects and no cycles: its passes over them (a
    third of resolve_many's loop) would find nothing. Restored as it was, whatever happens."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


#: Units whose records resolve_many reads at once (a few hundred bytes of Python objects each while they wait):
#: the scans of the timer store hold at most this many resolved records.
RESOLVE_CHUNK = 1024
#: The smallest record check_message can accept: the header up to BODYLEN, a 1-byte topic length and the
#: properties length (format §2.2); shorter candidates take the one-by-one path.
_MIN_RECORD = 91


def resolve_many(cl: CommitLog, log_end: int, offsets, sizes, check_crc: bool = False) -> list[Resolved]:
    """resolve() for many units at once, same answers in the same order: the records that are whole, in place,
    of the unit's size (and with a good body CRC when check_crc) are checked with numpy a segment at a time and
    only their properties are parsed in Python; every other unit goes through resolve(), which says why."""
    offs = np.asarray(offsets, dtype=np.int64)
    size = np.asarray(sizes, dtype=np.int64)
    out: list[Resolved | None] = [None] * len(offs)
    segs = cl.segments
    fast = (offs >= max(cl.min_offset, 0)) & (size >= _MIN_RECORD) & (offs <= log_end - size)
    if segs and cl.file_size and fast.any():
        starts = np.array([g.start for g in segs], dtype=np.int64)
        ends = np.array([g.end for g in segs], dtype=np.int64)
        # CommitLog.check_at's segment (SegmentQueue.find): by file size, a unit in a gap of the names goes slow
        idx = offs // cl.file_size - segs[0].start // cl.file_size
        ok_idx = (idx >= 0) & (idx < len(segs))
        idx = np.where(ok_idx, idx, 0)
        fast &= ok_idx & (starts[idx] <= offs) & (offs < ends[idx])
        for k in np.unique(idx[fast]).tolist():
            sel = np.flatnonzero(fast & (idx == k))
            _resolve_segment(cl.queue.buffer(segs[k]), segs[k].start, offs[sel], size[sel], sel, check_crc, out)
    for i in (i for i, r in enumerate(out) if r is None):
        out[i] = resolve(cl, log_end, int(offs[i]), int(size[i]), check_crc)
    return out


def _resolve_segment(buf, seg_start: int, offs: np.ndarray, size: np.ndarray, where: np.ndarray, check_crc: bool,
                     out: list) -> None:
    """The units of one commit-log segment whose record check_at finds VALID, of the unit's size: resolved."""
    pos = offs - seg_start
    n = len(buf)
    inside = pos + _MIN_RECORD <= n
    pos, offs, size, where = pos[inside], offs[inside], size[inside], where[inside]
    if not len(pos):
        return
    v = BufferViews(buf)
    try:
        total, magic = v.i32[pos].astype(np.int64), v.i32[pos + 4]
        # check_message: a message magic, TOTALSIZE inside the buffer; then the unit's size
        good = ((magic == MESSAGE_MAGIC_CODE) | (magic == MESSAGE_MAGIC_CODE_V2)) & (total == size) & (total <= n - pos)
        pos, offs, where = pos[good], offs[good], where[good]
        batch, whole = decode_at(v, pos)
    finally:
        v.close()
    good = whole & batch.length_ok & (batch.phy == offs)
    cols = [x[good].tolist() for x in (offs, where, batch.total, batch.topic_pos, batch.topic_len, batch.props_pos,
                                       batch.props_len, batch.body_pos, batch.body_len, batch.body_crc,
                                       batch.queue_id, batch.queue_offset, batch.store_ts, batch.born_ts)]
    with no_cycle_collection():
        _records(buf, cols, check_crc, out)


def _records(buf, cols: list, check_crc: bool, out: list) -> None:
    for off, i, total, tp, tl, pp, pl, bp, bl, crc, qid, qoff, sts, bts in zip(*cols):
        if check_crc and bl > 0 and rmq_crc32(buf[bp:bp + bl]) != crc:
            continue  # resolve() tells a bad CRC apart
        props = parse_properties(buf[pp:pp + pl].decode("utf-8", "replace")) if pl > 0 else {}
        if PROP_CRC32 in props:
            continue  # check_message parses its digits and may refuse the record on them
        tr = _timer_record(off, total, buf[tp:tp + tl].decode("utf-8", "replace"), qid, qoff, sts, bts, props)
        out[i] = _unusable(tr, off) if timer_problem(tr) else Resolved(tr)
