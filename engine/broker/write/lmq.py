"""The put's LMQ step: INNER_MULTI_QUEUE_OFFSET written into the record and a unit in every %LMQ% queue, as a broker
with enableLmq and enableMultiDispatch does (engine.broker.consumequeue.lmq; format §11.7).

The offsets depend on the queues' ends, which only the put knows, and they change the record's length: the
messages that carry INNER_MULTI_DISPATCH are re-encoded here, before the batch's room is measured. The broker
(LmqDispatch.wrapLmqDispatch) puts the property into the message's HashMap and writes the whole map again
(MessageDecoder.messageProperties2String): serialize_properties with the key added after the others, or in its
place when the producer sent one.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.broker.commitlog.message import MAX_PROPERTIES_LEN, MessageEncodeError, serialize_properties
from engine.broker.consumequeue.lmq import (LMQ_QUEUE_ID, PROP_INNER_MULTI_DISPATCH, PROP_INNER_MULTI_QUEUE_OFFSET,
                                            is_blank, is_lmq, java_split, lmq_offsets_value, topic_allows_lmq)
from engine.broker.layout import stored_topic_problem
from engine.broker.write.batch import PARTS, MessageBatch
from engine.errors import InvalidArgumentError


@dataclass
class LmqPut:
    """What the LMQ step decided for a batch: the %LMQ% units to write (queue -> batch positions, in order), how
    many leading messages can be put (`cut`, with `error` for the message there), and the positions of the
    messages carrying INNER_MULTI_DISPATCH that the store ignores (LMQ not enabled)."""
    groups: dict = field(default_factory=dict)
    cut: int = 0
    error: Exception | None = None
    ignored: list = field(default_factory=list)


def _refuse(i: int, why: str) -> InvalidArgumentError:
    e = InvalidArgumentError(why)
    e.batch_index = i
    return e


def assign_lmq(store, batch: MessageBatch, enable_lmq: bool, enable_multi_dispatch: bool,
               main_queues: set) -> LmqPut:
    """Give the batch's multi-dispatch messages their LMQ queue offsets (re-encoding them) and collect their units.
    `main_queues`: the (topic, queueId) pairs the batch's messages are put to, which an LMQ name must not be."""
    out = LmqPut(cut=len(batch))
    next_off: dict[str, int] = {}
    members: dict[str, list[int]] = {}
    for i in sorted(batch.multi):
        props = batch.multi[i]
        topic = batch.topic[i]
        names = props.get(PROP_INNER_MULTI_DISPATCH)
        if is_blank(names) or not topic_allows_lmq(topic):
            continue  # MessageExtBrokerInner.needDispatchLMQ is false: an ordinary property
        if not enable_lmq:
            if enable_multi_dispatch and not is_blank(props.get(PROP_INNER_MULTI_QUEUE_OFFSET)):
                out.cut, out.error = i, _refuse(i, f"a message carries {PROP_INNER_MULTI_QUEUE_OFFSET}, which "
                                                   "a broker with enableMultiDispatch would dispatch by; it is the "
                                                   "broker's to assign: leave it out")
                break
            out.ignored.append(i)
            continue
        why = _check_names(java_split(names), batch, i, main_queues)
        if why:
            out.cut, out.error = i, _refuse(i, why)
            break
        queues = java_split(names)
        offsets = []
        for name in queues:
            if name not in next_off:
                next_off[name] = store.consume_queue(name, LMQ_QUEUE_ID).max_offset_in_queue
            offsets.append(next_off[name])
        props[PROP_INNER_MULTI_QUEUE_OFFSET] = lmq_offsets_value(offsets)
        err = _reencode(batch, i, props)
        if err is not None:
            err.batch_index = i
            out.cut, out.error = i, err
            break
        for name in queues:
            next_off[name] += 1  # LmqDispatch.updateLmqOffsets
            if enable_multi_dispatch:
                members.setdefault(name, []).append(i)
    out.groups = {(name, LMQ_QUEUE_ID): np.asarray(idx, dtype=np.int64) for name, idx in members.items()}
    return out


def _check_names(queues: list[str], batch: MessageBatch, i: int, main_queues: set) -> str | None:
    """Why the broker would not write these %LMQ% queues consistently (then the put refuses the message), or None."""
    if not batch.in_cq[i]:
        return (f"a transaction prepared or rollback message carries {PROP_INNER_MULTI_DISPATCH}: the broker would "
                "take LMQ queue offsets for it without writing its units, leaving the queues out of order")
    seen = set()
    for name in queues:
        if not is_lmq(name):
            return (f"{PROP_INNER_MULTI_DISPATCH} names {name!r}, which is not an %LMQ% queue: the broker gives it no "
                    "offset and its dispatch fails on the empty one")
        why = stored_topic_problem(name)
        if why:
            return f"{PROP_INNER_MULTI_DISPATCH}: {why}"
        if name in seen:
            return (f"{PROP_INNER_MULTI_DISPATCH} names {name} twice: the broker would give both the same offset and "
                    "write one unit")
        seen.add(name)
        if (name, LMQ_QUEUE_ID) in main_queues:
            return (f"{name}/{LMQ_QUEUE_ID} is both a message's queue and an LMQ queue of this put: put them in "
                    "separate runs")
    return None


def _reencode(batch: MessageBatch, i: int, props: dict) -> Exception | None:
    """The message's properties written again (the record's length with them), or the error that stops it."""
    try:
        praw = serialize_properties(props).encode("utf-8")
    except UnicodeEncodeError:
        return InvalidArgumentError("a property is not valid Unicode text (a lone surrogate)")
    if len(praw) > MAX_PROPERTIES_LEN:
        return MessageEncodeError(f"properties are {len(praw)} bytes with {PROP_INNER_MULTI_QUEUE_OFFSET}; the "
                                  f"broker's limit is {MAX_PROPERTIES_LEN}")
    k = i * PARTS
    old = len(batch.parts[k + 4])
    size = batch.size[i] - old + len(praw)
    head = batch.parts[k]
    batch.parts[k] = size.to_bytes(4, "big") + head[4:]
    batch.parts[k + 3] = len(praw).to_bytes(2, "big")
    batch.parts[k + 4] = praw
    batch.size[i] = size
    return None
