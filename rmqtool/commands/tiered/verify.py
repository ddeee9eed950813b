"""rmqtool tiered verify: check names, segments, metadata, records and units, and (without --topic) the tiered index:
the INDEX segments against their metadata and local tiered index files. Exits 3 with one line per problem."""
from __future__ import annotations

import typer

from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.commands.tiered import TopicFilterOpt, note, opened
from rmqtool.options import TIER, JsonOpt, QuietOpt, StoreOptions, WorkersOpt, store_options


@handles_errors
@store_options(TIER)
def verify(opts: StoreOptions, topic: TopicFilterOpt = None, json_out: JsonOpt = False, quiet: QuietOpt = False,
           workers: WorkersOpt = None) -> None:
    """Check names, segments, metadata, records and units, and (without --topic) the tiered index: the INDEX
    segments against their metadata and local tiered index files. Exits 3 with one line per problem."""
    from engine.commands.tiered import verify as verify_tier, verify_exit_code

    with opened(opts) as st:
        with render.phase_progress("tiered verify") as progress:   # every worker's segments and files counted
            rep = verify_tier(st, topic, progress)  # the tier's warnings are its problems
        if json_out:
            render.emit_json(rep.as_dict())
        else:
            for p in rep.problems:
                render.line(p.line())
            for n in rep.notes:
                note(f"note: {n.line()}")
            note(f"{rep.queues} queue(s), {rep.segments} segment(s), {rep.records} record(s), "
                        f"{rep.units} unit(s): " + ("whole" if rep.ok else f"{len(rep.problems)} problem(s)"))
    if verify_exit_code(rep):
        raise typer.Exit(verify_exit_code(rep))
