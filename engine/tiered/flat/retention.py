"""Retention as FlatFileStore.scheduleDeleteExpireFile applies it (flat-store §9; flat-store pitfalls 12, 13).

Per loaded queue, cutoff = now - hours x 3,600,000 where hours is the topic's reserveTime when > 0, else
tieredStoreFileReservedTime. CONSUME_QUEUE first, then COMMIT_LOG, each from its head: a segment goes when its
end timestamp is Long.MAX_VALUE (empty: always) or below the cutoff, and the walk stops at the first one that
stays. There is no "keep the last segment" rule. Each deletion removes the file and the metadata entry; this
job writes the metadata first (with its `.bak` one change behind), then removes the files, so a kill leaves at
worst files the metadata no longer lists, which a rerun removes (files below a queue's first listed segment).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import StoreError
from engine.fsutil import fsync_dir
from engine.tiered.flat.layout import COMMIT_LOG, CONSUME_QUEUE, FILE_TYPE_NAMES
from engine.tiered.flat.metadata import persist_texts, write_metadata
from engine.tiered.flat.segments import LONG_MAX
from engine.tiered.flat.store import TieredStore

HOUR_MS = 3_600_000


@dataclass
class Removal:
    topic: str
    queue_id: int
    file_type: int
    base: int
    size: int
    end_timestamp: int | None
    path: Path
    reason: str
    in_metadata: bool = True

    def as_dict(self, rel) -> dict:
        return {"topic": self.topic, "queueId": self.queue_id, "fileType": FILE_TYPE_NAMES[self.file_type],
                "baseOffset": self.base, "size": self.size, "endTimestamp": self.end_timestamp,
                "file": rel(self.path), "reason": self.reason, "inMetadata": self.in_metadata}


@dataclass
class CleanPlan:
    now: int
    reserve_hours: float
    dry_run: bool
    queues: list[dict] = field(default_factory=list)
    removals: list[Removal] = field(default_factory=list)
    metadata_written: bool = False
    warnings: list[str] = field(default_factory=list)

    def as_dict(self, rel) -> dict:
        return {"now": self.now, "reserveHours": self.reserve_hours, "dryRun": self.dry_run, "queues": self.queues,
                "delete": [r.as_dict(rel) for r in self.removals], "files": len(self.removals),
                "bytes": sum(r.size for r in self.removals), "metadataWritten": self.metadata_written,
                "warnings": self.warnings}


def _expired(seg, cutoff: int) -> str | None:
    """FlatAppendFile.destroyExpiredFile's test for the head segment."""
    if seg.max_ts == LONG_MAX:
        return "empty segment (end timestamp Long.MAX_VALUE)"
    if seg.max_ts < cutoff:
        return f"end timestamp {seg.max_ts} < cutoff {cutoff}"
    return None


def plan_clean(store: TieredStore, reserve_hours: float, now: int | None = None, dry_run: bool = False,
               topic: str | None = None) -> CleanPlan:
    if store.metadata is None:
        raise StoreError("retention rewrites the metadata, and there is none usable: run tiered rebuild-metadata "
                         "first")
    now = int(time.time() * 1000) if now is None else now
    plan = CleanPlan(now, reserve_hours, dry_run, warnings=list(store.warnings))
    for t, q in store.queue_ids(topic):
        fq = store.queue(t, q)
        hours = fq.reserve_time if fq.reserve_time > 0 else reserve_hours
        cutoff = now - int(hours * HOUR_MS)  # a fraction of an hour: the same type as clean's --reserved-hours
        deleted = {FILE_TYPE_NAMES[CONSUME_QUEUE]: 0, FILE_TYPE_NAMES[COMMIT_LOG]: 0}  # file type -> segments
        row = {"topic": t, "queueId": q, "reserveHours": hours, "cutoff": cutoff, "segmentsDeleted": deleted}
        for f in (fq.consume_queue, fq.commit_log):
            listed = store.metadata.segment_entries(store.layout.file_path(t, q), f.file_type)
            for seg in f.segments:
                why = _expired(seg, cutoff)
                if why is None or seg.meta_size is None or not listed:
                    break
                plan.removals.append(Removal(t, q, f.file_type, seg.base, seg.file_len or 0, seg.max_ts, seg.path,
                                             why))
                deleted[f.type_name] += 1
            first = listed[0].base_offset if listed else None
            for ft, p, base, length in store.orphan_files(t, q):
                if ft == f.file_type and first is not None and base < first:
                    plan.removals.append(Removal(t, q, ft, base, length, None, p,
                                                 "left by an interrupted clean (not in the metadata)", False))
        plan.queues.append(row)
    return plan


def apply_clean(store: TieredStore, plan: CleanPlan) -> None:
    """Rewrite the metadata (one change per removed segment, as the broker persists), then remove the files."""
    listed = [r for r in plan.removals if r.in_metadata]
    changes = [lambda m, r=r: m.delete_segment(store.layout.file_path(r.topic, r.queue_id), r.file_type, r.base)
               for r in listed]
    texts = persist_texts(store.loaded, store.metadata, changes)
    if texts is not None:
        write_metadata(store.loaded.path, *texts)
        plan.metadata_written = True
    dirs = set()
    for r in plan.removals:
        try:
            os.unlink(r.path)
            dirs.add(r.path.parent)
        except FileNotFoundError:
            pass
    for d in dirs:
        fsync_dir(d)
