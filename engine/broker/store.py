"""The message store: commit log + consume queues + index + checkpoint under one lock (format §1, §7)."""
from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from engine.broker.checkpoint import Checkpoint
from engine.broker.commitlog import CommitLog, LogEntry, open_commitlog
from engine.broker.config import BrokerConfig
from engine.broker.consumequeue import ConsumeQueue
from engine.errors import InvalidArgumentError, NotAStoreError, UncleanStoreError
from engine.broker import keyquery
from engine.broker.indexservice import IndexService
from engine.broker.layout import StoreLayout
from engine.java.lang import LONG_MAX
from engine.broker.lock import StoreLock, mark_clean, mark_in_use
from engine.broker.message import (PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY, TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE,
                            VALID, MessageEncodeError, MessageRecord, UniqKeyGenerator, decode_offset_msg_id,
                            parse_host)

def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class PutResult:
    commitLogOffset: int
    queueOffset: int
    msgId: str
    uniqKey: str | None
    storeSize: int
    topic: str
    queueId: int
    storeTimestamp: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def message_from_json(obj: dict, default_queue_id: int = 0) -> MessageRecord:
    """A message object in the CLI's JSON shape (MessageExt names) -> a record to put."""
    if not isinstance(obj, dict):
        raise InvalidArgumentError("each message must be a JSON object")
    topic = obj.get("topic")
    if not isinstance(topic, str) or not topic:
        raise InvalidArgumentError("message has no topic")
    body = obj.get("body", "")
    if body is None:
        body = ""
    if obj.get("bodyEncoding") == "base64":
        try:
            body_b = base64.b64decode(body, validate=True)
        except ValueError:
            raise InvalidArgumentError("body is not valid base64") from None
    elif isinstance(body, str):
        body_b = body.encode("utf-8")
    else:
        raise InvalidArgumentError("body must be a string")
    props = dict(obj.get("properties") or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items()):
        raise InvalidArgumentError("properties must map strings to strings")
    keys = obj.get("keys")
    if isinstance(keys, list):
        keys = " ".join(str(k) for k in keys)
    if keys:
        props[PROP_KEYS] = keys
    if obj.get("tags"):
        props[PROP_TAGS] = str(obj["tags"])
    if obj.get("uniqKey"):
        props[PROP_UNIQ_KEY] = str(obj["uniqKey"])
    rec = MessageRecord(topic=topic, body=body_b, properties=props)
    ints = {"queueId": "queue_id", "flag": "flag", "sysFlag": "sys_flag", "reconsumeTimes": "reconsume_times",
            "preparedTransactionOffset": "prepared_transaction_offset", "bornTimestamp": "born_timestamp",
            "storeTimestamp": "store_timestamp"}
    rec.queue_id = default_queue_id
    for js, attr in ints.items():
        if obj.get(js) is not None:
            v = obj[js]
            if isinstance(v, bool) or not isinstance(v, int):
                raise InvalidArgumentError(f"{js} must be an integer")
            setattr(rec, attr, v)
    for js, attr in (("bornHost", "born"), ("storeHost", "store")):
        if obj.get(js):
            try:
                addr, port = parse_host(str(obj[js]))
            except ValueError as e:
                raise InvalidArgumentError(str(e)) from None
            setattr(rec, f"{attr}_host", addr)
            setattr(rec, f"{attr}_port", port)
    return rec


class MessageStore:
    """A store directory. Read-only unless opened with writable=True (which takes the lock)."""

    def __init__(self, config: BrokerConfig, writable: bool = False, create: bool = False,
                 allow_unclean: bool = False):
        self.config = config
        self.root = config.root
        self.layout = StoreLayout.of(config)
        self.writable = writable
        self._lock: StoreLock | None = None
        self._commitlog: CommitLog | None = None
        self._index: IndexService | None = None
        self._cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self._closed = False
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
            if not self.root.is_dir():
                raise NotAStoreError(f"{self.root} is not a directory")
        else:
            self.layout.require_store()
        if writable:
            self._lock = StoreLock(self.root).acquire()
            try:
                if self.abort_path.exists() and not allow_unclean:
                    raise UncleanStoreError(
                        f"store {self.root} was not shut down cleanly (abort file present); run `rmqtool recover` first")
                self.checkpoint = Checkpoint.load(self.layout.checkpoint)
            except BaseException:
                self._lock.release()
                raise
        else:
            self.checkpoint = Checkpoint.load(self.layout.checkpoint)

    @property
    def abort_path(self) -> Path:
        return self.layout.abort

    @property
    def index_dir(self) -> Path:
        return self.layout.index_dir

    # ------------------------------------------------------------ components
    @property
    def commitlog(self) -> CommitLog:
        if self._commitlog is None:
            self._commitlog = open_commitlog(self.config, writable=self.writable)
        return self._commitlog

    @property
    def index(self) -> IndexService:
        if self._index is None:
            self._index = IndexService(self.index_dir, self.config.maxHashSlotNum, self.config.maxIndexNum,
                                       writable=self.writable, on_full_flush=self._on_index_full_flush)
        return self._index

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self._cqs.get(key)
        if cq is None:
            cq = ConsumeQueue(self.root, topic, queue_id, self.config.cq_file_size, writable=self.writable)
            self._cqs[key] = cq
        return cq

    def _on_index_full_flush(self, ts: int) -> None:
        self.checkpoint.indexMsgTimestamp = ts
        self.checkpoint.save(self.layout.checkpoint)

    # ------------------------------------------------------------ lifecycle
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self.writable and getattr(self, "_put_started", False):
                self._shutdown_flush()
        finally:
            for cq in self._cqs.values():
                cq.close()
            if self._index:
                self._index.close()
            if self._commitlog:
                self._commitlog.close()
            if self._lock:
                self._lock.release()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and self.writable and not issubclass(exc_type, (InvalidArgumentError,
                                                                                 MessageEncodeError)):
            # Bad input is refused before any byte of that message is written, so the store is still
            # consistent. Anything else may have stopped a write half-way: leave the abort marker so the
            # next writer recovers first.
            self._put_started = False
        self.close()

    # ------------------------------------------------------------ put
    def _begin_put(self) -> None:
        if getattr(self, "_put_started", False):
            return
        cl = self.commitlog
        end = cl.find_end(hint=self.checkpoint.confirmPhyOffset or None)
        mark_in_use(self.layout)  # like a broker's start(): mark the store as in use before changing anything
        cl.open_for_append(end)
        self._uniq = UniqKeyGenerator()
        self._last_record_start = None
        self._put_started = True

    def put(self, rec: MessageRecord, sync_flush: bool = False) -> PutResult:
        """Append one message: commit log, consume queue, index; with sync_flush it is durable on return."""
        self._begin_put()
        cl = self.commitlog
        if not rec.topic:
            raise InvalidArgumentError("message has no topic")
        if len(rec.body) > self.config.maxMessageSize:
            raise MessageEncodeError(
                f"message body is {len(rec.body)} bytes; maxMessageSize is {self.config.maxMessageSize}")
        if PROP_UNIQ_KEY not in rec.properties:
            rec.properties[PROP_UNIQ_KEY] = self._uniq.next()
        rec.properties_raw = None
        ts = now_ms()
        if not rec.store_timestamp:
            rec.store_timestamp = ts
        if not rec.born_timestamp:
            rec.born_timestamp = rec.store_timestamp
        tx = rec.tx_type
        in_cq = tx in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)
        cq = self.consume_queue(rec.topic, rec.queue_id) if in_cq else None
        rec.queue_offset = cq.max_offset_in_queue if cq is not None else 0
        phy, data = cl.append(rec)
        self._last_record_start = phy
        if cq is not None:
            cq.put(phy, len(data), rec.tags_code(), rec.queue_offset)
            self.checkpoint.logicsMsgTimestamp = rec.store_timestamp
        if self.config.messageIndexEnable:
            self.index.build_index(rec)
        if sync_flush:
            cl.sync()
            self.checkpoint.physicMsgTimestamp = rec.store_timestamp
        self._last_store_ts = rec.store_timestamp
        return PutResult(phy, rec.queue_offset, rec.msg_id, rec.uniq_key, len(data), rec.topic, rec.queue_id,
                         rec.store_timestamp)

    def _shutdown_flush(self) -> None:
        """Clean shutdown: data, then consume queues and index, then checkpoint, then remove abort."""
        cl = self.commitlog
        cl.sync()
        for cq in self._cqs.values():
            cq.sync()
        if self._index is not None:
            self._index.flush_all()
        cp = self.checkpoint
        if getattr(self, "_last_store_ts", None):
            cp.physicMsgTimestamp = max(cp.physicMsgTimestamp, self._last_store_ts)
            cp.logicsMsgTimestamp = max(cp.logicsMsgTimestamp, self._last_store_ts)
        if self._last_record_start is not None:
            cp.confirmPhyOffset = self._last_record_start
        cp.save(self.layout.checkpoint)
        mark_clean(self.layout)

    # ------------------------------------------------------------ read
    def get(self, offset: int, check_crc: bool = True) -> MessageRecord:
        if offset < 0:
            raise InvalidArgumentError(f"offset {offset} is negative")
        r = self.commitlog.check_at(offset, check_crc=check_crc)
        if r.status != VALID:
            raise InvalidArgumentError(f"no valid message at commit-log offset {offset}: {r.reason or r.status.lower()}")
        return r.record

    def get_by_msg_id(self, msg_id: str) -> MessageRecord:
        try:
            _, _, offset = decode_offset_msg_id(msg_id)
        except ValueError as e:
            raise InvalidArgumentError(str(e)) from None
        rec = self.get(offset)
        if rec.msg_id.upper() != msg_id.upper():
            raise InvalidArgumentError(
                f"message id {msg_id} points at offset {offset}, but the message there has id {rec.msg_id}")
        return rec

    def walk(self, start: int | None = None, count: int | None = None, check_crc: bool = True) -> Iterator[LogEntry]:
        n = 0
        for e in self.commitlog.walk(start, check_crc=check_crc):
            if count is not None and n >= count:
                return
            yield e
            n += 1

    # ------------------------------------------------------------ query by key (engine.broker.keyquery)
    def query_raw(self, topic: str, key: str, max_num: int, begin: int, end: int) -> "keyquery.RawAnswer":
        return keyquery.query_raw(self, topic, key, max_num, begin, end)

    def query(self, topic: str, key: str, max_num: int = 64, begin: int = 0, end: int = LONG_MAX,
              unique: bool = False) -> "keyquery.QueryResult":
        return keyquery.query(self, topic, key, max_num, begin, end, unique)
