"""Config files rebuilt from what the store holds (`rmqtool repair config NAME --from-store`, docs/doctor.md):
delayOffset.json from SCHEDULE_TOPIC_XXXX and the commit log, subscriptionGroup.json from the groups the store
names. topics.json's rebuild lives with the repair itself (engine.ops.repair).

delayOffset.json is ScheduleMessageService's offsetTable {delayLevel: the next queue offset of
SCHEDULE_TOPIC_XXXX/(level - 1) to deliver}. Each level is delivered in queue order: when a unit's time is up the
broker reads its record and puts a copy into the real topic (messageTimeUp: the same body, flag, born time and
host, reconsume times and properties, UNIQ_KEY, REAL_TOPIC and REAL_QID included, DELAY and the timer properties
cleared; topic and queue id from REAL_TOPIC/REAL_QID), and moves the level's offset past the unit once the put
succeeded; a unit whose time is not up stops the level there. So the offset the broker would have saved is the
first unit whose copy is not in the commit log after it. A copy is recognised by (real topic, real queue id,
UNIQ_KEY, born timestamp, body CRC) at a larger commit-log offset than the unit's record. Units the broker
skips without a copy count as passed: a record it cannot read (lookMessageByOffset null), a REAL_TOPIC of
RMQ_SYS_TRANS_HALF_TOPIC (discarded with "[BUG]" in its log).

Memory: the keys of at most DELAY_KEYS_MAX units are held at a time (split over the levels still open). A level
whose window of units was all delivered is looked at again from the unit after it, with another pass over the
commit log from that unit's record; most stores need one pass, from the first unit's record.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.broker.commitlog.logrun import RecordRun, lookup_runs, scan_runs
from engine.broker.commitlog.message import (PROP_REAL_QID, PROP_REAL_TOPIC, PROP_UNIQ_KEY, SCHEDULE_TOPIC,
                                            TRANS_HALF_TOPIC, parse_delay_levels, parse_properties)
from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.config.jsonfiles import (BAK_SUFFIX, CONSUMER_OFFSET, SUBSCRIPTION_GROUP, SYSTEM_GROUPS, TOPICS,
                                            config_file_state, consumer_offset_groups, decode_subscription_groups,
                                            default_subscription_group)
from engine.broker.layout import (DLQ_GROUP_TOPIC_PREFIX, POP_RETRY_SEPARATOR_V1, POP_RETRY_SEPARATOR_V2,
                                  RETRY_GROUP_TOPIC_PREFIX, StoreLayout)
from engine.broker.store import MessageStore
from engine.errors import InvalidArgumentError
from engine.java import fastjson
from engine.broker.consumequeue.view import QueueView, commitlog_min_offset

#: Units of SCHEDULE_TOPIC_XXXX whose keys are held at once, over all delay levels (about 1.4 KB each with the
#: dicts and tuples that hold them: docs/performance.md).
DELAY_KEYS_MAX = 100_000


@dataclass
class DelayLevel:
    level: int
    min_offset: int
    max_offset: int
    offset: int = -1          # the rebuilt next offset to deliver
    delivered: int = 0        # units from min_offset before `offset` (delivered or skipped)

    def as_dict(self) -> dict:
        return {"level": self.level, "minOffset": self.min_offset, "maxOffset": self.max_offset,
                "offset": self.offset, "pending": self.max_offset - self.offset}


@dataclass
class DelayRebuild:
    levels: list[DelayLevel] = field(default_factory=list)
    ignored_queues: list[int] = field(default_factory=list)   # queue ids past the configured delay levels
    passes: int = 0

    @property
    def table(self) -> dict[int, int]:
        return {d.level: d.offset for d in self.levels}


def rebuild_delay_offsets(cfg: BrokerConfig, max_keys: int = DELAY_KEYS_MAX) -> DelayRebuild:
    """ScheduleMessageService's offsetTable as the store says it stands (module doc). Levels are those of
    messageDelayLevel whose queue SCHEDULE_TOPIC_XXXX/(level - 1) holds units: the broker writes an entry only
    for a level it has delivered from (a level without a consume queue, or with an empty one, never gets one)."""
    if max_keys < 1:
        raise InvalidArgumentError("the key budget must be at least 1")
    try:
        n_levels = len(parse_delay_levels(cfg.messageDelayLevel))
    except ValueError as e:
        raise InvalidArgumentError(f"messageDelayLevel {cfg.messageDelayLevel!r} does not parse: {e}") from None
    layout = StoreLayout.of(cfg)
    qids = sorted(q for t, q in layout.list_queues().queues if t == SCHEDULE_TOPIC)
    out = DelayRebuild(ignored_queues=[q for q in qids if q + 1 > n_levels])
    with MessageStore(cfg) as store:
        cl_min = commitlog_min_offset(store)
        views = {}
        try:
            for q in qids:
                if q + 1 > n_levels:
                    continue
                v = QueueView(store, SCHEDULE_TOPIC, q, cl_min)
                views[q + 1] = v
                if v.max_offset > v.min_offset:
                    out.levels.append(DelayLevel(q + 1, v.min_offset, v.max_offset))
            _settle(store, views, out, max_keys)
        finally:
            for v in views.values():
                v.close()
    return out


def _settle(store, views: dict, out: DelayRebuild, max_keys: int) -> None:
    start = {d.level: d.min_offset for d in out.levels}
    open_levels = [d for d in out.levels]
    while open_levels:
        per_level = max(1, max_keys // len(open_levels))
        window = {d.level: _window_units(views[d.level], start[d.level], min(d.max_offset, start[d.level] + per_level))
                  for d in open_levels}
        done = _delivered(store, window)
        out.passes += 1
        still = []
        for d in open_levels:
            qoffs = window[d.level][0]
            flags = done[d.level]
            not_done = np.flatnonzero(~flags)
            if len(not_done):
                d.offset = int(qoffs[int(not_done[0])])
            elif start[d.level] + len(qoffs) >= d.max_offset:
                d.offset = d.max_offset
            else:
                start[d.level] += len(qoffs)
                still.append(d)
                continue
            d.delivered = d.offset - d.min_offset
        open_levels = still


def _window_units(view: QueueView, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """(queue offsets, commit-log offsets) of units [lo, hi) of a schedule queue."""
    qoffs, phys = [], []
    for q in range(lo, hi):
        u = view.unit(q)
        if u is None:
            continue
        qoffs.append(q)
        phys.append(u[0])
    return np.asarray(qoffs, dtype=np.int64), np.asarray(phys, dtype=np.int64)


def _record_fields(run: RecordRun, i: int) -> tuple[str, dict[str, str]]:
    b = run.batch
    tp, tl, pp, pl = int(b.topic_pos[i]), int(b.topic_len[i]), int(b.props_pos[i]), int(b.props_len[i])
    topic = bytes(run.buf[tp:tp + tl]).decode("utf-8", "replace")
    props = parse_properties(bytes(run.buf[pp:pp + pl]).decode("utf-8", "replace")) if pl > 0 else {}
    return topic, props


def _mix(born_ts: np.ndarray, body_crc: np.ndarray) -> np.ndarray:
    """A 64-bit pre-filter of (born timestamp, body CRC): only records that match it are decoded further."""
    return (born_ts.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ body_crc.astype(np.uint64)


def _delivered(store, window: dict[int, tuple[np.ndarray, np.ndarray]]) -> dict[int, np.ndarray]:
    """For each level's window of units: True where the broker has passed the unit (its copy is in the commit log
    after it, or the broker skips it)."""
    cl = store.commitlog
    done = {lvl: np.zeros(len(q), dtype=bool) for lvl, (q, _) in window.items()}
    # 1. the units' own records: their copy's key
    pending: dict[tuple, list[tuple[int, int, int]]] = {}   # key -> [(unit's commit-log offset, level, index)]
    mixes = []
    for lvl, (_, phys) in window.items():
        if not len(phys):
            continue
        offs = phys.tolist()
        index_of = {o: i for i, o in enumerate(offs)}
        for item in lookup_runs(cl, offs, check_crc=False):
            if isinstance(item, tuple):
                done[lvl][item[0]] = True   # no record there: lookMessageByOffset gives null, the broker goes on
                continue
            b = item.batch
            base = index_of[item.seg_start + int(b.pos[0])]
            for k in range(len(b)):
                topic, props = _record_fields(item, k)
                real, qid = props.get(PROP_REAL_TOPIC), props.get(PROP_REAL_QID)
                if real == TRANS_HALF_TOPIC or real is None or qid is None or not qid.strip().lstrip("-").isdigit():
                    done[lvl][base + k] = True  # discarded (or unputtable): the broker moves past it
                    continue
                key = (real, int(qid), props.get(PROP_UNIQ_KEY), int(b.born_ts[k]), int(b.body_crc[k]))
                pending.setdefault(key, []).append((item.seg_start + int(b.pos[k]), lvl, base + k))
            mixes.append(_mix(b.born_ts, b.body_crc))
    if not pending:
        return done
    wanted = np.unique(np.concatenate(mixes))
    first = min(p for units in pending.values() for p, _, _ in units)
    # 2. one pass over the commit log from the first unit's record: the copies
    for item in scan_runs(cl, first, check_crc=False, check_position=False):
        if not isinstance(item, RecordRun):
            continue
        b = item.batch
        hit = np.flatnonzero(np.isin(_mix(b.born_ts, b.body_crc), wanted))
        for k in hit.tolist():
            topic, props = _record_fields(item, k)
            if topic == SCHEDULE_TOPIC:
                continue
            key = (topic, int(b.queue_id[k]), props.get(PROP_UNIQ_KEY), int(b.born_ts[k]), int(b.body_crc[k]))
            units = pending.get(key)
            if not units:
                continue
            at = item.seg_start + int(b.pos[k])
            for j, (phy, lvl, idx) in enumerate(units):
                if phy < at:   # the copy of the earliest unit with this key stored before it
                    done[lvl][idx] = True
                    del units[j]
                    break
    return done


# ------------------------------------------------------------------------------------------- subscription groups


@dataclass
class GroupRebuild:
    groups: dict[str, dict]              # in the order the broker's table would have them put
    forbidden: dict
    from_file: list[str]                 # groups whose settings were read from the file or its .bak
    from_store: dict[str, list[str]]     # group -> where the store names it


def rebuild_subscription_groups(layout: StoreLayout) -> GroupRebuild:
    """The groups the store knows, each with SubscriptionGroupConfig's defaults unless the file or its .bak still
    holds its settings: the broker's own groups (SubscriptionGroupManager.init puts them in its table before it
    loads the file, and writes them at its next save; written here so the file is what the broker would save),
    the groups of consumerOffset.json (and its .bak), of %RETRY%/%DLQ% topics (consume-queue directories and
    topics.json with its .bak), and the readable entries of subscriptionGroup.json or its .bak."""
    known: dict[str, dict] = {}
    forbidden: dict = {}
    for which in (SUBSCRIPTION_GROUP + BAK_SUFFIX, SUBSCRIPTION_GROUP):  # the main file's entries win
        raw = _readable(layout, which, decode_subscription_groups)
        if raw is None:
            continue
        for name, cfg in decode_subscription_groups(raw).items():
            known[name] = cfg
        fb = raw.get("forbiddenTable")
        if isinstance(fb, dict):
            forbidden.update(fb)
    sources: dict[str, list[str]] = {}

    def note(group: str, where: str) -> None:
        if group and group not in known:
            lst = sources.setdefault(group, [])
            if where not in lst:
                lst.append(where)

    for which in (CONSUMER_OFFSET, CONSUMER_OFFSET + BAK_SUFFIX):
        raw = _readable(layout, which, consumer_offset_groups)
        if raw is not None:
            for g in sorted(consumer_offset_groups(raw)):
                note(g, f"config/{which}")
    topics: dict[str, str] = {}
    for t, _ in layout.list_queues().queues:
        topics.setdefault(t, "consume queues")
    for which in (TOPICS, TOPICS + BAK_SUFFIX):
        raw = _readable(layout, which, lambda v: v)
        table = raw.get("topicConfigTable") if isinstance(raw, dict) else None
        for t in (table or {}):
            topics.setdefault(str(t), f"config/{which}")
    for t in sorted(topics):
        g = _group_of_topic(t, topics)
        if g is not None:
            note(g, f"{t} ({topics[t]})")
    groups: dict[str, dict] = {}
    for g in SYSTEM_GROUPS:
        groups[g] = known.get(g) or default_subscription_group(g)
    for g in sorted(known):
        groups.setdefault(g, known[g])
    for g in sorted(sources):
        groups.setdefault(g, default_subscription_group(g))
    return GroupRebuild(groups, forbidden, sorted(known), {g: sources[g] for g in sorted(sources)
                                                           if g not in SYSTEM_GROUPS})


def _group_of_topic(topic: str, topics) -> str | None:
    for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
        if topic.startswith(prefix):
            rest = topic[len(prefix):]
            if prefix == RETRY_GROUP_TOPIC_PREFIX:
                if POP_RETRY_SEPARATOR_V2 in rest:   # pop retry v2: %RETRY%<group>+<topic> ('+' is no name char)
                    return rest.split(POP_RETRY_SEPARATOR_V2, 1)[0] or None
                for t in topics:                     # pop retry v1: %RETRY%<group>_<topic> of a topic the store has
                    group_topic = t.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))
                    if not group_topic and rest.endswith(POP_RETRY_SEPARATOR_V1 + t) and len(rest) > len(t) + 1:
                        return rest[:-len(t) - 1]
            return rest or None
    return None


def _readable(layout: StoreLayout, which: str, decode):
    """The fastjson value of config/<which> when it decodes (as ConfigManager would read it), else None."""
    base = which[:-len(BAK_SUFFIX)] if which.endswith(BAK_SUFFIX) else which
    st = config_file_state(layout, base, decode)
    if (st.bak_problem if which.endswith(BAK_SUFFIX) else st.main_problem) is not None:
        return None
    with open(layout.config_file(which), "rb") as f:
        return fastjson.loads(f.read())
