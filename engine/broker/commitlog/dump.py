"""dump-commitlog's filters (as kafka-dump-log's): a topic, a store-time range, a commit-log offset range, chosen
segment files, a maximum trusted record size, and the bodies written one file per message.

Streamed: the log is read a window of records at a time (engine.broker.commitlog.logrun.scan_runs) and each RecordRun is
cut down with numpy masks, so memory does not grow with the number of messages. The offset range seeks: the walk
starts at --from-offset (or the first chosen file) and stops at the first entry at or past --to-offset.
Damage met inside the range (CORRUPT, MISPLACED, GAP, ...) is passed on whatever the topic and time filters say:
it belongs to no topic and has no trustworthy time.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from engine.broker.commitlog.log import ScanEntry
from engine.broker.layout import SEGMENT_NAME
from engine.broker.topics import require_topic
from engine.broker.commitlog.logrun import RecordRun, scan_runs
from engine.broker.commitlog.compression import COMPRESSED_FLAG, decode_body
from engine.broker.commitlog.message import BLANK, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, VALID
from engine.errors import InvalidArgumentError
from engine.fsutil import write_fully
from engine.java.lang import INT_MAX, LONG_MAX


@dataclass
class DumpFilter:
    """What dump-commitlog shows. Offsets: [from_offset, to_offset); times: [begin, end], both inclusive."""
    topic: str | None = None
    begin: int = 0
    end: int = LONG_MAX
    from_offset: int | None = None
    to_offset: int | None = None
    files: list[str] | None = None          # segment names (or paths of segment files of the store)
    max_message_size: int | None = None
    check_crc: bool = True
    from_option: str = "--from-offset"     # the option that gave from_offset (--from is its alias), for errors

    def check(self) -> None:
        """InvalidArgumentError for values that cannot make a range (checked before the store is opened)."""
        for name, v in ((self.from_option, self.from_offset), ("--to-offset", self.to_offset)):
            if v is not None and not 0 <= v < 2**63:
                raise InvalidArgumentError(f"{name} {v} is negative" if v < 0 else
                                           f"{name} {v} is out of range: it must fit a Java long")
        if self.from_offset is not None and self.to_offset is not None and self.to_offset <= self.from_offset:
            raise InvalidArgumentError(f"--to-offset {self.to_offset} is not above --from-offset {self.from_offset}: "
                                       "the range is empty")
        if self.begin > self.end:
            raise InvalidArgumentError(f"--begin {self.begin} is after --end {self.end}")
        if self.max_message_size is not None and not 0 < self.max_message_size <= INT_MAX:
            raise InvalidArgumentError(f"--max-message-size {self.max_message_size} is out of range 1..{INT_MAX}")
        if self.topic is not None and not self.topic:
            raise InvalidArgumentError("--topic is empty")

    @property
    def filters_records(self) -> bool:
        return self.topic is not None or self.begin > 0 or self.end < LONG_MAX


def select_segments(cl, names: list[str]) -> list:
    """The commit-log segments named (a 20-digit name, or the path of one of the store's segment files), in log
    order. Anything else is refused: a name never becomes a path of its own."""
    by_name = {s.path.name: s for s in cl.segments}
    dirs = {os.path.realpath(s.path.parent) for s in cl.segments}
    chosen = {}
    for raw in names:
        for text in (t.strip() for t in raw.split(",")):
            if not text:
                continue
            p = Path(text)
            ok = SEGMENT_NAME.match(p.name) and p.name in by_name and (
                len(p.parts) == 1 or os.path.realpath(p.parent) in dirs)
            if not ok:
                raise InvalidArgumentError(f"--files {text}: not a commit-log segment of this store ({_listing(cl)})")
            chosen[p.name] = by_name[p.name]
    if not chosen:
        raise InvalidArgumentError("--files names no segment")
    return sorted(chosen.values(), key=lambda s: s.start)


def _listing(cl) -> str:
    segs = cl.segments
    if not segs:
        return "it has no segment files"
    if len(segs) <= 3:
        return "its segments: " + ", ".join(s.path.name for s in segs)
    return f"its {len(segs)} segments run from {segs[0].path.name} to {segs[-1].path.name}"


def dump_entries(store, flt: DumpFilter) -> Iterator[RecordRun | ScanEntry]:
    """The entries of the commit log that pass the filter, in log order: RecordRuns of VALID records, and the
    other ScanEntries (BLANK fillers and damage) inside the offset range and the chosen files. The arguments are
    checked now (InvalidArgumentError); the entries are read as the returned iterator is consumed."""
    flt.check()
    if getattr(store, "layout", None) is not None:  # segment files on their own (SegmentFiles) name no topics
        require_topic(store.layout, flt.topic)
    cl = store.commitlog
    if flt.from_offset is not None:
        r = cl.check_at(flt.from_offset, check_crc=False, check_position=False)
        if r.status not in (VALID, BLANK):
            raise InvalidArgumentError(f"--from-offset {flt.from_offset} is not a record boundary: {r.reason}"
                                       f"{_boundaries_near(cl, flt.from_offset)}")
    if flt.files:
        spans = [(s.start, s.end) for s in select_segments(cl, flt.files)]
    else:
        spans = [(None, None)]
    ranges = []
    for start, stop in spans:
        a, b = _bound(max, start, flt.from_offset), _bound(min, stop, flt.to_offset)
        if a is None or b is None or a < b:  # else the offset range misses this file
            ranges.append((a, b))
    return (e for a, b in ranges for e in _walk(cl, a, b, flt))


def _bound(pick, x: int | None, y: int | None) -> int | None:
    """pick(x, y), where None is no bound."""
    return y if x is None else x if y is None else pick(x, y)


def _boundaries_near(cl, offset: int) -> str:
    """For the error of a --from-offset inside a record: the record starts on either side of it, found by
    decoding its segment from the start up to it (one segment at most, never the log before it)."""
    from engine.broker.commitlog.records import SegmentEnd

    seg = cl.queue.find(offset)
    if seg is None:
        return ""
    buf = cl.queue.buffer(seg)
    target, before = offset - seg.start, None
    for item in cl.decode_segment(seg, buf, 0):
        if isinstance(item, SegmentEnd):
            break
        pos = item.pos
        after = pos[pos > target]
        prior = pos[pos <= target]
        if len(prior):
            before = int(prior[-1])
        if len(after):
            return f" (records start at {seg.start + before} and {seg.start + int(after[0])})" if before is not None \
                else f" (the next record starts at {seg.start + int(after[0])})"
    last = f"the last record of its segment starts at {seg.start + before}; " if before is not None else ""
    return f" ({last}the next segment starts at {seg.end})"


def _walk(cl, start: int | None, stop: int | None, flt: DumpFilter) -> Iterator[RecordRun | ScanEntry]:
    """scan_runs from start, cut at stop (exclusive), filtered."""
    topic = flt.topic.encode("utf-8") if flt.topic is not None else None
    for e in scan_runs(cl, start, check_crc=flt.check_crc, max_size=flt.max_message_size):
        if isinstance(e, RecordRun):
            run, past = _cut(e, stop)
            if flt.filters_records and len(run):
                run = _filtered(run, topic, flt.begin, flt.end)
            if len(run):
                yield run
            if past:
                return
            continue
        if stop is not None and e.offset >= stop:
            return
        yield e


def _cut(run: RecordRun, stop: int | None) -> tuple[RecordRun, bool]:
    """The records of the run that start before stop, and whether the walk has passed stop."""
    if stop is None:
        return run, False
    offs = run.seg_start + run.batch.pos
    keep = offs < stop
    if keep.all():
        return run, False
    n = int(np.count_nonzero(keep))
    return run.head(n), True


def _filtered(run: RecordRun, topic: bytes | None, begin: int, end: int) -> RecordRun:
    b = run.batch
    mask = (b.store_ts >= begin) & (b.store_ts <= end)
    if topic is not None:
        mask &= b.topic_len == len(topic)
        if mask.any():
            view = np.frombuffer(run.buf, dtype=np.uint8)
            pos = b.topic_pos[mask]
            same = np.ones(len(pos), dtype=bool)
            for j, byte in enumerate(topic):  # one vector compare per topic byte (at most 127 for a V1 topic)
                same &= view[pos + j] == byte
            del view  # no export of the mapping may outlive the call: the segment is unmapped after the walk
            mask[np.flatnonzero(mask)[~same]] = False
    if mask.all():
        return run
    idx = np.flatnonzero(mask)
    return RecordRun(run.seg_start, run.segment, run.buf, b.select(mask), [run.bodies[i] for i in idx.tolist()])


# ------------------------------------------------------------------------------------------- segment files alone


def open_dump_source(config, files: list[str] | None = None, file_size: int | None = None):
    """What dump-commitlog reads: the store (read-only), or with `files` and no config, those segment files on
    their own (SegmentFiles). Close it (a context manager)."""
    if config is None:
        return SegmentFiles(files or [], file_size)
    from engine.broker.store import MessageStore

    return MessageStore(config)


class SegmentFiles:
    """Commit-log segment files read on their own, outside any store (dump-commitlog --files without --store, as
    kafka-dump-log --files reads a segment): each file starts at the offset its 20-digit name says (else at its
    first record's PHYSICALOFFSET), and the segment size is the file's size. Read-only; a context manager with
    what dump_entries needs of a store (commitlog, problems)."""

    def __init__(self, names: list[str], file_size: int | None = None):
        from engine.broker.commitlog.log import CommitLog

        files = []
        for raw in names:
            for text in (t.strip() for t in raw.split(",")):
                if text:
                    p = Path(os.path.expanduser(text))
                    files.append((_segment_start(p), p))
        if not files:
            raise InvalidArgumentError("--files names no segment")
        self.paths = [p for _, p in files]
        self.root = self.paths[0].parent
        self.commitlog = CommitLog(sorted({p.parent for p in self.paths}), file_size, files=files)

    @property
    def problems(self):
        return list(self.commitlog.problems)

    def protected_dirs(self) -> list[Path]:
        return sorted({p.parent for p in self.paths})

    def close(self) -> None:
        self.commitlog.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _segment_start(p: Path) -> int:
    """Where a segment file starts in the commit log: its 20-digit name, else its first record's PHYSICALOFFSET."""
    try:
        st = os.stat(p)
    except OSError as e:
        raise InvalidArgumentError(f"--files {p}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InvalidArgumentError(f"--files {p}: not a regular file")
    if SEGMENT_NAME.match(p.name):
        return int(p.name)
    with open(p, "rb") as fh:
        head = fh.read(36)
    if len(head) == 36 and int.from_bytes(head[4:8], "big") in (MESSAGE_MAGIC_CODE & 0xFFFFFFFF,
                                                                MESSAGE_MAGIC_CODE_V2 & 0xFFFFFFFF):
        return int.from_bytes(head[28:36], "big", signed=True)
    raise InvalidArgumentError(f"--files {p}: cannot tell where this segment starts (its name is not a 20-digit "
                               "offset and it does not begin with a message): name it by its start offset")


# ------------------------------------------------------------------------------------------- --body-dir


class BodyDir:
    """--body-dir: one file per message, named by its 20-digit commit-log offset (`.body`), holding the body as
    the consumer sees it (compressed bodies decoded; one that does not decode is written as stored to `.stored`
    instead). The directory must lie outside the store and be empty or new;
    files are created exclusively, so nothing is ever overwritten."""

    def __init__(self, path: Path, roots: list[Path]):
        """roots: the directories of the data read (the store root and its commit-log directories), which the
        body directory must not lie in."""
        self.path = Path(path)
        real = os.path.realpath(self.path)
        for r in roots:
            rr = os.path.realpath(r)
            if real == rr or real.startswith(rr.rstrip(os.sep) + os.sep):
                raise InvalidArgumentError(f"--body-dir {path} is inside the store ({r}): give a directory outside it")
        if os.path.lexists(self.path):
            if not os.path.isdir(self.path):
                raise InvalidArgumentError(f"--body-dir {path} exists and is not a directory")
            if any(os.scandir(self.path)):
                raise InvalidArgumentError(f"--body-dir {path} is not empty: give a new or empty directory")
        self.written = 0
        self.undecoded = 0    # compressed bodies that do not decode: their stored bytes are in <offset>.stored

    def create(self) -> None:
        """Make the directory (after every argument has been checked)."""
        self.path.mkdir(parents=True, exist_ok=True)

    def write_run(self, run: RecordRun) -> None:
        b = run.batch
        offs = (run.seg_start + b.pos).tolist()
        compressed = (b.sys_flag & COMPRESSED_FLAG) != 0
        for i, off in enumerate(offs):
            body = run.bodies[i]
            if compressed[i]:
                dec = decode_body(bytes(body), int(b.sys_flag[i]))
                if not dec.ok:  # never written as the message's body: the stored bytes go to .stored
                    self._write(off, dec.data, ".stored")
                    self.undecoded += 1
                    continue
                body = dec.data
            self._write(off, bytes(body))

    def _write(self, offset: int, body: bytes, suffix: str = ".body") -> None:
        p = self.path / f"{offset:020d}{suffix}"
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            if body:
                write_fully(fd, body, 0, p, undo=False)
        finally:
            os.close(fd)
        self.written += 1
