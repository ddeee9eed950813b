"""ConsumeQueue: 20-byte units per topic/queue (format §4).

Files are read through SegmentQueue (reads bounded by the real size, no fault on unallocated pages); a file is
sparse, as the broker's, and allocated by range: the room of units is allocated on disk before they are written
into it (UNITS_AHEAD bytes ahead at a time), and every write is checked.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from engine.broker.config.brokerconf import CQ_STORE_UNIT_SIZE
from engine.broker.layout import SEGMENT_NAME, StoreLayout, is_regular_file, symlink_on_path
from engine.errors import GeometryError, NotAStoreError
from engine.fsutil import data_extents
from engine.broker.commitlog.segments import SegmentQueue

UNIT = struct.Struct(">qiq")
UNIT_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
#: The size of a blank pre-fill unit (format §4.1): it points at no record.
BLANK_UNIT_SIZE = 0x7FFFFFFF
#: ConsumeQueueExt addresses are tagsCodes at or below this (format §4.6).
MAX_EXT_ADDR = -2147483649
BLANK_UNIT = UNIT.pack(0, BLANK_UNIT_SIZE, 0)
#: A writer allocates a consume-queue file this many bytes ahead of its units at once (3,200 units).
UNITS_AHEAD = 3200 * CQ_STORE_UNIT_SIZE
#: ConsumeQueue.recover reads a queue's last this many files; the ones before are taken as valid (format §4.4).
RECOVER_FILES = 3
#: last_nonzero_end looks at a file's allocated bytes this many at a time, from the end (the memory it uses).
ZERO_SCAN_BYTES = 1 << 20


def last_nonzero_end(buf, fd: int) -> int:
    """The end of the last non-zero byte of `buf` (a read-only mapping of the file open at `fd`), 0 when it is all
    zeros. Holes read as zeros, so only the allocated extents are looked at, from the last one back."""
    n = len(buf)
    if n == 0:
        return 0
    extents = data_extents(fd, n)
    for a, b in reversed(extents if extents is not None else [(0, n)]):
        hi, step = b, 4096  # data usually ends just before the extent does: look at a page first, then more
        while hi > a:
            lo = max(a, hi - step)
            chunk = np.frombuffer(buf, dtype=np.uint8, count=hi - lo, offset=lo)
            if chunk.any():
                return hi - int(np.argmax(chunk[::-1] != 0))
            hi, step = lo, min(step * 4, ZERO_SCAN_BYTES)
    return 0


def list_queues(root: Path) -> list[tuple[str, int]]:
    """(topic, queueId) for every valid queue directory (StoreLayout.list_queues also reports the others)."""
    return StoreLayout(root).list_queues().queues


class ConsumeQueue:
    def __init__(self, root: Path, topic: str, queue_id: int, file_size: int, writable: bool = False):
        self.topic, self.queue_id = topic, queue_id
        layout = StoreLayout(root)
        self.dir = layout.cq_dir(topic, queue_id)
        link = symlink_on_path(layout.root, self.dir)
        if link is not None:
            raise NotAStoreError(f"consume queue directory {link} is a symlink; rmqtool never follows links out of "
                                 "the store")
        # Existing files decide the file size (a store made with another mappedFileSizeConsumeQueue stays
        # readable); a new queue takes the configured one.
        self.queue = SegmentQueue(self.dir, None, writable=writable, what="consume queue", default_size=file_size)
        self.file_size = self.queue.file_size
        if self.file_size % CQ_STORE_UNIT_SIZE:
            raise GeometryError(f"consume queue {self.dir} has {self.file_size}-byte files, not a multiple of 20")
        self.writable = writable
        self.max_physic_offset = -1
        self.min_logic_offset = 0
        self._write_pos = 0  # write position in the file at _end_seg_index
        self._end_seg_index = 0
        self._written: dict[int, int] = {}  # file start -> written_units
        self.damage: str | None = None      # non-zero bytes after the queue's end in its end file (_recover)
        self._recover()

    def close(self) -> None:
        self.queue.close()

    @property
    def problems(self):
        """What is out of place among this queue's files (engine.broker.commitlog.segments.SegmentProblem)."""
        return self.queue.problems

    # ------------------------------------------------------------ reading
    def file_units(self, seg) -> np.ndarray:
        """The units of one file (a copy: the mapping can be closed while the array lives on)."""
        return self.units_view(seg).copy()

    def units_view(self, seg) -> np.ndarray:
        """The units of one file as a view of its mapping (no copy, no anonymous memory): drop every reference
        before the queue is closed."""
        buf = self.queue.buffer(seg)
        n = len(buf) // CQ_STORE_UNIT_SIZE
        return np.frombuffer(buf, dtype=UNIT_DTYPE, count=n) if n else np.empty(0, dtype=UNIT_DTYPE)

    def written_units(self, seg) -> int:
        """How many units of the file lie before the end of its last non-zero byte: every unit after them is all
        zeros. The file's holes (SEEK_DATA/SEEK_HOLE) are skipped unread and its allocated bytes are looked at
        from the end, ZERO_SCAN_BYTES at a time, so a queue file costs about what it holds, not its length (a
        broker's 6,000,000-byte files are sparse past their units)."""
        n = self._written.get(seg.start)
        if n is None:
            n = -(-last_nonzero_end(self.queue.buffer(seg), self.queue.fd(seg)) // CQ_STORE_UNIT_SIZE)
            if not self.writable:  # a writer's files change under the cache
                self._written[seg.start] = n
        return n

    def _valid_prefix(self, seg) -> tuple[int, int, int]:
        """(units in the file, leading valid units, offset + size of the last of them or -1), read in place: only
        the written units are looked at (a unit after them is zeros, so invalid)."""
        n_units = len(self.queue.buffer(seg)) // CQ_STORE_UNIT_SIZE
        units = self.units_view(seg)[:self.written_units(seg)]
        bad = np.flatnonzero((units["offset"] < 0) | (units["size"] <= 0))
        n_valid = int(bad[0]) if len(bad) else len(units)
        end = int(units["offset"][n_valid - 1]) + int(units["size"][n_valid - 1]) if n_valid else -1
        return n_units, n_valid, end

    def _recover(self) -> None:
        """Find the end of data as the broker's recover does (format §4.4): the first invalid unit, looking from the third
        last file on (so opening a queue reads at most three files, whatever its length)."""
        segs = self.queue.segments
        self._write_pos = 0
        if not segs:
            return
        self.min_logic_offset = segs[0].start
        for i in range(max(0, len(segs) - RECOVER_FILES), len(segs)):
            seg = segs[i]
            n_units, n_valid, end = self._valid_prefix(seg)
            if n_valid:
                self.max_physic_offset = end
            if n_valid < n_units or i == len(segs) - 1:
                # Files after the end are left alone here; recover (issue 3) truncates them.
                self._end_seg_index = i
                self._write_pos = n_valid * CQ_STORE_UNIT_SIZE
                if self.written_units(seg) > n_valid:
                    self.damage = self._damage_at(seg, n_valid)
                return

    def _damage_at(self, seg, k: int) -> str:
        """Why the unit that ends the queue (unit k of file seg) is damage, not the end of its data: it is no unit
        the broker writes (offset < 0 or size <= 0) and non-zero bytes follow it in the file."""
        off, size, _tags = UNIT.unpack_from(self.queue.buffer(seg), k * CQ_STORE_UNIT_SIZE)
        q = (seg.start + k * CQ_STORE_UNIT_SIZE) // CQ_STORE_UNIT_SIZE
        return (f"consume-queue file {seg.path.name} is damaged: at queue offset {q} (byte {k * CQ_STORE_UNIT_SIZE}) "
                f"lies no unit (commit-log offset {off}, size {size}) but non-zero bytes follow it; the queue reads "
                f"as ending there (as the broker reads it), so the units after it are not served")

    @property
    def max_offset_in_queue(self) -> int:
        segs = self.queue.segments
        if not segs:
            return 0
        seg = segs[self._end_seg_index]
        return (seg.start + self._write_pos) // CQ_STORE_UNIT_SIZE

    def unit(self, queue_offset: int) -> tuple[int, int, int] | None:
        logical = queue_offset * CQ_STORE_UNIT_SIZE
        seg = self.queue.find(logical)
        if seg is None:
            return None
        buf = self.queue.buffer(seg)
        pos = logical - seg.start
        if pos + CQ_STORE_UNIT_SIZE > len(buf):
            return None
        return UNIT.unpack_from(buf, pos)

    def all_units(self) -> np.ndarray:
        """Every unit up to the end of data, as one structured array (bulk readers use this)."""
        parts = []
        segs = self.queue.segments
        for i, seg in enumerate(segs[: self._end_seg_index + 1] if segs else []):
            units = self.file_units(seg)
            if i == self._end_seg_index:
                units = units[: self._write_pos // CQ_STORE_UNIT_SIZE]
            parts.append(units)
        return np.concatenate(parts) if parts else np.empty(0, dtype=UNIT_DTYPE)

    # ------------------------------------------------------------ writing
    def _end(self) -> int:
        """Logical byte position of the end of data (where the next unit goes)."""
        segs = self.queue.segments
        return segs[self._end_seg_index].start + self._write_pos if segs else 0

    def reserve_units(self, n: int, ahead: int = UNITS_AHEAD) -> list:
        """Allocate the room of the next n units before they are written: their files are created (sparse) as
        needed, and the file where they end gets up to `ahead` bytes more when the disk gives them. Returns the
        files this call created (a writer that cuts its batch before them removes them: remove_unwritten);
        DiskFullError leaves no file this call created."""
        self.queue.require_writable()
        F = self.file_size
        pos = self._end()
        end = pos + n * CQ_STORE_UNIT_SIZE
        created = []
        try:
            while pos < end:
                start = pos - pos % F
                seg = self.queue.find(start)
                if seg is None:
                    seg = self.queue.create(start)
                    created.append(seg)
                elif not self.queue.is_allocated(seg):
                    self.queue.prepare_for_write(seg, pos - start)
                self.queue.reserve(seg, min(end - start, F), ahead if end <= start + F else 0)
                pos = start + F
        except BaseException:
            for seg in reversed(created):
                self.queue.remove_unwritten(seg)
            raise
        return created

    def end_after(self, n: int) -> int:
        """The logical byte position where the next n units end."""
        return self._end() + n * CQ_STORE_UNIT_SIZE

    def remove_unwritten(self, files: list) -> None:
        """Remove files reserve_units created for units that will not be written (newest first)."""
        for seg in reversed(files):
            self.queue.remove_unwritten(seg)

    def append_units(self, data: bytes, max_physic_offset: int) -> None:
        """Write packed units (UNIT_DTYPE rows) at the end of the queue, into files reserve() made ready."""
        pos = self._end()
        view = memoryview(data)
        done = 0
        while done < len(view):
            seg = self.queue.find(pos)
            at = pos - seg.start
            k = min(len(view) - done, seg.size - at)
            self.queue.write(seg, at, view[done:done + k])
            done += k
            pos += k
            self._end_seg_index, self._write_pos = self.queue.index_of(seg), at + k
        if done:
            self.max_physic_offset = max_physic_offset

    def put(self, phy_offset: int, size: int, tags_code: int, cq_offset: int) -> bool:
        """putMessagePositionInfo (format §4.3). Returns False when the unit is ignored as a duplicate."""
        if phy_offset + size <= self.max_physic_offset:
            return False
        F = self.file_size
        expected = cq_offset * CQ_STORE_UNIT_SIZE
        segs = self.queue.segments
        if not segs:
            seg = self.queue.create(expected - expected % F)
            self._end_seg_index, self._write_pos = 0, 0
            if cq_offset != 0 and expected % F:
                self.queue.write(seg, 0, BLANK_UNIT * ((expected % F) // CQ_STORE_UNIT_SIZE))
                self._write_pos = expected % F
                self.min_logic_offset = expected
        else:
            seg = segs[self._end_seg_index]
            self.queue.prepare_for_write(seg, self._write_pos)
            if self._write_pos >= F:
                if self._end_seg_index + 1 < len(segs):
                    seg = segs[self._end_seg_index + 1]
                else:
                    seg = self.queue.create(seg.start + F)
                self._end_seg_index += 1
                self._write_pos = 0
        if cq_offset != 0:
            current = seg.start + self._write_pos
            if expected < current:
                return False
            # expected > current: the broker logs "[BUG] logic queue order maybe wrong" and appends anyway.
        self.queue.reserve(seg, self._write_pos + CQ_STORE_UNIT_SIZE, UNITS_AHEAD)
        self.queue.write(seg, self._write_pos, UNIT.pack(phy_offset, size, tags_code))
        self._write_pos += CQ_STORE_UNIT_SIZE
        self.max_physic_offset = phy_offset + size
        return True

    def sync(self) -> None:
        segs = self.queue.segments
        if segs:
            for seg in segs[max(0, self._end_seg_index - 1): self._end_seg_index + 1]:
                self.queue.flush(seg)


def trailing_empty_files(queue_dir: Path) -> list[Path]:
    """The last files of a queue directory that hold no unit (all zeros where their first unit belongs), after
    a file that holds one: a file the queue rolled into and never wrote (a crash, RocketMQ #9728, #10108). The
    first file is never one (an empty queue is not damage); a 0-byte last file is the broker's own to delete
    (MappedFileQueue.doLoad). One read of one unit per file, from the end."""
    names = sorted(n for n in os.listdir(queue_dir) if SEGMENT_NAME.match(n) and is_regular_file(queue_dir / n))
    out: list[Path] = []
    for name in reversed(names[1:]):
        p = queue_dir / name
        fd = os.open(p, os.O_RDONLY)
        try:
            head = os.pread(fd, CQ_STORE_UNIT_SIZE, 0)
        finally:
            os.close(fd)
        if not head or head.count(0) != len(head):
            break
        out.append(p)
    return out[::-1]
