"""The commit log: message records in fixed-size segments (format §2, §3).

Reading never trusts a file name alone: a record whose stored PHYSICALOFFSET is not where it was read
(swapped or misnamed segments) is MISPLACED, never VALID; a missing segment between two others is a GAP entry.
Writing lays a batch of records out (rolling with a BLANK filler as DefaultAppendMessageCallback.doAppend does),
allocates the room of the records (by range, RESERVE_AHEAD at a time) before they are written, a new segment's
before the BLANK that hands over to it, and checks every write.
"""
from __future__ import annotations

import mmap
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from engine.broker.commitlog.message import (BLANK, CORRUPT, END_FILE_MIN_BLANK_LENGTH, LENGTH_MISMATCH,
                                             MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, VALID, CheckResult,
                                             MessageEncodeError, MessageRecord, blank_record, check_message,
                                             encode_record)
from engine.broker.commitlog.segments import Segment, SegmentQueue
from engine.errors import GeometryError, InvalidArgumentError
from engine.fsutil import sync as sync_fd

if TYPE_CHECKING:
    import numpy as np

#: A well-formed record whose PHYSICALOFFSET names another place: its segment file is misplaced (issue 10).
MISPLACED = "MISPLACED"
#: Bytes of the log that no segment file holds (a missing middle segment).
GAP = "GAP"

#: A walk drops the pages it has read from its resident set every this many bytes (they stay in the page cache).
RELEASE_STEP = 64 << 20
#: A writer allocates a segment this many bytes ahead of its records at once (allocation by range: a segment is
#: sparse, as the broker's, and costs what it holds).
RESERVE_AHEAD = 4 << 20

_II = struct.Struct(">ii")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_H = struct.Struct(">h")
_B = struct.Struct(">b")


@dataclass
class LogEntry:
    """One step of a commit-log walk: a record, a blank filler, a gap, or a place where decoding failed."""
    kind: str              # VALID, BLANK, CORRUPT, LENGTH_MISMATCH, MISPLACED, GAP
    offset: int            # global physical offset of the entry
    size: int
    record: MessageRecord | None
    reason: str = ""
    segment: str = ""


@dataclass
class ScanEntry:
    """A walk step without a decoded record: the record's bytes are buf[pos:pos + size] (fast readers)."""
    kind: str
    offset: int
    size: int
    buf: object
    pos: int
    reason: str
    segment: str


def quick_valid_size(buf, pos: int, n: int, check_crc: bool) -> int:
    """TOTALSIZE when a well-formed VALID record starts at pos (the checks of check_message, without building
    a record), else -1: the caller asks check_message for the exact classification and reason."""
    if n - pos < 8:
        return -1
    total, magic = _II.unpack_from(buf, pos)
    if (magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2) or total < 91 or total > n - pos:
        return -1
    rend = pos + total
    sys_flag = _I.unpack_from(buf, pos + 36)[0]
    p = pos + 76 + (16 if sys_flag & 0x10 else 4) + (16 if sys_flag & 0x20 else 4)
    if p + 4 > rend:
        return -1
    body_len = _I.unpack_from(buf, p)[0]
    p += 4
    body_at = p
    if body_len > 0:
        p += body_len
    if magic == MESSAGE_MAGIC_CODE_V2:
        if p + 2 > rend:
            return -1
        tl = _H.unpack_from(buf, p)[0]
        p += 2
    else:
        if p + 1 > rend:
            return -1
        tl = _B.unpack_from(buf, p)[0]
        p += 1
    if tl < 0 or p + tl + 2 > rend:
        return -1
    p += tl
    pl = _H.unpack_from(buf, p)[0]
    p += 2 + (pl if pl > 0 else 0)
    if p != rend:  # the fields do not add up to TOTALSIZE (LENGTH_MISMATCH) or run past it
        return -1
    if check_crc and body_len > 0 and \
            zlib.crc32(buf[body_at:body_at + body_len]) & 0x7FFFFFFF != _I.unpack_from(buf, pos + 8)[0]:
        return -1
    return total


@dataclass
class Piece:
    """Records first..end-1 of a batch, written back to back into one segment at `pos`."""
    seg_start: int
    pos: int
    first: int
    end: int
    new_segment: bool                       # the segment is created (and allocated) before this piece
    blank: tuple[int, int, int] | None      # (segment start, position, remaining): the BLANK that rolls to it


class CommitLog:
    def __init__(self, dirs: list[Path], file_size: int | None, writable: bool = False,
                 default_size: int | None = None, files: list[tuple[int, Path]] | None = None):
        self.queue = SegmentQueue(dirs, file_size, writable=writable, what="commitlog", default_size=default_size,
                                  files=files)
        self.writable = writable
        self._write_seg: Segment | None = None
        self._write_pos = 0
        self._touched: set[int] = set()

    @property
    def file_size(self) -> int | None:
        return self.queue.file_size

    @property
    def segments(self) -> list[Segment]:
        return self.queue.segments

    @property
    def problems(self):
        """What is out of place among the segment files (engine.broker.commitlog.segments.SegmentProblem)."""
        return self.queue.problems

    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    def close(self) -> None:
        self.queue.close()

    # ------------------------------------------------------------ reading
    def check_at(self, offset: int, check_crc: bool = True, check_position: bool = True) -> CheckResult:
        seg = self.queue.find(offset)
        if seg is None:
            where = "in a gap between segment files" if self.segments and \
                self.min_offset <= offset < self.max_file_offset() else "outside the commit log"
            return CheckResult(CORRUPT, -1, reason=f"offset {offset} is {where} "
                                                   f"[{self.min_offset}, {self.max_file_offset()})")
        buf = self.queue.buffer(seg)
        r = check_message(buf, offset - seg.start, len(buf), check_crc=check_crc)
        if check_position and r.status == VALID and r.record.physical_offset != offset:
            return CheckResult(MISPLACED, r.size, r.record, reason=misplaced_reason(offset, r.record.physical_offset,
                                                                                   seg))
        return r

    def valid_at(self, offset: int, check_crc: bool = True):
        """(buffer, position) of the VALID record at `offset` (checked as check_at checks it, without decoding it
        when it is well-formed), else the CheckResult that says why there is none."""
        seg = self.queue.find(offset)
        if seg is not None:
            buf = self.queue.buffer(seg)
            pos = offset - seg.start
            if quick_valid_size(buf, pos, len(buf), check_crc) > 0 and _Q.unpack_from(buf, pos + 28)[0] == offset:
                return buf, pos
        return self.check_at(offset, check_crc)

    def max_file_offset(self) -> int:
        return self.segments[-1].end if self.segments else 0

    def data_end_index(self) -> int:
        """The index of the last segment that holds data. The segments after it hold nothing but zeros: the next
        segment a broker allocates ahead (format §1.1), which a crash leaves behind and the broker's recovery
        deletes (format §7.2). A walk reads them as it reads the unwritten tail of the last segment: the end of data,
        not damage. 0 when no segment holds data."""
        segs = self.segments
        i = len(segs) - 1
        # The allocator makes full-size files (an empty last one is deleted at load, format §3.3): a short file
        # is damage, never the segment allocated ahead.
        while i > 0 and segs[i].file_len in (0, segs[i].size) and self.queue.is_unwritten(segs[i]):
            i -= 1
        return max(i, 0)

    def scan(self, start: int | None = None, check_crc: bool = True, end: int | None = None,
             check_position: bool = True) -> Iterator[ScanEntry]:
        """Entries in commit-log order from `start` (a record boundary; default: the first segment).

        A BLANK filler moves to the next segment; a missing segment is a GAP entry. Decoding failures are
        yielded, then the scan goes on at the next segment; in the last segment that holds data (and in the
        unwritten ones after it, data_end_index) a zero area is the end of data (not yielded) and any other failure
        is yielded and ends the scan.
        """
        return self.walk_segments(start, end, lambda seg, pos, last: self._scan_segment(
            seg, pos, last, check_crc, end, check_position))

    def walk_segments(self, start: int | None, end: int | None, per_segment, *, gaps: bool = True,
                      release: bool = True) -> Iterator:
        """The one walk over the segment files from `start` (default: the first segment) that every reader of the
        log shares: scan (record by record), the bulk reader (engine.broker.commitlog.logrun: dump-commitlog, get,
        config rebuilds) and the checking walk (engine.broker.commitlog.walk: recovery, index verification).
        `per_segment(seg, pos, last)` yields a segment's entries and returns True when the whole walk must stop;
        a missing segment is a GAP entry (`gaps`); one segment is mapped at a time (`release`: the checking walk
        keeps what it mapped, its windows and the recovery after it read them again)."""
        segs = self.segments
        if not segs:
            return
        if start is None:
            start = segs[0].start
        seg = self.queue.find(start)
        if seg is None:
            raise InvalidArgumentError(
                f"offset {start} is outside the commit log [{self.min_offset}, {self.max_file_offset()})"
                if not self.min_offset <= start < self.max_file_offset() else
                f"offset {start} is in a gap between commit-log segment files")
        idx = self.queue.index_of(seg)
        pos = start - seg.start
        last_data = self.data_end_index()
        while idx < len(segs):
            seg = segs[idx]
            mapped_before = self.queue.is_mapped(seg)
            # From the last segment that holds data on, a zero area is the end of data (format §3.2, §7.2).
            stop = yield from per_segment(seg, pos, idx >= last_data)
            if release and not mapped_before:
                self.queue.release(seg)  # a long walk keeps one segment mapped at a time
            if stop:
                return
            idx += 1
            pos = 0
            if gaps and idx < len(segs) and segs[idx].start != seg.end:
                nxt = segs[idx]
                if end is not None and seg.end >= end:
                    return
                yield ScanEntry(GAP, seg.end, nxt.start - seg.end, None, 0,
                                f"segment files missing: bytes {seg.end}..{nxt.start} are not in the store",
                                f"{seg.end:020d}")

    def _scan_segment(self, seg: Segment, pos: int, last: bool, check_crc: bool, end, check_position: bool):
        """Yield the entries of one segment from pos; returns True when the whole scan must stop."""
        buf = self.queue.buffer(seg)
        n = len(buf)
        name = seg.path.name
        base = seg.start
        madvise = getattr(buf, "madvise", None)
        released = pos - pos % RELEASE_STEP
        while True:
            if madvise is not None and pos - released >= RELEASE_STEP:
                madvise(mmap.MADV_DONTNEED, released, pos - pos % RELEASE_STEP - released)  # pages read: drop them
                released = pos - pos % RELEASE_STEP
            off = base + pos
            if end is not None and off >= end:
                return True
            size = quick_valid_size(buf, pos, n, check_crc)
            if size > 0:
                if check_position and _Q.unpack_from(buf, pos + 28)[0] != off:
                    yield ScanEntry(MISPLACED, off, size, buf, pos,
                                    misplaced_reason(off, _Q.unpack_from(buf, pos + 28)[0], seg), name)
                else:
                    yield ScanEntry(VALID, off, size, buf, pos, "", name)
                pos += size
                continue
            r = check_message(buf, pos, n, check_crc=check_crc, read_body=check_crc)
            if r.status == VALID:  # quick_valid_size leaves the unusual shapes to check_message
                kind = MISPLACED if check_position and r.record.physical_offset != off else VALID
                yield ScanEntry(kind, off, r.size, buf, pos,
                                misplaced_reason(off, r.record.physical_offset, seg) if kind == MISPLACED else "", name)
                pos += r.size
                continue
            if r.status == BLANK:
                yield ScanEntry(BLANK, off, r.size, buf, pos, r.reason, name)
                return False
            if r.status == LENGTH_MISMATCH:
                # The broker's dispatcher skips such a record by its TOTALSIZE (format §7.7).
                yield ScanEntry(LENGTH_MISMATCH, off, r.size, buf, pos, r.reason, name)
                pos += r.size
                continue
            at_zero = _is_zero_area(buf, pos, n)
            if at_zero and last:
                return True  # the normal end of data
            if at_zero and pos >= n and seg.file_len < seg.size:
                reason = f"segment file is {seg.file_len} bytes, not {seg.size}: it ends without a BLANK filler"
            else:
                reason = "no BLANK filler before the end of a non-last segment" if at_zero else r.reason
            yield ScanEntry(CORRUPT, off, -1, buf, pos, reason, name)
            return last

    def decode_segment(self, seg: Segment, buf, start: int = 0, window: int | None = None, **kw):
        """The one bulk decoder (engine.broker.commitlog.records.decode_segment) over the buffer of one of this
        log's segments: a log whose files hold something else around the records (engine.broker.dledger) decodes
        them its own way, with the same answers."""
        from engine.broker.commitlog.records import SCAN_WINDOW, decode_segment  # numpy: bulk readers only

        return decode_segment(buf, start, window or SCAN_WINDOW, **kw)

    def walk(self, start: int | None = None, check_crc: bool = True, stop_at_corrupt_in_last: bool = True,
             read_body: bool = True, end: int | None = None, check_position: bool = True) -> Iterator[LogEntry]:
        """scan() with each record decoded into a MessageRecord (VALID, MISPLACED and LENGTH_MISMATCH)."""
        for e in self.scan(start, check_crc=check_crc, end=end, check_position=check_position):
            rec = None
            if e.kind in (VALID, MISPLACED, LENGTH_MISMATCH):
                rec = check_message(e.buf, e.pos, e.pos + e.size, check_crc=False, read_body=read_body).record
            yield LogEntry(e.kind, e.offset, e.size, rec, e.reason, e.segment)

    def _segment_end(self, seg: Segment, hint: int | None, check_crc: bool):
        """Walk one segment's records from its start (or from `hint`, when a valid record starts there) to the
        first that is not valid: (position, that record's check, the buffer). A BLANK filler ends the segment
        (position seg.size); the check is None when the records fill the file."""
        buf = self.queue.buffer(seg)
        pos, n = 0, len(buf)
        if hint is not None and seg.start <= hint < seg.end:
            r = check_message(buf, hint - seg.start, n, check_crc=check_crc, read_body=False)
            if r.status == VALID and r.record.physical_offset == hint:
                pos = hint - seg.start
        while pos < n:
            size = quick_valid_size(buf, pos, n, check_crc)
            if size > 0:
                pos += size
                continue
            r = check_message(buf, pos, n, check_crc=check_crc, read_body=check_crc)
            if r.status == VALID:
                pos += r.size
                continue
            return (seg.size if r.status == BLANK else pos), r, buf
        return pos, None, buf

    def find_end(self, hint: int | None = None, check_crc: bool = False) -> int:
        """The commit log's max offset: end of the last valid record of the last segment.

        `hint` (a record start inside the last segment, e.g. the checkpoint's confirm offset) saves scanning
        the segment from position 0; it is only used when a valid record starts there.
        """
        segs = self.segments
        if not segs:
            return 0
        pos, _r, _buf = self._segment_end(segs[-1], hint, check_crc)
        return segs[-1].start + pos

    def data_end(self, hint: int | None = None, check_crc: bool = False) -> tuple[int, str]:
        """Where the commit log's data ends as the broker's recovery walk finds it (format §7.2), and why it ends
        there: find_end's walk of the last segment, stepping back over trailing segments that hold no record
        (the next segment a killed broker pre-allocated is all zeros: its data ends in the segment before). Reads
        the record headers of the last segment that holds records (bodies too with `check_crc`), from `hint`
        when a valid record starts there."""
        segs = self.segments
        if not segs:
            return 0, "no commit-log segments"
        for i in range(len(segs) - 1, -1, -1):
            seg = segs[i]
            pos, r, buf = self._segment_end(seg, hint, check_crc)
            if r is None:
                why = "the end of the last segment file"
            elif r.status == BLANK:
                why = "the BLANK filler of the last segment that holds records"
            elif _is_zero_area(buf, pos, min(len(buf), pos + 8)):
                why = "end of data (zeros follow)"
            else:
                why = f"{r.status}: {r.reason}" if r.reason else r.status
            if pos == 0 and i > 0 and why.startswith("end of data"):
                continue  # an empty (pre-allocated) segment: the data ends in the one before
            return seg.start + pos, why
        return segs[0].start, "end of data (zeros follow)"

    # ------------------------------------------------------------ writing
    def open_for_append(self, end: int) -> None:
        """Get ready to append at `end` (find_end's answer). Refuses a log whose files are out of place."""
        assert self.writable
        self.queue.require_writable()
        if not self.segments:
            self._write_seg, self._write_pos = None, 0
            return
        seg = self.segments[-1]
        r = check_message(self.queue.buffer(seg), 0, check_crc=False, read_body=False)
        if r.status == VALID and r.record.physical_offset != seg.start:
            raise GeometryError(f"refusing to write: {misplaced_reason(seg.start, r.record.physical_offset, seg)}")
        if end == seg.end or end < seg.start:
            self._write_seg, self._write_pos = seg, seg.size
            return
        self._write_seg, self._write_pos = seg, end - seg.start
        self.queue.prepare_for_write(seg, self._write_pos)

    @property
    def max_offset(self) -> int:
        if self._write_seg is None:
            return 0
        return self._write_seg.start + self._write_pos

    def layout(self, sizes) -> tuple[np.ndarray, list[Piece]]:
        """Where records of these sizes land, from the current end: their physical offsets (int64) and the
        pieces (one per segment) they are written in. Rolls when TOTALSIZE + 8 > the space left (format §3.1)."""
        F = self.file_size
        import numpy as np  # put paths only: reading commands start without numpy

        sizes = np.asarray(sizes, dtype=np.int64)
        n = len(sizes)
        if self._write_seg is None:
            seg_start, pos, new = (self.segments[-1].end if self.segments else 0), 0, True
        elif self._write_pos >= F:
            seg_start, pos, new = self._write_seg.start + F, 0, True
        else:
            seg_start, pos, new = self._write_seg.start, self._write_pos, False
        if n and int(sizes.max()) > F - END_FILE_MIN_BLANK_LENGTH:
            raise MessageEncodeError(f"message record is {int(sizes.max())} bytes; it cannot fit a {F}-byte "
                                     "commit-log segment")
        ends = np.cumsum(sizes)
        if not n or pos + int(ends[-1]) + END_FILE_MIN_BLANK_LENGTH <= F:  # no roll: the common case
            return seg_start + pos + ends - sizes, [Piece(seg_start, pos, 0, n, new, None)] if n else []
        phys = np.empty(n, dtype=np.int64)
        pieces = [Piece(seg_start, pos, 0, 0, new, None)]
        for i, size in enumerate(sizes.tolist()):
            if size + END_FILE_MIN_BLANK_LENGTH > F - pos:
                pieces[-1].end = i
                blank = (seg_start, pos, F - pos)
                seg_start, pos = seg_start + F, 0
                pieces.append(Piece(seg_start, 0, i, i, True, blank))
            phys[i] = seg_start + pos
            pos += size
        pieces[-1].end = n
        return phys, [p for p in pieces if p.end > p.first]

    def piece_end(self, piece: Piece, phys, sizes, upto: int) -> int:
        """Where the records of a piece end in its segment when only the batch's first `upto` records are written."""
        last = min(piece.end, upto) - 1
        return int(phys[last]) - piece.seg_start + int(sizes[last]) if last >= piece.first else piece.pos

    def reserve_piece(self, piece: Piece, end: int, ahead: int = 0) -> bool:
        """Allocate what a piece writes, up to `end` in its segment (and `ahead` bytes more when the disk gives
        them): the segment itself when the piece starts it (created sparse, and removed again when its room
        cannot be had: the log then ends as it did), and the BLANK filler's 8 bytes in the segment before.
        Returns whether this call created the segment; DiskFullError leaves the log exactly as it was."""
        created = False
        if piece.blank is not None:
            prev = self.queue.find(piece.blank[0])
            self.queue.reserve(prev, piece.blank[1] + END_FILE_MIN_BLANK_LENGTH)
        if piece.new_segment:
            self.queue.create(piece.seg_start)
            piece.new_segment = False
            created = True
        seg = self.queue.find(piece.seg_start)
        try:
            self.queue.reserve(seg, end, ahead)
        except BaseException:
            if created:
                self.unmake_piece(piece)
            raise
        return created

    def unmake_piece(self, piece: Piece) -> None:
        """Remove the segment reserve_piece created for a piece that will not be written (the batch was cut)."""
        self.queue.remove_unwritten(self.queue.find(piece.seg_start))
        piece.new_segment = True

    def prepare_piece(self, piece: Piece) -> None:
        """Create the segment a piece starts, if it does (sparse; its room is allocated by reserve_piece, or by
        the write itself); a DiskFullError here leaves the log exactly as it was."""
        if piece.new_segment:
            self.queue.create(piece.seg_start)
            piece.new_segment = False

    def write_piece(self, piece: Piece, data: bytes) -> None:
        """Write one piece: its segment first (prepare_piece), then the BLANK that rolls to it, then the records."""
        self.prepare_piece(piece)
        seg = self.queue.find(piece.seg_start)
        assert seg is not None and seg.start == piece.seg_start
        if piece.blank is not None:
            prev = self.queue.find(piece.blank[0])
            self.queue.write(prev, piece.blank[1], blank_record(piece.blank[2]))
            self._touched.add(prev.start)
        self.queue.write(seg, piece.pos, data)
        self._touched.add(seg.start)
        self._write_seg, self._write_pos = seg, piece.pos + len(data)

    def append(self, rec: MessageRecord, **encode_kw) -> tuple[int, bytes]:
        """Append one record (DefaultAppendMessageCallback.doAppend). Sets rec.physical_offset.

        Returns (physical offset, stored bytes). Rolls with a BLANK filler when TOTALSIZE + 8 > remaining.
        """
        data = encode_record(rec, **encode_kw)  # its size does not depend on the offsets
        phys, pieces = self.layout([len(data)])
        rec.physical_offset = phy = int(phys[0])
        data = encode_record(rec, **encode_kw)
        self.write_piece(pieces[0], data)
        rec.total_size = len(data)
        return phy, data

    def sync(self) -> None:
        """Flush every segment written since the last sync (group commit: once per batch)."""
        for start in sorted(self._touched):
            seg = self.queue.find(start)
            if seg is not None:
                sync_fd(self.queue.fd(seg), seg.path)
        self._touched.clear()


def misplaced_reason(offset: int, stored: int, seg: Segment) -> str:
    return (f"the record read at offset {offset} (file {seg.path.name}) says it is at {stored}: the segment file is "
            "misplaced (swapped or renamed) or the record header is damaged")


def open_commitlog(config, writable: bool = False) -> CommitLog:
    """The store's commit log. Its segment size comes from the files present unless it was configured
    (broker.conf or an option); a log without files takes the configured (or default) size."""
    require_readable_commitlog(config)
    size = config.mappedFileSizeCommitLog if config.commitLogSizeGiven else None
    return CommitLog(config.commitlog_dirs, size, writable=writable, default_size=config.mappedFileSizeCommitLog)


def require_readable_commitlog(config) -> None:
    """A store whose commit log is not a file commit log (engine.broker.mode: DLedger's entry log) is refused in
    one line naming the mode, never read as an empty file commit log: its readers open it with
    engine.broker.dledger.log.open_log, the callers of this file-only opener do not read it."""
    from engine.broker.mode import DLEDGER, detect_mode
    from engine.errors import ModeRefusedError

    mode = detect_mode(config)
    if mode.commitlog == DLEDGER:
        raise ModeRefusedError(f"{config.root} keeps its commit log in DLedger's entry log "
                               f"({mode.as_dict()['dledgerDir']}data), which this command does not read")


def _is_zero_area(buf, pos: int, n: int) -> bool:
    from engine.broker.commitlog.records import is_zero_area  # numpy: imported when a walk meets a zero area

    return is_zero_area(buf, pos, n)

