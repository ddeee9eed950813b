"""rmqtool delays: the delay-level queues (SCHEDULE_TOPIC_XXXX) and their delivery progress."""
from __future__ import annotations

import typer

from engine.views.times import local_time
from rmqtool import render, tables
from rmqtool.cli import handles_errors
from rmqtool.options import JsonOpt, QuietOpt, StoreOptions, store_options

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
@store_options()
def delays(
    opts: StoreOptions,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """The delay-level queues (SCHEDULE_TOPIC_XXXX/<level-1>): delay offset, pending messages, next delivery.

    Delay levels come from broker.conf's messageDelayLevel (--broker-conf), else RocketMQ's default
    "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h". The offsets come from config/delayOffset.json
    (or its .bak), clamped into the queue as the broker does at load. nextDelivery is the delivery time stored
    in the next pending unit (its store time + the level's delay). Exits 3 when a pending message cannot be read.
    """
    from engine.commands.delays import delays as delay_status

    rep = delay_status(opts.settle(), opts.broker_conf)
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
