"""A consume queue's min and max queue offsets as the broker computes them (format §4, §8.3), logical
truncation included (format §4.5, §7.2): the one rule for "which queue offsets are messages", used by every reader
(engine.broker.consumequeue.view and the commands over it: queues, consumers, print-msg, get by queue offset, dump-cq), by
recovery's consume-queue cut (engine.ops.recovery.scan) and by the tier-out (engine.tiered.flat.queue_dispatch,
where a new tiered queue starts).

* The units on disk: ConsumeQueue.max_offset_in_queue, the end of the valid units as the broker's consume-queue
  recovery finds it (format §4.4).
* The max offset: those units cut at the commit log's end as the broker's recovery ends it (`cut_point`,
  truncateDirtyLogicFiles, format §4.5). A broker that recovered past a bad record ends its commit log there and
  leaves the bytes and the units after it on disk; it cuts them again at every start, so they are not messages
  (`BrokerView`: the end is found by engine.broker.commitlog.startup, only as far as a queue needs it).
* The min offset: `queue_min_offset` (deleteExpiredFile then correctMinOffset, format §8.3), below that max.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.broker.commitlog.log import CommitLog
from engine.broker.commitlog.message import VALID
from engine.broker.commitlog.startup import RecoveryScan, broker_start
from engine.broker.config.brokerconf import CQ_STORE_UNIT_SIZE
from engine.broker.config.checkpoint import Checkpoint
from engine.broker.consumequeue.queue import BLANK_UNIT_SIZE, ConsumeQueue
from engine.errors import StoreError
from engine.findings import Note

#: The kind of the note that a broker starting on the store cuts consume-queue units (engine.findings.Note).
LOGICAL_TRUNCATION = "logical-truncation"

#: The key of a blank pre-fill unit: below every commit-log offset, even the -1 of a log without segments.
NO_RECORD = -(2**63)


def queue_min_offset(cq: ConsumeQueue, cl_min: int, max_q: int | None = None) -> int:
    """getMinOffsetInQueue, as the broker settles it once it has loaded the queue and its consume-queue clean-up
    has run with the commit log's min offset `cl_min` (deleteExpiredFile then correctMinOffset, format §8.3).

    Steps: no unit, or the last unit points below `cl_min`: min = max. Else drop the files (but the last) whose
    last unit points below `cl_min`, oldest first, stopping at the first that stays; the min is the first unit
    of the first remaining file that points at or above `cl_min`, found by binary search on 20-byte units as the
    broker does (a linear pass if the units are out of order). Blank pre-fill units (pitfall 16) point at no
    record and never count: the broker sets minLogicOffset past them when it writes them; only its start-up pass
    with a commit log starting at 0 leaves it at 0, which its source marks as a known defect (a TODO in
    ConsumeQueue.initializeWithOffset). Likewise a queue whose files hold no unit at all is empty: min = max.
    `max_q`: the queue's max offset (default: the units on disk; BrokerView.bounds passes the cut one).
    """
    max_q = cq.max_offset_in_queue if max_q is None else max_q
    segs = [s for s in cq.queue.segments if s.start // CQ_STORE_UNIT_SIZE < max_q]
    if not segs:
        return max_q
    last = cq.unit(max_q - 1)
    if last is None or unit_key(last) < cl_min:
        return max_q
    per_file = cq.file_size // CQ_STORE_UNIT_SIZE
    first = segs[-1]
    for seg in segs[:-1]:
        u = cq.unit(seg.start // CQ_STORE_UNIT_SIZE + per_file - 1)
        if u is None or unit_key(u) >= cl_min:
            first = seg
            break
    lo = first.start // CQ_STORE_UNIT_SIZE
    hi = min(lo + per_file, max_q)
    a, b = lo, hi
    while a < b:
        mid = (a + b) // 2
        u = cq.unit(mid)
        if u is not None and unit_key(u) >= cl_min:
            b = mid
        else:
            a = mid + 1
    if a < hi and unit_key(cq.unit(a)) >= cl_min and (a == lo or unit_key(cq.unit(a - 1)) < cl_min):
        return a
    # Units out of commit-log order (damage): the first one at or above cl_min, file by file.
    for seg in segs[segs.index(first):]:
        units = cq.file_units(seg)[: max_q - seg.start // CQ_STORE_UNIT_SIZE]
        keys = np.where(units["size"] == BLANK_UNIT_SIZE, NO_RECORD, units["offset"].astype(np.int64))
        hit = np.flatnonzero(keys >= cl_min)
        if len(hit):
            return seg.start // CQ_STORE_UNIT_SIZE + int(hit[0])
    return max_q


def unit_key(unit) -> int:
    """The commit-log offset a unit points at; NO_RECORD for a blank pre-fill unit (it points at nothing)."""
    return NO_RECORD if unit[1] == BLANK_UNIT_SIZE else unit[0]


# ------------------------------------------------------------------------------------------- logical truncation


def cut_point(cq: ConsumeQueue, valid_end: int, end: int) -> tuple[int, int, int]:
    """truncateDirtyLogicFiles(end) (format §4.5) on a queue whose valid units end at logical byte `valid_end`
    (format §4.4): (the logical end after the cut, the queue's maxPhysicOffset after it or -1, and the offset + size of
    the last unit kept that is not a blank pre-fill unit or -1). From the last file back: a file whose first unit
    points at or after `end` goes whole; in the first file that stays, the units are kept up to the first one that
    points at or after `end` (its first unit is kept whatever it points at)."""
    segs = [s for s in cq.queue.segments if s.start < valid_end]
    for seg in reversed(segs):
        got = _cut_in_file(cq, seg, valid_end, end, seg is segs[0])
        if got is not None:
            return got
    return (segs[0].start if segs else 0), -1, -1


def _cut_in_file(cq: ConsumeQueue, seg, valid_end: int, end: int, first: bool):
    units = cq.file_units(seg)
    n_valid = min(len(units), (valid_end - seg.start) // CQ_STORE_UNIT_SIZE)
    offs = units["offset"][:n_valid].astype(np.int64)
    sizes = units["size"][:n_valid].astype(np.int64)
    del units
    if len(offs) == 0 or (offs[0] >= end and not first):
        return None  # the whole file lies past the end
    past = np.flatnonzero(offs >= end)
    keep = int(past[0]) if len(past) else len(offs)
    if keep == 0:
        return seg.start, -1, -1
    real = np.flatnonzero((offs[:keep] != 0) | (sizes[:keep] != BLANK_UNIT_SIZE))
    cov = int(offs[real[-1]] + sizes[real[-1]]) if len(real) else -1
    return seg.start + keep * CQ_STORE_UNIT_SIZE, int(offs[keep - 1] + sizes[keep - 1]), cov


@dataclass(frozen=True)
class QueueBounds:
    """One queue as a broker starting on the store serves it."""
    min_offset: int
    max_offset: int        # getMaxOffsetInQueue after the start-up cut
    units_end: int         # the queue offset after the last valid unit in the files (format §4.4)

    @property
    def cut(self) -> int:
        """Units in the files after the broker's max offset: they point at or after the commit log's end."""
        return self.units_end - self.max_offset


@dataclass
class LogEnd:
    """Where the broker's recovery ends the commit log, as far as the readers have needed to know."""
    mode: str                              # normal (no abort file) or abnormal
    start_segment: str | None = None       # where its scan starts (format §7.3, §7.4)
    end: int | None = None                 # set once a queue had units at or after it
    reason: str = ""                       # why the scan stops there
    cut_queues: dict = field(default_factory=dict)   # (topic, queueId) -> units cut

    def note(self) -> Note | None:
        """One line for the readers' stderr when the broker's start-up cuts units (kind logical-truncation, with
        commitLogEnd, cutUnits and queues as fields), else None."""
        if not self.cut_queues:
            return None
        n = sum(self.cut_queues.values())
        some = ", ".join(f"{t}/{q}" for t, q in sorted(self.cut_queues)[:4]) + (
            ", ..." if len(self.cut_queues) > 4 else "")
        return Note(LOGICAL_TRUNCATION, f"logical truncation: a broker starting on this store ends its commit log at "
                    f"offset {self.end} ({self.reason}) and cuts the {n} consume-queue unit(s) after it in "
                    f"{len(self.cut_queues)} queue(s) ({some}): they are not messages, and the max offsets shown are "
                    "the broker's (format §4.5, §7.2)", commitLogEnd=self.end, cutUnits=n, queues=len(self.cut_queues))


class BrokerView:
    """The consume queues of a store as a broker starting on it would serve them: `bounds(cq)` gives a queue's
    min and max offsets with the start-up cut applied (format §4.5, §7.2).

    The commit log's end is worked out lazily: the broker's start segment (format §7.3 when normal, format §7.4
    when abnormal) and then its recovery scan (CRCs checked as checkCRCOnRecover says), only as far as the last
    unit of a queue asked about, so a store whose queues point only at valid records costs a read of the log from
    the broker's start segment (about its last segment) to that unit; the consume queues' max physical offset,
    which the normal start segment depends on, is read from other queues only when the queues asked about do not
    settle it. The rule looks at each queue's last unit, as the broker's cut does with units in commit-log order.
    Read-only; one view per open store (MessageStore.broker_view), which holds no file of its own.
    """

    def __init__(self, cl: CommitLog, layout, cq_file_size: int, checkpoint: Checkpoint, abnormal: bool,
                 check_crc: bool = True, index_safe: bool = False):
        self.cl, self.layout, self.cq_file_size = cl, layout, cq_file_size
        self.checkpoint, self.check_crc, self.index_safe = checkpoint, check_crc, index_safe
        self.log_end = LogEnd("abnormal" if abnormal else "normal")
        self._scan: RecoveryScan | None = None
        self._max_phys: dict[tuple[str, int], int] = {}   # queues read so far: offset + size of the last unit
        self._all_read = False

    @classmethod
    def of(cls, store) -> "BrokerView":
        c = store.config
        return cls(store.commitlog, store.layout, c.cq_file_size, store.checkpoint, store.abort_path.exists(),
                   check_crc=c.checkCRCOnRecover, index_safe=c.messageIndexEnable and c.messageIndexSafe)

    def bounds(self, cq: ConsumeQueue, cl_min: int) -> QueueBounds:
        """The queue's min and max offsets as the broker serves them after its start-up."""
        units_end = max_q = cq.max_offset_in_queue
        self._max_phys[(cq.topic, cq.queue_id)] = cq.max_physic_offset
        last = cq.unit(units_end - 1) if units_end else None
        if last is not None and not self._reaches(last[0]):
            max_q = cut_point(cq, units_end * CQ_STORE_UNIT_SIZE, self.log_end.end)[0] // CQ_STORE_UNIT_SIZE
            if max_q < units_end:
                self.log_end.cut_queues[(cq.topic, cq.queue_id)] = units_end - max_q
        return QueueBounds(queue_min_offset(cq, cl_min, max_q), max_q, units_end)

    # -- the commit log's end
    def _reaches(self, offset: int) -> bool:
        """Does the broker's recovered commit log go past `offset`?"""
        if self._scan is None:
            mode = self.log_end.mode
            idx, _rule = broker_start(self.cl, mode, self.checkpoint, None, self.index_safe, self.check_crc,
                                      covers=self._covers)
            self._scan = RecoveryScan(self.cl, idx, self.check_crc)
            segs = self.cl.segments
            self.log_end.start_segment = segs[idx].path.name if segs else None
        ok = self._scan.reaches(offset)
        if not ok:
            self.log_end.end, self.log_end.reason = self._scan.end, self._scan.reason
        return ok

    def _covers(self, phy: int) -> bool:
        """Is the consume queues' max physical offset (maxPhyOffsetOfConsumeQueue, format §7.3) at or above phy?
        Asks the queues read so far, then the queue of the record at phy, then the others until one answers."""
        if any(m >= phy for m in self._max_phys.values()):
            return True
        r = self.cl.check_at(phy, check_crc=False)
        if r.status == VALID and self._queue_max_phys(r.record.topic, r.record.queue_id) >= phy:
            return True
        if not self._all_read:
            for key in self.layout.list_queues().queues:
                if self._queue_max_phys(*key) >= phy:
                    return True
            self._all_read = True
        return False

    def _queue_max_phys(self, topic: str, queue_id: int) -> int:
        key = (topic, queue_id)
        if key not in self._max_phys:
            try:
                cq = ConsumeQueue(self.layout.root, topic, queue_id, self.cq_file_size)
            except (StoreError, OSError):
                self._max_phys[key] = -1  # a queue the broker could not load counts for nothing here
            else:
                self._max_phys[key] = cq.max_physic_offset
                cq.close()
        return self._max_phys[key]
