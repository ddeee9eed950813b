"""Messages read by position as mqadmin reads them: by queue offset (queryMsgByOffset) and by message id, where an
id is an offset message id (queryMsgById) or the client's UNIQ_KEY (queryMsgByUniqueKey).

Every answer is checked before it is given: a consume-queue unit whose record is not the one it should point at
(another topic or queue, another size, another QUEUEOFFSET) is reported, never answered with (format §4; pitfall 17).
Read-only; memory: one unit and one record at a time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from engine.broker.index import keyquery
from engine.broker.commitlog.message import (PROP_DELAY, PROP_REAL_QID, PROP_REAL_TOPIC, VALID, MessageRecord,
                                            decode_offset_msg_id)
from engine.broker.topics import (DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, SCHEDULE_TOPIC, TIMER_TOPIC,
                                  TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, is_system_topic, require_topic)
from engine.errors import InvalidArgumentError, StoreError
from engine.findings import Note
from engine.broker.consumequeue.view import OK, MISMATCH, QueueView, UnitCheck, logical_truncation, select_queues

#: --count of a read by queue offset: far beyond a screenful, small enough to refuse a typo.
COUNT_LIMIT = 10_000_000
#: A UNIQ_KEY looked up without --topic is searched in at most this many topics.
MAX_TOPICS_SEARCHED = 10_000
#: Copies of one UNIQ_KEY looked for in each topic (retries and delays of one message can repeat in a topic).
MAX_COPIES_PER_TOPIC = 64

#: The property a redelivery carries its original topic in (MessageConst.PROPERTY_RETRY_TOPIC).
RETRY_TOPIC = "RETRY_TOPIC"


@dataclass
class QueueRead:
    """read_by_queue_offset's answer: the queue's bounds, then the units one by one (iterate `units`)."""
    topic: str
    queueId: int
    minOffset: int
    maxOffset: int
    start: int
    asked: int                     # the --count asked for
    count: int                     # the units that exist from `start` (asked, cut at maxOffset)
    units: Iterator[UnitCheck]     # status OK: .record is the message; anything else: .reason says why not
    note: str | None = None        # the broker's start-up cuts units of the store (logical truncation)


def read_by_queue_offset(store, topic: str, queue_id: int, queue_offset: int, count: int = 1,
                         check_crc: bool = True) -> QueueRead:
    """The units at queue offsets [queue_offset, queue_offset + count) of topic/queue_id and the messages they
    point at (mqadmin queryMsgByOffset). The offset must lie in [min, max) of the queue, as the broker serves it
    (queue_min_offset); the count is cut at max. The caller iterates .units (streamed)."""
    if not 0 < count <= COUNT_LIMIT:
        raise InvalidArgumentError(f"--count {count} is out of range 1..{COUNT_LIMIT}")
    if queue_id < 0:
        raise InvalidArgumentError(f"--queue-id {queue_id} is negative")
    select_queues(store, topic, queue_id)  # an unknown topic or queue: an error naming what exists
    view = QueueView(store, topic, queue_id)
    lo, hi = view.min_offset, view.max_offset
    if not lo <= queue_offset < hi:
        view.close()
        where = "below" if queue_offset < lo else "at or after"
        bounds = (f"the queue is empty (min offset = max offset = {hi})" if lo == hi else
                  f"its min offset is {lo} and its max offset is {hi}, so queue offsets {lo}..{hi - 1} can be read")
        if view.cut and hi <= queue_offset < view.units_end:
            end = store.broker_view.log_end
            bounds += (f"; the {view.cut} unit(s) after {hi} in its files point at or after offset {end.end}, where "
                       f"a broker starting on this store ends the commit log ({end.reason}): it cuts them, they are "
                       "not messages (logical truncation, format §4.5)")
        raise InvalidArgumentError(f"queue offset {queue_offset} is {where} the readable range of {topic}/{queue_id}: "
                                   f"{bounds}")
    n = min(count, hi - queue_offset)

    def units() -> Iterator[UnitCheck]:
        try:
            for q in range(queue_offset, queue_offset + n):
                yield strict_check(view, q, check_crc)
        finally:
            view.close()

    cut = logical_truncation(store)
    return QueueRead(topic, queue_id, lo, hi, queue_offset, count, n, units(), cut["note"] if cut else None)


def strict_check(view: QueueView, q: int, check_crc: bool) -> UnitCheck:
    """QueueView.check, with a record whose QUEUEOFFSET is not q counted as a mismatch: a read by queue offset
    answers only with the message that says it is there (pitfall 17 explains how they can differ)."""
    c = view.check(q, check_crc=check_crc)
    if c.status == OK and c.record is not None and c.record.queue_offset != q and not c.multi_dispatch:
        c.status = MISMATCH
        c.reason = (f"the unit points at commit-log offset {c.commit_log_offset}, whose record says queue offset "
                    f"{c.record.queue_offset}, not {q} (pitfall 17); `rmqtool get --offset {c.commit_log_offset}` "
                    "shows it")
    return c


# ------------------------------------------------------------------------------------------- by message id


@dataclass
class Copy:
    """One record that carries a UNIQ_KEY, and what it is in the message's life (copy_role)."""
    record: MessageRecord
    role: str
    delivered: bool                  # the copy in the message's own topic: what its consumer received


@dataclass
class MsgIdAnswer:
    """find_msg_id's answer: the message, and for a UNIQ_KEY every other record that carries it."""
    record: MessageRecord
    by: str                          # "offsetMsgId" or "uniqKey"
    copies: list[Copy] = field(default_factory=list)   # every record with the UNIQ_KEY, the answer among them

    def notes(self) -> list[str]:
        """What a reader should know (stderr): which copy was answered, and the others with their roles."""
        if self.by != "uniqKey" or len(self.copies) <= 1 and all(c.delivered for c in self.copies):
            return []
        chosen = next(c for c in self.copies if c.record is self.record)
        out = []
        if not chosen.delivered:
            out.append(Note(NOT_DELIVERED, f"UNIQ_KEY {self.record.uniq_key} was not delivered to its topic: no copy "
                            f"lies in a topic of its own; showing the latest copy, {_where(chosen)} ({chosen.role})",
                            **_copy_fields(chosen)))
        for c in self.copies:
            if c.record is not self.record:
                out.append(Note(OTHER_COPY, f"another copy of UNIQ_KEY {self.record.uniq_key}: {_where(c)} ({c.role})",
                                **_copy_fields(c)))
        return out


#: The kinds of MsgIdAnswer's notes (engine.findings.Note): no copy of the UNIQ_KEY was delivered to a topic of
#: its own (the latest is shown); another record carries the UNIQ_KEY.
NOT_DELIVERED, OTHER_COPY = "uniq-key-not-delivered", "uniq-key-copy"


def _where(c: Copy) -> str:
    r = c.record
    return f"{r.topic}/{r.queue_id} queue offset {r.queue_offset}, commit-log offset {r.physical_offset}"


def _copy_fields(c: Copy) -> dict:
    r = c.record
    return {"uniqKey": r.uniq_key, "topic": r.topic, "queueId": r.queue_id, "queueOffset": r.queue_offset,
            "commitLogOffset": r.physical_offset, "role": c.role, "delivered": c.delivered}


def copy_role(rec: MessageRecord) -> tuple[str, bool]:
    """(what a record carrying a message's UNIQ_KEY is, whether it is the message as delivered to its topic).
    The broker keeps the client's UNIQ_KEY on every record it makes of a message: the copy that waits for its
    delay level (SCHEDULE_TOPIC_XXXX) or timer (rmq_sys_wheel_timer) and the half message of a transaction
    (RMQ_SYS_TRANS_HALF_TOPIC), each naming the real topic and queue in REAL_TOPIC/REAL_QID, which the copy
    delivered there gets back; redeliveries to a consumer group (%RETRY%<group>) and dead letters (%DLQ%<group>);
    a recovery placeholder (rmq_sys_rmqtool_quarantine) carries none."""
    p, t = rec.properties, rec.topic
    real = f"{p.get(PROP_REAL_TOPIC)}/{p.get(PROP_REAL_QID)}" if PROP_REAL_TOPIC in p else "its topic"
    if t == SCHEDULE_TOPIC:
        return f"delayed: waits for delay level {p.get(PROP_DELAY, rec.queue_id + 1)}, then goes to {real}", False
    if t == TIMER_TOPIC:
        return f"timer message: waits in the timer wheel, then goes to {real}", False
    if t == TRANS_HALF_TOPIC:
        return f"transaction half message: goes to {real} if the transaction commits", False
    if t == TRANS_OP_HALF_TOPIC:
        return "transaction op record", False
    if t.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return (f"redelivery to consumer group {t[len(RETRY_GROUP_TOPIC_PREFIX):]} (retry topic"
                + (f", from {p[RETRY_TOPIC]})" if RETRY_TOPIC in p else ")")), False
    if t.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return f"dead letter of consumer group {t[len(DLQ_GROUP_TOPIC_PREFIX):]}", False
    if is_system_topic(t):
        return "a system topic's record", False
    return f"the message as delivered to {t}/{rec.queue_id}", True


def find_msg_id(store, msg_id: str, topic: str | None = None) -> MsgIdAnswer:
    """The message with this id: an offset message id (store host, port and commit-log offset, mqadmin
    queryMsgById) whose record carries that id, else a UNIQ_KEY found through the index as query-key
    --unique-key finds it: in `topic`, else in every topic with a consume queue, where the answer is the copy
    delivered to the message's own topic (not the SCHEDULE_TOPIC_XXXX copy of a delayed message nor the half of
    a transaction, copy_role) and .copies lists every record carrying it. InvalidArgumentError says which forms
    were tried and why each failed."""
    text = msg_id.strip()
    if not text:
        raise InvalidArgumentError("--msg-id is empty")
    rec, why_offset = _by_offset_id(store, text)
    if rec is not None:
        return MsgIdAnswer(rec, "offsetMsgId")
    ans, why_uniq = _by_uniq_key(store, text, topic)
    if ans is not None:
        return ans
    raise InvalidArgumentError(f"message id {text} is neither an offset message id nor a UNIQ_KEY found in the index: "
                               f"as an offset message id, {why_offset}; as a UNIQ_KEY, {why_uniq}")


def find_by_msg_id(store, msg_id: str, topic: str | None = None) -> MessageRecord:
    """find_msg_id's message."""
    return find_msg_id(store, msg_id, topic).record


def _by_offset_id(store, text: str) -> tuple[MessageRecord | None, str]:
    try:
        _host, _port, off = decode_offset_msg_id(text)
    except ValueError as e:
        return None, str(e)
    r = store.commitlog.check_at(off, check_crc=True)
    if r.status != VALID:
        return None, f"it names commit-log offset {off}, where there is no valid message ({r.reason or r.status})"
    if r.record.msg_id.upper() != text.upper():
        return None, f"it names commit-log offset {off}, but the message there has id {r.record.msg_id}"
    return r.record, ""


def _by_uniq_key(store, text: str, topic: str | None) -> tuple[MsgIdAnswer | None, str]:
    if topic is not None:
        require_topic(store.layout, topic)
        topics = [topic]
    else:
        topics = sorted({t for t, _q in store.layout.list_queues().queues})
        if not topics:
            return None, "the store has no consume queue to take a topic from (give --topic)"
        if len(topics) > MAX_TOPICS_SEARCHED:
            return None, f"the store has {len(topics)} topics, too many to search them all (give --topic)"
    damaged: set[str] = set()
    keys = [text] if text == text.upper() else [text, text.upper()]  # client ids are upper-case hex
    try:
        store.index  # noqa: B018 -- opened once here, so an unreadable index is a reason, not a second error
    except StoreError as e:
        return None, f"the index cannot be searched: {e}"
    copies: dict[int, Copy] = {}
    for t in topics:
        for k in keys:
            res = keyquery.query(store, t, k, max_num=1 if topic is not None else MAX_COPIES_PER_TOPIC, unique=True)
            damaged.update(d.line() for d in res.damaged)
            if res.messages and topic is not None:
                return MsgIdAnswer(res.messages[0], "uniqKey", [Copy(res.messages[0], *copy_role(res.messages[0]))]), ""
            for m in res.messages:
                copies.setdefault(m.physical_offset, Copy(m, *copy_role(m)))
            if res.messages:
                break  # the key as given or upper-cased: the same records
    if copies:
        found = sorted(copies.values(), key=lambda c: c.record.physical_offset)
        delivered = [c for c in found if c.delivered]
        # The first delivery to the message's own topic; without one, the latest stage it reached.
        chosen = delivered[0] if delivered else found[-1]
        return MsgIdAnswer(chosen.record, "uniqKey", found), ""
    where = f"topic {topic!r}" if topic is not None else f"{len(topics)} topic(s) ({_few(topics)})"
    why = f"no message has it in {where}"
    if damaged:
        why += "; the index is damaged, so the answer may be incomplete: " + "; ".join(sorted(damaged))
    return None, why


def _few(names: list[str], k: int = 5) -> str:
    return ", ".join(names[:k]) + (f", ... {len(names) - k} more" if len(names) > k else "")
