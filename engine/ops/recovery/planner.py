"""plan_recovery: read the store (read-only) and build the RecoveryPlan (engine.ops.recovery.plan).

Order: segment placement and consume queues (scan.py), the checkpoint and the broker's start segment, the index
files' own checks (trust.py), then the walk from the scan start with CRCs checked (scan.py), which also checks
the items of the index files it passes. Once the end is known: the commit-log repairs, the consume-queue cuts,
and a second walk, from where something must be re-dispatched or re-indexed (usually the last few records),
that counts the units and compares the index files the replay would write with those on disk (dispatch.py).

Where rmqtool differs from the broker, on purpose:
* Damaged records before the end are stepped over, not the end of the log (see plan.py).
* Bytes after the recovered end are zeroed (the broker leaves them; pitfall 13), so stale records never
  reappear in a later scan; consume-queue tails are zeroed for the same reason.
* The broker deletes every index file whose endTimestamp is after the checkpoint's indexMsgTimestamp and
  re-indexes only from its recovery start, which loses keys of messages it keeps (format §7.6, RocketMQ issues 3868
  and 8007). rmqtool keeps the longest prefix of index files (and items) it can confirm and re-indexes every
  surviving record after it, the way an uninterrupted IndexService would have: the rebuilt files are
  byte-identical to what a put without the crash would have written.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np

from engine.broker.config import epochfile
from engine.broker.config.checkpoint import Checkpoint
from engine.broker.commitlog.log import CommitLog
from engine.broker.config.brokerconf import CQ_STORE_UNIT_SIZE, BrokerConfig
from engine.broker.consumequeue.geometry import settle_cq_file_size
from engine.broker.index.geometry import writer_index_geometry
from engine.broker.consumequeue.queue import ConsumeQueue
from engine.broker.layout import StoreLayout, index_file_name
from engine.broker.mode import detect_mode
from engine.broker.commitlog.message import BLANK_MAGIC_CODE
from engine.broker.commitlog.records import CORRUPT, decode_segment, RecordBatch, SegmentEnd
from engine.errors import CorruptFileError
from engine.broker.commitlog.walk import LOG_END, SEGMENT_TAIL, find_resync, walk
from engine.ops.operation import fingerprint
from engine.progress import Progress, no_progress
from engine.ops.recovery.dispatch import QueueDispatch, QueueFeed, IndexReplay, ReplayStart
from engine.ops.recovery.guard import refuse_missing_commitlog
from engine.ops.recovery.placeholder import Origin
from engine.ops.recovery.plan import (BLANK_FILLER, MIN_HOLE, PLACEHOLDER, TRUNCATE, EpochPlan, IndexPlan, QueuePlan,
                                      RecoveryPlan, Repair)
from engine.ops.recovery.scan import (LogScan, QueueCut, QueueState, cut_queue, open_log, place_segments, read_queue,
                                      scan_log)
from engine.broker.commitlog.startup import broker_start
from engine.ops.recovery.trust import (IndexFacts, ItemJoin, check_index_files, open_index_files,
                                       read_checkpoint, record_ts, trailing_items, trusted_prefix)
from engine.timer.layout import TIMER_QUEUE_ID, TIMER_TOPIC
from engine.timer.repair import plan_timer_repair

_TMP_NAME = re.compile(r"^(\d+|checkpoint)\.tmp\d+$")


def settle_recovery_config(cfg: BrokerConfig) -> BrokerConfig:
    """The configuration a plan is applied with, settled from the store's files as plan_recovery settles it (the
    consume-queue file size, the index geometry); cfg itself is left as it is."""
    cfg = settle_cq_file_size(cfg, "recover")
    return writer_index_geometry(cfg, what="recover") if cfg.messageIndexEnable else cfg


def plan_recovery(cfg: BrokerConfig, check_crc: bool = True, index_safe: bool = False, full_scan: bool = False,
                  progress: Progress | None = None, force: bool = False, broker_window: bool = False) -> RecoveryPlan:
    """Work out what recovery does. Reads only; every file is opened read-only.

    full_scan: validate the whole commit log from its first segment (and every index item against it), for
    damage the checkpoint says cannot be there; costs a read of the whole log.
    broker_window: walk no earlier than the broker's start-up reads (doctor), index items before it on trust."""
    progress = progress or no_progress
    layout = StoreLayout.of(cfg)
    # An abort marker or a checkpoint alone is a store whose writer died before its first write.
    layout.require_store(allow_markers=True)
    # A queue re-dispatch creates gets the store's queue-file size (issue 34 item 12); doctor's plan only reads.
    cfg = settle_cq_file_size(cfg, None if broker_window else "recover")  # settled here: the caller's is left as is
    fp = fingerprint(cfg)
    mode = "abnormal" if layout.abort.exists() else "normal"
    cpf = read_checkpoint(layout)
    cl, misfits = open_log(cfg)
    files: list[IndexFacts] = []
    checks = None
    try:
        placement = place_segments(cl)
        # the queue files (none where a broker keeps them in RocksDB); entries a broker would not load are reported
        listing = layout.list_queues(files_only=True)
        queues = {(t, q): read_queue(cfg.root, cfg, t, q, broker_window) for t, q in listing.queues}
        max_phy_cq = max((q.max_phys for q in queues.values()), default=-1)
        if not broker_window:  # doctor reports it (engine.survey.doctor); recover refuses
            refuse_missing_commitlog(cfg, len(cl.segments), max_phy_cq)
        bi, rule = broker_start(cl, mode, cpf.cp, max_phy_cq, index_safe, check_crc)
        segs = cl.segments
        plan = RecoveryPlan(
            store=str(cfg.root), mode=mode, check_crc=check_crc, index_safe=index_safe, full_scan=full_scan,
            checkpoint_before=cpf.cp, checkpoint_readable=cpf.ok, checkpoint_problem=cpf.problem,
            broker_start_segment=segs[bi].path.name if segs else None,
            broker_start_offset=segs[bi].start if segs else 0, broker_start_rule=rule, scan_start_offset=0,
            scan_start_reasons=[], fingerprint=fp, force=force, segment_renames=placement.renames,
            notes=list(placement.notes), segment_resizes=[(seg.path.name, n, seg.size) for seg, n in misfits],
            broker_window=broker_window and not full_scan)
        _note_misfits(plan, listing.problems, misfits)
        if cfg.messageIndexEnable:
            cfg = writer_index_geometry(cfg, what="recover")  # as readers take it; never another geometry
            files = open_index_files(cfg, layout.index_dir)
            # The files' structure checks run while the log is walked, the walk assuming they pass; when one
            # does not, the walk is done again with the verdicts (a damaged index file costs a second walk).
            full_from = _scan_start(cl, plan, [], 0, queues) if plan.broker_window else None
            checks = check_index_files(files, cl, cpf, cfg.maxIndexNum, full_from)
        else:
            plan.index = IndexPlan(enabled=False)
            plan.notes.append("messageIndexEnable=false: the index is left alone")
        scan, k, joins = _walk(cl, cfg, plan, files, queues, progress)
        if checks is not None and checks.settle():
            scan, k, joins = _walk(cl, cfg, plan, files, queues, progress)
        # a segment's tail runs to the segment's end (a short file's too: it is padded)
        _plan_commitlog(cl, plan, scan, _units_in_ranges(cfg, queues, [
            (a, cl.queue.find(a).end if kind == SEGMENT_TAIL else b) for a, b, kind, _ in scan.all_gaps()
            if kind != LOG_END]))
        feeds = _plan_queues(cfg, cl, plan, queues, scan)
        _second_walk(cfg, cl, plan, scan, files, k, joins, feeds, progress)
        _plan_checkpoint(plan, cpf, files, scan, cfg)
        _plan_timer(cfg, plan)
        _plan_epoch(cfg, plan)
        _finish(plan, cpf.cp, cfg.root, layout.index_dir)
        return plan
    finally:
        if checks is not None:
            checks.close()  # no check may still read a file closed here
        for x in files:
            x.close()
        cl.close()


def _plan_timer(cfg: BrokerConfig, plan: RecoveryPlan) -> None:
    """The timer store's part (timer §10): units whose records the plan removes, against the log it leaves."""
    if not cfg.timerWheelEnable:
        return
    removed = [(r.offset, r.end) for r in plan.repairs]
    qmax = next((q.max_offset_after for q in plan.queues if (q.topic, q.queue_id) == (TIMER_TOPIC, TIMER_QUEUE_ID)),
                None)
    plan.timer = plan_timer_repair(cfg, plan.end_offset, removed, qmax)
    if plan.timer is not None and not plan.broker_window:
        plan.timer.pending = None  # only doctor reuses the scan: recover keeps no row per pending message
    if plan.timer is not None:
        plan.notes += plan.timer.notes
        if plan.timer.skipped:
            plan.notes.append(plan.timer.skipped)


def _plan_epoch(cfg: BrokerConfig, plan: RecoveryPlan) -> None:
    """Controller mode: when the commit log is cut, the epochs starting at or after its new end go, as
    EpochFileCache.truncateSuffixByOffset drops them (the broker does so when it changes role); epochs starting past
    the end that an earlier cut left go too, at end + 1 (those starting exactly at the end are a new master's)."""
    mode = detect_mode(cfg)
    if not mode.controller or mode.epoch_file is None:
        return
    r = epochfile.read(mode.epoch_file)
    if r.fatal:
        plan.notes.append(f"epoch file: {r.fatal}; left as it is (the broker cannot load it)")
        return
    end = plan.end_offset
    cut = plan.truncated_bytes > 0 or plan.max_offset_before > end
    offset = end if cut else end + 1
    after = epochfile.truncate_suffix_by_offset(r.entries, offset)
    if len(after) == len(r.entries):
        return
    why = (f"the commit log is cut at {end}" if cut else
           f"epoch(s) start past the commit log's end {end} (left by an earlier cut)")
    plan.epoch = EpochPlan(str(mode.epoch_file), offset, r.entries, after, "write" if after else "remove", why)


def _note_misfits(plan: RecoveryPlan, skipped: list, misfits: list) -> None:
    """Queue directories a broker would not load, and commit-log segments of the wrong size (padded or cut)."""
    plan.skipped_entries = [p.as_dict() for p in skipped]
    plan.notes += [f"{p.path}: {p.reason}; skipped (recover leaves it alone)" for p in skipped]
    plan.notes += [f"commit-log segment {seg.path.name} is {n} bytes, not {seg.size}: it is "
                   + ("padded with zeros" if n < seg.size else f"cut, the {n - seg.size} bytes past it quarantined")
                   for seg, n in misfits]


def _finish(plan: RecoveryPlan, cp: Checkpoint, root: Path, index_dir: Path) -> None:
    """Temporary files a killed writer left, whether the checkpoint is written, what the quarantine keeps."""
    plan.stale_temp_files = sorted(str(p.relative_to(root)) for d in (root, index_dir)
                                   if d.is_dir() for p in d.iterdir() if _TMP_NAME.match(p.name))
    plan.data_consistent = plan.data_unchanged()
    if not plan.data_consistent or plan.mode == "abnormal":
        plan.write_checkpoint = True
    else:
        plan.checkpoint_after = cp
    plan.quarantine_bytes = (sum(r.length for r in plan.repairs if r.kind != TRUNCATE)
                             + max(0, plan.zero_to - plan.zero_from)
                             + sum(max(0, q.zero_to - q.zero_from) for q in plan.queues)
                             + (plan.timer.quarantine_bytes if plan.timer is not None and plan.timer.changed else 0))
    if not plan.check_crc:
        plan.notes.append("body CRCs were not checked (--no-check-crc)")


# ==================================================================== the walk

def _segment_of(cl: CommitLog, offset: int) -> int:
    """Start of the segment holding `offset` (first segment if before the log, last if after)."""
    segs = cl.segments
    if not segs:
        return 0
    if offset <= segs[0].start:
        return segs[0].start
    seg = cl.queue.find(offset)
    return seg.start if seg is not None else segs[-1].start


def _index_need(cl: CommitLog, files: list[IndexFacts], k: int, enabled: bool = True) -> tuple[int | None, str]:
    """The earliest offset the index checks need walked: the continued file's items and the record its
    predecessor ended at."""
    first = cl.segments[0].start if cl.segments else 0
    if not enabled:
        return None, ""
    if not files:
        return first, "no index files: index from the first record"
    prev = files[k - 1] if k > 0 else None
    c = prev.structure.last_phy if prev is not None and prev.structure and prev.count else None
    if k < len(files) and files[k].prefix_ok:
        need = files[k].structure.first_phy if c is None else min(c, files[k].structure.first_phy)
        return need, f"check the items of {files[k].name} from its first, {need}"
    if c is not None:
        return c, f"re-index after {c}, the end of the last trusted index file {prev.name}"
    return first, "no index file can be trusted: re-index from the first record"


def _scan_start(cl: CommitLog, plan: RecoveryPlan, files, k, queues: dict[tuple, QueueState]) -> int:
    segs = cl.segments
    if not segs:
        plan.scan_start_reasons = ["empty commit log"]
        return 0
    out = plan.broker_start_offset
    reasons = [f"broker rule ({plan.broker_start_rule}): segment {plan.broker_start_segment}"]
    wanted = []
    if plan.full_scan:
        wanted.append((segs[0].start, "--full-scan: the whole commit log"))
    for name, length, size in plan.segment_resizes:
        if length < size:  # the bytes past its length are gone: what pointed at them must be found and repaired
            wanted.append((int(name), f"commit-log segment {name} is short ({length} of {size} bytes)"))
    need, why = _index_need(cl, files, k, plan.index.enabled)
    if need is not None and not plan.broker_window:
        wanted.append((_segment_of(cl, need), why))
    cover = max((q.coverage for q in queues.values()), default=-1)
    wanted.append((_segment_of(cl, cover), f"consume queues are complete up to {cover}") if cover >= 0 else
                  (segs[0].start, "no consume-queue units: dispatch from the first record"))
    for off, why in sorted(wanted):
        if off < out:
            out = off
        if off <= plan.broker_start_offset:
            reasons.append(f"rmqtool starts at {off}: {why}")
    plan.scan_start_reasons = reasons
    return out


def _keys_from(plan: RecoveryPlan) -> int:
    """From which store time index items are checked against their record's keys (see trust.ItemJoin): the
    crash-exposed tail after the checkpoint's flush time (abnormal mode), everything with --full-scan or when
    the checkpoint cannot say what was flushed, nothing after a clean shutdown."""
    if plan.full_scan or not plan.checkpoint_readable:
        return 0
    if plan.mode == "abnormal":
        return plan.checkpoint_before.min_timestamp()
    return 2**62


def _multi(cfg: BrokerConfig) -> tuple[bool, bool] | None:
    """(enableLmq, enableMultiDispatch) of a multi-dispatching store (its %LMQ% units are re-dispatched), else None."""
    mode = detect_mode(cfg)
    return (mode.lmq, True) if mode.multi_dispatch else None


def _walk(cl, cfg, plan, files, queues, progress) -> tuple[LogScan, int, dict[int, ItemJoin]]:
    """Pass 1: the recovery walk, repeated from earlier when a trusted index file fails its items' checks."""
    k, reason = trusted_prefix(files)
    while True:
        start = _scan_start(cl, plan, files, k, queues)
        keys_from = _keys_from(plan)
        joins = {i: ItemJoin(files[i], start, keys_from) for i in range(min(k + 1, len(files)))
                 if files[i].prefix_ok and files[i].structure.last_phy >= start}
        scan = scan_log(cl, start, plan.check_crc, queues, list(joins.values()), progress, MIN_HOLE,
                        all_keys=keys_from == 0 and bool(joins), root=cfg.root, multi=_multi(cfg))
        for j in joins.values():
            j.finish(scan.end)
        failed = [i for i in sorted(joins) if i < k and not joins[i].complete]
        if failed:
            k = failed[0]
            reason = f"{files[k].name}: {joins[k].reason}"
            if not plan.broker_window and (joins[k].good == 0
                                           or _index_need(cl, files, k, plan.index.enabled)[0] < start):
                continue  # walk again from where the newly untrusted file begins
        break
    plan.scan_start_offset = start
    if files:
        plan.index.trusted = [x.name for x in files[:k]]
        plan.index.untrusted_reason = reason
        plan.index.problems = {x.name: x.problem for x in files if x.problem}
        # (set again on every walk: a walk done again with the checks' verdicts leaves no reason of the first)
        plan.index.prefix_reason = joins[k].reason if k in joins and not joins[k].complete else ""
    return scan, k, joins


# ==================================================================== commit log

def _plan_commitlog(cl: CommitLog, plan: RecoveryPlan, scan: LogScan, units: dict[int, list] | None = None) -> None:
    plan.records_scanned = scan.records
    plan.last_valid_offset, plan.last_store_timestamp = scan.last_valid, scan.last_ts
    plan.end_offset, plan.stop_reason = scan.end, scan.stop_reason
    plan.known_gaps = scan.gap_ranges()
    details = {g.offset: g for g in scan.gaps}
    units = units or {}
    for off, end, kind, prev_ts in scan.all_gaps():
        if kind == LOG_END:
            continue
        seg = cl.queue.find(off)
        g = details.get(off)
        filler = kind == SEGMENT_TAIL or _blank_at(cl, seg, end - seg.start)
        if filler:
            end = seg.end  # the filler runs to the segment's end (over a BLANK the range ends at)
        pieces = _split_range(off, end, units.get(off, []), filler)
        for i, (a, b, piece_kind, origin) in enumerate(pieces):
            repair = Repair(seg.path.name, a, b, a - seg.start, piece_kind, g.reason if g else "damaged", prev_ts,
                            (g.swallowed if g else 0) if i == 0 else 0, origin)
            if piece_kind == BLANK_FILLER and seg.size - repair.pos < 8:
                raise CorruptFileError(f"commit-log segment {seg.path.name} ends with {seg.size - repair.pos} bytes "
                                       "that are neither a record nor a BLANK filler, too few to hold one; repair it "
                                       "by hand (the broker would end the log there)")
            plan.repairs.append(repair)
    plan.repair_count = len(plan.repairs)
    if scan.swallowed:
        plan.notes.append(f"{scan.swallowed} valid record(s) lay in holes too narrow for a placeholder; they are "
                          "quarantined with the damaged bytes")
    records, data_end, last_ts = _tail_facts(cl, scan.end)
    plan.truncated_records = records
    plan.max_offset_before = max(data_end, scan.end)
    plan.truncated_bytes = max(0, data_end - scan.end)
    plan.last_store_timestamp_before = last_ts if last_ts is not None else scan.last_ts
    for seg in cl.segments:
        if seg.start > scan.end:
            plan.segments_deleted.append(seg.path.name)
        elif seg.start <= scan.end < seg.end:
            pos = scan.end - seg.start
            last = _last_nonzero(cl, seg, pos)
            if last > pos:
                plan.zero_segment, plan.zero_from, plan.zero_to = seg.path.name, pos, last


def _split_range(a: int, b: int, units: list, filler: bool) -> list[tuple[int, int, str, Origin | None]]:
    """How a damaged range [a, b) is rewritten: one placeholder per message a consume-queue unit points at
    inside it (units: (offset, size, Origin) sorted by offset), so every unit points at the start of a record
    that stands for its own message (issue 34 item 4), not into the middle of one placeholder; bytes no unit
    claims go to the piece before them (or a leading placeholder of their own). A range that must end its
    segment (filler) ends with a BLANK filler after the last unit's record. Every piece is at least MIN_HOLE
    bytes (a filler at least 8); a unit too close to a cut for that keeps the piece before it."""
    cuts: list[tuple[int, Origin | None]] = [(a, None)]
    last_end = a
    for u_off, u_size, origin in units:
        if u_off == a:
            cuts[0] = (a, cuts[0][1] or origin)
            last_end = max(last_end, a + u_size)
        elif a < u_off < b and u_off - cuts[-1][0] >= MIN_HOLE and b - u_off >= MIN_HOLE:
            cuts.append((u_off, origin))
            last_end = max(last_end, u_off + u_size)
    pieces = []
    for i, (start, origin) in enumerate(cuts):
        stop = cuts[i + 1][0] if i + 1 < len(cuts) else b
        pieces.append([start, stop, PLACEHOLDER, origin])
    if not filler:
        return [tuple(p) for p in pieces]
    tail = pieces[-1]
    if tail[3] is None:  # no unit points at the last piece: the filler starts there
        tail[2] = BLANK_FILLER
    elif last_end - tail[0] >= MIN_HOLE and b - last_end >= 8 and last_end > tail[0]:
        tail[1] = last_end  # the last unit's record, then the filler
        pieces.append([last_end, b, BLANK_FILLER, None])
    else:  # no room for the filler after the last unit's record: the filler takes its place
        tail[2], tail[3] = BLANK_FILLER, None
    return [tuple(p) for p in pieces]


def _units_in_ranges(cfg, queues: dict[tuple, QueueState], ranges: list[tuple[int, int]]) -> dict[int, list]:
    """The consume-queue units (offset, size, Origin) that point inside each damaged range [a, b), by a. A queue
    file is read only when its first and last valid units bracket a range (units follow the commit log's order);
    the first unit found for an offset wins."""
    if not ranges:
        return {}
    ranges = sorted(ranges)
    starts = np.array([r[0] for r in ranges], dtype=np.int64)
    ends = np.array([r[1] for r in ranges], dtype=np.int64)
    found: dict[int, tuple[int, int, Origin]] = {}
    for (topic, qid), qs in queues.items():
        if not qs.exists:
            continue
        cq = ConsumeQueue(cfg.root, topic, qid, cfg.cq_file_size)
        try:
            for seg in cq.queue.segments:
                n = min(cq.file_size, qs.valid_end - seg.start) // CQ_STORE_UNIT_SIZE
                if n <= 0:
                    continue
                first_q = seg.start // CQ_STORE_UNIT_SIZE
                lo, hi = cq.unit(first_q), cq.unit(first_q + n - 1)
                if lo is None or hi is None:
                    continue
                j = int(np.searchsorted(ends, lo[0], side="right"))
                if j >= len(ranges) or starts[j] > hi[0]:
                    continue  # no range between this file's first and last unit
                fu = cq.file_units(seg)[:n]
                offs = fu["offset"].astype(np.int64)
                idx = np.searchsorted(starts, offs, side="right") - 1
                inside = np.flatnonzero((idx >= 0) & (offs < ends[np.maximum(idx, 0)]))
                sizes = fu["size"].astype(np.int64)
                for i in inside.tolist():
                    found.setdefault(int(offs[i]), (int(sizes[i]), Origin(topic, qid, first_q + i)))
        finally:
            cq.close()
    out: dict[int, list] = {}
    for off in sorted(found):
        k = int(np.searchsorted(starts, off, side="right")) - 1
        size, origin = found[off]
        out.setdefault(int(starts[k]), []).append((off, size, origin))
    return out


def _blank_at(cl: CommitLog, seg, pos: int) -> bool:
    buf = cl.queue.buffer(seg)
    if pos + 8 > len(buf):
        return False
    return int.from_bytes(buf[pos + 4:pos + 8], "big", signed=True) == BLANK_MAGIC_CODE


def _last_nonzero(cl: CommitLog, seg, lo: int) -> int:
    """Position just after the last non-zero byte of the segment at or after lo (lo if none); reads with pread
    over the data regions only (SEEK_DATA/SEEK_HOLE), so a sparse 1 GiB tail costs nothing."""
    import os

    if seg.file_len == 0:
        return lo
    fd = cl.queue.fd(seg)
    regions, pos = [], lo
    while pos < seg.file_len:
        try:
            a = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:
            break
        b = min(seg.file_len, os.lseek(fd, a, os.SEEK_HOLE))
        regions.append((max(a, lo), b))
        pos = b
    for a, b in reversed(regions):
        hi = b
        while hi > a:
            n = min(1 << 20, hi - a)
            nz = np.flatnonzero(np.frombuffer(os.pread(fd, n, hi - n), dtype=np.uint8))
            if len(nz):
                return hi - n + int(nz[-1]) + 1
            hi -= n
    return lo


def _tail_facts(cl: CommitLog, end: int) -> tuple[int, int, int | None]:
    """(records or fragments after `end`, offset just after the last non-zero byte, store time of the last
    decodable record among them): a lenient count, no CRC."""
    count, data_end, last_ts = 0, end, None
    for seg in cl.segments:
        if seg.end <= end:
            continue
        pos = max(0, end - seg.start)
        last = _last_nonzero(cl, seg, pos)
        if last <= pos:
            continue
        data_end = seg.start + last
        buf = cl.queue.buffer(seg)
        view = memoryview(buf)[:last]
        while pos < last:
            for item in decode_segment(view, pos):
                if isinstance(item, RecordBatch):
                    count += len(item)
                    last_ts = int(item.store_ts[-1])
                elif isinstance(item, SegmentEnd):
                    pos = item.pos
            if pos >= last or item.kind != CORRUPT:
                break
            count += 1  # a torn record or garbage: one fragment; the records after it count too
            nxt = find_resync(buf, cl.queue.fd(seg), pos, last, seg.start, 0, False)
            if nxt is None:
                break
            pos = nxt
        del view
    return count, data_end, last_ts


# ==================================================================== consume queues

def _plan_queues(cfg, cl: CommitLog, plan: RecoveryPlan, queues: dict[tuple, QueueState],
                 scan: LogScan) -> dict[tuple, QueueFeed]:
    feeds = {}
    lowest_cut = None
    for key, qs in sorted(queues.items()):
        c: QueueCut = cut_queue(cfg.root, cfg, qs, scan.end)
        after = (c.end if c.end is not None else 0) // 20
        qp = QueuePlan(qs.topic, qs.queue_id, qs.max_offset, after, c.truncate_to, c.units_removed,
                       c.files_deleted, c.zero_file, c.zero_from, c.zero_to, dispatch_state=(c.max_phys, c.end))
        plan.queues.append(qp)
        feeds[key] = QueueFeed(c.max_phys, c.end, max_offset_after=after)
        if c.max_phys < qs.max_phys or c.units_removed:  # units were cut: records after them lack units now
            lowest_cut = c.max_phys if lowest_cut is None else min(lowest_cut, c.max_phys)
    if lowest_cut is not None:
        # A segment start: a record boundary. It may lie before the scan start (a queue cut inside files the
        # broker's start-up does not re-read): the records from the cut on are re-dispatched, each at the queue
        # offset its record holds, however far back that is (issue 34 item 2).
        lowest_cut = _segment_of(cl, lowest_cut)
    candidates = [x for x in (scan.first_dispatch, lowest_cut) if x is not None]
    if candidates:
        plan.dispatch_from = max(cl.segments[0].start if cl.segments else 0, min(candidates))
    return feeds


# ==================================================================== second walk

def _replay_start(cl: CommitLog, files: list[IndexFacts], k: int, join: ItemJoin | None) -> ReplayStart:
    prev = files[k - 1] if k > 0 else None
    seed = (prev.f.header.endPhyOffset, prev.f.header.endTimestamp) if prev is not None and prev.f else (0, 0)
    if k < len(files) and join is not None and join.good > 0 and files[k].prefix_ok:
        x = files[k]
        off, skip = trailing_items(x.f, join.good)
        end_ts = join.last_ts if join.last_ts is not None else (record_ts(cl, off) or x.f.header.endTimestamp)
        return ReplayStart(k, off, skip, *seed, resume_from=x.path, resume_items=join.good, resume_end_ts=end_ts)
    if prev is not None and prev.count:
        off, skip = trailing_items(prev.f, prev.count)
        if off >= cl.min_offset:
            return ReplayStart(k, off, skip, *seed)
    return ReplayStart(k, None, 0, *seed)


def _second_walk(cfg, cl, plan: RecoveryPlan, scan: LogScan, files, k, joins, feeds, progress) -> None:
    """Pass 2: count the re-dispatched units and compare the re-indexed files with those on disk."""
    hooks = []
    replay = None
    if plan.index.enabled:
        plan.index.start = start = _replay_start(cl, files, k, joins.get(k))
        replay = IndexReplay(cfg, start, [x.path for x in files], mode="plan")
        hooks.append(replay)
    dispatch = QueueDispatch(cfg, feeds, plan.dispatch_from if plan.dispatch_from is not None else 2**62,
                             placeholders=plan.placeholder_units())
    if plan.dispatch_from is not None:
        hooks.append(dispatch)
    begin = [x for x in (plan.index.replay_from if replay else None, plan.dispatch_from) if x is not None]
    if replay is not None and plan.index.start.offset is None:
        begin.append(cl.segments[0].start if cl.segments else 0)
    plan.walk_from = min(begin) if begin else None
    redispatch(cl, plan, hooks, progress, replay)
    plan.notes += [f"multi-dispatch: {p}" for p in dispatch.multi_problems]
    if replay is not None:
        _index_outcome(plan, files, k, replay.finish())
    for qp in plan.queues:
        f = feeds[(qp.topic, qp.queue_id)]
        qp.units_added = f.added
        if f.added:
            qp.max_offset_after = f.max_offset_after
    for (topic, qid), f in feeds.items():
        if f.added and (topic, qid) not in {(q.topic, q.queue_id) for q in plan.queues}:
            plan.queues.append(QueuePlan(topic, qid, 0, f.max_offset_after, units_added=f.added, exists=False))


def redispatch(cl: CommitLog, plan: RecoveryPlan, hooks: list, progress: Progress, replay=None) -> None:
    """The second walk, with the index replay (when there is one) aborted if the walk fails."""
    try:
        _redispatch(cl, plan, hooks, progress)
    except BaseException:
        if replay is not None:
            replay.abort()
        raise


def _redispatch(cl: CommitLog, plan: RecoveryPlan, hooks: list, progress: Progress) -> None:
    """The second walk (planning and applying walk the same records): from plan.walk_from to the end, over the
    ranges the first walk stepped over, CRCs already checked."""
    start, end = plan.walk_from, plan.end_offset
    if start is None or not cl.segments or start >= end:
        return
    for ev in walk(cl, start, check_crc=False, end=end, known_gaps=plan.known_gaps):
        if hasattr(ev, "batch"):
            ev = _clip(ev, end)
            if ev is not None:
                for h in hooks:
                    h.window(ev)
                progress("re-dispatch", int(ev.offsets[-1]) - start, end - start)


def _clip(w, end: int):
    """The window's records before `end` (the walk's last window may run past it)."""
    offs = w.offsets
    if offs[-1] < end:
        return w
    n = int(np.searchsorted(offs, end))
    if n == 0:
        return None
    w.batch = w.batch.select(slice(0, n))
    return w


def _index_outcome(plan: RecoveryPlan, files: list[IndexFacts], k: int, produced) -> None:
    names = [x.name for x in files]
    last_name = names[-1] if names else None
    for fo in produced:
        if fo.position < len(files):
            fo.name = names[fo.position]
        else:
            name = index_file_name(int(time.time() * 1000))
            if last_name is not None and (len(name), name) <= (len(last_name), last_name):
                name = str(int(last_name) + 1)  # keep names unique and in order (IndexService does the same)
            fo.name = last_name = name
    plan.index.planned = produced
    last_pos = produced[-1].position if produced else k - 1
    plan.index.removed = names[max(k, last_pos + 1):]


# ==================================================================== checkpoint

def _plan_checkpoint(plan: RecoveryPlan, cpf, files: list[IndexFacts], scan: LogScan, cfg) -> None:
    cp, cp_ok = cpf.cp, cpf.ok
    new = Checkpoint(masterFlushedOffset=cp.masterFlushedOffset if cp_ok else 0)
    if scan.last_valid >= 0:
        new.physicMsgTimestamp = new.logicsMsgTimestamp = scan.last_ts
        new.confirmPhyOffset = scan.last_valid
    elif scan.end > 0 and cp_ok:
        # The scan's first record is already damaged: the last valid record lies before the scan start,
        # which the checkpoint describes as well as anything does.
        new.physicMsgTimestamp, new.logicsMsgTimestamp = cp.physicMsgTimestamp, cp.logicsMsgTimestamp
        new.confirmPhyOffset = min(cp.confirmPhyOffset, scan.end)
    newest_full = 0
    if plan.index.enabled:
        by_name = {x.name: x for x in files}
        for name in plan.index.trusted:
            newest_full = by_name[name].f.header.endTimestamp
        for p in plan.index.planned:
            if p.count + 1 >= cfg.maxIndexNum:
                newest_full = p.end_ts
    elif cp_ok:
        newest_full = cp.indexMsgTimestamp
    new.indexMsgTimestamp = newest_full
    plan.checkpoint_after = new
    if not cp_ok:
        plan.write_checkpoint = True
        plan.notes.append(f"checkpoint unreadable or implausible ({cpf.problem}); `rmqtool recover` rewrites it")
        return
    bad = []
    if max(cp.physicMsgTimestamp, cp.logicsMsgTimestamp) > max(scan.max_ts, scan.last_ts) and scan.records:
        bad.append("physic/logics timestamps are after every scanned message")
    if cp.indexMsgTimestamp > newest_full and plan.index.enabled:
        bad.append("indexMsgTimestamp is after the newest full index file")
    if scan.last_valid >= 0 and cp.confirmPhyOffset > scan.last_valid:
        bad.append("confirmPhyOffset is past the last valid record")
    if bad:
        plan.write_checkpoint = True
        plan.notes.append("checkpoint claims more than the store holds (" + "; ".join(bad) + "); `rmqtool recover` "
                          "rewrites it")
