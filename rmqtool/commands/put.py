"""rmqtool put: write messages into a store as a broker would."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Iterator, List, Optional

import typer

from engine.errors import InvalidArgumentError
from engine.broker.message import PROP_KEYS, PROP_TAGS, MessageRecord
from engine.broker.store import MessageStore, message_from_json
from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.options import (BrokerConfOpt, CommitLogSizeOpt, CqSizeOpt, HashSlotsOpt, JsonOpt, MaxIndexOpt,
                             StoreOpt, build_config)


def _jsonl_records(path: str, queue_id: int) -> Iterator[MessageRecord]:
    stream = sys.stdin if path == "-" else open(path, encoding="utf-8")
    try:
        for lineno, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InvalidArgumentError(f"{path}:{lineno}: not JSON ({e.msg})") from None
            try:
                yield message_from_json(obj, queue_id)
            except InvalidArgumentError as e:
                raise InvalidArgumentError(f"{path}:{lineno}: {e}") from None
    finally:
        if stream is not sys.stdin:
            stream.close()


@handles_errors
def put(
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    topic: Annotated[Optional[str], typer.Option("--topic", "-t", help="Topic of the message.")] = None,
    tags: Annotated[Optional[str], typer.Option("--tags", help="TAGS property.")] = None,
    keys: Annotated[Optional[str], typer.Option("--keys", "-k", help='KEYS property, space separated: "k1 k2".')] = None,
    body: Annotated[Optional[str], typer.Option("--body", help="Message body (UTF-8 text).")] = None,
    body_file: Annotated[Optional[Path], typer.Option("--body-file", help="Read the body bytes from a file.",
                                                      dir_okay=False)] = None,
    queue_id: Annotated[int, typer.Option("--queue-id", "-q", help="Queue id (default 0).", min=0)] = 0,
    prop: Annotated[Optional[List[str]], typer.Option("--property", "-p", help="Extra property K=V (repeatable).")] = None,
    store_timestamp: Annotated[Optional[int], typer.Option("--store-timestamp",
                                                           help="Store time in epoch ms (default: now).")] = None,
    from_jsonl: Annotated[Optional[str], typer.Option("--from-jsonl", help="Put one message per JSON line "
                                                      "(same field names as the JSON output); '-' for stdin.")] = None,
    sync_flush: Annotated[bool, typer.Option("--sync-flush", help="Make each message durable (fsync) before "
                                             "printing its offset.")] = False,
    json_out: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-Q", help="Print only the summary line.")] = False,
    hash_slots: HashSlotsOpt = None,
    max_index: MaxIndexOpt = None,
    commitlog_file_size: CommitLogSizeOpt = None,
    cq_file_size: CqSizeOpt = None,
) -> None:
    """Write messages into the commit log, consume queue and index, and update the checkpoint.

    Creates the store if it does not exist. Like a producer, every message gets a UNIQ_KEY unless it has one.
    """
    cfg = build_config(store, broker_conf, hash_slots, max_index, commitlog_file_size, cq_file_size)
    if from_jsonl is None:
        if not topic:
            raise InvalidArgumentError("give --topic (and --body or --body-file), or --from-jsonl FILE")
        if body is not None and body_file is not None:
            raise InvalidArgumentError("give --body or --body-file, not both")
        data = body_file.read_bytes() if body_file is not None else (body or "").encode("utf-8")
        props = {}
        for p in prop or []:
            if "=" not in p or p.startswith("="):
                raise InvalidArgumentError(f"--property {p!r} is not K=V")
            k, v = p.split("=", 1)
            props[k] = v
        if keys:
            props[PROP_KEYS] = keys
        if tags:
            props[PROP_TAGS] = tags
        records: Iterator[MessageRecord] = iter([MessageRecord(topic=topic, body=data, queue_id=queue_id,
                                                               properties=props,
                                                               store_timestamp=store_timestamp or 0)])
        single = True
    else:
        if topic or body is not None or body_file or keys or tags or prop:
            raise InvalidArgumentError("--from-jsonl takes the messages from the file; drop the per-message options")
        records = _jsonl_records(from_jsonl, queue_id)
        single = False

    rows = []

    def on_result(r):
        if quiet:
            return
        if json_out:
            render.emit_json(r.as_dict())  # written and flushed as soon as the message is stored (durable with --sync-flush)
        elif single:
            rows.append(r)
        else:
            sys.stdout.write(f"{r.commitLogOffset}\t{r.queueOffset}\t{r.msgId}\t{r.uniqKey}\n")
            if sync_flush:
                sys.stdout.flush()

    if not json_out and not single and not quiet:
        sys.stdout.write("commitLogOffset\tqueueOffset\tmsgId\tuniqKey\n")
    with MessageStore(cfg, writable=True, create=True) as st:
        with render.progress(None, "put") as bar:
            task = bar.add_task("putting messages", total=None)
            n = 0
            for rec in records:
                on_result(st.put(rec, sync_flush))
                n += 1
                bar.advance(task)
    if quiet:
        render.note(f"stored {n} message(s)")
    elif single and rows:
        r = rows[0]
        render.kv_table("stored", [("commitLogOffset", r.commitLogOffset), ("queueOffset", r.queueOffset),
                                   ("msgId", r.msgId), ("uniqKey", r.uniqKey), ("storeSize", r.storeSize),
                                   ("topic", r.topic), ("queueId", r.queueId),
                                   ("storeTimestamp", render.fmt_time(r.storeTimestamp))])
    elif not single and not json_out:
        sys.stdout.flush()
        render.note(f"stored {n} message(s)")
