"""rmqtool tiered query-key: messages by key from the tier, as the broker's tiered store answers
(IndexStoreService.queryAsync, then MessageStoreFetcherImpl.queryMessageAsync): the uploaded index files (INDEX flat
file) and the local ones whose begin timestamp lies in [--begin, --end], newest first, merged by queueId-offset up
to --count, items of other topics dropped, each message read from its queue's tiered commit log."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rmqtool import render, times
from rmqtool.cli import handles_errors
from rmqtool.commands.tiered import print_notes
from rmqtool.options import (TIER, TIERED_GEOMETRY, BeginOpt, EndOpt, JsonOpt, QuietOpt, StoreOptions, TieredDirOpt,
                             store_options)


DEFAULT_MAX = 64     # as mqadmin queryMsgByKey

KeyTopicOpt = Annotated[Optional[str], typer.Option("--topic", "-t", help="Topic of the messages (required without "
                                                 "--from-jsonl).")]
KeyOpt = Annotated[Optional[str], typer.Option("--key", "-k", help="A key: a KEYS token or the UNIQ_KEY (both are "
                                               "indexed; required without --from-jsonl).")]
MaxOpt = Annotated[int, typer.Option("--count", "-n", help="maxCount, as the broker takes it (default 64).")]
UniqueKeyOpt = Annotated[bool, typer.Option("--unique-key", help="Keep only messages whose UNIQ_KEY is the key "
                                            "(default: its UNIQ_KEY or one of its KEYS).")]
RawOpt = Annotated[bool, typer.Option("--raw", help="The index items (IndexStoreService.queryAsync), not the "
                                      "messages; items the broker's fetcher skips say why.")]
AsBrokerOpt = Annotated[bool, typer.Option("--as-broker", help="The broker's answer as it is (queryMessageAsync): "
                                           "unchecked, hash collisions included.")]
ExplainOpt = Annotated[bool, typer.Option("--explain", help="Also show what was left out and why: messages that "
                                          "are not the key's, items the fetcher skipped, each file's answer.")]

FromJsonlOpt = Annotated[Optional[Path], typer.Option(
    "--from-jsonl", help="Answer many questions in one process: one JSON object per line ({topic, key, maxCount?, "
    "begin?, end?}; missing values from --count/--begin/--end), '-' for stdin. One answer line per question, in "
    "order: the broker's answer {topic, key, maxCount, begin, end, messages: [...]} (as --as-broker), or with "
    "--raw {..., items, perFile}.", dir_okay=False)]


@handles_errors
@store_options(TIER, TIERED_GEOMETRY, after="tiered_dir")
def query_key(
    topic: KeyTopicOpt = None,
    key: KeyOpt = None,
    begin: BeginOpt = None,
    end: EndOpt = None,
    max_num: MaxOpt = DEFAULT_MAX,
    unique_key: UniqueKeyOpt = False,
    raw: RawOpt = False,
    as_broker: AsBrokerOpt = False,
    explain: ExplainOpt = False,
    from_jsonl: FromJsonlOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    opts: StoreOptions = StoreOptions(),
    tiered_dir: TieredDirOpt = None,
) -> None:
    """Messages by key from the tier, as the broker's tiered store answers (IndexStoreService.queryAsync, then
    MessageStoreFetcherImpl.queryMessageAsync): the uploaded index files (INDEX flat file) and the local ones
    whose begin timestamp lies in [--begin, --end], newest first, merged by queueId-offset up to --count, items of
    other topics dropped, each message read from its queue's tiered commit log.

    By default each message is checked (a whole record of the topic, stored within the range, whose UNIQ_KEY or
    KEYS hold the key): hash collisions and index seconds outside the range are left out (see --explain).
    Exits 3 when a file or a read failed (the broker's answer fails or lacks that file)."""
    # (a typer command: one parameter per option)
    from engine.commands.tiered import ask, check_count, key_exit_code, open_index
    from engine.errors import InvalidArgumentError

    render.set_quiet(quiet)
    if raw and as_broker:
        raise InvalidArgumentError("give --raw or --as-broker, not both")
    src = opts.tier()
    if from_jsonl is not None:
        if topic is not None or key is not None:
            raise InvalidArgumentError("--from-jsonl takes the topics and keys from the file: no --topic/--key")
        b, e = times.parse_range(begin, end)
        with open_index(src, tiered_dir, opts.tiered_hash_slots, opts.tiered_max_index) as ti:
            print_notes(ti.notes)
            _answer_jsonl(ti, from_jsonl, max_num, b, e, raw)
        return
    if topic is None or key is None:
        raise InvalidArgumentError("give --topic and --key (or --from-jsonl FILE)")
    check_count(max_num)
    b, e = times.parse_range(begin, end)
    with open_index(src, tiered_dir, opts.tiered_hash_slots, opts.tiered_max_index) as ti:
        ans = ask(ti, topic, key, max_num, b, e, unique_key)
        print_notes(ti.notes)  # after the question: an unknown topic is one error line, nothing before it
    from rmqtool.render_tiered import render_tier_key_answer

    render_tier_key_answer(ans, "raw" if raw else "broker" if as_broker else "checked", json_out, explain)
    if key_exit_code(ans):
        raise typer.Exit(key_exit_code(ans))


def _answer_jsonl(ti, path: Path, max_num: int, b: int, e: int, raw: bool) -> None:
    """One answer line per question line, written as it comes; bad lines answer {"line", "error"} and make the
    exit status 2, failed answers 3."""
    from engine.commands.tiered import answer_jsonl, jsonl_exit_code

    bad = failed = 0
    with answer_jsonl(ti, path, max_num, b, e, raw) as answers:
        for d in answers:
            render.emit_json(d)
            if "line" in d:
                bad += 1
                render.note(f"error: line {d['line']}: {d['error']}")
            elif d.get("error") or any(f.get("error") for f in d.get("perFile", [])):
                failed += 1
    if failed:
        render.note(f"warning: {failed} answer(s) failed or lack a file (see their \"error\")")
    if jsonl_exit_code(bad, failed):
        raise typer.Exit(jsonl_exit_code(bad, failed))
