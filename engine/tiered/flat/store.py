"""Opening a tiered flat store for reading: the root, the cluster and broker, the metadata (main, else `.bak`, else
the files alone, each fallback said out loud), and the queues the broker would load (flat-store §2, §6).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.broker.layout import StoreLayout
from engine.errors import InvalidArgumentError
from engine.broker.topics import TopicNotFoundError, topics_text
from engine.tiered.flat.config import TieredConfig, load_tiered_config
from engine.tiered.flat.layout import (COMMIT_LOG, CONSUME_QUEUE, DEFAULT_CLUSTER, INDEX_TOPIC, TieredLayout,
                                       brokers_of, cluster_dir_name, list_clusters, require_tiered_root,
                                       resolve_names, validate_tiered_topic)
from engine.tiered.flat.metadata import LoadedMetadata, TieredMetadata, load_metadata
from engine.tiered.flat.reader import FlatQueue
from engine.tiered.flat.scan import LONG_MAX, StreamIndex, read_units, scan_commitlog_file, segment_times
from engine.tiered.flat.segments import FlatAppendFile, Segment


def file_length(p: Path) -> int | None:
    try:
        st = os.lstat(p)
    except OSError:
        return None
    return st.st_size if not os.path.islink(p) else None


@dataclass
class FileSegments:
    """A queue's segments rebuilt from its files alone (names, lengths, and the times the records give)."""
    commit_log: list[Segment] = field(default_factory=list)
    consume_queue: list[Segment] = field(default_factory=list)
    cq_unknown_times: list[int] = field(default_factory=list)   # CQ bases whose records are all gone
    cq_partial_times: list[int] = field(default_factory=list)   # CQ bases whose first records are gone


def segments_from_files(layout: TieredLayout, topic: str, queue_id: int) -> FileSegments:
    """What the broker would have recorded for each segment file: size = length, begin/end = min/max byte-56
    store time of the records it holds (COMMIT_LOG) or points at (CONSUME_QUEUE), Long.MAX_VALUE when empty."""
    out = FileSegments()
    cl_files = layout.list_segments(topic, queue_id, COMMIT_LOG).files
    for f in cl_files:
        recs = scan_commitlog_file(f.path, f.base, f.length)
        lo, hi = segment_times(recs.ts56)
        out.commit_log.append(Segment(COMMIT_LOG, f.base, f.length, lo, hi, f.path, f.length))
    index = StreamIndex([(f.base, f.path, f.length) for f in cl_files])
    for f in layout.list_segments(topic, queue_id, CONSUME_QUEUE).files:
        units = read_units(f.path, f.length)
        found, ts, _ = index.lookup(units["offset"].astype(np.int64), units["size"].astype(np.int64))
        lo, hi = segment_times(ts[found])
        if len(units) and not found.any():
            out.cq_unknown_times.append(f.base)
        elif not found.all():
            out.cq_partial_times.append(f.base)
        out.consume_queue.append(Segment(CONSUME_QUEUE, f.base, f.length, lo, hi, f.path, f.length))
    return out


class TieredStore:
    """One broker's flat files and metadata, opened read-only."""

    def __init__(self, layout: TieredLayout, config: TieredConfig, loaded: LoadedMetadata,
                 local_root: Path | None = None):
        self.layout = layout
        self.config = config
        self.loaded = loaded
        self.local_root = local_root   # the broker's storePathRootDir (metadata, tiered_index_file/), when known
        self.warnings: list[str] = list(loaded.warnings)
        self._open: list[FlatQueue] = []
        self._file_cache: dict[tuple[str, int], FileSegments] = {}
        self._queues: dict[tuple[str, int], FlatQueue] = {}
        self._loaded_ids: set[tuple[str, int]] | None = None

    @property
    def metadata(self) -> TieredMetadata | None:
        return self.loaded.metadata

    def close(self) -> None:
        for q in self._open:
            q.close()
        self._open.clear()
        self._queues.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ queues
    def queue_ids(self, topic: str | None = None) -> list[tuple[str, int]]:
        """The queues the broker loads (topic metadata x queue metadata of this broker), sorted; without
        metadata, the queue directories."""
        md = self.metadata
        if md is None:
            ids, problems = self.layout.list_queues()
            for p in problems:
                self.warnings.append(f"{p.path}: {p.reason} (skipped)")
        else:
            ids = []
            for t, q in md.loaded_queues():
                qm = md.queue(t, q)
                if qm.broker_name in (None, self.layout.broker):
                    ids.append((t, q))
            ids.sort()
        if topic is not None:
            ids = [x for x in ids if x[0] == topic]
        return ids

    def unloaded_paths(self) -> list[str]:
        """Metadata segment tables or queue directories the broker does not load (no topic/queue metadata)."""
        md = self.metadata
        if md is None:
            return []
        loaded = {self.layout.file_path(t, q) for t, q in self.queue_ids()}
        loaded.add(self.layout.file_path(INDEX_TOPIC, 0))   # the INDEX flat file: read by the index service
        prefix = self.layout.broker + "/"
        paths = {p for p in md.paths() if p.startswith(prefix)}
        dirs, _ = self.layout.list_queues()
        paths |= {self.layout.file_path(t, q) for t, q in dirs}
        return sorted(paths - loaded)

    def has_queue(self, topic: str, queue_id: int) -> bool:
        """Whether the broker holds a flat file for this queue (FlatFileStore.getFlatFile is not null)."""
        if self._loaded_ids is None:
            self._loaded_ids = set(self.queue_ids())
        return (topic, queue_id) in self._loaded_ids

    def require_topic(self, topic: str) -> None:
        """TopicNotFoundError (exit 2, the output contract's one answer) unless the broker tiers `topic`."""
        validate_tiered_topic(topic)
        topics = sorted({t for t, _ in self.queue_ids()})
        if topic not in topics:
            listed = f"it has {len(topics)} tiered topic(s), {topics_text(topics, topic)}" if topics else \
                "it has no tiered topic"
            raise TopicNotFoundError(f"topic {topic!r} is not tiered for broker {self.layout.broker!r}: {listed}")

    def queue(self, topic: str, queue_id: int) -> FlatQueue:
        """One queue; an unknown topic or queue is a one-line error."""
        validate_tiered_topic(topic)
        ids = self.queue_ids()
        if (topic, queue_id) not in ids:
            self.require_topic(topic)
            qids = sorted(q for t, q in ids if t == topic)
            raise InvalidArgumentError(f"queue {queue_id} of topic {topic!r} is not tiered (queues: "
                                       f"{', '.join(map(str, qids))})")
        fq = self._queues.get((topic, queue_id))
        if fq is not None:
            return fq
        fq = self._queues[(topic, queue_id)] = self._build(topic, queue_id)
        self._open.append(fq)
        for prob in self.name_problems(topic, queue_id):
            if prob not in self.warnings:
                self.warnings.append(f"{prob} (skipped)")
        return fq

    def _build(self, topic: str, queue_id: int) -> FlatQueue:
        md = self.metadata
        if md is None:
            fs = self.file_segments(topic, queue_id)
            return FlatQueue(topic, queue_id, FlatAppendFile(COMMIT_LOG, list(fs.commit_log)),
                             FlatAppendFile(CONSUME_QUEUE, list(fs.consume_queue)), self.config)
        cl = self._from_metadata(topic, queue_id, COMMIT_LOG)
        cq = self._from_metadata(topic, queue_id, CONSUME_QUEUE)
        tm = md.topic(topic)
        return FlatQueue(topic, queue_id, FlatAppendFile(COMMIT_LOG, cl), FlatAppendFile(CONSUME_QUEUE, cq),
                         self.config, tm.topic_id if tm else None, tm.reserve_time if tm else -1)

    def file_segments(self, topic: str, queue_id: int) -> FileSegments:
        key = (topic, queue_id)
        if key not in self._file_cache:
            self._file_cache[key] = segments_from_files(self.layout, topic, queue_id)
        return self._file_cache[key]

    def _from_metadata(self, topic: str, queue_id: int, file_type: int) -> list[Segment]:
        """FlatAppendFile.recover + recoverFileSize: the metadata entries sorted by base offset, the last one's
        size from its file (flat-store pitfall 17); a COMMIT_LOG without entries gets segment 0 (FlatCommitLogFile)."""
        path = self.layout.file_path(topic, queue_id)
        segs = []
        for e in self.metadata.segment_entries(path, file_type):
            p = self.layout.segment_path(topic, queue_id, file_type, e.base_offset)
            segs.append(Segment(file_type, e.base_offset, e.size, e.begin_timestamp, e.end_timestamp, p,
                                file_length(p), e.size))
        if segs:
            last = segs[-1]
            last.size = last.file_len or 0
        elif file_type == COMMIT_LOG:
            p = self.layout.segment_path(topic, queue_id, COMMIT_LOG, 0)
            n = file_length(p)
            segs.append(Segment(COMMIT_LOG, 0, n or 0, LONG_MAX, LONG_MAX, p, n, None))
        return segs

    def orphan_files(self, topic: str, queue_id: int) -> list[tuple[int, Path, int, int]]:
        """(file type, path, base, length) of segment files the metadata does not list (the broker ignores them)."""
        out = []
        md = self.metadata
        if md is None:
            return out
        path = self.layout.file_path(topic, queue_id)
        for ft in (COMMIT_LOG, CONSUME_QUEUE):
            known = {e.base_offset for e in md.segment_entries(path, ft)}
            if ft == COMMIT_LOG and not known:
                known = {0}
            for f in self.layout.list_segments(topic, queue_id, ft).files:
                if f.base not in known:
                    out.append((ft, f.path, f.base, f.length))
        return out

    def name_problems(self, topic: str, queue_id: int) -> list[str]:
        out = []
        for ft in (COMMIT_LOG, CONSUME_QUEUE):
            for p in self.layout.list_segments(topic, queue_id, ft).problems:
                out.append(f"{p.path}: {p.reason}")
        return out


def open_flat_store(root, metadata_path: Path | None, cluster: str | None, broker: str | None,
                    config: TieredConfig, local_root: Path | None = None) -> TieredStore:
    """Resolve the root, cluster and broker (the only ones there when not given) and load the metadata."""
    root = Path(os.path.expanduser(os.fspath(root)))
    require_tiered_root(root)
    cluster, broker = resolve_names(root, cluster, broker)
    layout = TieredLayout(root, cluster, broker)
    loaded = load_metadata(Path(metadata_path) if metadata_path is not None else None)
    return TieredStore(layout, config, loaded, local_root)


@dataclass
class TierSource:
    """Where a tier and its broker's files are: the options every `tiered` command shares. What is not given comes
    from broker.conf (tieredStoreFilePath, storePathRootDir, brokerClusterName, brokerName); the metadata from
    <store>/config/tieredStoreMetadata.json."""

    tiered_store_path: Path | None = None
    metadata: Path | None = None
    store: Path | None = None
    broker_conf: Path | None = None
    cluster_name: str | None = None
    broker_name: str | None = None

    def config(self, **overrides) -> TieredConfig:
        return load_tiered_config(self.broker_conf, **overrides)

    def tier_root(self, cfg: TieredConfig | None = None) -> Path | None:
        """tieredStoreFilePath: the option, else broker.conf's; None when neither gives it."""
        if self.tiered_store_path is not None:
            return Path(os.path.expanduser(os.fspath(self.tiered_store_path)))
        cfg = cfg or self.config()
        return Path(cfg.tieredStoreFilePath) if cfg.tieredStoreFilePath else None

    def local_root(self, cfg: TieredConfig | None = None) -> Path | None:
        """storePathRootDir: --store, else broker.conf's."""
        if self.store is not None:
            return Path(os.path.expanduser(os.fspath(self.store)))
        cfg = cfg or self.config()
        return Path(cfg.storePathRootDir) if cfg.storePathRootDir else None

    def broker_names(self, cfg: TieredConfig, metadata: TieredMetadata | None = None) -> tuple[str, str | None]:
        """(cluster, broker) whose flat files a broker with this configuration reads, without refusing: the
        options, else broker.conf's, else the only ones the tier (and the metadata's queues) name; the cluster
        defaults to DefaultCluster, the broker is None when it cannot be told."""
        root = self.tier_root(cfg)
        clusters = [c for c, _ in list_clusters(root)] if root is not None else []
        cluster = self.cluster_name or cfg.brokerClusterName or (clusters[0] if len(clusters) == 1
                                                                 else DEFAULT_CLUSTER)
        broker = self.broker_name or cfg.brokerName or None
        if broker is None:
            names = set(brokers_of(root, cluster_dir_name(cluster))) if root is not None else set()
            if metadata is not None:
                names |= {q.broker_name for t in metadata.topics.keys() for q in (metadata.queues.get(t) or {}).values()
                          if q.broker_name}
            broker = names.pop() if len(names) == 1 else None
        return cluster, broker

    def local_index_dir(self) -> Path | None:
        """<storePathRootDir>/tiered_index_file, where the broker keeps its tiered index files until uploaded."""
        root = self.local_root()
        return StoreLayout(root).tiered_index_dir if root is not None else None


def open_tier(src: TierSource, **overrides) -> TieredStore:
    """The tier `src` names, opened read-only (close it when done); `overrides` are tiered config keys."""
    cfg = src.config(**overrides)
    root = src.tier_root(cfg)
    if root is None:
        raise InvalidArgumentError("no tiered store given: pass --tiered-store-path DIR (or --broker-conf with "
                                   "tieredStoreFilePath)")
    local = src.local_root(cfg)
    metadata = src.metadata
    if metadata is None and local is not None:
        metadata = StoreLayout(local).tiered_metadata
    return open_flat_store(root, metadata, src.cluster_name or cfg.brokerClusterName or None,
                           src.broker_name or cfg.brokerName or None, cfg, local)

