"""rmqtool put: write messages into a store as a broker would, from the options (one message) or a JSON-lines
file, each batch handed back as soon as it is stored (the command acknowledges it)."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Optional

from engine.broker.config.brokerconf import BrokerConfig


def put(cfg: BrokerConfig, stored_now: Callable, from_jsonl: Optional[str] = None, queue_id: int = 0,
        topic: Optional[str] = None, tags: Optional[str] = None, keys: Optional[str] = None,
        body: Optional[str] = None, body_file: Optional[str | os.PathLike] = None, prop: Optional[list[str]] = None,
        store_timestamp: Optional[int] = None, sync_flush: bool = False, create: bool = False):
    """Put the messages of `from_jsonl` (a path, '-' for stdin) or the one message of the options (`topic`,
    `body` or `body_file`, '-' for stdin, ...), which do not go together; `stored_now(result)` is called with
    each batch's result as soon as it is stored. Returns (messages stored, the last batch's result or None), as
    engine.broker.write.jsonl.put_prepared. InvalidArgumentError for options that do not make a message."""
    from engine.broker.layout import validate_queue_id
    from engine.broker.write.jsonl import put_prepared

    validate_queue_id(queue_id)
    batches, name = prepared(from_jsonl, queue_id, topic, tags, keys, body, body_file, prop, store_timestamp)
    try:
        return put_prepared(cfg, batches, sync_flush, name, stored_now, create_in_nonempty=create)
    finally:
        batches.close()  # a ParseHelper's process ends with the run, however it ends


def prepared(from_jsonl, queue_id: int, topic, tags, keys, body, body_file, prop, store_timestamp):
    """(the prepared batches to put, the input's name for messages) from --from-jsonl or the per-message options,
    which do not go together."""
    from engine.broker.write.jsonl import open_jsonl, prepared_batches
    from engine.errors import InvalidArgumentError

    if from_jsonl is None:
        one = single_batch(topic, tags, keys, body, body_file, queue_id, prop, store_timestamp)
        return prepared_batches([([one], [0], None)], queue_id, ""), ""
    if topic or body is not None or body_file or keys or tags or prop or store_timestamp is not None:
        raise InvalidArgumentError("--from-jsonl takes the messages from the file; drop the per-message options")
    from_jsonl = str(from_jsonl)  # a path, or '-' for stdin
    name = "<stdin>" if from_jsonl == "-" else from_jsonl
    return open_jsonl(from_jsonl, queue_id, name), name


def single_batch(topic, tags, keys, body, body_file, queue_id, prop, store_timestamp):
    """The one message of the options as a MessageBatch (the body from `body`, the file `body_file` or stdin)."""
    from engine.broker.commitlog.message import PROP_KEYS, PROP_TAGS
    from engine.broker.write.batch import MessageBatch, check_store_timestamp
    from engine.errors import InvalidArgumentError

    if not topic:
        raise InvalidArgumentError("give --topic (and --body or --body-file), or --from-jsonl FILE")
    if body is not None and body_file is not None:
        raise InvalidArgumentError("give --body or --body-file, not both")
    if store_timestamp is not None:
        check_store_timestamp("--store-timestamp", store_timestamp)
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
    if body is None and body_file is None:
        raise InvalidArgumentError("give the message body: --body TEXT or --body-file FILE (--body '' stores an "
                                   "empty body)")
    batch = MessageBatch(queue_id)
    if body_file is None:
        data = (body or "").encode("utf-8")
    elif str(body_file) == "-":  # the body from stdin, as --from-jsonl -
        data = sys.stdin.buffer.read()
    else:
        data = Path(body_file).read_bytes()
    batch.add(topic, data, props, queue_id, store_timestamp or 0)
    return batch
