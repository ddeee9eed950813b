"""`rmqtool repair <what>`: the repairs `rmqtool doctor` names that `recover` does not make (docs/doctor.md).

    repair_config          a config/*.json file from its .bak, from what the store holds (topics.json,
                           delayOffset.json, subscriptionGroup.json: engine.ops.configrebuild), or removed with
                           its .bak (the empty table the broker would start with anyway)
    repair_consume_queue   the trailing consume-queue files that hold no unit, moved out
    repair_timer           the timer store rebuilt from its timer log (engine.timer.rebuild)

Every repair is an operation as recover and clean are (engine.ops.operation): planned read-only, applied under
the store lock (re-planned when the store changed), `dry_run` returns the same plan and changes nothing;
everything removed or replaced is kept first in the store's quarantine folder with a manifest.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.config.jsonfiles import (BAK_SUFFIX, CONFIG_FILES, DELAY_OFFSET, SUBSCRIPTION_GROUP, TOPICS,
                                            config_file_state, data_version, decode_topics, encode_delay_offsets,
                                            encode_subscription_groups, encode_topics, topic_config_entry)
from engine.broker.consumequeue.queue import trailing_empty_files
from engine.broker.layout import TIERED_METADATA_FILE, StoreLayout, validate_queue_id
from engine.errors import InvalidArgumentError
from engine.fsutil import atomic_write, fsync_dir
from engine.java import fastjson
from engine.ops import operation
from engine.ops.configrebuild import rebuild_delay_offsets, rebuild_subscription_groups
from engine.ops.footprint.quarantine import Quarantine
from engine.timer.rebuild import TimerRebuild, apply_timer_rebuild, plan_timer_rebuild

FROM_BAK, FROM_STORE_SOURCE, EMPTY = "bak", "store", "empty"
#: Config files that can be rebuilt from what the store holds (`rmqtool repair config NAME --from-store`).
FROM_STORE = {TOPICS, DELAY_OFFSET, SUBSCRIPTION_GROUP}
#: TopicConfig's defaults for a topic rebuilt from its queue directories (PermName.PERM_READ | PERM_WRITE).
DEFAULT_PERM = 6


@dataclass
class RepairPlan:
    """What one repair does; `actions` in the order they are carried out."""
    what: str
    store: str
    actions: list[str] = field(default_factory=list)
    fingerprint: tuple = ()
    detail: dict = field(default_factory=dict)
    quarantine_dir: str | None = None
    # what apply needs (not shown)
    files_out: list[str] = field(default_factory=list)         # store-relative paths moved to the quarantine
    write: dict[str, bytes] = field(default_factory=dict)      # store-relative path -> new content
    timer: TimerRebuild | None = None
    not_recovered: list[str] = field(default_factory=list)     # what the repair cannot give back (said in the plan)

    @property
    def nothing_to_do(self) -> bool:
        return not self.actions

    def as_dict(self) -> dict:
        return {"repair": self.what, "store": self.store, "nothingToDo": self.nothing_to_do,
                "actions": self.actions, **self.detail, "notRecovered": self.not_recovered,
                "quarantineDir": self.quarantine_dir}


# ------------------------------------------------------------------------------------------- config


def plan_config(cfg: BrokerConfig, name: str, source: str) -> RepairPlan:
    # The tiered store's metadata is a ConfigManager file too (DefaultMetadataStore): main, else .bak (flat-store §6).
    names = [n for n, *_ in CONFIG_FILES] + [TIERED_METADATA_FILE]
    if name not in names:
        raise InvalidArgumentError(f"{name!r} is not a config file the broker loads at start-up; one of: "
                                   + ", ".join(names))
    if source == FROM_STORE_SOURCE and name not in FROM_STORE:
        raise InvalidArgumentError(f"{name} cannot be rebuilt from the store (only {', '.join(sorted(FROM_STORE))} "
                                   "can); use --from-bak or --empty")
    layout = StoreLayout.of(cfg)
    layout.require_store(allow_markers=True)
    decode = next((d for n, d, *_ in CONFIG_FILES if n == name), None) or (lambda v: v)
    st = config_file_state(layout, name, decode)
    rel, bak_rel = f"config/{name}", f"config/{name}{BAK_SUFFIX}"
    plan = RepairPlan(f"config {name}", str(cfg.root), fingerprint=operation.fingerprint(cfg),
                      detail={"file": rel, "source": source, "fileProblem": st.main_problem,
                              "bakProblem": st.bak_problem})
    main_exists = os.path.lexists(layout.config_file(name))
    if source == FROM_BAK:
        if st.main_problem is None:
            return plan  # the file loads: nothing to restore
        if st.bak_problem is not None:
            raise InvalidArgumentError(f"{bak_rel} {st.bak_problem}: there is nothing to restore {rel} from")
        if main_exists:
            plan.files_out.append(rel)
            plan.actions.append(f"move {rel} ({st.main_problem}) to the quarantine")
        with open(layout.config_file(name + BAK_SUFFIX), "rb") as f:
            plan.write[rel] = f.read()
        plan.actions.append(f"write {rel} as a copy of {bak_rel} (the save before the last)")
    elif source == FROM_STORE_SOURCE:
        if main_exists:
            plan.files_out.append(rel)
            plan.actions.append(f"move {rel} ({st.main_problem or 'readable'}) to the quarantine")
        _FROM_STORE_PLANS[name](cfg, layout, st, plan, rel, bak_rel)
    elif source == EMPTY:
        for r, problem in ((rel, st.main_problem), (bak_rel, st.bak_problem)):
            if os.path.lexists(layout.root / r):
                plan.files_out.append(r)
                plan.actions.append(f"move {r} ({problem or 'readable'}) to the quarantine: the broker starts with "
                                    "an empty table")
    else:
        raise InvalidArgumentError(f"unknown source {source!r}")
    return plan


def _plan_topics(cfg, layout: StoreLayout, st, plan: RepairPlan, rel: str, bak_rel: str) -> None:
    table = _topics_from_store(layout, st)
    plan.write[rel] = _encode_topics(table).encode()
    plan.detail["topics"] = len(table)
    plan.actions.append(f"write {rel} with {len(table)} topic(s): those readable in {rel} or {bak_rel}, and "
                        "one per consume-queue directory (queue counts from its highest queue id)")


def _plan_delay_offsets(cfg, layout: StoreLayout, st, plan: RepairPlan, rel: str, bak_rel: str) -> None:
    """ScheduleMessageService's offsetTable from SCHEDULE_TOPIC_XXXX and the copies in the commit log
    (engine.ops.configrebuild): the next unit of each level whose copy is not stored."""
    rb = rebuild_delay_offsets(cfg)
    plan.write[rel] = encode_delay_offsets(rb.table, _now_ms()).encode()
    plan.detail["offsetTable"] = {str(k): v for k, v in rb.table.items()}
    plan.detail["levels"] = [d.as_dict() for d in rb.levels]
    levels = "; ".join(f"level {d.level}: {d.offset} ({d.offset - d.min_offset} delivered, "
                       f"{d.max_offset - d.offset} pending)" for d in rb.levels)
    plan.actions.append(f"write {rel} with {len(rb.levels)} delay level(s), each at the first unit of "
                        f"SCHEDULE_TOPIC_XXXX whose message is not yet in its real topic"
                        + (f": {levels}" if levels else " (no level's queue holds a unit)"))
    if rb.ignored_queues:
        plan.not_recovered.append("SCHEDULE_TOPIC_XXXX queue(s) " + ", ".join(map(str, rb.ignored_queues))
                                  + " lie past the delay levels of messageDelayLevel: the broker never delivers "
                                    "them, and no offset is written for them")


def _plan_subscription_groups(cfg, layout: StoreLayout, st, plan: RepairPlan, rel: str, bak_rel: str) -> None:
    rb = rebuild_subscription_groups(layout)
    plan.write[rel] = encode_subscription_groups(rb.groups, rb.forbidden, _now_ms()).encode()
    plan.detail["groups"] = list(rb.groups)
    plan.detail["groupsFromStore"] = rb.from_store
    plan.detail["groupsFromFile"] = rb.from_file
    plan.actions.append(f"write {rel} with {len(rb.groups)} group(s): the broker's own, "
                        f"{len(rb.from_file)} with their settings read from {rel} or {bak_rel}, and "
                        f"{len(rb.from_store)} the store names (consumer offsets, %RETRY%/%DLQ% topics) with "
                        "SubscriptionGroupConfig's defaults" + (": " + ", ".join(rb.from_store) if rb.from_store else ""))
    plan.not_recovered.append(
        "the settings an admin gave a group (consumeMessageOrderly, groupRetryPolicy, retryMaxTimes, "
        "retryQueueNums, consumeEnable, consumeBroadcastEnable, brokerId, attributes, forbiddenTable) are not in "
        "the store: groups rebuilt here get the defaults; set them again with mqadmin updateSubGroup")
    plan.not_recovered.append(
        "a group the store does not name (one that never committed an offset and has no retry or DLQ topic) is "
        "not written: with autoCreateSubscriptionGroup=false the broker refuses its consumers until it is "
        "created again (mqadmin updateSubGroup)")


def _topics_from_store(layout: StoreLayout, st) -> dict[str, dict]:
    table: dict[str, dict] = {}
    for which in (TOPICS + BAK_SUFFIX, TOPICS):  # the main file's entries win over the .bak's
        s = config_file_state(layout, which if which == TOPICS else TOPICS, decode_topics)
        if which == TOPICS and s.main_problem is None or which != TOPICS and s.bak_problem is None:
            path = layout.config_file(which)
            with open(path, "rb") as f:
                raw = fastjson.loads(f.read())
            for k, v in (raw.get("topicConfigTable") or {}).items():
                if isinstance(v, dict):
                    table[str(k)] = v
    counts: dict[str, int] = {}
    for topic, qid in layout.list_queues().queues:
        counts[topic] = max(counts.get(topic, 0), qid + 1)
    for topic, n in counts.items():
        if topic not in table:
            table[topic] = topic_config_entry(topic, n, DEFAULT_PERM)
    return dict(sorted(table.items()))


def _encode_topics(table: dict) -> str:
    return encode_topics(table, data_version(_now_ms()))




def _now_ms() -> int:
    return int(time.time() * 1000)


#: How each config file the store can rebuild is planned (FROM_STORE's names).
_FROM_STORE_PLANS = {TOPICS: _plan_topics, DELAY_OFFSET: _plan_delay_offsets,
                     SUBSCRIPTION_GROUP: _plan_subscription_groups}


# ------------------------------------------------------------------------------------------- consume queue


def plan_consume_queue(cfg: BrokerConfig, topic: str | None, queue_id: int | None,
                       rebuild: bool = False) -> RepairPlan:
    layout = StoreLayout.of(cfg)
    layout.require_store(allow_markers=True)
    if queue_id is not None:
        validate_queue_id(queue_id)
        if topic is None:
            raise InvalidArgumentError("--queue-id needs --topic")
    if rebuild and queue_id is None:
        raise InvalidArgumentError("--rebuild needs --topic and --queue-id (one queue)")
    if rebuild:
        return _plan_queue_rebuild(cfg, layout, topic, queue_id)
    queues = [(t, q) for t, q in layout.list_queues().queues
              if (topic is None or t == topic) and (queue_id is None or q == queue_id)]
    if topic is not None and not queues:
        raise InvalidArgumentError(f"no consume queue {topic}" + (f"/{queue_id}" if queue_id is not None else "")
                                   + " in the store")
    plan = RepairPlan("consume-queue", str(cfg.root), fingerprint=operation.fingerprint(cfg),
                      detail={"queuesChecked": len(queues)})
    for t, q in queues:
        for p in trailing_empty_files(layout.cq_dir(t, q)):
            rel = str(p.relative_to(layout.root))
            plan.files_out.append(rel)
            plan.actions.append(f"move {rel} (no unit: a file the queue rolled into and never wrote) to the "
                                "quarantine")
    plan.detail["filesMoved"] = list(plan.files_out)
    return plan


def _plan_queue_rebuild(cfg: BrokerConfig, layout: StoreLayout, topic: str, queue_id: int) -> RepairPlan:
    """Every file of one queue moved to the quarantine; repair_consume_queue then dispatches the queue again from
    the commit log (a full-scan recovery: each record's own queue offset), the fix of a queue file cut in its
    middle, which neither the broker nor a padding can give back."""
    d = layout.cq_dir(topic, queue_id)
    if not d.is_dir():
        raise InvalidArgumentError(f"no consume queue {topic}/{queue_id} in the store")
    plan = RepairPlan("consume-queue", str(cfg.root), fingerprint=operation.fingerprint(cfg),
                      detail={"queuesChecked": 1, "rebuild": f"{topic}/{queue_id}"})
    for p in sorted(d.iterdir()):
        if p.is_file() and not p.is_symlink():
            rel = str(p.relative_to(layout.root))
            plan.files_out.append(rel)
            plan.actions.append(f"move {rel} to the quarantine")
    plan.actions.append(f"dispatch {topic}/{queue_id} again from the commit log, each unit at its record's queue "
                        "offset (as `rmqtool recover --full-scan`)")
    plan.detail["filesMoved"] = list(plan.files_out)
    return plan


# ------------------------------------------------------------------------------------------- timer


def plan_timer(cfg: BrokerConfig) -> RepairPlan:
    StoreLayout.of(cfg).require_store(allow_markers=True)
    if not cfg.timerWheelEnable:
        raise InvalidArgumentError("timerWheelEnable is false in broker.conf: the broker does not load the timer "
                                   "store, so there is nothing to repair for it")
    tr = plan_timer_rebuild(cfg)
    plan = RepairPlan("timer", str(cfg.root), fingerprint=operation.fingerprint(cfg), timer=tr,
                      detail={"timer": tr.as_dict()})
    plan.actions = tr.actions()
    return plan


# ------------------------------------------------------------------------------------------- apply


def _execute(cfg: BrokerConfig, plan: RepairPlan) -> None:
    q = Quarantine(cfg.root, tool=f"rmqtool repair {plan.what}")
    q.open()
    plan.quarantine_dir = str(q.dir)
    root = cfg.root
    for rel in plan.files_out:
        q.keep_file(root / rel, f"rmqtool repair {plan.what}", "the repaired file" if rel in plan.write else "nothing")
    for rel, data in plan.write.items():
        (root / rel).parent.mkdir(exist_ok=True)  # a store rmqtool put wrote may have no config/ yet
        atomic_write(root / rel, data)
        fsync_dir((root / rel).parent)
    if plan.timer is not None:
        apply_timer_rebuild(cfg, plan.timer, q)
    q.write_manifest(True)


def _run(cfg: BrokerConfig, make_plan, dry_run: bool, writer: str) -> RepairPlan:
    return operation.run(cfg, make_plan, lambda p: _execute(cfg, p), dry_run, writer=writer)


def repair_config(cfg: BrokerConfig, name: str, source: str, dry_run: bool = False) -> RepairPlan:
    return _run(cfg, lambda: plan_config(cfg, name, source), dry_run, f"repair config {name}")


def repair_consume_queue(cfg: BrokerConfig, topic: str | None = None, queue_id: int | None = None,
                         dry_run: bool = False, rebuild: bool = False) -> RepairPlan:
    """rebuild: every file of the queue to the quarantine, then a full-scan recovery dispatches it again (stopped
    between the two, the queue has no file: doctor's cq-no-files, whose fix is that recovery)."""
    plan = _run(cfg, lambda: plan_consume_queue(cfg, topic, queue_id, rebuild), dry_run, "repair consume-queue")
    if rebuild and not dry_run:
        from engine.ops.recovery import recover

        rp = recover(cfg, full_scan=True)
        plan.detail["unitsAdded"] = sum(q.units_added for q in rp.queues
                                        if (q.topic, q.queue_id) == (topic, queue_id))
    return plan


def repair_timer(cfg: BrokerConfig, dry_run: bool = False) -> RepairPlan:
    return _run(cfg, lambda: plan_timer(cfg), dry_run, "repair timer")
