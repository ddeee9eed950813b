"""The recovery placeholder as a reader of the commit log meets it: the record `recover` writes over a damaged range
(engine.ops.recovery.placeholder writes it and lists a store's placeholders), recognised by its topic or its
RMQTOOL_QUARANTINED property, and what it says of itself (the quarantine manifest, the message it replaces).
"""
from __future__ import annotations

from engine.broker.commitlog.message import MessageRecord
from engine.findings import Note

QUARANTINE_TOPIC = "rmq_sys_rmqtool_quarantine"
QUARANTINE_PROPERTY = "RMQTOOL_QUARANTINED"
ORIGIN_TOPIC, ORIGIN_QUEUE_ID, ORIGIN_QUEUE_OFFSET = ("RMQTOOL_ORIGIN_TOPIC", "RMQTOOL_ORIGIN_QUEUE_ID",
                                                     "RMQTOOL_ORIGIN_QUEUE_OFFSET")


def is_placeholder(rec: MessageRecord) -> bool:
    """A record recover wrote in place of damaged bytes (its topic, or its RMQTOOL_QUARANTINED property)."""
    return rec.topic == QUARANTINE_TOPIC or QUARANTINE_PROPERTY in (rec.properties or {})


def placeholder_info(rec: MessageRecord) -> dict:
    """What a placeholder says of itself: the quarantine manifest holding the damaged bytes and the message it
    replaces (`origin`: {topic, queueId, queueOffset}, None when the range was too small to say), for --json."""
    props = rec.properties or {}
    origin = None
    if ORIGIN_TOPIC in props:
        try:
            origin = {"topic": props[ORIGIN_TOPIC], "queueId": int(props.get(ORIGIN_QUEUE_ID, "")),
                      "queueOffset": int(props.get(ORIGIN_QUEUE_OFFSET, ""))}
        except ValueError:
            origin = None
    return {"manifest": props.get(QUARANTINE_PROPERTY), "origin": origin}


#: The kind of placeholder_note (engine.findings.Note).
PLACEHOLDER_NOTE = "placeholder"


def placeholder_note(rec: MessageRecord) -> Note:
    """One line for stderr: what the record is and where the damaged bytes went (kind placeholder, fields
    commitLogOffset and manifest)."""
    info = placeholder_info(rec)
    where = f" (the damaged bytes are kept in {info['manifest']})" if info["manifest"] else ""
    return Note(PLACEHOLDER_NOTE, f"commit-log offset {rec.physical_offset} holds rmqtool recover's placeholder for a "
                f"damaged message{where}: consumers of its queue receive it in that message's place (topic "
                f"{QUARANTINE_TOPIC})", commitLogOffset=rec.physical_offset, manifest=info["manifest"])
