"""What the timer store holds, file by file (`rmqtool timer inspect`, timer §2-§5): the wheel's slots, the timer
log's files and units, the checkpoint, the metrics, and where the broker's start-up would resume.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from engine.broker.config.brokerconf import BrokerConfig
from engine.timer.codec import magic_name
from engine.timer.layout import SLOT_SIZE, WHEEL_LENGTH, WHEEL_SLOTS
from engine.timer.store import TimerStore


@dataclass
class LogFileFacts:
    """One timer-log file: its units by magic up to where a walk of it stops."""
    name: str
    start: int
    length: int
    units: int = 0
    by_magic: dict = field(default_factory=dict)   # magic -> count
    blank_at: int | None = None                    # in-file position of the blank (a full file)
    blank_size: int | None = None
    stop_at: int = 0                               # in-file position where the walk stopped
    stop_reason: str = ""
    data_end: int = 0                              # just past the last non-zero byte

    def as_dict(self) -> dict:
        return {"file": self.name, "start": self.start, "length": self.length, "units": self.units,
                "unitsByMagic": {magic_name(m): n for m, n in sorted(self.by_magic.items())},
                "rolls": sum(n for m, n in self.by_magic.items() if m & 2),
                "deletes": sum(n for m, n in self.by_magic.items() if m & 4),
                "blankAt": self.blank_at, "blankSize": self.blank_size, "walkStopsAt": self.stop_at,
                "walkStopReason": self.stop_reason, "dataEnd": self.data_end}


def log_file_facts(ts: TimerStore) -> list[LogFileFacts]:
    out = []
    for seg in ts.log.segments:
        f = LogFileFacts(seg.path.name, seg.start, seg.file_len)
        stop, why = ts.log.file_end(seg)
        f.stop_at, f.stop_reason = stop, why
        counts: Counter = Counter()
        for first, units in ts.log.chunks(seg, upto=stop):
            vals, n = np.unique(units["magic"].astype(np.int64), return_counts=True)
            counts.update({int(v): int(c) for v, c in zip(vals, n)})
        f.by_magic = dict(counts)
        f.units = sum(counts.values())
        if why == "blank":
            f.blank_at = stop
            buf = ts.log.queue.buffer(seg)
            f.blank_size = int.from_bytes(buf[stop:stop + 4], "big", signed=True) if stop + 4 <= len(buf) else None
        f.data_end = ts.log.last_nonzero(seg, stop)
        out.append(f)
    return out


@dataclass
class TimerInspection:
    store: str
    geometry: dict
    wheel: dict
    live_slots: list[dict]
    log: dict
    files: list[LogFileFacts]
    checkpoint: dict
    metrics: dict
    enqueue: dict

    def as_dict(self) -> dict:
        return {"store": self.store, "geometry": self.geometry, "wheel": dict(self.wheel, liveSlots=self.live_slots),
                "timerLog": dict(self.log, files=[f.as_dict() for f in self.files]),
                "checkpoint": self.checkpoint, "metrics": self.metrics, "enqueue": self.enqueue}


def inspect_timer(cfg: BrokerConfig) -> TimerInspection:
    """The `rmqtool timer inspect` answer. Reads only; walks every live slot's chain."""
    from engine.timer.chain import walk_chain

    with TimerStore(cfg) as ts:
        g = ts.geometry
        states = ts.slot_states()
        w = ts.wheel
        live_rows = []
        for s in ts.live_slots():
            by: Counter = Counter()
            walk = walk_chain(ts.log, int(s["last"]), ts.end.end, visit=lambda u, by=by: by.update((u.magic,)))
            live_rows.append({"index": int(s["index"]), "timeMs": int(s["time"]) * g.precision_ms,
                              "firstPos": int(s["first"]), "lastPos": int(s["last"]), "num": int(s["num"]),
                              "units": walk.count,
                              "unitsByMagic": {magic_name(m): n for m, n in sorted(by.items())},
                              "chain": walk.outcome if not walk.complete else "complete"})
        wheel = {"file": ts.layout.rel(w.path), "exists": w.exists, "length": w.length,
                 "expectedLength": WHEEL_LENGTH, "lengthOk": w.length_ok, "slots": WHEEL_SLOTS,
                 "slotSize": SLOT_SIZE, "nonZeroSlots": int(len(w.slots)),
                 "live": int(np.count_nonzero(states == "live")), "stale": int(np.count_nonzero(states == "stale")),
                 "misplaced": int(np.count_nonzero(states == "misplaced")),
                 "liveNum": int(w.slots["num"][states == "live"].sum()) if len(w.slots) else 0,
                 "readTimeMs": ts.read_time_ms}
        files = log_file_facts(ts)
        totals: Counter = Counter()
        for f in files:
            totals.update(f.by_magic)
        log = {"dir": ts.layout.rel(ts.log.dir), "fileSize": g.log_file_size, "files": len(files),
               "units": sum(totals.values()),
               "unitsByMagic": {magic_name(m): n for m, n in sorted(totals.items())},
               "rolls": sum(n for m, n in totals.items() if m & 2),
               "deletes": sum(n for m, n in totals.items() if m & 4),
               "blanks": sum(1 for f in files if f.blank_at is not None),
               "validEnd": ts.end.end, "recoveryWalkStart": ts.end.start, "validEndReason": ts.end.stop_reason,
               "dataEnd": ts.end.data_end, "fileProblems": [str(p) for p in ts.log.problems]
               + ([ts.log.size_note] if ts.log.size_note else [])}
        cpf = ts.checkpoint
        checkpoint = dict(cpf.cp.as_dict(), file=ts.layout.rel(cpf.path), exists=cpf.exists, length=cpf.length,
                          problem=cpf.problem)
        mf = ts.metrics
        metrics = {"source": mf.source, "notes": mf.notes,
                   **(mf.metrics.as_dict() if mf.metrics is not None else {"timingCount": {}, "dataVersion": {}})}
        cur = ts.enqueue_cursor()
        enqueue = {"queue": "rmq_sys_wheel_timer/0", "queueMinOffset": cur.queue_min,
                   "queueMaxOffset": cur.queue_max, "cursor": cur.offset, "cursorFrom": cur.how,
                   "toEnqueue": max(0, cur.queue_max - cur.offset), "startupThrows": cur.throws or None}
        geometry = {"timerPrecisionMs": g.precision_ms, "mappedFileSizeTimerLog": g.log_file_size,
                    "timerRollWindowSlot": g.roll_window_slots, "timerMaxDelaySec": g.max_delay_sec,
                    "timerWheelEnable": g.wheel_enabled, "offsetForLastUnit": g.offset_for_last_unit}
        return TimerInspection(str(cfg.root), geometry, wheel, live_rows, log, files, checkpoint, metrics, enqueue)
