"""rmqtool tiered reindex: build the compacted tiered index files a tiered store would have uploaded had every queue
been copied from its first message, from the local commit log, byte-identical to IndexStoreFile's put loop then
compaction."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.commands.tiered import NewTieredGeometryOpt
from rmqtool.options import MASTER_VALUES, TIER, TIERED_GEOMETRY, JsonOpt, QuietOpt, StoreOptions, store_options


OutOpt = Annotated[Optional[Path], typer.Option(
    "--out", "-o", help="Directory to write the compacted tiered index files to (required; must not be the store "
    "nor anything inside commitlog/, consumequeue/, config/, index/ or tiered_index_file/). Query them with "
    "`rmqtool tiered query-key --tiered-dir DIR`.")]
MasterOpt = Annotated[str, typer.Option(
    "--master", autocompletion=MASTER_VALUES,
    help="Spark master: local[*] (default), local[N], spark://host:port, yarn, k8s://...; or 'inline' "
    "to run in this process without a JVM.")]
SparkConfOpt = Annotated[Optional[list[str]], typer.Option(
    "--conf", help="A Spark property KEY=VALUE, as spark-submit --conf (repeatable).")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Scan and plan, report, write nothing.")]
ReplaceOpt = Annotated[bool, typer.Option(
    "--replace", help="Replace --out's old tiered index files when rmqtool built that directory.")]


@handles_errors
@store_options(TIER, TIERED_GEOMETRY + ("commitlog_file_size",))
def reindex(
    opts: StoreOptions,
    out: OutOpt = None,
    master: MasterOpt = "local[*]",
    spark_conf: SparkConfOpt = None,
    dry_run: DryRunOpt = False,
    replace: ReplaceOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    new_geometry: NewTieredGeometryOpt = False,
) -> None:
    """Build the compacted tiered index files a tiered store would have uploaded had every queue been copied from
    its first message, from the local commit log, byte-identical to IndexStoreFile's put loop then compaction.

    Records with a consume-queue unit (PREPARED/ROLLBACK skipped) of topics the tiered store keeps (its topic
    filter: no system, rmq_sys_*, %LMQ% or cluster/broker-named topic; the broker name comes from --broker-name,
    broker.conf or the tiered metadata, and is required); topic ids from the tiered metadata (new topics after
    its largest id); item offsets in each queue's tiered commit log from 0. Takes the store lock; the store's
    index, checkpoint and tiered_index_file/ are left alone.

    The geometry is the store's: broker.conf, then --hash-slots/--max-index, then its tiered index files (the
    local ones and the INDEX segments of the tier, -T or tieredStoreFilePath). A configured geometry those files do
    not have is refused unless --new-geometry asks for it."""
    # (a typer command: one parameter per option)
    from engine.commands.tiered import reindex as run_reindex, reindex_json, reindex_request
    from rmqtool.jobview import run_job, spark_conf_pairs
    from rmqtool.render_tiered import render_tiered_reindex

    render.set_quiet(quiet)
    req = reindex_request(store=opts.store, broker_conf=opts.broker_conf, out=out, master=master,
                          spark_conf=spark_conf_pairs(spark_conf), dry_run=dry_run, replace=replace,
                          metadata=opts.metadata, cluster_name=opts.cluster_name, broker_name=opts.broker_name,
                          hash_slots=opts.tiered_hash_slots, max_index=opts.tiered_max_index,
                          commitlog_file_size=opts.commitlog_file_size, tiered_store_path=opts.tiered_store_path,
                          new_geometry=new_geometry)
    run_job(lambda progress: run_reindex(req, progress),
            {"scan": "segment ranges scanned", "build": "tiered index files built"}, json_out, render_tiered_reindex,
            "tiered reindex", reindex_json)
