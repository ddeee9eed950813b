"""DefaultMetadataStore: tieredStoreMetadata.json, its codec and its history (flat-store §6; flat-store pitfalls 9, 10, 11).

The file is fastjson PrettyFormat text of a wrapper bean (properties in alphabetical order) holding five maps and
`topicSerialNumber`. Its byte order is the iteration order of the broker's ConcurrentHashMaps, which depends on
how each map was made, so this model keeps the maps as engine.java.concurrent maps and replays the broker's
operations on them:

* a fresh store: the five live maps are `new ConcurrentHashMap<>(1024)`, the inner ones `new ConcurrentHashMap<>()`
  made by computeIfAbsent;
* decode (a broker that loaded the file at start-up): fastjson parses every map into `new ConcurrentHashMap<>()`
  in file order; the topics are putAll-ed into the live table, every inner map is copied (presized);
* encode: the topic table is written as it lives, the four other outer maps through a presized copy.

`persist_texts` gives what the broker leaves after a sequence of changes: the main file, and the `.bak` one change
behind (the previous main file when there was a single change).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from engine.broker.config.jsonfiles import BAK_SUFFIX  # ConfigManager's backup copy, as for config/*.json
from engine.errors import CorruptFileError, InvalidArgumentError
from engine.fsutil import atomic_write, fsync_dir
from engine.java import fastjson
from engine.java.concurrent import ConcurrentHashMap, int_hash, long_hash, string_hash
from engine.java.lang import LONG_MAX
from engine.tiered.flat.layout import COMMIT_LOG, CONSUME_QUEUE, INDEX

DEFAULT_CAPACITY = 1024
TABLE_NAMES = {COMMIT_LOG: "commitLogFileSegmentTable", CONSUME_QUEUE: "consumeQueueFileSegmentTable",
               INDEX: "indexFileSegmentTable"}


class MetadataError(CorruptFileError):
    """tieredStoreMetadata.json does not parse (fastjson would throw) or holds values of the wrong type."""


def _long(d: dict, name: str, default: int = 0) -> int:
    v = d.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise MetadataError(f"{name} is {v!r}, not a number")
    try:
        v = int(v)
    except ValueError:
        raise MetadataError(f"{name} is {v!r}, not a number") from None
    if not -(2**63) <= v <= LONG_MAX:
        raise MetadataError(f"{name} {v} is out of the range of a Java long")
    return v


def _str(d: dict, name: str) -> str | None:
    v = d.get(name)
    if v is not None and not isinstance(v, str):
        raise MetadataError(f"{name} is {v!r}, not a string")
    return v


@dataclass
class FileSegmentMetadata:
    path: str
    type: int
    base_offset: int
    status: int = 0
    size: int = 0
    create_timestamp: int = 0
    begin_timestamp: int = 0
    end_timestamp: int = 0
    seal_timestamp: int = 0

    def to_json(self) -> dict:
        """The bean's properties in @JSONField ordinal order."""
        return {"path": self.path, "type": self.type, "baseOffset": self.base_offset, "status": self.status,
                "size": self.size, "createTimestamp": self.create_timestamp, "beginTimestamp": self.begin_timestamp,
                "endTimestamp": self.end_timestamp, "sealTimestamp": self.seal_timestamp}

    @classmethod
    def from_json(cls, d) -> "FileSegmentMetadata":
        if not isinstance(d, dict):
            raise MetadataError(f"a file segment entry is {type(d).__name__}, not an object")
        return cls(_str(d, "path"), _long(d, "type"), _long(d, "baseOffset"), _long(d, "status"), _long(d, "size"),
                   _long(d, "createTimestamp"), _long(d, "beginTimestamp"), _long(d, "endTimestamp"),
                   _long(d, "sealTimestamp"))


@dataclass
class QueueMetadata:
    topic: str
    broker_name: str
    queue_id: int
    min_offset: int = -1
    max_offset: int = -1
    update_timestamp: int = 0

    def to_json(self) -> dict:
        return {"queue": {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic},
                "minOffset": self.min_offset, "maxOffset": self.max_offset, "updateTimestamp": self.update_timestamp}

    @classmethod
    def from_json(cls, d) -> "QueueMetadata":
        if not isinstance(d, dict):
            raise MetadataError(f"a queue entry is {type(d).__name__}, not an object")
        q = d.get("queue") or {}
        if not isinstance(q, dict):
            raise MetadataError("a queue entry's queue is not an object")
        return cls(_str(q, "topic"), _str(q, "brokerName"), _long(q, "queueId"), _long(d, "minOffset"),
                   _long(d, "maxOffset"), _long(d, "updateTimestamp"))


@dataclass
class TopicMetadata:
    topic_id: int
    topic: str
    status: int = 0
    reserve_time: int = -1
    update_timestamp: int = 0

    def to_json(self) -> dict:
        return {"topicId": self.topic_id, "topic": self.topic, "status": self.status,
                "reserveTime": self.reserve_time, "updateTimestamp": self.update_timestamp}

    @classmethod
    def from_json(cls, d) -> "TopicMetadata":
        if not isinstance(d, dict):
            raise MetadataError(f"a topic entry is {type(d).__name__}, not an object")
        return cls(_long(d, "topicId"), _str(d, "topic"), _long(d, "status"), _long(d, "reserveTime"),
                   _long(d, "updateTimestamp"))


def _parsed_map(obj, what: str, key_conv: Callable, key_hash) -> ConcurrentHashMap:
    """A map as fastjson's MapDeserializer builds it: `new ConcurrentHashMap<>()` filled in file order."""
    m = ConcurrentHashMap(key_hash)
    if obj is None:
        return m
    if not isinstance(obj, dict):
        raise MetadataError(f"{what} is {type(obj).__name__}, not an object")
    for k, v in obj.items():
        m.put(key_conv(k, what), v)
    return m


def _number_key(k, what: str) -> int:
    if isinstance(k, int) and not isinstance(k, bool):
        return k
    if isinstance(k, str):
        try:
            return int(k.strip())
        except ValueError:
            pass
    raise MetadataError(f"{what}: key {k!r} is not a number")


def _string_key(k, what: str) -> str:
    return k if isinstance(k, str) else str(k)


class TieredMetadata:
    """The DefaultMetadataStore tables, as live ConcurrentHashMaps."""

    def __init__(self):
        self.topic_serial = -1
        self.topics = ConcurrentHashMap(string_hash, DEFAULT_CAPACITY)
        self.queues = ConcurrentHashMap(string_hash, DEFAULT_CAPACITY)
        self.segments = {t: ConcurrentHashMap(string_hash, DEFAULT_CAPACITY) for t in TABLE_NAMES}

    # ------------------------------------------------------------------ codec
    @classmethod
    def decode(cls, text) -> "TieredMetadata":
        """DefaultMetadataStore.decode after fastjson's parse; MetadataError where the broker's load would fail."""
        try:
            root = fastjson.loads(text)
        except fastjson.FastjsonError as e:
            raise MetadataError(str(e)) from None
        if not isinstance(root, dict):
            raise MetadataError("the root is not an object")
        md = cls()
        md.topic_serial = _long(root, "topicSerialNumber", 0)   # the wrapper's default is AtomicLong(0)
        topics = _parsed_map(root.get("topicMetadataTable"), "topicMetadataTable", _string_key, string_hash)
        md.topics.put_all([(k, TopicMetadata.from_json(v)) for k, v in topics.items()])
        queues = _parsed_map(root.get("queueMetadataTable"), "queueMetadataTable", _string_key, string_hash)
        for topic, inner in queues.items():
            parsed = _parsed_map(inner, f"queueMetadataTable {topic}", _number_key, int_hash)
            md.queues.put(topic, ConcurrentHashMap.copy_of(
                [(q, QueueMetadata.from_json(v)) for q, v in parsed.items()], int_hash))
        for t, name in TABLE_NAMES.items():
            outer = _parsed_map(root.get(name), name, _string_key, string_hash)
            for path, inner in outer.items():
                parsed = _parsed_map(inner, f"{name} {path}", _number_key, long_hash)
                md.segments[t].put(path, ConcurrentHashMap.copy_of(
                    [(b, FileSegmentMetadata.from_json(v)) for b, v in parsed.items()], long_hash))
        return md

    def encode(self) -> str:
        """DefaultMetadataStore.encode(true): the exact text the broker writes."""
        def outer_copy(live: ConcurrentHashMap) -> dict:
            copy = ConcurrentHashMap.copy_of(live.items(), string_hash)
            return {k: {ik: e.to_json() for ik, e in inner.items()} for k, inner in copy.items()}

        wrapper = {name: outer_copy(self.segments[t]) for t, name in TABLE_NAMES.items()}
        wrapper["queueMetadataTable"] = outer_copy(self.queues)
        wrapper["topicMetadataTable"] = {k: v.to_json() for k, v in self.topics.items()}
        wrapper["topicSerialNumber"] = self.topic_serial
        ordered = {k: wrapper[k] for k in sorted(wrapper)}   # bean properties: alphabetical
        return fastjson.dumps(ordered, pretty=True)

    # ------------------------------------------------------------------ reading
    def topic(self, topic: str) -> TopicMetadata | None:
        return self.topics.get(topic)

    def queue(self, topic: str, queue_id: int) -> QueueMetadata | None:
        inner = self.queues.get(topic)
        return None if inner is None else inner.get(queue_id)

    def loaded_queues(self) -> list[tuple[str, int]]:
        """The queues FlatFileStore.recover loads: every queue of every topic that has topic metadata."""
        out = []
        for topic in self.topics.keys():
            inner = self.queues.get(topic)
            if inner is not None:
                out.extend((topic, q) for q in inner.keys())
        return out

    def segment_entries(self, path: str, file_type: int) -> list[FileSegmentMetadata]:
        inner = self.segments[file_type].get(path)
        if inner is None:
            return []
        return sorted(inner.values(), key=lambda m: m.base_offset)

    def segment(self, path: str, file_type: int, base: int) -> FileSegmentMetadata | None:
        inner = self.segments[file_type].get(path)
        return None if inner is None else inner.get(base)

    def paths(self) -> set[str]:
        out = set()
        for t in TABLE_NAMES:
            out.update(self.segments[t].keys())
        return out

    def topic_ids(self) -> dict[str, int]:
        return {t: m.topic_id for t, m in self.topics.items()}

    def next_topic_id(self) -> int:
        """The id the broker's addTopic gives the next new topic (after topicSerialNumber and every id)."""
        return max([self.topic_serial] + [m.topic_id for m in self.topics.values()]) + 1

    def broker_names(self, topic: str) -> set[str]:
        """Broker names the metadata knows for `topic` (its queue entries and commit-log segment paths)."""
        inner = self.queues.get(topic)
        names = {q.broker_name for q in inner.values() if q.broker_name} if inner is not None else set()
        for path in self.segments[COMMIT_LOG].keys():
            parts = str(path).split("/")
            if len(parts) == 3 and parts[1] == topic:
                names.add(parts[0])
        return names

    # ------------------------------------------------------------------ changes (each one a broker persist)
    def add_topic(self, topic: str, reserve_time: int, now: int) -> TopicMetadata:
        old = self.topics.get(topic)
        if old is not None:
            return old
        self.topic_serial += 1
        meta = TopicMetadata(self.topic_serial, topic, 0, reserve_time, now)
        self.topics.put(topic, meta)
        return meta

    def put_topic(self, meta: TopicMetadata) -> None:
        """A topic with a known id (rebuild): the serial number follows the largest id."""
        self.topics.put(meta.topic, meta)
        self.topic_serial = max(self.topic_serial, meta.topic_id)

    def add_queue(self, broker: str, topic: str, queue_id: int, now: int) -> QueueMetadata:
        old = self.queue(topic, queue_id)
        if old is not None:
            return old
        meta = QueueMetadata(topic, broker, queue_id, -1, -1, now)
        self.queues.compute_if_absent(topic, lambda: ConcurrentHashMap(int_hash)).put(queue_id, meta)
        return meta

    def flush_segment(self, path: str, file_type: int, base: int, size: int, begin: int, end: int,
                      now: int) -> FileSegmentMetadata:
        """FlatAppendFile.flushFileSegmentMeta: update the entry (or make it, stamped now) and put it."""
        meta = self.segment(path, file_type, base)
        if meta is None:
            meta = FileSegmentMetadata(path, file_type, base, create_timestamp=now)
        meta.size, meta.begin_timestamp, meta.end_timestamp = size, begin, end
        self.segments[file_type].compute_if_absent(path, lambda: ConcurrentHashMap(long_hash)).put(base, meta)
        return meta

    def put_segment(self, meta: FileSegmentMetadata) -> None:
        self.segments[meta.type].compute_if_absent(meta.path, lambda: ConcurrentHashMap(long_hash)) \
            .put(meta.base_offset, meta)

    def delete_segment(self, path: str, file_type: int, base: int) -> None:
        inner = self.segments[file_type].get(path)
        if inner is not None:
            inner.remove(base)


# ============================================================================ files

@dataclass
class LoadedMetadata:
    """What loading the metadata found: the tables (None when neither file is usable), which file they came
    from, the raw bytes of the main file, and the warnings an operator must see."""
    path: Path | None
    metadata: TieredMetadata | None = None
    source: Path | None = None
    main_bytes: bytes | None = None
    main_ok: bool = False
    exists: bool = False
    warnings: list[str] = field(default_factory=list)
    main_problem: str | None = None     # why the main file was not read ("is empty", "does not parse (...)")


def bak_path(path: Path) -> Path:
    return path.with_name(path.name + BAK_SUFFIX)


def _read(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    try:
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)
    finally:
        os.close(fd)


def load_metadata(path: Path | None) -> LoadedMetadata:
    """ConfigManager.load, read-only: the main file, else the `.bak` (one change behind), else nothing."""
    out = LoadedMetadata(path)
    if path is None:
        out.warnings.append("no metadata file given (--metadata or --store): segment lists come from the files")
        return out
    path = Path(path)
    why = None
    try:
        data = _read(path)
    except OSError as e:
        data, why = None, f"cannot be read ({e.strerror})"
    out.main_bytes = data
    if data:
        out.exists = True
        try:
            out.metadata = TieredMetadata.decode(data)
            out.source, out.main_ok = path, True
            return out
        except MetadataError as e:
            why = f"does not parse ({e})"
    elif why is None:
        why = "is empty" if data is not None else "does not exist"
    out.main_problem = why
    bak = bak_path(path)
    try:
        bdata = _read(bak)
    except OSError:
        bdata = None
    if bdata:
        out.exists = True
        try:
            out.metadata = TieredMetadata.decode(bdata)
            out.source = bak
            out.warnings.append(f"metadata {path} {why}; using {bak.name}, which is one change behind "
                                "(as the broker does)")
            return out
        except MetadataError as e:
            out.warnings.append(f"metadata {path} {why} and {bak.name} does not parse either ({e}); "
                                "segment lists come from the files (run tiered rebuild-metadata)")
            return out
    if data is not None or bdata is not None:
        out.exists = True
    if out.exists:
        out.warnings.append(f"metadata {path} {why} and there is no usable {bak.name}; segment lists come from the "
                            "files (run tiered rebuild-metadata)")
    else:
        out.warnings.append(f"metadata {path} does not exist (nor {bak.name}); segment lists come from the files")
    return out


def read_metadata(path) -> LoadedMetadata:
    """The tables for a reader that cannot go on without them (query-key's topic ids, spark-reindex --format
    tiered): the main file, else the `.bak` (said in the warnings); an InvalidArgumentError when neither parses."""
    path = Path(path)
    loaded = load_metadata(path)
    if loaded.metadata is None:
        why = (f"neither it nor {bak_path(path).name} parses" if loaded.exists else
               f"it does not exist (nor {bak_path(path).name})")
        raise InvalidArgumentError(f"cannot read the tiered metadata {path}: {why}")
    return loaded


def persist_texts(loaded: LoadedMetadata, md: TieredMetadata, changes: list[Callable[[TieredMetadata], None]]
                  ) -> tuple[bytes | None, bytes] | None:
    """Apply `changes` (each a broker persist) to `md`; return (.bak bytes or None to leave it, main bytes), or
    None when there was no change. The .bak is the state before the last change (ConfigManager.persist renames
    the previous main file), i.e. the old main file itself after a single change."""
    if not changes:
        return None
    for ch in changes[:-1]:
        ch(md)
    if len(changes) == 1:
        bak = loaded.main_bytes if loaded.main_ok else None
    else:
        bak = md.encode().encode("utf-8")
    changes[-1](md)
    return bak, md.encode().encode("utf-8")


def write_metadata(path: Path, bak: bytes | None, main: bytes) -> None:
    """Write the .bak, then the main file, each atomically and durably (a kill leaves the old or the new one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if bak is not None:
        atomic_write(bak_path(path), bak)
    atomic_write(path, main)
    fsync_dir(path.parent)
