"""The commit log: message records in fixed-size segments (format §2, §3)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from engine.errors import InvalidArgumentError
from engine.broker.message import (BLANK, CORRUPT, END_FILE_MIN_BLANK_LENGTH, LENGTH_MISMATCH, VALID,
                            CheckResult, MessageEncodeError, MessageRecord, blank_record, check_message,
                            encode_record)
from engine.broker.records import is_zero_area
from engine.broker.segments import Segment, SegmentQueue


@dataclass
class LogEntry:
    """One step of a commit-log walk: a record, a blank filler, or a place where decoding failed."""
    kind: str              # VALID, BLANK, CORRUPT, LENGTH_MISMATCH
    offset: int            # global physical offset of the entry
    size: int
    record: MessageRecord | None
    reason: str = ""
    segment: str = ""


def scan_stop(r: CheckResult, buf, pos: int, n: int) -> tuple[str, str]:
    """Why a record-by-record scan of one segment stops at pos: ("blank" | "zero" | "corrupt", reason)."""
    if r.status == BLANK:
        return "blank", ""
    if is_zero_area(buf, pos, n):
        return "zero", ""
    return "corrupt", r.reason


class CommitLog:
    def __init__(self, dirs: list[Path], file_size: int | None, writable: bool = False):
        self.queue = SegmentQueue(dirs, file_size, writable=writable, what="commitlog")
        self.writable = writable
        self._write_seg: Segment | None = None
        self._write_pos = 0

    @property
    def file_size(self) -> int | None:
        return self.queue.file_size

    @property
    def segments(self) -> list[Segment]:
        return self.queue.segments

    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    def close(self) -> None:
        self.queue.close()

    # ------------------------------------------------------------ reading
    def check_at(self, offset: int, check_crc: bool = True) -> CheckResult:
        seg = self.queue.find(offset)
        if seg is None:
            return CheckResult(CORRUPT, -1, reason=f"offset {offset} is outside the commit log "
                                                   f"[{self.min_offset}, {self.max_file_offset()})")
        buf = self.queue.buffer(seg)
        return check_message(buf, offset - seg.start, len(buf), check_crc=check_crc)

    def read_message(self, offset: int, check_crc: bool = True) -> MessageRecord | None:
        r = self.check_at(offset, check_crc)
        return r.record if r.status == VALID else None

    def max_file_offset(self) -> int:
        return self.segments[-1].end if self.segments else 0

    def walk(self, start: int | None = None, check_crc: bool = True, stop_at_corrupt_in_last: bool = True,
             read_body: bool = True, end: int | None = None) -> Iterator[LogEntry]:
        """Records in commit-log order from `start` (a record boundary; default: the first segment).

        A BLANK filler moves to the next segment. Decoding failures are yielded, then the walk goes on at
        the next segment; in the last segment a zero area is the end of data (not yielded) and any other
        failure is yielded and ends the walk.
        """
        segs = self.segments
        if not segs:
            return
        if start is None:
            start = segs[0].start
        seg = self.queue.find(start)
        if seg is None:
            raise InvalidArgumentError(
                f"offset {start} is outside the commit log [{self.min_offset}, {self.max_file_offset()})")
        idx = self.queue.index_of(seg)
        pos = start - seg.start
        while idx < len(segs):
            seg = segs[idx]
            buf = self.queue.buffer(seg)
            n = len(buf)
            last = idx == len(segs) - 1
            while True:
                off = seg.start + pos
                if end is not None and off >= end:
                    return
                r = check_message(buf, pos, n, check_crc=check_crc, read_body=read_body)
                if r.status == VALID:
                    yield LogEntry(VALID, off, r.size, r.record, segment=seg.path.name)
                    pos += r.size
                    continue
                if r.status == BLANK:
                    yield LogEntry(BLANK, off, r.size, None, r.reason, seg.path.name)
                    break
                if r.status == LENGTH_MISMATCH:
                    # The broker's dispatcher skips such a record by its TOTALSIZE (§7.7).
                    yield LogEntry(LENGTH_MISMATCH, off, r.size, r.record, r.reason, seg.path.name)
                    pos += r.size
                    continue
                at_zero = is_zero_area(buf, pos, n)
                if at_zero and last:
                    return  # the normal end of data
                reason = "no BLANK filler before the end of a non-last segment" if at_zero else r.reason
                yield LogEntry(CORRUPT, off, -1, None, reason, seg.path.name)
                if last:
                    return
                break
            idx += 1
            pos = 0

    def find_end(self, hint: int | None = None, check_crc: bool = False) -> int:
        """The commit log's max offset: end of the last valid record of the last segment.

        `hint` (a record start inside the last segment, e.g. the checkpoint's confirm offset) saves scanning
        the segment from position 0; it is only used when a valid record starts there.
        """
        segs = self.segments
        if not segs:
            return 0
        seg = segs[-1]
        buf = self.queue.buffer(seg)
        pos = 0
        if hint is not None and seg.start <= hint < seg.end:
            r = check_message(buf, hint - seg.start, len(buf), check_crc=check_crc, read_body=False)
            if r.status == VALID and r.record.physical_offset == hint:
                pos = hint - seg.start
        n = len(buf)
        while pos < n:
            r = check_message(buf, pos, n, check_crc=check_crc, read_body=check_crc)
            if r.status == VALID:
                pos += r.size
            elif r.status == BLANK:
                return seg.end
            else:
                break
        return seg.start + pos

    # ------------------------------------------------------------ writing
    def open_for_append(self, end: int) -> None:
        assert self.writable
        if not self.segments:
            self._write_seg, self._write_pos = None, 0
            return
        seg = self.segments[-1]
        if end == seg.end or end < seg.start:
            self._write_seg, self._write_pos = seg, seg.size
        else:
            self._write_seg, self._write_pos = seg, end - seg.start
        self.queue.ensure_full_length(seg)

    @property
    def max_offset(self) -> int:
        if self._write_seg is None:
            return 0
        return self._write_seg.start + self._write_pos

    def append(self, rec: MessageRecord, **encode_kw) -> tuple[int, bytes]:
        """Append one record (DefaultAppendMessageCallback.doAppend). Sets rec.physical_offset.

        Returns (physical offset, stored bytes). Rolls with a BLANK filler when TOTALSIZE + 8 > remaining.
        """
        F = self.file_size
        seg = self._write_seg
        if seg is None:
            seg = self.queue.create(0)
            self._write_seg, self._write_pos = seg, 0
        elif self._write_pos >= seg.size:
            seg = self.queue.create(seg.start + F)
            self._write_seg, self._write_pos = seg, 0
        rec.physical_offset = seg.start + self._write_pos
        data = encode_record(rec, **encode_kw)
        if len(data) > F - END_FILE_MIN_BLANK_LENGTH:
            raise MessageEncodeError(
                f"message record is {len(data)} bytes; it cannot fit a {F}-byte commit-log segment")
        remaining = F - self._write_pos
        if len(data) + END_FILE_MIN_BLANK_LENGTH > remaining:
            os.pwrite(self.queue.fd(seg), blank_record(remaining), self._write_pos)
            seg = self.queue.create(seg.start + F)
            self._write_seg, self._write_pos = seg, 0
            rec.physical_offset = seg.start
            data = encode_record(rec, **encode_kw)
        os.pwrite(self.queue.fd(seg), data, self._write_pos)
        rec.total_size = len(data)
        self._write_pos += len(data)
        return rec.physical_offset, data

    def sync(self) -> None:
        """fsync every segment touched since the last sync (the current one and, after a roll, the previous)."""
        for seg in self.segments[-2:]:
            if seg.start in self.queue._maps:
                os.fsync(self.queue.fd(seg))


def open_commitlog(config, writable: bool = False) -> CommitLog:
    """The store's commit log. Its segment size comes from the files present unless it was configured
    (broker.conf or an option); a log without files takes the configured (or default) size."""
    size = config.mappedFileSizeCommitLog if config.commitLogSizeGiven else None
    cl = CommitLog(config.commitlog_dirs, size, writable=writable)
    if cl.queue.file_size is None:
        cl.queue.file_size = config.mappedFileSizeCommitLog
    return cl
