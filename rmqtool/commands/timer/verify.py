"""rmqtool timer verify: check that the wheel, the timer log, the checkpoint, the metrics and the commit log agree:
file lengths (a wheel of the wrong length stops the broker's start), every live slot's chain (bounds, cycles,
units), every unit's record (no unit pointing past the commit log or at a record that is not a timer message), the
enqueue cursor and the checkpoint's offsets."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from rmqtool import render, tables, times
from rmqtool.cli import handles_errors
from rmqtool.options import JsonOpt, QuietOpt, StoreOptions, WorkersOpt, store_options


@handles_errors
@store_options()
def verify_cmd(
    opts: StoreOptions,
    now: Annotated[Optional[str], typer.Option("--now", help=f"Judge the time rules (the wheel keeps 7 days) as if "
                                               f"the broker started at this time: {times.GRAMMAR} (default: now).")]
    = None,
    no_check_crc: Annotated[bool, typer.Option("--no-check-crc", help="Do not check the body CRCs of pending "
                                               "timer messages.")] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    workers: WorkersOpt = None,
) -> None:
    """Check that the wheel, the timer log, the checkpoint, the metrics and the commit log agree: file lengths
    (a wheel of the wrong length stops the broker's start), every live slot's chain (bounds, cycles, units), every
    unit's record (no unit pointing past the commit log or at a record that is not a timer message), the
    enqueue cursor and the checkpoint's offsets.

    Prints one line per problem, located (file and byte offset in it), worst first; --json gives each with its
    severity, kind and what the broker does with it. Exits 3 when there is an error or a warning (info findings
    do not count).
    """
    from engine.commands.timer import verify as verify_timer, verify_exit_code

    at = times.parse_time(now, "--now") if now is not None else None
    cfg = opts.settle()
    with render.phase_progress("timer verify") as progress:   # every worker's slots counted
        rep = verify_timer(cfg, now=at, check_crc=not no_check_crc, progress=progress)
    if json_out:
        render.emit_json(rep.as_dict())
    else:
        for f in rep.findings:
            where = f.file + (f"@{f.offset}" if f.offset is not None else "")
            render.line(f"{f.severity}: {where}: {f.problem}")
        c = rep.checked
        tables.note(f"{c['liveSlots']} live slot(s), {c['unitsWalked']} unit(s) walked, {c['queuedUnits']} still to "
                    f"enqueue, {c['pendingMessages']} pending message(s); "
                    + ", ".join(f"{n} {s}(s)" for s, n in rep.counts().items()))
    if verify_exit_code(rep):
        raise typer.Exit(verify_exit_code(rep))
