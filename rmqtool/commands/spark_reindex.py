"""rmqtool spark-reindex: rebuild the index files from the commit log, on Spark or in-process."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.views.times import local_time
from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.jobview import run_job, spark_conf_pairs
from rmqtool.options import (GEOMETRY_PANEL, INDEX_GEOMETRY, MASTER_VALUES, STORE, JsonOpt, QuietOpt, StoreOptions,
                             store_options)
from rmqtool.options import WorkersOpt

DEFAULT_MASTER = "local[*]"  # engine.jobs.framework.DEFAULT_MASTER (a test keeps them equal; importing it costs start-up)
SPARK_PANEL = "Spark"


def _render(r) -> None:
    title = "spark-reindex (dry run: nothing written)" if r.dry_run else "spark-reindex"
    rows = [
        ("master", r.master),
        ("segments", r.segments),
        ("messages", r.messages),
        ("keys indexed", r.keys_indexed),
        ("index files", f"{r.index_files} ({r.hash_slot_num} slots x {r.index_num} items)"),
        ("bytes read", f"{r.bytes_read} ({render.size_text(r.bytes_read)})"),
        ("elapsed", f"{r.seconds:.2f} s (scan {r.scan_seconds:.2f} s, build {r.build_seconds:.2f} s)"),
        ("throughput", f"{render.size_text(r.throughput)}/s, "
                       f"{r.messages / r.seconds if r.seconds else 0:,.0f} messages/s "
                       f"(scan stage {render.size_text(r.scan_throughput)}/s)"),
    ]
    if r.skipped_already_indexed:
        rows.append(("keys skipped (already indexed)", r.skipped_already_indexed))
    if r.rollback_records:
        rows.append(("rollback records (not indexed)", r.rollback_records))
    if r.length_mismatches:
        rows.append(("length-mismatch records (skipped)", r.length_mismatches))
    if not r.dry_run:
        rows.append(("written to", r.out_dir))
        if r.same_as_before is not None:
            rows.append(("identical to the previous index", "yes" if r.same_as_before else "no"))
        if r.backup_dir:
            rows.append(("old index kept in", r.backup_dir))
        elif r.replaced:
            rows.append(("old index", "removed (--replace)"))
        if r.index_msg_timestamp is not None:
            rows.append(("checkpoint indexMsgTimestamp", f"{r.index_msg_timestamp} "
                                                         f"({local_time(r.index_msg_timestamp)})"))
    render.kv_table(title, rows)
    if r.files:
        render.table("index files" + (" (planned)" if r.dry_run else ""), ["file", "entries", "full"],
                     [[f["name"], f["entries"], "yes" if f["full"] else "no"] for f in r.files])


OutOpt = Annotated[Optional[Path], typer.Option(
    "--out", "-o",
    help="Write the index files to this directory instead of <store>/index (the store's index and "
         "checkpoint are then left alone). Never the store root, nor "
         "anything that is, holds or lies in commitlog/, consumequeue/, config/, checkpoint, index/ or "
         "tiered_index_file/.")]
MasterOpt = Annotated[str, typer.Option(
    "--master", rich_help_panel=SPARK_PANEL, autocompletion=MASTER_VALUES,
    help="Spark master: local[*] (default, embedded Spark started by this command), local[N], "
         "spark://host:port, yarn, k8s://...; or 'inline' to run in this process without a JVM (small "
         "stores). On a cluster the commit log and the output directory must be on storage every "
         "executor can read at the same paths.")]
SparkConfOpt = Annotated[Optional[list[str]], typer.Option(
    "--conf", rich_help_panel=SPARK_PANEL,
    help="A Spark property KEY=VALUE, as spark-submit --conf (repeatable), e.g. "
         "spark.executor.memory=4g, spark.executor.cores=2, spark.pyspark.python=/usr/bin/python3.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Scan and plan, report, write nothing.")]
ReplaceOpt = Annotated[bool, typer.Option(
    "--replace", help="Delete the old index files once the new ones are in place (default: keep the "
                      "old index directory as <dir>.bak-<time>). Only index files are ever deleted: in "
                      "--out DIR only if rmqtool built DIR (it holds rmqtool-index.json); the store's old "
                      "index/ only if rmqtool built it (its marker is <store>/rmqtool-index.json, beside "
                      "index/, where the broker never looks) or it holds nothing but index files.")]
NewGeometryOpt = Annotated[bool, typer.Option(
    "--new-geometry", rich_help_panel=GEOMETRY_PANEL,
    help="Rebuild the index in the geometry given by --hash-slots and --max-index (or broker.conf) even though "
         "the store's index files have another one. Without it spark-reindex keeps the store's geometry: it "
         "refuses a configured geometry that the store's index files do not have.")]


@handles_errors
@store_options(STORE, INDEX_GEOMETRY)
def spark_reindex(
    opts: StoreOptions,
    out: OutOpt = None,
    master: MasterOpt = DEFAULT_MASTER,
    spark_conf: SparkConfOpt = None,
    dry_run: DryRunOpt = False,
    replace: ReplaceOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    new_geometry: NewGeometryOpt = False,
    workers: WorkersOpt = None,
) -> None:
    """Rebuild the index files from the commit log, byte-identical to the broker's own.

    One Spark task per commit-log segment range (up to 256 MiB), one per index file; --master inline needs no JVM.

    Takes the store lock and refuses a store with an abort file; a read-only store (a mounted snapshot) is read
    without the lock when --out DIR lies outside it (storeReadOnly in --json). Builds in a staging directory and publishes by
    renames after every task succeeded: the store's index/ is swapped whole, so a reader sees the old index or
    the new one. What an interrupted run left behind is finished or removed by the next run, which says so.

    Sets the checkpoint's indexMsgTimestamp to the newest rebuilt file, so a broker keeps them after a crash.

    The geometry is the store's: broker.conf, then --hash-slots/--max-index, then its index files (as the read
    commands take it). A configured geometry the store's index files do not have is refused unless
    --new-geometry asks for the whole index to be rebuilt in it.

    (Tiered index files: `rmqtool tiered reindex`.)
    """
    # (a typer command: one parameter per option)
    job = dict(out=out, master=master, dry_run=dry_run, replace=replace, spark_conf=spark_conf_pairs(spark_conf))
    from engine.commands.spark_reindex import spark_reindex as run_reindex

    cfg = opts.settle()
    run_job(lambda progress: run_reindex(cfg, progress=progress, new_geometry=new_geometry, **job),
            {"scan": "segment ranges scanned", "build": "index files built"}, json_out, _render)
