"""rmqtool tiered dispatch: tier out a stopped broker's store as MessageStoreDispatcherImpl does; LOCAL is only read.
Exits 3 when a queue could not be tiered to its end."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.commands.tiered import note, topic_not_path
from rmqtool.options import MASTER_VALUES, TIER, JsonOpt, QuietOpt, StoreOptions, store_options


@handles_errors
@store_options(TIER)
def dispatch(opts: StoreOptions,
             topic: Annotated[Optional[list[str]], typer.Option("--topic", "-t", help="Only these topics (repeat).",
                                                                callback=topic_not_path)] = None,
             commitlog_max_size: Annotated[Optional[int], typer.Option(
                 "--commitlog-max-size", help="tieredStoreCommitLogMaxSize (default 1 GiB).")] = None,
             consume_queue_max_size: Annotated[Optional[int], typer.Option(
                 "--consume-queue-max-size", help="tieredStoreConsumeQueueMaxSize (default 100 MiB).")] = None,
             master: Annotated[str, typer.Option("--master", help="inline, local[K] or a Spark master URL.",
                                                  autocompletion=MASTER_VALUES)] = "local[*]",
             dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; write nothing.")] = False,
             json_out: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Tier out a stopped broker's store as MessageStoreDispatcherImpl does; LOCAL is only read. Exits 3 when a queue could not be tiered to its end."""  # noqa: E501
    from engine.commands.tiered import dispatch as run_dispatch, dispatch_exit_code, dispatch_request

    req = dispatch_request(opts.store, opts.broker_conf, opts.tiered_store_path, opts.metadata, opts.cluster_name,
                           opts.broker_name, topic,
                           commitlog_max_size, consume_queue_max_size, master, dry_run)
    with render.progress(None, "dispatch") as bar:
        task = bar.add_task("tier out", total=None)
        res = run_dispatch(req, lambda phase, done, total: bar.update(task, completed=done, total=total))
    for w in res.warnings:
        render.problem(f"warning: {w}", getattr(w, "kind", None), **getattr(w, "fields", {}))  # a Note keeps its kind
    if json_out:
        render.emit_json(res.as_dict())
    else:
        render.table(f"{'plan' if dry_run else 'tiered out'}: {res.cluster}/{res.broker} -> {res.tiered_store_path}",
                     ["topic", "queueId", "fromOffset", "toOffset", "messages", "bytes", "new CL/CQ segments", "note"],
                     [[q["topic"], q["queueId"], q["fromOffset"], q["toOffset"], q["messages"], q["bytes"],
                       f"{q['newSegments']['COMMIT_LOG']}/{q['newSegments']['CONSUME_QUEUE']}",
                       q.get("skipped") or ("stalled" if "stalledAt" in q else "")] for q in res.queues])
        note(f"{res.messages} message(s), {res.bytes} bytes in {res.seconds:.1f} s ({res.master})"
                    + ("; metadata written" if res.metadata_written else ""))
    for p in res.problems:
        render.problem(f"problem: {p}")
    if dispatch_exit_code(res):
        raise typer.Exit(dispatch_exit_code(res))
