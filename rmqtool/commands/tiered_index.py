"""rmqtool tiered query-key / inspect-index / compact-index / reindex: the RocketMQ 5 tiered index (format §9),
read from where a broker keeps it (the uploaded INDEX flat file of the tier and the still-local
<store>/tiered_index_file) or built from the commit log. The `tiered` group (rmqtool.commands.tiered) registers
these commands; every one takes the tier options of rmqtool.options, parses, calls one engine function and renders
through rmqtool.render_tiered.

The old spellings (top-level compact-index, query-key --tiered-dir, inspect-index on tiered files,
spark-reindex --format tiered) keep working for one release, hidden, with a one-line note on stderr.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rmqtool import render, times
from rmqtool.cli import deprecated, handles_errors
from rmqtool.options import (MASTER_VALUES, BeginOpt, BrokerConfOpt, BrokerOpt, ClusterOpt, CommitLogSizeOpt, EndOpt,
                             JsonOpt, MetadataOpt, OldMaxOpt, QuietOpt, StoreOpt, TieredDirOpt, TieredItemsOpt, TieredPathOpt,
                             TieredSlotsOpt, tier_source)

PARTIAL = 3          # exit code: an answer the damage of a file cut short, or verification found problems
BAD_INPUT = 2
DEFAULT_MAX = 64     # as mqadmin queryMsgByKey
INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1

TopicOpt = Annotated[Optional[str], typer.Option("--topic", "-t", help="Topic of the messages (required without "
                                                 "--from-jsonl).")]
KeyOpt = Annotated[Optional[str], typer.Option("--key", "-k", help="A key: a KEYS token or the UNIQ_KEY (both are "
                                               "indexed; required without --from-jsonl).")]
MaxOpt = Annotated[int, typer.Option("--count", "-n", help="maxCount, as the broker takes it (default 64).")]
UniqueKeyOpt = Annotated[bool, typer.Option("--unique-key", help="Keep only messages whose UNIQ_KEY is the key "
                                            "(default: its UNIQ_KEY or one of its KEYS).")]
RawOpt = Annotated[bool, typer.Option("--raw", help="The index items (IndexStoreService.queryAsync), not the "
                                      "messages; items the broker's fetcher skips say why.")]
AsBrokerOpt = Annotated[bool, typer.Option("--as-broker", help="The broker's answer as it is (queryMessageAsync): "
                                           "unchecked, hash collisions included.")]
ExplainOpt = Annotated[bool, typer.Option("--explain", help="Also show what was left out and why: messages that "
                                          "are not the key's, items the fetcher skipped, each file's answer.")]
NewTieredGeometryOpt = Annotated[bool, typer.Option(
    "--new-geometry", help="Write the geometry --hash-slots and --max-index (or broker.conf) give even though the "
    "store's tiered index files have another one. Without it a configured geometry those files do not have is "
    "refused.")]
FromJsonlOpt = Annotated[Optional[Path], typer.Option(
    "--from-jsonl", help="Answer many questions in one process: one JSON object per line ({topic, key, maxCount?, "
    "begin?, end?}; missing values from --count/--begin/--end), '-' for stdin. One answer line per question, in "
    "order: the broker's answer {topic, key, maxCount, begin, end, messages: [...]} (as --as-broker), or with "
    "--raw {..., items, perFile}.", dir_okay=False)]


# ------------------------------------------------------------------ query-key


@handles_errors
def query_key(
    topic: TopicOpt = None,
    key: KeyOpt = None,
    begin: BeginOpt = None,
    end: EndOpt = None,
    max_num: MaxOpt = DEFAULT_MAX,
    unique_key: UniqueKeyOpt = False,
    raw: RawOpt = False,
    as_broker: AsBrokerOpt = False,
    explain: ExplainOpt = False,
    from_jsonl: FromJsonlOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    tiered_store_path: TieredPathOpt = None,
    metadata: MetadataOpt = None,
    cluster_name: ClusterOpt = None,
    broker_name: BrokerOpt = None,
    tiered_dir: TieredDirOpt = None,
    hash_slots: TieredSlotsOpt = None,
    max_index: TieredItemsOpt = None,
    old_max: OldMaxOpt = None,
) -> None:
    """Messages by key from the tier, as the broker's tiered store answers (IndexStoreService.queryAsync, then
    MessageStoreFetcherImpl.queryMessageAsync): the uploaded index files (INDEX flat file) and the local ones
    whose begin timestamp lies in [--begin, --end], newest first, merged by queueId-offset up to --count, items of
    other topics dropped, each message read from its queue's tiered commit log.

    By default each message is checked (a whole record of the topic, stored within the range, whose UNIQ_KEY or
    KEYS hold the key): hash collisions and index seconds outside the range are left out (see --explain).
    Exits 3 when a file or a read failed (the broker's answer fails or lacks that file)."""
    # (a typer command: one parameter per option)
    from engine.errors import InvalidArgumentError
    from engine.tiered.index.fetcher import KeyQuestion, open_tier_index
    from rmqtool.cli import count_or_old_max

    render.set_quiet(quiet)
    max_num = count_or_old_max(max_num, old_max, "tiered query-key")
    if raw and as_broker:
        raise InvalidArgumentError("give --raw or --as-broker, not both")
    src = tier_source(tiered_store_path, metadata, store, broker_conf, cluster_name, broker_name)
    if from_jsonl is not None:
        if topic is not None or key is not None:
            raise InvalidArgumentError("--from-jsonl takes the topics and keys from the file: no --topic/--key")
        b, e = times.parse_range(begin, end)
        with open_tier_index(src, tiered_dir, hash_slots, max_index) as ti:
            _notes(ti.notes)
            _answer_jsonl(ti, from_jsonl, KeyQuestion("", "", max_num, b, e), raw)
        return
    if topic is None or key is None:
        raise InvalidArgumentError("give --topic and --key (or --from-jsonl FILE)")
    if not 0 < max_num <= INT_MAX:
        raise InvalidArgumentError(f"--count {max_num} is out of range 1..{INT_MAX}")
    b, e = times.parse_range(begin, end)
    with open_tier_index(src, tiered_dir, hash_slots, max_index) as ti:
        ans = ti.ask(KeyQuestion(topic, key, max_num, b, e), require_topic=True).check(unique_key)
        _notes(ti.notes)  # after the question: an unknown topic is one error line, nothing before it
    from rmqtool.render_tiered import render_tier_key_answer

    render_tier_key_answer(ans, "raw" if raw else "broker" if as_broker else "checked", json_out, explain)
    if ans.failed or any(f.error for f in ans.index.per_file):
        raise typer.Exit(PARTIAL)


def _notes(notes: list[str]) -> None:
    for n in dict.fromkeys(notes):
        render.note(f"note: {n}")


def _answer_jsonl(ti, path: Path, defaults, raw: bool) -> None:
    """One answer line per question line, written as it comes; bad lines answer {"line", "error"} and make the
    exit status 2, failed answers 3."""
    import contextlib
    import sys

    from engine.tiered.index.fetcher import answer_lines

    bad = failed = 0
    with contextlib.ExitStack() as stack:
        fh = sys.stdin if str(path) == "-" else stack.enter_context(open(path, encoding="utf-8"))
        for d in answer_lines(ti, fh, defaults, raw):
            render.emit_json(d)
            if "line" in d:
                bad += 1
                render.note(f"error: line {d['line']}: {d['error']}")
            elif d.get("error") or any(f.get("error") for f in d.get("perFile", [])):
                failed += 1
    if failed:
        render.note(f"warning: {failed} answer(s) failed or lack a file (see their \"error\")")
    if bad or failed:
        raise typer.Exit(BAD_INPUT if bad else PARTIAL)


# ------------------------------------------------------------------ inspect-index


FileArg = Annotated[Optional[Path], typer.Argument(help="One tiered index file, local or compacted (default: every "
                                                   "file of the broker's table: the local ones and the uploaded "
                                                   "INDEX segments).", dir_okay=False)]
WalkSlotOpt = Annotated[Optional[int], typer.Option("--walk-slot", help="Print the items of hash slot N.")]
WalkKeyOpt = Annotated[Optional[str], typer.Option("--walk-key", help="Print the items of the slot of TOPIC#KEY "
                                                   "(tiered hash).")]
WalkMaxOpt = Annotated[int, typer.Option("--count", "-n", help="At most this many items per walk (default 512, the "
                                         "broker's query cap).", min=1)]
StatsOpt = Annotated[bool, typer.Option("--stats", help="Slot occupancy, chain-length histogram, longest chains.")]
VerifyOpt = Annotated[bool, typer.Option("--verify", help="Check slots and chains, and the INDEX segments against "
                                         "their metadata; exit 3 on problems.")]


@handles_errors
def inspect_index(
    file: FileArg = None,
    walk_slot: WalkSlotOpt = None,
    walk_key: WalkKeyOpt = None,
    max_items: WalkMaxOpt = 512,
    stats: StatsOpt = False,
    verify: VerifyOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    tiered_store_path: TieredPathOpt = None,
    metadata: MetadataOpt = None,
    cluster_name: ClusterOpt = None,
    broker_name: BrokerOpt = None,
    tiered_dir: TieredDirOpt = None,
    hash_slots: TieredSlotsOpt = None,
    max_index: TieredItemsOpt = None,
    old_max: OldMaxOpt = None,
) -> None:
    """Tiered index files as the broker's table holds them: headers; with --walk-* a slot's chain (local files)
    or item range (uploaded); --stats; --verify. Without FILE, every file of the table: the local ones
    (tiered_index_file/, UNSEALED) and the uploaded INDEX segments (UPLOAD, read with the configured slot count
    and the metadata's timestamps)."""
    # (a typer command: one parameter per option)
    from engine.errors import InvalidArgumentError
    from rmqtool.cli import count_or_old_max
    from rmqtool.render_tiered import render_inspection

    render.set_quiet(quiet)
    max_items = count_or_old_max(max_items, old_max, "tiered inspect-index")
    if walk_slot is not None and walk_key is not None:
        raise InvalidArgumentError("give --walk-slot or --walk-key, not both")
    asked = dict(walk_slot=walk_slot, walk_key=walk_key, limit=max_items, stats=stats, verify=verify)
    src = tier_source(tiered_store_path, metadata, store, broker_conf, cluster_name, broker_name)
    if file is not None or src.tier_root() is None:
        failed = render_inspection(_local_inspection(file, src, tiered_dir, hash_slots, max_index, asked), json_out)
    else:
        from engine.tiered.index.fetcher import open_tier_index
        from engine.tiered.index.operations import inspect_tier

        with open_tier_index(src, tiered_dir, hash_slots, max_index) as ti:
            _notes(ti.notes)
            if not ti.service.files:
                render.note("note: the broker's table holds no tiered index file (none uploaded, none local)")
            failed = render_inspection(inspect_tier(ti, **asked), json_out)
    if failed:
        render.note("verification found problems")
        raise typer.Exit(PARTIAL)


def _local_inspection(file, src, tiered_dir, hash_slots, max_index, asked: dict):
    """FILE alone, or without a tier (no --tiered-store-path, none in broker.conf) the local tiered index files."""
    from engine.errors import InvalidArgumentError
    from engine.tiered.index import inspect_files, list_tiered_index_files

    if file is not None:
        if tiered_dir is not None:
            raise InvalidArgumentError("give FILE or --tiered-dir, not both")
        paths = [file]
    else:
        directory = tiered_dir or src.local_index_dir()
        if directory is None:
            raise InvalidArgumentError("no tier and no local files given: pass --tiered-store-path (and --store), or "
                                       "--tiered-dir DIR for local tiered index files alone")
        paths = [p for _ts, p in list_tiered_index_files(directory)]
        if not paths:
            raise InvalidArgumentError(f"no tiered index files (numeric names) in {directory}")
        if tiered_dir is None:
            render.note("note: no tier given (--tiered-store-path): the local tiered index files only")
    return inspect_files(paths, hash_slot_num=hash_slots, index_num=max_index, **asked)


# ------------------------------------------------------------------ compact-index


@handles_errors
def compact_index(
    file: Annotated[Path, typer.Argument(help="Unsealed or sealed tiered index file (tiered_index_file/<timestamp>).",
                                         dir_okay=False)],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the compacted file.", dir_okay=False)],
    force: Annotated[bool, typer.Option("--force", help="Replace --out if it exists.")] = False,
    mapped: Annotated[bool, typer.Option("--mapped", help="Write the whole local compacting/ file the broker maps "
                                         "(28 + 8*slots + 28*indexItemCount bytes) instead of the bytes it uploads; "
                                         "they differ only when some items are unreachable from the slot table.")]
    = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    hash_slots: TieredSlotsOpt = None,
    max_index: TieredItemsOpt = None,
    broker_conf: BrokerConfOpt = None,
    new_geometry: NewTieredGeometryOpt = False,
) -> None:
    """Compact a tiered index file into the layout the broker uploads (format §9.4), byte for byte. The input is
    only read; the output is written to a temporary name and renamed.

    The compacted form keeps the file's slot count, which the broker reads uploaded files with: it must be
    broker.conf's tieredStoreIndexFileMaxHashSlotNum and the one of the tiered index files in the file's
    directory, unless --new-geometry says the file is of a new geometry on purpose."""
    from engine.tiered.index import compact_file
    from rmqtool.render_tiered import render_compaction

    render.set_quiet(quiet)
    summary = compact_file(file, out, force=force, mapped=mapped, hash_slot_num=hash_slots, index_num=max_index,
                           broker_conf=broker_conf, new_geometry=new_geometry)
    render_compaction(summary, file.name, json_out)


def _alias(fn, old: str, new: str):
    """`fn` under its old spelling: the same options, and a one-line deprecation note first."""
    import functools

    @functools.wraps(fn)
    def old_spelling(*args, **kwargs):
        deprecated(old, new)
        return fn(*args, **kwargs)
    return old_spelling


compact_index_old = _alias(compact_index, "compact-index", "tiered compact-index")


# ------------------------------------------------------------------ reindex


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
def reindex(
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    out: OutOpt = None,
    master: MasterOpt = "local[*]",
    spark_conf: SparkConfOpt = None,
    dry_run: DryRunOpt = False,
    replace: ReplaceOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    metadata: MetadataOpt = None,
    cluster_name: ClusterOpt = None,
    broker_name: BrokerOpt = None,
    hash_slots: TieredSlotsOpt = None,
    max_index: TieredItemsOpt = None,
    commitlog_file_size: CommitLogSizeOpt = None,
    tiered_store_path: TieredPathOpt = None,
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
    from engine.jobs.framework import camel_keys
    from engine.jobs.tiered_index import TieredReindexRequest, tiered_reindex_request
    from rmqtool.jobview import run_job, spark_conf_pairs
    from rmqtool.render_tiered import render_tiered_reindex

    render.set_quiet(quiet)
    req = TieredReindexRequest(store=store, broker_conf=broker_conf, out=out, master=master,
                               spark_conf=spark_conf_pairs(spark_conf), dry_run=dry_run, replace=replace,
                               metadata=metadata, cluster_name=cluster_name, broker_name=broker_name,
                               hash_slots=hash_slots, max_index=max_index, commitlog_file_size=commitlog_file_size,
                               tiered_store_path=tiered_store_path, new_geometry=new_geometry)
    run_job(lambda progress: tiered_reindex_request(req, progress),
            {"scan": "segment ranges scanned", "build": "tiered index files built"}, json_out, render_tiered_reindex,
            "tiered reindex", lambda r: camel_keys(r.as_dict()))
