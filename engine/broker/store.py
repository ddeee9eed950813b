"""The message store: commit log + consume queues + index + checkpoint under one lock (format §1, §7)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from engine.broker.config.checkpoint import Checkpoint
from engine.broker.commitlog.log import MISPLACED, CommitLog, LogEntry
from engine.broker.dledger.log import open_log
from engine.broker.config.brokerconf import BrokerConfig
from engine.errors import InvalidArgumentError, NotAStoreError, UncleanStoreError
from engine.broker.index import keyquery
from engine.broker.index.service import IndexService
from engine.broker.layout import StoreLayout
from engine.broker.topics import require_topic
from engine.java.lang import LONG_MAX
from engine.broker.config.lock import StoreLock, mark_clean, mark_in_use
from engine.broker.commitlog.message import (PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY, VALID, MessageRecord,
                                             UniqKeyGenerator, parse_host)
from engine.fsutil import WriteFailedError
from engine.errors import CorruptFileError

if TYPE_CHECKING:  # the write path and the consume queues need numpy: commands that only read start without it
    from engine.broker.consumequeue.offsets import BrokerView
    from engine.broker.consumequeue.queue import ConsumeQueue
    from engine.broker.consumequeue.rocksdb import RocksDBConsumeQueueStore, RocksDBQueue
    from engine.broker.mode import StoreMode
    from engine.broker.write.batch import MessageBatch
    from engine.broker.write.writer import BatchResult, PutResult


def message_from_json(obj: dict, default_queue_id: int = 0) -> MessageRecord:
    """A message object in the CLI's JSON shape (MessageExt names) -> a checked record to put (no UNIQ_KEY or
    store time yet: the put assigns them). MessageBatch.add_json is the fast path for many messages."""
    from engine.broker.write.batch import MessageBatch, json_body  # the write path: imported when a message is checked
    MessageBatch(default_queue_id).add_json(obj)  # every check, or a one-line InvalidArgumentError
    props = dict(obj.get("properties") or {})
    keys = obj.get("keys")
    if keys:
        props[PROP_KEYS] = " ".join(str(k) for k in keys) if isinstance(keys, list) else str(keys)
    for js, name in (("tags", PROP_TAGS), ("uniqKey", PROP_UNIQ_KEY)):
        if obj.get(js):
            props[name] = str(obj[js])
    rec = MessageRecord(topic=obj["topic"], properties=props, queue_id=obj.get("queueId", default_queue_id),
                        body=json_body(obj.get("body"), obj.get("bodyEncoding")))
    ints = {"flag": "flag", "sysFlag": "sys_flag", "reconsumeTimes": "reconsume_times",
            "preparedTransactionOffset": "prepared_transaction_offset", "bornTimestamp": "born_timestamp",
            "storeTimestamp": "store_timestamp"}
    for js, attr in ints.items():
        if obj.get(js) is not None:
            setattr(rec, attr, obj[js])
    for js, attr in (("bornHost", "born"), ("storeHost", "store")):
        if obj.get(js):
            addr, port = parse_host(str(obj[js]))
            setattr(rec, f"{attr}_host", addr)
            setattr(rec, f"{attr}_port", port)
    if rec.queue_id is None:
        rec.queue_id = default_queue_id
    return rec


class MessageStore:
    """A store directory. Read-only unless opened with writable=True (which takes the lock)."""

    def __init__(self, config: BrokerConfig, writable: bool = False, create: bool = False,
                 allow_unclean: bool = False, create_in_nonempty: bool = False):
        """create: make the store in a missing path or an empty directory, or write into one that holds a store
        (StoreLayout.holds_store); a directory that holds other things is refused (NotAStoreError, nothing
        written) unless create_in_nonempty (a mount point with lost+found, say)."""
        self.config = config
        self.layout = StoreLayout.of(config)
        self.root = self.layout.root
        self.writable = writable
        self._lock: StoreLock | None = None
        self._commitlog: CommitLog | None = None
        self._index: IndexService | None = None
        self._cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self._broker_view: BrokerView | None = None
        self._mode: StoreMode | None = None
        self._rocksdb_cq: RocksDBConsumeQueueStore | None = None
        self._closed = False
        self._put_started = False
        self._dirty = False            # a write was interrupted half-way: leave the abort marker
        self._last_store_ts = 0
        self._last_record_start: int | None = None
        self._uniq: UniqKeyGenerator | None = None
        if writable:  # before a directory is made: a DLedger or RocksDB store must not get a file commit log
            from engine.broker.consumequeue.geometry import settle_cq_file_size
            from engine.broker.write.guard import require_writable
            self._mode = require_writable(config, "put")  # the mode a writable store was allowed in
            if self.root.is_dir():
                # a new queue gets the store's file size (issue 34 item 12); the caller's config is left as it is
                self.config = config = settle_cq_file_size(config, "put")
        if create:
            if self.root.is_dir() and not create_in_nonempty and not self.layout.holds_store() \
                    and any(os.scandir(self.root)):
                raise NotAStoreError(
                    f"{self.root} is not empty and is not a RocketMQ store (no commitlog/, consumequeue/, index/, "
                    "config/ or checkpoint): put makes a store only in a new or empty directory; pass --create to "
                    "make one there anyway")
            if self.root.exists() and not self.root.is_dir():
                raise NotAStoreError(f"{self.root} is not a directory")
            self.root.mkdir(parents=True, exist_ok=True)
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
            # Reads do not need the checkpoint: a damaged one reads as zeros (doctor reports it), never a failure.
            self.checkpoint = Checkpoint.load(self.layout.checkpoint, strict=False)
            self.layout.queue_lister = self._rocksdb_listing

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
            self._commitlog = open_log(self.config, writable=self.writable)  # the mode's log (DLedger's or files)
        return self._commitlog

    @property
    def index(self) -> IndexService:
        if self._index is None:
            from engine.broker.index.geometry import resolve_index_geometry, writer_index_geometry
            if self.writable:  # as a reader takes it, and never another geometry beside the store's files
                self.config = writer_index_geometry(self.config, what="put")
            else:
                self.config = resolve_index_geometry(self.config)  # no --hash-slots needed when the files tell
            self._index = IndexService(self.index_dir, self.config.maxHashSlotNum, self.config.maxIndexNum,
                                       writable=self.writable, on_full_flush=self._on_index_full_flush)
        return self._index

    @property
    def broker_view(self) -> BrokerView:
        """The consume queues as a broker starting on this store would serve them (its min and max offsets,
        logical truncation included: engine.broker.consumequeue.offsets.BrokerView); one per open store."""
        if self._broker_view is None:
            from engine.broker.consumequeue.offsets import BrokerView  # numpy: imported when a queue is read
            self._broker_view = BrokerView.of(self)
        return self._broker_view

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self._cqs.get(key)
        if cq is None:
            from engine.broker.consumequeue.queue import ConsumeQueue  # numpy: imported when a queue is read
            cq = ConsumeQueue(self.root, topic, queue_id, self.config.cq_file_size, writable=self.writable)
            self._cqs[key] = cq
        return cq

    # ------------------------------------------------------------ the queues the broker serves
    @property
    def mode(self) -> StoreMode:
        """The store's mode (engine.broker.mode.detect_mode), decided once per open store."""
        if self._mode is None:
            from engine.broker.mode import detect_mode
            self._mode = detect_mode(self.config)
        return self._mode

    @property
    def queue_source(self) -> str:
        """Where the broker serves its consume queues from: "file" or "rocksdb" (StoreMode.cq_reads)."""
        return self.mode.cq_reads

    @property
    def rocksdb_queues(self) -> RocksDBConsumeQueueStore:
        """The RocksDB consume-queue database, opened read-only once (engine.broker.consumequeue.rocksdb)."""
        if self._rocksdb_cq is None:
            from engine.broker.consumequeue.rocksdb import RocksDBConsumeQueueStore
            from engine.broker.mode import is_rocksdb_dir
            path = self.mode.rocksdb_cq_dir
            if path is None or not is_rocksdb_dir(path):
                raise NotAStoreError(f"this store's consume queues are in RocksDB ({self.mode.name}) but "
                                     f"{path or self.layout.consumequeue_dir} holds no RocksDB database")
            rel = Path(path).relative_to(self.root).as_posix() + "/" if Path(path).is_relative_to(self.root) \
                else str(path)
            self._rocksdb_cq = RocksDBConsumeQueueStore(path, rel)
        return self._rocksdb_cq

    def _rocksdb_listing(self):
        """StoreLayout.list_queues() on a store served from RocksDB: the database's queues; None for files."""
        if self.writable or self.queue_source != "rocksdb":
            return None
        from engine.broker.layout import QueueListing
        got = self.rocksdb_queues.listing()
        return QueueListing(got.queues, got.problems)

    def read_queue(self, topic: str, queue_id: int) -> ConsumeQueue | RocksDBQueue:
        """A consume queue to read, from where the broker serves it (files or RocksDB); the caller closes it."""
        if not self.writable and self.queue_source == "rocksdb":
            return self.rocksdb_queues.queue(topic, queue_id)
        from engine.broker.consumequeue.queue import ConsumeQueue
        return ConsumeQueue(self.root, topic, queue_id, self.config.cq_file_size)

    def _on_index_full_flush(self, ts: int) -> None:
        self.checkpoint.indexMsgTimestamp = ts
        self.checkpoint.save(self.layout.checkpoint)

    # ------------------------------------------------------------ lifecycle
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self.writable and self._put_started and not self._dirty:
                try:
                    self._shutdown_flush()
                except WriteFailedError as e:
                    from engine.broker.write.writer import store_full
                    raise store_full(self, e) from None
        finally:
            for cq in self._cqs.values():
                cq.close()
            if self._index:
                self._index.close()
            if self._rocksdb_cq is not None:
                self._rocksdb_cq.close()
            if self._commitlog:
                self._commitlog.close()
            if self._lock:
                self._lock.release()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        # A write interrupted half-way (self._dirty) leaves the abort marker, so the next writer recovers first;
        # anything raised between writes (bad input, a closed output pipe) leaves a consistent store.
        self.close()

    # ------------------------------------------------------------ put (the writer's interface: engine.broker.write)
    def begin_put(self) -> None:
        """Like a broker's start(): check the log can be appended to, make room, then mark the store in use."""
        if self._put_started:
            return
        cl = self.commitlog
        end = cl.find_end(hint=self.checkpoint.confirmPhyOffset or None)
        try:
            if self.config.messageIndexEnable:
                self.secure_index_files()  # first: the index geometry is refused before any file is touched
            cl.open_for_append(end)  # refuses misplaced files; allocates what the last segment holds
            if not self.layout.checkpoint.exists():
                # The broker creates its checkpoint at start; having it lets a full disk rewrite it in place.
                self.checkpoint.save(self.layout.checkpoint)
            mark_in_use(self.layout)
        except WriteFailedError as e:
            from engine.broker.write.writer import store_full
            raise store_full(self, e) from None
        self._put_started = True

    def put(self, rec: MessageRecord, sync_flush: bool = False) -> PutResult:
        """Append one message: commit log, consume queue, index; with sync_flush it is durable on return.
        The record's offsets, timestamps and UNIQ_KEY are filled in as stored."""
        from engine.broker.write.batch import MessageBatch
        batch = MessageBatch(rec.queue_id)
        batch.add_record(rec)
        res = self.put_batch(batch, sync_flush)
        if res.error is not None:
            raise res.error
        r = res.results()[0]
        if PROP_UNIQ_KEY not in rec.properties:
            rec.properties[PROP_UNIQ_KEY] = r.uniqKey
        rec.properties_raw = None
        rec.physical_offset, rec.queue_offset, rec.total_size = r.commitLogOffset, r.queueOffset, r.storeSize
        rec.store_timestamp = r.storeTimestamp
        rec.born_timestamp = rec.born_timestamp or r.storeTimestamp
        return r

    def put_batch(self, batch: MessageBatch, sync_flush: bool = False) -> BatchResult:
        """Append a batch: commit log, consume queues, index, in that order, then (sync_flush) one flush of the
        commit log for the whole batch (group commit). See engine.broker.write.writer for the steps."""
        if not self.writable:
            raise InvalidArgumentError(f"store {self.root} is open read-only: open it with writable=True to put")
        from engine.broker.write.writer import put_batch
        return put_batch(self, batch, sync_flush)

    def secure_index_files(self) -> None:
        """Open the index for writing: the index file that puts will write is opened writable, with its header,
        slot table and items so far allocated (its pages are written through a mapping: an unallocated page on a
        full disk would be a SIGBUS); its next items are allocated as they come (IndexFile.ensure_items)."""
        self.index

    def mark_dirty(self) -> None:
        """A write failed half-way: the store is left with its abort marker, and the next writer recovers first."""
        self._dirty = True

    def note_written(self, last_record_start: int, store_ts: int) -> None:
        """A put wrote records up to the one starting at last_record_start, the latest stored at store_ts: the clean
        shutdown's checkpoint says so."""
        self._last_record_start = last_record_start
        self._last_store_ts = max(self._last_store_ts, store_ts)

    def latest_store_ts(self) -> int:
        """The latest store time of the messages stored so far, as far as the checkpoint and this put know."""
        return max(self._last_store_ts, self.checkpoint.physicMsgTimestamp)

    def _shutdown_flush(self) -> None:
        """Clean shutdown: data, then consume queues and index, then checkpoint, then remove abort."""
        cl = self.commitlog
        cl.sync()
        for cq in self._cqs.values():
            cq.sync()
        if self._index is not None:
            self._index.flush_all()
        cp = self.checkpoint
        if self._last_store_ts:
            cp.physicMsgTimestamp = max(cp.physicMsgTimestamp, self._last_store_ts)
            cp.logicsMsgTimestamp = max(cp.logicsMsgTimestamp, self._last_store_ts)
        if self._last_record_start is not None:
            cp.confirmPhyOffset = self._last_record_start
        cp.save(self.layout.checkpoint)
        queues: dict[str, int] = {}
        for topic, qid in self._cqs:
            queues[topic] = max(queues.get(topic, 0), qid + 1)
        if queues:  # the topics this put created, in config/topics.json as a broker records them
            from engine.broker.config.topicsfile import record_created_topics
            record_created_topics(self.layout, queues)
        mark_clean(self.layout)

    # ------------------------------------------------------------ read
    def protected_dirs(self) -> list[Path]:
        """The store's directories (its root and commit-log directories): an output must not lie in them."""
        return [self.root, *self.config.commitlog_dirs]

    @property
    def problems(self) -> list:
        """Commit-log segment files out of place (gaps, wrong sizes, misnamed...): readers warn and read around
        them, writers refuse."""
        return list(self.commitlog.problems)

    def get(self, offset: int, check_crc: bool = True) -> MessageRecord:
        if offset < 0:
            raise InvalidArgumentError(f"offset {offset} is negative")
        if offset > LONG_MAX:
            raise InvalidArgumentError(f"offset {offset} is out of range: it must fit a Java long")
        r = self.commitlog.check_at(offset, check_crc=check_crc)
        if r.status == MISPLACED:
            raise CorruptFileError(f"no trustworthy message at commit-log offset {offset}: {r.reason}")
        if r.status != VALID:
            raise InvalidArgumentError(f"no valid message at commit-log offset {offset}: {r.reason or r.status.lower()}")
        return r.record

    def walk(self, start: int | None = None, count: int | None = None, check_crc: bool = True) -> Iterator[LogEntry]:
        n = 0
        for e in self.commitlog.walk(start, check_crc=check_crc):
            if count is not None and n >= count:
                return
            yield e
            n += 1

    # ------------------------------------------------------------ query by key (engine.broker.index.keyquery)
    def query_raw(self, topic: str, key: str, max_num: int, begin: int, end: int) -> "keyquery.RawAnswer":
        return keyquery.query_raw(self, topic, key, max_num, begin, end)

    def query(self, topic: str, key: str, max_num: int = 64, begin: int = 0, end: int = LONG_MAX,
              unique: bool = False) -> "keyquery.QueryResult":
        return keyquery.query(self, topic, key, max_num, begin, end, unique)


def query_store(config, topic: str, key: str, *, max_num: int = 64, begin: int = 0, end: int = LONG_MAX,
                unique: bool = False, raw: bool = False) -> "keyquery.QueryResult | keyquery.RawAnswer":
    """Open the store read-only, answer one key query (raw: the broker's own answer), close it."""
    keyquery.check_query_args(max_num, begin, end)
    with MessageStore(config) as st:
        require_topic(st.layout, topic)  # a typo is an error naming the store's topics, not an empty answer
        if raw:
            return keyquery.query_raw(st, topic, key, max_num, begin, end)
        return keyquery.query(st, topic, key, max_num, begin, end, unique)
