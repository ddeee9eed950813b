"""rmqtool verify-cq: consume queues (files or RocksDB) checked against the commit log, or the file queues
compared with the RocksDB queues of the same store."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from rmqtool import render, tables
from rmqtool.cli import handles_errors
from rmqtool.options import JsonOpt, QuietOpt, StoreOptions, store_options

PROBLEM_COLUMNS = [
    tables.Column("topic", "topic", tables.TEXT, min_width=12),
    tables.Column("queueId", "queueId"),
    tables.Column("queueOffset", "queueOffset"),
    tables.Column("commitLogOffset", "commitLogOffset", drop=2),
    tables.Column("reason", "reason", tables.TEXT, min_width=20),
]

DIFF_COLUMNS = [
    tables.Column("topic", "topic", tables.TEXT, min_width=12),
    tables.Column("queueId", "queueId"),
    tables.Column("queueOffset", "queueOffset"),
    tables.Column("field", "field", tables.TEXT),
    tables.Column("file", "file", tables.TEXT),
    tables.Column("rocksdb", "rocksdb", tables.TEXT),
]


@handles_errors
@store_options()
def verify_cq(
    opts: StoreOptions,
    topic: Annotated[Optional[str], typer.Option("--topic", "-t", help="Only this topic's queues.")] = None,
    source: Annotated[Optional[str], typer.Option(
        "--source", help="Which consume queues to verify: file or rocksdb (default: the ones the broker serves "
                         "reads from).")] = None,
    compare: Annotated[bool, typer.Option(
        "--compare", help="Compare the file queues with the RocksDB queues of the store instead (a "
                          "double-writing broker's, or after a migration): queues, min and max offsets, "
                          "units.")] = False,
    no_check_crc: Annotated[bool, typer.Option("--no-check-crc", help="Do not verify body CRCs.")] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Check every consume-queue unit against the commit log, in files or in RocksDB.

    Every unit between a queue's min and max offsets must point at a valid record of its topic and queue with
    the unit's queue offset, size and tagsCode (and, in RocksDB, its store time); RocksDB entries outside the
    broker's key layout, units missing between min and max, and units of queues the offset table does not name
    are problems. With --compare, the file queues and the RocksDB queues are compared with each other (no
    commit log read). Exits 3 when a problem or a difference is found, naming the first ones.
    """
    from engine.commands.verify_cq import verify_cq as run_verify

    cfg = opts.settle()
    with render.progress(None, "queues") as bar:
        task = bar.add_task("queues", total=None)
        tick = lambda done, total: bar.update(task, completed=done, total=total)  # noqa: E731
        rep = run_verify(cfg, topic, source, compare, check_crc=not no_check_crc, progress=tick)
    if compare:
        if json_out:
            render.emit_json(rep.as_dict())
        else:
            rows = [dict(d.as_dict(), file=str(d.file), rocksdb=str(d.rocksdb)) for d in rep.firstDifferences]
            tables.table(rows, DIFF_COLUMNS, empty="(no difference)")
            print(f"{rep.queues} queue(s), {rep.unitsCompared} unit(s) compared")
            print(f"{rep.onlyInFiles} only in files, {rep.onlyInRocksdb} only in RocksDB, {rep.boundsDiffer} with "
                  f"other bounds, {rep.unitsDiffer} unit(s) differ")
        if rep.differ:
            raise typer.Exit(3)
        return
    for n in rep.notes:
        tables.note(n)
    if json_out:
        render.emit_json(rep.as_dict())
    else:
        tables.table([p.as_dict() for p in rep.firstProblems], PROBLEM_COLUMNS, empty="(no problem)")
        print(f"{rep.source} consume queues: {rep.queues} queue(s), {rep.units} unit(s) checked")
        print(f"{rep.problemCount} problem(s)")
    if rep.problemCount:
        raise typer.Exit(3)
