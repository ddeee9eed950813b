"""rmqtool tiered clean: retention as FlatFileStore applies it: CONSUME_QUEUE then COMMIT_LOG, each from its head."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from rmqtool import render, times
from rmqtool.cli import handles_errors
from rmqtool.commands.tiered import TopicFilterOpt, java_time, note, opened, required, time_text
from rmqtool.options import TIER, JsonOpt, QuietOpt, StoreOptions, store_options


@handles_errors
@store_options(TIER)
def clean(reserved_hours: Annotated[Optional[float], typer.Option(
              "--reserved-hours", help="tieredStoreFileReservedTime: hours to keep, for topics without their own "
              "reserveTime (required).")] = None,
          now: Annotated[Optional[str], typer.Option("--now", help="The time retention is judged at: epoch ms, or "
                                                     f"{times.GRAMMAR} (default: now).")] = None,
          dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; change nothing.")] = False,
          opts: StoreOptions = StoreOptions(),
          topic: TopicFilterOpt = None, json_out: JsonOpt = False, quiet: QuietOpt = False,
          ) -> None:
    """Retention as FlatFileStore applies it: CONSUME_QUEUE then COMMIT_LOG, each from its head."""
    from engine.commands.tiered import clean as run_clean, reserved_hours as checked_hours

    reserve_hours = required("--reserved-hours", reserved_hours)
    now_ms = times.now_ms() if now is None else java_time(now, "--now")
    reserve_hours = checked_hours(reserve_hours)
    with opened(opts) as st:
        d = run_clean(st, reserve_hours, now_ms, dry_run, topic)
    if json_out:
        render.emit_json(d)
    else:
        render.table(("would delete" if dry_run else "deleted") + f" (now {now_ms})",
                     ["topic", "queueId", "fileType", "baseOffset", "size", "endTimestamp", "file", "reason"],
                     [[r["topic"], r["queueId"], r["fileType"], r["baseOffset"], r["size"], time_text(r["endTimestamp"]),
                       r["file"], r["reason"]] for r in d["delete"]])
        note(f"{d['files']} file(s), {d['bytes']} bytes" + (" (dry run: nothing changed)" if dry_run else ""))
