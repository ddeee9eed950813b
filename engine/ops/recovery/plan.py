"""Recovery, step 3: the RecoveryPlan, everything recover will do, worked out before anything changes.

engine.ops.recovery.planner builds it (reading only); engine.ops.recovery.apply carries it out. `recover
--dry-run` prints exactly this plan. Its JSON shape (as_dict) is what `recover --json` prints.

How a damaged record in the middle of the log is treated (issue 10 item 4). The broker's recovery stops at the
first record that fails its check and truncates everything after it (format §7.2), so a bad record left in
place would cost every record after it at the broker's next recovery. rmqtool resynchronises at the next valid
record, copies the unreadable bytes to the quarantine (engine.ops.footprint.quarantine) and overwrites them with a
placeholder the broker accepts and its dispatchers skip:

* a hole between two valid records becomes one valid record of exactly the hole's length: topic
  rmq_sys_rmqtool_quarantine, transaction type ROLLBACK (no consume-queue unit, format §4.2; not indexed,
  format §5.8 step 3), a zero body padding it out, properties naming the quarantine manifest and the queue and
  queue offset of the message it replaces (engine.ops.recovery.placeholder says what a consumer receives);
* a non-last segment whose tail cannot be read gets a BLANK filler there (format §3.1), so the broker moves on
  to the next segment instead of ending the log;
* a consume-queue unit that pointed at the damaged record stays (units are positional); a consumer reading it
  gets the placeholder. Index items that pointed at it are dropped: the index file is rebuilt.
A hole narrower than a placeholder (MIN_HOLE bytes) swallows the valid records after it until it is wide
enough; they are quarantined too and reported.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.broker.config.checkpoint import Checkpoint
from engine.broker.commitlog.message import cal_msg_length
from engine.ops.recovery.dispatch import CREATE, KEEP, REBUILD, FileOut, ReplayStart
from engine.broker.commitlog.placeholder import QUARANTINE_PROPERTY, QUARANTINE_TOPIC
from engine.ops.recovery.placeholder import Origin
from engine.timer.repair import TimerRepair
#: The smallest record the broker accepts (IPv4 hosts, v1, empty topic, no body, no properties, format §2.2).
MIN_HOLE = cal_msg_length(False, 0, 0, 0, 0)

PLACEHOLDER, BLANK_FILLER, TRUNCATE = "placeholder", "blank", "truncate"


@dataclass
class Repair:
    """A commit-log range that holds no valid record, and what replaces it."""
    segment: str
    offset: int                 # global offset of the range
    end: int
    pos: int                    # position in the segment file
    kind: str                   # PLACEHOLDER, BLANK_FILLER or TRUNCATE (zeroed: the end of the log)
    reason: str
    prev_ts: int = 0            # store time of the valid record before it (the placeholder takes it)
    swallowed: int = 0
    origin: Origin | None = None  # PLACEHOLDER: the consume-queue unit that points at it (the message it replaces)

    @property
    def length(self) -> int:
        return self.end - self.offset

    def as_dict(self) -> dict:
        return {"segment": self.segment, "offset": self.offset, "end": self.end, "bytes": self.length,
                "position": self.pos, "repair": self.kind, "reason": self.reason,
                "validRecordsSwallowed": self.swallowed,
                "placeholderFor": self.origin.as_dict() if self.origin else None}


@dataclass
class QueuePlan:
    topic: str
    queue_id: int
    max_offset_before: int          # queue offsets (units), as ConsumeQueue recovery finds them (format §4.4)
    max_offset_after: int
    truncate_to: int | None = None  # logical byte offset the queue is cut at (None: no cut)
    units_removed: int = 0          # non-zero units at or after the cut (pointing past the end, or stale)
    files_deleted: list[str] = field(default_factory=list)
    zero_file: str | None = None    # file whose tail is zeroed, from zero_from to zero_to (in-file positions)
    zero_from: int = 0
    zero_to: int = 0
    units_added: int = 0            # units re-dispatched (format §4.3)
    exists: bool = True
    dispatch_state: tuple[int, int | None] | None = None  # (max physic offset, logical end) after the cut

    @property
    def changed(self) -> bool:
        return bool(self.units_removed or self.files_deleted or self.units_added or self.zero_to > self.zero_from)

    def as_dict(self) -> dict:
        return {"topic": self.topic, "queueId": self.queue_id, "maxOffsetBefore": self.max_offset_before,
                "maxOffsetAfter": self.max_offset_after, "unitsRemoved": self.units_removed,
                "unitsAdded": self.units_added, "filesDeleted": self.files_deleted}


@dataclass
class IndexPlan:
    enabled: bool = True
    trusted: list[str] = field(default_factory=list)   # leading files kept without re-indexing
    untrusted_reason: str = ""                         # why the first not-trusted file was not trusted
    start: ReplayStart | None = None                   # where re-indexing starts
    planned: list[FileOut] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)  # existing file -> why it could not be trusted
    prefix_reason: str = ""                            # why the continued file's item prefix ends where it does

    @property
    def replay_from(self) -> int | None:
        return self.start.offset if self.start else None

    @property
    def kept(self) -> list[str]:
        return self.trusted + [p.name for p in self.planned if p.action == KEEP]

    @property
    def rebuilt(self) -> list[str]:
        return [p.name for p in self.planned if p.action == REBUILD]

    @property
    def created(self) -> list[str]:
        return [p.name for p in self.planned if p.action == CREATE]

    @property
    def changed(self) -> bool:
        return bool(self.removed or self.rebuilt or self.created)

    def as_dict(self) -> dict:
        return {"enabled": self.enabled, "kept": self.kept, "removed": self.removed, "rebuilt": self.rebuilt,
                "created": self.created, "trustedPrefix": len(self.trusted),
                "reindexFromOffset": self.replay_from,
                "itemsKeptFromExistingFile": sum(p.kept_items for p in self.planned if p.action != KEEP),
                "reindexedItems": sum(p.added for p in self.planned if p.action != KEEP),
                "firstUntrustedReason": self.untrusted_reason, "prefixEndReason": self.prefix_reason,
                "problems": self.problems}


@dataclass
class EpochPlan:
    """A controller-mode store's epoch file after the cut (engine.broker.config.epochfile): the epochs the broker
    loads now, those it is left with (EpochFileCache.truncateSuffixByOffset at `offset`), and how the files change:
    "write" (the file's old text to .bak, the new text to the file, as CheckpointFile.write does) or "remove" (no
    epoch is left, which CheckpointFile cannot write: both files go to the quarantine)."""
    path: str
    offset: int
    before: list = field(default_factory=list)
    after: list = field(default_factory=list)
    action: str = "write"
    reason: str = ""

    def as_dict(self) -> dict:
        return {"path": self.path, "truncateOffset": self.offset, "action": self.action, "reason": self.reason,
                "before": [e.as_dict() for e in self.before], "after": [e.as_dict() for e in self.after]}

    def describe(self) -> str:
        gone = ", ".join(str(e.epoch) for e in self.before if e.epoch not in {a.epoch for a in self.after})
        if self.action == "remove":
            return (f"remove the epoch file (every epoch starts at or after {self.offset}: {gone}), kept in the "
                    "quarantine")
        return f"truncate the epoch file at {self.offset} (drop epoch(s) {gone}; truncateSuffixByOffset)"


@dataclass
class RecoveryPlan:
    """Everything recovery does (see the module docstring); built by planner.plan_recovery."""
    store: str
    mode: str                                   # "normal" (no abort file) or "abnormal"
    check_crc: bool
    index_safe: bool
    full_scan: bool
    checkpoint_before: Checkpoint
    checkpoint_readable: bool
    checkpoint_problem: str
    broker_start_segment: str | None
    broker_start_offset: int
    broker_start_rule: str
    scan_start_offset: int
    scan_start_reasons: list[str]
    records_scanned: int = 0
    last_valid_offset: int = -1                 # start of the last valid record, -1 if none
    last_store_timestamp: int = 0               # of the last valid record, 0 if none
    last_store_timestamp_before: int = 0        # of the last decodable record before truncation
    end_offset: int = 0                         # the recovered commit-log max offset
    stop_reason: str = "end of data"
    max_offset_before: int = 0                  # end of the last non-zero byte of the commit log
    truncated_bytes: int = 0
    truncated_records: int = 0
    zero_segment: str | None = None
    zero_from: int = 0                          # in-segment positions
    zero_to: int = 0
    segments_deleted: list[str] = field(default_factory=list)
    segment_renames: list[tuple[str, str]] = field(default_factory=list)
    segment_resizes: list[tuple[str, int, int]] = field(default_factory=list)  # (name, length now, segment size)
    repairs: list[Repair] = field(default_factory=list)   # damaged ranges before the end (placeholders, fillers)
    repair_count: int = 0                       # all of them (repairs lists the first ones when there are many)
    known_gaps: list[tuple[int, int]] = field(default_factory=list)  # every range the walk stepped over
    dispatch_from: int | None = None            # consume-queue units are re-dispatched from here
    walk_from: int | None = None                # where the walk that re-dispatches and re-indexes starts
    queues: list[QueuePlan] = field(default_factory=list)
    index: IndexPlan = field(default_factory=IndexPlan)
    checkpoint_after: Checkpoint = field(default_factory=Checkpoint)
    write_checkpoint: bool = False
    stale_temp_files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped_entries: list[dict] = field(default_factory=list)  # consumequeue/ entries a broker would not load
    fingerprint: tuple = ()
    data_consistent: bool = False               # nothing to repair in the data
    force: bool = False
    quarantine_bytes: int = 0                   # bytes recover copies to the quarantine before changing them
    quarantine_dir: str | None = None           # set by apply: where they went
    timer: TimerRepair | None = None            # the timer store's part (timer §10); None: no timer store
    broker_window: bool = False                 # the walk reads no earlier than the broker's start-up does
    epoch: EpochPlan | None = None              # controller mode: the epoch file truncated with the commit log

    @property
    def commitlog_changed(self) -> bool:
        return (bool(self.segments_deleted or self.segment_renames or self.segment_resizes or self.repairs)
                or self.zero_to > self.zero_from)

    def data_unchanged(self) -> bool:
        return not (self.commitlog_changed or any(q.changed for q in self.queues) or self.index.changed
                    or self.write_checkpoint or self.stale_temp_files
                    or (self.timer is not None and self.timer.changed) or self.epoch is not None)

    @property
    def consistent(self) -> bool:
        """Nothing to repair: at most (abnormal mode) the checkpoint is rewritten and the abort marker removed."""
        return self.data_consistent

    @property
    def nothing_to_do(self) -> bool:
        return self.data_consistent and self.mode == "normal"

    @property
    def skipped_bytes(self) -> int:
        return sum(r.length for r in self.repairs)

    def removals(self) -> str:
        """What is removed or overwritten, in one line (for --force and the refusal message)."""
        parts = []
        if self.repairs:
            parts.append(f"overwrite {self.repair_count} damaged range(s) ({self.skipped_bytes} bytes)")
        if self.truncated_bytes:
            parts.append(f"truncate {self.truncated_bytes} bytes of commit log after offset {self.end_offset}")
        if self.segments_deleted:
            parts.append(f"delete {len(self.segments_deleted)} segment(s) after the end")
        return "; ".join(parts) or "change the consume queues and index"

    def placeholder_units(self) -> dict[tuple[str, int], dict[int, tuple[int, int]]]:
        """(topic, queueId) -> {queue offset: (offset, size)} of the placeholders standing for a message of that
        queue: the units re-dispatch writes where the message's own record is gone."""
        out: dict[tuple[str, int], dict[int, tuple[int, int]]] = {}
        for r in self.repairs:
            if r.kind == PLACEHOLDER and r.origin is not None:
                o = r.origin
                out.setdefault((o.topic, o.queue_id), {})[o.queue_offset] = (r.offset, r.length)
        return out

    def placeholder_notes(self) -> list[str]:
        """What consumers will receive where a placeholder replaces a damaged record (dry run and report)."""
        ph = [r for r in self.repairs if r.kind == PLACEHOLDER]
        if not ph:
            return []
        out = [f"{len(ph)} damaged record(s) will read as a placeholder: a consumer of the queue that held the "
               f"message receives, at its queue offset, a message of topic {QUARANTINE_TOPIC} with no tags, no keys "
               f"and a body of zero-valued bytes (padding to the damaged range's size), whose property {QUARANTINE_PROPERTY} names the quarantine manifest "
               "holding the damaged bytes and RMQTOOL_ORIGIN_TOPIC / _QUEUE_ID / _QUEUE_OFFSET the message it "
               "replaces; consumers subscribed by tag never receive it, others should skip that topic; "
               "`rmqtool info` lists a store's placeholders"]
        for r in ph:
            o = r.origin
            where = f"{o.topic}/{o.queue_id} queue offset {o.queue_offset}" if o else "no consume-queue unit"
            out.append(f"placeholder at commit-log offset {r.offset} ({r.length} bytes): replaces {where}")
        return out

    def actions(self) -> list[str]:
        out = []
        if self.mode == "abnormal" or not self.consistent:
            out.append("write the abort marker (PID) so a crash during recovery is recovered again")
        if (self.quarantine_bytes or self.segments_deleted or self.index.changed or self.repairs
                or (self.timer is not None and self.timer.changed)):
            out.append("keep what is removed or overwritten in the store's quarantine folder, with a manifest")
        for name, n, size in self.segment_resizes:
            out.append(f"{'pad' if n < size else 'cut'} commit-log segment {name} from {n} to {size} bytes")
        for old, new in self.segment_renames:
            out.append(f"rename commit-log segment {old} to {new}")
        for s in reversed(self.segments_deleted):
            out.append(f"delete commit-log segment {s}")
        for r in self.repairs:
            what = {PLACEHOLDER: "a placeholder record", BLANK_FILLER: "a BLANK filler"}.get(r.kind, "zeros")
            out.append(f"replace {r.length} unreadable bytes at offset {r.offset} ({r.segment}) with {what}")
        if self.repair_count > len(self.repairs):
            out.append(f"... and {self.repair_count - len(self.repairs)} more damaged ranges the same way")
        if self.zero_to > self.zero_from:
            out.append(f"zero commit-log segment {self.zero_segment} bytes {self.zero_from}..{self.zero_to}")
        out.extend(self._queue_actions())
        for p in self.index.planned:
            if p.action == REBUILD:
                out.append(f"rebuild index file {p.name} ({p.count} items)")
            elif p.action == CREATE:
                out.append(f"create index file {p.name} ({p.count} items)")
        out.extend(f"delete index file {n}" for n in self.index.removed)
        out.extend(f"delete stale temporary file {t}" for t in self.stale_temp_files)
        if self.timer is not None and self.timer.changed:
            out.extend(self.timer.actions())
        if self.epoch is not None:
            out.append(self.epoch.describe())
        if self.write_checkpoint:
            out.append("write the checkpoint")
        if self.mode == "abnormal" or not self.consistent:
            out.append("remove the abort marker")
        return out

    def _queue_actions(self) -> list[str]:
        out = []
        for q in self.queues:
            out.extend(f"delete consume-queue file {q.topic}/{q.queue_id}/{f}" for f in reversed(q.files_deleted))
            if q.zero_to > q.zero_from:
                out.append(f"zero consume queue {q.topic}/{q.queue_id}/{q.zero_file} bytes {q.zero_from}..{q.zero_to}")
            if q.units_added:
                out.append(f"re-dispatch {q.units_added} unit(s) to {q.topic}/{q.queue_id}")
        return out

    def as_dict(self) -> dict:
        qs = [q for q in self.queues if q.changed]
        return {
            "store": self.store, "mode": self.mode, "consistent": self.consistent, "checkCrc": self.check_crc,
            "indexSafe": self.index_safe, "fullScan": self.full_scan, "force": self.force,
            "brokerStartSegment": self.broker_start_segment, "brokerStartRule": self.broker_start_rule,
            "scanStartOffset": self.scan_start_offset, "scanStartReasons": self.scan_start_reasons,
            "recordsScanned": self.records_scanned, "lastValidOffset": self.last_valid_offset,
            "stopReason": self.stop_reason, "maxOffsetBefore": self.max_offset_before,
            "maxOffsetAfter": self.end_offset, "lastStoreTimestampBefore": self.last_store_timestamp_before,
            "lastStoreTimestampAfter": self.last_store_timestamp, "truncatedBytes": self.truncated_bytes,
            "truncatedRecords": self.truncated_records,
            "skipped": [r.as_dict() for r in self.repairs], "skippedRanges": self.repair_count,
            "skippedBytes": self.skipped_bytes,
            "commitLog": {"segmentsDeleted": self.segments_deleted, "zeroSegment": self.zero_segment,
                          "zeroFrom": self.zero_from, "zeroTo": self.zero_to,
                          "segmentRenames": [{"from": a, "to": b} for a, b in self.segment_renames],
                          "segmentResizes": [{"segment": a, "from": n, "to": m} for a, n, m in self.segment_resizes]},
            "consumeQueues": {"unitsRemoved": sum(q.units_removed for q in self.queues),
                              "unitsAdded": sum(q.units_added for q in self.queues),
                              "filesDeleted": sum(len(q.files_deleted) for q in self.queues),
                              "queuesChanged": len(qs), "queues": [q.as_dict() for q in qs]},
            "index": self.index.as_dict(),
            "checkpointReadable": self.checkpoint_readable, "checkpointProblem": self.checkpoint_problem,
            "checkpointBefore": self.checkpoint_before.as_dict(), "checkpointAfter": self.checkpoint_after.as_dict(),
            "writeCheckpoint": self.write_checkpoint, "staleTempFiles": self.stale_temp_files,
            "quarantineBytes": self.quarantine_bytes, "quarantineDir": self.quarantine_dir,
            "timer": self.timer.as_dict() if self.timer is not None else None,
            "epochFile": self.epoch.as_dict() if self.epoch is not None else None,
            "actions": self.actions(), "notes": self.notes, "skippedEntries": self.skipped_entries,
            "placeholders": [{"commitLogOffset": r.offset, "size": r.length,
                              "origin": r.origin.as_dict() if r.origin else None}
                             for r in self.repairs if r.kind == PLACEHOLDER],
            "placeholderNotes": self.placeholder_notes(),
        }
