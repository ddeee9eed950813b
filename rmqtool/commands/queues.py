"""rmqtool queues: consume-queue status (mqadmin topicStatus)."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from engine.views.times import local_time
from rmqtool import render, tables
from rmqtool.cli import handles_errors
from rmqtool.options import JsonOpt, QuietOpt, StoreOptions, store_options

QUEUE_COLUMNS = [
    tables.Column("topic", "topic", tables.TEXT, min_width=14),
    tables.Column("queueId", "queueId"),
    tables.Column("minOffset", "minOffset"),
    tables.Column("maxOffset", "maxOffset"),
    tables.Column("messages", "messages", drop=4),
    tables.Column("bytes", "bytes", drop=3),
    tables.Column("firstStoreTime", "firstStoreTime", tables.FIXED, drop=5),
    tables.Column("lastStoreTime", "lastStoreTime", tables.FIXED, drop=2),
]


@handles_errors
@store_options()
def queues(
    opts: StoreOptions,
    topic: Annotated[Optional[str], typer.Option("--topic", "-t", help="Only this topic's queues.")] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Every consume queue (or one topic's): min and max queue offset, messages, bytes, first and last store time.

    The min and max offsets are the broker's (getMinOffsetInQueue, getMaxOffsetInQueue): units whose records
    were deleted with the commit log's old segments do not count (correctMinOffset), nor do units past the end a
    broker starting on the store gives its commit log (logical truncation: it cuts them at every start; a note
    says so and --json counts them as truncatedUnits). Reads every unit between min and max (20 bytes per
    message) to add up the bytes. Exits 3 when the first or last message of a queue cannot be read.
    """
    from engine.commands.queues import queues as queue_status

    cfg = opts.settle()
    with render.progress(None, "queues") as bar:
        task = bar.add_task("queues", total=None)
        rep = queue_status(cfg, topic, progress=lambda done, total: bar.update(task, completed=done, total=total))
    for p in rep.skipped:
        tables.note(f"{p.path}: {p.reason}; skipped")
    if rep.truncation:
        tables.note(rep.truncation["note"])
    if json_out:
        render.emit_json(rep.as_dict())
    else:
        rows = [dict(q.as_dict(), firstStoreTime=local_time(q.firstStoreTimestamp),
                     lastStoreTime=local_time(q.lastStoreTimestamp)) for q in rep.queues]
        tables.table(rows, QUEUE_COLUMNS, empty="(no consume queues)")
    problems = [f"{q.topic}/{q.queueId} {p}" for q in rep.queues for p in q.problems]
    for p in problems:
        render.problem(f"note: {p}")
    if problems:
        raise typer.Exit(3)
