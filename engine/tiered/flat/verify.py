"""Check everything a reader of the flat store relies on (flat-store §2-§9), segment by segment.

Problems (the tier is not whole): names (MD5 prefixes, the cluster directory), metadata that does not parse,
segments missing, unlisted, overlapping or with gaps, sizes and times that differ from the metadata, records that
do not decode or whose PHYSICALOFFSET is not their stream offset or whose QUEUEOFFSET breaks the sequence, torn
tails, consume-queue units that do not point at a record of their size and queue offset, COMMIT_LOG bytes past
the last unit. Notes (what the broker does that an operator should know): a queue that ends with an empty
COMMIT_LOG segment (an oversize record stalls a queue that way), records whose broker-visible time (byte 56)
differs from their store time (an IPv6 born host), units left pointing at records retention deleted.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.findings import ERROR, INFO, WARNING, Finding
from engine.progress import Progress, no_progress
from engine.tiered.flat.config import CQ_UNIT_SIZE
from engine.tiered.flat.layout import (COMMIT_LOG, CONSUME_QUEUE, FILE_TYPE_NAMES, cluster_dir_name, list_clusters,
                                       md5_prefix)
from engine.tiered.flat.reader import FlatQueue
from engine.tiered.flat.scan import StreamIndex, read_units, scan_commitlog_file, segment_times
from engine.tiered.flat.segments import LONG_MAX
from engine.tiered.flat.store import TieredStore

# What kind of problem or note each finding is (a stable name: `rmqtool doctor` says per kind what the broker does).
CLUSTER_DIR = "tiered-cluster-dir"                  # a cluster directory without the MD5 prefix of its name
METADATA = "tiered-metadata"                        # the metadata file read from its .bak, or not at all
QUEUE_UNLOADED = "tiered-queue-unloaded"            # files or entries of a queue without topic/queue metadata
SEGMENT_NAME = "tiered-segment-name"                # a file in a queue directory that is no segment name
SEGMENT_UNLISTED = "tiered-segment-unlisted"        # a segment file the metadata does not list
SEGMENT_MISSING = "tiered-segment-missing"          # a listed segment without its file
SEGMENT_SIZE = "tiered-segment-size"                # a file whose length is not the listed size
SEGMENT_SIZE_LAST = "tiered-segment-size-last"      # the same of a last segment (the broker takes the length)
SEGMENT_GAP = "tiered-segment-gap"                  # segments that do not follow each other
CQ_TORN = "tiered-cq-torn-unit"                     # a CONSUME_QUEUE segment that is no whole number of units
RECORD_DAMAGED = "tiered-record-damaged"            # COMMIT_LOG bytes that are no whole record
RECORD_OFFSET = "tiered-record-offset"              # PHYSICALOFFSET other than the record's stream offset
RECORD_QUEUE = "tiered-record-queue"                # a record of another queue
QUEUE_OFFSET = "tiered-queue-offset"                # QUEUEOFFSETs out of sequence
SEGMENT_TIMES = "tiered-segment-times"              # metadata times other than the records'
CQ_UNIT = "tiered-cq-unit"                          # a unit that points at no record of its size and offset
COMMITLOG_PAST_CQ = "tiered-commitlog-past-cq"      # COMMIT_LOG records no unit points at (after the last)
QUEUE_STALLED = "tiered-queue-stalled"              # note: an empty last COMMIT_LOG segment
IPV6_STORE_TIME = "tiered-ipv6-store-time"          # note: byte 56 is no store time (an IPv6 born host)
UNITS_PAST_RETENTION = "tiered-units-past-retention"  # note: units whose records retention deleted


#: kind -> (severity, what the broker does with it at its next start), for the problems above. What the broker
#: does was read from RocketMQ's tieredstore sources (8fc57f1468): FlatFileStore.load/recover, FlatAppendFile,
#: PosixFileSegment, DefaultMetadataStore (flat-store §6).
BROKER_WILL = {
    METADATA: (ERROR, "loads the metadata from its .bak when the file does not parse, and with no usable .bak "
               "starts with empty tables and forgets every tiered segment (DefaultMetadataStore)"),
    CLUSTER_DIR: (WARNING, "never reads this directory (it reads <md5(cluster)[0:8]>_<cluster>): what it holds is "
                  "not part of the tier"),
    QUEUE_UNLOADED: (WARNING, "does not load this queue (FlatFileStore.recover walks the topic and queue "
                     "entries of the metadata only): its tiered messages are never read, and the next dispatch "
                     "of the queue starts its flat file again over these files"),
    SEGMENT_NAME: (INFO, "ignores the file (segments are found through the metadata)"),
    SEGMENT_UNLISTED: (WARNING, "ignores the file until it dispatches a segment at that base offset; then it "
                       "writes into it from its start as it is (PosixFileSegment) and, after a restart, takes "
                       "the file's length as the segment's size, stale bytes included"),
    SEGMENT_MISSING: (ERROR, "creates the file empty when it loads the queue (PosixFileSegment.createFile): "
                      "reads of the segment's range return nothing, those tiered messages are lost to readers"),
    SEGMENT_SIZE: (ERROR, "takes the metadata's size for every segment but the last and the file's length for "
                   "the last (FlatAppendFile.recoverFileSize): reads past the file fail, bytes past the listed "
                   "size are never read"),
    SEGMENT_SIZE_LAST: (INFO, "takes the file's length as the last segment's size (FlatAppendFile."
                        "recoverFileSize) and writes the corrected size at its next commit"),
    SEGMENT_GAP: (ERROR, "reads that cross the gap or overlap fail or return the wrong record (a read picks the "
                  "last segment at or below its offset)"),
    CQ_TORN: (ERROR, "reads the torn unit as a unit (its message cannot be read) and appends the next units "
              "after it"),
    RECORD_DAMAGED: (ERROR, "leaves the damaged records out of its reads (a size or magic that does not "
                     "match): consumers never receive them"),
    RECORD_OFFSET: (ERROR, "returns the records with this commitLogOffset (the PHYSICALOFFSET bytes): a client "
                    "that reads one back by its offset gets another message"),
    RECORD_QUEUE: (ERROR, "delivers records of another queue as this queue's"),
    QUEUE_OFFSET: (ERROR, "delivers records whose QUEUEOFFSET is not their position in the queue: consumers "
                   "commit wrong offsets"),
    SEGMENT_TIMES: (WARNING, "looks messages up by time and applies retention with the metadata's times "
                    "(getOffsetInQueueByTime, destroyExpiredFile): time lookups land in the wrong segment and "
                    "segments are deleted too early or too late"),
    CQ_UNIT: (ERROR, "finds no such record when it reads the unit: the message at that queue offset cannot be "
              "delivered"),
    COMMITLOG_PAST_CQ: (WARNING, "dispatches after the last unit and appends the next records after these "
                        "bytes: they stay in the COMMIT_LOG, read by nothing (an interrupted dispatch)"),
}
#: kind -> what the broker does, for the notes (severity info: worth knowing, nothing lost by it).
NOTE_WILL = {
    QUEUE_STALLED: "keeps the empty segment; if a record larger than tieredStoreCommitLogMaxSize stalls the "
                   "queue there, nothing after it is ever tiered",
    IPV6_STORE_TIME: "uses the bytes at record offset 56 as the store time (address bytes for an IPv6 born "
                     "host) for segment times, time lookups and retention",
    UNITS_PAST_RETENTION: "never reaches these units: the queue's min offset is above them",
}
#: What the broker does with a problem of a kind no table names.
UNKNOWN_WILL = (ERROR, "reads the tiered files as they are")


def problem(file: str, offset: int | None, message: str, kind: str, wills: dict = BROKER_WILL) -> Finding:
    """A problem of `tiered verify` (the tier is not whole), its severity and brokerWill from `wills` by kind."""
    severity, will = wills.get(kind, UNKNOWN_WILL)
    return Finding(kind, severity, file, offset, message, will)


def note(file: str, offset: int | None, message: str, kind: str, wills: dict = NOTE_WILL) -> Finding:
    """A note of `tiered verify` (severity info)."""
    return Finding(kind, INFO, file, offset, message, wills.get(kind, UNKNOWN_WILL[1]))


@dataclass
class VerifyReport:
    queues: int = 0
    segments: int = 0
    records: int = 0
    units: int = 0
    problems: list[Finding] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict:
        """The problems, then the notes (severity info), as located findings under "findings"."""
        return {"ok": self.ok, "queues": self.queues, "segments": self.segments, "records": self.records,
                "units": self.units, "problemCount": len(self.problems), "noteCount": len(self.notes),
                "findings": [f.as_dict() for f in self.problems + self.notes]}


def verify(store: TieredStore, topic: str | None = None, progress: Progress = no_progress) -> VerifyReport:
    """The flat store's check; progress("segments", done, total) as the segments' checks are done (on every
    worker)."""
    rep = VerifyReport()
    lay = store.layout
    for cluster, dirname in list_clusters(lay.root):
        if dirname != cluster_dir_name(cluster):
            rep.problems.append(problem(dirname, None, f"cluster directory prefix should be {md5_prefix(cluster)} "
                                        f"(MD5 of {cluster!r}); the broker never reads this directory", CLUSTER_DIR))
    if store.metadata is None or store.loaded.source != store.loaded.path:
        for w in store.loaded.warnings:
            rep.problems.append(problem(str(store.loaded.path or "metadata"), None, w, METADATA))
    for path in store.unloaded_paths():
        if topic is None or path.split("/")[1] == topic:
            rep.problems.append(problem(path, None, "flat files or metadata entries of a queue the broker does not "
                                        "load (no topic or queue metadata)", QUEUE_UNLOADED))
    heads: list[VerifyReport] = []
    jobs: list[_QueueJob] = []
    for t, q in store.queue_ids(topic):
        fq = store.queue(t, q)
        head = VerifyReport(queues=1)
        _names(store, t, q, head)
        _orphans(store, t, q, head)
        for f in (fq.commit_log, fq.consume_queue):
            _listing(store, f, head)
        heads.append(head)
        jobs.append(_QueueJob(store.layout, store.config, t, q, fq.topic_id, fq.reserve_time, fq.loaded,
                              list(fq.commit_log.segments), list(fq.consume_queue.segments)))
    # The records and units of each queue (the reads and decodes: the bulk of the work) on worker processes,
    # queues in order; what the listing found comes first for each queue, as in one process.
    for head, part in zip(heads, _queue_parts(jobs, progress)):
        for r in (head, part):
            rep.queues += r.queues
            rep.segments += r.segments
            rep.records += r.records
            rep.units += r.units
            rep.problems += r.problems
            rep.notes += r.notes
    return rep


#: By default `tiered verify` runs the queues' record and unit checks on worker processes (engine.workers) when
#: their files hold this many bytes; with --workers N whatever their size.
PARALLEL_VERIFY_BYTES = 256 << 20
#: The unit of work on the workers is one segment file of a queue (a COMMIT_LOG segment decoded and checked, or a
#: CONSUME_QUEUE segment's units looked up in their COMMIT_LOG): a job takes consecutive segments, of one queue or
#: of several, up to this many bytes of files (a bigger segment is a job of its own) ...
SEGMENT_JOB_BYTES = 64 << 20
#: ... and at most this many segments (a job's answer is their findings and a few numbers: small).
SEGMENTS_PER_JOB = 64


@dataclass
class _QueueJob:
    """What a worker needs to check one queue's records and units: its segments as the parent listed them."""
    layout: object
    config: object
    topic: str
    queue_id: int
    topic_id: int | None
    reserve_time: int
    loaded: bool
    commit_log: list
    consume_queue: list

    def queue(self) -> FlatQueue:
        from engine.tiered.flat.segments import FlatAppendFile

        return FlatQueue(self.topic, self.queue_id, FlatAppendFile(COMMIT_LOG, self.commit_log),
                         FlatAppendFile(CONSUME_QUEUE, self.consume_queue), self.config, self.topic_id,
                         self.reserve_time, self.loaded)

    def tasks(self) -> list[tuple[str, int]]:
        """The queue's segment checks, in the order one process makes them: ("cl", i) per COMMIT_LOG segment,
        ("cq", i) per CONSUME_QUEUE segment that has a file."""
        return [("cl", i) for i in range(len(self.commit_log))] + [
            ("cq", i) for i, s in enumerate(self.consume_queue) if s.file_len]

    def task_bytes(self, task: tuple[str, int]) -> int:
        kind, i = task
        return (self.commit_log if kind == "cl" else self.consume_queue)[i].file_len or 0


def _queue_parts(jobs: list[_QueueJob], progress: Progress = no_progress):
    """Each queue's record and unit findings (a VerifyReport each), in the jobs' order: on worker processes
    (segment by segment, so one big queue spreads over them too) when the work is big enough or --workers was
    given, else in this process (the same answers: the same per-segment checks, merged the same way)."""
    from itertools import chain

    from engine import workers

    tasks = [(j, t) for j in jobs for t in j.tasks()]
    size = sum(j.task_bytes(t) for j, t in tasks)
    if len(tasks) < 2 or not workers.fan_out(size, PARALLEL_VERIFY_BYTES):
        done = 0
        for j in jobs:
            yield _check_queue(j)
            done += len(j.tasks())
            progress("segments", done, len(tasks))
        return
    budget = max(1, min(SEGMENT_JOB_BYTES, size // (4 * workers.count())))
    batches: list[tuple[list]] = []
    cur: list = []
    held = 0
    for j, t in tasks:
        b = j.task_bytes(t)
        if cur and (held + b > budget or len(cur) >= SEGMENTS_PER_JOB):
            batches.append((cur,))
            cur, held = [], 0
        cur.append((j, t))
        held += b
    batches.append((cur,))
    ends = [0]
    for (batch,) in batches:
        ends.append(ends[-1] + len(batch))
    parts = chain.from_iterable(workers.ordered_map(_check_segments, batches,
                                                    lambda k: progress("segments", ends[k], len(tasks))))
    for j in jobs:
        fq = j.queue()
        try:
            where = _Where(j.layout)
            rep = VerifyReport()
            cl = [next(parts) for _ in j.commit_log]
            _merge_commit_log(where, fq, cl, rep)
            _merge_consume_queue(where, fq, [next(parts) for _ in j.tasks()[len(cl):]], rep)
        finally:
            fq.close()
        yield rep


def _check_segments(tasks: list) -> list:
    """In a worker: the segment checks of one job (_QueueJob, task) in order; a queue's COMMIT_LOG index (for
    its units' lookups) is kept from one of its CONSUME_QUEUE segments to the next within the job."""
    out = []
    index_of: dict[int, tuple] = {}
    for j, (kind, i) in tasks:
        where = _Where(j.layout)
        if kind == "cl":
            out.append(_commit_log_segment(where, j.commit_log, i, j.queue_id))
            continue
        if id(j) not in index_of:
            index_of.clear()
            fq = j.queue()
            try:
                index_of[id(j)] = (_stream_index(fq), fq.commit_log.min_offset)
            finally:
                fq.close()
        index, cl_min = index_of[id(j)]
        out.append(_consume_queue_segment(where, j.consume_queue[i], index, cl_min))
    return out


def _check_queue(j: _QueueJob) -> VerifyReport:
    """One queue's records and units (_commit_log, _consume_queue) on the segments listed for it."""
    fq = j.queue()
    part = VerifyReport()
    try:
        where = _Where(j.layout)
        _commit_log(where, fq, part)
        _consume_queue(where, fq, part)
    finally:
        fq.close()
    return part


@dataclass
class _Where:
    """What the checks need of the store to name files (its layout), picklable."""
    layout: object


def _rel(store: TieredStore, p) -> str:
    return store.layout.rel(p)


def _names(store: TieredStore, t: str, q: int, rep: VerifyReport) -> None:
    for line in store.name_problems(t, q):
        f, _, why = line.partition(": ")
        rep.problems.append(problem(f, None, why, SEGMENT_NAME))


def _orphans(store: TieredStore, t: str, q: int, rep: VerifyReport) -> None:
    for ft, p, base, length in store.orphan_files(t, q):
        rep.problems.append(problem(_rel(store, p), None, f"{length}-byte {FILE_TYPE_NAMES[ft]} segment file that "
                                    "the metadata does not list: the broker ignores it (an interrupted dispatch or "
                                    "clean; rerun it)", SEGMENT_UNLISTED))


def _listing(store: TieredStore, f, rep: VerifyReport) -> None:
    """Files present, contiguous, and of the sizes the metadata records."""
    segs = f.segments
    rep.segments += len(segs)
    for i, s in enumerate(segs):
        rel = _rel(store, s.path)
        last = i == len(segs) - 1
        if s.file_len is None:
            rep.problems.append(problem(rel, None, "listed in the metadata but missing (the broker would create it "
                                        "empty)" if s.meta_size is not None else "missing", SEGMENT_MISSING))
        elif s.meta_size is not None and s.file_len != s.meta_size:
            what = "the broker takes the file length for the last segment" if last else "reads use the metadata size"
            rep.problems.append(problem(rel, s.meta_size, f"file is {s.file_len} bytes but the metadata says "
                                        f"{s.meta_size} ({what})", SEGMENT_SIZE_LAST if last else SEGMENT_SIZE))
        if i and segs[i - 1].end != s.base:
            prev = segs[i - 1]
            kind = "gap" if prev.end < s.base else "overlap"
            rep.problems.append(problem(rel, s.base, f"{kind}: the previous segment ends at {prev.end}", SEGMENT_GAP))
        if f.file_type == CONSUME_QUEUE and (s.base % CQ_UNIT_SIZE or (s.file_len or 0) % CQ_UNIT_SIZE):
            rep.problems.append(problem(rel, (s.file_len or 0) // CQ_UNIT_SIZE * CQ_UNIT_SIZE,
                                        "not a whole number of 20-byte units (a torn unit)", CQ_TORN))


def _commit_log(store: TieredStore, fq: FlatQueue, rep: VerifyReport) -> None:
    """Every record decodes where it lies, with PHYSICALOFFSET = its stream offset and QUEUEOFFSETs in sequence."""
    segs = fq.commit_log.segments
    _merge_commit_log(store, fq, [_commit_log_segment(store, segs, i, fq.queue_id) for i in range(len(segs))], rep)


@dataclass
class _LogPart:
    """One COMMIT_LOG segment's checks: what it found but the QUEUEOFFSET sequence's break (which depends on the
    segment before), and what that check needs."""
    records: int = 0
    before: list = field(default_factory=list)    # problems found before the sequence check (record checks)
    after: list = field(default_factory=list)     # problems found after it (the segment's times)
    notes: list = field(default_factory=list)
    first: tuple | None = None                    # (position, QUEUEOFFSET) of the segment's first record
    last_qo: int | None = None
    inner: tuple | None = None                    # (position, QUEUEOFFSET, expected) of its first break after k=0


def _commit_log_segment(store, segs: list, i: int, queue_id: int) -> _LogPart:
    """The checks of COMMIT_LOG segment i of a queue on their own (_merge_commit_log joins them in order)."""
    s = segs[i]
    part = _LogPart()
    rep = VerifyReport()
    if not s.file_len:
        if s.size == 0 and i == len(segs) - 1 and i > 0:
            part.notes.append(note(_rel(store, s.path), None, "the queue ends with an empty COMMIT_LOG segment: "
                                   "a time roll left it, or a record larger than tieredStoreCommitLogMaxSize "
                                   "stalls the queue here (flat-store §5)", QUEUE_STALLED))
        _times(store, s, np.empty(0, np.int64), rep)
        part.after = rep.problems
        return part
    rel = _rel(store, s.path)
    recs = scan_commitlog_file(s.path, s.base, min(s.size, s.file_len))
    part.records = len(recs)
    if recs.data_end != min(s.size, s.file_len):
        part.before.append(problem(rel, recs.data_end, f"no whole record here ({recs.end.reason or recs.end.kind}"
                                   f"; {min(s.size, s.file_len) - recs.data_end} bytes to the segment end)",
                                   RECORD_DAMAGED))
    bad = np.flatnonzero(recs.phy != s.base + recs.pos)
    if len(bad):
        k = int(bad[0])
        part.before.append(problem(rel, int(recs.pos[k]), f"PHYSICALOFFSET is {int(recs.phy[k])}, not the stream "
                                   f"offset {s.base + int(recs.pos[k])} ({len(bad)} record(s) like this)",
                                   RECORD_OFFSET))
    bad = np.flatnonzero(recs.queue_id != queue_id)
    if len(bad):
        part.before.append(problem(rel, int(recs.pos[bad[0]]), f"record of queue {int(recs.queue_id[bad[0]])} "
                                   f"in queue {queue_id} ({len(bad)} record(s) like this)", RECORD_QUEUE))
    if len(recs):
        seq = recs.queue_offset
        part.first, part.last_qo = (int(recs.pos[0]), int(seq[0])), int(seq[-1])
        bad = np.flatnonzero(seq[1:] != seq[:-1] + 1)
        if len(bad):
            k = int(bad[0]) + 1
            part.inner = (int(recs.pos[k]), int(seq[k]), int(seq[k - 1]) + 1)
        v6 = int(np.count_nonzero(recs.ts56 != recs.store_ts))
        if v6:
            part.notes.append(note(rel, None, f"{v6} record(s) with an IPv6 born host: the broker reads their "
                                   "store time at byte 56, which holds address bytes (flat-store pitfall 14)",
                                   IPV6_STORE_TIME))
    _times(store, s, recs.ts56, rep)
    part.after = rep.problems
    return part


def _merge_commit_log(store, fq: FlatQueue, parts: list[_LogPart], rep: VerifyReport) -> None:
    """The segments' checks in order, with the QUEUEOFFSET sequence carried from each segment to the next."""
    prev_qo = None
    for s, part in zip(fq.commit_log.segments, parts):
        rep.records += part.records
        rep.problems += part.before
        if part.first is not None:
            pos, qo = part.first
            brk = (pos, qo, prev_qo + 1) if prev_qo is not None and qo != prev_qo + 1 else part.inner
            if brk is not None:
                rep.problems.append(problem(_rel(store, s.path), brk[0], f"QUEUEOFFSET {brk[1]} breaks the sequence "
                                            f"(expected {brk[2]})", QUEUE_OFFSET))
            prev_qo = part.last_qo
        rep.notes += part.notes
        rep.problems += part.after


def _times(store: TieredStore, s, ts: np.ndarray, rep: VerifyReport) -> None:
    if s.meta_size is None:
        return
    lo, hi = segment_times(ts)
    if (s.min_ts, s.max_ts) != (lo, hi):
        rep.problems.append(problem(_rel(store, s.path), None, f"metadata times {s.min_ts}..{s.max_ts} differ from "
                                    f"the records' {lo}..{hi}", SEGMENT_TIMES))


def _stream_index(fq: FlatQueue) -> StreamIndex:
    return StreamIndex([(s.base, s.path, min(s.size, s.file_len or 0)) for s in fq.commit_log.segments
                        if s.file_len])


def _consume_queue(store: TieredStore, fq: FlatQueue, rep: VerifyReport) -> None:
    """Every unit points at a record of its size and queue offset; no COMMIT_LOG bytes past the last unit."""
    index = _stream_index(fq)
    cl_min = fq.commit_log.min_offset
    _merge_consume_queue(store, fq, [_consume_queue_segment(store, s, index, cl_min)
                                     for s in fq.consume_queue.segments if s.file_len], rep)


@dataclass
class _UnitsPart:
    """One CONSUME_QUEUE segment's checks."""
    units: int = 0
    problems: list = field(default_factory=list)
    gone: int = 0                  # units pointing below the COMMIT_LOG's min offset (retention deleted)
    last_end: int | None = None    # the end of the record its last unit points at


def _consume_queue_segment(store, s, index: StreamIndex, cl_min: int) -> _UnitsPart:
    """The units of one CONSUME_QUEUE segment (with a file) looked up in their queue's COMMIT_LOG."""
    part = _UnitsPart()
    rel = _rel(store, s.path)
    units = read_units(s.path, min(s.size, s.file_len))
    part.units = len(units)
    offs = units["offset"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    found, ts, qo = index.lookup(offs, sizes)
    qs = s.base // CQ_UNIT_SIZE + np.arange(len(units))
    deleted = ~found & (offs < cl_min)
    part.gone = int(np.count_nonzero(deleted))
    bad = np.flatnonzero((~found & ~deleted) | (found & (qo != qs)))
    if len(bad):
        k = int(bad[0])
        what = (f"points at COMMIT_LOG {int(offs[k])} (size {int(sizes[k])}) where no such record starts"
                if not found[k] else f"points at a record whose QUEUEOFFSET is {int(qo[k])}, not {int(qs[k])}")
        part.problems.append(problem(rel, k * CQ_UNIT_SIZE, f"unit for queue offset {int(qs[k])} {what} "
                                     f"({len(bad)} unit(s) like this)", CQ_UNIT))
    if found.any() and s.meta_size is not None:
        lo, hi = segment_times(ts[found])
        if not deleted.any() and (s.min_ts, s.max_ts) != (lo, hi):
            part.problems.append(problem(rel, None, f"metadata times {s.min_ts}..{s.max_ts} differ from the "
                                         f"records' {lo}..{hi}", SEGMENT_TIMES))
    elif not len(units) and s.meta_size is not None and (s.min_ts, s.max_ts) != (LONG_MAX, LONG_MAX):
        part.problems.append(problem(rel, None, "empty segment whose metadata times are not Long.MAX_VALUE",
                                     SEGMENT_TIMES))
    if len(units):
        part.last_end = int(offs[-1] + sizes[-1])
    return part


def _merge_consume_queue(store, fq: FlatQueue, parts: list[_UnitsPart], rep: VerifyReport) -> None:
    """The segments' unit checks in order, then what only the whole queue shows: units retention left behind,
    COMMIT_LOG bytes past the last unit."""
    last_end = None
    gone = 0
    for part in parts:
        rep.units += part.units
        rep.problems += part.problems
        gone += part.gone
        if part.last_end is not None:
            last_end = part.last_end
    if gone:
        rep.notes.append(note(f"{store.layout.file_path(fq.topic, fq.queue_id)}/CONSUME_QUEUE", None,
                              f"{gone} unit(s) point at records retention deleted (below the queue's min offset "
                              f"{fq.min_offset}; readers never reach them)", UNITS_PAST_RETENTION))
    cl_end = fq.commit_log.commit_offset
    if last_end is not None and last_end < cl_end and fq.commit_log.segments:
        seg = fq.commit_log.segments[-1]
        rep.problems.append(problem(_rel(store, seg.path), last_end - seg.base if last_end >= seg.base else None,
                                    f"{cl_end - last_end} COMMIT_LOG bytes past the record of the last consume-queue "
                                    "unit (an interrupted dispatch; the broker would append after them)",
                                    COMMITLOG_PAST_CQ))
