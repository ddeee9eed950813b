"""rmqtool tiered segments: one line per COMMIT_LOG and CONSUME_QUEUE segment, with what the metadata says where it
differs."""
from __future__ import annotations

from rmqtool.cli import handles_errors
from rmqtool.commands.tiered import QueueIdOpt, TopicOpt, emit_rows, opened, time_text
from rmqtool.options import TIER, JsonOpt, QuietOpt, StoreOptions, store_options


@handles_errors
@store_options(TIER)
def segments(topic: TopicOpt, queue_id: QueueIdOpt, opts: StoreOptions = StoreOptions(), json_out: JsonOpt = False,
             quiet: QuietOpt = False) -> None:
    """One line per COMMIT_LOG and CONSUME_QUEUE segment, with what the metadata says where it differs."""
    from engine.commands.tiered import segments as segment_rows

    with opened(opts) as st:
        rows = segment_rows(st, topic, queue_id)
        emit_rows(json_out, f"segments of {topic}/{queue_id}", rows,
                   ["fileType", "baseOffset", "size", "beginTimestamp", "endTimestamp", "fileName", "fileBytes",
                    "metadata"], lambda r, c: time_text(r[c]) if c.endswith("Timestamp") else r.get(c))
