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
    ranges = _ranges(store, flt)
    cl = store.commitlog
    return (e for a, b in ranges for e in _walk(cl, a, b, flt))


def _ranges(store, flt: DumpFilter) -> list[tuple[int | None, int | None]]:
    """The offset ranges the dump walks, (start, stop): the chosen files cut by the offset range (the arguments
    checked: InvalidArgumentError)."""
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
    return ranges


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


# ------------------------------------------------------------------------------------------- on worker processes

#: By default a log this big is dumped (--json) by worker processes (engine.workers); --workers N: any log.
PARALLEL_DUMP_BYTES = 64 << 20
#: Bytes of a spooled segment's output copied to the output at a time.
SPOOL_CHUNK = 1 << 20
#: Bytes of its segment's lines a worker holds in memory while the segments before it are still being written
#: (its turn has not come); past them, what it holds goes to a spool file in $TMPDIR. A worker whose turn it is
#: writes its lines straight to the output.
HOLD_BYTES = 128 << 20
#: Seconds a worker done before its turn sleeps at most between two looks at the turn.
TURN_POLL = 0.005


def entry_json(e: ScanEntry) -> str:
    """The NDJSON line (without its newline) of an entry that is not a message: a BLANK filler or damage."""
    import json

    return json.dumps({"type": e.kind, "commitLogOffset": e.offset, "size": e.size, "segment": e.segment,
                       "reason": e.reason}, ensure_ascii=False)


@dataclass
class SpooledSegment:
    """One segment's --json output done by a worker: its lines, either written by the worker itself to the output
    (path None) or in a spool file (read back with `chunks`, in SPOOL_CHUNK pieces, then the file is removed); how
    many entries were damage, the notes of the compressed bodies that do not decode, and whether the walk stops
    after it (the log's end, or the offset range's)."""
    path: str | None
    damaged: int
    notes: list
    stop: bool
    past: bool

    def chunks(self) -> Iterator[bytes]:
        if self.path is not None:
            yield from _read_spool(self.path)


def _read_spool(path: str) -> Iterator[bytes]:
    """A spool file's bytes, SPOOL_CHUNK at a time; the file is removed after them (or when the reader stops)."""
    try:
        with open(path, "rb") as f:
            while True:
                chunk = f.read(SPOOL_CHUNK)
                if not chunk:
                    return
                yield chunk
    finally:
        os.unlink(path)


class SegmentTurn:
    """A segment's --json output, in the log's order, not yet taken: the consumer writes out everything before it
    (and flushes), then `take()` gives the segment's worker its turn at the output and waits for the job's end
    (SpooledSegment; with no output fd, its lines are in a spool file that the consumer copies out)."""

    def __init__(self, ahead: "_Ahead", seq: int, fut):
        self._ahead, self._seq, self._fut = ahead, seq, fut
        self.got: SpooledSegment | None = None

    def take(self) -> SpooledSegment:
        if self.got is None:
            turn = self._ahead.turn
            if turn is not None:
                turn[0] = self._seq  # this job's worker writes now (one before it: done and written)
            self.got = self._ahead.pool.result(self._fut)
        return self.got


def parallel_dump_wanted(store) -> bool:
    """Whether dump-commitlog --json of this store runs on worker processes (engine.workers.fan_out)."""
    from engine import workers

    cl = getattr(store, "commitlog", None)
    if cl is None or not hasattr(cl, "walk_segments") or not cl.segments:
        return False
    return workers.fan_out(sum(seg.file_len for seg in cl.segments), PARALLEL_DUMP_BYTES)


_FORKED: dict = {}  # what the workers inherit (forked): the commit log they read, the output fd and the turn


def dump_json_spooled(store, flt: DumpFilter, body: str, fmt,
                      out_fd: int | None = None) -> Iterator["SegmentTurn | ScanEntry"]:
    """dump_entries as --json lines, each segment's formatted by a worker process (engine.workers): SegmentTurns
    in commit-log order, and the GAP entries between segments. The same bytes as the lines of dump_entries'
    entries. fmt: a run's NDJSON text (engine.views.runjson.run_json_text: the view is a floor above, so it is
    handed in; a module-level function, so a worker receives it by name).

    out_fd: the output's file descriptor, when the lines may be written to it as bytes by any process (the workers
    inherit it): each worker then writes its segment's lines itself when its turn comes (SegmentTurn.take), the
    lines it made before that held in memory (HOLD_BYTES, then a spool file). None: every segment's lines are
    spooled to a file that the consumer copies out."""
    return _spooled(store.commitlog, _ranges(store, flt), flt, body, fmt, out_fd)  # the arguments checked now


def _spooled(cl, ranges: list, flt: DumpFilter, body: str, fmt,
             out_fd: int | None) -> Iterator["SegmentTurn | ScanEntry"]:
    import mmap
    import shutil
    import tempfile

    from engine import workers

    turn = None
    if out_fd is not None:
        # The turn: the sequence number of the job whose worker may write to out_fd now, in memory the forked
        # workers share (an aligned 8-byte word: written by this process only, read whole by the workers).
        shm = mmap.mmap(-1, mmap.PAGESIZE)
        turn = memoryview(shm).cast("q")
        turn[0] = -1
    _FORKED.update(cl=cl, out=out_fd, turn=turn, parent=os.getpid())
    spool = tempfile.mkdtemp(prefix="rmqtool-dump-")
    pool = workers.WorkerPool(workers.count())  # this process only moves the turn on (or copies spool files out)
    seqs = iter(range(1 << 62))
    try:
        for a, b in ranges:
            ahead = _Ahead(cl, pool, b, flt, body, spool, fmt, turn, seqs)
            for e in cl.walk_segments(a, None, ahead.segment):
                if isinstance(e, SegmentTurn):
                    yield e
                    if e.take().past:
                        break
                    continue
                if b is not None and e.offset >= b:
                    break
                yield e
    finally:
        if turn is not None:
            turn[0] = 1 << 62  # a job still waiting for its turn (the walk stopped before it) gives up
        pool.close()
        _FORKED.clear()
        shutil.rmtree(spool, ignore_errors=True)


class _Ahead:
    """The per_segment of one range's walk_segments: segment k's job, and the next ones' ahead of it, on the pool."""

    def __init__(self, cl, pool, stop, flt: DumpFilter, body: str, spool: str, fmt, turn, seqs):
        from collections import deque

        self.cl, self.pool, self.stop, self.flt, self.body, self.spool, self.fmt = cl, pool, stop, flt, body, spool, fmt
        self.turn, self.seqs = turn, seqs
        self.jobs: deque = deque()  # (segment index, pos, sequence number, future)
        self.last_data = cl.data_end_index()
        self.depth = pool.n * 2

    def _submit(self, i: int, pos: int) -> None:
        seq = next(self.seqs)  # (a job dropped below is passed over: the turn only moves on)
        job = (i, pos, i >= self.last_data, self.stop, self.flt, self.body, self.spool, self.fmt, seq)
        self.jobs.append((i, pos, seq, self.pool.submit(_json_segment, *job)))

    def segment(self, seg, pos: int, last: bool):
        segs = self.cl.segments
        i = self.cl.queue.index_of(seg)
        if not self.jobs or self.jobs[0][:2] != (i, pos):
            self.jobs.clear()  # (first segment of the range: nothing ahead yet)
            self._submit(i, pos)
        j = self.jobs[-1][0] + 1
        while len(self.jobs) < self.depth and j < len(segs) and (self.stop is None or segs[j].start < self.stop):
            self._submit(j, 0)
            j += 1
        _, _, seq, fut = self.jobs.popleft()
        t = SegmentTurn(self, seq, fut)
        yield t
        return t.take().stop


class _Lines:
    """In a worker: where one segment's lines go. Straight to the output once the job's turn has come (the
    segments before it written); before that into memory, and past HOLD_BYTES, what is held into a spool file (so
    the file holds the first lines, memory the ones after). With no output fd: all into a spool file."""

    def __init__(self, seq: int, i: int, spool: str):
        self.seq, self.i, self.spool = seq, i, spool
        self.out, self.turn = _FORKED["out"], _FORKED["turn"]
        self.mine = False
        self.held: list = []
        self.size = 0
        self.file = None  # the spool file (a binary file object) and its path
        self.path: str | None = None

    def write(self, data: bytes) -> None:
        if not data:
            return
        if self.out is None:
            self._spill([data])
            return
        if not self.mine and self.turn[0] == self.seq:
            self._take()
        if self.mine:
            _write_out(self.out, data)
            return
        self.held.append(data)
        self.size += len(data)
        if self.size > HOLD_BYTES:
            self._spill(self.held)
            self.held, self.size = [], 0

    def _spill(self, chunks: list) -> None:
        if self.file is None:
            import tempfile

            fd, self.path = tempfile.mkstemp(dir=self.spool, suffix=f"-{self.i}.ndjson")
            self.file = os.fdopen(fd, "wb")
        for c in chunks:
            self.file.write(c)

    def _take(self) -> None:
        """The turn has come: what was spooled and held is written out, in order, and the rest goes straight."""
        self.mine = True
        if self.file is not None:
            self.file.close()
            self.file = None
            path, self.path = self.path, None  # (_read_spool removes it, also when a write fails)
            for chunk in _read_spool(path):
                _write_out(self.out, chunk)
        for c in self.held:
            _write_out(self.out, c)
        self.held, self.size = [], 0

    def finish(self) -> str | None:
        """At the job's end: wait for the turn and write out (no output fd: the spool file's path, or None when
        the segment had no lines). A job passed over (the walk stopped before it) gives its lines up."""
        if self.out is None:
            if self.file is not None:
                self.file.close()
            return self.path
        if not self.mine:
            if _await_turn(self.turn, self.seq):
                self._take()
            else:
                self.discard()
        return None

    def discard(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        if self.path is not None:
            os.unlink(self.path)
            self.path = None
        self.held = []


def _write_out(fd: int, data) -> None:
    """All of data written to the output fd (a pipe may take less than asked at a time)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _await_turn(turn, seq: int) -> bool:
    """In a worker: wait until the turn reaches seq (True) or passes it (False: the job is not wanted)."""
    import time

    delay = 0.0002
    while True:
        t = turn[0]
        if t >= seq:
            return t == seq
        if os.getppid() != _FORKED["parent"]:
            raise SystemExit(1)  # the command is gone: nobody takes these lines
        time.sleep(delay)
        delay = min(delay * 2, TURN_POLL)


def _json_segment(i: int, pos: int, last: bool, stop, flt: DumpFilter, body: str, spool: str, fmt,
                  seq: int) -> SpooledSegment:
    """In a worker: the --json lines of segment i of the forked commit log from pos (job seq), written out when
    its turn comes, or into a spool file (_Lines)."""
    import gc

    from engine.broker.commitlog.logrun import segment_runs

    was = gc.isenabled()
    gc.disable()  # as the command's own walk (render.gc_paused): millions of acyclic objects, freed by refcount
    cl = _FORKED["cl"]
    seg = cl.segments[i]
    topic = flt.topic.encode("utf-8") if flt.topic is not None else None
    lines = _Lines(seq, i, spool)
    damaged, notes, past, stop_all = 0, [], False, False
    gen = segment_runs(cl, seg, pos, last, flt.check_crc, True, flt.max_message_size)
    try:
        while True:
            try:
                e = next(gen)
            except StopIteration as end:
                stop_all = bool(end.value)
                break
            if isinstance(e, RecordRun):
                run, past = _cut(e, stop)
                if flt.filters_records and len(run):
                    run = _filtered(run, topic, flt.begin, flt.end)
                if len(run):
                    lines.write(fmt(run, ', "type": "MESSAGE"', body))
                    notes += run.undecodable()
                if past:
                    break
                continue
            if stop is not None and e.offset >= stop:
                past = True
                break
            damaged += e.kind != BLANK
            lines.write((entry_json(e) + "\n").encode("utf-8", "surrogateescape"))
        gen.close()
        cl.queue.release(seg)
        path = lines.finish()
    except BaseException:
        lines.discard()
        raise
    finally:
        if was:
            gc.enable()
    return SpooledSegment(path, damaged, notes, stop_all, past)


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
