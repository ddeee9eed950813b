"""The DLedger commit log read as a commit log: DLedgerLog answers every question CommitLog answers (check_at,
valid_at, scan, walk, walk_segments, find_end, decode_segment), so every reader works on a DLedger store unchanged
(format §11.3).

DLedger's data files are fixed-size files named by their 20-digit start offset, like commit-log segments
(MmapFileList; DLedgerCommitLog sets mappedFileSizeForEntryData = mappedFileSizeCommitLog), and a message's
physical offset is where its record starts in them (entry pos + 48, engine.broker.dledger.entry): so a lookup by
offset reads the record exactly where a file commit log has it, and checks the entry header 48 bytes before it.
A walk goes entry by entry (their sizes), not record by record.

A store that ran with a file commit log before (DLedgerCommitLog.dividedCommitlogOffset) keeps its commitlog/
files below the first DLedger data file: the old files are read as a file commit log (the broker's
setRecoverPosition ended the last one with a BLANK filler), the DLedger files from the first one's start, which
is dividedCommitlogOffset (dledgerRecoverNormally/Abnormally: getFirstMappedFile().getFileFromOffset()).
"""
from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Iterator

from engine.broker.commitlog.log import (MISPLACED, CommitLog, ScanEntry, misplaced_reason, open_commitlog,
                                         quick_valid_size)
from engine.broker.commitlog.message import (BLANK, CORRUPT, LENGTH_MISMATCH, VALID, CheckResult, check_message)
from engine.broker.commitlog.segments import Segment
from engine.broker.dledger.entry import BAD, BODY_OFFSET, END, ENTRY, PADDING, check_entry
from engine.errors import InvalidArgumentError

_Q = struct.Struct(">q")


def entry_reason(off: int, why: str) -> str:
    return f"DLedger entry at {off} (message offset {off + BODY_OFFSET}): {why}"


class DLedgerLog(CommitLog):
    """The commit log of a DLedger store (read-only): the data files of dledger-<id>/data, and the old
    commitlog/ files below them when the store switched from a file commit log."""

    def __init__(self, data_dir: Path, old_dirs: list[Path], file_size: int | None, default_size: int | None = None):
        self.data_dir = Path(data_dir)
        super().__init__([*old_dirs, self.data_dir], file_size, writable=False, default_size=default_size)
        first = next((s for s in self.segments if self.is_entry_segment(s)), None)
        #: DLedgerCommitLog.dividedCommitlogOffset: the first DLedger data file's start (None: no DLedger file).
        self.divided = first.start if first is not None else None
        self.old_dirs = list(old_dirs)

    def is_entry_segment(self, seg: Segment) -> bool:
        """A DLedger data file (entries), not an old commit-log segment (records)."""
        return seg.path.parent == self.data_dir

    # ------------------------------------------------------------ lookups
    def check_at(self, offset: int, check_crc: bool = True, check_position: bool = True) -> CheckResult:
        seg = self.queue.find(offset)
        if seg is None or not self.is_entry_segment(seg):
            return super().check_at(offset, check_crc, check_position)
        buf = self.queue.buffer(seg)
        pos = offset - seg.start
        at = pos - BODY_OFFSET
        if at < 0:
            return CheckResult(CORRUPT, -1, reason=f"offset {offset} is inside the first entry header of DLedger file "
                                                   f"{seg.path.name}: not a message offset")
        ec = check_entry(buf, at, len(buf), seg.start, check_crc)
        if ec.kind != ENTRY:
            why = {PADDING: "padding", END: "no entry (end of data)"}.get(ec.kind, ec.reason)
            return CheckResult(CORRUPT, -1, reason=f"offset {offset} is not a message offset of the DLedger log: "
                                                   f"no entry header 48 bytes before it ({why})")
        r = check_message(buf, pos, at + ec.size, check_crc=check_crc)
        if r.status == VALID and r.size != ec.header.body_size:
            return CheckResult(CORRUPT, -1, r.record, reason=entry_reason(
                seg.start + at, f"its record is {r.size} bytes, its body {ec.header.body_size}"))
        if r.status == BLANK:
            return CheckResult(CORRUPT, -1, reason=entry_reason(seg.start + at, "its body is a BLANK filler"))
        if check_position and r.status == VALID and r.record.physical_offset != offset:
            return CheckResult(MISPLACED, r.size, r.record,
                               reason=misplaced_reason(offset, r.record.physical_offset, seg))
        return r

    def valid_at(self, offset: int, check_crc: bool = True):
        seg = self.queue.find(offset)
        if seg is not None and self.is_entry_segment(seg):
            buf = self.queue.buffer(seg)
            pos = offset - seg.start
            if pos >= BODY_OFFSET:
                ec = check_entry(buf, pos - BODY_OFFSET, len(buf), seg.start, check_crc)
                if ec.kind == ENTRY and quick_valid_size(buf, pos, pos - BODY_OFFSET + ec.size, check_crc) \
                        == ec.header.body_size and _Q.unpack_from(buf, pos + 28)[0] == offset:
                    return buf, pos
            return self.check_at(offset, check_crc)
        return super().valid_at(offset, check_crc)

    # ------------------------------------------------------------ walks
    def walk_segments(self, start: int | None, end: int | None, per_segment, **kw) -> Iterator:
        """CommitLog.walk_segments, from a message's offset: in a DLedger file the walk starts at its entry."""
        if start is not None:
            seg = self.queue.find(start)
            if seg is not None and self.is_entry_segment(seg) and start != seg.start:
                at = start - seg.start - BODY_OFFSET
                buf = self.queue.buffer(seg)
                ec = check_entry(buf, at, len(buf), seg.start, False) if at >= 0 else None
                if ec is None or ec.kind != ENTRY:
                    raise InvalidArgumentError(f"offset {start} is not a message offset of the DLedger log (no entry "
                                               "header 48 bytes before it)")
                start -= BODY_OFFSET
        return super().walk_segments(start, end, per_segment, **kw)

    def _scan_segment(self, seg: Segment, pos: int, last: bool, check_crc: bool, end, check_position: bool):
        if not self.is_entry_segment(seg):
            return (yield from super()._scan_segment(seg, pos, last, check_crc, end, check_position))
        buf = self.queue.buffer(seg)
        n = len(buf)
        name = seg.path.name
        base = seg.start
        while True:
            ec = check_entry(buf, pos, n, base, check_crc)
            eoff = base + pos
            if ec.kind == PADDING:
                yield ScanEntry(BLANK, eoff, ec.size, buf, pos, "DLedger padding entry at the end of the file", name)
                return False
            if ec.kind == END:
                if last:
                    return True
                yield ScanEntry(CORRUPT, eoff, -1, buf, pos, entry_reason(
                    eoff, "no padding entry before the end of a DLedger data file that is not the last"), name)
                return False
            if ec.kind == BAD:
                yield ScanEntry(CORRUPT, eoff, ec.size or -1, buf, pos, entry_reason(eoff, ec.reason), name)
                if not ec.size:
                    return last
                pos += ec.size  # sound but for its CRC fields: the next entry is where its size says
                continue
            rpos, roff, rend = pos + BODY_OFFSET, eoff + BODY_OFFSET, pos + ec.size
            if end is not None and roff >= end:
                return True
            body = ec.header.body_size
            size = quick_valid_size(buf, rpos, rend, check_crc)
            if size == body:
                stored = _Q.unpack_from(buf, rpos + 28)[0]
                if check_position and stored != roff:
                    yield ScanEntry(MISPLACED, roff, size, buf, rpos, misplaced_reason(roff, stored, seg), name)
                else:
                    yield ScanEntry(VALID, roff, size, buf, rpos, "", name)
                pos = rend
                continue
            r = check_message(buf, rpos, rend, check_crc=check_crc, read_body=check_crc)
            if r.status == LENGTH_MISMATCH and r.size == body:
                yield ScanEntry(LENGTH_MISMATCH, roff, r.size, buf, rpos, r.reason, name)
                pos = rend
                continue
            if r.status == VALID and r.size == body:  # the unusual shapes quick_valid_size leaves to check_message
                kind = MISPLACED if check_position and r.record.physical_offset != roff else VALID
                yield ScanEntry(kind, roff, r.size, buf, rpos, misplaced_reason(roff, r.record.physical_offset, seg)
                                if kind == MISPLACED else "", name)
                pos = rend
                continue
            why = r.reason if r.status != VALID else f"its record is {r.size} bytes, its body {body}"
            yield ScanEntry(CORRUPT, roff, -1, buf, rpos, entry_reason(eoff, why), name)
            pos = rend  # the entry is sound: the next one is where its size says

    def decode_segment(self, seg: Segment, buf, start: int = 0, window: int | None = None, **kw):
        """The bulk decoder over one file: entries' records for a DLedger data file (decode_entries), the records
        of an old commit-log segment otherwise."""
        if not self.is_entry_segment(seg):
            return super().decode_segment(seg, buf, start, window, **kw)
        return decode_entries(buf, seg.start, start, window, release=kw.get("release", True))

    def find_end(self, hint: int | None = None, check_crc: bool = False) -> int:
        """The end of the last entry of the last data file that holds data (where DLedger's recover ends the log
        when nothing is damaged: its processOffset)."""
        segs = self.segments
        if not segs:
            return 0
        seg = segs[self.data_end_index()]
        if not self.is_entry_segment(seg):
            return super().find_end(hint, check_crc)
        buf = self.queue.buffer(seg)
        n, pos = len(buf), 0
        while True:
            ec = check_entry(buf, pos, n, seg.start, False)
            if ec.kind == ENTRY:
                pos += ec.size
            elif ec.kind == PADDING:
                return seg.end
            else:
                return seg.start + pos

    def recovery_start_index(self) -> int:
        """The file DLedgerMmapFileStore.recover starts its walk from: the third file from the end, or an earlier
        one whose first entry is sound (the index check aside)."""
        segs = self.segments
        first = next((i for i, s in enumerate(segs) if self.is_entry_segment(s)), None)
        if first is None:
            return 0
        i = max(first, len(segs) - 3)
        while i > first:
            buf = self.queue.buffer(segs[i])
            if check_entry(buf, 0, len(buf), segs[i].start, False).kind == ENTRY:
                break
            i -= 1
        return i

    def recovery_end(self) -> tuple[int, str] | None:
        """Where DLedgerMmapFileStore.recover ends the log (its processOffset), and why: the entry walk from
        recovery_start_index with DLedger's checks (header, consecutive index, non-decreasing term; it reads no
        record and no CRC). None when there is no DLedger data file (the old file commit log is the log)."""
        segs = self.segments
        i = self.recovery_start_index()
        if not segs or not self.is_entry_segment(segs[i]):
            return None
        prev_index = prev_term = None
        for seg in segs[i:]:
            buf = self.queue.buffer(seg)
            n, pos = len(buf), 0
            while True:
                ec = check_entry(buf, pos, n, seg.start, False)
                off = seg.start + pos
                if ec.kind == PADDING:
                    break
                if ec.kind == END:
                    return off, "end of data"
                if ec.kind == BAD:
                    return off, entry_reason(off, ec.reason)
                h = ec.header
                if prev_index is not None and h.index != prev_index + 1:
                    return off, entry_reason(off, f"entry index {h.index} does not follow {prev_index}")
                if prev_term is not None and h.term < prev_term:
                    return off, entry_reason(off, f"term {h.term} is below the term {prev_term} before it")
                prev_index, prev_term = h.index, h.term
                pos += ec.size
            self.queue.release(seg)
        return segs[-1].end, "the padding entry of the last data file"

    def open_for_append(self, end: int) -> None:
        raise InvalidArgumentError("the DLedger commit log is read-only in rmqtool")


def decode_entries(buf, base: int, start: int = 0, window: int | None = None, release: bool = True,
                   check_crc: bool = True):
    """engine.broker.commitlog.records.decode_segment for a DLedger data file starting at log offset `base`:
    RecordBatches of the entries' records (positions are the records', entry + 48), then one SegmentEnd whose
    position is an entry's: BLANK at the padding entry (its size given), ZERO at the end of data, CORRUPT at a
    damaged entry or at an entry whose body is not one whole record (the reason given as is, `exact`; its size
    given when the entry's size is sound, so that a reader may go on after it: engine.broker.commitlog.logrun).
    check_crc=False: chainCrc and bodyCrc are not looked at (neither DLedger nor the broker reads them)."""
    import numpy as np

    from engine.broker.commitlog.message import MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2
    from engine.broker.commitlog.records import (BLANK as END_BLANK, CORRUPT as END_CORRUPT, SCAN_WINDOW,
                                                 ZERO as END_ZERO, BufferViews, SegmentEnd, decode_positions)

    window = window or SCAN_WINDOW
    n = len(buf)
    pos = start
    if BODY_OFFSET <= pos < n and check_entry(buf, pos, n, base, False).kind == BAD \
            and check_entry(buf, pos - BODY_OFFSET, n, base, False).kind == ENTRY:
        pos -= BODY_OFFSET  # a message's offset (a record never starts like an entry): walk from its entry
    if n == 0 or pos >= n:
        yield SegmentEnd(END_ZERO, pos)
        return
    views = BufferViews(buf)
    madvise = getattr(buf, "madvise", None) if release else None
    page = mmap.PAGESIZE
    released = (pos // page) * page
    i32 = views.i32
    try:
        while True:
            starts, bodies = [], []
            limit = pos + window
            end = None
            while pos < limit:
                ec = check_entry(buf, pos, n, base, check_crc)
                if ec.kind == ENTRY:
                    starts.append(pos + BODY_OFFSET)
                    bodies.append(ec.header.body_size)
                    pos += ec.size
                elif ec.kind == PADDING:
                    end = SegmentEnd(END_BLANK, pos, size=ec.size, exact=True)
                    break
                elif ec.kind == END:
                    end = SegmentEnd(END_ZERO, pos)
                    break
                else:  # size: a sound entry but for its CRC fields, which a reader may step over
                    end = SegmentEnd(END_CORRUPT, pos, entry_reason(base + pos, ec.reason), size=ec.size or None,
                                     exact=True)
                    break
            if starts:
                s = np.array(starts, dtype=np.int64)
                body = np.array(bodies, dtype=np.int64)
                whole = body >= 8
                magic = i32[np.where(whole, s + 4, 0)]
                total = i32[np.where(whole, s, 0)]
                good = whole & ((magic == MESSAGE_MAGIC_CODE) | (magic == MESSAGE_MAGIC_CODE_V2)) & (total == body)
                if not good.all():
                    j = int(np.flatnonzero(~good)[0])
                    at = int(s[j]) - BODY_OFFSET
                    r = check_message(buf, int(s[j]), at + int(body[j]) + BODY_OFFSET, check_crc=False,
                                      read_body=False)
                    why = r.reason if r.status not in (VALID, BLANK) else (
                        "its body is a BLANK filler" if r.status == BLANK else
                        f"its record is {r.size} bytes, its body {int(body[j])}")
                    end = SegmentEnd(END_CORRUPT, at, entry_reason(base + at, why), size=int(body[j]) + BODY_OFFSET,
                                     exact=True)
                    s = s[:j]
                if len(s):
                    batch, cut = decode_positions(views, s)
                    if len(batch):
                        yield batch
                    if cut is not None:
                        at = cut - BODY_OFFSET
                        k = int(np.flatnonzero(s == cut)[0])
                        yield SegmentEnd(END_CORRUPT, at, entry_reason(
                            base + at, "its record's fields run past its TOTALSIZE (or a negative topic length)"),
                            size=int(body[k]) + BODY_OFFSET, exact=True)
                        return
            if end is not None:
                yield end
                return
            if madvise is not None:
                upto = (pos // page) * page
                if upto > released:
                    madvise(mmap.MADV_DONTNEED, released, upto - released)
                    released = upto
    finally:
        views.close()


def open_log(config, writable: bool = False, mode=None) -> CommitLog:
    """The store's commit log as its mode says (engine.broker.mode.detect_mode): a DLedgerLog on a DLedger store
    (its data files are as big as mappedFileSizeCommitLog says, or as the files say when it was not given), the
    file commit log (open_commitlog) otherwise."""
    from engine.broker.mode import DLEDGER, detect_mode

    if mode is None:
        mode = detect_mode(config)
    if mode.commitlog != DLEDGER or mode.dledger_data_dir is None:
        return open_commitlog(config, writable=writable)
    if writable:
        raise InvalidArgumentError("the DLedger commit log is read-only in rmqtool")
    size = config.mappedFileSizeCommitLog if config.commitLogSizeGiven else None
    old = list(config.commitlog_dirs) if mode.old_file_commitlog else []
    return DLedgerLog(mode.dledger_data_dir, old, size, default_size=config.mappedFileSizeCommitLog)
