"""rmqtool get and dump-commitlog: read messages straight from the commit log.

Both stream: every record is formatted from its bytes and written as it is read (NDJSON, or a plain table
with fixed columns, one row per line), so memory does not grow with the number of messages and `| head`
answers at once. Damage is reported where it is met (a CORRUPT, MISPLACED or GAP entry) and in the exit code.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.options import BrokerConfOpt, CommitLogSizeOpt, JsonOpt, StoreOpt, build_config, expand_path

DUMP_LIMIT = 1_000_000_000
#: Lines written between two flushes once the first line is out (the first goes out alone: `| head -1`).
FLUSH_LINES = 512
TABLE_HEADER = ("offset", "type", "size", "storeTime", "topic", "queueId", "queueOffset", "msgId / note", "keys")


class LineWriter:
    """Lines to stdout, flushed after the first one and then every FLUSH_LINES."""

    def __init__(self):
        self._buf: list[str] = []
        self._first = True
        self.write = self._buf.append

    def line(self, text: str) -> None:
        self._buf.append(text)
        if self._first or len(self._buf) >= FLUSH_LINES:
            self._first = False
            self.flush()

    def flush(self) -> None:
        if self._buf:
            sys.stdout.write("\n".join(self._buf) + "\n")
            self._buf.clear()
        sys.stdout.flush()


def table_row(offset, kind: str, size="", time="", topic="", queue_id="", queue_offset="", note="", keys="") -> str:
    """One row of the streaming table: fixed widths, wider values push the row on (never cut)."""
    return (f"{offset:>20}  {kind:<15}  {size!s:>7}  {time:<29}  {topic:<24}  {queue_id!s:>7}  "
            f"{queue_offset!s:>11}  {note:<32}  {keys}").rstrip()


def _warn_problems(st) -> None:
    for p in st.problems:
        render.note(f"warning: {p.detail}")


def _show_message(rec) -> None:
    j = rec.to_json()
    pairs = [(k, j[k]) for k in ("msgId", "topic", "queueId", "queueOffset", "commitLogOffset", "storeSize",
                                 "bodyCRC", "flag", "sysFlag", "transactionType", "magicVersion", "reconsumeTimes",
                                 "preparedTransactionOffset", "bornHost", "storeHost")]
    pairs += [("bornTimestamp", f"{j['bornTimestamp']} ({render.fmt_time(j['bornTimestamp'])})"),
              ("storeTimestamp", f"{j['storeTimestamp']} ({render.fmt_time(j['storeTimestamp'])})"),
              ("keys", " ".join(j["keys"])), ("tags", j["tags"]), ("uniqKey", j["uniqKey"])]
    pairs += [(f"property {k}", v) for k, v in sorted(j["properties"].items())]
    if "compression" in j:
        pairs.append(("compression", j["compression"]))
    pairs.append(("body" + (" (base64)" if j.get("bodyEncoding") else ""), j["body"]))
    render.kv_table(f"message at {rec.physical_offset}", pairs)


def _lookups(offsets, msg_ids, from_file) -> list[tuple[str, str]]:
    """("offset" | "msgId", text) for every message asked for, in order."""
    out = [("offset", str(o)) for o in offsets or []] + [("msgId", m) for m in msg_ids or []]
    if from_file is not None:
        if str(from_file) == "-":
            lines = sys.stdin.read().splitlines()
        else:
            with open(expand_path(from_file), encoding="utf-8") as f:
                lines = f.read().splitlines()
        for line in lines:
            t = line.strip()
            if t:
                out.append(("offset" if t.lstrip("-").isdigit() else "msgId", t))
    return out


def _resolve(st, kind: str, text: str) -> int:
    """The commit-log offset of one lookup (InvalidArgumentError when it cannot be one)."""
    from engine.broker.message import decode_offset_msg_id
    from engine.errors import InvalidArgumentError

    if kind == "offset":
        off = int(text)
        if off < 0:
            raise InvalidArgumentError(f"offset {off} is negative")
        if off >= 2**63:
            raise InvalidArgumentError(f"offset {off} is out of range: it must fit a Java long")
        return off
    try:
        return decode_offset_msg_id(text)[2]
    except ValueError as e:
        raise InvalidArgumentError(str(e)) from None


@handles_errors
def get(
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    offset: Annotated[Optional[List[int]], typer.Option("--offset", "-o", help="Commit-log (physical) offset "
                                                        "(repeatable).")] = None,
    msg_id: Annotated[Optional[List[str]], typer.Option("--msg-id", "-m", help="Offset message id (store host + "
                                                        "port + offset, as mqadmin queryMsgById takes; repeatable).")] = None,
    from_file: Annotated[Optional[Path], typer.Option("--from-file", "-f", help="Read offsets or message ids, one "
                                                      "per line ('-' for stdin).")] = None,
    json_out: JsonOpt = False,
    commitlog_file_size: CommitLogSizeOpt = None,
) -> None:
    """Messages by commit-log offset or offset message id.

    One message is shown in full; several stream as NDJSON (--json) or one table row each. A message that is
    not where it was asked for, or not valid there, is reported on stderr and the exit code is 3 (2 when it
    was the only one asked for).
    """
    from engine.broker.store import MessageStore
    from engine.errors import InvalidArgumentError

    asked = _lookups(offset, msg_id, from_file)
    if not asked:
        raise InvalidArgumentError("give --offset, --msg-id or --from-file")
    cfg = build_config(store, broker_conf, commitlog_file_size=commitlog_file_size)
    with MessageStore(cfg) as st:
        if len(asked) == 1 and from_file is None:
            kind, text = asked[0]
            rec = st.get(_resolve(st, kind, text)) if kind == "offset" else st.get_by_msg_id(text)
            _warn_problems(st)  # after the answer: a failed lookup stays one error line
            if json_out:
                render.emit_json(rec.to_json())
            else:
                _show_message(rec)
            return
        _warn_problems(st)
        with render.gc_paused():
            bad = _get_many(st, asked, json_out)
    if bad:
        render.note(f"{bad} of {len(asked)} message(s) could not be returned")
        raise typer.Exit(3)


def _get_many(st, asked, json_out: bool) -> int:
    from engine.broker.commitlog import MISPLACED
    from engine.broker.message import VALID
    from engine.broker.recordjson import json_line, table_cells
    from engine.errors import StoreError

    out = LineWriter()
    if not json_out:
        out.line(table_row(*TABLE_HEADER))
    cl = st.commitlog
    bad = 0
    for kind, text in asked:
        try:
            off = _resolve(st, kind, text)
        except StoreError as e:
            bad += 1
            render.note(f"error: {kind} {text}: {e}")
            continue
        r = cl.check_at(off, check_crc=True)
        if r.status == VALID and kind == "msgId" and r.record.msg_id.upper() != text.upper():
            r.status, r.reason = MISPLACED, f"the message there has id {r.record.msg_id}"
        if r.status != VALID:
            bad += 1
            out.flush()
            render.note(f"error: {kind} {text}: no valid message at commit-log offset {off}: "
                        f"{r.reason or r.status.lower()}")
            continue
        seg = cl.queue.find(off)
        buf, pos = cl.queue.buffer(seg), off - seg.start
        if json_out:
            out.line(json_line(buf, pos))
        else:
            c = table_cells(buf, pos)
            out.line(table_row(off, "MESSAGE", c[0], c[1], c[2], c[3], c[4], c[6], c[5]))
    out.flush()
    return bad


@handles_errors
def dump_commitlog(
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    from_offset: Annotated[Optional[int], typer.Option("--from", help="Start at this record boundary (default: the "
                                                       "first segment).")] = None,
    count: Annotated[Optional[int], typer.Option("--count", "-n", help="At most this many entries.")] = None,
    no_check_crc: Annotated[bool, typer.Option("--no-check-crc", help="Do not verify body CRCs.")] = False,
    json_out: JsonOpt = False,
    commitlog_file_size: CommitLogSizeOpt = None,
) -> None:
    """Messages in commit-log order, with BLANK fillers, corrupt records, misplaced segments and gaps reported
    (not skipped silently).

    Streams NDJSON (--json) or a plain table, one row per line. Exits 3 when something damaged was met.
    """
    from engine.broker.message import BLANK, VALID
    from engine.broker.store import MessageStore
    from engine.errors import InvalidArgumentError

    if count is not None and not 0 < count <= DUMP_LIMIT:
        raise InvalidArgumentError(f"--count {count} is out of range 1..{DUMP_LIMIT}")
    if from_offset is not None and not 0 <= from_offset < 2**63:
        raise InvalidArgumentError(f"--from {from_offset} is negative" if from_offset < 0 else
                                   f"--from {from_offset} is out of range: it must fit a Java long")
    cfg = build_config(store, broker_conf, commitlog_file_size=commitlog_file_size)
    with MessageStore(cfg) as st:
        _warn_problems(st)
        if from_offset is not None:
            r = st.commitlog.check_at(from_offset, check_crc=False, check_position=False)
            if r.status not in (VALID, BLANK):
                raise InvalidArgumentError(f"--from {from_offset} is not a record boundary: {r.reason}")
        with render.gc_paused():
            bad = _dump(st, from_offset, count, not no_check_crc, json_out)
    if bad:
        render.note(f"{bad} damaged entr{'y' if bad == 1 else 'ies'} found (corrupt, misplaced or missing)")
        raise typer.Exit(3)


def _dump(st, start, count, check_crc: bool, json_out: bool) -> int:
    """Write the entries; returns how many were damage (not VALID, not BLANK)."""
    import json

    from engine.broker.message import BLANK, VALID
    from engine.broker.recordjson import json_line, table_cells

    out = LineWriter()
    if not json_out:
        out.line(table_row(*TABLE_HEADER))
    bad = n = 0
    line = out.line
    for e in st.commitlog.scan(start, check_crc=check_crc):
        if count is not None and n >= count:
            break
        n += 1
        kind = e.kind
        if kind == VALID:
            if json_out:
                line(json_line(e.buf, e.pos, ', "type": "MESSAGE"'))
            else:
                c = table_cells(e.buf, e.pos)
                line(table_row(e.offset, "MESSAGE", c[0], c[1], c[2], c[3], c[4], c[6], c[5]))
            continue
        bad += kind != BLANK
        if json_out:
            line(json.dumps({"type": kind, "commitLogOffset": e.offset, "size": e.size, "segment": e.segment,
                             "reason": e.reason}, ensure_ascii=False))
        else:
            line(table_row(e.offset, kind, e.size if e.size >= 0 else "", note=e.reason))
    out.flush()
    return bad
