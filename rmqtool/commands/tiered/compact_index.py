"""rmqtool tiered compact-index: compact a tiered index file into the layout the broker uploads (format §9.4), byte for
byte. The input is only read; the output is written to a temporary name and renamed."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.commands.tiered import NewTieredGeometryOpt
from rmqtool.options import TIERED_GEOMETRY, JsonOpt, QuietOpt, StoreOptions, store_options


@handles_errors
@store_options(("broker_conf",), TIERED_GEOMETRY)
def compact_index(
    file: Annotated[Path, typer.Argument(help="Unsealed or sealed tiered index file (tiered_index_file/<timestamp>).",
                                         dir_okay=False)],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the compacted file.", dir_okay=False)],
    force: Annotated[bool, typer.Option("--force", help="Replace --out if it exists.")] = False,
    mapped: Annotated[bool, typer.Option("--mapped", help="Write the whole local compacting/ file the broker maps "
                                         "(28 + 8*slots + 28*indexItemCount bytes) instead of the bytes it uploads; "
                                         "they differ only when some items are unreachable from the slot table.")]
    = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    opts: StoreOptions = StoreOptions(),
    new_geometry: NewTieredGeometryOpt = False,
) -> None:
    """Compact a tiered index file into the layout the broker uploads (format §9.4), byte for byte. The input is
    only read; the output is written to a temporary name and renamed.

    The compacted form keeps the file's slot count, which the broker reads uploaded files with: it must be
    broker.conf's tieredStoreIndexFileMaxHashSlotNum and the one of the tiered index files in the file's
    directory, unless --new-geometry says the file is of a new geometry on purpose."""
    from engine.commands.tiered import compact_index as compact_file
    from rmqtool.render_tiered import render_compaction

    render.set_quiet(quiet)
    summary = compact_file(file, out, force=force, mapped=mapped, hash_slots=opts.tiered_hash_slots,
                           max_index=opts.tiered_max_index, broker_conf=opts.broker_conf, new_geometry=new_geometry)
    render_compaction(summary, file.name, json_out)
