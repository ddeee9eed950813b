"""rmqtool put: write messages into a store as a broker would."""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from engine.views.times import local_time
from rmqtool import render
from rmqtool.cli import handles_errors, shielded
from rmqtool.options import GEOMETRY, STORE, JsonOpt, StoreOptions, expand_path, store_options

#: The kinds of the lines put says on stderr (--json: rmqtool.notes): store times went back; INNER_MULTI_DISPATCH
#: ignored (no LMQ); the summary of what was stored.
TIME_WENT_BACK, LMQ_IGNORED, STORED = "store-time-went-back", "lmq-ignored", "stored"
#: What json.dumps (ensure_ascii=False) would escape in a string.
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')


class Acks:
    """Acknowledgement lines, written to stdout once per batch as soon as the batch is stored."""

    def __init__(self, json_out: bool, quiet: bool, header: str = ""):
        from json.encoder import encode_basestring

        self.json_out, self.quiet = json_out, quiet
        self.header = header  # written before the first acknowledgement: none when nothing is stored
        self._quote = encode_basestring
        self._prefix: dict[tuple[bytes, int], str] = {}

    def _msg_id_prefix(self, host: bytes, port: int) -> str:
        p = self._prefix.get((host, port))
        if p is None:
            p = self._prefix[(host, port)] = (host + port.to_bytes(4, "big", signed=True)).hex().upper()
        return p

    def lines(self, res) -> str:
        """The acknowledgement lines of one batch result (one str.format per message when the batch has one
        store host and UNIQ_KEYs that need no JSON escaping, the common case)."""
        if not len(res):
            return ""
        hosts = set(zip(res.store_host, res.store_port))
        if len(hosts) == 1 and (not self.json_out or (None not in res.uniq_key and
                                                       not _NEEDS_ESCAPE.search("".join(res.uniq_key)))):
            prefix = self._msg_id_prefix(*hosts.pop())
            if self.json_out:  # topics are validated names: letters, digits and %|_- only
                tmpl = ('{"commitLogOffset": %d, "queueOffset": %d, "msgId": "' + prefix.replace("%", "%%") +
                        '%016X", "uniqKey": "%s", "storeSize": %d, "topic": "%s", "queueId": %d, "storeTimestamp": %d}\n')
                rows = zip(res.phy, res.queue_offset, res.phy, res.uniq_key, res.size, res.topic, res.queue_id,
                           res.store_ts)
            else:
                tmpl = "%d\t%d\t" + prefix + "%016X\t%s\n"
                rows = zip(res.phy, res.queue_offset, res.phy, res.uniq_key)
            return "".join(map(tmpl.__mod__, rows))
        q = self._quote
        out = []
        for i in range(len(res)):
            phy = res.phy[i]
            mid = f"{self._msg_id_prefix(res.store_host[i], res.store_port[i])}{phy:016X}"
            u = res.uniq_key[i]
            if self.json_out:
                out.append(f'{{"commitLogOffset": {phy}, "queueOffset": {res.queue_offset[i]}, "msgId": "{mid}", '
                           f'"uniqKey": {"null" if u is None else q(u)}, "storeSize": {res.size[i]}, '
                           f'"topic": {q(res.topic[i])}, "queueId": {res.queue_id[i]}, '
                           f'"storeTimestamp": {res.store_ts[i]}}}\n')
            else:
                out.append(f"{phy}\t{res.queue_offset[i]}\t{mid}\t{u}\n")
        return "".join(out)

    def emit(self, res) -> None:
        if self.quiet or not len(res):
            return
        text = self.header + self.lines(res)
        self.header = ""
        with shielded():  # a signal never leaves half a line: the lines out are whole acknowledgements
            render.write_whole(text)


def _note_time_back(results: list) -> None:
    """One note when store times went back (a clock that stepped back, or storeTimestamp values out of order)."""
    results = [r for r in results if r.went_back]
    if not results:
        return
    phy, ts, before = results[0].went_back_first
    n = sum(r.went_back for r in results)
    render.note(f"warning: the store time went back for {n} message(s) (the first at commit-log offset {phy}: "
                f"{local_time(ts)}, after a message stored at {local_time(before)}); index file headers "
                "then do not bound their messages' times and the broker's query by key may miss them in a time "
                "range (rmqtool query-key does not; inspect-index --verify reports such headers)", TIME_WENT_BACK,
                messages=n, commitLogOffset=phy, storeTimestamp=ts, previousStoreTimestamp=before)


def _note_lmq_ignored(results: list) -> None:
    """One note when messages carried INNER_MULTI_DISPATCH and the store does not enable LMQ (the broker ignores it
    then: the message is stored as it came, in no %LMQ% queue)."""
    n = sum(r.lmq_ignored for r in results)
    if n:
        render.note(f"note: {n} message(s) carry INNER_MULTI_DISPATCH but the store does not enable LMQ "
                    "(enableLmq=true in broker.conf): stored as they came, with no INNER_MULTI_QUEUE_OFFSET and no "
                    "%LMQ% queue units, as the broker would", LMQ_IGNORED, messages=n)


def _put_acknowledged(cfg, acks: Acks, back: list, **options):
    """The engine's put, each batch acknowledged as soon as it is stored, with a progress bar on stderr; the
    batches in which a store time went back or LMQ dispatch was ignored are added to `back`."""
    from engine.commands.put import put as run_put

    with render.gc_paused(), render.progress(None, "put") as bar:
        task = bar.add_task("putting messages", total=None)

        def stored_now(res) -> None:
            acks.emit(res)
            bar.advance(task, len(res))
            if res.went_back or res.lmq_ignored:
                back.append(res)
        return run_put(cfg, stored_now, **options)


@handles_errors
@store_options(STORE, GEOMETRY, after="no_acks")
def put(  # noqa: PLR0913 - a typer command takes one parameter per option
    opts: StoreOptions,
    topic: Annotated[Optional[str], typer.Option("--topic", "-t", help="Topic of the message.")] = None,
    tags: Annotated[Optional[str], typer.Option("--tags", help="TAGS property.")] = None,
    keys: Annotated[Optional[str], typer.Option("--keys", "-k", help='KEYS property, space separated: "k1 k2".')] = None,
    body: Annotated[Optional[str], typer.Option("--body", help="Message body (UTF-8 text; --body '' for an empty "
                                                "body). One of --body and --body-file is needed.")] = None,
    body_file: Annotated[Optional[Path], typer.Option("--body-file", help="Read the body bytes from a file ('-': stdin).",
                                                      dir_okay=False)] = None,
    queue_id: Annotated[int, typer.Option("--queue-id", "-q", help="Queue id, 0..2147483647 (default 0).")] = 0,
    prop: Annotated[Optional[List[str]], typer.Option("--property", "-p", help="Extra property K=V (repeatable).")] = None,
    store_timestamp: Annotated[Optional[int], typer.Option("--store-timestamp",
                                                           help="Store time in epoch ms (default: now).")] = None,
    from_jsonl: Annotated[Optional[Path], typer.Option(
        "--from-jsonl", dir_okay=False, help="Put one message per JSON line (same field names as the JSON output); "
        "'-' for stdin.")] = None,
    sync_flush: Annotated[bool, typer.Option("--sync-flush", help="Acknowledge messages only once the commit log "
                                             "is flushed to disk (one flush per batch).")] = False,
    json_out: JsonOpt = False,
    # not `quiet`: put's --quiet leaves out the acknowledgements (its data), not its notes (docs/output-contract.md)
    no_acks: Annotated[bool, typer.Option("--quiet", "-Q", help="No acknowledgement lines on stdout: only the "
                                          "summary line on stderr.")] = False,
    create: Annotated[bool, typer.Option("--create", help="Make a store in a directory that is not empty and holds "
                                         "no store (a mount point with lost+found, say).")] = False,
) -> None:
    """Write messages into the commit log, consume queue and index, and update the checkpoint.

    Writes into a store (a directory holding commitlog/, consumequeue/, index/, config/, a checkpoint or an abort
    marker), or creates one in a missing path or an empty directory; any other directory is refused unless
    --create. The index geometry is the store's (broker.conf, the options, else its index files); put never
    writes index files of another geometry beside them. Like a producer, every message gets a UNIQ_KEY unless
    it has one. A bad JSON line stops the run: the messages before it are stored (and acknowledged), nothing
    after it.
    """
    cfg = opts.settle()
    single = from_jsonl is None
    acks = Acks(json_out, no_acks or (single and not json_out),
                "" if json_out or single or no_acks else "commitLogOffset\tqueueOffset\tmsgId\tuniqKey\n")
    back: list = []  # the batches in which a store time went back (one warning at the end, however it ends)
    try:
        stored, last = _put_acknowledged(
            cfg, acks, back, from_jsonl=_input_path(from_jsonl), queue_id=queue_id, topic=topic, tags=tags,
            keys=keys, body=body, body_file=_input_path(body_file), prop=prop, store_timestamp=store_timestamp,
            sync_flush=sync_flush, create=create)
    finally:
        _note_time_back(back)
        _note_lmq_ignored(back)
    if no_acks or (not single and not json_out):
        render.note(f"stored {stored} message(s)", STORED, messages=stored)
    elif single and not json_out and last is not None:
        _show_stored(last.results()[0])


def _input_path(p):
    """A path option as the engine takes it: '-' (stdin) as it is, a path with `~` expanded."""
    if p is None:
        return None
    return "-" if str(p) == "-" else str(expand_path(p))


def _show_stored(r) -> None:
    """The one message put from the options, as a table (its acknowledgement without --json)."""
    render.kv_table("stored", [("commitLogOffset", r.commitLogOffset), ("queueOffset", r.queueOffset),
                               ("msgId", r.msgId), ("uniqKey", r.uniqKey), ("storeSize", r.storeSize),
                               ("topic", r.topic), ("queueId", r.queueId),
                               ("storeTimestamp", local_time(r.storeTimestamp))])


