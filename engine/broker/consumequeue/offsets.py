"""A consume queue's min and max queue offsets as the broker computes them (format §4, §8.3): the one rule for
"the first queue offset a consumer can read", used by the read commands (engine.ops.queues) and the tier-out
(engine.tiered.flat.queue_dispatch, where a new tiered queue starts). The max offset is
ConsumeQueue.max_offset_in_queue (the units written).
"""
from __future__ import annotations

import numpy as np

from engine.broker.config.brokerconf import CQ_STORE_UNIT_SIZE
from engine.broker.consumequeue.queue import BLANK_UNIT_SIZE, ConsumeQueue

#: The key of a blank pre-fill unit: below every commit-log offset, even the -1 of a log without segments.
NO_RECORD = -(2**63)


def queue_min_offset(cq: ConsumeQueue, cl_min: int) -> int:
    """getMinOffsetInQueue, as the broker settles it once it has loaded the queue and its consume-queue clean-up
    has run with the commit log's min offset `cl_min` (deleteExpiredFile then correctMinOffset, format §8.3).

    Steps: no unit, or the last unit points below `cl_min`: min = max. Else drop the files (but the last) whose
    last unit points below `cl_min`, oldest first, stopping at the first that stays; the min is the first unit
    of the first remaining file that points at or above `cl_min`, found by binary search on 20-byte units as the
    broker does (a linear pass if the units are out of order). Blank pre-fill units (pitfall 16) point at no
    record and never count: the broker sets minLogicOffset past them when it writes them; only its start-up pass
    with a commit log starting at 0 leaves it at 0, which its source marks as a known defect (a TODO in
    ConsumeQueue.initializeWithOffset). Likewise a queue whose files hold no unit at all is empty: min = max.
    """
    max_q = cq.max_offset_in_queue
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
