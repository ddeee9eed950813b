"""rmqtool repair consume-queue: move out the last consume-queue files that hold no unit (a file the queue rolled into
and never wrote, RocketMQ #9728, #10108), so the queue ends at its last written file; or, with --rebuild, one
queue's files moved out and dispatched again from the commit log."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from rmqtool.cli import handles_errors
from rmqtool.commands.repair import DryRunOpt, show_plan
from rmqtool.options import GEOMETRY, STORE, JsonOpt, QuietOpt, StoreOptions, store_options


@handles_errors
@store_options(STORE, GEOMETRY)
def consume_queue_cmd(
    opts: StoreOptions,
    topic: Annotated[Optional[str], typer.Option("--topic", "-t", help="Only this topic's queues (default: "
                                                 "every queue).")] = None,
    queue_id: Annotated[Optional[int], typer.Option("--queue-id", "-q", help="Only this queue (needs --topic).")]
    = None,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Move every file of the queue (--topic, --queue-id) "
                                          "to the quarantine and dispatch it again from the commit log: the fix of "
                                          "a queue file cut in its middle.")] = False,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Move out the last consume-queue files that hold no unit (a file the queue rolled into and never wrote,
    RocketMQ #9728, #10108), so the queue ends at its last written file; or rebuild one queue from the log."""
    from engine.commands.repair import consume_queue as repair_consume_queue

    cfg = opts.settle()
    show_plan(repair_consume_queue(cfg, topic, queue_id, dry_run, rebuild), dry_run, json_out)
