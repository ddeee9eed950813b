"""rmqtool tiered get: messages by queue offset, with the fetcher's status. Exits 3 when a read stopped on a damaged
record."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from engine.views.times import local_time
from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.commands.tiered import QueueIdOpt, TopicOpt, note, opened, required
from rmqtool.options import TIER, JsonOpt, QuietOpt, StoreOptions, store_options


@handles_errors
@store_options(TIER)
def get(topic: TopicOpt, queue_id: QueueIdOpt,
        queue_offset: Annotated[Optional[int], typer.Option("--queue-offset", "-i", help="Queue offset of the first "
                                                            "message (required).")] = None,
        count: Annotated[int, typer.Option("--count", "-n", help="How many messages from --queue-offset (default "
                                           "1).")] = 1,
        raw: Annotated[bool, typer.Option("--raw", help="Answer exactly as the broker's batch read, including its "
                                          "two-segment cut (flat-store §7).")] = False,
        as_consumer: Annotated[bool, typer.Option(
            "--as-consumer", help="What a consumer pulling --count messages receives (getMessageAsync): the "
            "read-ahead into the fetcher's cache, then messages until --count or until they reach "
            "maxTransferBytesOnMessageInMemory (broker.conf, default 256 KiB).")] = False,
        opts: StoreOptions = StoreOptions(),
        json_out: JsonOpt = False,
        quiet: QuietOpt = False,
        ) -> None:
    """Messages by queue offset, with the fetcher's status. Exits 3 when a read stopped on a damaged record."""
    from engine.commands.tiered import get as get_messages, get_exit_code

    queue_offset = required("--queue-offset", queue_offset)

    with opened(opts) as st:
        res, out = get_messages(st, topic, queue_id, queue_offset, count, raw, as_consumer)
        if json_out:
            render.emit_json(out)
        else:
            render.kv_table(f"{topic}/{queue_id} from {queue_offset}", [(k, out[k]) for k in
                            ("status", "nextBeginOffset", "minOffset", "maxOffset")] + [("messages", len(res.messages))])
            render.table(None, ["queueOffset", "commitLogOffset", "storeSize", "storeTime", "keys", "tags", "msgId",
                                "body"],
                         [[m.get("queueOffset"), m.get("commitLogOffset"), m.get("storeSize"),
                           local_time(m.get("storeTimestamp")), " ".join(m.get("keys") or []), m.get("tags"),
                           m.get("msgId"), render.body_preview(m)] for m in out["messages"]])
    if raw and res.left_out:
        note(f"the broker's batch read covered {res.requested} units and left out {res.left_out} "
                    f"message(s) (it reads at most two segments), yet nextBeginOffset is {res.next_begin_offset}")
    if as_consumer and res.read_ahead:
        note(f"note: the read-ahead cached {res.read_ahead} message(s); this pull hands over {len(res.messages)} "
              f"(--count {count}, byte limit {st.config.maxTransferBytesOnMessageInMemory}); the next pull starts "
              f"at {res.next_begin_offset}")
    undecoded = [m for m in out["messages"] if "compressionError" in m]
    for m in undecoded:
        note(f"error: queue offset {m.get('queueOffset')}: its {m.get('compression')} body does not decode "
              f"({m['compressionError']}); the consumer cannot read it")
    if res.problem:
        render.problem(f"error: {res.problem}")
    if get_exit_code(res, undecoded):
        raise typer.Exit(get_exit_code(res, undecoded))
