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
from rmqtool.commands.tiered import PARTIAL, print_notes
from rmqtool.options import (BrokerConfOpt, BrokerOpt, ClusterOpt, JsonOpt, MetadataOpt, QuietOpt, StoreOpt,
                             TieredDirOpt, TieredItemsOpt, TieredPathOpt, TieredSlotsOpt, tier_source)


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
def inspect_index(
    file: FileArg = None,
    walk_slot: WalkSlotOpt = None,
    walk_key: WalkKeyOpt = None,
    max_items: WalkMaxOpt = 512,
    stats: StatsOpt = False,
    verify: VerifyOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    tiered_store_path: TieredPathOpt = None,
    metadata: MetadataOpt = None,
    cluster_name: ClusterOpt = None,
    broker_name: BrokerOpt = None,
    tiered_dir: TieredDirOpt = None,
    hash_slots: TieredSlotsOpt = None,
    max_index: TieredItemsOpt = None,
) -> None:
    """Tiered index files as the broker's table holds them: headers; with --walk-* a slot's chain (local files)
    or item range (uploaded); --stats; --verify. Without FILE, every file of the table: the local ones
    (tiered_index_file/, UNSEALED) and the uploaded INDEX segments (UPLOAD, read with the configured slot count
    and the metadata's timestamps)."""
    # (a typer command: one parameter per option)
    from engine.errors import InvalidArgumentError
    from rmqtool.render_tiered import render_inspection

    render.set_quiet(quiet)
    if walk_slot is not None and walk_key is not None:
        raise InvalidArgumentError("give --walk-slot or --walk-key, not both")
    asked = dict(walk_slot=walk_slot, walk_key=walk_key, limit=max_items, stats=stats, verify=verify)
    src = tier_source(tiered_store_path, metadata, store, broker_conf, cluster_name, broker_name)
    if file is not None or src.tier_root() is None:
        failed = render_inspection(_local_inspection(file, src, tiered_dir, hash_slots, max_index, asked), json_out)
    else:
        from engine.tiered.index.fetcher import open_tier_index
        from engine.tiered.index.operations import inspect_tier

        with open_tier_index(src, tiered_dir, hash_slots, max_index) as ti:
            print_notes(ti.notes)
            if not ti.service.files:
                render.note("note: the broker's table holds no tiered index file (none uploaded, none local)")
            failed = render_inspection(inspect_tier(ti, **asked), json_out)
    if failed:
        render.note("verification found problems")
        raise typer.Exit(PARTIAL)


def _local_inspection(file, src, tiered_dir, hash_slots, max_index, asked: dict):
    """FILE alone, or without a tier (no --tiered-store-path, none in broker.conf) the local tiered index files."""
    from engine.errors import InvalidArgumentError
    from engine.tiered.index import inspect_files, list_tiered_index_files

    if file is not None:
        if tiered_dir is not None:
            raise InvalidArgumentError("give FILE or --tiered-dir, not both")
        paths = [file]
    else:
        directory = tiered_dir or src.local_index_dir()
        if directory is None:
            raise InvalidArgumentError("no tier and no local files given: pass --tiered-store-path (and --store), or "
                                       "--tiered-dir DIR for local tiered index files alone")
        paths = [p for _ts, p in list_tiered_index_files(directory)]
        if not paths:
            raise InvalidArgumentError(f"no tiered index files (numeric names) in {directory}")
        if tiered_dir is None:
            render.note("note: no tier given (--tiered-store-path): the local tiered index files only")
    return inspect_files(paths, hash_slot_num=hash_slots, index_num=max_index, **asked)
