"""Query by key on a tier as the broker answers it (MessageStoreFetcherImpl.queryMessageAsync, format §9.7), and
the checked view an operator asks for.

The broker's answer: no topic metadata -> nothing; IndexStoreService.queryAsync (engine.tiered.index.table) over
the uploaded INDEX segments and the still-local tiered index files; then, item by item in the service's order, an
item of another topicId is skipped, an item of a queue the broker holds no flat file for is skipped, and `size`
bytes are read at the item's offset in that queue's tiered commit log, up to maxCount reads. A read the flat file
refuses makes the whole answer fail (the futures are joined with allOf). No key text is stored in the index, so
messages of another key with the same hash (and topic) are part of the broker's answer.

The checked view keeps the broker's messages that really are what was asked: a whole record (CRC), of the topic,
stored within [begin, end], whose tiered key set (UNIQ_KEY and every KEYS token, format §9.6) holds the key; the
others are rejected with the reason.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from engine.broker.layout import StoreLayout
from engine.broker.commitlog.message import VALID, MessageRecord, check_message
from engine.errors import InvalidArgumentError
from engine.tiered.flat.segments import TieredReadError
from engine.tiered.flat.store import TieredStore, TierSource, open_tier
from engine.tiered.index.flatfile import IndexSegment, index_segments
from engine.tiered.index.service import check_record
from engine.tiered.index.table import (ServiceAnswer, TieredIndexService, check_query, item_row, open_service)

MESSAGE_FIELDS = ("topic", "queueId", "queueOffset", "commitLogOffset", "storeSize", "storeTimestamp")


@dataclass
class KeyQuestion:
    topic: str
    key: str
    max_count: int
    begin: int
    end: int

    def as_dict(self) -> dict:
        return {"topic": self.topic, "key": self.key, "maxCount": self.max_count, "begin": self.begin,
                "end": self.end}


@dataclass
class FetchedMessage:
    """One buffer of the broker's answer: the item it was read for and the record decoded from it."""

    item: dict
    record: Optional[MessageRecord]
    status: str                      # check_message's status (VALID when whole, CRC included)
    reason: str = ""

    def broker_json(self) -> dict:
        """The fields a client decodes from the buffer (MessageExt names)."""
        r = self.record
        if r is None:
            return {"queueId": self.item["queueId"], "commitLogOffset": self.item["offset"],
                    "storeSize": self.item["size"], "error": self.reason or self.status}
        return {"topic": r.topic, "queueId": r.queue_id, "queueOffset": r.queue_offset,
                "commitLogOffset": r.physical_offset, "storeSize": r.total_size,
                "storeTimestamp": r.store_timestamp}


@dataclass
class KeyAnswer:
    """The broker's answer to one question, what it skipped, and (after `check`) the checked view."""

    question: KeyQuestion
    index: ServiceAnswer = field(default_factory=ServiceAnswer)
    topic_id: Optional[int] = None
    messages: list[FetchedMessage] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)     # items the fetcher did not read, with "reason"
    failed: Optional[str] = None                          # why the broker's answer fails as a whole
    kept: list[FetchedMessage] = field(default_factory=list)
    rejected: list[tuple[FetchedMessage, str]] = field(default_factory=list)

    @property
    def broker_messages(self) -> list[FetchedMessage]:
        """What the broker returns: nothing when its answer failed."""
        return [] if self.failed else self.messages

    def broker_dict(self) -> dict:
        """One answer line: the question and the broker's messages (--from-jsonl)."""
        d = self.question.as_dict()
        d["messages"] = [m.broker_json() for m in self.broker_messages]
        if self.failed:
            d["error"] = self.failed
        return d

    def index_dict(self) -> dict:
        """One answer line of the index alone (--from-jsonl --raw): the service's items and each file's."""
        d = self.question.as_dict()
        d["items"] = [item_row(i) for i in self.index.items]
        d["perFile"] = [f.as_dict() for f in self.index.per_file]
        d["perFileDistinct"] = self.index.distinct
        d["setDependsOnThreadTiming"] = self.index.distinct > self.question.max_count
        return d

    def check(self, unique: bool = False) -> "KeyAnswer":
        """The checked view of the broker's messages (kept / rejected with a reason)."""
        q = self.question
        self.kept, self.rejected = [], []
        for m in self.broker_messages:
            why = message_mismatch(m, q, unique)
            if why:
                self.rejected.append((m, why))
            else:
                self.kept.append(m)
        return self


def message_mismatch(m: FetchedMessage, q: KeyQuestion, unique: bool) -> str:
    """'' when the buffer is a whole record of the topic, stored in [begin, end], that carries the key (its
    UNIQ_KEY with `unique`), else why not."""
    r = m.record
    if r is None or m.status != VALID:
        return f"no whole record at tiered offset {m.item['offset']} ({m.reason or m.status.lower()})"
    why = check_record(r, q.topic, q.key, unique, q.begin, q.end)
    return why + (" (the index keeps seconds)" if why.startswith("store time") else "")


class TierIndex:
    """A tier's flat files and its tiered index service (the uploaded INDEX segments and the local files), asked
    any number of key questions (one process, files opened once). Close it when done."""

    def __init__(self, store: TieredStore, service: TieredIndexService, index_segments: list[IndexSegment]):
        self.store = store
        self.service = service
        self.index_segments = index_segments
        self.notes: list[str] = []

    def close(self) -> None:
        self.service.close()
        self.store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def topic_id(self, topic: str) -> Optional[int]:
        md = self.store.metadata
        t = md.topic(topic) if md is not None else None
        return t.topic_id if t is not None else None

    def ask(self, q: KeyQuestion, require_topic: bool = False) -> KeyAnswer:
        """queryMessageAsync(topic, key, maxCount, begin, end). require_topic: a topic the broker does not tier is
        a TopicNotFoundError (one question asked by hand), not the broker's empty answer (--from-jsonl keeps that)."""
        check_query(q.max_count, q.begin, q.end)
        if require_topic:
            self.store.require_topic(q.topic)
        ans = KeyAnswer(q, topic_id=self.topic_id(q.topic))
        # (the fetcher does not ask the index for a topic without metadata; the service's answer is shown anyway)
        ans.index = self.service.query(q.topic, q.key, q.max_count, q.begin, q.end)
        if ans.topic_id is None:
            ans.skipped = [{**it, "reason": f"topic {q.topic!r} is not in the tiered metadata"}
                           for it in ans.index.items]
            return ans
        for it in ans.index.items:
            if it["topicId"] != ans.topic_id:
                ans.skipped.append({**it, "reason": f"topicId {it['topicId']} is not {q.topic}'s {ans.topic_id}"})
                continue
            if not self.store.has_queue(q.topic, it["queueId"]):
                ans.skipped.append({**it, "reason": f"the broker holds no flat file for {q.topic}/{it['queueId']}"})
                continue
            ans.messages.append(self._read(q.topic, it, ans))
            if len(ans.messages) >= q.max_count:
                break
        return ans

    def _read(self, topic: str, it: dict, ans: KeyAnswer) -> FetchedMessage:
        try:
            buf = self.store.queue(topic, it["queueId"]).commit_log.read(it["offset"], it["size"])
        except TieredReadError as e:
            if ans.failed is None:
                ans.failed = f"reading {topic}/{it['queueId']} at tiered offset {it['offset']} failed ({e})"
            return FetchedMessage(it, None, "READ_FAILED", str(e))
        r = check_message(buf, 0, len(buf), check_crc=True)
        if r.record is None:
            return FetchedMessage(it, None, r.status, r.reason)
        return FetchedMessage(it, r.record, r.status, r.reason)


def open_tier_index(src: TierSource, local_dir: Optional[Path] = None, hash_slots: Optional[int] = None,
                    max_index: Optional[int] = None) -> TierIndex:
    """The tier `src` names with its index service: the INDEX flat file of its metadata and the local files of
    `local_dir` (default <store>/tiered_index_file); geometry: the options, else broker.conf, else the files'."""
    store = open_tier(src, tieredStoreIndexFileMaxHashSlotNum=hash_slots, tieredStoreIndexFileMaxIndexNum=max_index)
    try:
        return tier_index_of(store, local_dir)
    except BaseException:
        store.close()
        raise


def tier_index_of(store: TieredStore, local_dir: Optional[Path] = None) -> TierIndex:
    """The index service of an open tier (its config gives the geometry)."""
    if local_dir is None and store.local_root is not None:
        local_dir = StoreLayout(store.local_root).tiered_index_dir
    segments = index_segments(store.layout, store.metadata)
    ti = TierIndex(store, open_service(local_dir, segments, store.config), segments)
    ti.notes += store.warnings + [f"{p}: {t}" for p, t in ti.service.problems]
    for p in ti.service.compacted_local:
        ti.notes.append(f"{p}: compacted tiered index file (as `tiered reindex --out` writes), read as an uploaded "
                        "one; a broker loads only unsealed files from its tiered_index_file/")
    for ts in sorted(ti.service.shadowed):
        ti.notes.append(f"local tiered index file {ts} has the timestamp of an uploaded one: the broker reads the "
                        "uploaded one and deletes the local file at start-up")
    if store.metadata is None:
        ti.notes.append("no tiered metadata: the broker knows no topic and answers nothing")
    if ti.service.geometry.source == "inferred":
        ti.notes.append(f"tiered index geometry {ti.service.geometry.hash_slot_num} hash slots, read from the "
                        "files (the broker uses tieredStoreIndexFileMaxHashSlotNum: give it with --hash-slots or "
                        "broker.conf when it differs)")
    return ti


def parse_question(line: str, defaults: KeyQuestion) -> KeyQuestion:
    """One --from-jsonl line: {"topic", "key", "maxCount"?, "begin"?, "end"?} (other fields ignored); what is
    missing comes from `defaults`. begin > end is a question (the broker answers nothing), not an error."""
    try:
        d = json.loads(line)
    except ValueError as e:
        raise InvalidArgumentError(f"not a JSON object ({e})") from None
    if not isinstance(d, dict):
        raise InvalidArgumentError("not a JSON object")
    q = KeyQuestion(d.get("topic"), d.get("key"), d.get("maxCount", defaults.max_count), d.get("begin", defaults.begin),
                    d.get("end", defaults.end))
    if not isinstance(q.topic, str) or not isinstance(q.key, str):
        raise InvalidArgumentError("\"topic\" and \"key\" must be strings")
    for name, v in (("maxCount", q.max_count), ("begin", q.begin), ("end", q.end)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise InvalidArgumentError(f"\"{name}\" must be an integer")
    check_query(q.max_count, q.begin, q.end)
    return q


def answer_lines(reader: TierIndex, lines, defaults: KeyQuestion, raw: bool = False):
    """--from-jsonl: one answer per input line, in order (blank lines skipped): the broker's answer
    (`broker_dict`), or with `raw` the index's (`index_dict`); a line that is not a question answers
    {"line": n, "error": ...}. One question is held at a time (memory does not grow with the input)."""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            q = parse_question(line, defaults)
        except InvalidArgumentError as e:
            yield {"line": n, "error": str(e)}
            continue
        ans = reader.ask(q)
        yield ans.index_dict() if raw else ans.broker_dict()
