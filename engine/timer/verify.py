"""Timer-store verification (`rmqtool timer verify`, and the report `rmqtool doctor` builds on, timer §10).

verify_timer() checks that the wheel, the timer log, the checkpoint, the metrics and the commit log agree, and
returns every problem located (file, byte offset in that file) with a severity and what the broker does with it:

* error: the broker will not start, or starts and loses, re-delivers or stops firing timer messages;
* warning: messages are lost or damaged already, or the broker repairs it itself with a loss;
* info: worth knowing, harmless (tombstones rmqtool recover left, counters that drift).

Each finding's `kind` is a stable identifier (the doctor maps kinds to fixes). Reads only.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.commitlog.segments import GAP, MISALIGNED, MISNAMED, NOT_A_FILE, SYMLINK, WRONG_SIZE
from engine.findings import ERROR, INFO, RANK, WARNING, Finding as TimerFinding
from engine.progress import Progress, no_progress
from engine.timer.chain import BROKEN, CYCLE, DELETED, NOT_A_UNIT, PAST_END
from engine.timer.codec import CHECKPOINT_FILE_SIZE, UNIT_SIZE
from engine.timer.layout import (SLOT_SIZE, SLOTS_TOTAL, TIMER_BLANK_SLOTS, TIMER_QUEUE_ID, TIMER_TOPIC,
                                 WHEEL_LENGTH)
from engine.timer.pending import MAGIC_MISMATCH, PendingScan, SlotWalk, scan_pending
from engine.timer.records import (EXPIRED, NOT_A_RECORD, NOT_TIMER, PAST_LOG, SIZE_MISMATCH, STAND_IN,
                                  TOMBSTONE)
from engine.timer.store import TimerStore

#: At most this many findings of one kind are listed one by one; the rest are counted in a summary finding.
MAX_PER_KIND = 100

_STALLS = ("the dequeue hands the record to its put service, whose conversion throws on it (no REAL_TOPIC/"
           "REAL_QID), and retries it forever: the timer stops firing")


@dataclass
class TimerReport:
    """verify_timer's answer: the findings (worst first) and what was checked."""
    store: str
    findings: list[TimerFinding] = field(default_factory=list)
    checked: dict = field(default_factory=dict)

    @property
    def errors(self) -> list[TimerFinding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def ok(self) -> bool:
        """No error and no warning (info findings do not count)."""
        return not any(f.severity in (ERROR, WARNING) for f in self.findings)

    def counts(self) -> dict:
        c = Counter(f.severity for f in self.findings)
        return {s: c.get(s, 0) for s in (ERROR, WARNING, INFO)}

    def as_dict(self) -> dict:
        return {"store": self.store, "ok": self.ok, "counts": self.counts(), "checked": self.checked,
                "findings": [f.as_dict() for f in self.findings]}


class _Findings:
    def __init__(self):
        self.items: list[TimerFinding] = []
        self.per_kind: Counter = Counter()
        self.dropped: dict[str, tuple[int, TimerFinding]] = {}

    def add(self, kind: str, severity: str, file: str, offset: int | None, problem: str, broker_will: str) -> None:
        self.per_kind[kind] += 1
        f = TimerFinding(kind, severity, file, offset, problem, broker_will)
        if self.per_kind[kind] <= MAX_PER_KIND:
            self.items.append(f)
        else:
            n, first = self.dropped.get(kind, (0, f))
            self.dropped[kind] = (n + 1, first)

    def finish(self) -> list[TimerFinding]:
        for kind, (n, f) in self.dropped.items():
            self.items.append(TimerFinding(kind, f.severity, f.file, None,
                                           f"... and {n} more {kind} finding(s) like the ones above",
                                           f.broker_will))
        return sorted(self.items, key=lambda f: (RANK[f.severity], f.file, f.offset if f.offset is not None else -1))


def verify_timer(cfg: BrokerConfig, now: int | None = None, check_crc: bool = True,
                 result: PendingScan | None = None, progress: Progress = no_progress) -> TimerReport:
    """Every problem of the store's timer store (see the module docstring). `now`: the time the broker would
    start at (epoch ms; default: the current time), for the rules that depend on it. `result`: the pending scan
    of these files when the caller has one made with the same check_crc (a recovery plan's: doctor walks the
    chains once). progress: scan_pending's."""
    now = int(time.time() * 1000) if now is None else now
    with TimerStore(cfg) as ts:
        return check_timer_store(ts, now, check_crc, result, progress)


def check_timer_store(ts: TimerStore, now: int, check_crc: bool = True,
                      result: PendingScan | None = None, progress: Progress = no_progress) -> TimerReport:
    """verify_timer on an open TimerStore (the pending list may be passed in when the caller has it)."""
    out = _Findings()
    rep = TimerReport(str(ts.cfg.root))
    _wheel(ts, out)
    _log(ts, out)
    _checkpoint(ts, out)
    _metrics(ts, out)
    res = result if result is not None else scan_pending(ts, check_crc=check_crc, parallel=True,
                                                         progress=progress)
    _chains(ts, res, out)
    _records(ts, res, out)
    _read_time(ts, res, now, out)
    _metrics_counts(ts, res, out)
    rep.findings = out.finish()
    rep.checked = {"liveSlots": len(res.slots), "unitsWalked": res.units_walked,
                   "queuedUnits": max(0, res.cursor.queue_max - res.cursor.offset) if res.cursor else 0,
                   "pendingMessages": len(res.rows), "recalled": len(res.cancelled),
                   "deleteMarkers": len(res.markers), "timerLogValidEnd": ts.end.end,
                   "commitLogEnd": ts.commitlog_end, "now": now}
    return rep


# ==================================================================== the wheel


def _wheel(ts: TimerStore, out: _Findings) -> None:
    w = ts.wheel
    rel = ts.layout.rel(w.path)
    has_log = bool(ts.log.segments)
    if not w.exists:
        if has_log:
            out.add("wheel-missing", ERROR, rel, None, "there is no timerwheel but the timer log has units",
                    "creates an empty wheel and gives slots back only to the units of the last timer-log files its "
                    "recovery re-reads: older pending timer messages are never fired")
        return
    if w.length < 0:
        out.add("wheel-not-a-file", ERROR, rel, None, "timerwheel is not a regular file",
                "cannot map it and does not start")
        return
    if w.length == 0:
        out.add("wheel-empty-file", ERROR if has_log else INFO, rel, 0, "timerwheel is empty (0 bytes)",
                "extends it to an empty wheel: pending timer messages whose units are not in the last timer-log "
                "files its recovery re-reads are never fired")
        return
    if not w.length_ok:
        out.add("wheel-length", ERROR, rel, 0,
                f"timerwheel is {w.length} bytes, not {WHEEL_LENGTH} (2 x {SLOTS_TOTAL} slots x {SLOT_SIZE} bytes)",
                f"throws at start-up ('Timer wheel length:{w.length} != expected:{WHEEL_LENGTH}') and does not start")
    states = ts.slot_states()
    for s in w.slots[states == "misplaced"]:
        out.add("slot-misplaced", WARNING, rel, int(s["index"]) * SLOT_SIZE,
                f"slot {int(s['index'])} holds time {int(s['time'])}, which belongs in slot "
                f"{int(s['time']) % (2 * SLOTS_TOTAL)}",
                "never reads this slot for that time: the units of its chain are never fired")


# ==================================================================== the timer log


def _log(ts: TimerStore, out: _Findings) -> None:
    rel_dir = ts.layout.rel(ts.log.dir)
    _log_files(ts, out, rel_dir)
    if not ts.log.segments:
        return
    _log_end(ts, out, rel_dir)
    _log_cursor(ts, out, rel_dir)


def _log_files(ts: TimerStore, out: _Findings, rel_dir: str) -> None:
    """The timer-log files as the broker loads them: lengths, names, gaps, an empty last file."""
    log = ts.log
    segs = log.segments
    if log.size_note:
        out.add("timerlog-file-size", ERROR, rel_dir, None,
                f"{log.size_note.split(';')[0]}; mappedFileSizeTimerLog is {ts.geometry.log_file_size}",
                "refuses to load the timer log (a file length does not match mappedFileSizeTimerLog) and does not "
                "start")
    for p in log.problems:
        name = f"{rel_dir}/{p.path.rsplit('/', 1)[-1]}"
        if p.kind == WRONG_SIZE:
            out.add("timerlog-file-size", ERROR, name, None, p.detail,
                    "refuses to load the timer log (length not matched) and does not start")
        elif p.kind == GAP:
            out.add("timerlog-gap", WARNING, name, None, p.detail,
                    "loads the others; chains that reach the missing positions end there, their older units are "
                    "never fired")
        elif p.kind == MISNAMED:
            out.add("timerlog-misnamed", ERROR, name, None, p.detail,
                    "parses every file name of timerlog/ as an offset: this one throws and the broker does not start")
        elif p.kind in (SYMLINK, NOT_A_FILE, MISALIGNED):
            out.add("timerlog-odd-file", WARNING, name, None, p.detail,
                    "loads it as a timer-log file at the offset its name says")
    if not segs:
        return
    last = segs[-1]
    if last.file_len == 0 and len(segs) > 1:
        out.add("timerlog-empty-last-file", INFO, f"{rel_dir}/{last.path.name}", 0, "the last timer-log file is empty",
                "deletes it at load")


def _log_end(ts: TimerStore, out: _Findings, rel_dir: str) -> None:
    """The timer log's valid end as the broker's start-up finds it: a torn tail, files after it, and refused
    units in the files before where its recovery starts."""
    log = ts.log
    segs = log.segments
    e = ts.end
    end_seg = log.queue.find(e.end) or (segs[-1] if e.end >= segs[-1].start else None)
    if end_seg is not None:
        name = f"{rel_dir}/{end_seg.path.name}"
        in_file = e.end - end_seg.start
        if e.data_end > e.end:
            out.add("timerlog-torn-tail", WARNING, name, in_file,
                    f"{e.data_end - e.end} bytes after the timer log's valid end {e.end} are not units "
                    f"({e.stop_reason})",
                    f"cuts the timer log at {e.end}; the timer messages whose units were after it are enqueued "
                    "again from rmq_sys_wheel_timer/0")
    for seg in segs:
        if seg.start > e.end and (end_seg is None or seg.start > end_seg.start):
            out.add("timerlog-file-after-end", WARNING, f"{rel_dir}/{seg.path.name}", 0,
                    f"timer-log file {seg.path.name} lies after the valid end {e.end}",
                    "deletes it at start-up (truncateDirtyFiles)")
    # Files the broker's recovery does not walk: a refused unit before their blank breaks the chains through it.
    for seg in segs:
        if seg.start >= e.start:
            break
        stop, why = log.file_end(seg)
        if why != "blank" and stop + UNIT_SIZE <= seg.readable_len:
            out.add("timerlog-bad-unit", WARNING, f"{rel_dir}/{seg.path.name}", stop,
                    f"the bytes at position {seg.start + stop} are not a unit ({why}) in a full timer-log file",
                    "does not check files before its recovery start; a chain that reaches these bytes hands "
                    "garbage to the dequeue")


def _log_cursor(ts: TimerStore, out: _Findings, rel_dir: str) -> None:
    """Where the enqueue resumes at start-up (reviseQueueOffset): units it cannot read at the log's end."""
    log = ts.log
    e = ts.end
    cur = ts.enqueue_cursor()
    if not cur.throws and cur.how.startswith("the checkpoint") and e.end > 0:
        good = ts.resumable_cursor()
        if good is not None and good[0] < cur.offset:
            where, off = _log_place(ts, e.end - UNIT_SIZE)
            out.add("timerlog-last-unit-unreadable", ERROR, where, off,
                    f"the record of the timer log's last unit (at {e.end - UNIT_SIZE}) cannot be read; the last "
                    f"readable one (at {good[1]}) is followed by queue offset {good[0]}",
                    f"resumes the enqueue at the checkpoint's queue offset {cur.offset}: the timer messages at "
                    f"rmq_sys_wheel_timer/{TIMER_QUEUE_ID} offsets {good[0]}..{cur.offset - 1} are never put in the "
                    "wheel again")
    if cur.throws:
        at = e.end - 24
        seg = log.queue.find(at)
        out.add("timerlog-end-unreadable", ERROR,
                f"{rel_dir}/{seg.path.name}" if seg is not None else rel_dir,
                at - seg.start if seg is not None else None, cur.throws,
                "throws during start-up (reviseQueueOffset reads a unit there) and does not start")


# ==================================================================== checkpoint and metrics


def _checkpoint(ts: TimerStore, out: _Findings) -> None:
    cpf = ts.checkpoint
    rel = ts.layout.rel(cpf.path)
    cp = cpf.cp
    has_data = bool(ts.log.segments) or len(ts.wheel.slots) > 0
    if not cpf.exists:
        if has_data:
            out.add("timercheck-missing", ERROR, rel, None, "config/timercheck is missing",
                    "starts from zero: re-enqueues rmq_sys_wheel_timer/0 from its first unit and fires every slot "
                    "of the last 7 days again, so timer messages already delivered are delivered again")
        return
    if cpf.length < 0:
        out.add("timercheck-not-a-file", ERROR, rel, None, "config/timercheck is not a regular file",
                "cannot map it and does not start")
        return
    if cpf.length < 56:
        lost = [n for n, at in (("lastReadTimeMs", 0), ("lastTimerLogFlushPos", 8), ("lastTimerQueueOffset", 16),
                                ("masterTimerQueueOffset", 24), ("dataVersion", 32)) if at + 8 > cpf.length]
        severe = cpf.length < 32
        out.add("timercheck-torn", ERROR if severe else WARNING, rel, cpf.length,
                f"config/timercheck is {cpf.length} bytes (torn): {', '.join(lost)} cut short",
                f"reads the missing bytes as zeros (lastReadTimeMs {cp.lastReadTimeMs}, lastTimerLogFlushPos "
                f"{cp.lastTimerLogFlushPos}, lastTimerQueueOffset {cp.lastTimerQueueOffset}, masterTimerQueueOffset "
                f"{cp.masterTimerQueueOffset})" + ("; with those it re-enqueues timer messages already in the wheel "
                                                   "and delivers them again" if severe else ""))
    elif cpf.length != CHECKPOINT_FILE_SIZE:
        out.add("timercheck-length", INFO, rel, 0, f"config/timercheck is {cpf.length} bytes, not 4096",
                "maps its first 4096 bytes (extending a short file with zeros)")
    cq = ts.timer_queue
    if cq is not None:
        qmax = cq.max_offset_in_queue
        for name, at, v in (("lastTimerQueueOffset", 16, cp.lastTimerQueueOffset),
                            ("masterTimerQueueOffset", 24, cp.masterTimerQueueOffset)):
            if v > qmax and cpf.length >= at + 8:
                out.add("timercheck-queue-offset", WARNING, rel, at,
                        f"{name} {v} is past the end of rmq_sys_wheel_timer/{TIMER_QUEUE_ID} ({qmax})",
                        f"clamps its enqueue cursor to {qmax} (the queue was cut after the checkpoint was written)")
    if cpf.length >= 16 and ts.log.segments and cp.lastTimerLogFlushPos > ts.end.end:
        out.add("timercheck-flush-past-end", WARNING, rel, 8,
                f"lastTimerLogFlushPos {cp.lastTimerLogFlushPos} is past the timer log's valid end {ts.end.end}",
                "cuts the timer log at the valid end: units the checkpoint says were flushed are lost (their "
                "messages are enqueued again from the consume queue if it still has them)")


def _metrics(ts: TimerStore, out: _Findings) -> None:
    mf = ts.metrics
    rel = ts.layout.rel(ts.layout.metrics)
    if mf.broker_fails:
        out.add("timermetrics-unloadable", ERROR, rel, None, f"{rel} {mf.main_problem} and its .bak {mf.bak_problem}",
                "fails to load the timer store and does not start")
    elif mf.source is not None and mf.source.endswith(".bak"):
        out.add("timermetrics-damaged", WARNING, rel, None, f"{rel} {mf.main_problem}",
                "deletes it and loads timermetrics.bak (the previous save)")
    elif mf.source is None and mf.main_problem and mf.main_problem != "is missing":
        out.add("timermetrics-damaged", WARNING, rel, None, f"{rel} {mf.main_problem} and its .bak "
                f"{mf.bak_problem}", "deletes it and starts with no timer metrics")


# ==================================================================== chains


def _chains(ts: TimerStore, res: PendingScan, out: _Findings) -> None:
    rel_wheel = ts.layout.rel(ts.layout.wheel)
    for s in res.slots:
        w = s.walk
        slot_at = s.index * SLOT_SIZE
        head = f"live slot {s.index} (time {s.time_ms})"
        if s.disk is not None:
            _slot_on_disk(ts, s, head, out)
        if not w.complete:
            _chain_stop(ts, s, head, out)
        for pos in w.forward:
            where, off = _log_place(ts, pos)
            out.add("chain-forward", WARNING, where, off,
                    f"{head}: the unit at {pos} points forward (prevPos >= its own position)",
                    "follows it: a chain that goes forward can reach units of other slots")
        if w.complete and w.oldest is not None and w.oldest != s.first:
            out.add("slot-first-mismatch", INFO, rel_wheel, slot_at + 8,
                    f"{head}: firstPos is {s.first} but its chain starts at {w.oldest}",
                    "uses firstPos only to tell an empty slot from a used one")
        if w.complete and s.count != s.num:
            out.add("slot-count", INFO, rel_wheel, slot_at + 24,
                    f"{head}: num is {s.num} but its chain counts {s.count}",
                    "uses num for congestion control and metrics only")
        for pos, t in s.wrong_slot:
            where, off = _log_place(ts, pos)
            out.add("unit-wrong-slot", WARNING, where, off, f"{head}: the unit at {pos} was put for time {t}",
                    "fires it with this slot, at the wrong time")


def _slot_on_disk(ts: TimerStore, s: SlotWalk, head: str, out: _Findings) -> None:
    """A live slot the broker's start-up changes (the wheel file disagrees with the timer log's chains)."""
    rel_wheel, end, slot_at = ts.layout.rel(ts.layout.wheel), ts.end.end, s.index * SLOT_SIZE
    d = s.disk
    if d.time != s.time_ms // ts.geometry.precision_ms:
        out.add("slot-rebuilt", WARNING, rel_wheel, slot_at,
                f"{head} holds time {d.time} on disk, but the timer log has units for it up to {end}",
                f"takes the slot over at start-up (first = last = its units before {end}); units of the "
                "slot before its recovery walk are lost")
    else:
        lost = d.last >= end
        out.add("slot-past-log-end" if lost else "slot-behind-log", WARNING if lost else INFO, rel_wheel,
                slot_at, f"{head} ends at timer-log position {d.last} on disk"
                + (f", past the valid end {end}" if lost else f"; the timer log has its units up to {s.last}"),
                f"points it at its last unit before {end} ({s.last}) at start-up"
                + ("; its units after that are gone" if lost else ""))


def _chain_stop(ts: TimerStore, s: SlotWalk, head: str, out: _Findings) -> None:
    """Why a live slot's chain walk stopped before its end, and what the broker's dequeue does there."""
    rel_wheel, end, slot_at, w = ts.layout.rel(ts.layout.wheel), ts.end.end, s.index * SLOT_SIZE, s.walk
    first_step = w.count == 0
    where, off = _log_place(ts, w.at)
    if w.outcome == CYCLE:
        out.add("chain-cycle", ERROR, where, off, f"{head}: {w.why}",
                "walks this slot's chain forever: the timer stops firing")
    elif w.outcome in (PAST_END, BROKEN) and first_step and w.at >= end:
        out.add("slot-past-log-end", ERROR, rel_wheel, slot_at,
                f"{head} points at timer-log positions {s.first}..{s.last}, all past the valid end {end}",
                "keeps the slot as it is: once new units fill those positions, firing it walks into other "
                "slots' units (early and duplicate deliveries)")
    elif w.outcome == DELETED:
        out.add("chain-into-deleted-file", WARNING, where, off, f"{head}: {w.why}",
                "ends the chain there: the older units of the slot are never fired")
    elif w.outcome == PAST_END:
        out.add("chain-past-log-end", ERROR, where, off,
                f"{head}: a unit's prevPos leads to position {w.at}, past the valid end {end}",
                "reads whatever is there when it fires the slot: garbage offsets reach the commit log and "
                "the dequeue can stall")
    else:
        kind = "chain-not-a-unit" if w.outcome == NOT_A_UNIT else "chain-broken"
        out.add(kind, ERROR, where, off, f"{head}: {w.why}",
                "reads the bytes there as a unit when it fires the slot: garbage offsets reach the commit "
                "log and the dequeue can stall")


def _log_place(ts: TimerStore, pos: int) -> tuple[str, int | None]:
    rel_dir = ts.layout.rel(ts.log.dir)
    seg = ts.log.queue.find(pos) if pos >= 0 else None
    if seg is None:
        return rel_dir, None
    return f"{rel_dir}/{seg.path.name}", pos - seg.start


# ==================================================================== records


def _records(ts: TimerStore, res: PendingScan, out: _Findings) -> None:
    skip = ts.geometry.skip_unknown_error
    for u in res.unresolved:
        if u.timer_log_position is not None:
            where, off = _log_place(ts, u.timer_log_position)
            what = f"the unit at timer-log position {u.timer_log_position} (slot time {u.slot_time_ms})"
            later = "when its slot fires"
        else:
            where, off = _cq_place(ts, u.queue_offset)
            what = f"rmq_sys_wheel_timer/{TIMER_QUEUE_ID} queue offset {u.queue_offset} (not yet enqueued)"
            later = "when it enqueues it"
        if u.kind == TOMBSTONE:
            out.add("unit-tombstone", INFO, where, off, f"{what}: {u.why}", f"drops it {later}")
        elif u.kind == STAND_IN:
            out.add("unit-stand-in", INFO, where, off, f"{what}: {u.why}",
                    f"passes over it {later}: the message it stood for was lost (recover said so)")
        elif u.kind == EXPIRED:
            out.add("record-expired", WARNING, where, off, f"{what}: {u.why}",
                    f"finds no record {later} and drops it: the message is lost")
        elif u.kind == PAST_LOG:
            out.add("unit-past-commit-log", ERROR, where, off, f"{what}: {u.why}",
                    f"fails to read it {later} and drops it; once new messages fill that commit-log offset it reads "
                    f"an unrelated record instead, and {_STALLS} (RocketMQ #10668)")
        elif u.kind in (NOT_A_RECORD, SIZE_MISMATCH):
            out.add("unit-not-a-record" if u.kind == NOT_A_RECORD else "unit-size-mismatch", ERROR, where, off,
                    f"{what}: {u.why}",
                    f"decodes whatever bytes are there {later}: a record it cannot decode is dropped, one it can "
                    f"is not this message, and {_STALLS}")
        elif u.kind == NOT_TIMER:
            if u.queue_offset is not None:
                will = ("fails to parse its TIMER_OUT_MS when it enqueues it and retries that unit forever: new "
                        "timer messages are never enqueued")
            else:
                will = ("skips it (timerSkipUnknownError=true)" if skip else _STALLS)
            out.add("unit-not-timer-message", WARNING if skip else ERROR, where, off, f"{what}: {u.why}", will)
        elif u.kind == MAGIC_MISMATCH:
            out.add("unit-magic-mismatch", WARNING, where, off, f"{what}: {u.why}", "never delivers it")
    for off_py in res.crc_damaged:
        out.add("record-body-crc", WARNING, "commitlog", off_py,
                f"the timer message at commit-log offset {off_py} fails its body CRC",
                "does not check it: the damaged body is delivered as it is")


def _cq_place(ts: TimerStore, queue_offset: int | None) -> tuple[str, int | None]:
    base = f"consumequeue/{TIMER_TOPIC}/{TIMER_QUEUE_ID}"
    cq = ts.timer_queue
    if cq is None or queue_offset is None:
        return base, None
    seg = cq.queue.find(queue_offset * 20)
    if seg is None:
        return base, None
    return f"{base}/{seg.path.name}", queue_offset * 20 - seg.start


# ==================================================================== time and metrics


def _read_time(ts: TimerStore, res: PendingScan, now: int, out: _Findings) -> None:
    """recover() moves the read time up to now - 7 days + 60 slots: live slots before that are skipped."""
    if not ts.checkpoint.exists:
        return
    p = ts.geometry.precision_ms
    skip_to = now // p * p - SLOTS_TOTAL * p + TIMER_BLANK_SLOTS * p
    if ts.read_time_ms >= skip_to:
        return
    lost = [s for s in res.slots if s.time_ms < skip_to]
    units = sum(s.walk.count for s in lost)
    rel = ts.layout.rel(ts.checkpoint.path)
    if units:
        out.add("read-time-too-old", ERROR, rel, 0,
                f"lastReadTimeMs {ts.read_time_ms} is more than 7 days before {now}: {len(lost)} live slot(s) with "
                f"{units} unit(s) lie before {skip_to}",
                f"starts reading the wheel at {skip_to}: those timer messages are never delivered")
    else:
        out.add("read-time-too-old", INFO, rel, 0,
                f"lastReadTimeMs {ts.read_time_ms} is more than 7 days before {now}",
                f"starts reading the wheel at {skip_to} (no pending unit lies before it)")


def _metrics_counts(ts: TimerStore, res: PendingScan, out: _Findings) -> None:
    m = ts.metrics.metrics
    if m is None or not res.slots:
        return
    want = res.topic_counts()
    rel = ts.layout.rel(ts.layout.metrics)
    for topic, (count, _) in sorted(m.counts.items()):
        if topic in want and count != want[topic]:
            out.add("metrics-count", INFO, rel, None,
                    f"timermetrics counts {count} timer message(s) of {topic}, {want[topic]} are pending",
                    "keeps the running count (it drifts with recalls and rolls; checkAndReviseMetrics recounts "
                    "small topics daily)")

