"""rmqtool query-key: find messages by key through the index, verified against the commit log."""
from __future__ import annotations

from typing import Annotated

import typer

from engine.errors import InvalidArgumentError
from engine.javautil import LONG_MAX
from engine.store import MessageStore
from rmqtool import render
from rmqtool.app import command
from rmqtool.options import (BeginOpt, BrokerConfOpt, CommitLogSizeOpt, EndOpt, HashSlotsOpt, JsonOpt, MaxIndexOpt,
                             StoreOpt, build_config)

MAX_LIMIT = 10_000_000


def message_rows(recs) -> tuple[list[str], list[list]]:
    cols = ["commitLogOffset", "storeTime", "topic", "queueId", "queueOffset", "keys", "uniqKey", "tags", "body"]
    rows = []
    for r in recs:
        j = r.to_json()
        rows.append([r.physical_offset, render.fmt_time(r.store_timestamp), r.topic, r.queue_id, r.queue_offset,
                     " ".join(r.keys), r.uniq_key, r.tags, render.body_preview(j)])
    return cols, rows


@command("query-key")
def query_key(
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic of the messages.")],
    key: Annotated[str, typer.Option("--key", "-k", help="A key from the messages' KEYS (or the UNIQ_KEY with "
                                     "--unique-key).")],
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    begin: BeginOpt = None,
    end: EndOpt = None,
    max_num: Annotated[int, typer.Option("--max", "-n", help="At most this many messages (default 64, as mqadmin; "
                                         "not capped by maxMsgsNumBatch).")] = 64,
    unique_key: Annotated[bool, typer.Option("--unique-key", help="Look up by UNIQ_KEY (mqadmin "
                                             "queryMsgByUniqueKey).")] = False,
    raw: Annotated[bool, typer.Option("--raw", help="Print what the broker itself returns: unverified offsets, "
                                      "its decoded-time filter and its maxMsgsNumBatch clamp.")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="Also list index candidates that were rejected and "
                                          "why (hash collisions, stale entries).")] = False,
    json_out: JsonOpt = False,
    hash_slots: HashSlotsOpt = None,
    max_index: MaxIndexOpt = None,
    commitlog_file_size: CommitLogSizeOpt = None,
) -> None:
    """Messages with a key: walks the index like the broker, then keeps only messages whose topic, key and store
    time really match (no hash-collision false positives, exact time range)."""
    if not 0 < max_num <= MAX_LIMIT:
        raise InvalidArgumentError(f"--max {max_num} is out of range 1..{MAX_LIMIT}")
    b = render.parse_time(begin, 0, "--begin")
    e = render.parse_time(end, LONG_MAX, "--end")
    if b > e:
        raise InvalidArgumentError(f"--begin ({begin}) is after --end ({end})")
    cfg = build_config(store, broker_conf, hash_slots, max_index, commitlog_file_size)
    with MessageStore(cfg) as st:
        if raw:
            res = st.query_raw(topic, key, max_num, b, e)
            if json_out:
                render.emit_json(res)
            else:
                render.kv_table(f"broker answer for {topic}#{key}", [
                    ("phyOffsets (index order)", " ".join(map(str, res["phyOffsets"])) or "-"),
                    ("maxNum after clamp", res["maxNum"]),
                    ("indexLastUpdateTimestamp", render.fmt_time(res["indexLastUpdateTimestamp"])),
                    ("indexLastUpdatePhyoffset", res["indexLastUpdatePhyoffset"]),
                ])
            return
        res = st.query(topic, key, max_num, b, e, unique=unique_key)
        if json_out:
            for r in res.messages:
                render.emit_json(r.to_json())
            if explain:
                for rej in res.rejected:
                    render.emit_json({"rejected": rej})
        else:
            cols, rows = message_rows(res.messages)
            render.table(f"{len(res.messages)} message(s) for {topic}#{key}", cols, rows)
            if explain and res.rejected:
                render.table("rejected index candidates", ["phyOffset", "reason"],
                             [[r["phyOffset"], r["reason"]] for r in res.rejected])
        if not res.messages:
            render.note(f"no message found for key {key!r} in topic {topic!r} "
                        f"({res.candidates} index candidate(s) in {res.files_searched} file(s))")
