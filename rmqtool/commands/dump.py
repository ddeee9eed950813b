"""rmqtool get and dump-commitlog: read messages straight from the commit log."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from engine.errors import InvalidArgumentError
from engine.broker.message import VALID
from engine.broker.store import MessageStore
from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.options import BrokerConfOpt, CommitLogSizeOpt, JsonOpt, StoreOpt, build_config

DUMP_LIMIT = 1_000_000_000


def _show_message(rec) -> None:
    j = rec.to_json()
    pairs = [(k, j[k]) for k in ("msgId", "topic", "queueId", "queueOffset", "commitLogOffset", "storeSize",
                                 "bodyCRC", "flag", "sysFlag", "transactionType", "magicVersion", "reconsumeTimes",
                                 "preparedTransactionOffset", "bornHost", "storeHost")]
    pairs += [("bornTimestamp", f"{j['bornTimestamp']} ({render.fmt_time(j['bornTimestamp'])})"),
              ("storeTimestamp", f"{j['storeTimestamp']} ({render.fmt_time(j['storeTimestamp'])})"),
              ("keys", " ".join(j["keys"])), ("tags", j["tags"]), ("uniqKey", j["uniqKey"])]
    pairs += [(f"property {k}", v) for k, v in sorted(j["properties"].items())]
    if "compression" in j:
        pairs.append(("compression", j["compression"]))
    pairs.append(("body" + (" (base64)" if j.get("bodyEncoding") else ""), j["body"]))
    render.kv_table(f"message at {rec.physical_offset}", pairs)


@handles_errors
def get(
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    offset: Annotated[Optional[int], typer.Option("--offset", "-o", help="Commit-log (physical) offset.")] = None,
    msg_id: Annotated[Optional[str], typer.Option("--msg-id", "-m", help="Offset message id (store host + "
                                                  "port + offset, as mqadmin queryMsgById takes).")] = None,
    json_out: JsonOpt = False,
    commitlog_file_size: CommitLogSizeOpt = None,
) -> None:
    """One message, by commit-log offset or by offset message id."""
    if (offset is None) == (msg_id is None):
        raise InvalidArgumentError("give exactly one of --offset and --msg-id")
    cfg = build_config(store, broker_conf, commitlog_file_size=commitlog_file_size)
    with MessageStore(cfg) as st:
        rec = st.get(offset) if offset is not None else st.get_by_msg_id(msg_id)
        if json_out:
            render.emit_json(rec.to_json())
        else:
            _show_message(rec)


@handles_errors
def dump_commitlog(
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    from_offset: Annotated[Optional[int], typer.Option("--from", help="Start at this record boundary (default: the "
                                                       "first segment).")] = None,
    count: Annotated[Optional[int], typer.Option("--count", "-n", help="At most this many entries.")] = None,
    no_check_crc: Annotated[bool, typer.Option("--no-check-crc", help="Do not verify body CRCs.")] = False,
    json_out: JsonOpt = False,
    commitlog_file_size: CommitLogSizeOpt = None,
) -> None:
    """Messages in commit-log order, with BLANK fillers and corrupt records reported (not skipped silently).

    Exits 3 when a corrupt record was met.
    """
    if count is not None and not 0 < count <= DUMP_LIMIT:
        raise InvalidArgumentError(f"--count {count} is out of range 1..{DUMP_LIMIT}")
    if from_offset is not None and from_offset < 0:
        raise InvalidArgumentError(f"--from {from_offset} is negative")
    cfg = build_config(store, broker_conf, commitlog_file_size=commitlog_file_size)
    bad = 0
    with MessageStore(cfg) as st:
        if from_offset is not None:
            r = st.commitlog.check_at(from_offset, check_crc=False)
            if r.status not in (VALID, "BLANK"):
                raise InvalidArgumentError(f"--from {from_offset} is not a record boundary: {r.reason}")
        rows = []
        for e in st.walk(from_offset, count, check_crc=not no_check_crc):
            if e.kind != VALID:
                bad += e.kind != "BLANK"
            if json_out:
                if e.kind == VALID:
                    j = e.record.to_json()
                    j["type"] = "MESSAGE"
                    render.emit_json(j)
                else:
                    render.emit_json({"type": e.kind, "commitLogOffset": e.offset, "size": e.size,
                                      "segment": e.segment, "reason": e.reason})
            else:
                if e.kind == VALID:
                    r = e.record
                    rows.append([e.offset, "MESSAGE", r.total_size, render.fmt_time(r.store_timestamp), r.topic,
                                 r.queue_id, r.queue_offset, " ".join(r.keys), r.msg_id])
                else:
                    rows.append([e.offset, e.kind, e.size if e.size >= 0 else "", "", "", "", "", "", e.reason])
        if not json_out:
            render.table("commit log", ["offset", "type", "size", "storeTime", "topic", "queueId", "queueOffset",
                                        "keys", "msgId / note"], rows)
    if bad:
        render.note(f"{bad} corrupt record(s) found")
        raise typer.Exit(3)
