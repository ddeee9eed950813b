"""The slow, obviously-right scans the reindex jobs' bulk scans are checked against (test oracles).

They walk records one by one with check_message and ask engine.broker.index.keys (through MessageRecord) which keys
each record indexes: a readable statement of what the numpy scans must produce.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from engine.broker.commitlog.message import (BLANK, LENGTH_MISMATCH, TRANSACTION_ROLLBACK_TYPE, VALID, CheckResult,
                                             check_message)
from engine.broker.commitlog.records import is_zero_area
from engine.java.lang import java_string_hash
from engine.jobs.broker_index import SegmentScan
from engine.broker.commitlog.ranges import SegmentRange


def scan_stop(r: CheckResult, buf, pos: int, n: int) -> tuple[str, str]:
    """Why a record-by-record scan of one segment stops at pos: ("blank" | "zero" | "corrupt", reason)."""
    if r.status == BLANK:
        return "blank", ""
    if is_zero_area(buf, pos, n):
        return "zero", ""
    return "corrupt", r.reason


def scan_segment_reference(seg: SegmentRange) -> SegmentScan:
    """check_message record by record over a whole segment, MessageRecord.index_keys() per record."""
    with open(seg.path, "rb") as f:
        data = f.read()
    n = len(data)
    pos = 0
    phys, tss, nks, hashes = [], [], [], []
    mism = rollbacks = phy_mis = 0
    end_kind, reason = ("empty", "") if n == 0 else ("zero", "")
    while n:
        r = check_message(data, pos, n, check_crc=False, read_body=False)
        if r.status == VALID:
            rec = r.record
            keys = rec.index_keys()
            phys.append(rec.physical_offset)
            tss.append(rec.store_timestamp)
            nks.append(len(keys))
            hashes.extend(java_string_hash(k) for k in keys)
            rollbacks += rec.tx_type == TRANSACTION_ROLLBACK_TYPE
            phy_mis += rec.physical_offset != seg.seg_start + pos
            pos += r.size
            continue
        if r.status == LENGTH_MISMATCH:
            mism += 1
            pos += r.size
            continue
        end_kind, reason = scan_stop(r, data, pos, n)
        break
    return SegmentScan(seg.index, seg.seg_start, np.array(phys, dtype=np.int64), np.array(tss, dtype=np.int64),
                       np.array(nks, dtype=np.int32), np.array(hashes, dtype=np.int32), bytes_scanned=pos,
                       end_kind=end_kind, end_offset=seg.seg_start + pos, end_reason=reason, length_mismatches=mism,
                       rollbacks=rollbacks, phy_mismatches=phy_mis, segment=seg.segment, exit=pos)


def scan_from_records(records: Iterable, index: int = 0, start: int = 0) -> SegmentScan:
    """A SegmentScan from MessageRecord objects as dispatched (to compare with IndexService.build_index)."""
    phys, tss, nks, hashes = [], [], [], []
    for rec in records:
        keys = rec.index_keys()
        phys.append(rec.physical_offset)
        tss.append(rec.store_timestamp)
        nks.append(len(keys))
        hashes.extend(java_string_hash(k) for k in keys)
    return SegmentScan(index, start, np.array(phys, dtype=np.int64), np.array(tss, dtype=np.int64),
                       np.array(nks, dtype=np.int32), np.array(hashes, dtype=np.int32), end_kind="zero",
                       segment=index)
