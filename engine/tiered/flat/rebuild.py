"""Rebuild a lost or damaged tieredStoreMetadata.json from the segment files (flat-store §6).

From the files: every queue directory, every segment's base offset (its name), size (its length) and begin/end
timestamps (the min/max byte-56 store time of the records it holds or points at: what the broker recorded when
it appended them, flat-store pitfall 14). From `--from` (an older metadata file or the `.bak`) where it has them: topic ids,
reserve times, wall-clock times, and the times of segments whose records are gone. The maps are filled the way a
broker that started without a metadata file fills them (queue by queue: COMMIT_LOG segment 0, topic, queue,
CONSUME_QUEUE start; then the later segments in order), so the text has the broker's byte layout.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from engine.errors import InvalidArgumentError
from engine.tiered.flat.layout import (COMMIT_LOG, CONSUME_QUEUE, FILE_TYPE_NAMES, INDEX, INDEX_TOPIC, TieredLayout,
                                       require_tiered_root, resolve_names)
from engine.tiered.flat.metadata import (FileSegmentMetadata, MetadataError, QueueMetadata, TieredMetadata,
                                         TopicMetadata)
from engine.tiered.flat.scan import LONG_MAX
from engine.tiered.flat.store import segments_from_files


@dataclass
class RebuildResult:
    out: str
    cluster: str
    broker: str
    topics: int = 0
    queues: int = 0
    segments: dict = field(default_factory=dict)
    new_topics: list = field(default_factory=list)
    warnings: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"out": self.out, "cluster": self.cluster, "broker": self.broker, "topics": self.topics,
                "queues": self.queues, "segments": self.segments, "newTopics": self.new_topics,
                "warnings": self.warnings}


def _load_from(path: Path | None) -> TieredMetadata | None:
    if path is None:
        return None
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise InvalidArgumentError(f"--from {path}: {e.strerror}") from None
    try:
        return TieredMetadata.decode(data)
    except MetadataError as e:
        raise InvalidArgumentError(f"--from {path} does not parse: {e}") from None


def rebuild_metadata(root, broker: str | None, out: Path, cluster: str | None = None, from_path: Path | None = None,
                     clock: Callable[[], int] | None = None) -> RebuildResult:
    """Write the rebuilt metadata to `out` (which must not exist yet); the tier is only read."""
    clock = clock or (lambda: int(time.time() * 1000))
    root = Path(os.path.expanduser(os.fspath(root)))
    require_tiered_root(root)
    cluster, broker = resolve_names(root, cluster, broker)
    layout = TieredLayout(root, cluster, broker)
    out = Path(out)
    if out.exists() or out.is_symlink():
        raise InvalidArgumentError(f"--out {out} exists: write the rebuilt metadata to a new file, then put it in "
                                   "place while the broker is stopped")
    if out.parent and not out.parent.is_dir():
        raise InvalidArgumentError(f"--out {out}: directory {out.parent} does not exist")
    old = _load_from(from_path)
    res = RebuildResult(str(out), cluster, broker)
    md = build_metadata(layout, old, clock, res)
    data = md.encode().encode("utf-8")
    from engine.fsutil import atomic_write
    atomic_write(out, data)
    return res


def build_metadata(layout: TieredLayout, old: TieredMetadata | None, clock, res: RebuildResult) -> TieredMetadata:
    queues, problems = layout.list_queues()
    for p in problems:
        res.warnings.append(f"{p.path}: {p.reason} (skipped)")
    scanned = {}
    for t, q in queues:
        for ft in (COMMIT_LOG, CONSUME_QUEUE):
            for p in layout.list_segments(t, q, ft).problems:
                res.warnings.append(f"{p.path}: {p.reason} (skipped)")
        scanned[(t, q)] = segments_from_files(layout, t, q)
    topic_ids = _topic_ids(queues, scanned, old, res)
    order = sorted(queues, key=lambda tq: (topic_ids[tq[0]], tq[1]))
    md = TieredMetadata()
    if old is not None:
        md.topic_serial = old.topic_serial
    counts = {FILE_TYPE_NAMES[COMMIT_LOG]: 0, FILE_TYPE_NAMES[CONSUME_QUEUE]: 0, FILE_TYPE_NAMES[INDEX]: 0}
    entries = {}
    for t, q in order:
        path = layout.file_path(t, q)
        fs = scanned[(t, q)]
        entries[(t, q)] = ([_entry(path, COMMIT_LOG, s, old, clock, res) for s in fs.commit_log],
                           [_entry(path, CONSUME_QUEUE, s, old, clock, res, s.base in fs.cq_unknown_times,
                                   s.base in fs.cq_partial_times) for s in fs.consume_queue])
    for t, q in order:   # what a broker that started without metadata does for each new queue
        cl, cq = entries[(t, q)]
        if cl:
            md.put_segment(cl[0])
        if md.topic(t) is None:
            md.put_topic(_topic(t, topic_ids[t], old, clock))
        md.queues.compute_if_absent(t, _int_map).put(q, _queue(layout.broker, t, q, old, clock))
        if cq:
            md.put_segment(cq[0])
    for t, q in order:
        cl, cq = entries[(t, q)]
        for e in cl[1:] + cq[1:]:
            md.put_segment(e)
        counts[FILE_TYPE_NAMES[COMMIT_LOG]] += len(cl)
        counts[FILE_TYPE_NAMES[CONSUME_QUEUE]] += len(cq)
    counts[FILE_TYPE_NAMES[INDEX]] = _index_entries(layout, md, old, clock, res)
    res.topics, res.queues, res.segments = len(topic_ids), len(queues), counts
    return md


def _int_map():
    from engine.java.concurrent import ConcurrentHashMap, int_hash
    return ConcurrentHashMap(int_hash)


def _topic_ids(queues, scanned, old: TieredMetadata | None, res: RebuildResult) -> dict[str, int]:
    """Ids from --from; new topics after the largest, in the order of their earliest record."""
    ids: dict[str, int] = {}
    first: dict[str, int] = {}
    for t, q in queues:
        if old is not None and old.topic(t) is not None:
            ids[t] = old.topic(t).topic_id
            continue
        times = [s.min_ts for s in scanned[(t, q)].commit_log if s.min_ts != LONG_MAX]
        first[t] = min([first.get(t, LONG_MAX)] + times)
    nxt = max([old.topic_serial if old else -1] + list(ids.values())) + 1
    for t in sorted(first, key=lambda x: (first[x], x)):
        ids[t] = nxt
        res.new_topics.append({"topic": t, "topicId": nxt})
        nxt += 1
    if res.new_topics:
        res.warnings.append(f"{len(res.new_topics)} topic(s) had no id in --from and got new ids: "
                            + ", ".join(f"{d['topic']}={d['topicId']}" for d in res.new_topics[:10])
                            + (" (a tiered index written with the old ids would not match them)"))
    return ids


def _entry(path: str, ft: int, seg, old, clock, res: RebuildResult, times_unknown: bool = False,
           begin_unknown: bool = False) -> FileSegmentMetadata:
    """One segment's entry. Its times are what the broker recorded as it appended (min/max store time); where the
    records they came from are gone (retention removed COMMIT_LOG files under a CONSUME_QUEUE segment), the broker
    keeps the recorded value, so --from's is taken."""
    prev = old.segment(path, ft, seg.base) if old is not None else None
    begin, end = seg.min_ts, seg.max_ts
    if times_unknown:
        if prev is not None:
            begin, end = prev.begin_timestamp, prev.end_timestamp
        else:
            res.warnings.append(f"{path} {FILE_TYPE_NAMES[ft]} {seg.base}: its records are gone and --from does not "
                                "have its times; written as empty (Long.MAX_VALUE): retention removes it next")
    elif begin_unknown:
        if prev is not None:
            begin = prev.begin_timestamp
        else:
            res.warnings.append(f"{path} {FILE_TYPE_NAMES[ft]} {seg.base}: its first records are gone and --from "
                                "does not have its times; beginTimestamp is the oldest surviving record's")
    e = FileSegmentMetadata(path, ft, seg.base, 0, seg.size, prev.create_timestamp if prev else clock(), begin, end)
    if prev is not None:
        e.status, e.seal_timestamp = prev.status, prev.seal_timestamp
    return e


def _topic(t: str, topic_id: int, old, clock) -> TopicMetadata:
    prev = old.topic(t) if old is not None else None
    if prev is not None:
        return TopicMetadata(topic_id, t, prev.status, prev.reserve_time, prev.update_timestamp)
    return TopicMetadata(topic_id, t, 0, -1, clock())


def _queue(broker: str, t: str, q: int, old, clock) -> QueueMetadata:
    prev = old.queue(t, q) if old is not None else None
    if prev is not None:
        return QueueMetadata(t, broker, q, prev.min_offset, prev.max_offset, prev.update_timestamp)
    return QueueMetadata(t, broker, q, -1, -1, clock())


def _index_entries(layout: TieredLayout, md: TieredMetadata, old, clock, res: RebuildResult) -> int:
    """The RIP-65 INDEX flat file's segments (format §9.1): sizes from the files; times from --from, else from the
    compacted header, whose begin and end timestamps are what the upload recorded (min/max timestamp)."""
    files = layout.list_segments(INDEX_TOPIC, 0, INDEX).files
    path = layout.file_path(INDEX_TOPIC, 0)
    for f in files:
        prev = old.segment(path, INDEX, f.base) if old is not None else None
        begin, end = (prev.begin_timestamp, prev.end_timestamp) if prev else _index_header_times(f.path)
        if prev is None and begin == LONG_MAX:
            res.warnings.append(f"{path} INDEX {f.base}: no header and --from does not have its times; written as "
                                "Long.MAX_VALUE")
        md.put_segment(FileSegmentMetadata(path, INDEX, f.base, 0, f.length,
                                           prev.create_timestamp if prev else clock(), begin, end))
    return len(files)


def _index_header_times(p: Path) -> tuple[int, int]:
    """(beginTimestamp, endTimestamp) of a compacted index file's header (format §9.2); unknown without one."""
    import struct

    with open(p, "rb") as fh:
        head = fh.read(20)
    if len(head) < 20:
        return LONG_MAX, LONG_MAX
    return struct.unpack_from(">qq", head, 4)
