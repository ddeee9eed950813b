"""rmqtool spark-reindex: rebuild the index files from the commit log, on Spark or in-process."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.reindex import DEFAULT_MASTER, ReindexResult, spark_reindex
from rmqtool import render
from rmqtool.app import command
from rmqtool.options import (BrokerConfOpt, CommitLogSizeOpt, HashSlotsOpt, JsonOpt, MaxIndexOpt, StoreOpt,
                             build_config)

SPARK_PANEL = "Spark"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _render(r: ReindexResult) -> None:
    title = "spark-reindex (dry run: nothing written)" if r.dry_run else "spark-reindex"
    rows = [
        ("master", r.master),
        ("segments", r.segments),
        ("messages", r.messages),
        ("keys indexed", r.keys_indexed),
        ("index files", f"{r.index_files} ({r.hash_slot_num} slots x {r.index_num} items)"),
        ("bytes read", f"{r.bytes_read} ({_size(r.bytes_read)})"),
        ("elapsed", f"{r.seconds:.2f} s (scan {r.scan_seconds:.2f} s, build {r.build_seconds:.2f} s)"),
        ("throughput", f"{_size(r.throughput)}/s, {r.messages / r.seconds if r.seconds else 0:,.0f} messages/s "
                       f"(scan stage {_size(r.scan_throughput)}/s)"),
    ]
    if r.skipped_already_indexed:
        rows.append(("keys skipped (already indexed)", r.skipped_already_indexed))
    if r.rollback_records:
        rows.append(("rollback records (not indexed)", r.rollback_records))
    if r.length_mismatches:
        rows.append(("length-mismatch records (skipped)", r.length_mismatches))
    if not r.dry_run:
        rows.append(("written to", r.out_dir))
        if r.backup_dir:
            rows.append(("old index kept in", r.backup_dir))
        elif r.replaced:
            rows.append(("old index", "removed (--replace)"))
        if r.index_msg_timestamp is not None:
            rows.append(("checkpoint indexMsgTimestamp", f"{r.index_msg_timestamp} "
                                                         f"({render.fmt_time(r.index_msg_timestamp)})"))
    render.kv_table(title, rows)
    if r.files:
        render.table("index files" + (" (planned)" if r.dry_run else ""), ["file", "entries", "full"],
                     [[f["name"], f["entries"], "yes" if f["full"] else "no"] for f in r.files])


@command("spark-reindex")
def spark_reindex_cmd(
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    out: Annotated[Optional[Path], typer.Option(
        "--out", "-o",
        help="Write the index files to this directory instead of <store>/index (the store's index and "
             "checkpoint are then left alone).")] = None,
    master: Annotated[str, typer.Option(
        "--master", rich_help_panel=SPARK_PANEL,
        help="Spark master: local[*] (default, embedded Spark started by this command), local[N], "
             "spark://host:port, yarn, k8s://...; or 'inline' to run in this process without a JVM (small "
             "stores). On a cluster the commit log and the output directory must be on storage every "
             "executor can read at the same paths.")] = DEFAULT_MASTER,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Scan and plan, report, write nothing.")] = False,
    replace: Annotated[bool, typer.Option(
        "--replace", help="Delete the old index files once the new ones are in place (default: keep the "
                          "old index directory as <dir>.bak-<time>).")] = False,
    json_out: JsonOpt = False,
    hash_slots: HashSlotsOpt = None,
    max_index: MaxIndexOpt = None,
    commitlog_file_size: CommitLogSizeOpt = None,
) -> None:
    """Rebuild the index files from the commit log, byte-identical to the broker's own.

    One Spark partition per commit-log segment, one task per index file; --master inline needs no JVM.

    Takes the store lock and refuses a store with an abort file. Publishes by rename after every task succeeded.

    Sets the checkpoint's indexMsgTimestamp to the newest rebuilt file, so a broker keeps them after a crash.
    """
    cfg = build_config(store, broker_conf, hash_slots, max_index, commitlog_file_size)
    labels = {"scan": "segments scanned", "build": "index files built"}
    with render.progress(None, "spark-reindex") as bar:
        tasks: dict[str, int] = {}

        def progress(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(labels.get(phase, phase), total=total)
            bar.update(tasks[phase], completed=done, total=total)

        result = spark_reindex(cfg, out=out, master=master, dry_run=dry_run, replace=replace, progress=progress)
    for a in result.anomalies:
        render.note(f"warning: {a}")
    if json_out:
        render.emit_json(result.as_dict())
    else:
        _render(result)

