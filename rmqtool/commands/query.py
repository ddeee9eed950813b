"""rmqtool query-key: find messages by key through the index, verified against the commit log."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.views.times import local_time
from rmqtool import render, times
from rmqtool.cli import handles_errors
from rmqtool.options import (BeginOpt, BrokerConfOpt, CommitLogSizeOpt, EndOpt, HashSlotsOpt, JsonOpt, MaxIndexOpt,
                             OldMaxOpt, QuietOpt, StoreOpt, build_config)

PARTIAL = 3  # exit code: an answer from the healthy index files only
DEFAULT_MAX = 64  # as mqadmin queryMsgByKey

MaxOpt = Annotated[int, typer.Option("--count", "-n", help="At most this many messages (default 64, as mqadmin; not "
                                     "capped by maxMsgsNumBatch); a cut is reported on stderr.")]
UniqueKeyOpt = Annotated[bool, typer.Option("--unique-key", help="Look up by UNIQ_KEY (mqadmin queryMsgByUniqueKey).")]
RawOpt = Annotated[bool, typer.Option(
    "--raw", help="Print what the broker itself returns: unverified offsets, its decoded-time filter and its "
    "maxMsgsNumBatch clamp.")]
ExplainOpt = Annotated[bool, typer.Option("--explain", help="Also list index candidates that were rejected and why "
                                          "(hash collisions, stale entries).")]
# Old spellings, hidden: the tiered index is `rmqtool tiered query-key` now (kept one release, with a note).
TieredDirOpt = Annotated[Optional[Path], typer.Option("--tiered-dir", hidden=True, file_okay=False,
                                                      help="Old: `rmqtool tiered query-key`.")]
TieredMetadataOpt = Annotated[Optional[Path], typer.Option("--tiered-metadata", hidden=True, dir_okay=False,
                                                           help="Old: tiered query-key --metadata.")]
TopicIdOpt = Annotated[Optional[int], typer.Option("--topic-id", hidden=True, help="Old: the topic's tiered id.")]
TieredStorePathOpt = Annotated[Optional[Path], typer.Option("--tiered-store-path", hidden=True, file_okay=False,
                                                            help="Old: tiered query-key --tiered-store-path.")]
ClusterNameOpt = Annotated[Optional[str], typer.Option("--cluster-name", hidden=True, help="Old: tiered query-key "
                                                       "--cluster-name.")]
BrokerNameOpt = Annotated[Optional[str], typer.Option("--broker-name", hidden=True, help="Old: tiered query-key "
                                                      "--broker-name.")]
TieredHashSlotsOpt = Annotated[Optional[int], typer.Option("--tiered-hash-slots", hidden=True,
                                                           help="Old: tiered query-key --hash-slots.")]
TieredMaxIndexOpt = Annotated[Optional[int], typer.Option("--tiered-max-index", hidden=True,
                                                          help="Old: tiered query-key --max-index.")]


@handles_errors
def query_key(
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic of the messages.")],
    key: Annotated[str, typer.Option("--key", "-k", help="A key from the messages' KEYS (or the UNIQ_KEY with "
                                     "--unique-key).")],
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    begin: BeginOpt = None,
    end: EndOpt = None,
    max_num: MaxOpt = DEFAULT_MAX,
    unique_key: UniqueKeyOpt = False,
    raw: RawOpt = False,
    explain: ExplainOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    hash_slots: HashSlotsOpt = None,
    max_index: MaxIndexOpt = None,
    commitlog_file_size: CommitLogSizeOpt = None,
    tiered_dir: TieredDirOpt = None,
    tiered_metadata: TieredMetadataOpt = None,
    topic_id: TopicIdOpt = None,
    tiered_store_path: TieredStorePathOpt = None,
    cluster_name: ClusterNameOpt = None,
    broker_name: BrokerNameOpt = None,
    tiered_hash_slots: TieredHashSlotsOpt = None,
    tiered_max_index: TieredMaxIndexOpt = None,
    old_max: OldMaxOpt = None,
) -> None:
    """Messages with a key: walks the index like the broker, then keeps only messages whose topic, key and store
    time really match (no hash-collision false positives, exact time range). (The tiered index:
    `rmqtool tiered query-key`.)"""
    # (a typer command: one parameter per option)
    from engine.broker.index import keyquery
    from engine.broker.store import query_store
    from rmqtool.cli import count_or_old_max

    max_num = count_or_old_max(max_num, old_max, "query-key")
    if tiered_dir is not None:
        from rmqtool.cli import deprecated

        deprecated("query-key --tiered-dir", "tiered query-key")
    b, e = times.parse_range(begin, end)
    keyquery.check_query_args(max_num, b, e)
    tiered = dict(tiered_metadata=tiered_metadata, topic_id=topic_id, tiered_store_path=tiered_store_path,
                  cluster_name=cluster_name, broker_name=broker_name, tiered_hash_slots=tiered_hash_slots,
                  tiered_max_index=tiered_max_index)
    if tiered_dir is not None:
        tiered.update(tiered_dir=tiered_dir, topic=topic, key=key, max_num=max_num, begin=b, end=e, unique=unique_key,
                      raw=raw, store=store, broker_conf=broker_conf, hash_slots=hash_slots, max_index=max_index,
                      commitlog_file_size=commitlog_file_size)
        _query_tiered(tiered, json_out, explain)
        return
    _refuse_tiered_only(tiered)
    cfg = build_config(store, broker_conf, hash_slots, max_index, commitlog_file_size)
    res = query_store(cfg, topic, key, max_num=max_num, begin=b, end=e, unique=unique_key, raw=raw)
    if raw:
        _render_raw(res, f"{topic}#{key}", json_out)
        for d in res.skipped_by_header:
            render.note(f"note: the broker's walk skipped index file {d.path.name} by its header times, which do "
                        f"not bound its messages: {d.reason}; messages of the range in it are missing from this "
                        "answer (query-key without --raw searches every file)")
    else:
        _render_messages(res, topic, key, explain, json_out, max_num)
    _warn_partial(res, topic, key, raw)


def _refuse_tiered_only(tiered: dict) -> None:
    given = [k for k, v in tiered.items() if v is not None]
    if given:
        from engine.errors import InvalidArgumentError

        raise InvalidArgumentError(f"--{given[0].replace('_', '-')} only applies with --tiered-dir")


def _query_tiered(fields: dict, json_out: bool, explain: bool) -> None:
    """One tiered query: `fields` are those of engine.tiered.index.TieredKeyQuery."""
    from engine.tiered.index import TieredKeyQuery, query_tiered_key
    from rmqtool.render_tiered import render_key_answer

    answer = query_tiered_key(TieredKeyQuery(**fields))
    render_key_answer(answer, fields["topic"], fields["key"], json_out, explain)


def _warn_partial(res, topic: str, key: str, raw: bool) -> None:
    if not res.partial:
        return
    # one line on stderr, whatever the number of damaged files (a script reads one line per failure)
    none = "" if raw or res.messages else f", no message found for key {key!r} in topic {topic!r}"
    misplaced = [f"misplaced commit-log data: {why}" for why in getattr(res, "log_damage", [])]
    render.problem(f"warning: partial answer{none}: " + "; ".join([d.line() for d in res.damaged] + misplaced)
                   + (" (`rmqtool recover` puts misplaced segments back and repairs the index)" if misplaced
                      else " (`rmqtool recover` rebuilds the index)"))
    raise typer.Exit(PARTIAL)


def message_rows(recs) -> tuple[list[str], list[list]]:
    cols = ["commitLogOffset", "storeTime", "topic", "queueId", "queueOffset", "keys", "uniqKey", "tags", "body"]
    rows = []
    for r in recs:
        j = r.to_json()
        rows.append([r.physical_offset, local_time(r.store_timestamp), r.topic, r.queue_id, r.queue_offset,
                     " ".join(r.keys), r.uniq_key, r.tags, render.body_preview(j)])
    return cols, rows


def _render_raw(res, key_string: str, json_out: bool) -> None:
    if json_out:
        render.emit_json(res.as_dict())
        return
    render.kv_table(f"broker answer for {key_string}", [
        ("phyOffsets (index order)", " ".join(map(str, res.phy_offsets)) or "-"),
        ("maxNum after clamp", res.max_num),
        ("indexLastUpdateTimestamp", local_time(res.index_last_update_timestamp)),
        ("indexLastUpdatePhyoffset", res.index_last_update_phy_offset),
    ])


def _render_messages(res, topic: str, key: str, explain: bool, json_out: bool, max_num: int) -> None:
    from rmqtool import tables

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
    if getattr(res, "more", False):
        tables.cut_note(len(res.messages), "--count", f"messages for key {key!r}")
    if not res.messages and not res.partial:
        render.note(f"no message found for key {key!r} in topic {topic!r} "
                    f"({res.candidates} index candidate(s) in {res.files_searched} file(s))")
    undecoded = [(r, r.decoded_body()) for r in res.messages if r.compression()]
    undecoded = [(r, d) for r, d in undecoded if not d.ok]
    for r, d in undecoded:
        render.note(f"error: message at commit-log offset {r.physical_offset}: its {d.codec} body does not decode "
                    f"({d.error}); the consumer cannot read it")
    if undecoded and not res.partial:
        raise typer.Exit(PARTIAL)
