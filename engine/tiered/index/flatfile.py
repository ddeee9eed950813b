"""The INDEX flat file (format §9.1, §9.7): the compacted tiered index files IndexStoreService uploaded, one per
segment of the pseudo-queue `<broker>/rmq_sys_INDEX/0`, file type INDEX, read as a restarted broker reads them.

FlatAppendFile.recover takes the segments from `indexFileSegmentTable` sorted by base offset, each with the size
(commit position) and the min/max timestamps its metadata entry holds; unlike COMMIT_LOG and CONSUME_QUEUE, no
segment's size is corrected from its file (recoverFileSize skips INDEX). A segment answers queries as an UPLOAD
IndexStoreFile: timestamp = the entry's beginTimestamp, slot count = the configured one (format pitfall 40), reads
by PosixFileSegment's rules (a position outside what is committed fails, a read is cut to what is committed, bytes
past the end of the file read as zeros).

Besides reading, `index_segment_findings` checks what a reader relies on: every listed segment has its file, of
the listed size, with a compacted header and slot table that agree with the metadata and the geometry.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from engine.errors import InvalidArgumentError
from engine.fsutil import pread_fully
from engine.tiered.flat.layout import (INDEX, INDEX_TOPIC, TieredLayout, cluster_dir_name, file_path,
                                       offset_to_file_name, segment_name_problem)
from engine.tiered.flat.metadata import FileSegmentMetadata, TieredMetadata
from engine.tiered.flat.segments import FlatAppendFile, Segment
from engine.tiered.index.format import (COMPACT_INDEX_ITEM_SIZE, END_MAGIC_CODE, HASH_SLOT_SIZE, HEADER,
                                        HEADER_SIZE, hex32)

INDEX_QUEUE_ID = 0
# The kinds of index_segment_findings' problems (stable names: `rmqtool doctor` says per kind what the broker does).
INDEX_SEGMENT = "tiered-index-segment"          # a segment against its metadata entry (file, size, header, base)
INDEX_GEOMETRY = "tiered-index-geometry"        # compacted with another slot count than the broker reads with


def index_file_path(broker: str) -> str:
    """MessageStoreUtil.getIndexFilePath: the metadata key of the INDEX flat file."""
    return file_path(broker, INDEX_TOPIC, INDEX_QUEUE_ID)


@dataclass
class IndexSegment:
    """One uploaded index file as the broker holds it after a restart."""

    segment: Segment          # base offset, committed size (metadata), min/max timestamp, path, file length
    entry: FileSegmentMetadata

    @property
    def timestamp(self) -> int:
        """The file's key in IndexStoreService's table: the segment's minTimestamp."""
        return self.segment.min_ts

    @property
    def end_timestamp(self) -> int:
        return self.segment.max_ts


def _segment_dir(layout: TieredLayout, entry_path: str) -> Path:
    """PosixFileSegment's directory for a metadata path: <root>/<md5>_<cluster>/<path>/INDEX; a path that would
    leave the tier is refused."""
    parts = entry_path.split("/")
    if not entry_path or any(p in ("", ".", "..") or "\0" in p for p in parts):
        raise InvalidArgumentError(f"INDEX segment path {entry_path!r} in the tiered metadata cannot be a path "
                                   "under the tier")
    return layout.root / cluster_dir_name(layout.cluster) / Path(*parts) / "INDEX"


def _file_length(p: Path) -> Optional[int]:
    try:
        st = os.lstat(p)
    except OSError:
        return None
    return None if os.path.islink(p) else st.st_size


def index_segments(layout: TieredLayout, metadata: Optional[TieredMetadata]) -> list[IndexSegment]:
    """FlatAppendFile(INDEX).recover: the entries of `<broker>/rmq_sys_INDEX/0`, sorted by base offset, sizes and
    times as listed (recoverFileSize does nothing for INDEX); the file of each is the entry's own path."""
    if metadata is None:
        return []
    out = []
    for e in metadata.segment_entries(index_file_path(layout.broker), INDEX):
        p = _segment_dir(layout, e.path or index_file_path(layout.broker)) / offset_to_file_name(e.base_offset)
        out.append(IndexSegment(Segment(INDEX, e.base_offset, e.size, e.begin_timestamp, e.end_timestamp, p,
                                        _file_length(p), e.size), e))
    return out


def index_flat_file(segments: list[IndexSegment]) -> FlatAppendFile:
    """The read side of the INDEX flat file (close it when done)."""
    return FlatAppendFile(INDEX, [s.segment for s in segments])


def first_slot_start(seg: IndexSegment) -> Optional[int]:
    """Slot 0's itemsStart (= 28 + 8 * the slot count of the file that was compacted), read from the file; None
    when the file is missing or too short."""
    if not seg.segment.file_len or seg.segment.file_len < HEADER_SIZE + 4:
        return None
    fd = os.open(seg.segment.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        raw = pread_fully(fd, 4, HEADER_SIZE)
    finally:
        os.close(fd)
    return int.from_bytes(raw, "big", signed=True) if len(raw) == 4 else None


def slot_count_of(seg: IndexSegment) -> Optional[int]:
    """The slot count a segment was compacted with (format §9.4: slot 0's items start right after the table)."""
    start = first_slot_start(seg)
    if start is None or start < HEADER_SIZE + HASH_SLOT_SIZE or (start - HEADER_SIZE) % HASH_SLOT_SIZE:
        return None
    return (start - HEADER_SIZE) // HASH_SLOT_SIZE


def index_segment_findings(layout: TieredLayout, segments: list[IndexSegment], hash_slot_num: int
                           ) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    """(problems as (kind, file, text), notes as (file, text)) of the INDEX flat file: missing or short files, base
    offsets that do not follow each other, headers and slot tables that disagree with the metadata or the
    configured slot count. The items themselves are checked by the compacted-file check
    (engine.tiered.index.checks)."""
    problems: list[tuple[str, str, str]] = []
    notes: list[tuple[str, str]] = []
    expect_base = segments[0].segment.base if segments else 0
    for s in segments:
        seg = s.segment
        rel = layout.rel(seg.path)
        if s.entry.path != index_file_path(layout.broker):
            notes.append((rel, f"metadata path {s.entry.path!r} is not {index_file_path(layout.broker)!r}"))
        if seg.base != expect_base:
            problems.append((INDEX_SEGMENT, rel, f"base offset {seg.base} does not follow the previous segment "
                             f"(expected {expect_base}: each uploaded file starts where the previous one ended)"))
        expect_base = seg.base + seg.size
        if seg.file_len is None:
            problems.append((INDEX_SEGMENT, rel, f"file missing (metadata lists {seg.size} bytes; the broker reads "
                             "zeros)"))
            continue
        if seg.file_len < seg.size:
            problems.append((INDEX_SEGMENT, rel, f"file is {seg.file_len} bytes, the metadata lists {seg.size} (the "
                             "broker reads zeros past the end)"))
        elif seg.file_len > seg.size:
            notes.append((rel, f"file is {seg.file_len} bytes, the metadata lists {seg.size}: the broker reads only "
                               f"the first {seg.size}"))
        if seg.size == 0:
            notes.append((rel, "empty upload (an index file without items): answers nothing"))
            continue
        problems += [(kind, rel, p) for kind, p in _header_problems(s, hash_slot_num)]
    return problems, notes


def _header_problems(s: IndexSegment, hash_slot_num: int) -> list[tuple[str, str]]:
    seg = s.segment
    if seg.size < HEADER_SIZE or (seg.file_len or 0) < HEADER_SIZE:
        return [(INDEX_SEGMENT, f"{min(seg.size, seg.file_len or 0)} bytes: shorter than the {HEADER_SIZE}-byte "
                 "header")]
    fd = os.open(seg.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        raw = pread_fully(fd, HEADER_SIZE + 4, 0)
    finally:
        os.close(fd)
    magic, begin, end, _slots_used, items = HEADER.unpack_from(raw, 0)
    out = []
    if magic != END_MAGIC_CODE:
        out.append((INDEX_SEGMENT, f"magic {hex32(magic)} is not the compacted END magic {hex32(END_MAGIC_CODE)}"))
    if begin != seg.min_ts:
        out.append((INDEX_SEGMENT, f"header beginTimestamp {begin} differs from the metadata's beginTimestamp "
                    f"{seg.min_ts} (the broker times the items from the metadata's)"))
    if end != seg.max_ts:
        out.append((INDEX_SEGMENT, f"header endTimestamp {end} differs from the metadata's endTimestamp {seg.max_ts}"))
    slots = slot_count_of(s)
    if slots is None:
        out.append((INDEX_SEGMENT, "slot 0 does not start right after a slot table: not a compacted index file"))
    elif slots != hash_slot_num:
        out.append((INDEX_GEOMETRY, f"compacted with {slots} hash slots, read with {hash_slot_num} "
                    "(tieredStoreIndexFileMaxHashSlotNum): the broker looks in the wrong slots"))
    elif seg.size != HEADER_SIZE + HASH_SLOT_SIZE * slots + COMPACT_INDEX_ITEM_SIZE * items and items >= 0:
        written = (seg.size - HEADER_SIZE - HASH_SLOT_SIZE * slots) / COMPACT_INDEX_ITEM_SIZE
        if written != int(written) or written > items:
            out.append((INDEX_SEGMENT, f"{seg.size} bytes do not hold whole 28-byte items after {slots} slots "
                        f"(indexItemCount {items})"))
    return out


def orphan_index_files(layout: TieredLayout, segments: list[IndexSegment]) -> list[tuple[str, str]]:
    """Files in the INDEX directory the metadata does not list (the broker never reads them), and bad names."""
    d = _segment_dir(layout, index_file_path(layout.broker))
    if not d.is_dir():
        return []
    listed = {s.segment.path.name for s in segments}
    out = []
    for e in sorted(os.scandir(d), key=lambda e: e.name):
        if e.name in listed:
            continue
        why = segment_name_problem(e.name)
        out.append((layout.rel(Path(e.path)), why or "not listed in the metadata: the broker does not read it"))
    return out
