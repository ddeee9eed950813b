"""rmqtool tiered dump-cq: every CONSUME_QUEUE unit, including those whose records retention removed (storeTimestamp
-1)."""
from __future__ import annotations

from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.commands.tiered import QueueIdOpt, TopicOpt, emit_rows, opened
from rmqtool.options import TIER, JsonOpt, QuietOpt, StoreOptions, store_options


@handles_errors
@store_options(TIER)
def dump_cq(topic: TopicOpt, queue_id: QueueIdOpt, opts: StoreOptions = StoreOptions(), json_out: JsonOpt = False,
            quiet: QuietOpt = False) -> None:
    """Every CONSUME_QUEUE unit, including those whose records retention removed (storeTimestamp -1)."""
    from engine.commands.tiered import dump_cq as cq_rows

    with opened(opts) as st:
        rows = cq_rows(st, topic, queue_id)
        if json_out:
            for r in rows:
                render.emit_json(r)
        else:
            emit_rows(False, f"consume queue of {topic}/{queue_id}", list(rows),
                       ["queueOffset", "commitLogOffset", "size", "tagsCode", "storeTimestamp"])
