"""rmqtool tiered inspect-index: tiered index files as the broker's table holds them: headers; with --walk-* a slot's
chain (local files) or item range (uploaded); --stats; --verify. Without FILE, every file of the table: the local
ones (tiered_index_file/, UNSEALED) and the uploaded INDEX segments (UPLOAD, read with the configured slot count and
the metadata's timestamps)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.commands.tiered import print_notes
from rmqtool.options import (TIER, TIERED_GEOMETRY, JsonOpt, QuietOpt, StoreOptions, TieredDirOpt, WorkersOpt,
                             store_options)


FileArg = Annotated[Optional[Path], typer.Argument(help="One tiered index file, local or compacted (default: every "
                                                   "file of the broker's table: the local ones and the uploaded "
                                                   "INDEX segments).", dir_okay=False)]
WalkSlotOpt = Annotated[Optional[int], typer.Option("--walk-slot", help="Print the items of hash slot N.")]
WalkKeyOpt = Annotated[Optional[str], typer.Option("--walk-key", help="Print the items of the slot of TOPIC#KEY "
                                                   "(tiered hash).")]
WalkMaxOpt = Annotated[int, typer.Option("--count", "-n", help="At most this many items per walk (default 512, the "
                                         "broker's query cap).", min=1)]
StatsOpt = Annotated[bool, typer.Option("--stats", help="Slot occupancy, chain-length histogram, longest chains.")]
VerifyOpt = Annotated[bool, typer.Option("--verify", help="Check slots and chains, and the INDEX segments against "
                                         "their metadata; exit 3 on problems.")]


@handles_errors
@store_options(TIER, TIERED_GEOMETRY, after="tiered_dir")
def inspect_index(
    file: FileArg = None,
    walk_slot: WalkSlotOpt = None,
    walk_key: WalkKeyOpt = None,
    max_items: WalkMaxOpt = 512,
    stats: StatsOpt = False,
    verify: VerifyOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    opts: StoreOptions = StoreOptions(),
    tiered_dir: TieredDirOpt = None,
    workers: WorkersOpt = None,
) -> None:
    """Tiered index files as the broker's table holds them: headers; with --walk-* a slot's chain (local files)
    or item range (uploaded); --stats; --verify. Without FILE, every file of the table: the local ones
    (tiered_index_file/, UNSEALED) and the uploaded INDEX segments (UPLOAD, read with the configured slot count
    and the metadata's timestamps)."""
    # (a typer command: one parameter per option)
    from engine.commands.tiered import inspect_exit_code, inspect_local, inspect_tier, open_index
    from engine.errors import InvalidArgumentError
    from rmqtool.render_tiered import render_inspection

    render.set_quiet(quiet)
    if walk_slot is not None and walk_key is not None:
        raise InvalidArgumentError("give --walk-slot or --walk-key, not both")
    asked = dict(walk_slot=walk_slot, walk_key=walk_key, limit=max_items, stats=stats, verify=verify)
    src = opts.tier()
    if file is not None or src.tier_root() is None:
        failed = render_inspection(inspect_local(file, src, tiered_dir, opts.tiered_hash_slots, opts.tiered_max_index,
                                                 asked, render.note), json_out)
    else:
        with open_index(src, tiered_dir, opts.tiered_hash_slots, opts.tiered_max_index) as ti:
            print_notes(ti.notes)
            if not ti.service.files:
                render.note("note: the broker's table holds no tiered index file (none uploaded, none local)")
            failed = render_inspection(inspect_tier(ti, asked), json_out)
    if failed:
        render.note("verification found problems")
    if inspect_exit_code(failed):
        raise typer.Exit(inspect_exit_code(failed))

