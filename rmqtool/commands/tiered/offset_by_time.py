"""rmqtool tiered offset-by-time: the broker's getOffsetInQueueByTime per timestamp; `error` where it throws. Exits 3
on any error."""
from __future__ import annotations

from typing import Annotated

import typer

from rmqtool import times
from rmqtool.cli import handles_errors
from rmqtool.commands.tiered import QueueIdOpt, TopicOpt, emit_rows, java_time, opened
from rmqtool.options import TIER, JsonOpt, QuietOpt, StoreOptions, store_options, values


@handles_errors
@store_options(TIER)
def offset_by_time(topic: TopicOpt, queue_id: QueueIdOpt,
                   timestamp: Annotated[list[str], typer.Option("--timestamp", help=f"Any epoch in ms as the broker "
                                                                f"takes it, or {times.GRAMMAR} (repeat the option "
                                                                "for several).")],
                   boundary: Annotated[str, typer.Option("--boundary", help="lower or upper (BoundaryType).",
                                                         autocompletion=values("lower", "upper"))] = "lower",
                   opts: StoreOptions = StoreOptions(),
                   json_out: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """The broker's getOffsetInQueueByTime per timestamp; `error` where it throws. Exits 3 on any error."""
    from engine.commands.tiered import offset_by_time as offsets_by_time, offset_by_time_exit_code

    stamps = [java_time(t, "--timestamp") for t in timestamp]
    with opened(opts) as st:
        rows = offsets_by_time(st, topic, queue_id, stamps, boundary)
        emit_rows(json_out, f"offset by time, {topic}/{queue_id}", rows, ["timestamp", "boundary", "result", "error"])
    if offset_by_time_exit_code(rows):
        raise typer.Exit(offset_by_time_exit_code(rows))
