"""rmqtool spark-reindex: rebuild the index files from the commit log, on Spark or in-process."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.views.times import iso_time
from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.options import (BrokerConfOpt, CommitLogSizeOpt, HashSlotsOpt, JsonOpt, MaxIndexOpt, StoreOpt,
                             build_config)

DEFAULT_MASTER = "local[*]"  # engine.jobs.framework.DEFAULT_MASTER (a test keeps them equal; importing it costs start-up)
SPARK_PANEL = "Spark"
TIERED_PANEL = "Tiered format (--format tiered)"
FORMATS = ("broker", "tiered")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _render_tiered(r) -> None:
    title = "spark-reindex --format tiered" + (" (dry run: nothing written)" if r.dry_run else "")
    rows = [
        ("master", r.master),
        ("segments", r.segments),
        ("messages", f"{r.messages} ({r.copied_messages} copied to tiered storage, {r.keyed_messages} with keys)"),
        ("keys indexed (items)", r.keys_indexed),
        ("index files", f"{r.index_files} ({r.hash_slot_num} slots x {r.index_num} items, compacted)"),
        ("bytes read", f"{r.bytes_read} ({_size(r.bytes_read)})"),
        ("elapsed", f"{r.seconds:.2f} s (scan {r.scan_seconds:.2f} s, build {r.build_seconds:.2f} s)"),
        ("tiered metadata", r.tiered_metadata or "none (topic ids assigned from 0)"),
    ]
    if r.transaction_records_skipped:
        rows.append(("prepared/rollback records (not copied)", r.transaction_records_skipped))
    if r.system_topic_records:
        rows.append(("system-topic records (not copied)", r.system_topic_records))
    if r.length_mismatches:
        rows.append(("length-mismatch records (skipped)", r.length_mismatches))
    if r.key_sets_too_large:
        rows.append(("key sets larger than a file (not indexed)", r.key_sets_too_large))
    if r.key_sets_failed:
        rows.append(("key sets with a failing MIN_VALUE key", r.key_sets_failed))
    if not r.dry_run:
        rows.append(("written to", r.out_dir))
        if r.replaced:
            rows.append(("old index files", "removed (--replace)"))
    render.kv_table(title, rows)
    if r.topics:
        render.table("topics", ["topic", "topicId", "source"], [[t["topic"], t["topicId"], t["source"]]
                                                                for t in r.topics])
    if r.files:
        render.table("tiered index files" + (" (planned)" if r.dry_run else ""),
                     ["file (beginTimestamp)", "items", "bytes"],
                     [[f["name"], f["items"], f.get("bytes", "-")] for f in r.files])


def _tiered_geometry(broker_conf: Optional[Path], hash_slots: Optional[int], max_index: Optional[int]):
    """--hash-slots/--max-index, else broker.conf's tiered keys, else the tiered store's defaults."""
    from engine.tiered.flat.config import load_tiered_config
    from engine.tiered.index.format import DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM

    tc = load_tiered_config(broker_conf)
    slots = hash_slots if hash_slots is not None else tc.tieredStoreIndexFileMaxHashSlotNum or DEFAULT_HASH_SLOT_NUM
    items = max_index if max_index is not None else tc.tieredStoreIndexFileMaxIndexNum or DEFAULT_INDEX_NUM
    black = {tc.cluster_name}
    if tc.brokerName:
        black.add(tc.brokerName)
    return slots, items, black


def _render(r) -> None:
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
                                                         f"({iso_time(r.index_msg_timestamp)})"))
    render.kv_table(title, rows)
    if r.files:
        render.table("index files" + (" (planned)" if r.dry_run else ""), ["file", "entries", "full"],
                     [[f["name"], f["entries"], "yes" if f["full"] else "no"] for f in r.files])


def _spark_conf(pairs: Optional[list[str]]) -> dict:
    out = {}
    for p in pairs or []:
        key, sep, value = p.partition("=")
        if not sep or not key.strip():
            from engine.errors import InvalidArgumentError

            raise InvalidArgumentError(f"--conf {p!r}: expected KEY=VALUE, e.g. spark.executor.memory=4g")
        out[key.strip()] = value
    return out


def _run(job, labels: dict[str, str], json_out: bool, render_fn) -> None:
    """Run a job with a progress bar per phase on stderr, then warnings on stderr and the result on stdout."""
    with render.progress(None, "spark-reindex") as bar:
        tasks: dict[str, int] = {}

        def progress(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(labels.get(phase, phase), total=total)
            bar.update(tasks[phase], completed=done, total=total)

        result = job(progress)
    for r in result.repairs:
        render.note(f"repaired: {r}")
    for a in result.anomalies:
        render.note(f"warning: {a}")
    if json_out:
        render.emit_json(result.as_dict())
    else:
        render_fn(result)


OutOpt = Annotated[Optional[Path], typer.Option(
    "--out", "-o",
    help="Write the index files to this directory instead of <store>/index (the store's index and "
         "checkpoint are then left alone). Required with --format tiered. Never the store root, nor "
         "anything that is, holds or lies in commitlog/, consumequeue/, config/, checkpoint, index/ or "
         "tiered_index_file/.")]
MasterOpt = Annotated[str, typer.Option(
    "--master", rich_help_panel=SPARK_PANEL,
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
                      "index/ only if it holds nothing but index files.")]
FormatOpt = Annotated[str, typer.Option(
    "--format", "-f", rich_help_panel=TIERED_PANEL,
    help="broker (default): the broker's index files. tiered: compacted RocketMQ 5 tiered-storage index "
         "files (the uploaded form, numeric names = begin timestamp) into --out DIR; the store's index, "
         "checkpoint and tiered_index_file/ are left alone. --hash-slots/--max-index then mean "
         "tieredStoreIndexFileMaxHashSlotNum/MaxIndexNum (default: broker.conf's tiered keys, else "
         "5000000/20000000).")]
TieredMetadataOpt = Annotated[Optional[Path], typer.Option(
    "--tiered-metadata", rich_help_panel=TIERED_PANEL,
    help="tieredStoreMetadata.json giving topic ids (default: <store>/config/tieredStoreMetadata.json "
         "when present). Topics not in it get new ids after its largest, in first-seen order; without "
         "metadata ids start at 0.")]


@handles_errors
def spark_reindex_cmd(
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    out: OutOpt = None,
    master: MasterOpt = DEFAULT_MASTER,
    spark_conf: SparkConfOpt = None,
    dry_run: DryRunOpt = False,
    replace: ReplaceOpt = False,
    json_out: JsonOpt = False,
    hash_slots: HashSlotsOpt = None,
    max_index: MaxIndexOpt = None,
    commitlog_file_size: CommitLogSizeOpt = None,
    fmt: FormatOpt = "broker",
    tiered_metadata: TieredMetadataOpt = None,
) -> None:
    """Rebuild the index files from the commit log, byte-identical to the broker's own.

    One Spark task per commit-log segment range (up to 256 MiB), one per index file; --master inline needs no JVM.

    Takes the store lock and refuses a store with an abort file. Builds in a staging directory and publishes by
    renames after every task succeeded: the store's index/ is swapped whole, so a reader sees the old index or
    the new one. What an interrupted run left behind is finished or removed by the next run, which says so.

    Sets the checkpoint's indexMsgTimestamp to the newest rebuilt file, so a broker keeps them after a crash.

    --format tiered writes what a tiered store would have uploaded had every queue been copied from its first
    message: records with a consume-queue unit (PREPARED/ROLLBACK skipped) of topics the tiered store keeps
    (no system, rmq_sys_*, %LMQ% or cluster/broker-name topics); key set = UNIQ_KEY plus the KEYS tokens split
    on single spaces (empty tokens kept), de-duplicated, in Java HashSet order; item = topicId, queueId,
    offset in the queue's tiered commit log (sum of the sizes of the queue's earlier copied records, from 0),
    TOTALSIZE, STORETIMESTAMP. Keys go in commit-log order into files of the given geometry; a key set that
    does not fit moves whole to a new file (a set larger than a whole file is not indexed, as with the broker).
    A file's name (begin timestamp) is the store time of its first message (kept increasing). Equal byte for
    byte to the tiered IndexStoreFile putKey loop then compaction.
    """
    # (a typer command: one parameter per option)
    from engine.errors import InvalidArgumentError

    if fmt not in FORMATS:
        raise InvalidArgumentError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    job = dict(out=out, master=master, dry_run=dry_run, replace=replace, spark_conf=_spark_conf(spark_conf))
    if fmt == "tiered":
        _reindex_tiered(store, broker_conf, hash_slots, max_index, commitlog_file_size, tiered_metadata, job,
                        json_out)
        return
    if tiered_metadata is not None:
        raise InvalidArgumentError("--tiered-metadata only applies with --format tiered")
    from engine.jobs.broker_index import spark_reindex

    cfg = build_config(store, broker_conf, hash_slots, max_index, commitlog_file_size)
    _run(lambda progress: spark_reindex(cfg, progress=progress, **job),
         {"scan": "segment ranges scanned", "build": "index files built"}, json_out, _render)


def _reindex_tiered(store, broker_conf, hash_slots, max_index, commitlog_file_size, tiered_metadata, job: dict,
                    json_out: bool) -> None:
    from engine.jobs.tiered_index import check_tiered_geometry, tiered_reindex

    slots, items, black = _tiered_geometry(broker_conf, hash_slots, max_index)
    check_tiered_geometry(slots, items)
    cfg = build_config(store, broker_conf, None, None, commitlog_file_size)
    _run(lambda progress: tiered_reindex(cfg, progress=progress, hash_slot_num=slots, index_num=items,
                                         metadata_path=tiered_metadata, black_topics=black, **job),
         {"scan": "segment ranges scanned", "build": "tiered index files built"}, json_out, _render_tiered)
