"""Light message queues (LMQ) and multi-dispatch: which extra consume queues a record goes to, and at which queue
offsets (format §11.7).

A producer names the queues in the INNER_MULTI_DISPATCH property, comma separated. A broker with enableLmq
(CommitLog.DefaultAppendMessageCallback.doAppend, LmqDispatch.wrapLmqDispatch) gives every %LMQ% name the next
offset of its queue (queue id 0, MixAll.LMQ_QUEUE_ID) and writes them, in the same order, as
INNER_MULTI_QUEUE_OFFSET into the stored record's properties; a broker with enableMultiDispatch
(MultiDispatchUtils.checkMultiDispatchQueue, ConsumeQueue.multiDispatchLmqQueue) then appends to each named
queue a unit with the record's commit-log offset, size and tags code at that queue offset.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.broker.commitlog.message import SCHEDULE_TOPIC
from engine.broker import topics
from engine.broker.layout import RETRY_GROUP_TOPIC_PREFIX, stored_topic_problem
from engine.broker.mode import LMQ_PREFIX

#: MessageConst.PROPERTY_INNER_MULTI_DISPATCH / PROPERTY_INNER_MULTI_QUEUE_OFFSET.
PROP_INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
PROP_INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
#: MixAll.LMQ_DISPATCH_SEPARATOR, MixAll.LMQ_QUEUE_ID.
LMQ_DISPATCH_SEPARATOR = ","
LMQ_QUEUE_ID = 0
#: TopicValidator.SYSTEM_TOPIC_PREFIX (engine.broker.topics).
SYSTEM_TOPIC_PREFIX = topics.SYSTEM_TOPIC_PREFIX
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


def is_lmq(name: str | None) -> bool:
    """MixAll.isLmq."""
    return name is not None and name.startswith(LMQ_PREFIX)


def is_blank(text: str | None) -> bool:
    """StringUtils.isBlank: None, empty or whitespace only."""
    return text is None or not text.strip()


def java_split(text: str, sep: str = LMQ_DISPATCH_SEPARATOR) -> list[str]:
    """String.split(sep) with Java's rule: trailing empty strings are dropped."""
    parts = text.split(sep)
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    if parts == [""]:
        return [""] if text == "" else []
    return parts


def topic_allows_lmq(topic: str) -> bool:
    """MixAll.topicAllowsLMQ (the same test as MultiDispatchUtils.isNeedHandleMultiDispatch after its flag): not a
    %RETRY% topic, not a system topic, not SCHEDULE_TOPIC_XXXX."""
    return not (topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or topic.startswith(SYSTEM_TOPIC_PREFIX)
                or topic == SCHEDULE_TOPIC)


def java_long(text: str) -> int | None:
    """Long.parseLong, or None where it throws."""
    t = text
    if t[:1] in "+-":
        t = t[1:]
    if not t or not t.isascii() or not t.isdigit():
        return None
    v = int(text)
    return v if _LONG_MIN <= v <= _LONG_MAX else None


@dataclass(frozen=True)
class LmqTarget:
    """One consume queue a record is multi-dispatched to, at one queue offset."""
    topic: str
    queue_id: int
    queue_offset: int


def dispatch_targets(topic: str, queue_id: int, props: dict, enable_lmq: bool,
                     enable_multi_dispatch: bool) -> tuple[list[LmqTarget], str | None]:
    """The extra units the broker's consume-queue dispatcher writes for a record of `topic`/`queue_id` with these
    properties (checkMultiDispatchQueue, then multiDispatchLmqQueue), and why it writes none when the record asks
    for some but they cannot be written (None otherwise).

    A name holding a path separator is skipped as the broker skips it; a non-%LMQ% name (or any name without
    enableLmq) keeps the record's queue id; a name that cannot name a directory is skipped and reported."""
    if not enable_multi_dispatch or not topic_allows_lmq(topic):
        return [], None
    names, offs = props.get(PROP_INNER_MULTI_DISPATCH), props.get(PROP_INNER_MULTI_QUEUE_OFFSET)
    if is_blank(names) or is_blank(offs):
        return [], None
    queues, offsets = java_split(names), java_split(offs)
    if len(queues) != len(offsets):
        return [], (f"{PROP_INNER_MULTI_DISPATCH} names {len(queues)} queue(s) but {PROP_INNER_MULTI_QUEUE_OFFSET} "
                    f"gives {len(offsets)} offset(s): the broker dispatches it to none")
    out: list[LmqTarget] = []
    for name, off in zip(queues, offsets):
        if "/" in name:
            continue  # the broker skips a name holding File.separator
        q = java_long(off)
        if q is None:
            return out, (f"{PROP_INNER_MULTI_QUEUE_OFFSET} value {off!r} is not a number: the broker's dispatch "
                         "fails on it")
        why = stored_topic_problem(name)
        if why:
            return out, f"{PROP_INNER_MULTI_DISPATCH} names a queue that cannot be a directory: {why}"
        out.append(LmqTarget(name, LMQ_QUEUE_ID if enable_lmq and is_lmq(name) else queue_id, q))
    return out, None


def unit_named_by(record_topic: str, record_queue_id: int, props: dict, queue_topic: str, queue_id: int,
                  queue_offset: int) -> bool:
    """Whether a unit of `queue_topic`/`queue_id` at `queue_offset` pointing at a record of `record_topic`/
    `record_queue_id` with these properties is one the broker's multi-dispatch wrote: the record names the queue in
    INNER_MULTI_DISPATCH with that offset at the same position of INNER_MULTI_QUEUE_OFFSET (an %LMQ% queue is
    queue 0, another name the record's own queue id)."""
    if PROP_INNER_MULTI_DISPATCH not in props:
        return False
    targets, _ = dispatch_targets(record_topic, record_queue_id, props, is_lmq(queue_topic), True)
    return any(t.topic == queue_topic and t.queue_id == queue_id and t.queue_offset == queue_offset for t in targets)


def lmq_offsets_value(offsets: list[int | None]) -> str:
    """INNER_MULTI_QUEUE_OFFSET as wrapLmqDispatch writes it: StringUtils.join(offsets, ","), a null (a non-%LMQ%
    name) as an empty string."""
    return LMQ_DISPATCH_SEPARATOR.join("" if o is None else str(o) for o in offsets)
