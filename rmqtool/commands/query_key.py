"""rmqtool query-key: find messages by key through the index, verified against the commit log."""
from __future__ import annotations

from typing import Annotated

import typer

from engine.views.times import local_time
from rmqtool import render, times
from rmqtool.cli import handles_errors
from rmqtool.options import INDEX_GEOMETRY, STORE, BeginOpt, EndOpt, JsonOpt, QuietOpt, StoreOptions, store_options

DEFAULT_MAX = 64  # as mqadmin queryMsgByKey
#: The kinds of the lines query-key says (--json: rmqtool.notes; engine.findings.Note has body-undecodable): the
#: broker's walk (--raw) skipped an index file by its header times; a partial answer (damaged index files or
#: misplaced commit-log data); no message found.
SKIPPED_BY_HEADER, PARTIAL, NO_MESSAGE = "index-file-skipped-by-header", "partial-answer", "no-message"

MaxOpt = Annotated[int, typer.Option("--count", "-n", help="At most this many messages (default 64, as mqadmin; not "
                                     "capped by maxMsgsNumBatch); a cut is reported on stderr.")]
UniqueKeyOpt = Annotated[bool, typer.Option("--unique-key", help="Look up by UNIQ_KEY (mqadmin queryMsgByUniqueKey).")]
RawOpt = Annotated[bool, typer.Option(
    "--raw", help="Print what the broker itself returns: unverified offsets, its decoded-time filter and its "
    "maxMsgsNumBatch clamp.")]
ExplainOpt = Annotated[bool, typer.Option("--explain", help="Also list index candidates that were rejected and why "
                                          "(hash collisions, stale entries).")]


@handles_errors
@store_options(STORE, INDEX_GEOMETRY)
def query_key(
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic of the messages.")],
    key: Annotated[str, typer.Option("--key", "-k", help="A key from the messages' KEYS (or the UNIQ_KEY with "
                                     "--unique-key).")],
    opts: StoreOptions = StoreOptions(),
    begin: BeginOpt = None,
    end: EndOpt = None,
    max_num: MaxOpt = DEFAULT_MAX,
    unique_key: UniqueKeyOpt = False,
    raw: RawOpt = False,
    explain: ExplainOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Messages with a key: walks the index like the broker, then keeps only messages whose topic, key and store
    time really match (no hash-collision false positives, exact time range). (The tiered index:
    `rmqtool tiered query-key`.)"""
    # (a typer command: one parameter per option)
    from engine.commands.query_key import check_query_args, query_key as run_query

    b, e = times.parse_range(begin, end)
    check_query_args(max_num, b, e)
    cfg = opts.settle()
    ans = run_query(cfg, topic, key, max_num=max_num, begin=b, end=e, unique=unique_key, raw=raw)
    res = ans.result
    if raw:
        _render_raw(res, f"{topic}#{key}", json_out)
        for d in res.skipped_by_header:
            render.note(f"note: the broker's walk skipped index file {d.path.name} by its header times, which do "
                        f"not bound its messages: {d.reason}; messages of the range in it are missing from this "
                        "answer (query-key without --raw searches every file)", SKIPPED_BY_HEADER,
                        file=d.path.name, reason=d.reason)
    else:
        _render_messages(res, topic, key, explain, json_out, max_num, ans.undecoded)
    _warn_partial(res, topic, key, raw)
    if ans.exit_code:
        raise typer.Exit(ans.exit_code)


def _warn_partial(res, topic: str, key: str, raw: bool) -> None:
    if not res.partial:
        return
    # one line on stderr, whatever the number of damaged files (a script reads one line per failure)
    none = "" if raw or res.messages else f", no message found for key {key!r} in topic {topic!r}"
    misplaced = [f"misplaced commit-log data: {why}" for why in getattr(res, "log_damage", [])]
    render.problem(f"warning: partial answer{none}: " + "; ".join([d.line() for d in res.damaged] + misplaced)
                   + (" (`rmqtool recover` puts misplaced segments back and repairs the index)" if misplaced
                      else " (`rmqtool recover` rebuilds the index)"), PARTIAL,
                   damagedIndexFiles=[{"file": d.path.name, "reason": d.reason} for d in res.damaged],
                   misplaced=list(getattr(res, "log_damage", [])), messages=len(res.messages) if not raw else None)


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


def _render_messages(res, topic: str, key: str, explain: bool, json_out: bool, max_num: int, undecoded) -> None:
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
                    f"({res.candidates} index candidate(s) in {res.files_searched} file(s))", NO_MESSAGE,
                    key=key, topic=topic, candidates=res.candidates, filesSearched=res.files_searched)
    for note in undecoded:
        render.note(note)
