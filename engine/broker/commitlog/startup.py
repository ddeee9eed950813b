"""What a broker starting on a store settles about its commit log (format §7): the segment its recovery starts from
(format §7.3, §7.4) and the offset where its recovery scan ends the log (format §7.2).

A broker that recovered past a bad record ends its commit log there, logically: the bytes after the end stay on
disk, and so do the consume-queue units that point after it, and the broker cuts again at every start (format §4.5). A
reader that wants the broker's answers needs that end. `RecoveryScan` finds it read-only and lazily: it validates
records (CRC included, as checkCRCOnRecover says) from the broker's start segment only as far as a caller asks,
so a reader that needs the end only to know whether some unit lies before it reads no further than that unit.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from engine.broker.commitlog.log import CommitLog
from engine.broker.commitlog.message import VALID, check_message
from engine.broker.commitlog.records import BLANK as END_BLANK, SegmentEnd, body_crc_bad, unsound
from engine.broker.config.checkpoint import Checkpoint

#: Bytes of records validated per step of a RecoveryScan: the most it reads past what a caller asked for.
SCAN_STEP = 16 << 20


def broker_start(cl: CommitLog, mode: str, cp: Checkpoint, max_phy_cq: int, index_safe: bool, check_crc: bool,
                 covers: Callable[[int], bool] | None = None) -> tuple[int, str]:
    """HEAD's start file (format §7.3/format §7.4): walk back from the last segment to the first whose first record
    matches. Normal mode compares that record's offset with the consume queues' max physical offset `max_phy_cq`,
    or asks `covers(offset)` (is it at or below that max?) when given, for a caller that works the max out only
    as far as it must. Returns (segment index, the rule in words)."""
    segs = cl.segments
    if not segs:
        return 0, "no commit-log segments"
    start_index = getattr(cl, "recovery_start_index", None)
    if start_index is not None:  # a log with its own start rule (engine.broker.dledger.log.DLedgerLog)
        return start_index(), "DLedger: DLedgerMmapFileStore.recover's start file (the third from the end)"
    if covers is None:
        covers = max_phy_cq.__ge__
    if mode == "abnormal":
        limit = cp.min_timestamp_index() if index_safe else cp.min_timestamp()
        what = "min(physic, logics) - 3 s" + (", min with indexMsgTimestamp" if index_safe else "")
        rule = f"abnormal: first segment whose first record was stored at or before {what} = {limit}"
        lowest = 0
    else:
        bound = f" {max_phy_cq}" if max_phy_cq is not None and max_phy_cq >= -1 else ""
        rule = f"normal: first segment whose first record is at or below the consume queues' max offset{bound}"
        lowest = 1  # normal mode never checks index 0: it is the fallback
    for i in range(len(segs) - 1, lowest - 1, -1):
        buf = cl.queue.buffer(segs[i])
        r = check_message(buf, 0, len(buf), check_crc=check_crc) if len(buf) else None
        if r is None or r.status != VALID or r.record.store_timestamp == 0:
            continue
        ts = r.record.store_timestamp
        if index_safe and ts > cp.indexMsgTimestamp:
            continue
        if (ts <= limit) if mode == "abnormal" else covers(r.record.physical_offset):
            return i, rule
    return 0, rule + " (none matched: the first segment)"


class RecoveryScan:
    """The broker's recovery scan (format §7.2) from the start of segment `start_index`, run as far as asked.

    VALID records move on by their size; a BLANK filler moves to the next segment file (whatever its name says:
    the broker walks its list of files); anything else (a zero area, a bad CRC, a length mismatch, a record cut
    short) ends the log. `reaches(offset)` validates until the scan has passed `offset` or ended; once it has
    ended, `end` is the broker's max offset after its start-up and `reason` says why it ends there.
    """

    def __init__(self, cl: CommitLog, start_index: int, check_crc: bool = True):
        self.cl, self.check_crc = cl, check_crc
        self.index = start_index
        self.pos = 0                     # the next record's position in segment `index`
        self.end: int | None = None      # set when the scan has ended
        self.reason = ""
        self.start = cl.segments[start_index].start if cl.segments else 0
        if not cl.segments:
            self.end, self.reason = 0, "no commit-log segments"
        own = getattr(cl, "recovery_end", None)  # a log whose recovery reads no record (DLedger's entries)
        ended = own() if own is not None and self.end is None else None
        if ended is not None:
            self.end, self.reason = ended
        # The log's one segment walk (CommitLog.walk_segments), a step at a time: the broker walks its list of
        # files whatever their names say, so a missing file is no gap here.
        self._steps = None if self.end is not None else cl.walk_segments(self.start, None, self._segment,
                                                                         gaps=False)

    @property
    def offset(self) -> int:
        """Where the scan has got to: every record before it is valid."""
        if self.end is not None:
            return self.end
        return self.cl.segments[self.index].start + self.pos

    def reaches(self, offset: int) -> bool:
        """True when the broker's recovered commit log goes past `offset` (its end is above it)."""
        while self.end is None and self.offset <= offset:
            self._step()
        return self.offset > offset

    def run(self) -> int:
        """Scan to the end; the broker's max offset."""
        while self.end is None:
            self._step()
        return self.end

    def _step(self) -> None:
        """Validate one window of records (or meet the end of the current segment)."""
        if next(self._steps, None) is None and self.end is None:
            raise AssertionError("the recovery scan ran out of segments without an end")  # _take always sets one

    def _segment(self, seg, pos: int, last: bool):
        """walk_segments' per_segment: one window of the segment per step (yields True after each), from a fresh
        decoder each time, so that no view of the mapping outlives a step (another reader may unmap the segment
        between two steps); returns True (the walk stops) when the scan has ended, False when it moves on."""
        self.index, self.pos = self.cl.queue.index_of(seg), pos
        while True:
            buf = self.cl.queue.buffer(seg)
            walk = self.cl.decode_segment(seg, buf, self.pos, SCAN_STEP)
            try:
                item = next(walk)
                moved_on = self._take(seg, buf, item)
                del item
            finally:
                walk.close()
            del buf
            if moved_on:
                return False
            if self.end is not None:
                return True
            yield True

    def _take(self, seg, buf, item) -> bool:
        """Apply one item of the bulk decoder; True when the scan moves on to the next segment file."""
        segs = self.cl.segments
        if isinstance(item, SegmentEnd):
            if item.kind == END_BLANK and self.index + 1 < len(segs):
                return True
            # The broker stops at the filler of its last file, at a zero area or at damage (format §7.2).
            self.pos = item.pos
            self.end = seg.start + item.pos
            self.reason = {END_BLANK: "the BLANK filler of the last segment", "zero": "end of data"}.get(
                item.kind, item.reason or item.kind)
            return False
        bad = unsound(item, seg.start, check_position=False)  # the broker does not ask where a record says it is
        if self.check_crc:
            ends = item.body_pos + np.maximum(item.body_len, 0)
            bodies = list(map(buf.__getitem__, map(slice, item.body_pos.tolist(), ends.tolist())))
            bad |= body_crc_bad(bodies, item.body_len, item.body_crc)
        if bad.any():
            at = int(item.pos[int(np.flatnonzero(bad)[0])])
            self.pos, self.end = at, seg.start + at
            r = check_message(buf, at, len(buf), check_crc=self.check_crc)
            self.reason = f"{r.status}: {r.reason}" if r.reason else r.status
            return False
        self.pos = int(item.pos[-1] + item.total[-1])
        return False
