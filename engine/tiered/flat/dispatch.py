"""Tier out a stopped broker's store the way MessageStoreDispatcherImpl does (flat-store §10): the driver.

1. LOCAL is opened read-only and refused while a broker holds its lock (a shared lock is held for the run, so a
   broker cannot start under the job).
2. Per local queue that MessageStoreTopicFilter lets through, a QueueTask: where the tier ends according to the
   metadata, or the local min offset for a new queue.
3. The tasks run inline or on Spark (engine.tiered.flat.runner), queues as partitions.
4. The metadata changes are replayed as the broker makes them (a new queue: its COMMIT_LOG segment 0, the topic
   (ids in the commit-log order of each topic's first message), the queue, the CONSUME_QUEUE start segment; then
   per queue every roll and the final commit of COMMIT_LOG then CONSUME_QUEUE), and the file is written once,
   with the `.bak` one change behind.

The offline job rolls segments by size only: a broker's time rolls depend on its wall clock at each dispatch
round (flat-store §5; flat-store pitfall 18), which a one-shot tier-out does not have.
"""
from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from engine.broker.write.guard import require_writable
from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.layout import StoreLayout
from engine.broker.config.lock import StoreLock
from engine.errors import InvalidArgumentError, NotAStoreError, StoreError, StoreLockedError
from engine.progress import Progress
from engine.tiered.flat.config import CQ_UNIT_SIZE, TieredConfig
from engine.tiered.flat.layout import (FILE_TYPE_NAMES, COMMIT_LOG, CONSUME_QUEUE, TieredLayout, file_path,
                                       resolve_names)
from engine.tiered.flat.metadata import TieredMetadata, load_metadata, persist_texts, write_metadata
from engine.tiered.flat.queue_dispatch import QueueTask, first_message
from engine.tiered.flat.segments import LONG_MAX
from engine.tiered.flat.topic_filter import topic_filter


@dataclass
class DispatchRequest:
    local: BrokerConfig
    tier_root: Path
    tiered: TieredConfig
    metadata: Path | None = None
    cluster: str | None = None
    broker: str | None = None
    topics: list[str] | None = None
    master: str = "local[*]"
    dry_run: bool = False


@dataclass
class DispatchResult:
    master: str
    dry_run: bool
    cluster: str
    broker: str
    tiered_store_path: str
    metadata: str
    queues: list[dict] = field(default_factory=list)
    new_topics: list[dict] = field(default_factory=list)
    messages: int = 0
    bytes: int = 0
    seconds: float = 0.0
    metadata_written: bool = False
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"master": self.master, "dryRun": self.dry_run, "cluster": self.cluster, "broker": self.broker,
                "tieredStorePath": self.tiered_store_path, "metadata": self.metadata, "queues": self.queues,
                "newTopics": self.new_topics, "messages": self.messages, "bytes": self.bytes,
                "seconds": round(self.seconds, 3), "metadataWritten": self.metadata_written,
                "problems": self.problems, "warnings": self.warnings}


@contextmanager
def hold_read_lock(layout: StoreLayout):
    """Refuse if a broker holds LOCAL's lock; hold a shared lock meanwhile so none can start (read-only fd)."""
    if StoreLock(layout.root).is_locked_elsewhere():
        raise StoreLockedError(f"store {layout.root} is locked by a running broker (or a writing rmqtool); "
                               "tier out a stopped broker's store")
    fd = None
    if layout.lock.is_file():
        fd = os.open(layout.lock, os.O_RDONLY)
        try:
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreLockedError(f"store {layout.root} is locked by another process") from None
    try:
        yield
    finally:
        if fd is not None:
            fcntl.lockf(fd, fcntl.LOCK_UN)
            os.close(fd)


def _now_ms() -> int:
    return int(time.time() * 1000)


def dispatch(req: DispatchRequest, progress: Progress | None = None,
             clock: Callable[[], int] | None = None) -> DispatchResult:
    """The whole tier-out; see the module docstring."""
    from engine.tiered.flat.runner import run_queue_tasks

    t0 = time.monotonic()
    progress = progress or (lambda phase, done, total: None)
    clock = clock or _now_ms
    local = StoreLayout.of(req.local)
    local.require_store()
    require_writable(req.local, "tiered dispatch")
    root = Path(os.path.expanduser(os.fspath(req.tier_root)))
    if root.exists() and not root.is_dir():
        raise NotAStoreError(f"tiered store path {root} is not a directory")
    why = local.clash(root)
    if why:
        raise InvalidArgumentError(f"--tiered-store-path {why}")
    cluster, broker = resolve_names(root, req.cluster or req.tiered.brokerClusterName or None,
                                    req.broker or req.tiered.brokerName or None, for_writing=True)
    layout = TieredLayout(root, cluster, broker)
    meta_path = Path(req.metadata) if req.metadata is not None else local.tiered_metadata
    with hold_read_lock(local):
        loaded = load_metadata(meta_path)
        md = _metadata_to_write(loaded, layout)
        res = DispatchResult(req.master, req.dry_run, cluster, broker, str(root), str(meta_path))
        res.warnings += [w for w in loaded.warnings if "does not exist" not in w]
        if local.abort.exists():
            res.warnings.append(f"{local.abort} exists: the broker did not shut down cleanly; records past its last "
                                "flush may be torn (run rmqtool recover first)")
        queues = _local_queues(req, local, layout, res)
        ends = _broker_max_offsets(req, local, queues, res)
        created = _creation_changes(req, local, layout, md, queues, clock, res, ends)
        if created:
            # New queues are recorded before any of their files is written, and the job goes on from the file
            # as written (as a restarted broker would): a rerun after a kill starts from the very same state.
            if req.dry_run:
                for ch in created:
                    ch(md)
            else:
                write_metadata(meta_path, *persist_texts(loaded, md, created))
                res.metadata_written = True
                loaded = load_metadata(meta_path)
                md = loaded.metadata
        tasks = _tasks(req, local, layout, md, queues, ends)
        summaries, res.master = run_queue_tasks(req.master, tasks, progress)
        changes = _append_changes(summaries, layout, clock)
        res.queues = [_queue_row(s) for s in summaries]
        res.messages = sum(s["to_offset"] - s["from_offset"] for s in summaries)
        res.bytes = sum(s["bytes"] for s in summaries)
        for s in summaries:
            res.problems += [f"{s['topic']}/{s['queue_id']}: {p}" for p in s["problems"]]
        if not req.dry_run:
            texts = persist_texts(loaded, md, changes)
            if texts is not None:
                write_metadata(meta_path, *texts)
                res.metadata_written = True
    res.seconds = time.monotonic() - t0
    return res


def _metadata_to_write(loaded, layout: TieredLayout) -> TieredMetadata:
    if loaded.metadata is not None:
        return loaded.metadata
    if loaded.exists:
        raise StoreError(f"metadata {loaded.path} and its .bak are both damaged: run tiered rebuild-metadata first "
                         "(a dispatch would make the broker forget every tiered segment)")
    queues, _ = layout.list_queues()
    if queues:
        raise StoreError(f"the tier holds flat files of broker {layout.broker!r} but there is no metadata at "
                         f"{loaded.path}: pass --metadata, or run tiered rebuild-metadata first")
    return TieredMetadata()


def _local_queues(req: DispatchRequest, local: StoreLayout, layout: TieredLayout,
                  res: DispatchResult) -> list[tuple[str, int]]:
    """The local queues to tier out: --topic, then MessageStoreTopicFilter."""
    listing = local.list_queues()
    for p in listing.problems:
        res.warnings.append(f"local {p.path}: {p.reason} (skipped)")
    wanted = set(req.topics) if req.topics else None
    if wanted:
        have = {t for t, _ in listing.queues}
        for t in sorted(wanted - have):
            res.warnings.append(f"topic {t!r} has no local consume queue")
    skipped: dict[str, str] = {}
    out = []
    keep_out = topic_filter(req.tiered, layout.cluster, layout.broker)
    for topic, qid in listing.queues:
        if wanted is not None and topic not in wanted:
            continue
        why = keep_out.why(topic)
        if why:
            skipped.setdefault(topic, why)
            continue
        out.append((topic, qid))
    for topic, why in sorted(skipped.items()):
        res.warnings.append(f"topic {topic!r} is not tiered: {why} (MessageStoreTopicFilter)")
    return out


def _task(req: DispatchRequest, local: StoreLayout, layout: TieredLayout, md: TieredMetadata, index: int,
          topic: str, qid: int, ends: dict | None = None) -> QueueTask:
    path = file_path(layout.broker, topic, qid)
    cl = md.segment_entries(path, COMMIT_LOG)
    cq = md.segment_entries(path, CONSUME_QUEUE)
    cl_start = (cl[-1].base_offset, cl[-1].size, cl[-1].begin_timestamp, cl[-1].end_timestamp) if cl \
        else (0, 0, LONG_MAX, LONG_MAX)
    cq_start = (cq[-1].base_offset, cq[-1].size, cq[-1].begin_timestamp, cq[-1].end_timestamp) if cq else None
    return QueueTask(index, topic, qid, str(layout.root), layout.cluster, layout.broker, str(local.root),
                     [str(d) for d in local.commitlog_dirs],
                     req.local.mappedFileSizeCommitLog if req.local.commitLogSizeGiven else None,
                     req.local.cq_file_size, req.tiered.tieredStoreCommitLogMaxSize,
                     req.tiered.tieredStoreConsumeQueueMaxSize, cl_start, cq_start, req.dry_run,
                     (ends or {}).get((topic, qid)))


def _tasks(req, local, layout, md, queues, ends: dict) -> list[QueueTask]:
    return [_task(req, local, layout, md, i, t, q, ends) for i, (t, q) in enumerate(queues)]


def _broker_max_offsets(req: DispatchRequest, local: StoreLayout, queues, res: DispatchResult) -> dict:
    """(topic, queueId) -> the local queue's max offset as the broker serves it after its start-up (logical
    truncation included: engine.broker.consumequeue.offsets.BrokerView), worked out once here for every task: the
    tier ends where the broker's queue ends, never at units the broker cuts."""
    from engine.broker.commitlog.log import open_commitlog
    from engine.broker.config.checkpoint import Checkpoint
    from engine.broker.consumequeue.offsets import BrokerView
    from engine.broker.consumequeue.queue import ConsumeQueue

    cfg = req.local
    cl = open_commitlog(cfg)
    try:
        view = BrokerView(cl, local, cfg.cq_file_size, Checkpoint.load(local.checkpoint), local.abort.exists(),
                          check_crc=cfg.checkCRCOnRecover, index_safe=cfg.messageIndexEnable and cfg.messageIndexSafe)
        out = {}
        for topic, qid in queues:
            try:
                cq = ConsumeQueue(local.root, topic, qid, cfg.cq_file_size)
            except (StoreError, OSError):
                continue  # the task reports it
            try:
                out[(topic, qid)] = view.bounds(cq, cl.min_offset if cl.segments else -1).max_offset
            finally:
                cq.close()
        note = view.log_end.note()
        if note:
            res.warnings.append(note)
        return out
    finally:
        cl.close()


def _creation_changes(req, local, layout, md: TieredMetadata, queues, clock, res: DispatchResult,
                      ends: dict | None = None) -> list:
    """What the broker records when a queue's first message is dispatched (FlatMessageFile's constructor: COMMIT_LOG
    segment 0, the topic, the queue) and at the queue's first round (the CONSUME_QUEUE start segment), for every
    queue with messages to tier that the metadata does not have yet, in the commit-log order of their first
    messages (so topic ids follow it)."""
    new = []
    for topic, qid in queues:
        path = file_path(layout.broker, topic, qid)
        if md.queue(topic, qid) is not None and md.topic(topic) is not None \
                and md.segment_entries(path, CONSUME_QUEUE):
            continue
        first = first_message(_task(req, local, layout, md, 0, topic, qid, ends))
        if first is not None:
            new.append((first[1], topic, qid, first[0], path))
    new.sort()
    changes: list = []
    topics: list[str] = []
    for _, topic, qid, start, path in new:
        if md.queue(topic, qid) is None or md.topic(topic) is None:
            if not md.segment_entries(path, COMMIT_LOG):
                changes.append(lambda m, p=path: m.flush_segment(p, COMMIT_LOG, 0, 0, LONG_MAX, LONG_MAX, clock()))
            if md.topic(topic) is None and topic not in topics:
                topics.append(topic)
                changes.append(lambda m, t=topic: m.add_topic(t, -1, clock()))
            changes.append(lambda m, t=topic, q=qid: m.add_queue(layout.broker, t, q, clock()))
    for _, topic, qid, start, path in new:
        if not md.segment_entries(path, CONSUME_QUEUE):
            changes.append(lambda m, p=path, b=start * CQ_UNIT_SIZE:
                           m.flush_segment(p, CONSUME_QUEUE, b, 0, LONG_MAX, LONG_MAX, clock()))
    res.new_topics = [{"topic": t, "topicId": md.topic_serial + 1 + i} for i, t in enumerate(topics)]
    return changes


def _append_changes(summaries: list[dict], layout: TieredLayout, clock) -> list:
    """Per queue, every roll (the full segment committed, the new one made empty) and the final commit of COMMIT_LOG
    then CONSUME_QUEUE: the changes the broker persists while it appends."""
    changes: list = []

    def flush(path, ft, seg):
        return lambda m: m.flush_segment(path, ft, seg[0], seg[1], seg[2], seg[3], clock())

    for s in sorted(summaries, key=lambda s: (s["topic"], s["queue_id"])):
        path = file_path(layout.broker, s["topic"], s["queue_id"])
        appended = s["to_offset"] > s["from_offset"]
        for ft, segs in ((COMMIT_LOG, s["cl_segments"]), (CONSUME_QUEUE, s["cq_segments"])):
            if not appended and len(segs) < 2:
                continue
            for prev, new in zip(segs, segs[1:]):
                changes.append(flush(path, ft, prev))
                changes.append(flush(path, ft, (new[0], 0, LONG_MAX, LONG_MAX)))
            changes.append(flush(path, ft, segs[-1]))
    return changes


def _queue_row(s: dict) -> dict:
    row = {"topic": s["topic"], "queueId": s["queue_id"], "localMinOffset": s["local_min"],
           "localMaxOffset": s["local_max"], "fromOffset": s["from_offset"], "toOffset": s["to_offset"],
           "messages": s["to_offset"] - s["from_offset"], "bytes": s["bytes"],
           "newSegments": {FILE_TYPE_NAMES[COMMIT_LOG]: len(s["cl_segments"]) - 1,
                           FILE_TYPE_NAMES[CONSUME_QUEUE]: len(s["cq_segments"]) - 1}}
    if s["stalled_at"] is not None:
        row["stalledAt"] = s["stalled_at"]
        row["stalledRecordSize"] = s["stalled_size"]
    if s["skipped"]:
        row["skipped"] = s["skipped"]
    if s["problems"]:
        row["problems"] = s["problems"]
    if s["notes"]:
        row["notes"] = s["notes"]
    return row
