"""The timer store's files read as they are on disk, read-only (timer §2, §3, §4, §5).

WheelFile: the slots, found a chunk at a time over the file's allocated extents only (the 38 MB wheel is sparse: a
wheel of 56 used slots costs a few page reads). TimerLogFiles: the timer-log segment files (SegmentQueue, as the
broker's MappedFileQueue), units by position, units a chunk at a time, and the valid end the broker's start-up
recovery finds. read_checkpoint / read_metrics: the two config files, with what the broker would make of damage.
Nothing here raises on bad bytes: what is wrong is returned for the caller to report.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from engine.broker.layout import is_regular_file
from engine.broker.commitlog.segments import Segment, SegmentQueue
from engine.errors import GeometryError
from engine.fsutil import data_extents
from engine.java import fastjson
from engine.timer.codec import (BLANK_MAGIC_CODE, CHECKPOINT, CHECKPOINT_FILE_SIZE, SLOT_DTYPE, UNIT_DTYPE, UNIT_SIZE,
                                MetricsShapeError, Slot, TimerCheckpoint, TimerMetrics, TimerUnit, magic_ok)
from engine.timer.layout import SLOT_SIZE, WHEEL_LENGTH, WHEEL_SLOTS, TimerGeometry, TimerLayout

#: Wheel slots read at once (1 MiB of the file).
WHEEL_CHUNK_SLOTS = 32768
#: Timer-log units classified at once (about 13 MiB of a file).
LOG_CHUNK_UNITS = 262144
#: timermetrics larger than this is not parsed (its text is held whole; the broker's is a few KiB).
MAX_METRICS_BYTES = 64 * 1024 * 1024

SLOT_ROW = np.dtype([("index", "<i8"), ("time", "<i8"), ("first", "<i8"), ("last", "<i8"), ("num", "<i4"),
                     ("magic", "<i4")])


# ============================================================================ the wheel


@dataclass
class WheelFile:
    """timerwheel: its length and its non-zero slots (timer §2)."""
    path: Path
    exists: bool
    length: int
    slots: np.ndarray            # SLOT_ROW: every slot with a non-zero byte, by index

    @property
    def length_ok(self) -> bool:
        return self.length == WHEEL_LENGTH

    def slot(self, index: int) -> Slot | None:
        i = int(np.searchsorted(self.slots["index"], index))
        if i < len(self.slots) and int(self.slots["index"][i]) == index:
            r = self.slots[i]
            return Slot(int(r["time"]), int(r["first"]), int(r["last"]), int(r["num"]), int(r["magic"]))
        return None


def read_wheel(path: Path) -> WheelFile:
    """The wheel's non-zero slots; a missing file has none. A file of the wrong length is read as far as whole slots
    go and at most WHEEL_SLOTS of them (the broker refuses it, timer §2)."""
    if not os.path.lexists(path):
        return WheelFile(path, False, 0, np.empty(0, SLOT_ROW))
    if not is_regular_file(path):
        return WheelFile(path, True, -1, np.empty(0, SLOT_ROW))
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        length = os.fstat(fd).st_size
        n_slots = min(length // SLOT_SIZE, WHEEL_SLOTS)
        end = n_slots * SLOT_SIZE
        extents = data_extents(fd, end)
        if extents is None:
            extents = [(0, end)]
        parts = []
        for a, b in extents:
            a -= a % SLOT_SIZE
            b = min(end, -(-b // SLOT_SIZE) * SLOT_SIZE)
            pos = a
            while pos < b:
                n = min(WHEEL_CHUNK_SLOTS * SLOT_SIZE, b - pos)
                raw = os.pread(fd, n, pos)
                n = len(raw) - len(raw) % SLOT_SIZE
                if n <= 0:
                    break
                chunk = np.frombuffer(raw[:n], dtype=SLOT_DTYPE)
                words = np.frombuffer(raw[:n], dtype=np.uint64).reshape(-1, SLOT_SIZE // 8)
                hit = np.flatnonzero(words.any(axis=1))
                if len(hit):
                    rows = np.empty(len(hit), SLOT_ROW)
                    rows["index"] = pos // SLOT_SIZE + hit
                    for name in ("time", "first", "last", "num", "magic"):
                        rows[name] = chunk[name][hit]
                    parts.append(rows)
                pos += n
    finally:
        os.close(fd)
    slots = np.concatenate(parts) if parts else np.empty(0, SLOT_ROW)
    if len(slots) > 1:
        slots = slots[np.argsort(slots["index"], kind="stable")]
        keep = np.ones(len(slots), bool)
        keep[1:] = slots["index"][1:] != slots["index"][:-1]
        slots = slots[keep]
    return WheelFile(path, True, length, slots)


# ============================================================================ the timer log


@dataclass
class LogEnd:
    """Where the broker's start-up recovery ends the timer log (timer §7): `end` is its processOffset."""
    end: int
    start: int               # where its walk began (the start of a file)
    stop_reason: str         # "blank" / "end of files" / why the unit at `end` was refused
    data_end: int            # just past the last non-zero byte of the file holding `end` (or `end`)


class TimerLogFiles:
    """timerlog/: fixed-size files named by their start position, read-only (timer §3)."""

    def __init__(self, layout: TimerLayout, geometry: TimerGeometry):
        self.dir = layout.log_dir
        self.file_size = geometry.log_file_size
        self.size_note = ""
        try:
            self.queue = SegmentQueue(self.dir, self.file_size, what="timerlog")
        except GeometryError as e:
            # Every file has another size than mappedFileSizeTimerLog: read them at their own size, and say so.
            self.size_note = str(e)
            self.queue = SegmentQueue(self.dir, None, what="timerlog", default_size=self.file_size)
        self.read_size = self.queue.file_size or self.file_size

    def close(self) -> None:
        self.queue.close()

    @property
    def segments(self) -> list[Segment]:
        return self.queue.segments

    @property
    def problems(self):
        return self.queue.problems

    @property
    def min_pos(self) -> int:
        return self.queue.min_offset

    @property
    def max_pos(self) -> int:
        return self.segments[-1].end if self.segments else 0

    def where(self, pos: int) -> tuple[Segment | None, str]:
        """The file that holds a unit at `pos`, or why none does."""
        if pos < 0:
            return None, f"position {pos} is negative"
        seg = self.queue.find(pos)
        if seg is None:
            if self.segments and pos < self.min_pos:
                return None, f"position {pos} is before the first timer-log file ({self.min_pos}: deleted)"
            if self.segments and pos < self.max_pos:
                return None, f"position {pos} lies in a missing timer-log file"
            return None, f"position {pos} is past the last timer-log file (which ends at {self.max_pos})"
        p = pos - seg.start
        if p % UNIT_SIZE:
            return None, f"position {pos} is not a unit boundary of file {seg.path.name} ({p} is not a multiple of 52)"
        if p + UNIT_SIZE > seg.readable_len:
            return None, f"position {pos} leaves no room for a unit in file {seg.path.name}"
        return seg, ""

    def unit_at(self, pos: int) -> tuple[TimerUnit | None, str]:
        """The 52 bytes at `pos` as a unit (whatever they hold), or why they cannot be read."""
        seg, why = self.where(pos)
        if seg is None:
            return None, why
        buf = self.queue.buffer(seg)
        return TimerUnit.decode(buf, pos - seg.start, pos), ""

    def file_units(self, seg: Segment, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Units lo..hi-1 of one file (by index: unit i starts at i x 52), a view of the mapping."""
        buf = self.queue.buffer(seg)
        n = len(buf) // UNIT_SIZE
        hi = n if hi is None else min(hi, n)
        if hi <= lo:
            return np.empty(0, UNIT_DTYPE)
        return np.frombuffer(buf, dtype=UNIT_DTYPE, count=hi - lo, offset=lo * UNIT_SIZE)

    def chunks(self, seg: Segment, upto: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """(global position of the first, units) a chunk at a time, up to in-file position `upto`."""
        n = len(self.queue.buffer(seg)) // UNIT_SIZE
        if upto is not None:
            n = min(n, max(0, upto) // UNIT_SIZE)
        for lo in range(0, n, LOG_CHUNK_UNITS):
            yield seg.start + lo * UNIT_SIZE, self.file_units(seg, lo, min(n, lo + LOG_CHUNK_UNITS))

    def file_end(self, seg: Segment) -> tuple[int, str]:
        """(in-file position, why) where a walk of one file from 0 stops: the blank, the first unit the broker's
        recovery refuses, or the end of the file (timer §7)."""
        buf = self.queue.buffer(seg)
        size = seg.size
        for first, units in self.chunks(seg):
            bad = np.flatnonzero((units["magic"] == BLANK_MAGIC_CODE) | (units["size"] != UNIT_SIZE)
                                 | ((units["magic"] | 0xF) != 0xF))
            if len(bad):
                i = int(bad[0])
                u = units[i]
                p = first - seg.start + i * UNIT_SIZE
                if int(u["magic"]) == BLANK_MAGIC_CODE:
                    return p, "blank"
                return p, _refusal(int(u["size"]), int(u["magic"]))
        p = (len(buf) // UNIT_SIZE) * UNIT_SIZE
        if p < size:
            # The tail too short for a unit: the broker reads the size and magic if 16 bytes remain, else fails.
            if len(buf) - p >= 16:
                tail = TimerUnit.decode(bytes(buf[p:p + 16]).ljust(UNIT_SIZE, b"\0"), 0, p)
                if tail.magic == BLANK_MAGIC_CODE:
                    return p, "blank"
            return p, "the file ends inside a unit" if len(buf) < size else "end of file"
        return p, "end of file"

    def valid_end(self, flush_pos: int) -> LogEnd:
        """TimerMessageStore.recover's walk: from the file that holds lastTimerLogFlushPos minus one file size,
        every unit until one is refused (a blank moves to the next file); the broker truncates the log there
        (timer §7)."""
        segs = self.segments
        if not segs:
            return LogEnd(0, 0, "no timer-log files", 0)
        begin = max(0, flush_pos - segs[-1].size)
        index = len(segs) - 1
        while index >= 0 and begin < segs[index].start:
            index -= 1
        index = max(index, 0)
        start = segs[index].start
        for seg in segs[index:]:
            p, why = self.file_end(seg)
            if why != "blank":
                end = seg.start + p
                return LogEnd(end, start, why, seg.start + self.last_nonzero(seg, p))
        last = segs[-1]
        p, _ = self.file_end(last)
        return LogEnd(last.start + p, start, "blank", last.start + p)

    def last_nonzero(self, seg: Segment, lo: int) -> int:
        """In-file position just past the last non-zero byte at or after lo (lo when none). Reads with pread over the
        file's allocated extents only, from the end, so a long zero tail costs no memory (and a hole no read)."""
        n = seg.readable_len
        if n <= lo:
            return lo
        fd = self.queue.fd(seg)
        extents = data_extents(fd, n)
        step = 1 << 20
        for a, b in reversed(extents if extents is not None else [(0, n)]):
            a, hi = max(a, lo), b
            while hi > a:
                start = max(a, hi - step)
                nz = np.flatnonzero(np.frombuffer(os.pread(fd, hi - start, start), dtype=np.uint8))
                if len(nz):
                    return start + int(nz[-1]) + 1
                hi = start
        return lo


def _refusal(size: int, magic: int) -> str:
    if size == 0 and magic == 0:
        return "zeros (end of data)"
    if size != UNIT_SIZE:
        return f"size {size} is not 52"
    if not magic_ok(magic):
        return f"magic {magic} is not a timer-log magic"
    return "refused"


# ============================================================================ timercheck


@dataclass
class CheckpointFile:
    """config/timercheck as the broker would read it, and what is wrong with the file."""
    path: Path
    exists: bool
    length: int
    cp: TimerCheckpoint
    problem: str = ""          # "" when the file is whole

    @property
    def whole(self) -> bool:
        return self.exists and not self.problem


def read_checkpoint(path: Path) -> CheckpointFile:
    if not os.path.lexists(path):
        return CheckpointFile(path, False, 0, TimerCheckpoint(), "missing")
    if not is_regular_file(path):
        return CheckpointFile(path, True, -1, TimerCheckpoint(), "not a regular file (a symlink or a directory)")
    with open(path, "rb") as f:
        data = f.read(CHECKPOINT_FILE_SIZE + 1)
    length = os.path.getsize(path)
    cp = TimerCheckpoint.decode(data)
    problem = ""
    if length < CHECKPOINT.size:
        problem = f"is {length} bytes, shorter than its 56 bytes of fields (torn)"
    elif length != CHECKPOINT_FILE_SIZE:
        problem = f"is {length} bytes, not the page of {CHECKPOINT_FILE_SIZE} the broker maps"
    return CheckpointFile(path, True, length, cp, problem)


# ============================================================================ timermetrics


@dataclass
class MetricsFile:
    """config/timermetrics (or its .bak) as ConfigManager.load reads it (timer §5)."""
    metrics: TimerMetrics | None
    source: str | None                     # the file read, relative to the store; None when neither
    main_problem: str = ""                 # why the main file was not used
    bak_problem: str = ""                  # why the .bak was not used (when it was tried)
    notes: list[str] = field(default_factory=list)

    @property
    def broker_fails(self) -> bool:
        """ConfigManager.loadBak returns false (and TimerMessageStore.load with it) only when a .bak exists with
        text that does not decode."""
        return self.source is None and self.bak_problem.startswith("is damaged")


def _read_metrics(path: Path) -> tuple[TimerMetrics | None, str]:
    if not os.path.lexists(path):
        return None, "is missing"
    if not is_regular_file(path):
        return None, "is not a regular file"
    size = os.path.getsize(path)
    if size > MAX_METRICS_BYTES:
        return None, f"is {size} bytes, over rmqtool's limit of {MAX_METRICS_BYTES}"
    with open(path, "rb") as f:
        raw = f.read()
    if not raw:
        return None, "is empty"
    try:
        return TimerMetrics.decode(raw), ""
    except (fastjson.FastjsonError, MetricsShapeError) as e:
        return None, f"is damaged ({e})"


def read_metrics(path: Path, rel: str) -> MetricsFile:
    m, why = _read_metrics(path)
    if m is not None:
        return MetricsFile(m, rel)
    bak = path.with_name(path.name + ".bak")
    mb, why_bak = _read_metrics(bak)
    if mb is not None:
        return MetricsFile(mb, rel + ".bak", why, "", [f"{rel} {why}: the broker reads {bak.name} instead"])
    out = MetricsFile(None, None, why, why_bak)
    if why_bak.startswith("is damaged"):
        out.notes.append(f"{rel} {why} and {bak.name} {why_bak}: the broker's timer store fails to load, and the "
                         "broker does not start")
    elif why != "is missing":
        out.notes.append(f"{rel} {why} and {bak.name} {why_bak}: the broker deletes {rel} and starts with no "
                         "timer metrics")
    return out
