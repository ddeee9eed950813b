"""rmqtool timer list: every pending timer message: what the broker will still deliver, sorted by fire time."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from engine.views.times import local_time
from rmqtool import render, tables, times
from rmqtool.cli import handles_errors
from rmqtool.options import JsonOpt, QuietOpt, StoreOptions, store_options


#: The kinds of the lines timer list says (--json: rmqtool.notes): no pending message (matches); how many were
#: listed; a unit that cannot be resolved, how many more are not named, how many in all.
NO_MESSAGE, LISTED = "no-message", "listed"
UNIT_UNRESOLVED, UNITS_NOT_LISTED, UNITS_UNRESOLVED = "unit-unresolved", "units-not-listed", "units-unresolved"

LIST_COLUMNS = [
    tables.Column("fireAt", "fireAt", tables.FIXED),
    tables.Column("topic", "topic", tables.TEXT, min_width=8),
    tables.Column("queueId", "qid"),
    tables.Column("uniqKey", "uniqKey", tables.FIXED, drop=4),
    tables.Column("tags", "tags", tables.TEXT, drop=3, min_width=6),
    tables.Column("keys", "keys", tables.TEXT, drop=6, min_width=8),
    tables.Column("rollTimes", "rolls", drop=2),
    tables.Column("state", "state", tables.FIXED, drop=1),
    tables.Column("commitLogOffset", "commitLogOffset", drop=5),
    tables.Column("timerLogPosition", "timerLogPos", drop=7),
]


@handles_errors
@store_options()
def list_cmd(
    opts: StoreOptions,
    topic: Annotated[Optional[str], typer.Option("--topic", "-t", help="Only timer messages for this (real) "
                                                 "topic.")] = None,
    due_after: Annotated[Optional[str], typer.Option("--due-after", help=f"Only messages that fire at or after this "
                                                     f"time: {times.GRAMMAR}.")] = None,
    due_before: Annotated[Optional[str], typer.Option("--due-before", help=f"Only messages that fire before this "
                                                      f"time: {times.GRAMMAR}.")] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Every pending timer message: what the broker will still deliver, sorted by fire time.

    Each shows its uniqKey, real topic and queue, keys, tags, fire time (TIMER_OUT_MS), roll count, state
    (wheel: in its slot; rolled: in a nearer slot, re-put when it fires; queued: in rmq_sys_wheel_timer/0, not
    yet in the wheel), the commit-log offset of the record its unit points at (the latest roll copy for a rolled
    message) and its timer-log position. Recalled messages (a pending delete marker names them) and delay-level
    messages (SCHEDULE_TOPIC_XXXX) are not timer messages pending here. --json prints one object per line.
    Exits 3 when units the broker will read cannot be resolved (they are reported on stderr, not listed), or when
    config/timercheck cannot be a broker's (a lastReadTimeMs ahead of the clock leaves no slot live).
    """
    from engine.commands.timer import pending, pending_exit_code

    now = times.now_ms()
    after = times.parse_time(due_after, "--due-after", now=now) if due_after is not None else None
    before = times.parse_time(due_before, "--due-before", now=now) if due_before is not None else None
    cfg = opts.settle()
    with pending(cfg, topic, after, before, now_ms=now) as res:
        for n in res.notes:
            tables.note(n)
        out = None if json_out else tables.Stream(LIST_COLUMNS, {
            "fireAt": 23, "topic": 16, "queueId": 3, "uniqKey": 56, "tags": 10, "keys": 16, "rollTimes": 5,
            "state": 7, "commitLogOffset": 12, "timerLogPosition": 11})
        shown = 0
        for m in res:
            shown += 1
            if out is None:
                render.emit_json(m.as_dict())
            else:
                d = m.as_dict()
                d["fireAt"] = local_time(m.fire_at_ms)
                out.row(d)
        if out is not None:
            out.finish()  # an empty list: the note below says so
    if not shown:
        tables.note("no pending timer message" + (" matches" if res.total else ""), NO_MESSAGE, total=res.total)
    else:
        tables.note(f"{shown} of {res.total} pending timer message(s)"
                    + (f"; {res.recalled} recalled (not listed)" if res.recalled else ""), LISTED, shown=shown,
                    total=res.total, recalled=res.recalled)
    for p in res.problems:  # what the list lacks and why: printed whatever --quiet says, exit 3
        render.problem(f"warning: {p}")
    if res.unresolved_total:  # they explain the exit 3: printed whatever --quiet says
        for u in res.unresolved[:20]:
            render.problem(f"note: not listed: {u.why}", UNIT_UNRESOLVED)
        if res.unresolved_total > 20:
            render.problem(f"note: ... and {res.unresolved_total - 20} more", UNITS_NOT_LISTED,
                           units=res.unresolved_total - 20)
        render.problem(f"note: {res.unresolved_total} unit(s) cannot be resolved; run `rmqtool timer verify` for "
                       "what the broker will do with them", UNITS_UNRESOLVED, units=res.unresolved_total)
    if pending_exit_code(res):
        raise typer.Exit(pending_exit_code(res))
