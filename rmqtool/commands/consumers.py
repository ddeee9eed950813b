"""rmqtool consumers: consumer progress (mqadmin consumerProgress)."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from engine.views.times import local_time
from rmqtool import render, tables
from rmqtool.cli import handles_errors
from rmqtool.options import JsonOpt, QuietOpt, StoreOptions, store_options

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


@handles_errors
@store_options()
def consumers(
    opts: StoreOptions,
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
    from engine.commands.consumers import consumers as consumer_progress

    rep = consumer_progress(opts.settle(), group)
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
