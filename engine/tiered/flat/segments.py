"""Segment files and the append-file view a restarted broker has of them (FlatAppendFile over PosixFileSegment,
flat-store §5-§7; flat-store pitfalls 6, 7, 15, 17).

Reading: the segment list comes from the metadata entries sorted by base offset, each with its metadata size and
times; only the last segment's size is taken from its file (recoverFileSize). A read (`read`) finds the last
segment whose base offset <= the offset, continues into the next segment only (never a third), is cut to what is
committed, and fails where the broker's read fails. Files are opened read-only and read with pread.

Writing (the dispatcher): `plan_appends` decides where each appended item lands with FlatAppendFile's size rule
(`position + length > max` -> FILE_FULL -> a new segment at the append offset), without touching a file.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.errors import StoreError
from engine.java.lang import LONG_MAX
from engine.tiered.flat.layout import FILE_TYPE_NAMES



class TieredReadError(StoreError):
    """A read the broker's FlatAppendFile would fail (the broker throws; rmqtool reports it)."""

    exit_code = 3


@dataclass
class Segment:
    """One segment as the broker holds it after a restart."""
    file_type: int
    base: int
    size: int                 # committed size the broker uses (metadata, or the file length for the last one)
    min_ts: int
    max_ts: int
    path: Path
    file_len: int | None      # length on disk, None when the file is missing
    meta_size: int | None = None   # what the metadata says, when there is an entry

    @property
    def end(self) -> int:
        return self.base + self.size

    @property
    def file_name(self) -> str:
        return self.path.name


class FlatAppendFile:
    """The read side of one FlatAppendFile (COMMIT_LOG or CONSUME_QUEUE of one queue)."""

    def __init__(self, file_type: int, segments: list[Segment]):
        self.file_type = file_type
        self.segments = segments
        self._fds: dict[Path, int] = {}

    @property
    def type_name(self) -> str:
        return FILE_TYPE_NAMES[self.file_type]

    # -- FlatAppendFile getters
    @property
    def min_offset(self) -> int:
        return self.segments[0].base if self.segments else 0

    @property
    def commit_offset(self) -> int:
        return self.segments[-1].end if self.segments else 0

    @property
    def min_timestamp(self) -> int:
        return self.segments[0].min_ts if self.segments else -1

    @property
    def max_timestamp(self) -> int:
        return self.segments[-1].max_ts if self.segments else -1

    @property
    def total_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- reading
    def _pread(self, seg: Segment, pos: int, length: int) -> bytes:
        """PosixFileSegment.read0: bytes past the end of the file read as zeros (an allocated, unfilled buffer)."""
        data = b""
        if seg.file_len:
            fd = self._fds.get(seg.path)
            if fd is None:
                fd = os.open(seg.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
                self._fds[seg.path] = fd
            parts, done = [], 0
            while done < length:
                b = os.pread(fd, length - done, pos + done)
                if not b:
                    break
                parts.append(b)
                done += len(b)
            data = b"".join(parts)
        return data + bytes(length - len(data))

    def read_segment(self, seg: Segment, position: int, length: int) -> bytes:
        """FileSegment.readAsync on one segment (positions relative to it): fails for a position outside what is
        committed or a length <= 0, cut to what is committed, zeros past the end of the file."""
        if position < 0 or position >= seg.size:
            raise TieredReadError(f"{self.type_name} segment {seg.file_name}: read position {position} is outside "
                                  f"its {seg.size} committed bytes")
        if length <= 0:
            raise TieredReadError(f"{self.type_name} segment {seg.file_name}: read length {length} is illegal")
        return self._pread(seg, position, min(length, seg.size - position))

    def read(self, offset: int, length: int) -> bytes:
        """FlatAppendFile.readAsync: at most two segments, cut to what is committed."""
        segs = self.segments
        index = len(segs) - 1
        while index >= 0 and segs[index].base > offset:
            index -= 1
        if index < 0:
            raise TieredReadError(f"{self.type_name} offset {offset} is below the first segment "
                                  f"({segs[0].base if segs else 'no segment'})")
        s1 = segs[index]
        s2 = segs[index + 1] if offset + length > s1.end and index + 1 < len(segs) else None
        if s2 is None:
            return self.read_segment(s1, offset - s1.base, length)
        len1 = s1.end - offset
        return self.read_segment(s1, offset - s1.base, len1) + self.read_segment(s2, 0, length - len1)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


# ============================================================================ appending (the dispatcher's plan)

@dataclass
class SegmentState:
    """The segment the next append goes to (the last one of a FlatAppendFile)."""
    base: int
    position: int             # append position = committed size
    min_ts: int = LONG_MAX
    max_ts: int = LONG_MAX


@dataclass
class AppendPlan:
    """Where a run of appends lands: per item, the segment index (into `segments`) and the position in it.

    `segments[0]` is the segment that was last before the appends (possibly grown); every later one is new,
    created at the append offset (FlatAppendFile.rollingNewFile). `stalled_at` is the index of the first item
    that can never be appended (larger than the segment limit): it and every later item are left out.
    """
    segments: list[SegmentState] = field(default_factory=list)
    seg_index: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    position: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    stalled_at: int | None = None


def plan_appends(start: SegmentState, lengths: np.ndarray, max_size: int, timestamps: np.ndarray) -> AppendPlan:
    """FlatAppendFile.append for each item in turn, by size alone (flat-store §5): FILE_FULL when
    position + length > max_size; then the full segment is closed and a new one starts at the append offset.
    A new segment is created even when the current one is empty (a record larger than the limit then stalls)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(lengths)
    seg_index = np.empty(n, np.int64)
    position = np.empty(n, np.int64)
    segs = [SegmentState(start.base, start.position, start.min_ts, start.max_ts)]
    cs = np.cumsum(lengths)
    stalled = None
    i = 0
    while i < n:
        cur = segs[-1]
        before = int(cs[i - 1]) if i else 0
        j = int(np.searchsorted(cs, max_size - cur.position + before, side="right"))  # items i..j-1 fit
        if j > i:
            seg_index[i:j] = len(segs) - 1
            position[i:j] = cur.position + (cs[i:j] - lengths[i:j] - before)
            _stamp(cur, timestamps[i:j])
            cur.position += int(cs[j - 1]) - before
        if j >= n:
            break
        if cur.position:   # FILE_FULL: roll at the append offset (an empty segment is rolled onto itself)
            segs.append(SegmentState(cur.base + cur.position, 0))
        if int(lengths[j]) > max_size:
            stalled = j
            break
        i = j
    if stalled is not None:
        seg_index, position = seg_index[:stalled], position[:stalled]
    return AppendPlan(segs, seg_index, position, stalled)


def _stamp(seg: SegmentState, ts: np.ndarray) -> None:
    """FileSegment.updateTimestamp over a run of appends."""
    if not len(ts):
        return
    lo, hi = int(ts.min()), int(ts.max())
    if seg.min_ts == LONG_MAX and seg.max_ts == LONG_MAX:
        seg.min_ts, seg.max_ts = lo, hi
    else:
        seg.min_ts, seg.max_ts = min(seg.min_ts, lo), max(seg.max_ts, hi)
