"""rmqtool print-msg: the messages of a topic stored in a time range (mqadmin printMsg / printMsgByQueue)."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from engine.views.times import local_time
from rmqtool import render, tables, times
from rmqtool.cli import handles_errors
from rmqtool.options import JsonOpt, QuietOpt, StoreOptions, store_options

SHOWN_PROBLEMS = 20
#: The kinds of the lines print-msg itself says (engine.findings.Note has the others: engine.broker.consumequeue
#: .timerange's): no message in the range; a message's note (its unit's, by queue and offset); how many units of the
#: range could not be read.
NO_MESSAGE, MESSAGE_NOTE, UNITS_UNREADABLE = "no-message", "message-note", "units-unreadable"

COLUMNS = [
    tables.Column("queueId", "queueId"),
    tables.Column("queueOffset", "queueOffset"),
    tables.Column("storeTime", "storeTime", tables.FIXED),
    tables.Column("tags", "tags", tables.TEXT, min_width=6),
    tables.Column("keys", "keys", tables.TEXT, drop=2, min_width=8),
    tables.Column("body", "body", tables.TEXT, drop=1, min_width=12),
    tables.Column("commitLogOffset", "commitLogOffset", drop=3),
    tables.Column("msgId", "msgId", tables.FIXED, drop=4),
]


@handles_errors
@store_options()
def print_msg(
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic whose messages to print.")],
    begin: Annotated[str, typer.Option("--begin", "-b", help=times.BEGIN_HELP)],
    end: Annotated[Optional[str], typer.Option("--end", "-e", help=times.END_HELP + " Default: until the end "
                                               "(the newest message).")] = None,
    opts: StoreOptions = StoreOptions(),
    queue_id: Annotated[Optional[int], typer.Option("--queue-id", "-q", help="Only this queue (mqadmin "
                                                    "printMsgByQueue); default: every queue of the topic.")] = None,
    tags: Annotated[Optional[str], typer.Option("--tags", help="subExpression: a tag, tags joined by '||' "
                                                "('TagA || TagB'), or '*' for every message (default).")] = None,
    max_num: Annotated[Optional[int], typer.Option("--count", "-n", help="At most this many messages (default: all "
                                                   "of them); a cut is reported on stderr.")] = None,
    no_check_crc: Annotated[bool, typer.Option("--no-check-crc", help="Do not verify body CRCs of the messages "
                                               "printed.")] = False,
    scan_log: Annotated[bool, typer.Option("--scan-log", help="Read the store time of every message of the "
                                           "queues from the commit log (the whole log) instead of bounding them "
                                           "by the index files first: the check of the default search.")] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Messages of a topic whose store time lies in [--begin, --end] (without --end: from --begin on), found
    through the consume queues.

    Each unit's store time is bounded by the index files' items (to the second, whatever order the times have
    along the queue: a broker's clock may have stepped back) and, where they cannot decide, read from the
    message's head; then only the messages in the range are read, queue by queue in queue-offset order. One line
    on stderr says what was searched and how much of the log was read; a note names a queue whose store times go
    back. --json prints one object per message in the shape of `rmqtool get --json` (RocketMQ MessageExt names).
    Exits 3 when a unit in the range points at a message that cannot be read.
    """
    from engine.commands.print_msg import check_print_msg, exit_code, print_msg as run_print_msg

    check_print_msg(max_num)
    b, e = times.parse_range(begin, end)
    cfg = opts.settle()
    with run_print_msg(cfg, topic, b, e, queue_id, tags, check_crc=not no_check_crc, scan_log=scan_log) as ans:
        scan = ans.scan
        undecoded: list[str] = []
        for n in scan.notes:
            tables.note(n)
        shown, cut = _emit(scan, max_num, json_out, _hints(ans.log_end(), scan), undecoded)
        if cut:
            if scan.tag_filter.tags is None:
                tables.cut_note(shown, "--count", "messages", total=scan.candidates)
            else:
                tables.cut_note(shown, "--count", "messages", at_least=scan.candidates)
        elif not shown:
            span = (f"in [{local_time(b)}, {local_time(e)}]" if end is not None
                    else f"at or after {local_time(b)}")
            tables.note(f"no message of {topic} stored {span}"
                        + (f" with tags {scan.tag_filter.expression}" if scan.tag_filter.tags else ""), NO_MESSAGE,
                        topic=topic, begin=b, end=e if end is not None else None,
                        tags=scan.tag_filter.expression if scan.tag_filter.tags else None)
        tables.note(scan.searched.line())
    for u in undecoded:
        tables.note(u)
    _report(scan.problems)
    if exit_code(len(undecoded), scan.problems):
        raise typer.Exit(exit_code(len(undecoded), scan.problems))


def _emit(scan, max_num: int | None, json_out: bool, hints: dict, undecoded: list[str]) -> tuple[int, bool]:
    """Print the messages as they are found; (how many, whether --count cut off a further one). Messages whose
    compressed body does not decode are added to `undecoded`."""
    from engine.commands.print_msg import placeholder, undecodable

    shown = 0
    table = None if json_out else tables.Stream(COLUMNS, hints)
    for found in scan:
        if max_num is not None and shown >= max_num:
            return shown, True
        shown += 1
        if json_out:
            d = found.record.to_json()
            info = placeholder(found.record)
            if info is not None:
                d["placeholder"] = info
            render.emit_json(d)
        else:
            table.row(_row(found))
        if found.note:  # a Note of its unit (a placeholder, pitfall 17, multi-dispatch) with where it is
            tables.note(f"queue {found.queue_id} offset {found.queue_offset}: {found.note}",
                        getattr(found.note, "kind", MESSAGE_NOTE), **{**getattr(found.note, "fields", {}),
                        "queueId": found.queue_id, "queueOffset": found.queue_offset})
        bad = undecodable(found)
        if bad is not None:
            undecoded.append(bad)
    return shown, False


def _row(found) -> dict:
    r = found.record
    j = r.to_json()
    return {"queueId": found.queue_id, "queueOffset": found.queue_offset,
            "storeTime": local_time(r.store_timestamp), "tags": r.tags, "keys": " ".join(r.keys),
            "body": render.body_preview(j, 60), "commitLogOffset": r.physical_offset, "msgId": r.msg_id}


def _hints(log_end: int, scan) -> dict:
    biggest = max((r.maxOffset for r in scan.ranges), default=0)
    ids = max((r.queueId for r in scan.ranges), default=0)
    return {"queueId": len(str(ids)), "queueOffset": len(str(biggest)), "storeTime": 23, "tags": 12, "keys": 24,
            "body": 40, "commitLogOffset": len(str(log_end)), "msgId": 32}


def _report(problems: list[str]) -> None:
    if not problems:
        return
    for p in problems[:SHOWN_PROBLEMS]:
        render.problem(f"note: {p}", getattr(p, "kind", None), **getattr(p, "fields", {}))
    more = len(problems) - SHOWN_PROBLEMS
    render.problem(f"note: {len(problems)} unit(s) in the range could not be read" + (f" ({more} not listed)" if more > 0 else ""),
                   UNITS_UNREADABLE, units=len(problems), notListed=max(more, 0))
