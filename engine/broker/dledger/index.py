"""DLedger's index files and checkpoint, and the whole DLedger log checked entry by entry (doctor; format §11.3).

The index (dledger-<id>/index, MmapFileList of DLedgerConfig.mappedFileSizeForEntryIndex = 5 Mi units of 32 bytes)
holds the unit of entry i at offset i * 32: magic, pos, size, index, term (DLedgerEntryCoder.encodeIndex).
DLedgerMmapFileStore.recover compares each entry it walks with its unit; at the first that differs it rebuilds
the index from there (the data wins), so a wrong unit costs the broker a rebuild, never data. The checkpoint
(dledger-<id>/checkpoint, Java properties) holds endIndex and committedIndex; the broker's max offset is the
committed entry's end (DLedgerCommitLog.getMaxOffset: getCommittedPos) once the checkpoint is read.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from engine.broker.commitlog.message import VALID, check_message
from engine.broker.dledger.entry import (BAD, BODY_OFFSET, END, ENTRY, INDEX_UNIT, INDEX_UNIT_SIZE, PADDING,
                                         check_entry)
from engine.broker.dledger.log import DLedgerLog, entry_reason
from engine.broker.layout import SEGMENT_NAME
from engine.findings import Finding
from engine.fsutil import data_ranges, pread_fully

CHECKPOINT_FILE = "checkpoint"


#: Bytes of an index file read at a time: a 160 MiB index file is never read whole.
INDEX_BLOCK = 1 << 20


class IndexFiles:
    """The index files of one DLedger member, read-only: units by entry index, a block at a time."""

    def __init__(self, index_dir: Path | None):
        self.dir = index_dir
        self.files: list[tuple[int, Path, int]] = []
        if index_dir is not None and index_dir.is_dir():
            for e in sorted(os.scandir(index_dir), key=lambda e: e.name):
                if SEGMENT_NAME.match(e.name) and e.is_file(follow_symlinks=False):
                    self.files.append((int(e.name), Path(e.path), e.stat().st_size))
        self._block: tuple[int, int, bytes] | None = None   # (file start, block start, bytes)

    def _read(self, start: int, path: Path, at: int, n: int) -> bytes:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            return pread_fully(fd, n, at)
        finally:
            os.close(fd)

    def unit(self, index: int) -> tuple[int, int, int, int, int] | None:
        """(magic, pos, size, index, term) of entry `index`'s unit, or None where no file holds it."""
        off = index * INDEX_UNIT_SIZE
        for start, path, size in self.files:
            if start <= off and off + INDEX_UNIT_SIZE <= start + size:
                rel = off - start
                b = self._block
                if b is None or b[0] != start or not b[1] <= rel < b[1] + len(b[2]) - INDEX_UNIT_SIZE + 1:
                    at = rel - rel % INDEX_BLOCK
                    b = self._block = (start, at, self._read(start, path, at, min(INDEX_BLOCK + INDEX_UNIT_SIZE,
                                                                                   size - at)))
                if rel - b[1] + INDEX_UNIT_SIZE > len(b[2]):
                    return None
                return INDEX_UNIT.unpack_from(b[2], rel - b[1])
        return None

    def last_index(self) -> int:
        """The highest entry index with a non-zero unit (-1: none): where the index files end. Holes are not
        read; the data ranges are read a block at a time from the end."""
        for start, path, size in reversed(self.files):
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            try:
                for a, b in reversed(data_ranges(fd, 0, size)):
                    hi = b
                    while hi > a:
                        lo = max(a, hi - INDEX_BLOCK)
                        lo -= lo % INDEX_UNIT_SIZE
                        data = pread_fully(fd, hi - lo, lo)
                        k = len(data.rstrip(b"\0"))
                        if k:
                            return (start + lo + (k - 1) // INDEX_UNIT_SIZE * INDEX_UNIT_SIZE) // INDEX_UNIT_SIZE
                        hi = lo
            finally:
                os.close(fd)
        return -1


def read_checkpoint(dledger_dir: Path | None) -> dict[str, int]:
    """endIndex and committedIndex of DLedger's checkpoint (persistCheckPoint), the ones that parse."""
    out: dict[str, int] = {}
    if dledger_dir is None:
        return out
    try:
        text = (dledger_dir / CHECKPOINT_FILE).read_text("latin-1")
    except OSError:
        return out
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            k, v = line.split("=", 1)
            try:
                out[k.strip()] = int(v.strip())
            except ValueError:
                pass
    return out


@dataclass
class DLedgerReport:
    """The DLedger log walked whole: entries, records, index units."""
    entries: int = 0
    records: int = 0
    first_index: int | None = None
    last_index: int | None = None
    min_offset: int = 0
    end_offset: int = 0
    divided_offset: int | None = None
    committed_index: int | None = None
    committed_offset: int | None = None
    findings: list[Finding] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"entries": self.entries, "records": self.records, "firstIndex": self.first_index,
                "lastIndex": self.last_index, "minOffset": self.min_offset, "endOffset": self.end_offset,
                "dividedCommitlogOffset": self.divided_offset, "committedIndex": self.committed_index,
                "committedOffset": self.committed_offset}


def committed_offset(index: IndexFiles, committed: int | None, last_index: int | None) -> int | None:
    """DLedgerMmapFileStore.updateCommittedIndex at start-up: the end (pos + size) of the committed entry, the
    last one at most; None when the checkpoint names none or its unit is missing."""
    if committed is None or committed < 0 or last_index is None:
        return None
    u = index.unit(min(committed, last_index))
    return None if u is None else u[1] + u[2]


MAX_FINDINGS = 50


def check_log(cl: DLedgerLog, dledger_dir: Path | None, rel, check_crc: bool = True,
              whole: bool = True) -> DLedgerReport:
    """Every entry of the DLedger data files checked as DLedger's recover checks it (header, consecutive
    index, non-decreasing term, its index unit) and its record as the broker's dispatch checks it (CRC when
    check_crc). Not `whole`: from the file DLedger's recover starts at (the third from the end), as the broker's
    start-up reads it. `rel(path)` names a file as findings name it."""
    rep = DLedgerReport(divided_offset=cl.divided, min_offset=cl.min_offset)
    index = IndexFiles(dledger_dir / "index" if dledger_dir is not None else None)
    add = rep.findings.append
    first = 0 if whole else cl.recovery_start_index()
    segs = [s for s in cl.segments[first:] if cl.is_entry_segment(s)]
    if segs:
        rep.min_offset = min(rep.min_offset, segs[0].start) if whole else segs[0].start
    last_data = cl.data_end_index()
    prev_index = prev_term = None
    unit_mismatch = False
    ended = False
    for k, seg in enumerate(segs):
        if ended:
            break
        buf = cl.queue.buffer(seg)
        n = len(buf)
        pos = 0
        last = cl.segments.index(seg) >= last_data
        while True:
            ec = check_entry(buf, pos, n, seg.start, check_crc)
            off = seg.start + pos
            if ec.kind == PADDING:
                rep.end_offset = seg.end
                break
            if ec.kind == END:
                if not last:
                    add(Finding("dledger-no-padding", "error", rel(seg.path), pos, entry_reason(
                        off, "the data ends before the end of a file that is not the last (no padding entry)"),
                        "ends its log here at recovery (DLedgerMmapFileStore.recover stops at size 0) and "
                        "truncates the files after it"))
                rep.end_offset = off
                ended = True
                break
            if ec.kind == BAD and ec.size:  # chainCrc/bodyCrc not as DLedger writes them: DLedger never reads them
                add(Finding("dledger-entry-crc", "error", rel(seg.path), pos, entry_reason(off, ec.reason),
                            "reads the entry as usual (DLedger checks neither field); the header holds bytes DLedger "
                            "did not write there, so the entry itself may be damaged"))
                ec = check_entry(buf, pos, n, seg.start, False)
            if ec.kind == BAD:
                add(Finding("dledger-damaged-entry", "error", rel(seg.path), pos, entry_reason(off, ec.reason),
                                   "ends its log at this entry at recovery: every message from offset "
                                   f"{off + BODY_OFFSET} on is lost (DLedgerMmapFileStore.recover)"))
                rep.end_offset = off
                ended = True
                break
            h = ec.header
            if prev_index is not None and h.index != prev_index + 1:
                add(Finding("dledger-index-sequence", "error", rel(seg.path), pos, entry_reason(
                    off, f"entry index {h.index} does not follow {prev_index}"),
                    "ends its log at this entry at recovery (DLedgerMmapFileStore.recover)"))
                rep.end_offset = off
                ended = True
                break
            if prev_term is not None and h.term < prev_term:
                add(Finding("dledger-term-order", "error", rel(seg.path), pos, entry_reason(
                    off, f"term {h.term} is below the term {prev_term} before it"),
                    "ends its log at this entry at recovery (DLedgerMmapFileStore.recover)"))
                rep.end_offset = off
                ended = True
                break
            if rep.first_index is None:
                rep.first_index = h.index
            prev_index, prev_term = h.index, h.term
            rep.entries += 1
            u = index.unit(h.index)
            want = (ec.header.magic, off, ec.size, h.index, h.term)
            if not unit_mismatch and u != want:
                unit_mismatch = True
                got = "missing" if u is None else f"magic {u[0]}, pos {u[1]}, size {u[2]}, index {u[3]}, term {u[4]}"
                add(Finding("dledger-index-unit", "warning", "index", h.index * INDEX_UNIT_SIZE, entry_reason(
                    off, f"its index unit (entry index {h.index}) is {got}, not magic {want[0]}, pos {off}, size "
                         f"{ec.size}, index {h.index}, term {h.term}"),
                    "rebuilds the index from this entry on at recovery (the data wins); nothing is lost"))
            r = check_message(buf, pos + BODY_OFFSET, pos + ec.size, check_crc=check_crc, read_body=check_crc)
            if r.status != VALID or r.size != h.body_size or r.record.physical_offset != off + BODY_OFFSET:
                why = r.reason if r.status != VALID else (
                    f"its record is {r.size} bytes, its body {h.body_size}" if r.size != h.body_size else
                    f"its record says PHYSICALOFFSET {r.record.physical_offset}")
                if len(rep.findings) < MAX_FINDINGS:
                    add(Finding("dledger-damaged-record", "error", rel(seg.path), pos + BODY_OFFSET,
                                       f"the message at offset {off + BODY_OFFSET} is not a valid record ({why})",
                                       "keeps the entry (DLedger does not read the record) but does not dispatch "
                                       "the message: consumers and queries do not see it"))
            else:
                rep.records += 1
            pos += ec.size
            rep.end_offset = seg.start + pos
        cl.queue.release(seg)  # one data file mapped at a time
    rep.last_index = prev_index
    if not rep.entries and segs:
        rep.end_offset = segs[0].start
    cp = read_checkpoint(dledger_dir)
    rep.committed_index = cp.get("committedIndex")
    rep.committed_offset = committed_offset(index, rep.committed_index, rep.last_index)
    extra = index.last_index()
    if rep.last_index is not None and extra > rep.last_index:
        add(Finding("dledger-index-after-end", "info", "index", (rep.last_index + 1) * INDEX_UNIT_SIZE,
                           f"the DLedger index holds units up to entry {extra}, the data only up to entry "
                           f"{rep.last_index}", "truncates the index to the data at recovery"))
    return rep


__all__ = ["CHECKPOINT_FILE", "DLedgerReport", "IndexFiles", "check_log", "committed_offset",
           "read_checkpoint"]
