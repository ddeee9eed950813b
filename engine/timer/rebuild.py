"""The timer store rebuilt from its timer log (`rmqtool repair timer`, timer §11): what a broker whose enqueue had
appended these units would hold.

* Timer-log files named like no position are moved out; files of the wrong length are padded with zeros or cut
  to mappedFileSizeTimerLog (the broker refuses both, timer §7), so the units they hold are kept.
* The log is walked as the broker's start-up walks it (timer §7 step 3), from the first file: every unit it
  accepts, a blank moving to the next file, the first refused unit ending the walk.
* Every unit's prevPos is set to the previous unit put for the same slot time (-1 for the first), as doEnqueue
  links it (timer §3): chains with cycles, pointers into garbage or forward become the chains the enqueue made.
  Positions do not move, so nothing that points into the log changes meaning.
* The wheel is written anew from those chains (first, last, num: +1 per unit, -1 per delete marker), full length
  and sparse.
* config/timercheck, when missing or torn, is written with lastTimerLogFlushPos = the walk's end, the queue
  offsets = the queue offset after the last unit's record (the broker's own reviseQueueOffset, timer §7 step 4),
  and lastReadTimeMs = the last unit's write time minus REREAD_MS (the dequeue lags the enqueue by a little; slots
  after it fire again: at-least-once rather than lost); the fields a torn file still holds are kept.
* config/timermetrics and its .bak, when the broker cannot load them, are removed: the broker starts with empty
  metrics (timer §5).

Planning reads only; apply_timer_rebuild changes the files, keeping everything it replaces in the quarantine
first. Memory: one timer-log file at a time plus the changed prevPos fields (12 bytes each) and one entry per slot
time.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.layout import SEGMENT_NAME, is_regular_file
from engine.fsutil import fsync_dir, write_fully
from engine.timer.codec import (BLANK_MAGIC_CODE, CHECKPOINT_FILE_SIZE, UNIT_DTYPE, UNIT_SIZE, MAGIC_DELETE, Slot,
                                TimerCheckpoint)
from engine.timer.files import read_checkpoint, read_metrics
from engine.timer.layout import WHEEL_SLOTS, TimerGeometry, TimerLayout
from engine.timer.write import write_checkpoint, write_wheel

#: lastReadTimeMs of a rebuilt checkpoint: this long before the last unit's write time.
REREAD_MS = 60_000
#: The byte offset of prevPos inside a unit (timer §3).
PREV_AT = 4


@dataclass
class FileFix:
    name: str
    action: str            # "pad", "cut" or "move"
    length: int
    size: int

    def describe(self) -> str:
        if self.action == "move":
            return f"move timerlog/{self.name} out of the timer log ({self.length} bytes: not a timer-log file)"
        return f"{self.action} timerlog/{self.name} from {self.length} to {self.size} bytes"


@dataclass
class TimerRebuild:
    store: str
    file_fixes: list[FileFix] = field(default_factory=list)
    relinks: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # file -> (in-file pos, prev)
    units: int = 0
    end: int = 0
    stop_reason: str = ""
    slots: dict[int, Slot] = field(default_factory=dict)
    wheel_changed: bool = False
    wheel_why: str = ""
    checkpoint: TimerCheckpoint | None = None
    checkpoint_why: str = ""
    remove_metrics: list[str] = field(default_factory=list)
    metrics_why: str = ""

    @property
    def relinked(self) -> int:
        return sum(len(p) for p, _ in self.relinks.values())

    @property
    def nothing_to_do(self) -> bool:
        return not (self.file_fixes or self.relinks or self.wheel_changed or self.checkpoint is not None
                    or self.remove_metrics)

    def actions(self) -> list[str]:
        out = [f.describe() for f in self.file_fixes]
        for name, (pos, _) in sorted(self.relinks.items()):
            out.append(f"relink {len(pos)} unit(s) of timerlog/{name} (prevPos as the enqueue links it)")
        if self.wheel_changed:
            out.append(f"write timerwheel anew: {len(self.slots)} slot(s) from {self.units} unit(s) "
                       f"({self.wheel_why})")
        if self.checkpoint is not None:
            c = self.checkpoint
            out.append(f"write config/timercheck ({self.checkpoint_why}): lastReadTimeMs {c.lastReadTimeMs}, "
                       f"lastTimerLogFlushPos {c.lastTimerLogFlushPos}, lastTimerQueueOffset "
                       f"{c.lastTimerQueueOffset}")
        for m in self.remove_metrics:
            out.append(f"remove {m} ({self.metrics_why}): the broker starts with empty timer metrics")
        return out

    def as_dict(self) -> dict:
        return {"store": self.store, "unitsWalked": self.units, "timerLogEnd": self.end,
                "walkStopped": self.stop_reason, "unitsRelinked": self.relinked, "slots": len(self.slots),
                "fileFixes": [f.__dict__ for f in self.file_fixes], "wheelRewritten": self.wheel_changed,
                "checkpoint": self.checkpoint.as_dict() if self.checkpoint is not None else None,
                "metricsRemoved": self.remove_metrics, "actions": self.actions()}


def plan_timer_rebuild(cfg: BrokerConfig) -> TimerRebuild:
    layout, geo = TimerLayout.of(cfg), TimerGeometry.of(cfg)
    rep = TimerRebuild(str(cfg.root))
    files = _plan_files(layout, geo.log_file_size, rep)
    chains = _Chains()
    rep.stop_reason = "no timer-log files" if not files else "end of the last file"
    for start, path in files:
        if not _walk_file(start, path, geo.log_file_size, rep, chains):
            break
    _plan_wheel(layout, geo, rep, chains.first, chains.last, chains.num)
    _plan_checkpoint(cfg, layout, rep, chains.last_unit)
    _plan_metrics(layout, rep)
    return rep


def _plan_files(layout: TimerLayout, size: int, rep: TimerRebuild) -> list[tuple[int, Path]]:
    """The timer-log files to walk, by start position; misnamed ones to move and wrong lengths to fix go to
    rep.file_fixes (an empty last file is the broker's own, left alone)."""
    files: list[tuple[int, Path]] = []
    if not layout.log_dir.is_dir():
        return files
    for e in sorted(os.scandir(layout.log_dir), key=lambda e: e.name):
        p = Path(e.path)
        if not SEGMENT_NAME.match(e.name) or not is_regular_file(p) or int(e.name) % size:
            rep.file_fixes.append(FileFix(e.name, "move", os.lstat(p).st_size, size))
            continue
        n = os.path.getsize(p)
        if n != size and not (n == 0 and e.name == max(x.name for x in os.scandir(layout.log_dir))):
            rep.file_fixes.append(FileFix(e.name, "pad" if n < size else "cut", n, size))
        files.append((int(e.name), p))
    return files


@dataclass
class _Chains:
    """The chains linked so far, per slot time: the first and last unit's position and num (+1 per unit, -1 per
    delete marker); and the last unit walked (position, write time, offsetPy, sizePy)."""
    first: dict[int, int] = field(default_factory=dict)
    last: dict[int, int] = field(default_factory=dict)
    num: dict[int, int] = field(default_factory=dict)
    last_unit: tuple[int, int, int, int] | None = None


def _walk_file(start: int, path: Path, size: int, rep: TimerRebuild, chains: _Chains) -> bool:
    """One timer-log file walked as the broker's start-up walks it (timer §7 step 3), its units linked into
    `chains`; False when the walk ends in it (no blank rolls it to the next file)."""
    data = _read_file(path, size)
    units = np.frombuffer(data, dtype=UNIT_DTYPE, count=len(data) // UNIT_SIZE)
    bad = np.flatnonzero((units["size"] != UNIT_SIZE) | ((units["magic"] | 0xF) != 0xF)
                         | (units["magic"] == BLANK_MAGIC_CODE))
    stop = int(bad[0]) if len(bad) else len(units)
    blank = len(bad) and int(units["magic"][stop]) == BLANK_MAGIC_CODE
    # A blank can also sit where no whole unit fits (the last < 52 bytes of the file).
    tail = len(data) - len(units) * UNIT_SIZE
    if not len(bad) and tail >= 16 and int.from_bytes(data[len(units) * UNIT_SIZE + 12:
                                                            len(units) * UNIT_SIZE + 16], "big",
                                                       signed=True) == BLANK_MAGIC_CODE:
        blank = True
    if stop:
        _link(start, path.name, units[:stop], rep, chains)
    rep.units += stop
    rep.end = start + stop * UNIT_SIZE
    if not blank:
        rep.stop_reason = ("end of file" if stop == len(units) else
                           f"the bytes at {rep.end} are not a unit")
        return False
    rep.end = start + size
    return True


def _link(start: int, name: str, u: np.ndarray, rep: TimerRebuild, chains: _Chains) -> None:
    """Each unit's prevPos set to the previous unit of its slot time, as doEnqueue links it (timer §3); the
    units whose prevPos changes go to rep.relinks."""
    stop = len(u)
    last, first, num = chains.last, chains.first, chains.num
    pos = start + np.arange(stop, dtype=np.int64) * UNIT_SIZE
    times = u["write_ms"].astype(np.int64) + u["delay"].astype(np.int64)
    new_prev = np.full(stop, -1, dtype=np.int64)
    order = np.lexsort((pos, times))
    ts, ps = times[order], pos[order]
    same = np.empty(stop, dtype=bool)
    same[0] = False
    same[1:] = ts[1:] == ts[:-1]
    new_prev[order[same]] = ps[np.flatnonzero(same) - 1]
    heads = order[~same]
    for i in heads:
        t = int(times[i])
        new_prev[i] = last.get(t, -1)
        if t not in first:
            first[t] = int(pos[i])
    tails = np.append(np.flatnonzero(~same[1:]), stop - 1)  # the last of each time, in sorted order
    for j in tails:
        last[int(ts[j])] = int(ps[j])
    delete = (u["magic"] & MAGIC_DELETE) != 0
    t_norm, c_norm = np.unique(times[~delete], return_counts=True)
    t_del, c_del = np.unique(times[delete], return_counts=True)
    for t, c in zip(t_norm.tolist(), c_norm.tolist()):
        num[t] = num.get(t, 0) + c
    for t, c in zip(t_del.tolist(), c_del.tolist()):
        num[t] = num.get(t, 0) - c
    chains.last_unit = (int(pos[-1]), int(u["write_ms"][-1]), int(u["offset_py"][-1]), int(u["size_py"][-1]))
    changed = np.flatnonzero(new_prev != u["prev"].astype(np.int64))
    if len(changed):
        rep.relinks[name] = ((changed * UNIT_SIZE + PREV_AT).astype(np.int64), new_prev[changed])


def _plan_metrics(layout: TimerLayout, rep: TimerRebuild) -> None:
    """timermetrics and its .bak removed when the broker cannot load them (it then starts with empty metrics)."""
    mf = read_metrics(layout.metrics, layout.rel(layout.metrics))
    if mf.broker_fails:
        rep.metrics_why = f"it {mf.main_problem} and its .bak {mf.bak_problem}"
        rep.remove_metrics = [layout.rel(p) for p in (layout.metrics, layout.metrics.with_name(layout.metrics.name
                                                                                               + ".bak"))
                              if os.path.lexists(p)]


def _read_file(path: Path, size: int) -> bytes:
    with open(path, "rb") as f:
        data = f.read(size)
    return data.ljust(size, b"\0")


def _plan_wheel(layout: TimerLayout, geo: TimerGeometry, rep: TimerRebuild, first: dict, last: dict,
                num: dict) -> None:
    p = geo.precision_ms
    for t in sorted(last):
        idx = (t // p) % WHEEL_SLOTS
        rep.slots[idx] = Slot(t // p, first[t], last[t], num.get(t, 0), 0)  # later times win a shared index
    from engine.timer.files import read_wheel

    w = read_wheel(layout.wheel)
    if not w.exists or not w.length_ok:
        rep.wheel_changed, rep.wheel_why = True, "missing" if not w.exists else f"{w.length} bytes long"
        return
    on_disk = {int(s["index"]): (int(s["time"]), int(s["first"]), int(s["last"]), int(s["num"])) for s in w.slots}
    want = {i: (s.time, s.first, s.last, s.num) for i, s in rep.slots.items()}
    if rep.relinks or any(on_disk.get(i) != v for i, v in want.items()):
        rep.wheel_changed, rep.wheel_why = True, "its slots disagree with the timer log's chains"


def _plan_checkpoint(cfg: BrokerConfig, layout: TimerLayout, rep: TimerRebuild, last_unit) -> None:
    cpf = read_checkpoint(layout.checkpoint)
    if cpf.exists and cpf.length >= 32:
        return
    keep = cpf.cp if cpf.exists else TimerCheckpoint()
    have = max(cpf.length, 0) if cpf.exists else 0
    geo = TimerGeometry.of(cfg)
    queue_next = 0
    read_ms = 0
    if last_unit is not None:
        _, write_ms, offset_py, size_py = last_unit
        read_ms = geo.format_time(write_ms - REREAD_MS)
        queue_next = _queue_offset_after(cfg, offset_py, size_py)
    cp = TimerCheckpoint(
        keep.lastReadTimeMs if have >= 8 else read_ms,
        keep.lastTimerLogFlushPos if have >= 16 else rep.end,
        keep.lastTimerQueueOffset if have >= 24 else queue_next,
        keep.masterTimerQueueOffset if have >= 32 else queue_next,
        keep.stateVersion, keep.timestamp, keep.counter)
    rep.checkpoint = cp
    rep.checkpoint_why = "missing" if not cpf.exists else f"torn: {cpf.length} of {CHECKPOINT_FILE_SIZE} bytes"


def _queue_offset_after(cfg: BrokerConfig, offset_py: int, size_py: int) -> int:
    """The queue offset after the last unit's record in rmq_sys_wheel_timer/0 (0 when it cannot be read)."""
    from engine.timer.store import TimerStore

    with TimerStore(cfg, require=False) as ts:
        r = ts.resolve(offset_py, size_py)
        if r.record is not None:
            return r.record.queue_offset + 1
        cq = ts.timer_queue
        return cq.max_offset_in_queue if cq is not None else 0


def apply_timer_rebuild(cfg: BrokerConfig, rep: TimerRebuild, quarantine) -> None:
    """Carry the plan out (the caller holds the store lock); `quarantine` keeps what is replaced
    (engine.ops.footprint.quarantine.Quarantine)."""
    layout = TimerLayout.of(cfg)
    log_dir = layout.log_dir
    for f in rep.file_fixes:
        path = log_dir / f.name
        if f.action == "move":
            quarantine.keep_file(path, "not a timer-log file (its name or kind)", "nothing")
            continue
        quarantine.keep_range(path, 0, f.length, f"timer-log file of {f.length} bytes, not {f.size}",
                              f"the file {'padded with zeros' if f.action == 'pad' else 'cut'} to {f.size} bytes")
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
        try:
            # Padded to the broker's length as a hole, as the broker's own file is past what it wrote: nothing
            # is written there, and the units already there stay allocated (a store costs what it holds).
            os.ftruncate(fd, f.size)
            os.fsync(fd)
        finally:
            os.close(fd)
    for name, (at, prev) in sorted(rep.relinks.items()):
        path = log_dir / name
        quarantine.keep_range(path, 0, os.path.getsize(path), "timer-log units relinked",
                              "the same file with prevPos fields relinked")
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
        try:
            for a, v in zip(at.tolist(), prev.tolist()):
                write_fully(fd, int(v).to_bytes(8, "big", signed=True), a, path, undo=False)
            os.fsync(fd)
        finally:
            os.close(fd)
    if rep.wheel_changed:
        if os.path.lexists(layout.wheel):
            quarantine.keep_file(layout.wheel, "timerwheel rewritten from the timer log", "the rebuilt wheel")
        write_wheel(layout.wheel, rep.slots)
        fsync_dir(layout.root)
    if rep.checkpoint is not None:
        if os.path.lexists(layout.checkpoint):
            quarantine.keep_file(layout.checkpoint, f"timercheck {rep.checkpoint_why}", "the rebuilt checkpoint")
        write_checkpoint(layout.checkpoint, rep.checkpoint)
        fsync_dir(layout.checkpoint.parent)
    for rel in rep.remove_metrics:
        quarantine.keep_file(layout.root / rel, f"timermetrics {rep.metrics_why}", "nothing (empty metrics)")
    if rep.remove_metrics:
        fsync_dir(layout.metrics.parent)
    if log_dir.is_dir():
        fsync_dir(log_dir)

