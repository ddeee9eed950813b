"""The doctor's checks of the broker's own files: the lock, the abort marker and checkpoint, the commit log, the
consume queues and the index, as DefaultMessageStore.load/recover reads them. The commit log, consume queues,
index and checkpoint are judged by recovery's own plan, worked out read-only (engine.ops.recovery: scan, trust,
plan); doctor translates it into findings with what the broker does at its next start."""
from __future__ import annotations

import os

from engine.broker.config import epochfile
from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.config.lock import lock_held_elsewhere
from engine.broker.commitlog.segments import GAP, MISNAMED, WRONG_SIZE
from engine.broker.consumequeue.queue import trailing_empty_files
from engine.broker.layout import StoreLayout, is_regular_file
from engine.broker.mode import detect_mode
from engine.errors import StoreError
from engine.survey.doctor.report import ERROR, INFO, WARNING, DoctorReport, Finding, Fixes
from engine.ops.recovery import RecoveryPlan, plan_recovery
from engine.progress import Progress

#: How fast a broker's abnormal recovery is assumed to read the commit log: it checks every record (the body
#: CRC with checkCRCOnRecover) and dispatches it to its consume queue and the index again. A conservative figure
#: for a loaded disk; the estimate says so.
BROKER_RECOVERY_BYTES_PER_SEC = 64 * 1024 * 1024
#: An estimate above this is worth a warning: container health checks commonly give a broker about a minute.
HEALTH_CHECK_SECONDS = 60
#: At most this many findings of one kind from the recovery plan are listed one by one.
MAX_LISTED = 20


def check_lock(layout: StoreLayout, rep: DoctorReport) -> None:
    lock = layout.lock
    if os.path.lexists(lock) and not is_regular_file(lock):
        rep.findings.append(Finding(
            "lock-not-a-file", ERROR, "lock", None,
            "the store's lock is not a regular file (a directory or a symlink); remove it by hand",
            "cannot open it as its lock file (RandomAccessFile) and does not start", None))
        return
    if lock_held_elsewhere(layout.root):
        rep.locked_by_broker = True
        rep.findings.append(Finding(
            "store-locked", INFO, "lock", None,
            "a running broker (or another rmqtool) holds the store lock: doctor only reads, but files change "
            "under it; stop the broker before running any fix",
            "keeps running; these findings describe the files as they were read", None))


def check_recovery(cfg: BrokerConfig, layout: StoreLayout, fix: Fixes, rep: DoctorReport, deep: bool,
                   progress: Progress | None, file_queues: bool = True) -> RecoveryPlan:
    """Recovery's plan, worked out read-only, as findings. Without `deep` the walk reads what the broker's
    start-up reads (plan_recovery's broker_window: the index items before it are taken on trust); `deep` walks
    the whole commit log. Returns the plan (its timer part's pending scan serves the timer checks)."""
    plan = plan_recovery(cfg, check_crc=cfg.checkCRCOnRecover, index_safe=cfg.messageIndexSafe, full_scan=deep,
                         progress=progress, broker_window=not deep)
    # The fix is the plan doctor judged: after --deep (a whole-log walk) `recover --full-scan`, which re-dispatches
    # and repairs from the first segment; a plain recover starts where the broker's window does and would not
    # reach damage or missing units before it.
    recover = fix("recover", *(["--full-scan"] if deep else []))
    _abort_and_checkpoint(plan, rep, recover)
    _commitlog_findings(cfg, layout, plan, rep, recover)
    if file_queues:  # a broker serving RocksDB queues does not read the files (doctor.rocksdbchecks)
        _queue_findings(plan, rep, recover)
    _index_findings(plan, rep, recover)
    _epoch_findings(cfg, plan, rep, recover)
    rep.notes.extend(plan.notes)
    rep.read.update(commitLogFrom=plan.scan_start_offset, commitLogTo=plan.end_offset,
                    commitLogBytes=max(0, plan.end_offset - plan.scan_start_offset), records=plan.records_scanned,
                    consumeQueues=len(plan.queues), brokerWindow=plan.broker_window)
    return plan


def _locator(cfg: BrokerConfig, layout: StoreLayout):
    """where(offset) -> (the segment file, relative to the store, that holds a commit-log offset; the offset in it).
    The segments are the log's own list, their size taken from the files when broker.conf does not give it (as
    every reader opens the log), so a finding names the file that holds the bytes. An offset no segment holds
    is filed under "commitlog" with the log offset."""
    from engine.ops.recovery.scan import open_log

    try:
        cl, _ = open_log(cfg)
    except StoreError:
        segs = []
    else:
        segs = [(seg.start, seg.size, layout_rel(layout, seg.path)) for seg in cl.segments]
        cl.close()

    def where(offset: int) -> tuple[str, int]:
        for i, (start, size, rel) in enumerate(segs):
            if start <= offset < start + size or (offset == start + size and i == len(segs) - 1):
                return rel, offset - start
        return "commitlog", offset
    return where


def _abort_and_checkpoint(plan: RecoveryPlan, rep: DoctorReport, recover: str) -> None:
    """The abort marker (abnormal recovery, and an estimate of how long it takes) and an unreadable checkpoint."""
    if plan.mode == "abnormal" and rep.locked_by_broker:
        # A running broker keeps its abort file for as long as it runs (it deletes it at a clean stop): it is
        # the broker's normal state, not the trace of an unclean stop.
        rep.findings.append(Finding(
            "abort-marker-running", INFO, "abort", None,
            "the abort marker belongs to the broker that holds the store lock: a running broker keeps it until "
            "it stops cleanly; it says nothing about the last stop",
            "deletes it at its clean stop; after a kill it stays, and the next start runs its abnormal recovery",
            None))
    elif plan.mode == "abnormal":
        scan = max(0, plan.max_offset_before - plan.broker_start_offset)
        secs = scan / BROKER_RECOVERY_BYTES_PER_SEC
        rep.estimates["brokerRecovery"] = {"mode": "abnormal", "startSegment": plan.broker_start_segment,
                                           "bytesToScan": scan, "estimatedSeconds": round(secs, 1),
                                           "assumedBytesPerSecond": BROKER_RECOVERY_BYTES_PER_SEC}
        slow = secs > HEALTH_CHECK_SECONDS
        clean = " with a consistent store (nothing else to repair)" if plan.consistent else ""
        rep.findings.append(Finding(
            "abort-marker", WARNING if slow else INFO, "abort", None,
            f"the abort marker is present{clean}: the last run did not stop cleanly; the broker's recovery "
            f"will read {scan} bytes of commit log from segment {plan.broker_start_segment} (about "
            f"{secs:.0f} s at an assumed {BROKER_RECOVERY_BYTES_PER_SEC >> 20} MiB/s)"
            + ("; longer than a typical health check" if slow else ""),
            f"runs its abnormal recovery (recoverAbnormally): checks every record from segment "
            f"{plan.broker_start_segment} on and dispatches them again before it serves"
            + (" — a health check may kill it first, and the next start begins again" if slow else ""),
            recover))
    if not plan.checkpoint_readable:
        rep.findings.append(Finding(
            "checkpoint-unreadable", WARNING, "checkpoint", None, f"checkpoint {plan.checkpoint_problem}",
            ("reads it as zeros" if "zeros" in plan.checkpoint_problem else
             "reads its values as they are (after a crash its recovery starts from the segment they name)")
            + ": reads of the store do not need it; rmqtool recover rewrites it from the store", recover))


def _commitlog_findings(cfg: BrokerConfig, layout: StoreLayout, plan: RecoveryPlan, rep: DoctorReport,
                        recover: str) -> None:
    """Segments of the wrong size or name, damaged records, a torn tail, segments after the end."""
    add = rep.findings.append
    where = _locator(cfg, layout)
    for name, n, size in plan.segment_resizes:
        add(Finding("commitlog-segment-size", ERROR, f"commitlog/{name}", None,
                    f"commit-log segment {name} is {n} bytes, not mappedFileSizeCommitLog {size}",
                    "refuses to load the commit log (MappedFileQueue.doLoad: length not matched) and does not start",
                    recover))
    for old, new in plan.segment_renames:
        add(Finding("commitlog-misnamed", ERROR, f"commitlog/{old}", 0,
                    f"commit-log segment {old} holds the records of {new} (its first record says so)",
                    "reads it at the offset its name says: consume-queue units and index items point at the wrong "
                    "bytes", recover))
    for r in plan.repairs[:MAX_LISTED]:
        seg, pos = where(r.offset)
        before = r.offset >= plan.broker_start_offset
        add(Finding("commitlog-damaged-record", ERROR, seg, pos,
                    f"{r.length} bytes at commit-log offset {r.offset} are not a valid record ({r.reason}); "
                    f"valid records follow",
                    (f"ends the commit log there at its recovery: every message after offset {r.offset} is lost"
                     if before else "does not read it at start-up; a consumer or query that reaches it gets nothing "
                     "past it in that segment") + " (rmqtool recover keeps the records after it)",
                    recover))
    if plan.repair_count > MAX_LISTED:
        add(Finding("commitlog-damaged-record", ERROR, "commitlog", None,
                    f"... and {plan.repair_count - MAX_LISTED} more damaged range(s) like the ones above",
                    "as above", recover))
    if plan.truncated_bytes:
        seg, pos = where(plan.end_offset)
        add(Finding("commitlog-torn-tail", WARNING, seg, pos,
                    f"{plan.truncated_bytes} bytes after the commit log's last valid record (offset "
                    f"{plan.end_offset}) are not records ({plan.stop_reason})",
                    "cuts the commit log there, as rmqtool recover does (the messages in it were never complete)",
                    recover))
    for s in plan.segments_deleted:
        add(Finding("commitlog-file-after-end", WARNING if plan.mode == "normal" else INFO, f"commitlog/{s}", None,
                    f"commit-log segment {s} lies after the log's end {plan.end_offset}",
                    "deletes it at start-up (truncateDirtyFiles)", recover))


def _queue_findings(plan: RecoveryPlan, rep: DoctorReport, recover: str) -> None:
    """Queues with units past the commit log's end, and queues that lack units of records it holds."""
    past = [q for q in plan.queues if q.units_removed or q.files_deleted]
    for q in past[:MAX_LISTED]:
        rel, pos = _queue_where(plan.store, q.topic, q.queue_id, q.truncate_to)
        rep.findings.append(Finding(
            "cq-past-log", WARNING, rel, pos,
            f"{q.units_removed} unit(s) of {q.topic}/{q.queue_id} point past the commit log's end "
            f"{plan.end_offset} (max offset {q.max_offset_before} -> {q.max_offset_after})",
            "cuts the queue at its first unit past the commit log (truncateDirtyLogicFiles): consumers whose "
            "offsets lie past the cut are moved back", recover))
    behind = [q for q in plan.queues if q.units_added and not (q.units_removed or q.files_deleted)]
    if behind:
        rep.findings.append(Finding(
            "cq-behind-log", INFO, "consumequeue", None,
            f"{len(behind)} consume queue(s) lack {sum(q.units_added for q in behind)} unit(s) of records "
            "the commit log holds",
            "dispatches again only the records after the furthest unit of all consume queues (ReputMessageService "
            "resumes there): units of records before it stay missing and their messages hidden", recover))


def _queue_where(root: str, topic: str, qid: int, logical: int | None) -> tuple[str, int | None]:
    """The consume-queue file holding a queue's logical byte offset, and the offset in it (the queue's directory
    and the logical offset when no file holds it)."""
    from pathlib import Path

    rel = f"consumequeue/{topic}/{qid}"
    if logical is None:
        return rel, None
    d = Path(root) / rel
    files = [(int(name), n, name) for name, n in (_queue_files(d) if d.is_dir() else [])]
    for start, n, name in files:
        if start <= logical < start + n:
            return f"{rel}/{name}", logical - start
    for start, n, name in files:
        if n and logical == start + n:  # the cut at the end of the last file
            return f"{rel}/{name}", n
    return rel, logical


def _epoch_findings(cfg: BrokerConfig, plan: RecoveryPlan, rep: DoctorReport, recover: str) -> None:
    """Controller mode: the epoch file (engine.broker.config.epochfile) as the broker loads it, against the commit
    log recovery leaves: an epoch starting past its end is what a truncating recover left before rmqtool cut the
    epoch file with it."""
    mode = detect_mode(cfg)
    if not mode.controller or mode.epoch_file is None:
        return
    r = epochfile.read(mode.epoch_file)
    where = layout_rel(StoreLayout.of(cfg), mode.epoch_file)
    rep.read["epochs"] = [e.as_dict() for e in r.entries]
    shown = ", ".join(f"{e.epoch}@{e.start_offset}" for e in r.entries[-8:]) or "none"
    rep.notes.append(f"epoch file ({where}{', from its .bak' if r.source == 'bak' else ''}): {len(r.entries)} "
                     f"epoch(s) (epoch@startOffset): {shown}")
    for p in epochfile.check_against_log(r, 0, plan.end_offset):
        if p.kind == "past-end":
            rep.findings.append(Finding(
                "epoch-past-log", ERROR, where, None, p.detail,
                "as master it cannot record its next epoch (EpochFileCache.appendEntry refuses one that does not "
                "start after the last) and slaves truncate against an epoch history the log does not hold; "
                "recover drops it as truncateSuffixByOffset does", recover))
        elif p.kind == "fatal":
            rep.findings.append(Finding(
                "epoch-file-unreadable", ERROR, where, None, p.detail + "; restore it (or its .bak) by hand",
                "fails to load the epoch file (a NumberFormatException in CheckpointFile.read) and does not start",
                None))
        else:
            rep.findings.append(Finding(
                f"epoch-file-{p.kind}", WARNING, where, None, p.detail,
                "loads the epochs CheckpointFile.read gives (the .bak when the file fails its count or CRC)", None))


def _index_findings(plan: RecoveryPlan, rep: DoctorReport, recover: str) -> None:
    """Index files that cannot be trusted, an index behind the log, temporary files an rmqtool run left."""
    add = rep.findings.append
    for name, why in list(plan.index.problems.items())[:MAX_LISTED]:
        add(Finding("index-untrusted", WARNING, f"index/{name}", None, f"index file {name}: {why}",
                    "loads it as it is (IndexService.load) unless its header is newer than the checkpoint after "
                    "a crash: key queries that reach it answer wrongly or not at all", recover))
    if plan.index.changed and not plan.index.problems:
        add(Finding("index-behind-log", INFO, "index", None,
                    f"the index lacks keys of records after offset {plan.index.replay_from}",
                    "indexes them again while it dispatches the commit log", recover))
    for t in plan.stale_temp_files:
        add(Finding("stale-temp-file", INFO, t, None, f"{t} is a temporary file an interrupted rmqtool run left",
                    "ignores it", recover))


def layout_rel(layout: StoreLayout, path) -> str:
    try:
        return str(path.relative_to(layout.root))
    except ValueError:
        return str(path)


def check_commitlog_files(cfg: BrokerConfig, layout: StoreLayout, rep: DoctorReport) -> None:
    """What the plan does not repair: gaps between segments, files named like no segment."""
    from engine.ops.recovery.scan import open_log

    cl, _ = open_log(cfg)
    try:
        for p in cl.queue.problems:
            rel = layout_rel(layout, _path(p.path))
            if p.kind == GAP:
                rep.findings.append(Finding(
                    "commitlog-gap", ERROR, rel, None, f"{p.detail}; the messages it held are gone (restore the "
                    "segment from a backup if there is one)",
                    "loads the segments around it (checkSelf logs the damage); consume-queue units and queries "
                    "into the gap find nothing, and consumers skip those messages", None))
            elif p.kind == MISNAMED:
                rep.findings.append(Finding(
                    "commitlog-odd-file", WARNING, rel, None, p.detail,
                    "parses every file name of commitlog/ as an offset: a name that is not a number throws and the "
                    "broker does not start; move the file out of the directory", None))
            elif p.kind != WRONG_SIZE:
                rep.findings.append(Finding("commitlog-odd-file", WARNING, rel, None, p.detail,
                                            "loads it at the offset its name says", None))
    finally:
        cl.close()


def _path(p):
    from pathlib import Path

    return Path(p)


def _queue_files(d) -> list[tuple[str, int]]:
    """(name, length) of the consume-queue files of one queue directory, by name (what MappedFileQueue loads)."""
    from engine.broker.layout import SEGMENT_NAME

    out = []
    for e in sorted(os.scandir(d), key=lambda e: e.name):
        if SEGMENT_NAME.match(e.name) and e.is_file(follow_symlinks=False):
            out.append((e.name, e.stat(follow_symlinks=False).st_size))
    return out


def _queue_file_size(cfg: BrokerConfig, files: dict) -> tuple[int, str]:
    """The consume-queue file size the broker loads with, and where it comes from: broker.conf (or
    --cq-file-size), else the size most of the store's files have (a store made with another
    mappedFileSizeConsumeQueue), else the default."""
    from collections import Counter

    from engine.broker.config.brokerconf import CONSUME_QUEUE_FILE_SIZE

    given = (cfg.properties is not None and "mappedFileSizeConsumeQueue" in cfg.properties) \
        or cfg.mappedFileSizeConsumeQueue != CONSUME_QUEUE_FILE_SIZE
    if given:
        return cfg.cq_file_size, "mappedFileSizeConsumeQueue"
    sizes = Counter(n for fs in files.values() for _name, n in fs if n)
    if not sizes:
        return cfg.cq_file_size, "the default mappedFileSizeConsumeQueue"
    size, _ = max(sizes.items(), key=lambda kv: (kv[1], kv[0]))
    return size, "the size most of the store's consume-queue files have"


def check_consume_queue_files(cfg: BrokerConfig, layout: StoreLayout, fix: Fixes, rep: DoctorReport) -> None:
    """Consume-queue files of the wrong length (MappedFileQueue.doLoad refuses them: the broker does not start)
    and queue directories that hold no file (the broker serves them empty: their messages are hidden). One
    directory listing per queue; no file is read."""
    listing = layout.list_queues()
    files = {(t, q): _queue_files(layout.consumequeue_dir / t / str(q)) for t, q in listing.queues}
    size, source = _queue_file_size(cfg, files)
    for (topic, qid), fs in files.items():
        rel = f"consumequeue/{topic}/{qid}"
        if not fs:
            rep.findings.append(Finding(
                "cq-no-files", WARNING, rel, None,
                f"consume queue {topic}/{qid} has no file; the messages of it the commit log holds are dispatched "
                "again by a recover that walks the whole log (`doctor --deep` counts them)",
                "loads it empty (max offset 0) and does not dispatch its old messages again: its dispatch resumes "
                "after the furthest unit of all queues, so the messages of this queue before it stay hidden",
                fix("recover", "--full-scan")))
            continue
        for i, (name, n) in enumerate(fs):
            if n == size or (n == 0 and i == len(fs) - 1):
                continue  # the broker deletes an empty last file and loads the queue without it
            last = i == len(fs) - 1
            if last and n < size:
                step, cure = (f"pad it with zeros to {size} bytes (`truncate -s {size} {rel}/{name}`): the units it "
                              "holds are kept and `rmqtool doctor` then says what the rest needs"), None
            else:  # cut in the middle, or too long: the queue is dispatched again from the commit log
                step = ("the queue's files are moved to the quarantine and the queue is dispatched again from the "
                        "commit log (each unit at its record's queue offset)")
                cure = fix("repair", "consume-queue", "--topic", topic, "--queue-id", str(qid), "--rebuild")
            rep.findings.append(Finding(
                "cq-file-size", ERROR, f"{rel}/{name}", None,
                f"consume-queue file {rel}/{name} is {n} bytes, not {size} ({source}); {step}",
                "refuses to load the consume queues (MappedFileQueue.doLoad: length not matched) and does not start",
                cure))


def check_consume_queue_order(cfg: BrokerConfig, layout: StoreLayout, fix: Fixes, rep: DoctorReport) -> None:
    """Consume-queue files in the wrong place of their queue (swapped, renamed): the first unit of each file must
    point at a record of the queue whose queue offset is the file's first (its name / 20). The broker serves such
    a file's units at the wrong queue offsets and recover's cut loses them; the fix dispatches the queue again
    from the commit log. One unit and one record read per file; units a record of another queue answers (LMQ,
    multi-dispatch) and units outside the log are left to the other checks."""
    from engine.broker.commitlog.message import VALID
    from engine.ops.recovery.scan import open_log

    cq_unit = 20
    cl, _ = open_log(cfg)
    try:
        lo, hi = cl.min_offset, cl.max_file_offset()
        for topic, qid in layout.list_queues().queues:
            d = layout.consumequeue_dir / topic / str(qid)
            for name, n in _queue_files(d):
                if n < cq_unit or int(name) % cq_unit:
                    continue
                with open(d / name, "rb") as fh:
                    unit = fh.read(cq_unit)
                off, size = int.from_bytes(unit[:8], "big", signed=True), int.from_bytes(unit[8:12], "big")
                if not size or not lo <= off < hi:
                    continue
                r = cl.check_at(off, check_crc=False)
                if r.status != VALID or r.record is None or (r.record.topic, r.record.queue_id) != (topic, qid):
                    continue
                want = int(name) // cq_unit
                if r.record.queue_offset != want:
                    rel = f"consumequeue/{topic}/{qid}/{name}"
                    rep.findings.append(Finding(
                        "cq-file-misplaced", ERROR, rel, 0,
                        f"consume-queue file {rel} starts at queue offset {want} by its name, but its first unit "
                        f"points at the record of queue offset {r.record.queue_offset} (the queue's files are "
                        "swapped or renamed); the queue's files are moved to the quarantine and the queue is "
                        "dispatched again from the commit log",
                        "serves the file's units at the queue offsets its name gives: consumers get the wrong "
                        "messages or skip some; its recovery may cut the queue there",
                        fix("repair", "consume-queue", "--topic", topic, "--queue-id", str(qid), "--rebuild")))
                    break  # one finding per queue: the fix rebuilds all of it
    finally:
        cl.close()


def check_consume_queue_tails(cfg: BrokerConfig, layout: StoreLayout, fix: Fixes, rep: DoctorReport) -> int:
    """An all-zero last consume-queue file after a written one (RocketMQ #9728, #10108): one read per queue."""
    listing = layout.list_queues()
    for topic, qid in listing.queues:
        for p in trailing_empty_files(layout.consumequeue_dir / topic / str(qid)):
            rep.findings.append(Finding(
                "cq-empty-last-file", WARNING, layout_rel(layout, p), 0,
                f"consume-queue file {p.name} of {topic}/{qid} holds no unit (all zeros at its start) after a "
                "file that does",
                "keeps it with a read position of 0 and writes the queue's next units into it (observed with "
                "5.3.x); correctMinOffset reads the unit before position 0 when nothing refills it, which throws in "
                "some versions (RocketMQ #9728, #10108)",
                fix("repair", "consume-queue", "--topic", topic, "--queue-id", str(qid))))
    for p in listing.problems:
        rep.findings.append(Finding("cq-odd-entry", INFO, p.path, None, f"{p.path}: {p.reason}",
                                    "ignores it", None))
    return len(listing.queues)


#: Long.parseLong's range: IndexService.load parses every name of index/ as a long.
_JAVA_LONG_MAX = (1 << 63) - 1


def _parses_as_long(name: str) -> bool:
    body = name[1:] if name[:1] in "+-" else name
    return body.isascii() and body.isdigit() and -_JAVA_LONG_MAX - 1 <= int(name) <= _JAVA_LONG_MAX


def check_index_dir(layout: StoreLayout, rep: DoctorReport, temp_files: list[str]) -> None:
    """Entries of index/ the broker cannot load as index files (IndexService.load opens every entry, parsing its
    name with Long.parseLong first): a name that is no number is logged with a stack trace at every start and
    skipped; a numbered entry that is no regular file (a directory) fails the load and the broker does not
    start. Temporary files an rmqtool run left are reported as such (stale-temp-file)."""
    d = layout.index_dir
    if not d.is_dir() or d.is_symlink():
        return
    left = {os.path.basename(t) for t in temp_files if os.path.dirname(t) == layout_rel(layout, d)}
    for e in sorted(os.scandir(d), key=lambda e: e.name):
        rel = layout_rel(layout, d / e.name)
        if not _parses_as_long(e.name):
            if e.name in left:
                continue
            rep.findings.append(Finding(
                "index-odd-file", WARNING, rel, None,
                f"{rel} is no index file: its name is not a number; move it out of index/",
                "parses every name in index/ as a number (IndexService.load): logs an ERROR with a stack trace "
                "(NumberFormatException) at every start and skips it", None))
        elif not e.is_file(follow_symlinks=True):
            rep.findings.append(Finding(
                "index-odd-file", ERROR, rel, None,
                f"{rel} is named like an index file but is not a regular file; move it out of index/",
                "opens it as an index file (IndexService.load): the open fails, the load returns false and the "
                "broker does not start", None))



def check_commitlog_present(cfg: BrokerConfig, layout: StoreLayout, rep: DoctorReport) -> bool:
    """False (with an error finding) when the commit log is absent while consume queues point into it
    (engine.ops.recovery.guard): recovery's plan is not worked out then, since recover refuses the store."""
    from engine.broker.consumequeue.queue import ConsumeQueue
    from engine.ops.recovery.guard import missing_commitlog
    from engine.ops.recovery.scan import open_log

    try:
        cl, _ = open_log(cfg)
    except StoreError:
        return True  # other findings say what is wrong with its files
    try:
        if cl.segments:
            return True
    finally:
        cl.close()
    top = -1
    for topic, qid in layout.list_queues().queues:
        try:
            cq = ConsumeQueue(cfg.root, topic, qid, cfg.cq_file_size)
        except StoreError:
            continue
        try:
            top = max(top, cq.max_physic_offset)
        finally:
            cq.close()
    why = missing_commitlog(cfg, 0, top)
    if why is None:
        return True
    rep.findings.append(Finding(
        "commitlog-missing", ERROR, "commitlog", None, why + "; do not run recover on it (it refuses)",
        "starts with an empty commit log and cuts every consume queue to nothing (truncateDirtyLogicFiles): "
        "every message is hidden, and consumer offsets are moved back to 0", None))
    return False
