"""rmqtool tiered queues: one line per tiered queue the broker loads: offsets, store times, segments and bytes per file
type."""
from __future__ import annotations

from rmqtool.cli import handles_errors
from rmqtool.commands.tiered import TopicFilterOpt, emit_rows, opened, time_text
from rmqtool.options import TIER, JsonOpt, QuietOpt, StoreOptions, store_options


@handles_errors
@store_options(TIER)
def queues(opts: StoreOptions, topic: TopicFilterOpt = None, json_out: JsonOpt = False,
           quiet: QuietOpt = False) -> None:
    """One line per tiered queue the broker loads: offsets, store times, segments and bytes per file type."""
    from engine.commands.tiered import queues as queue_rows

    with opened(opts) as st:
        rows = queue_rows(st, topic)

        def fmt(r, c):
            if c in ("segments", "bytes"):
                return " / ".join(str(v) for v in r[c].values())
            return time_text(r[c]) if c.endswith("Timestamp") else r.get(c)
        emit_rows(json_out, f"tiered queues of {st.layout.broker}", rows,
                   ["topic", "queueId", "topicId", "consumeQueueMinOffset", "consumeQueueMaxOffset",
                    "commitLogMinOffset", "commitLogMaxOffset", "minStoreTimestamp", "maxStoreTimestamp",
                    "segments", "bytes"], fmt)
