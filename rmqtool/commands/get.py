"""rmqtool get: messages by commit-log offset, message id or queue offset, read straight from the commit log.

Several messages stream (rmqtool.records): memory does not grow with their number and `| head` answers at once.
Damage is reported where it is met and in the exit code.
"""
from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from engine.views.times import local_time
from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.options import INDEX_GEOMETRY, STORE, JsonOpt, QuietOpt, StoreOptions, expand_path, store_options
from rmqtool.records import MESSAGE, open_table


def _show_message(rec) -> None:
    j = rec.to_json()
    pairs = [(k, j[k]) for k in ("msgId", "topic", "queueId", "queueOffset", "commitLogOffset", "storeSize",
                                 "bodyCRC", "flag", "sysFlag", "transactionType", "magicVersion", "reconsumeTimes",
                                 "preparedTransactionOffset", "bornHost", "storeHost")]
    pairs += [("bornTimestamp", f"{j['bornTimestamp']} ({local_time(j['bornTimestamp'])})"),
              ("storeTimestamp", f"{j['storeTimestamp']} ({local_time(j['storeTimestamp'])})"),
              ("keys", " ".join(j["keys"])), ("tags", j["tags"]), ("uniqKey", j["uniqKey"])]
    pairs += [(f"property {k}", v) for k, v in sorted(j["properties"].items())]
    if "compression" in j:
        pairs.append(("compression", j["compression"]))
    if "compressionError" in j:
        pairs.append(("body", f"(none: the {j['compression']} body does not decode: {j['compressionError']})"))
        pairs.append(("stored body (base64)", j["storedBody"]))
    else:
        pairs.append(("body" + (" (base64)" if j.get("bodyEncoding") else ""), j["body"]))
    render.kv_table(f"message at {rec.physical_offset}", pairs)



QueueIdOpt = Annotated[Optional[int], typer.Option("--queue-id", "-q", help="Queue id, with --queue-offset.")]
MsgIdOpt = Annotated[Optional[List[str]], typer.Option(
    "--msg-id", "-m", help="Message id (repeatable): an offset message id (store host + port + offset, mqadmin "
    "queryMsgById) or the client's UNIQ_KEY, found through the index (queryMsgByUniqueKey; in --topic, else in "
    "every topic: the copy delivered to the message's own topic, the other copies named on stderr).")]
QueueOffsetOpt = Annotated[Optional[int], typer.Option("--queue-offset", "-i", help="Read the consume-queue unit "
                                                       "at this queue offset of --topic/--queue-id and its message "
                                                       "(mqadmin queryMsgByOffset).")]
GetCountOpt = Annotated[Optional[int], typer.Option("--count", "-n", help="With --queue-offset: this many units from "
                                                    "it (streamed like several messages; cut at the max offset).")]


# one parameter per option: typer builds the command from the signature
@handles_errors
@store_options(STORE, INDEX_GEOMETRY)
def get(
    opts: StoreOptions,
    offset: Annotated[Optional[List[int]], typer.Option("--offset", "-o", help="Commit-log (physical) offset "
                                                        "(repeatable).")] = None,
    msg_id: MsgIdOpt = None,
    from_file: Annotated[Optional[Path], typer.Option("--from-file", "-f", help="Read offsets or message ids, one "
                                                      "per line ('-' for stdin).")] = None,
    topic: Annotated[Optional[str], typer.Option("--topic", "-t", help="Topic: of --queue-id/--queue-offset, or "
                                                 "where a UNIQ_KEY given as --msg-id is looked up.")] = None,
    queue_id: QueueIdOpt = None,
    queue_offset: QueueOffsetOpt = None,
    count: GetCountOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Messages by commit-log offset, message id (offset message id or UNIQ_KEY), or queue offset.

    One message is shown in full; several stream as NDJSON (--json) or one table row each.

    A message that is not where it was asked for, or not valid there, is reported on stderr: exit 2 when every
    such address does not exist (outside the commit log, not a message id) or only one was asked for, else 3.

    A queue offset outside the queue's [min, max) is an error naming both; a unit that points outside the
    commit log, or at a record of another topic, queue or queue offset, is reported (exit 3), never answered
    with that record.
    """
    from engine.commands.get import get as answer

    cfg = opts.settle()
    with _lookup_list(from_file) as chunks, answer(cfg, offset, msg_id, chunks, topic, queue_id, queue_offset,
                                                   count) as got:
        code = _render(got, json_out)
    if code:
        raise typer.Exit(code)


@contextlib.contextmanager
def _lookup_list(from_file: Optional[Path]):
    """The lines of --from-file ('-': stdin), a chunk at a time (memory does not grow with the list), or None."""
    from engine.commands.get import read_lookups

    if from_file is None:
        yield None
        return
    stream = sys.stdin if str(from_file) == "-" else open(expand_path(from_file), encoding="utf-8")
    try:
        yield read_lookups(stream)
    finally:
        if stream is not sys.stdin:
            stream.close()


def _render(got, json_out: bool) -> int:
    """Show the events of the answer (engine.commands.get) as they come; the exit code it ends with."""
    from engine.commands.get import Done, Message, Records, Said
    from engine.views.recordjson import run_table_rows
    from engine.views.runjson import run_json_text

    out, table = open_table(json_out) if got.stream else (None, None)
    with render.gc_paused():
        for ev in got.events:
            if isinstance(ev, Records):
                if json_out:
                    out.data(run_json_text(ev.run))
                else:
                    table.rows(run_table_rows(ev.run), MESSAGE)
            elif isinstance(ev, Message):
                if ev.full and json_out:
                    render.emit_json(_message_json(ev))
                elif ev.full:
                    _show_message(ev.record)
                elif json_out:
                    out.line(json.dumps(_message_json(ev), ensure_ascii=False))
                else:
                    table.rows([_cells(ev.record)], MESSAGE)
            elif isinstance(ev, Said):
                if out is not None:
                    out.flush()  # after the lines so far
                (render.problem if ev.problem else render.note)(ev.text)
            elif isinstance(ev, Done):
                if out is not None:
                    out.flush()
                return ev.exit_code
    return 0


def _message_json(ev) -> dict:
    """MessageExt's fields, and `placeholder` ({manifest, origin}) when the record is rmqtool recover's
    placeholder for a damaged message (absent otherwise)."""
    d = ev.record.to_json()
    if ev.placeholder is not None:
        d["placeholder"] = ev.placeholder
    return d


def _cells(r) -> tuple:
    """The table cells of one decoded record (as run_table_rows gives them for many)."""
    return (r.physical_offset, r.total_size, local_time(r.store_timestamp), r.topic, r.queue_id, r.queue_offset,
            r.msg_id, " ".join(r.keys))
