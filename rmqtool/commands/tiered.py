"""rmqtool tiered ...: the RocketMQ 5 tiered flat store (PosixFileSegment + DefaultMetadataStore), offline.

Each command parses its options, calls one engine function (engine.tiered.flat) and renders the answer. Typer
command functions take one parameter per option.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.views.times import local_time
from rmqtool import render, times
from rmqtool.cli import handles_errors
from rmqtool.options import (MASTER_VALUES, BrokerConfOpt, BrokerOpt, ClusterOpt, JsonOpt, MetadataOpt, QuietOpt,
                             StoreOpt, TieredPathOpt, tier_source, values)

app = typer.Typer(name="tiered", no_args_is_help=True, rich_markup_mode=None, help="The RocketMQ 5 tiered flat store (tieredStoreFilePath "
                  "and tieredStoreMetadata.json) and its index: inspect, read, query by key, verify, tier out, "
                  "retention, metadata repair, index rebuild.")

def _topic_not_path(value):
    """-t is --topic in every command; it used to be --tiered-store-path here: a directory given to it is refused,
    so an old script fails loudly instead of filtering on a topic that does not exist."""
    import os

    for v in (value if isinstance(value, list) else [value]):
        if v is not None and "/" in v and os.path.isdir(v):
            from rmqtool.cli import fail

            fail(f"-t {v}: -t means --topic in every command; give the tiered store path with "
                 "-T/--tiered-store-path")
    return value


TopicOpt = Annotated[str, typer.Option("--topic", "-t", help="Topic.", callback=_topic_not_path)]
TopicFilterOpt = Annotated[Optional[str], typer.Option("--topic", "-t", help="Only this topic.",
                                                       callback=_topic_not_path)]
QueueIdOpt = Annotated[int, typer.Option("--queue-id", "-q", help="Queue id.")]


@contextlib.contextmanager
def _opened(tiered_store_path, metadata, store, broker_conf, cluster_name, broker_name, **overrides):
    from engine.tiered.flat.store import open_tier

    st = open_tier(tier_source(tiered_store_path, metadata, store, broker_conf, cluster_name, broker_name),
                   **overrides)
    try:
        yield st
    finally:
        st.close()
        for w in dict.fromkeys(st.warnings):
            render.problem(f"warning: {w}")


def _note(msg: str) -> None:
    """A message on stderr, one line whatever the terminal width."""
    render.note(msg)


def _emit_rows(json_out: bool, title: str, rows: list[dict], columns: list[str], fmt=None) -> None:
    if json_out:
        for r in rows:
            render.emit_json(r)
        return
    fmt = fmt or (lambda r, c: r.get(c))
    render.table(title, columns, [[fmt(r, c) for c in columns] for r in rows])


def _time(v) -> str:
    return "" if v is None else ("empty" if v == 2**63 - 1 else local_time(v))


def _java_time(text: str, option: str) -> int:
    """A time the broker's API takes as a Java long: any integer as it is (flat stores written by tests and tools
    carry synthetic store times), else the one time grammar (rmqtool.times)."""
    t = text.strip()
    if t.lstrip("+-").isdigit():
        v = int(t)
        if not -(2**63) <= v < 2**63:
            from engine.errors import InvalidArgumentError

            raise InvalidArgumentError(f"{option} {text} is not a Java long")
        return v
    return times.parse_time(t, option)


def _one_of(*given: tuple[str, object]):
    """The value of a required option given under its name or its old spelling (a hidden alias), not both."""
    from engine.errors import InvalidArgumentError

    present = [(name, v) for name, v in given if v is not None]
    if not present:
        raise InvalidArgumentError(f"missing option {given[0][0]}")
    if len(present) > 1:
        raise InvalidArgumentError(f"give {given[0][0]} once (not also {present[1][0]})")
    return present[0][1]


@app.command("queues")
@handles_errors
def queues(tiered_store_path: TieredPathOpt = None, metadata: MetadataOpt = None, store: StoreOpt = None,
           broker_conf: BrokerConfOpt = None, cluster_name: ClusterOpt = None, broker_name: BrokerOpt = None,
           topic: TopicFilterOpt = None, json_out: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """One line per tiered queue the broker loads: offsets, store times, segments and bytes per file type."""
    from engine.tiered.flat.answers import queue_rows

    with _opened(tiered_store_path, metadata, store, broker_conf, cluster_name, broker_name) as st:
        rows = list(queue_rows(st, topic))

        def fmt(r, c):
            if c in ("segments", "bytes"):
                return " / ".join(str(v) for v in r[c].values())
            return _time(r[c]) if c.endswith("Timestamp") else r.get(c)
        _emit_rows(json_out, f"tiered queues of {st.layout.broker}", rows,
                   ["topic", "queueId", "topicId", "consumeQueueMinOffset", "consumeQueueMaxOffset",
                    "commitLogMinOffset", "commitLogMaxOffset", "minStoreTimestamp", "maxStoreTimestamp",
                    "segments", "bytes"], fmt)


@app.command("segments")
@handles_errors
def segments(topic: TopicOpt, queue_id: QueueIdOpt, tiered_store_path: TieredPathOpt = None,
             metadata: MetadataOpt = None, store: StoreOpt = None, broker_conf: BrokerConfOpt = None,
             cluster_name: ClusterOpt = None, broker_name: BrokerOpt = None, json_out: JsonOpt = False,
            quiet: QuietOpt = False) -> None:
    """One line per COMMIT_LOG and CONSUME_QUEUE segment, with what the metadata says where it differs."""
    from engine.tiered.flat.answers import segment_rows

    with _opened(tiered_store_path, metadata, store, broker_conf, cluster_name, broker_name) as st:
        rows = segment_rows(st, topic, queue_id)
        _emit_rows(json_out, f"segments of {topic}/{queue_id}", rows,
                   ["fileType", "baseOffset", "size", "beginTimestamp", "endTimestamp", "fileName", "fileBytes",
                    "metadata"], lambda r, c: _time(r[c]) if c.endswith("Timestamp") else r.get(c))


@app.command("get")
@handles_errors
def get(topic: TopicOpt, queue_id: QueueIdOpt,
        queue_offset: Annotated[Optional[int], typer.Option("--queue-offset", "-i", help="Queue offset of the first "
                                                            "message (required).")] = None,
        count: Annotated[int, typer.Option("--count", "-n", help="How many messages from --queue-offset (default "
                                           "1).")] = 1,
        raw: Annotated[bool, typer.Option("--raw", help="Answer exactly as the broker's batch read, including its "
                                          "two-segment cut (flat-store §7).")] = False,
        as_consumer: Annotated[bool, typer.Option(
            "--as-consumer", help="What a consumer pulling --count messages receives (getMessageAsync): the "
            "read-ahead into the fetcher's cache, then messages until --count or until they reach "
            "maxTransferBytesOnMessageInMemory (broker.conf, default 256 KiB).")] = False,
        tiered_store_path: TieredPathOpt = None, metadata: MetadataOpt = None, store: StoreOpt = None,
        broker_conf: BrokerConfOpt = None, cluster_name: ClusterOpt = None, broker_name: BrokerOpt = None,
        json_out: JsonOpt = False,
        quiet: QuietOpt = False,
        queue_offset_o: Annotated[Optional[int], typer.Option("-o", hidden=True, help="Old spelling of -i.")] = None,
        ) -> None:
    """Messages by queue offset, with the fetcher's status. Exits 3 when a read stopped on a damaged record."""
    from engine.tiered.flat.answers import fetch_json, get_messages

    queue_offset = _one_of(("--queue-offset", queue_offset), ("-o", queue_offset_o))

    with _opened(tiered_store_path, metadata, store, broker_conf, cluster_name, broker_name) as st:
        res = get_messages(st, topic, queue_id, queue_offset, count, raw, as_consumer)
        out = fetch_json(res)
        if json_out:
            render.emit_json(out)
        else:
            render.kv_table(f"{topic}/{queue_id} from {queue_offset}", [(k, out[k]) for k in
                            ("status", "nextBeginOffset", "minOffset", "maxOffset")] + [("messages", len(res.messages))])
            render.table(None, ["queueOffset", "commitLogOffset", "storeSize", "storeTime", "keys", "tags", "msgId",
                                "body"],
                         [[m.get("queueOffset"), m.get("commitLogOffset"), m.get("storeSize"),
                           local_time(m.get("storeTimestamp")), " ".join(m.get("keys") or []), m.get("tags"),
                           m.get("msgId"), render.body_preview(m)] for m in out["messages"]])
    if raw and res.left_out:
        _note(f"the broker's batch read covered {res.requested} units and left out {res.left_out} "
                    f"message(s) (it reads at most two segments), yet nextBeginOffset is {res.next_begin_offset}")
    if as_consumer and res.read_ahead:
        _note(f"note: the read-ahead cached {res.read_ahead} message(s); this pull hands over {len(res.messages)} "
              f"(--count {count}, byte limit {st.config.maxTransferBytesOnMessageInMemory}); the next pull starts "
              f"at {res.next_begin_offset}")
    undecoded = [m for m in out["messages"] if "compressionError" in m]
    for m in undecoded:
        _note(f"error: queue offset {m.get('queueOffset')}: its {m.get('compression')} body does not decode "
              f"({m['compressionError']}); the consumer cannot read it")
    if res.problem:
        render.problem(f"error: {res.problem}")
    if res.problem or undecoded:
        raise typer.Exit(3)


@app.command("offset-by-time")
@handles_errors
def offset_by_time(topic: TopicOpt, queue_id: QueueIdOpt,
                   timestamp: Annotated[list[str], typer.Option("--timestamp", help=f"Any epoch in ms as the broker "
                                                                f"takes it, or {times.GRAMMAR} (repeat the option "
                                                                "for several).")],
                   boundary: Annotated[str, typer.Option("--boundary", help="lower or upper (BoundaryType).",
                                                         autocompletion=values("lower", "upper"))] = "lower",
                   tiered_store_path: TieredPathOpt = None, metadata: MetadataOpt = None, store: StoreOpt = None,
                   broker_conf: BrokerConfOpt = None, cluster_name: ClusterOpt = None, broker_name: BrokerOpt = None,
                   json_out: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """The broker's getOffsetInQueueByTime per timestamp; `error` where it throws. Exits 3 on any error."""
    from engine.tiered.flat.answers import offsets_by_time

    stamps = [_java_time(t, "--timestamp") for t in timestamp]
    with _opened(tiered_store_path, metadata, store, broker_conf, cluster_name, broker_name) as st:
        rows = offsets_by_time(st, topic, queue_id, stamps, boundary)
        _emit_rows(json_out, f"offset by time, {topic}/{queue_id}", rows, ["timestamp", "boundary", "result", "error"])
    if any("error" in r for r in rows):
        raise typer.Exit(3)


@app.command("dump-cq")
@handles_errors
def dump_cq(topic: TopicOpt, queue_id: QueueIdOpt, tiered_store_path: TieredPathOpt = None,
            metadata: MetadataOpt = None, store: StoreOpt = None, broker_conf: BrokerConfOpt = None,
            cluster_name: ClusterOpt = None, broker_name: BrokerOpt = None, json_out: JsonOpt = False,
            quiet: QuietOpt = False) -> None:
    """Every CONSUME_QUEUE unit, including those whose records retention removed (storeTimestamp -1)."""
    from engine.tiered.flat.answers import cq_rows

    with _opened(tiered_store_path, metadata, store, broker_conf, cluster_name, broker_name) as st:
        rows = cq_rows(st, topic, queue_id)
        if json_out:
            for r in rows:
                render.emit_json(r)
        else:
            _emit_rows(False, f"consume queue of {topic}/{queue_id}", list(rows),
                       ["queueOffset", "commitLogOffset", "size", "tagsCode", "storeTimestamp"])


@app.command("verify")
@handles_errors
def verify(tiered_store_path: TieredPathOpt = None, metadata: MetadataOpt = None, store: StoreOpt = None,
           broker_conf: BrokerConfOpt = None, cluster_name: ClusterOpt = None, broker_name: BrokerOpt = None,
           topic: TopicFilterOpt = None, json_out: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Check names, segments, metadata, records and units, and (without --topic) the tiered index: the INDEX
    segments against their metadata and local tiered index files. Exits 3 with one line per problem."""
    from engine.tiered.index.operations import verify_tier

    with _opened(tiered_store_path, metadata, store, broker_conf, cluster_name, broker_name) as st:
        rep = verify_tier(st, topic)
        st.warnings.clear()   # verify reports them as problems
        if json_out:
            render.emit_json(rep.as_dict())
        else:
            for p in rep.problems:
                render.line(p.line())
            for n in rep.notes:
                _note(f"note: {n.line()}")
            _note(f"{rep.queues} queue(s), {rep.segments} segment(s), {rep.records} record(s), "
                        f"{rep.units} unit(s): " + ("whole" if rep.ok else f"{len(rep.problems)} problem(s)"))
    if not rep.ok:
        raise typer.Exit(3)


@app.command("dispatch")
@handles_errors
def dispatch(store: StoreOpt = None, tiered_store_path: TieredPathOpt = None, broker_conf: BrokerConfOpt = None,
             metadata: MetadataOpt = None, cluster_name: ClusterOpt = None, broker_name: BrokerOpt = None,
             topic: Annotated[Optional[list[str]], typer.Option("--topic", "-t", help="Only these topics (repeat).",
                                                                callback=_topic_not_path)] = None,
             commitlog_max_size: Annotated[Optional[int], typer.Option(
                 "--commitlog-max-size", help="tieredStoreCommitLogMaxSize (default 1 GiB).")] = None,
             consume_queue_max_size: Annotated[Optional[int], typer.Option(
                 "--consume-queue-max-size", help="tieredStoreConsumeQueueMaxSize (default 100 MiB).")] = None,
             master: Annotated[str, typer.Option("--master", help="inline, local[K] or a Spark master URL.",
                                                  autocompletion=MASTER_VALUES)] = "local[*]",
             dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; write nothing.")] = False,
             json_out: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Tier out a stopped broker's store as MessageStoreDispatcherImpl does; LOCAL is only read. Exits 3 when a queue could not be tiered to its end."""  # noqa: E501
    from engine.broker.config.brokerconf import load_config
    from engine.tiered.flat.config import load_tiered_config
    from engine.tiered.flat.dispatch import DispatchRequest, dispatch as run_dispatch

    local = load_config(broker_conf, storePathRootDir=str(store) if store is not None else None)
    from engine.errors import InvalidArgumentError

    if store is None and broker_conf is None:
        raise InvalidArgumentError("no local store given: pass --store DIR (or --broker-conf)")
    cfg = load_tiered_config(broker_conf, tieredStoreCommitLogMaxSize=commitlog_max_size,
                             tieredStoreConsumeQueueMaxSize=consume_queue_max_size)
    root = tiered_store_path or (Path(cfg.tieredStoreFilePath) if cfg.tieredStoreFilePath else None)
    if root is None:
        raise InvalidArgumentError("no tiered store given: pass --tiered-store-path DIR")
    req = DispatchRequest(local, root, cfg, metadata, cluster_name, broker_name, topic or None, master, dry_run)
    with render.progress(None, "dispatch") as bar:
        task = bar.add_task("tier out", total=None)
        res = run_dispatch(req, lambda phase, done, total: bar.update(task, completed=done, total=total))
    for w in res.warnings:
        render.problem(f"warning: {w}")
    if json_out:
        render.emit_json(res.as_dict())
    else:
        render.table(f"{'plan' if dry_run else 'tiered out'}: {res.cluster}/{res.broker} -> {res.tiered_store_path}",
                     ["topic", "queueId", "fromOffset", "toOffset", "messages", "bytes", "new CL/CQ segments", "note"],
                     [[q["topic"], q["queueId"], q["fromOffset"], q["toOffset"], q["messages"], q["bytes"],
                       f"{q['newSegments']['COMMIT_LOG']}/{q['newSegments']['CONSUME_QUEUE']}",
                       q.get("skipped") or ("stalled" if "stalledAt" in q else "")] for q in res.queues])
        _note(f"{res.messages} message(s), {res.bytes} bytes in {res.seconds:.1f} s ({res.master})"
                    + ("; metadata written" if res.metadata_written else ""))
    for p in res.problems:
        render.problem(f"problem: {p}")
    if res.problems:
        raise typer.Exit(3)


@app.command("clean")
@handles_errors
def clean(reserved_hours: Annotated[Optional[float], typer.Option(
              "--reserved-hours", help="tieredStoreFileReservedTime: hours to keep, for topics without their own "
              "reserveTime (required).")] = None,
          now: Annotated[Optional[str], typer.Option("--now", help="The time retention is judged at: epoch ms, or "
                                                     f"{times.GRAMMAR} (default: now).")] = None,
          dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; change nothing.")] = False,
          tiered_store_path: TieredPathOpt = None, metadata: MetadataOpt = None, store: StoreOpt = None,
          broker_conf: BrokerConfOpt = None, cluster_name: ClusterOpt = None, broker_name: BrokerOpt = None,
          topic: TopicFilterOpt = None, json_out: JsonOpt = False, quiet: QuietOpt = False,
          reserve_hours: Annotated[Optional[float], typer.Option("--reserve-hours", hidden=True,
                                                               help="Old spelling of --reserved-hours.")] = None,
          ) -> None:
    """Retention as FlatFileStore applies it: CONSUME_QUEUE then COMMIT_LOG, each from its head."""
    from engine.errors import InvalidArgumentError
    from engine.tiered.flat.retention import apply_clean, plan_clean

    reserve_hours = _one_of(("--reserved-hours", reserved_hours), ("--reserve-hours", reserve_hours))
    now_ms = times.now_ms() if now is None else _java_time(now, "--now")
    if not -(2**31) <= reserve_hours <= 2**31 - 1:
        raise InvalidArgumentError(f"--reserved-hours {reserve_hours:g} is out of range (a Java int of hours)")
    if float(reserve_hours).is_integer():
        reserve_hours = int(reserve_hours)  # whole hours stay an int in the plan, as the broker's setting
    with _opened(tiered_store_path, metadata, store, broker_conf, cluster_name, broker_name) as st:
        plan = plan_clean(st, reserve_hours, now_ms, dry_run, topic)
        if not dry_run:
            apply_clean(st, plan)
        d = plan.as_dict(st.layout.rel)
    if json_out:
        render.emit_json(d)
    else:
        render.table(("would delete" if dry_run else "deleted") + f" (now {now_ms})",
                     ["topic", "queueId", "fileType", "baseOffset", "size", "endTimestamp", "file", "reason"],
                     [[r["topic"], r["queueId"], r["fileType"], r["baseOffset"], r["size"], _time(r["endTimestamp"]),
                       r["file"], r["reason"]] for r in d["delete"]])
        _note(f"{d['files']} file(s), {d['bytes']} bytes" + (" (dry run: nothing changed)" if dry_run else ""))


@app.command("rebuild-metadata")
@handles_errors
def rebuild_metadata(out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the rebuilt metadata (must not "
                                                       "exist).", dir_okay=False)],
                     tiered_store_path: TieredPathOpt = None, broker_name: BrokerOpt = None,
                     cluster_name: ClusterOpt = None,
                     from_file: Annotated[Optional[Path], typer.Option(
                         "--from", help="An older tieredStoreMetadata.json or its .bak: topic ids, wall-clock times, "
                         "and times of segments whose records are gone.", dir_okay=False)] = None,
                     json_out: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Rebuild tieredStoreMetadata.json from the segment files (the tier is only read)."""
    from engine.tiered.flat.rebuild import rebuild_metadata as run_rebuild

    if tiered_store_path is None:
        from engine.errors import InvalidArgumentError

        raise InvalidArgumentError("pass --tiered-store-path DIR")
    res = run_rebuild(tiered_store_path, broker_name, out, cluster_name, from_file)
    for w in res.warnings:
        render.problem(f"warning: {w}")
    if json_out:
        render.emit_json(res.as_dict())
    else:
        _note(f"wrote {res.out}: {res.topics} topic(s), {res.queues} queue(s), "
                    + ", ".join(f"{v} {k}" for k, v in res.segments.items()) + " segment(s)")
