"""Timer-store files written as TimerMessageStore writes them (timer §2, §3, §4, §6): units appended as doEnqueue
appends them (the roll rule, delete markers, the blank that ends a full file), the wheel's slots updated as
putSlot updates them, the checkpoint's page.

For building stores (tests, benchmarks) and for rebuilding a timer store into a copy; never used on a store a
broker may hold. Files are written at the end (write()), each write checked. A store costs what it holds, as the
broker's does: a timer-log file has the full mappedFileSizeTimerLog length, but only the prefix the units (and the
blank that ends a full file) take is allocated, before it is written; the wheel is written slot by slot into a
sparse file (pwrite, never a mapping: a hole is never touched through memory). In memory only that prefix of each
file is held.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from engine.fsutil import allocate, fsync_dir, write_fully
from engine.java.lang import java_string_hash
from engine.broker.layout import segment_name
from engine.timer.codec import (CHECKPOINT_FILE_SIZE, MAGIC_DEFAULT, MAGIC_DELETE, MAGIC_ROLL, MIN_BLANK_LEN,
                                Slot, TimerCheckpoint, encode_blank, encode_unit)
from engine.timer.layout import SLOT_SIZE, WHEEL_LENGTH, TimerGeometry, TimerLayout


@dataclass
class TimerStoreWriter:
    """An in-memory timer log and wheel, appended to unit by unit, written out by write()."""
    layout: TimerLayout
    geometry: TimerGeometry
    files: dict[int, bytearray] = field(default_factory=dict)   # file start -> its written prefix
    slots: dict[int, Slot] = field(default_factory=dict)         # slot index -> slot
    pos: int = 0                                                  # where the next unit goes

    def slot(self, time_ms: int) -> Slot:
        """TimerWheel.getSlot: the slot of a time, or (-1, -1, -1) when the slot holds another time."""
        s = self.slots.get(self.geometry.slot_index(time_ms))
        if s is None or s.time * self.geometry.precision_ms != self.geometry.format_time(time_ms):
            return Slot(-1, -1, -1)
        return s

    def append(self, data: bytes) -> int:
        """TimerLog.append: a blank first when the unit and a blank do not both fit in the current file."""
        f = self.geometry.log_file_size
        start, at = self.pos - self.pos % f, self.pos % f
        if len(data) + MIN_BLANK_LEN > f - at:
            self._put(start, at, encode_blank(f - at))
            self.pos = start + f
            start, at = self.pos, 0
        self._put(start, at, data)
        where = self.pos
        self.pos += len(data)
        return where

    def _put(self, start: int, at: int, data: bytes) -> None:
        """`data` at `at` of the file starting at `start`, its prefix grown to hold it."""
        buf = self.files.setdefault(start, bytearray())
        if len(buf) < at + len(data):
            buf.extend(bytes(at + len(data) - len(buf)))
        buf[at:at + len(data)] = data

    def enqueue(self, offset_py: int, size_py: int, delayed_ms: int, write_ms: int, real_topic: str | None,
                delete: bool = False) -> int:
        """doEnqueue: the unit's magic and slot (a time at least the roll window away goes to a nearer slot with
        the roll bit), the unit appended, the slot updated. Returns the unit's position."""
        g = self.geometry
        p = g.precision_ms
        magic = MAGIC_DEFAULT
        window = g.roll_window_slots
        if delayed_ms - write_ms >= window * p:
            magic |= MAGIC_ROLL
            if delayed_ms - write_ms - window * p < window // 3 * p:
                delayed_ms = write_ms + window // 2 * p
            else:
                delayed_ms = write_ms + window * p
        if delete:
            magic |= MAGIC_DELETE
        s = self.slot(delayed_ms)
        h = 0 if real_topic is None else java_string_hash(real_topic)
        pos = self.append(encode_unit(s.last, magic, write_ms, delayed_ms, offset_py, size_py, h))
        self.slots[g.slot_index(delayed_ms)] = Slot(delayed_ms // p, s.first if s.first != -1 else pos, pos,
                                                    s.num - 1 if delete else s.num + 1, s.magic)
        return pos

    def write(self, checkpoint: TimerCheckpoint | None = None) -> None:
        """Write timerwheel, timerlog/ and (when given) config/timercheck."""
        log_dir = self.layout.log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        for start, data in sorted(self.files.items()):
            path = log_dir / segment_name(start)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.ftruncate(fd, self.geometry.log_file_size)   # the broker's length; the rest stays a hole
                allocate(fd, 0, len(data), path)                # what is written, before it is written
                write_fully(fd, bytes(data), 0, path, undo=False)
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(log_dir)
        write_wheel(self.layout.wheel, self.slots)
        if checkpoint is not None:
            write_checkpoint(self.layout.checkpoint, checkpoint)

    @property
    def end(self) -> int:
        return self.pos


def write_wheel(path: Path, slots: dict[int, Slot]) -> None:
    """A wheel of WHEEL_LENGTH bytes holding `slots` (the rest sparse zeros, as the broker's)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, WHEEL_LENGTH)
        for index, s in sorted(slots.items()):
            write_fully(fd, s.encode(), index * SLOT_SIZE, path, undo=False)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_checkpoint(path: Path, cp: TimerCheckpoint) -> None:
    """config/timercheck: the fields, then zeros to one page (the broker maps a page)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = cp.encode()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_fully(fd, data + bytes(CHECKPOINT_FILE_SIZE - len(data)), 0, path, undo=False)
        os.fsync(fd)
    finally:
        os.close(fd)
