"""rmqtool repair ...: the repairs `rmqtool doctor` names beside `recover` and `clean` (a config file, the empty
tail of a consume queue, the timer store). Each takes the store lock, offers --dry-run (the same plan, nothing
changed) and keeps what it removes or replaces in the store's quarantine folder with a manifest.
"""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.options import (BrokerConfOpt, CommitLogSizeOpt, CqSizeOpt, HashSlotsOpt, JsonOpt, MaxIndexOpt, QuietOpt,
                             StoreOpt, build_config)

app = typer.Typer(name="repair", no_args_is_help=True, rich_markup_mode=None,
                  help="Repairs `rmqtool doctor` names that `recover` does not make: a config file, the empty tail of "
                       "a consume queue, the timer store. Locked, with --dry-run and a quarantine.")

DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the plan; change nothing.")]


def _render(plan, dry_run: bool, json_out: bool) -> None:
    if json_out:
        render.emit_plan(plan, dry_run)
        return
    if plan.nothing_to_do:
        render.line(f"repair {plan.what}: nothing to do")
        return
    render.line(f"repair {plan.what}" + (" (dry run, nothing changed): would" if dry_run else ": done"))
    import textwrap

    for a in plan.actions:
        for ln in textwrap.wrap(a, 80, initial_indent="  - ", subsequent_indent="    ", break_on_hyphens=False):
            render.line(ln)
    if plan.not_recovered:
        render.line("not recovered:")
        for a in plan.not_recovered:
            for ln in textwrap.wrap(a, 80, initial_indent="  - ", subsequent_indent="    ", break_on_hyphens=False):
                render.line(ln)
    if plan.quarantine_dir:  # a long path goes on a line of its own (tables fit 80 columns; a path is not cut)
        kept = f"kept in {plan.quarantine_dir}"
        render.line(kept if len(kept) <= 80 else f"kept in\n  {plan.quarantine_dir}")


@app.command("config")
@handles_errors
def config_cmd(
    name: Annotated[str, typer.Argument(help="The config file, as named under config/ (topics.json, "
                                        "consumerOffset.json, subscriptionGroup.json, delayOffset.json, ..., and the tiered store's "
                                        "tieredStoreMetadata.json).")],
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    from_bak: Annotated[bool, typer.Option("--from-bak", help="Write the file as a copy of its readable .bak "
                                           "(what the broker would load).")] = False,
    from_store: Annotated[bool, typer.Option("--from-store", help="Rebuild it from the store: topics.json (the "
                                             "topics readable in it or its .bak, plus one per consume-queue "
                                             "directory), delayOffset.json (each delay level at its first "
                                             "message not yet delivered), subscriptionGroup.json (the groups the "
                                             "store names, with default settings).")] = False,
    empty: Annotated[bool, typer.Option("--empty", help="Move the file and its .bak to the quarantine: the broker "
                                        "starts with an empty table (what it does silently with a torn file and "
                                        "an empty .bak).")] = False,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    hash_slots: HashSlotsOpt = None,
    max_index: MaxIndexOpt = None,
    commitlog_file_size: CommitLogSizeOpt = None,
    cq_file_size: CqSizeOpt = None,
) -> None:
    """Repair one config/*.json file the broker loads at start-up: from its .bak, from the store, or by accepting
    the empty table. The file replaced or removed is kept in the quarantine."""
    from engine.errors import InvalidArgumentError
    from engine.ops.repair import EMPTY, FROM_BAK, FROM_STORE_SOURCE, repair_config

    chosen = [s for s, on in ((FROM_BAK, from_bak), (FROM_STORE_SOURCE, from_store), (EMPTY, empty)) if on]
    if len(chosen) != 1:
        raise InvalidArgumentError("give exactly one of --from-bak, --from-store, --empty")
    cfg = build_config(store, broker_conf, hash_slots, max_index, commitlog_file_size, cq_file_size)
    _render(repair_config(cfg, name, chosen[0], dry_run), dry_run, json_out)


@app.command("consume-queue")
@handles_errors
def consume_queue_cmd(
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
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
    hash_slots: HashSlotsOpt = None,
    max_index: MaxIndexOpt = None,
    commitlog_file_size: CommitLogSizeOpt = None,
    cq_file_size: CqSizeOpt = None,
) -> None:
    """Move out the last consume-queue files that hold no unit (a file the queue rolled into and never wrote,
    RocketMQ #9728, #10108), so the queue ends at its last written file; or rebuild one queue from the log."""
    from engine.ops.repair import repair_consume_queue

    cfg = build_config(store, broker_conf, hash_slots, max_index, commitlog_file_size, cq_file_size)
    _render(repair_consume_queue(cfg, topic, queue_id, dry_run, rebuild), dry_run, json_out)


@app.command("timer")
@handles_errors
def timer_cmd(
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    hash_slots: HashSlotsOpt = None,
    max_index: MaxIndexOpt = None,
    commitlog_file_size: CommitLogSizeOpt = None,
    cq_file_size: CqSizeOpt = None,
) -> None:
    """Rebuild the timer store from its timer log: timer-log files of the wrong length padded or cut (misnamed
    ones moved out), every unit's prevPos relinked as the enqueue links it (cycles and broken chains gone), the
    wheel written anew, a missing or torn timercheck rewritten, unloadable timermetrics removed."""
    from engine.ops.repair import repair_timer

    cfg = build_config(store, broker_conf, hash_slots, max_index, commitlog_file_size, cq_file_size)
    _render(repair_timer(cfg, dry_run), dry_run, json_out)
