"""Reading what the segment files hold, segment by segment: the records of a COMMIT_LOG segment (through the one
bulk decoder, engine.broker.commitlog.records.decode_segment) and the units of a CONSUME_QUEUE segment, and the segment
times the broker would have recorded for them (flat-store §3-§5; flat-store pitfall 14).

Memory: one segment's columns at a time (a 1 GiB COMMIT_LOG segment of 100-byte records is ~10M records,
about 0.1 KiB of columns each).
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.broker.commitlog.message import BORNHOST_V6_FLAG
from engine.broker.commitlog.records import CORRUPT, ZERO, SegmentEnd, decode_segment
from engine.fsutil import pread_fully
from engine.java.lang import LONG_MAX
from engine.tiered.flat.config import CQ_UNIT_SIZE

STORE_TIMESTAMP_POSITION = 56   # MessageFormatUtil: fixed, right only for an IPv4 born host (flat-store pitfall 14)
QUEUE_OFFSET_POSITION = 20
UNIT_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])


@dataclass
class SegmentRecords:
    """The records of one COMMIT_LOG segment file, as numpy columns (positions relative to the file)."""
    base: int
    length: int
    pos: np.ndarray
    total: np.ndarray
    queue_id: np.ndarray
    queue_offset: np.ndarray
    phy: np.ndarray
    ts56: np.ndarray          # the 8 bytes at record offset 56: what the plugin takes for the store time
    store_ts: np.ndarray      # the real STORETIMESTAMP (differs from ts56 for a born host in IPv6)
    v6: np.ndarray
    length_ok: np.ndarray
    end: SegmentEnd           # where the walk stopped: ZERO at `length` for a whole segment

    @property
    def data_end(self) -> int:
        """Position after the last well-formed record."""
        return int(self.pos[-1] + self.total[-1]) if len(self.pos) else 0

    def __len__(self) -> int:
        return len(self.pos)


def _empty(base: int, length: int, end: SegmentEnd) -> SegmentRecords:
    z = np.empty(0, np.int64)
    return SegmentRecords(base, length, z, z, z, z, z, z, z, np.empty(0, bool), np.empty(0, bool), end)


def read_file(path: Path, length: int | None = None) -> bytes:
    """The first `length` bytes of a file (all of it by default), read-only; short if the file is shorter."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        if length is None:
            length = os.fstat(fd).st_size
        return pread_fully(fd, length, 0)
    finally:
        os.close(fd)


def decode_records(buf, base: int = 0) -> SegmentRecords:
    """Every record of a buffer of back-to-back records (a segment: no padding, no BLANK, flat-store §3)."""
    n = len(buf)
    if n == 0:
        return _empty(base, 0, SegmentEnd(ZERO, 0))
    cols: dict[str, list] = {k: [] for k in ("pos", "total", "queue_id", "queue_offset", "phy", "store_ts",
                                              "v6", "length_ok")}
    end = SegmentEnd(ZERO, n)
    for item in decode_segment(buf, 0):
        if isinstance(item, SegmentEnd):
            end = item
            break
        cols["pos"].append(item.pos.copy())
        cols["total"].append(item.total.copy())
        cols["queue_id"].append(item.queue_id.copy())
        cols["queue_offset"].append(item.queue_offset.copy())
        cols["phy"].append(item.phy.copy())
        cols["store_ts"].append(item.store_ts.copy())
        cols["v6"].append((item.sys_flag & BORNHOST_V6_FLAG) != 0)
        cols["length_ok"].append(item.length_ok.copy())
    c = {k: (np.concatenate(v) if v else np.empty(0, bool if k in ("v6", "length_ok") else np.int64))
         for k, v in cols.items()}
    ts56 = np.empty(len(c["pos"]), np.int64)
    if len(c["pos"]) and n >= 8:
        i64 = np.ndarray((n - 7,), dtype=">i8", buffer=buf, strides=(1,))
        ts56 = np.minimum(c["pos"] + STORE_TIMESTAMP_POSITION, n - 8)
        ts56 = i64[ts56].astype(np.int64)
        del i64
    return SegmentRecords(base, n, c["pos"], c["total"], c["queue_id"], c["queue_offset"], c["phy"], ts56,
                          c["store_ts"], c["v6"], c["length_ok"], end)


def scan_commitlog_file(path: Path, base: int, length: int | None = None) -> SegmentRecords:
    """decode_records over a segment file (its first `length` bytes: the committed size), mapped read-only."""
    size = os.stat(path, follow_symlinks=False).st_size
    if length is None or length > size:
        length = size
    if length <= 0:
        return _empty(base, 0, SegmentEnd(ZERO, 0))
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    try:
        view = memoryview(m)[:length]
        try:
            return decode_records(view, base)
        finally:
            view.release()
    finally:
        m.close()


def read_units(path: Path, length: int | None = None) -> np.ndarray:
    """The whole 20-byte units of a CONSUME_QUEUE segment file (a torn tail is left out)."""
    data = read_file(path, length)
    n = len(data) // CQ_UNIT_SIZE
    return np.frombuffer(data, dtype=UNIT_DTYPE, count=n).copy()


def segment_times(ts: np.ndarray) -> tuple[int, int]:
    """A segment's (begin, end) timestamps: min/max of what was appended, Long.MAX_VALUE when empty."""
    if not len(ts):
        return LONG_MAX, LONG_MAX
    return int(ts.min()), int(ts.max())


class StreamIndex:
    """Record starts and byte-56 times of a queue's COMMIT_LOG stream, one segment at a time, for looking up the
    record a consume-queue unit points at (offsets only grow, so the lookup walks forward)."""

    def __init__(self, segments: list[tuple[int, Path, int]]):
        self.segments = sorted(segments)   # (base, path, committed length)
        self._i = -1
        self._recs: SegmentRecords | None = None

    def _load(self, i: int) -> SegmentRecords:
        if i != self._i:
            base, path, length = self.segments[i]
            try:
                self._recs = scan_commitlog_file(path, base, length)
            except OSError:
                self._recs = _empty(base, 0, SegmentEnd(CORRUPT, 0, "cannot be read"))
            self._i = i
        return self._recs

    def lookup(self, offsets: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For each unit: found (a record starts there with that TOTALSIZE), its byte-56 time, its QUEUEOFFSET."""
        n = len(offsets)
        found = np.zeros(n, bool)
        ts = np.full(n, -1, np.int64)
        qo = np.full(n, -1, np.int64)
        bases = np.array([s[0] for s in self.segments], np.int64)
        which = np.searchsorted(bases, offsets, side="right") - 1
        for i in np.unique(which):
            if i < 0:
                continue
            recs = self._load(int(i))
            sel = np.flatnonzero(which == i)
            rel = offsets[sel] - recs.base
            k = np.searchsorted(recs.pos, rel)
            ok = k < len(recs.pos)
            kk = np.where(ok, k, 0)
            ok &= (recs.pos[kk] == rel) if len(recs.pos) else False
            ok &= (recs.total[kk] == sizes[sel]) if len(recs.pos) else False
            found[sel] = ok
            if len(recs.pos):
                ts[sel] = np.where(ok, recs.ts56[kk], -1)
                qo[sel] = np.where(ok, recs.queue_offset[kk], -1)
        return found, ts, qo
