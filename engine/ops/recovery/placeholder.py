"""The recovery placeholder: what `recover` writes over a damaged record it steps over, what a consumer receives
in its place, and the placeholders of a store (for `rmqtool info`).

The trade. The broker's own recovery ends the commit log at the first damaged record and cuts every message after
it (format §7.2, §4.5); `recover` keeps them and pays with one placeholder per damaged range: a valid record of
exactly the damaged range's length, so the broker's recovery walks on, made so its dispatchers skip it
(transaction type ROLLBACK: no consume-queue unit, format §4.2; not indexed, format §5.8).

What a consumer receives. The consume-queue unit that pointed at the damaged record stays (units are positional),
so a consumer of that queue, reaching that queue offset, receives the placeholder as a message:

* topic `rmq_sys_rmqtool_quarantine` (QUARANTINE_TOPIC), no tags, no keys, a body of zero-valued bytes (padding to the damaged range's size);
* its QUEUEID and QUEUEOFFSET are the unit's, so the consumer's offset bookkeeping goes on as for the lost message;
* properties: RMQTOOL_QUARANTINED = the quarantine manifest (`quarantine/<run>/manifest.json`, relative to the
  store root) that holds the damaged bytes, and RMQTOOL_ORIGIN_TOPIC, RMQTOOL_ORIGIN_QUEUE_ID,
  RMQTOOL_ORIGIN_QUEUE_OFFSET = the queue and queue offset of the message it replaces (from the unit; absent when
  no unit pointed at the range). A range too small for these properties gets fewer (down to none) so the record
  still fits exactly; the manifest always names it.

A consumer that subscribes by tag never receives it (it has no tag); one that subscribes to `*` should skip
messages whose topic is QUARANTINE_TOPIC, or that carry RMQTOOL_QUARANTINED. `list_placeholders` finds every
placeholder of a store from the quarantine manifests (each placeholder entry names its commit-log offset and
origin) and checks that the record is still there.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from engine.broker.commitlog.message import (PROP_REAL_QID, PROP_REAL_TOPIC, SCHEDULE_TOPIC, TRANS_HALF_TOPIC,
                                             TRANSACTION_ROLLBACK_TYPE, VALID, MessageRecord, encode_record)
from engine.broker.commitlog.placeholder import (ORIGIN_QUEUE_ID, ORIGIN_QUEUE_OFFSET, ORIGIN_TOPIC,
                                                 QUARANTINE_PROPERTY, QUARANTINE_TOPIC)
from engine.errors import CorruptFileError
from engine.ops.footprint.quarantine import MANIFEST, QUARANTINE_DIR
from engine.timer.layout import TIMER_TOPIC
from engine.timer.records import PROP_TIMER_OUT_MS

#: How the quarantine manifest names what took the damaged bytes' place.
REPLACED_BY = "a placeholder record"
#: MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES: how often the broker asked the producer about a half message.
PROP_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"


def reader_properties(origin: Origin | None, store_ts: int) -> dict[str, str]:
    """What the broker's own reader of the placeholder's queue needs to pass over it (issue 34 item 1), read from
    its code at the golden commit:

    * rmq_sys_wheel_timer (TimerMessageStore.enqueue): Long.parseLong(TIMER_OUT_MS) of every message its cursor
      reaches, a NumberFormatException retried for ever without it; at dequeue convertMessage takes REAL_TOPIC and
      Integer.parseInt(REAL_QID). The placeholder is due at once (its own store time) and delivered to
      queue 0 of QUARANTINE_TOPIC;
    * SCHEDULE_TOPIC_XXXX (ScheduleMessageService.messageTimeUp): REAL_TOPIC and Integer.parseInt(REAL_QID) (an
      exception skips the rest of that run); delivered to QUARANTINE_TOPIC as well;
    * RMQ_SYS_TRANS_HALF_TOPIC (TransactionalMessageServiceImpl.check, needDiscard): TRANSACTION_CHECK_TIMES at or
      above transactionCheckMax discards the half message at its first check (resolveDiscardMsg) instead of asking a
      producer group it does not name.

    Every copy the broker makes keeps the placeholder's sysFlag, transaction type ROLLBACK: the put is stored and
    never dispatched to a consume queue, so no consumer receives it. Other queues (consumers, %LMQ%, the op queue)
    read it as a message (a consumer receives the placeholder, acknowledges it and moves on)."""
    if origin is None:
        return {}
    deliver = {PROP_REAL_TOPIC: QUARANTINE_TOPIC, PROP_REAL_QID: "0"}
    if origin.topic == TIMER_TOPIC:
        return {PROP_TIMER_OUT_MS: str(store_ts), **deliver}
    if origin.topic == SCHEDULE_TOPIC:
        return deliver
    if origin.topic == TRANS_HALF_TOPIC:
        return {PROP_TRANSACTION_CHECK_TIMES: str(2**31 - 1), **deliver}
    return {}


@dataclass(frozen=True)
class Origin:
    """The consume-queue unit that pointed at a damaged record: the message a placeholder replaces."""
    topic: str
    queue_id: int
    queue_offset: int

    def as_dict(self) -> dict:
        return {"topic": self.topic, "queueId": self.queue_id, "queueOffset": self.queue_offset}


def placeholder_record(offset: int, length: int, store_ts: int, manifest: str, origin: Origin | None = None
                       ) -> bytes:
    """A valid record of exactly `length` bytes that the broker's recovery accepts and its dispatchers skip, and that
    a consumer reading the unit at `origin` receives as the placeholder described above."""
    reader = reader_properties(origin, store_ts)
    full = {**reader, QUARANTINE_PROPERTY: manifest}
    if origin is not None:
        full.update({ORIGIN_TOPIC: origin.topic, ORIGIN_QUEUE_ID: str(origin.queue_id),
                     ORIGIN_QUEUE_OFFSET: str(origin.queue_offset)})
    # The reader's properties go last of all: without them its reader would stop at the placeholder.
    for topic, props in ((QUARANTINE_TOPIC, full), (QUARANTINE_TOPIC, {**reader, QUARANTINE_PROPERTY: manifest}),
                         (QUARANTINE_TOPIC, reader), (QUARANTINE_TOPIC, {}), ("", {})):
        rec = MessageRecord(topic=topic, sys_flag=TRANSACTION_ROLLBACK_TYPE, physical_offset=offset,
                            store_timestamp=store_ts, born_timestamp=store_ts, properties=dict(props),
                            queue_id=origin.queue_id if origin else 0,
                            queue_offset=origin.queue_offset if origin else 0)
        pad = length - len(encode_record(rec))
        if pad >= 0:
            rec.body = bytes(pad)
            data = encode_record(rec)
            if len(data) == length:
                return data
            # A body of 0 bytes and of N > 0 bytes differ only by N: unreachable, kept as a guard.
    raise CorruptFileError(f"cannot fit a placeholder record into {length} bytes at offset {offset}")


def manifest_path(run: str) -> str:
    """The quarantine manifest of a recover run, relative to the store root (RMQTOOL_QUARANTINED's value)."""
    return f"{QUARANTINE_DIR}/{run}/{MANIFEST}"


@dataclass
class Placeholder:
    """One placeholder of a store, as list_placeholders finds it."""
    commitLogOffset: int
    size: int
    origin: dict | None          # {topic, queueId, queueOffset} of the message it replaces, when a unit named it
    manifest: str                # the quarantine manifest that holds the damaged bytes
    reason: str                  # why the bytes were unreadable
    present: bool                # the placeholder record is still at that offset (a later clean-up may delete it)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def list_placeholders(store) -> list[Placeholder]:
    """Every recovery placeholder written into this store (an open engine.broker.store.MessageStore), from the
    quarantine manifests (`<store>/quarantine/*/manifest.json`), in commit-log order, each checked against the
    commit log. Reads the manifests and one record per placeholder."""
    qroot = Path(store.root) / QUARANTINE_DIR
    found: dict[int, Placeholder] = {}
    manifests = sorted(qroot.glob(f"*/{MANIFEST}")) if qroot.is_dir() else []
    for m in manifests:
        try:
            doc = json.loads(m.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        rel = str(m.relative_to(store.root))
        for e in doc.get("entries") or []:
            p = _entry(e, rel)
            if p is not None:
                found[p.commitLogOffset] = p  # a later run that kept the same range again speaks last
    cl = store.commitlog
    for p in found.values():
        r = cl.check_at(p.commitLogOffset, check_crc=True)
        p.present = r.status == VALID and r.record.topic == QUARANTINE_TOPIC and r.size == p.size
    return [found[k] for k in sorted(found)]


def _entry(e: dict, manifest: str) -> Placeholder | None:
    if not isinstance(e, dict) or e.get("replacedBy") != REPLACED_BY:
        return None
    ph = e.get("placeholder")
    if isinstance(ph, dict) and isinstance(ph.get("commitLogOffset"), int):
        return Placeholder(ph["commitLogOffset"], int(e.get("length", 0)), ph.get("origin"), manifest,
                           str(e.get("reason", "")), False)
    # A manifest of an earlier version: the range's file names the segment, its offset the position in it.
    name = Path(str(e.get("path", ""))).name
    if not (name.isdigit() and isinstance(e.get("offset"), int)):
        return None
    return Placeholder(int(name) + e["offset"], int(e.get("length", 0)), None, manifest, str(e.get("reason", "")),
                       False)
