"""Consumer progress (mqadmin consumerProgress) and the delay-level queues (ScheduleMessageService), from the
broker's config/*.json files (engine.broker.config.jsonfiles) and the consume queues (engine.broker.consumequeue.view).

consumerProgress, per group, topic and queue, as the broker's getConsumeStats answers it: brokerOffset = the
queue's max offset, consumerOffset = the committed offset (0 when none), diff = brokerOffset - consumerOffset,
lastTimestamp = store time of the message at consumerOffset - 1. The queues of a topic are 0..readQueueNums-1
from topics.json; a topic topics.json does not know keeps the queues its offsets and consume queues name.

Delays: level L (1-based, messageDelayLevel) lives in queue L-1 of SCHEDULE_TOPIC_XXXX; delayOffset.json holds the
next offset to deliver per level, which the broker clamps into [min, max] at load (correctDelayOffset) and starts
at 0 when absent. The unit's tagsCode is the delivery time the broker computed when it stored the message
(store time + the level's delay): the broker delivers by it, so it is the next delivery time shown.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from engine.broker.config import jsonfiles
from engine.broker.config.jsonfiles import Note
from engine.broker.config.rocksdb import load_consumer_offsets, load_subscription_groups, load_topics
from engine.broker.config.brokerconf import read_properties_file
from engine.broker.commitlog.message import DEFAULT_DELAY_LEVELS, SCHEDULE_TOPIC, parse_delay_levels
from engine.broker.layout import stored_topic_problem
from engine.errors import InvalidArgumentError, StoreError
from engine.broker.consumequeue.queue import MAX_EXT_ADDR
from engine.broker.consumequeue.offsets import LOGICAL_TRUNCATION
from engine.broker.consumequeue.view import OK, QueueView, commitlog_min_offset, logical_truncation

# ------------------------------------------------------------------------------------------- consumers


@dataclass
class QueueProgress:
    topic: str
    queueId: int
    brokerOffset: int | None         # None: the consume queue cannot be read (see note)
    consumerOffset: int
    diff: int | None
    minOffset: int | None
    committed: bool
    lastTimestamp: int | None
    note: str | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class GroupProgress:
    group: str
    queues: list[QueueProgress] = field(default_factory=list)

    @property
    def diff_total(self) -> int:
        return sum(q.diff for q in self.queues if q.diff is not None)

    @property
    def unreadable(self) -> list[QueueProgress]:
        return [q for q in self.queues if q.brokerOffset is None]

    def as_dict(self) -> dict:
        return {"group": self.group, "diffTotal": self.diff_total, "queues": [q.as_dict() for q in self.queues]}


@dataclass
class ConsumersReport:
    groups: list[GroupProgress] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sources: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"groups": [g.as_dict() for g in self.groups], "sources": self.sources,
                "notes": jsonfiles.notes_json(self.notes)}


def consumer_progress(store, group: str | None = None) -> ConsumersReport:
    """consumerProgress for every group with committed offsets (or for one group)."""
    layout = store.layout
    mode = store.mode  # config/*.json or the RocksDB tables, as the broker loads them
    offsets = load_consumer_offsets(layout, mode)
    if not offsets.found:
        where = (f"config/{jsonfiles.CONSUMER_OFFSET} (and its .bak)" if mode.configs == "json"
                 else "the RocksDB consumer-offset table")
        raise jsonfiles.ConfigFileError(
            f"{where} is missing in {store.root}: there are no committed "
            "offsets to show (copy the broker's config/ directory along with the store)")
    topics = load_topics(layout, mode)
    subs = load_subscription_groups(layout, mode)
    rep = ConsumersReport(notes=offsets.notes + topics.notes + subs.notes,
                          sources={f.name: f.source for f in (offsets, topics, subs)})
    rep.sources["consumeQueues"] = store.queue_source
    by_group: dict[str, dict[str, dict[int, int]]] = {}
    for key, queues in offsets.value.items():
        tg = jsonfiles.split_topic_group(key)
        if tg is None:
            rep.notes.append(Note("offset-key-skipped",
                                  f"offsetTable key {key!r} is not topic@group: skipped, as the broker does"))
            continue
        by_group.setdefault(tg[1], {})[tg[0]] = queues
    if group is not None:
        if group not in by_group and group not in (subs.value or {}):
            known = ", ".join(sorted(by_group)[:8]) or "none"
            raise InvalidArgumentError(f"no consumer group {group!r} in config/{jsonfiles.CONSUMER_OFFSET} or "
                                       f"config/{jsonfiles.SUBSCRIPTION_GROUP} (groups with offsets: {known})")
        if group not in by_group:
            rep.notes.append(Note("group-without-offset", f"group {group} is configured but has no committed offset"))
        by_group = {group: by_group.get(group, {})}
    on_disk = {}
    for t, q in store.layout.list_queues().queues:
        on_disk.setdefault(t, set()).add(q)
    cl_min = commitlog_min_offset(store)
    for g in sorted(by_group):
        gp = GroupProgress(g)
        for topic in sorted(by_group[g]):
            ids = _queue_ids(topic, by_group[g][topic], topics.value, on_disk, rep.notes)
            for qid in ids:
                gp.queues.append(_progress(store, topic, qid, by_group[g][topic].get(qid), cl_min,
                                           qid in on_disk.get(topic, ())))
        rep.groups.append(gp)
    _note_truncation(store, rep.notes)
    return rep


def _note_truncation(store, notes: list[str]) -> None:
    t = logical_truncation(store)
    if t is not None:
        notes.append(Note(LOGICAL_TRUNCATION, t["note"]))


def _queue_ids(topic: str, committed: dict, topic_table, on_disk: dict, notes: list[str]) -> list[int]:
    tc = (topic_table or {}).get(topic)
    if tc is not None:
        ids = list(range(max(0, tc.readQueueNums)))
        extra = sorted(q for q in committed if q not in ids)
        if extra:
            notes.append(Note("queues-beyond-read-queue-nums", f"{topic}: offsets of queues "
                              f"{', '.join(map(str, extra))} lie beyond readQueueNums {tc.readQueueNums}; the broker "
                              "does not report them"))
        return ids
    if topic_table is not None:
        notes.append(Note("topic-not-in-topics-json", f"{topic} is not in config/{jsonfiles.TOPICS}: the broker's "
                          "consumerProgress would skip it; its queues here come from the offsets and the consume "
                          "queues"))
    return sorted(set(committed) | on_disk.get(topic, set()))


def _progress(store, topic: str, qid: int, committed: int | None, cl_min: int, on_disk: bool) -> QueueProgress:
    consumer = committed if committed is not None and committed >= 0 else 0
    p = QueueProgress(topic, qid, 0, consumer, -consumer, 0, committed is not None, None)
    if not on_disk:
        why = stored_topic_problem(topic)
        p.note = f"not a valid topic name: {why}" if why else "no consume queue on disk"
        return p
    try:
        with QueueView(store, topic, qid, cl_min) as view:
            p.brokerOffset, p.minOffset = view.max_offset, view.min_offset
            p.diff = view.max_offset - consumer
            if view.min_offset <= consumer - 1 < view.max_offset:
                p.lastTimestamp = view.store_time(consumer - 1)
    except StoreError as e:
        p.brokerOffset = p.minOffset = p.diff = None
        p.note = f"the consume queue cannot be read: {e}"
        return p
    if consumer > p.brokerOffset:
        p.note = "the committed offset is past the queue's max offset"
    elif consumer < p.minOffset:
        p.note = (f"the committed offset is below the queue's min offset {p.minOffset}: those messages were "
                  "deleted unread")
    return p


# ------------------------------------------------------------------------------------------- delays


@dataclass
class DelayLevel:
    delayLevel: int
    delay: str | None
    delayMs: int | None
    queueId: int
    minOffset: int
    maxOffset: int
    delayOffset: int | None          # as stored in delayOffset.json (None: absent)
    effectiveOffset: int             # where the broker resumes: clamped into [min, max], 0 -> min when absent
    pending: int
    nextStoreTimestamp: int | None = None
    nextDeliverTimestamp: int | None = None
    lastDeliverTimestamp: int | None = None
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)   # units or messages that could not be read

    def as_dict(self) -> dict:
        return dict(self.__dict__, notes=jsonfiles.notes_json(self.notes))


@dataclass
class DelaysReport:
    messageDelayLevel: str
    levels: list[DelayLevel] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    source: str | None = None
    consume_queue_source: str = "file"   # where the schedule queues were read: "file" or "rocksdb"

    def as_dict(self) -> dict:
        return {"messageDelayLevel": self.messageDelayLevel, "source": self.source,
                "consumeQueueSource": self.consume_queue_source,
                "levels": [lv.as_dict() for lv in self.levels], "notes": jsonfiles.notes_json(self.notes)}


def delay_status(store, broker_conf: str | os.PathLike | None = None) -> DelaysReport:
    """The schedule queues SCHEDULE_TOPIC_XXXX/<level-1>: delay offsets, pending counts, next delivery times."""
    spec = DEFAULT_DELAY_LEVELS
    if broker_conf is not None:
        spec = read_properties_file(broker_conf).get("messageDelayLevel", DEFAULT_DELAY_LEVELS)
    delays = parse_delay_levels(spec)
    offsets = jsonfiles.delay_offsets(store.layout)
    rep = DelaysReport(spec, notes=list(offsets.notes), source=offsets.source,
                       consume_queue_source=store.queue_source)
    table = offsets.value or {}
    queue_ids = {q for t, q in store.layout.list_queues().queues if t == SCHEDULE_TOPIC}
    cl_min = commitlog_min_offset(store)
    for level in sorted({q + 1 for q in queue_ids} | set(table)):
        if level < 1:
            rep.notes.append(Note("delay-level-invalid",
                                  f"delayOffset.json names delay level {level}: levels start at 1; ignored"))
            continue
        delay = delays[level - 1] if level <= len(delays) else None
        rep.levels.append(_level(store, level, delay, spec, table.get(level), level - 1 in queue_ids, cl_min))
    _note_truncation(store, rep.notes)
    return rep


def _level(store, level: int, delay: int | None, spec: str, stored: int | None, has_queue: bool,
           cl_min: int) -> DelayLevel:
    label = spec.split(" ")[level - 1] if delay is not None else None
    lv = DelayLevel(level, label, delay, level - 1, 0, 0, stored, 0, 0)
    if delay is None:
        lv.notes.append(Note("level-not-delivered", f"messageDelayLevel has {len(spec.split())} levels: the broker "
                             f"does not deliver level {level}"))
    if not has_queue:
        lv.notes.append(Note("no-consume-queue", "no consume queue on disk"))
        return lv
    try:
        view = QueueView(store, SCHEDULE_TOPIC, level - 1, cl_min)
    except StoreError as e:
        lv.problems.append(f"the consume queue cannot be read: {e}")
        return lv
    with view as v:
        lv.minOffset, lv.maxOffset = v.min_offset, v.max_offset
        start = 0 if stored is None else stored
        lv.effectiveOffset = min(max(start, v.min_offset), v.max_offset)
        if stored is not None and stored != lv.effectiveOffset:
            lv.notes.append(Note("offset-corrected", f"the stored offset {stored} lies outside [{v.min_offset}, "
                                 f"{v.max_offset}]: the broker corrects it to {lv.effectiveOffset} at load"))
        lv.pending = v.max_offset - lv.effectiveOffset
        if lv.pending:
            lv.nextDeliverTimestamp, lv.nextStoreTimestamp = _deliver_time(v, lv.effectiveOffset, delay, lv)
            lv.lastDeliverTimestamp, _ = _deliver_time(v, v.max_offset - 1, delay, lv)
    return lv


def _deliver_time(v: QueueView, q: int, delay: int | None, lv: DelayLevel) -> tuple[int | None, int | None]:
    """(delivery time, store time) of the unit at q: its tagsCode, as the broker delivers by it; an ext address
    hides it, and then store time + delay is what the broker computes instead."""
    c = v.check(q)
    store_ts = c.record.store_timestamp if c.status == OK else None
    if c.status != OK:
        lv.problems.append(f"queue offset {q}: {c.status.lower()}: {c.reason}")
    if c.tags_code <= MAX_EXT_ADDR:
        return (store_ts + (delay if delay is not None else 1000) if store_ts is not None else None), store_ts
    if store_ts is not None and delay is not None and c.tags_code != store_ts + delay:
        lv.notes.append(Note("delivery-time-mismatch", f"queue offset {q}: its delivery time {c.tags_code} is not "
                             f"store time + {delay} ms (messageDelayLevel changed since it was stored?)"))
    return c.tags_code, store_ts
