"""rmqtool dump-cq: consume-queue units with the message each points at (mqadmin queryCq)."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from engine.views.times import local_time
from rmqtool import render, tables
from rmqtool.cli import handles_errors
from rmqtool.options import JsonOpt, QuietOpt, StoreOptions, store_options

#: The kinds of the lines dump-cq itself says (engine.findings.Note has the others: the logical truncation, a
#: damaged file): the queue's bounds; a unit's reason when the table leaves its note column out; how many units
#: shown cannot be used.
QUEUE_RANGE, UNIT_REASON, UNITS_UNUSABLE = "queue-range", "unit-reason", "units-unusable"

UNIT_COLUMNS = [
    tables.Column("queueOffset", "queueOffset"),
    tables.Column("commitLogOffset", "commitLogOffset"),
    tables.Column("size", "size"),
    tables.Column("tagsCode", "tagsCode", drop=5),
    tables.Column("status", "status", tables.FIXED),
    tables.Column("storeTime", "storeTime", tables.FIXED, drop=1),
    tables.Column("tags", "tags", tables.TEXT, drop=3, min_width=6),
    tables.Column("keys", "keys", tables.TEXT, drop=4, min_width=8),
    tables.Column("note", "note", tables.TEXT, drop=2, min_width=12),
]


@handles_errors
@store_options()
def dump_cq(
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic of the queue.")],
    queue_id: Annotated[int, typer.Option("--queue-id", "-q", help="Queue id.")],
    opts: StoreOptions = StoreOptions(),
    queue_offset: Annotated[Optional[int], typer.Option("--queue-offset", "-i", help="First unit to show (default: "
                                                        "the queue's min offset; lower units still in the files "
                                                        "can be asked for).")] = None,
    count: Annotated[int, typer.Option("--count", "-n", help="How many units from the start position (default 10, "
                                       "as mqadmin queryCq).")] = 10,
    no_check_crc: Annotated[bool, typer.Option("--no-check-crc", help="Do not verify body CRCs.")] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Consume-queue units with the message each points at (mqadmin queryCq).

    Each unit shows its commit-log offset, size and tagsCode, and the message there (store time, tags, keys),
    or why it cannot be read: EXPIRED (below the commit log's min offset: deleted), OUTSIDE (past the commit
    log, or not a valid unit), UNREADABLE (no valid record there), MISMATCH (a record of another queue or size),
    BLANK (a pre-fill unit), CUT (past the broker's max offset: a broker starting on the store cuts it, logical
    truncation; shown when --queue-offset asks for it). Exits 3 when a unit shown points outside the commit log or
    cannot be read, or when a damaged file ends the queue early (non-zero bytes after its last unit).
    """
    from engine.commands.dump_cq import check_dump_cq, dump_cq as run_dump_cq, exit_code, points_outside, unusable

    check_dump_cq(count, queue_offset)
    cfg = opts.settle()
    bad: dict[str, int] = {}
    with run_dump_cq(cfg, topic, queue_id, queue_offset, count, check_crc=not no_check_crc) as ans:
        d = ans.dump
        tables.note(f"{topic}/{queue_id}: min offset {d.minOffset}, max offset {d.maxOffset}; the files hold units "
                    f"from {d.firstUnit}" + (f" to {d.unitsEnd}" if d.unitsEnd > d.maxOffset else ""), QUEUE_RANGE,
                    topic=topic, queueId=queue_id, minOffset=d.minOffset, maxOffset=d.maxOffset,
                    firstUnitInFiles=d.firstUnit, unitsEndInFiles=d.unitsEnd)
        if d.note:
            tables.note(d.note)
        out = None if json_out else tables.Stream(UNIT_COLUMNS, _hints(ans.log_end(), d))
        for c in d.units:
            if unusable(c):
                bad[c.status] = bad.get(c.status, 0) + 1
            if json_out:
                render.emit_json(c.as_dict())
            else:
                out.row(_unit_row(c))
                if c.reason and not out.shows("note"):
                    render.problem(f"note: queue offset {c.queue_offset}: {c.status}: {c.reason}", UNIT_REASON,
                                   queueOffset=c.queue_offset, status=c.status, commitLogOffset=c.commit_log_offset)
        if out is not None:
            out.finish(empty="(no unit at or after this queue offset)")
    for p in d.damage:
        render.problem(f"problem: {topic}/{queue_id}: {p}", getattr(p, "kind", None), **getattr(p, "fields", {}))
    if bad:
        outside = sum(n for s, n in bad.items() if points_outside(s))
        detail = ", ".join(f"{n} {s}" for s, n in sorted(bad.items()))
        render.problem(f"note: {sum(bad.values())} unit(s) cannot be used ({detail}); {outside} point outside the "
                       "commit log", UNITS_UNUSABLE, units=sum(bad.values()), byStatus=dict(sorted(bad.items())),
                       pointOutside=outside)
    if exit_code(sum(bad.values()), d.damage):
        raise typer.Exit(exit_code(sum(bad.values()), d.damage))


def _unit_row(c) -> dict:
    r = c.record
    return {"queueOffset": c.queue_offset, "commitLogOffset": c.commit_log_offset, "size": c.size,
            "tagsCode": c.tags_code, "status": c.status,
            "storeTime": local_time(r.store_timestamp) if r else "",
            "tags": r.tags if r else "", "keys": " ".join(r.keys) if r else "",
            "note": c.reason}


def _hints(log_end: int, d) -> dict:
    return {"queueOffset": len(str(d.maxOffset)), "commitLogOffset": len(str(log_end)),
            "size": 6, "tagsCode": 11, "status": 10, "storeTime": 23, "tags": 10, "keys": 16, "note": 30}
