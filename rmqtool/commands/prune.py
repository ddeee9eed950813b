"""rmqtool prune: removing the folders rmqtool left in a store (engine.ops.footprint.prune)."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from rmqtool import render, times
from rmqtool.cli import handles_errors
from rmqtool.leftovers import leftover_table
from rmqtool.options import JsonOpt, QuietOpt, StoreOptions, store_options


@handles_errors
@store_options()
def prune(
    opts: StoreOptions,
    older_than: Annotated[Optional[str], typer.Option(
        "--older-than", help=f"Only folders older than this: {times.DURATION_GRAMMAR} (default: every one).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be removed; change nothing.")] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Remove the quarantine runs and index backups rmqtool left in a store (recognised by the manifest or
    marker rmqtool wrote into them, never by their name alone); list them first.

    Kept, and listed with why: folders that are not rmqtool's, the quarantine run of a recover that did not
    finish, index backups while the store has no index/, and folders newer than --older-than. Nothing else is
    touched. Takes the store lock (not with --dry-run).
    """
    from engine.commands.prune import prune as run_prune
    from engine.views.sizes import format_bytes

    older = times.parse_duration(older_than, "--older-than") if older_than is not None else None
    cfg = opts.settle()
    listed = []

    def listing(plan) -> None:  # what is about to go, printed before the first folder is removed
        listed.append(True)
        leftover_table(plan.as_dict()["remove"], f"removing {len(plan.remove)} folder(s)")

    plan = run_prune(cfg, older, dry_run, before=None if json_out else listing)
    d = plan.as_dict()
    if json_out:
        d["dryRun"] = dry_run
        d["removed"] = [x.name for x in plan.removed]
        render.emit_json(d)
        return
    verb = "would remove" if dry_run else "removed"
    if not listed:
        leftover_table(d["remove"], f"{verb} {len(d['remove'])} folder(s)")
    if d["keep"]:
        render.line()
        leftover_table(d["keep"], f"kept {len(d['keep'])} folder(s)", why=True)
    render.note(f"{verb} {len(plan.removed) if not dry_run else len(d['remove'])} folder(s), "
                f"{format_bytes(d['bytes']['allocated'])} on disk" + (" (dry run: nothing changed)" if dry_run else ""))
