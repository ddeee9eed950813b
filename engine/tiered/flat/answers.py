"""What the `tiered` read commands answer, as JSON-ready dicts with RocketMQ's field names: one function per
command over an open TieredStore (engine.tiered.flat.store)."""
from __future__ import annotations

from typing import Iterator

from engine.broker.commitlog.message import check_message
from engine.errors import InvalidArgumentError
from engine.tiered.flat.config import CQ_UNIT_SIZE
from engine.tiered.flat.layout import FILE_TYPE_NAMES, COMMIT_LOG, CONSUME_QUEUE
from engine.tiered.flat.reader import LOWER, UPPER, FetchResult, Fetched, store_time
from engine.tiered.flat.segments import TieredReadError
from engine.tiered.flat.store import TieredStore

MAX_COUNT = 1_000_000


def queue_rows(store: TieredStore, topic: str | None = None) -> Iterator[dict]:
    """One row per queue the broker loads, with FlatMessageFile's figures."""
    for t, q in store.queue_ids(topic):
        fq = store.queue(t, q)
        row = {"cluster": store.layout.cluster, "broker": store.layout.broker, "topic": t, "queueId": q,
               "topicId": fq.topic_id}
        try:
            row.update({"consumeQueueMinOffset": fq.min_offset, "consumeQueueMaxOffset": fq.max_offset,
                        "firstMessageOffset": fq.first_message_offset})
        except TieredReadError as e:
            row.update({"consumeQueueMinOffset": None, "consumeQueueMaxOffset": fq.max_offset, "error": str(e)})
        row.update({
            "commitLogMinOffset": fq.commit_log.min_offset, "commitLogMaxOffset": fq.commit_log.commit_offset,
            "minStoreTimestamp": fq.min_store_timestamp, "maxStoreTimestamp": fq.max_store_timestamp,
            "isFlatFileInit": fq.is_flat_file_init, "fileReservedHours": fq.reserved_hours(),
            "segments": {FILE_TYPE_NAMES[COMMIT_LOG]: len(fq.commit_log.segments),
                         FILE_TYPE_NAMES[CONSUME_QUEUE]: len(fq.consume_queue.segments)},
            "bytes": {FILE_TYPE_NAMES[COMMIT_LOG]: fq.commit_log.total_bytes,
                      FILE_TYPE_NAMES[CONSUME_QUEUE]: fq.consume_queue.total_bytes},
        })
        yield row


def segment_rows(store: TieredStore, topic: str, queue_id: int) -> list[dict]:
    """One row per segment as the broker holds it, plus what the metadata says where it differs, plus segment
    files the metadata does not list (the broker does not read them)."""
    fq = store.queue(topic, queue_id)
    rows = []
    for f in (fq.commit_log, fq.consume_queue):
        for s in f.segments:
            row = {"fileType": f.type_name, "baseOffset": s.base, "size": s.size, "beginTimestamp": s.min_ts,
                   "endTimestamp": s.max_ts, "fileName": s.file_name, "fileBytes": s.file_len}
            if s.meta_size is None:
                row["metadata"] = None if store.metadata is not None else "no metadata"
            elif s.meta_size != s.size:
                row["metadata"] = {"size": s.meta_size}
            rows.append(row)
    for ft, p, base, length in store.orphan_files(topic, queue_id):
        rows.append({"fileType": FILE_TYPE_NAMES[ft], "baseOffset": base, "size": None, "beginTimestamp": None,
                     "endTimestamp": None, "fileName": p.name, "fileBytes": length,
                     "metadata": "not listed: the broker does not read this file"})
    return rows


def message_json(m: Fetched) -> dict:
    """A tiered record in the shape of `rmqtool get --json` (its commitLogOffset/msgId are the tiered ones)."""
    r = check_message(m.record, 0, check_crc=False)
    if r.record is None:
        return {"queueOffset": m.queue_offset, "storeSize": len(m.record), "tagsCode": m.tags_code,
                "error": r.reason or r.status}
    j = r.record.to_json()
    j["tagsCode"] = m.tags_code
    if r.status != "VALID":
        j["error"] = r.reason
    return j


def fetch_json(res: FetchResult) -> dict:
    return {"status": res.status, "nextBeginOffset": res.next_begin_offset, "minOffset": res.min_offset,
            "maxOffset": res.max_offset, "messages": [message_json(m) for m in res.messages]}


def get_messages(store: TieredStore, topic: str, queue_id: int, queue_offset: int, count: int = 1,
                 raw: bool = False, as_consumer: bool = False) -> FetchResult:
    """The fetcher's answer: every message in the range, or with raw the broker's batch read as it is, or with
    as_consumer what a consumer's pull of `count` messages receives (the read-ahead and its byte limit)."""
    if raw and as_consumer:
        raise InvalidArgumentError("give --raw or --as-consumer, not both")
    if not 0 < count <= MAX_COUNT:
        raise InvalidArgumentError(f"--count {count} is out of range 1..{MAX_COUNT}")
    fq = store.queue(topic, queue_id)
    if as_consumer:
        return fq.pull(queue_offset, count)
    return fq.batch(queue_offset, count) if raw else fq.get(queue_offset, count)


def offsets_by_time(store: TieredStore, topic: str, queue_id: int, timestamps: list[int],
                    boundary: str = LOWER) -> list[dict]:
    """getOffsetInQueueByTime per timestamp; `error` where the broker throws (flat-store §8)."""
    b = boundary.upper()
    if b not in (LOWER, UPPER):
        raise InvalidArgumentError(f"--boundary {boundary!r}: use lower or upper")
    fq = store.queue(topic, queue_id)
    out = []
    for ts in timestamps:
        row = {"timestamp": ts, "boundary": b}
        try:
            row["result"] = fq.offset_by_time(ts, b)
        except TieredReadError as e:
            row["error"] = str(e)
        out.append(row)
    return out


def cq_rows(store: TieredStore, topic: str, queue_id: int) -> Iterator[dict]:
    """Every unit in the CONSUME_QUEUE files, with getMessageStoreTimeStamp (-1 where the record is gone)."""
    fq = store.queue(topic, queue_id)
    for q, offset, size, tags in fq.units():
        try:
            ts = store_time(fq.commit_log.read(offset, size))
        except TieredReadError:
            ts = -1
        yield {"queueOffset": q, "commitLogOffset": offset, "size": size, "tagsCode": tags, "storeTimestamp": ts}


__all__ = ["queue_rows", "segment_rows", "get_messages", "fetch_json", "offsets_by_time", "cq_rows", "CQ_UNIT_SIZE"]
