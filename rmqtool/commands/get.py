"""rmqtool get: messages by commit-log offset, message id or queue offset, read straight from the commit log.

Several messages stream (rmqtool.records): memory does not grow with their number and `| head` answers at once.
Damage is reported where it is met and in the exit code.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from engine.views.times import local_time
from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.options import (BrokerConfOpt, CommitLogSizeOpt, HashSlotsOpt, JsonOpt, MaxIndexOpt, QuietOpt, StoreOpt,
                             build_config, expand_path)
from rmqtool.records import MESSAGE, open_table, undecoded_note, undecoded_notes, warn_problems


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



#: Bytes of a --from-file list read at once (a few thousand lines: memory does not grow with the list).
READ_HINT = 1 << 15


def _lookups(offsets, msg_ids, from_file):
    """(kinds, texts) chunks for every message asked for, in order, streamed (a --from-file list is read as it
    goes: memory does not grow with its length). kinds[i] is "offset" or "msgId"; kinds is None for a chunk of
    the list, whose lines say by their form what they are (_kind)."""
    given = [("offset", str(o)) for o in offsets or []] + [("msgId", m) for m in msg_ids or []]
    if given:
        yield [k for k, _ in given], [t for _, t in given]
    if from_file is None:
        return
    stream = sys.stdin if str(from_file) == "-" else open(expand_path(from_file), encoding="utf-8")
    try:
        while True:
            lines = stream.readlines(READ_HINT)
            if not lines:
                return
            texts = [t for t in map(str.strip, lines) if t]
            if texts:
                yield None, texts
    finally:
        if stream is not sys.stdin:
            stream.close()


def _kind(text: str) -> str:
    return "offset" if text.lstrip("-").isdecimal() else "msgId"


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
def get(
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
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
    commitlog_file_size: CommitLogSizeOpt = None,
    hash_slots: HashSlotsOpt = None,
    max_index: MaxIndexOpt = None,
) -> None:
    """Messages by commit-log offset, message id (offset message id or UNIQ_KEY), or queue offset.

    One message is shown in full; several stream as NDJSON (--json) or one table row each.

    A message that is not where it was asked for, or not valid there, is reported on stderr: exit 2 when every
    such address does not exist (outside the commit log, not a message id) or only one was asked for, else 3.

    A queue offset outside the queue's [min, max) is an error naming both; a unit that points outside the
    commit log, or at a record of another topic, queue or queue offset, is reported (exit 3), never answered
    with that record.
    """
    from engine.broker.store import MessageStore
    from engine.errors import InvalidArgumentError

    by_queue = _check_get_args(offset, msg_id, from_file, topic, queue_id, queue_offset, count)
    cfg = build_config(store, broker_conf, hash_slots, max_index, commitlog_file_size=commitlog_file_size)
    if by_queue:
        with MessageStore(cfg) as st:
            _get_by_queue(st, topic, queue_id, queue_offset, count, json_out)
        return
    if not offset and not msg_id and from_file is None:
        raise InvalidArgumentError("give --offset, --msg-id, --from-file or --topic/--queue-id/--queue-offset")
    asked = _lookups(offset, msg_id, from_file)
    with MessageStore(cfg) as st:
        if len(offset or []) + len(msg_id or []) == 1 and from_file is None:
            _get_one(st, *next(asked), topic, json_out)
            return
        warn_problems(st)
        with render.gc_paused():
            bad, absent, total = _get_many(st, asked, json_out, topic)
    if bad:
        render.problem(f"{bad} of {total} message(s) could not be returned")
        # only addresses that do not exist (outside the log, not an id): bad input; anything else is damage
        raise typer.Exit(2 if absent == bad else 3)


def _get_one(st, kinds: list[str], texts: list[str], topic: Optional[str], json_out: bool) -> None:
    """The one message asked for, in full (exit 3 when its body does not decode)."""
    from engine.ops.read import find_msg_id

    kind, text = kinds[0], texts[0]
    found = None if kind == "offset" else find_msg_id(st, text, topic)
    rec = st.get(int(text)) if found is None else found.record
    warn_problems(st)  # after the answer: a failed lookup stays one error line
    _show_one(rec, json_out)
    for n in found.notes() if found is not None else ():
        render.note(n)
    if undecoded_note(rec):
        raise typer.Exit(3)


def _message_json(rec) -> dict:
    """MessageExt's fields, and `placeholder` ({manifest, origin}) when the record is rmqtool recover's
    placeholder for a damaged message (absent otherwise)."""
    from engine.ops.recovery.placeholder import is_placeholder, placeholder_info

    d = rec.to_json()
    if is_placeholder(rec):
        d["placeholder"] = placeholder_info(rec)
    return d


def _placeholder_note(rec) -> None:
    from engine.ops.recovery.placeholder import is_placeholder, placeholder_note

    if is_placeholder(rec):
        render.note(f"note: {placeholder_note(rec)}")


def _show_one(rec, json_out: bool) -> None:
    if json_out:
        render.emit_json(_message_json(rec))
    else:
        _show_message(rec)
    _placeholder_note(rec)


def _check_get_args(offset, msg_id, from_file, topic, queue_id, queue_offset, count) -> bool:
    """True for a read by queue offset; InvalidArgumentError for options that do not go together."""
    from engine.errors import InvalidArgumentError

    if queue_offset is None:
        if queue_id is not None:
            raise InvalidArgumentError("--queue-id goes with --queue-offset (and --topic)")
        if count is not None:
            raise InvalidArgumentError("--count goes with --queue-offset (give several --offset or --msg-id instead)")
        return False
    if offset or msg_id or from_file is not None:
        raise InvalidArgumentError("give --queue-offset or --offset/--msg-id/--from-file, not both")
    if topic is None or queue_id is None:
        raise InvalidArgumentError("--queue-offset needs --topic and --queue-id")
    return True


def _get_by_queue(st, topic: str, queue_id: int, queue_offset: int, count: Optional[int], json_out: bool) -> None:
    """Units from a queue offset and their messages (engine.ops.read.read_by_queue_offset), rendered as get
    renders messages: one in full without --count, else streamed."""
    from engine.ops.read import read_by_queue_offset

    qr = read_by_queue_offset(st, topic, queue_id, queue_offset, 1 if count is None else count)
    warn_problems(st)
    if qr.note:
        render.note(qr.note)
    if count is None:
        c = next(qr.units)
        if c.record is None or c.status not in ("OK", "PLACEHOLDER"):
            render.problem(f"error: {topic}/{queue_id} queue offset {queue_offset}: {c.status}: {c.reason}")
            raise typer.Exit(3)
        _show_one(c.record, json_out)
        if undecoded_note(c.record):
            raise typer.Exit(3)
        return
    out, table = open_table(json_out)
    bad = 0
    for c in qr.units:
        if c.status not in ("OK", "PLACEHOLDER") or c.record is None:
            bad += 1
            out.flush()
            render.problem(f"error: {topic}/{queue_id} queue offset {c.queue_offset}: {c.status}: {c.reason}")
            continue
        bad += _stream_one(out, table, c.record)
    out.flush()
    if qr.count < qr.asked:
        render.note(f"--count {qr.asked} cut to {qr.count}: the max offset of {topic}/{queue_id} is {qr.maxOffset}")
    if bad:
        render.problem(f"{bad} of {qr.count} unit(s) could not be answered with their message")
        raise typer.Exit(3)


def _stream_one(out, table, rec) -> int:
    """One message as a line of a stream (NDJSON, or a table row when there is a table); 1 when its compressed
    body does not decode (said on stderr after the lines so far), else 0."""
    if table is None:
        out.line(json.dumps(_message_json(rec), ensure_ascii=False))
    else:
        table.rows([_cells(rec)], MESSAGE)
    _placeholder_note(rec)
    if rec.compression():
        out.flush()
        return int(undecoded_note(rec))
    return 0


def _cells(r) -> tuple:
    """The table cells of one decoded record (as run_table_rows gives them for many)."""
    return (r.physical_offset, r.total_size, local_time(r.store_timestamp), r.topic, r.queue_id, r.queue_offset,
            r.msg_id, " ".join(r.keys))


def _uniq_fallback(st, text: str, topic: Optional[str]) -> tuple:
    """(the answer for the UNIQ_KEY `text` (engine.ops.read.MsgIdAnswer), "") for an id that is no valid offset
    message id, else (None, why neither form found a message)."""
    from engine.errors import InvalidArgumentError
    from engine.ops.read import find_msg_id

    try:
        return find_msg_id(st, text, topic), ""
    except InvalidArgumentError as e:
        return None, str(e)


def _parse_chunk(kinds, texts: list[str]) -> tuple[list[int], list | None, dict]:
    """(commit-log offsets, expected (store host, port) of each or None, {index: why it cannot be looked up}) of
    a chunk of lookups; an offset of -1 lies in no segment (its error is in the dict)."""
    from engine.broker.commitlog.message import decode_offset_msg_id

    if kinds is None:
        digits = "".join(texts)
        if digits.isascii() and digits.isdigit():  # a list of offsets only: converted at once
            offsets = list(map(int, texts))
            if max(offsets) < 2**63:
                return offsets, None, {}
    offsets, hosts, errors = [], [], {}
    for i, text in enumerate(texts):
        if (kinds[i] if kinds else _kind(text)) == "offset":
            off = int(text)
            hosts.append(None)
        else:
            try:
                host, port, off = decode_offset_msg_id(text)
            except ValueError as e:
                errors[i], off = str(e), -1
            hosts.append((host, port) if i not in errors else None)
        if not 0 <= off < 2**63 and i not in errors:
            errors[i] = f"offset {off} is out of range"
        offsets.append(off if i not in errors else -1)  # -1: in no segment, reported with errors[i]
    return offsets, hosts, errors


def _get_many(st, asked, json_out: bool, topic: Optional[str] = None) -> tuple[int, int, int]:
    """Stream the messages asked for, in order, formatted a stretch at a time (engine.broker.commitlog.logrun.lookup_runs)."""
    from engine.broker.commitlog.logrun import RecordRun, lookup_runs
    from engine.views.recordjson import run_table_rows
    from engine.views.runjson import run_json_text

    out, table = open_table(json_out)
    bad = absent = total = 0
    for kinds, texts in asked:
        total += len(texts)
        offsets, hosts, errors = _parse_chunk(kinds, texts)
        for item in lookup_runs(st.commitlog, offsets, hosts, check_crc=True):
            if isinstance(item, RecordRun):
                if json_out:
                    out.data(run_json_text(item))
                else:
                    table.rows(run_table_rows(item), MESSAGE)
                bad += undecoded_notes(out, item)
                continue
            i, reason = item
            kind, text = kinds[i] if kinds else _kind(texts[i]), texts[i]
            why = ""
            if kind == "msgId":
                found, why = _uniq_fallback(st, text, topic)
                if found is not None:
                    bad += _stream_one(out, table, found.record)
                    notes = found.notes()
                    if notes:
                        out.flush()
                    for n in notes:
                        render.note(n)
                    continue
            bad += 1
            absent += i in errors or st.commitlog.queue.find(offsets[i]) is None
            out.flush()
            render.problem(f"error: {why}" if why else f"error: {kind} {text}: " + (
                errors[i] if i in errors else f"no valid message at commit-log offset {offsets[i]}: {reason}"))
    out.flush()
    return bad, absent, total


