"""rmqtool compact-index: compact a RocketMQ 5 tiered-storage index file into the layout the broker uploads
(format §9.4). inspect-index and query-key handle tiered files in their own modules (rendering: render_tiered)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rmqtool.cli import handles_errors
from rmqtool.options import GEOMETRY_PANEL, JsonOpt, QuietOpt

TieredSlotsOpt = Annotated[Optional[int], typer.Option(
    "--hash-slots", help="Slots of the tiered file (tieredStoreIndexFileMaxHashSlotNum; default: inferred from the "
    "file).", rich_help_panel=GEOMETRY_PANEL)]
TieredItemsOpt = Annotated[Optional[int], typer.Option(
    "--max-index", help="Items of the tiered file (tieredStoreIndexFileMaxIndexNum; default: inferred from the "
    "file).", rich_help_panel=GEOMETRY_PANEL)]


@handles_errors
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
    hash_slots: TieredSlotsOpt = None,
    max_index: TieredItemsOpt = None,
) -> None:
    """Compact a tiered index file into the layout the broker uploads (format §9.4), byte for byte. The input is
    only read; the output is written to a temporary name and renamed."""
    from engine.tiered.index import compact_file
    from rmqtool.render_tiered import render_compaction

    summary = compact_file(file, out, force=force, mapped=mapped, hash_slot_num=hash_slots, index_num=max_index)
    render_compaction(summary, file.name, json_out)
