"""rmqtool consumers and delays: consumer progress (mqadmin consumerProgress) and the delay-level queues."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from engine.views.times import local_time
from rmqtool import render, tables
from rmqtool.cli import handles_errors
from rmqtool.options import BrokerConfOpt, JsonOpt, QuietOpt, StoreOpt, build_config

PROGRESS_COLUMNS = [
    tables.Column("group", "group", tables.TEXT, min_width=12),
    tables.Column("topic", "topic", tables.TEXT, min_width=12),
    tables.Column("queueId", "queueId"),
    tables.Column("brokerOffset", "brokerOffset"),
    tables.Column("consumerOffset", "consumerOffset"),
    tables.Column("diff", "diff"),
    tables.Column("lastTime", "lastTime", tables.FIXED, drop=2),
    tables.Column("minOffset", "minOffset", drop=4),
    tables.Column("note", "note", tables.TEXT, drop=3, min_width=12),
]

DELAY_COLUMNS = [
    tables.Column("delayLevel", "level"),
    tables.Column("delay", "delay", tables.FIXED),
    tables.Column("queueId", "queueId", drop=4),
    tables.Column("minOffset", "minOffset", drop=3),
    tables.Column("maxOffset", "maxOffset"),
    tables.Column("delayOffset", "delayOffset"),
    tables.Column("pending", "pending"),
    tables.Column("nextDelivery", "nextDelivery", tables.FIXED),
    tables.Column("lastDelivery", "lastDelivery", tables.FIXED, drop=2),
]


@handles_errors
def consumers(
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    group: Annotated[Optional[str], typer.Option("--group", "-g", help="Only this consumer group.")] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Consumer progress per group, topic and queue: committed offset, max offset and lag (mqadmin
    consumerProgress), from config/consumerOffset.json and the consume queues.

    diff = brokerOffset (the queue's max offset) - consumerOffset (the committed offset, 0 when none); lastTime
    is the store time of the last message consumed. A missing, empty or damaged consumerOffset.json is read
    from consumerOffset.json.bak, as the broker does, and said so on stderr. The queues of a topic are
    0..readQueueNums-1 from config/topics.json when it lists the topic.
    """
    from engine.broker.store import MessageStore
    from engine.broker.config.consumers import consumer_progress

    cfg = build_config(store, broker_conf)
    with MessageStore(cfg) as st:
        rep = consumer_progress(st, group)
    for n in rep.notes:
        tables.note(n)
    if json_out:
        render.emit_json(rep.as_dict())
        _exit_if_unreadable(rep)
        return
    rows = [dict(q.as_dict(), group=g.group, lastTime=local_time(q.lastTimestamp))
            for g in rep.groups for q in g.queues]
    shown = tables.table(rows, PROGRESS_COLUMNS, empty="(no committed offsets)")
    if not shown.shows("note"):
        for r in rows:
            if r["note"]:
                tables.note(f"{r['group']} {r['topic']}/{r['queueId']}: {r['note']}")
    for g in rep.groups:
        print(f"{g.group}: diff total {g.diff_total} over {len(g.queues)} queue(s)")
    _exit_if_unreadable(rep)


def _exit_if_unreadable(rep) -> None:
    bad = [f"{g.group} {q.topic}/{q.queueId}" for g in rep.groups for q in g.unreadable]
    if bad:
        render.problem(f"note: {len(bad)} consume queue(s) could not be read: {', '.join(bad[:10])}")
        raise typer.Exit(3)


@handles_errors
def delays(
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """The delay-level queues (SCHEDULE_TOPIC_XXXX/<level-1>): delay offset, pending messages, next delivery.

    Delay levels come from broker.conf's messageDelayLevel (--broker-conf), else RocketMQ's default
    "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h". The offsets come from config/delayOffset.json
    (or its .bak), clamped into the queue as the broker does at load. nextDelivery is the delivery time stored
    in the next pending unit (its store time + the level's delay). Exits 3 when a pending message cannot be read.
    """
    from engine.broker.store import MessageStore
    from engine.broker.config.consumers import delay_status

    cfg = build_config(store, broker_conf)
    with MessageStore(cfg) as st:
        rep = delay_status(st, broker_conf)
    for n in rep.notes:
        tables.note(n)
    problems = [f"delay level {lv.delayLevel}: {p}" for lv in rep.levels for p in lv.problems]
    for lv in rep.levels:
        for n in lv.notes:
            tables.note(f"delay level {lv.delayLevel}: {n}")
    if json_out:
        render.emit_json(rep.as_dict())
    else:
        rows = [dict(lv.as_dict(), nextDelivery=local_time(lv.nextDeliverTimestamp),
                     lastDelivery=local_time(lv.lastDeliverTimestamp)) for lv in rep.levels]
        tables.table(rows, DELAY_COLUMNS, empty="(no delay-level queue and no delay offset)")
    for p in problems:
        render.problem(f"note: {p}")
    if problems:
        raise typer.Exit(3)
