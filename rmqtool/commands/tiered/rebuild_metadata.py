"""rmqtool tiered rebuild-metadata: rebuild tieredStoreMetadata.json from the segment files (the tier is only read)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.commands.tiered import note
from rmqtool.options import JsonOpt, QuietOpt, StoreOptions, store_options


@handles_errors
@store_options(("tiered_store_path", "broker_name", "cluster_name"))
def rebuild_metadata(out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the rebuilt metadata (must not "
                                                       "exist).", dir_okay=False)],
                     opts: StoreOptions = StoreOptions(),
                     from_file: Annotated[Optional[Path], typer.Option(
                         "--from", help="An older tieredStoreMetadata.json or its .bak: topic ids, wall-clock times, "
                         "and times of segments whose records are gone.", dir_okay=False)] = None,
                     json_out: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Rebuild tieredStoreMetadata.json from the segment files (the tier is only read)."""
    from engine.commands.tiered import rebuild_metadata as run_rebuild

    res = run_rebuild(opts.tiered_store_path, opts.broker_name, out, opts.cluster_name, from_file)
    for w in res.warnings:
        render.problem(f"warning: {w}")
    if json_out:
        render.emit_json(res.as_dict())
    else:
        note(f"wrote {res.out}: {res.topics} topic(s), {res.queues} queue(s), "
                    + ", ".join(f"{v} {k}" for k, v in res.segments.items()) + " segment(s)")
