"""Fixed-size segment files named by their 20-digit start offset (MappedFileQueue, format §3.3).

Loading never refuses a directory because one file is out of place: every file that cannot be where its name
says (a gap in the sequence, a wrong size, a name that is not a 20-digit multiple of the file size, a duplicate
start, a symlink) is recorded in `problems`, and readers work around it; writers call `require_writable()`,
which refuses, as the broker refuses to load such a queue.

Reads are bounded by each file's real size and never fault on an unallocated page (engine.fsutil.map_readonly).
A writer allocates by range: a new segment is a sparse file of the full size (as the broker's), and a range of
it is allocated for real (posix_fallocate) before anything is written into it (reserve), so a store costs what
it holds; a writable queue maps only the allocated prefix of the segments it writes.
"""
from __future__ import annotations

import math
import mmap
import os
import stat
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from engine.broker.layout import SEGMENT_NAME, segment_name
from engine.errors import GeometryError
from engine.findings import Note
from engine.fsutil import allocate, data_extents, fsync_dir, map_readonly, reserve, write_fully
from engine.fsutil import sync as sync_fd

#: Bytes of a segment compared with zeros at a time (SegmentQueue.is_unwritten): a bounded buffer.
ZERO_CHECK_CHUNK = 4 << 20
_ZEROS = bytes(ZERO_CHECK_CHUNK)

# Problem kinds, in the words an operator would use.
GAP = "gap"                  # files missing between two segments
WRONG_SIZE = "wrong-size"    # a file whose length is not the segment size (other than an empty last file)
MISALIGNED = "misaligned"    # a 20-digit name that is not a multiple of the segment size
DUPLICATE = "duplicate"      # two files with the same start offset (multi-path commit log)
MISNAMED = "misnamed"        # a file whose name is not a 20-digit offset
SYMLINK = "symlink"          # a link in a segment directory (never followed)
NOT_A_FILE = "not-a-file"    # a device, socket or fifo named like a segment


@dataclass
class SegmentProblem:
    """One reason a segment directory is not what the broker would have left (readers warn, writers refuse)."""
    kind: str
    path: str            # the file concerned (for a gap: the first missing file name)
    start: int | None    # its start offset when it has one
    detail: str

    def as_dict(self) -> dict:
        return {"kind": self.kind, "path": self.path, "start": self.start, "detail": self.detail}

    def warning(self) -> Note:
        """The `warning:` line a reader prints for it (--json: its kind, with file and start as fields)."""
        return Note(self.kind, f"warning: {self.detail}", file=self.path, start=self.start)

    def __str__(self) -> str:
        return self.detail


@dataclass
class Segment:
    path: Path
    start: int
    size: int          # the queue's file size F (every file but an empty last one has it)
    file_len: int      # actual length on disk

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def readable_len(self) -> int:
        """Bytes that can be read: the file's real length, never more than F (bytes past F are not its own)."""
        return min(self.file_len, self.size)


def pick_segment_size(found: list[tuple[int, Path, int]]) -> int | None:
    """The segment size the files agree on: the one size, else the size that fits every start offset, else
    the most common size (largest on a tie). An empty last file says nothing (allowed since 5.1.3)."""
    sizes = [f[2] for f in found if f[2]]
    if not sizes:
        return None
    counts = Counter(sizes)
    if len(counts) == 1:
        return sizes[0]
    starts = [f[0] for f in found]
    g = 0
    for s in starts:
        g = math.gcd(g, s)
    fitting = [s for s in counts if all(st % s == 0 for st in starts)]
    if fitting:
        return max(fitting, key=lambda s: (counts[s], s))
    if g:  # no file has a size that fits the names: the names say more than the (damaged) sizes
        return g
    return max(counts, key=lambda s: (counts[s], s))


class SegmentQueue:
    """Segments of one directory (or several, for a multi-path commit log), sorted by start offset.

    `file_size` is the configured size (authoritative); without it the size is taken from the files, else
    `default_size`. Read-only by default: files are opened with O_RDONLY.
    """

    def __init__(self, dirs: list[Path] | Path, file_size: int | None, writable: bool = False,
                 what: str = "segment", default_size: int | None = None, files: list[tuple[int, Path]] | None = None):
        """files: read these (start offset, path) files instead of the segment files of `dirs` (segments copied out
        of their store, read on their own; read-only)."""
        self._files = files
        self.dirs = [Path(d) for d in (dirs if isinstance(dirs, list) else [dirs])]
        self.writable = writable
        self.what = what
        self._maps: dict[int, object] = {}
        self._fds: dict[int, int] = {}
        self._alloc: dict[int, int] = {}  # segment start -> end of its allocated prefix (segments being written)
        self.segments: list[Segment] = []
        self.ignored: list[Path] = []
        self.problems: list[SegmentProblem] = []
        self.file_size = file_size
        self._load(default_size)

    # -- loading
    def _scan(self) -> list[tuple[int, Path, int]]:
        found: list[tuple[int, Path, int]] = []
        if self._files is not None:
            found = [(start, Path(p), os.stat(p).st_size) for start, p in self._files]
            found.sort(key=lambda f: (f[0], str(f[1])))
            return found
        for d in self.dirs:
            if not d.is_dir():
                continue
            for e in sorted(os.scandir(d), key=lambda e: e.name):
                p = Path(e.path)
                if e.is_symlink():
                    self.ignored.append(p)
                    self._problem(SYMLINK, p, None, f"{self.what} directory entry {p} is a symlink (not followed)")
                    continue
                if e.is_dir(follow_symlinks=False):
                    continue
                st = e.stat(follow_symlinks=False)
                if not SEGMENT_NAME.match(e.name):
                    self.ignored.append(p)
                    self._problem(MISNAMED, p, None, f"{p} is not named by a 20-digit offset (ignored)")
                    continue
                if not stat.S_ISREG(st.st_mode):
                    self.ignored.append(p)
                    self._problem(NOT_A_FILE, p, int(e.name), f"{p} is not a regular file (ignored)")
                    continue
                found.append((int(e.name), p, st.st_size))
        found.sort(key=lambda f: (f[0], str(f[1])))
        return found

    def _problem(self, kind: str, path, start: int | None, detail: str) -> None:
        self.problems.append(SegmentProblem(kind, str(path), start, detail))

    def _load(self, default_size: int | None) -> None:
        found = self._scan()
        configured = self.file_size is not None
        if not configured:
            self.file_size = pick_segment_size(found) or default_size
        if not found:
            return
        if not self.file_size:
            raise GeometryError(f"{self.what} files in {found[0][1].parent} are all empty; cannot tell the file "
                                "size: pass the configured size")
        F = self.file_size
        sizes = {f[2] for f in found if f[2]}
        if configured and sizes and F not in sizes:
            # Not one damaged file: the size asked for contradicts every file (a wrong option or broker.conf).
            listing = ", ".join(f"{f[1].name} is {f[2]} bytes" for f in found[:3])
            raise GeometryError(f"{self.what} files in {found[0][1].parent} do not have the file size {F} "
                                f"({listing}); pass the right size (broker.conf mappedFileSize...)")
        for i, (start, p, length) in enumerate(found):
            if start % F:
                self.ignored.append(p)
                self._problem(MISALIGNED, p, start, f"{self.what} file {p} starts at {start}, which is not a "
                                                    f"multiple of the file size {F} (not read)")
                continue
            if self.segments and self.segments[-1].start == start:
                self.ignored.append(p)
                self._problem(DUPLICATE, p, start, f"two {self.what} files start at offset {start}: "
                                                   f"{self.segments[-1].path} and {p} (the second is not read)")
                continue
            self.segments.append(Segment(p, start, F, length))
        for i, seg in enumerate(self.segments):
            last = i == len(self.segments) - 1
            if seg.file_len != F and not (last and seg.file_len == 0):
                how = "only the first F bytes are read" if seg.file_len > F else "reading what is there"
                self._problem(WRONG_SIZE, seg.path, seg.start,
                              f"{self.what} file {seg.path} is {seg.file_len} bytes but the file size is {F} ({how})")
            if i and seg.start != self.segments[i - 1].end:
                prev = self.segments[i - 1]
                missing = (seg.start - prev.end) // F
                self._problem(GAP, prev.path.with_name(segment_name(prev.end)), prev.end,
                              f"{self.what} files missing between {prev.path.name} and {seg.path.name}: "
                              f"{missing} file(s) from {segment_name(prev.end)} (bytes {prev.end}..{seg.start} "
                              "are not in the store)")

    def require_writable(self) -> None:
        """Refuse to write into a queue whose files are out of place (the broker refuses to load it). A gap
        between two segments is not such a reason: the broker loads that queue and appends to its last file, and
        `recover` cannot bring the missing files back, so refusing would leave the store unwritable for good; the
        readers keep reporting the gap."""
        bad = [p for p in self.problems if p.kind not in (MISNAMED, GAP)]
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            raise GeometryError(f"refusing to write: {bad[0].detail}{more}; run `rmqtool recover` or repair the "
                                "files first")

    # -- lookup
    @property
    def min_offset(self) -> int:
        return self.segments[0].start if self.segments else 0

    def find(self, offset: int) -> Segment | None:
        """The segment holding global offset `offset` (format §3.3 offset -> file); None in a gap or outside."""
        if not self.segments or not self.file_size:
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

    # -- reading
    def fd(self, seg: Segment) -> int:
        fd = self._fds.get(seg.start)
        if fd is None:
            fd = os.open(seg.path, (os.O_RDWR if self.writable else os.O_RDONLY) | getattr(os, "O_NOFOLLOW", 0))
            self._fds[seg.start] = fd
        return fd

    def buffer(self, seg: Segment):
        """The segment's bytes, read-only and bounded by its real size (at most F). Empty files give b''.

        A segment this queue writes is mapped up to the end of its allocated prefix (no holes there, and its own
        later writes stay visible; the mapping is renewed when the prefix grows); any other is mapped by allocated
        extents, so an unallocated page never faults.
        """
        m = self._maps.get(seg.start)
        if m is not None:
            return m
        n = seg.readable_len
        if seg.start in self._alloc:
            n = min(n, self._alloc[seg.start])
        if n == 0:
            return b""
        fd = self.fd(seg)
        if seg.start in self._alloc:
            m = mmap.mmap(fd, n, access=mmap.ACCESS_READ)
        else:
            m = map_readonly(fd, n)
        self._maps[seg.start] = m
        return m

    def is_unwritten(self, seg: Segment) -> bool:
        """The segment holds nothing but zeros: a file allocated ahead and never written, such as the next
        commit-log segment a broker pre-allocates (AllocateMappedFileService; format §1.1), which a crash leaves
        behind. Its first 8 bytes decide for every written segment (a record or a BLANK starts there); otherwise
        its holes are skipped (SEEK_DATA) and its allocated bytes compared with zeros, a chunk at a time."""
        n = seg.readable_len
        fd = self.fd(seg)
        if n == 0 or os.pread(fd, 8, 0).count(0) < min(8, n):
            return n == 0
        extents = data_extents(fd, n)
        for a, b in extents if extents is not None else [(0, n)]:
            for pos in range(a, b, ZERO_CHECK_CHUNK):
                k = min(ZERO_CHECK_CHUNK, b - pos)
                if os.pread(fd, k, pos) != _ZEROS[:k]:
                    return False
        return True

    def read(self, offset: int, length: int) -> bytes:
        seg = self.find(offset)
        if seg is None:
            return b""
        buf = self.buffer(seg)
        pos = offset - seg.start
        return bytes(buf[pos:pos + length])

    # -- writing
    def create(self, start: int, reserve_to: int = 0) -> Segment:
        """Create a segment at `start`: a sparse file of the full size, its first `reserve_to` bytes allocated on
        disk for real. DiskFullError (the file removed again) when they cannot be."""
        assert self.writable and self.file_size
        # A multi-path commit log spreads files over its directories by file number.
        d = self.dirs[(start // self.file_size) % len(self.dirs)]
        d.mkdir(parents=True, exist_ok=True)
        p = d / segment_name(start)
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, self.file_size)
            have = reserve(fd, 0, min(reserve_to, self.file_size), self.file_size, p)
        except BaseException:
            os.close(fd)
            p.unlink(missing_ok=True)  # the file this call just created, never written
            raise
        fsync_dir(d)  # the new name is durable before anything in it is acknowledged
        seg = Segment(p, start, self.file_size, self.file_size)
        self._fds[start] = fd
        self._alloc[start] = have
        self.segments.append(seg)
        return seg

    def remove_unwritten(self, seg: Segment) -> None:
        """Remove a segment this queue created and never wrote into (a batch cut before it, for lack of room)."""
        assert seg is self.segments[-1] and seg.start in self._alloc
        self.close_segment(seg)
        self.segments.pop()
        seg.path.unlink(missing_ok=True)
        fsync_dir(seg.path.parent)

    def prepare_for_write(self, seg: Segment, pos: int) -> None:
        """Get an existing segment ready to be written from `pos` on: its first `pos` bytes (its data) allocated,
        the file extended to the full size if it is shorter (an empty last file); reserve() allocates the rest as
        it is needed."""
        if seg.start in self._alloc:
            return
        self.close_segment(seg)
        fd = self.fd(seg)
        allocate(fd, 0, pos, seg.path)
        if seg.file_len < seg.size:
            os.ftruncate(fd, seg.size)
            seg.file_len = seg.size
        self._alloc[seg.start] = pos

    def reserve(self, seg: Segment, end: int, ahead: int = 0) -> None:
        """Allocate the segment up to `end` (and up to `ahead` bytes more when the disk gives them) before it is
        written there; DiskFullError when [allocated end, end) cannot be had."""
        if seg.start not in self._alloc:
            self.prepare_for_write(seg, 0)
        have = self._alloc[seg.start]
        if end <= have:
            return
        self._alloc[seg.start] = reserve(self.fd(seg), have, min(end, seg.size), seg.size, seg.path, ahead)
        self._maps.pop(seg.start, None)  # the next read maps the longer prefix (a view of the old one stays valid)

    def allocated(self, seg: Segment) -> int:
        """The end of the segment's allocated prefix (0 for a segment this queue does not write)."""
        return self._alloc.get(seg.start, 0)

    def write(self, seg: Segment, pos: int, data) -> None:
        """Write all of `data` at `pos` of a segment, into allocated room only (reserve() first: a write past the
        allocated prefix allocates exactly what it needs), or raise WriteFailedError (nothing half-written)."""
        self.reserve(seg, pos + len(data))
        write_fully(self.fd(seg), data, pos, seg.path)

    def flush(self, seg: Segment) -> None:
        """fsync a segment this queue has open (one it never opened has nothing of ours to flush)."""
        fd = self._fds.get(seg.start)
        if fd is not None:
            sync_fd(fd, seg.path, data_only=False)

    def is_allocated(self, seg: Segment) -> bool:
        """Being written by this queue (created here, or made ready by prepare_for_write)."""
        return seg.start in self._alloc

    def is_mapped(self, seg: Segment) -> bool:
        return seg.start in self._maps

    def release(self, seg: Segment) -> None:
        """A reader is done with a segment: unmap it (read-only queues), so a long walk keeps no pages mapped."""
        if not self.writable:
            self.close_segment(seg)

    def close_segment(self, seg: Segment) -> None:
        m = self._maps.pop(seg.start, None)
        if m is not None and not isinstance(m, bytes):
            m.close()
        fd = self._fds.pop(seg.start, None)
        if fd is not None:
            os.close(fd)
        self._alloc.pop(seg.start, None)

    def close(self) -> None:
        for start in list(self._maps):
            m = self._maps.pop(start)
            if not isinstance(m, bytes):
                try:
                    m.close()
                except BufferError:
                    pass  # a caller still holds a view; the mapping goes when it does
        for start in list(self._fds):
            os.close(self._fds.pop(start))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
