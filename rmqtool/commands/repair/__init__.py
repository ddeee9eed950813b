"""rmqtool repair ...: the repairs `rmqtool doctor` names beside `recover` and `clean` (a config file, the empty
tail of a consume queue, the timer store). Each takes the store lock, offers --dry-run (the same plan, nothing
changed) and keeps what it removes or replaces in the store's quarantine folder with a manifest."""
from __future__ import annotations

from typing import Annotated

import typer

from rmqtool import render


app = typer.Typer(name="repair", no_args_is_help=True, rich_markup_mode=None,
                  help="Repairs `rmqtool doctor` names that `recover` does not make: a config file, the empty tail of "
                       "a consume queue, the timer store. Locked, with --dry-run and a quarantine.")

DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the plan; change nothing.")]


def show_plan(plan, dry_run: bool, json_out: bool) -> None:
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
