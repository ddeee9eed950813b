"""Fixed-size segment files named by their 20-digit start offset (MappedFileQueue, format §3.3)."""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path

from engine.broker.layout import SEGMENT_NAME, segment_name
from engine.errors import GeometryError, NotAStoreError


@dataclass
class Segment:
    path: Path
    start: int
    size: int          # the queue's file size F (every file but an empty last one has it)
    file_len: int      # actual length on disk

    @property
    def end(self) -> int:
        return self.start + self.size


class SegmentQueue:
    """Segments of one directory (or several, for a multi-path commit log), sorted by start offset.

    Read-only by default: files are opened with O_RDONLY and mapped with ACCESS_READ.
    """

    def __init__(self, dirs: list[Path] | Path, file_size: int | None, writable: bool = False,
                 what: str = "segment"):
        self.dirs = [Path(d) for d in (dirs if isinstance(dirs, list) else [dirs])]
        self.writable = writable
        self.what = what
        self._maps: dict[int, tuple[mmap.mmap, int]] = {}
        self.segments: list[Segment] = []
        self.ignored: list[Path] = []
        self.file_size = file_size
        self._load()

    # -- loading
    def _load(self) -> None:
        found: list[tuple[int, Path, int]] = []
        for d in self.dirs:
            if not d.is_dir():
                continue
            for p in d.iterdir():
                if not SEGMENT_NAME.match(p.name) or p.is_dir():
                    if not p.is_dir():
                        self.ignored.append(p)
                    continue
                found.append((int(p.name), p, p.stat().st_size))
        found.sort()
        if found and self.file_size is None:
            # Take F from the files present: all have it, except possibly an empty last file (§3.3).
            sizes = {f[2] for i, f in enumerate(found) if f[2] or i < len(found) - 1}
            if len(sizes) > 1:
                listing = ", ".join(f"{f[1].name} is {f[2]} bytes" for f in found[:6])
                raise GeometryError(f"{self.what} files in {found[0][1].parent} differ in size ({listing}); "
                                    "a file is truncated or damaged, or pass the configured file size")
            self.file_size = sizes.pop() if sizes else 0
            if self.file_size <= 0:
                raise GeometryError(f"{self.what} files in {found[0][1].parent} are all empty; cannot tell the file size")
        for i, (start, p, length) in enumerate(found):
            last = i == len(found) - 1
            if length != self.file_size and not (last and length == 0):
                raise GeometryError(
                    f"{self.what} file {p} is {length} bytes but the file size is {self.file_size}; "
                    "pass the right size (broker.conf mappedFileSize...) or repair the file")
            if start % self.file_size != 0:
                raise GeometryError(
                    f"{self.what} file {p} starts at {start}, which is not a multiple of the file size {self.file_size}")
            if i and start == found[i - 1][0]:
                raise NotAStoreError(f"two {self.what} files start at offset {start}: {found[i - 1][1]} and {p}")
            self.segments.append(Segment(p, start, self.file_size, length))

    # -- lookup
    @property
    def min_offset(self) -> int:
        return self.segments[0].start if self.segments else 0

    def find(self, offset: int) -> Segment | None:
        """The segment holding global offset `offset` (§3.3 offset -> file)."""
        if not self.segments or self.file_size is None:
            return None
        if offset < self.segments[0].start or offset >= self.segments[-1].end:
            return None
        idx = offset // self.file_size - self.segments[0].start // self.file_size
        if 0 <= idx < len(self.segments) and self.segments[idx].start <= offset < self.segments[idx].end:
            return self.segments[idx]
        for s in self.segments:  # a gap in the file names: fall back to a scan
            if s.start <= offset < s.end:
                return s
        return None

    def index_of(self, seg: Segment) -> int:
        return self.segments.index(seg)

    # -- mapping
    def buffer(self, seg: Segment):
        """The segment's bytes (a read-only or writable mmap). Empty files give b''."""
        if seg.start in self._maps:
            return self._maps[seg.start][0]
        if seg.file_len == 0:
            return b""
        flags = os.O_RDWR if self.writable else os.O_RDONLY
        fd = os.open(seg.path, flags)
        try:
            m = mmap.mmap(fd, seg.file_len, access=mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ)
        except Exception:
            os.close(fd)
            raise
        self._maps[seg.start] = (m, fd)
        return m

    def fd(self, seg: Segment) -> int:
        self.buffer(seg)
        return self._maps[seg.start][1]

    def read(self, offset: int, length: int) -> bytes:
        seg = self.find(offset)
        if seg is None:
            return b""
        buf = self.buffer(seg)
        pos = offset - seg.start
        return bytes(buf[pos:pos + length])

    # -- writing
    def create(self, start: int) -> Segment:
        """Create a full-size (sparse, zero-filled) segment at `start`."""
        assert self.writable and self.file_size
        # A multi-path commit log spreads files over its directories by file number.
        d = self.dirs[(start // self.file_size) % len(self.dirs)]
        d.mkdir(parents=True, exist_ok=True)
        p = d / segment_name(start)
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, self.file_size)
        finally:
            os.close(fd)
        seg = Segment(p, start, self.file_size, self.file_size)
        self.segments.append(seg)
        return seg

    def ensure_full_length(self, seg: Segment) -> None:
        """An empty last file (allowed on load since 5.1.3) is grown before it is written."""
        if seg.file_len != seg.size:
            self.close_segment(seg)
            os.truncate(seg.path, seg.size)
            seg.file_len = seg.size

    def close_segment(self, seg: Segment) -> None:
        entry = self._maps.pop(seg.start, None)
        if entry:
            m, fd = entry
            m.close()
            os.close(fd)

    def close(self) -> None:
        for start in list(self._maps):
            m, fd = self._maps.pop(start)
            try:
                m.close()
            finally:
                os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
