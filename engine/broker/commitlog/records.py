"""The one bulk decoder of commit-log records: a segment's records as numpy columns, window by window.

check_message (engine.broker.commitlog.message) decodes one record into a MessageRecord; this module decodes
thousands at once into arrays of header fields and byte ranges, with the same validity rules (format §2.7,
without the CRC: callers that need it check `body_crc` with body_crc_bad). Every bulk path
(index rebuilds, recovery scans, tiering) reads records through decode_segment.

Walking is sequential by nature: only TOTALSIZE and MAGICCODE are needed to find the next record (phase A).
Phase A is vectorised all the same: every position of a window whose MAGICCODE bytes match is a candidate
(found with array compares, about 0.3 ns a byte), each candidate's TOTALSIZE says where its successor must
start, and the chain from the known start follows the candidates that link up, jumping over false ones (a
body that happens to hold the magic bytes) with a binary search. Where the chain reaches a position that is
not a candidate, the per-record walk (record_chain) takes one step and says why the data ends there, so both walks
return the same starts and the same end, byte for byte. Every other field is gathered for a whole window of
records at once (phase B). A record whose fields run past its TOTALSIZE ends the walk there, exactly where
check_message would stop.
"""
from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from engine.broker.commitlog.message import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2
from engine.java.crc import crc32

_HEAD = struct.Struct(">ii")
SCAN_WINDOW = 128 << 20  # bytes of records decoded per batch; their pages are released afterwards

BLANK, ZERO, CORRUPT, WINDOW = "blank", "zero", "corrupt", "window"


@dataclass
class RecordBatch:
    """Columns of the well-formed records of one window, in log order (positions relative to the buffer).

    `length_ok` is False for records whose TOTALSIZE disagrees with the length formula (LENGTH_MISMATCH:
    the dispatcher skips them by TOTALSIZE, format §7.7); every other column is still decoded for them.
    """
    pos: np.ndarray          # int64 record start in the buffer
    total: np.ndarray        # int64 TOTALSIZE
    v2: np.ndarray           # bool: v2 magic (2-byte topic length)
    body_crc: np.ndarray     # int64 BODYCRC as stored
    queue_id: np.ndarray     # int64 QUEUEID
    queue_offset: np.ndarray  # int64 QUEUEOFFSET
    phy: np.ndarray          # int64 PHYSICALOFFSET as stored
    sys_flag: np.ndarray     # int64 SYSFLAG
    born_ts: np.ndarray      # int64 BORNTIMESTAMP
    store_ts: np.ndarray     # int64 STORETIMESTAMP (at 48 + born host length, pitfall 9)
    body_pos: np.ndarray     # int64 start of the body in the buffer
    body_len: np.ndarray     # int64 BODYLEN (<= 0: no body)
    topic_pos: np.ndarray
    topic_len: np.ndarray
    props_pos: np.ndarray
    props_len: np.ndarray    # int64 PROPERTIESLEN (<= 0: none)
    length_ok: np.ndarray    # bool

    def __len__(self) -> int:
        return len(self.pos)

    def select(self, mask) -> "RecordBatch":
        return RecordBatch(*(getattr(self, f)[mask] for f in self.__dataclass_fields__))


@dataclass
class SegmentEnd:
    """Where and why the walk of one buffer stopped: BLANK (end-of-segment filler), ZERO (the unwritten,
    preallocated tail: the normal end of data, format §3.2) or CORRUPT (anything else, with a reason)."""
    kind: str
    pos: int
    reason: str = ""
    size: int | None = None   # the filler's size when the walk knows it (a DLedger padding entry)
    exact: bool = False       # the reason is the whole story (a DLedger entry's), not check_message's to redo


def body_crc_bad(bodies, body_len: np.ndarray, body_crc: np.ndarray) -> np.ndarray:
    """Which records' stored BODYCRC is wrong (format §2.6: CRC-32 masked to 31 bits; an empty body is not
    checked). bodies: the records' body bytes in order (any iterable of buffers, len(body_len) of them)."""
    crcs = np.fromiter(map(crc32, bodies), dtype=np.int64, count=len(body_len)) & 0x7FFFFFFF
    return (body_len > 0) & (crcs != body_crc)


def unsound(batch: "RecordBatch", seg_start: int, check_position: bool = True) -> np.ndarray:
    """Which decoded records do not start a valid record where they stand (format §2.7), their body CRC aside
    (body_crc_bad): TOTALSIZE disagrees with the length formula, or, with check_position, PHYSICALOFFSET names
    another place than the record's own (seg_start + pos: a misplaced segment file). The one statement of the rule
    the bulk readers share (the runs of engine.broker.commitlog.logrun, the checking walk of
    engine.broker.commitlog.walk); one record is checked by check_message and CommitLog.check_at."""
    if not check_position:
        return ~batch.length_ok
    return ~batch.length_ok | (batch.phy != seg_start + batch.pos)


def is_zero_area(buf, pos: int, n: int) -> bool:
    """A preallocated segment's unwritten tail: the normal end of data (format §3.2), not damage."""
    return pos >= n or not any(buf[pos:min(pos + 8, n)])


class BufferViews:
    """Big-endian views of a buffer at every byte offset (stride 1), for gathering header fields."""

    def __init__(self, buf):
        n = len(buf)
        self.n = n
        self.b = np.frombuffer(buf, dtype=np.uint8) if n else np.empty(0, np.uint8)
        self.i8 = np.ndarray((n,), dtype="i1", buffer=buf) if n else None
        self.i16 = np.ndarray((n - 1,), dtype=">i2", buffer=buf, strides=(1,)) if n >= 2 else None
        self.i32 = np.ndarray((n - 3,), dtype=">i4", buffer=buf, strides=(1,)) if n >= 4 else None
        self.i64 = np.ndarray((n - 7,), dtype=">i8", buffer=buf, strides=(1,)) if n >= 8 else None

    def close(self):  # release the buffer exports so the caller can close the mapping
        self.b = self.i8 = self.i16 = self.i32 = self.i64 = None


def decode_positions(v: BufferViews, s: np.ndarray) -> tuple[RecordBatch, int | None]:
    """Phase B: every header field of the records starting at s; the position of the first record whose
    fields run past its TOTALSIZE (or whose topic length is negative), which ends the walk, or None."""
    batch, ok = decode_at(v, s)
    bad = np.flatnonzero(~ok)
    if not len(bad):
        return batch, None
    return batch.select(slice(0, int(bad[0]))), int(s[bad[0]])


def decode_at(v: BufferViews, s: np.ndarray) -> tuple[RecordBatch, np.ndarray]:
    """Every header field of the records starting at s (each inside the buffer, its TOTALSIZE readable), and
    which of them are whole: fields inside TOTALSIZE and a topic length >= 0, as check_message requires. The
    columns of a record that is not whole are garbage. Records in any order (random lookups)."""
    n = v.n
    i8, i16, i32, i64 = v.i8, v.i16, v.i32, v.i64
    def at(rel, width):
        # Offsets of damaged records may point anywhere: keep them inside the view of that width (a record
        # may end at the very end of the buffer, so a field of width w may start at n - w).
        return np.minimum(s + rel, n - width)

    total = i32[s].astype(np.int64)
    v2 = i32[s + 4] == MESSAGE_MAGIC_CODE_V2
    sys_flag = i32[at(36, 4)].astype(np.int64)
    bl = np.where(sys_flag & 0x10, 16, 4)
    sl = np.where(sys_flag & 0x20, 16, 4)
    p_body = 76 + bl + sl                            # BODYLEN
    ok = p_body + 4 <= total
    body_len = i32[at(p_body, 4)].astype(np.int64)
    p = p_body + 4 + np.maximum(body_len, 0)
    ok &= (body_len <= 0) | (p <= total)
    tlw = np.where(v2, 2, 1)
    ok &= p + tlw <= total
    topic_len = np.where(v2, i16[at(p, 2)], i8[at(p, 1)]).astype(np.int64)
    ok &= topic_len >= 0
    p_topic = p + tlw
    ok &= p_topic + topic_len + 2 <= total
    props_len = i16[at(p_topic + topic_len, 2)].astype(np.int64)
    p_props = p_topic + topic_len + 2
    ok &= (props_len <= 0) | (p_props + props_len <= total)
    expected = 72 + bl + 4 + sl + 4 + np.maximum(body_len, 0) + tlw + topic_len + 2 + np.maximum(props_len, 0)
    batch = RecordBatch(
        pos=s, total=total, v2=v2,
        body_crc=i32[at(8, 4)].astype(np.int64) if len(s) else np.empty(0, np.int64),
        queue_id=i32[at(12, 4)].astype(np.int64) if len(s) else np.empty(0, np.int64),
        queue_offset=i64[at(20, 8)].astype(np.int64) if len(s) else np.empty(0, np.int64),
        phy=i64[at(28, 8)].astype(np.int64) if len(s) else np.empty(0, np.int64),
        sys_flag=sys_flag,
        born_ts=i64[at(40, 8)].astype(np.int64) if len(s) else np.empty(0, np.int64),
        store_ts=i64[at(52 + bl, 8)].astype(np.int64) if len(s) else np.empty(0, np.int64),
        body_pos=s + p_body + 4, body_len=body_len,
        topic_pos=s + p_topic, topic_len=topic_len,
        props_pos=s + p_props, props_len=props_len,
        length_ok=expected == total,
    )
    return batch, ok


def record_chain(buf, pos: int, n: int, limit: int) -> tuple[list[int], int, SegmentEnd | None]:
    """Phase A: record starts from pos until `limit` bytes are passed or the data ends."""
    unpack = _HEAD.unpack_from
    m1, m2, blank = MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, BLANK_MAGIC_CODE
    starts: list[int] = []
    append = starts.append
    while True:
        if pos >= limit:
            return starts, pos, None
        if n - pos < 8:
            if is_zero_area(buf, pos, n):
                return starts, pos, SegmentEnd(ZERO, pos)
            return starts, pos, SegmentEnd(CORRUPT, pos, "fewer than 8 bytes left")
        total, magic = unpack(buf, pos)
        if magic != m1 and magic != m2:
            if magic == blank:
                return starts, pos, SegmentEnd(BLANK, pos)
            if is_zero_area(buf, pos, n):
                return starts, pos, SegmentEnd(ZERO, pos)
            return starts, pos, SegmentEnd(CORRUPT, pos, f"bad magic code 0x{magic & 0xFFFFFFFF:08X}")
        if total < 4 or total > n - pos:
            return starts, pos, SegmentEnd(CORRUPT, pos, f"TOTALSIZE {total} runs past the end of data "
                                                         f"({n - pos} bytes left)")
        append(pos)
        pos += total


_MAGIC_HEAD = (MESSAGE_MAGIC_CODE & 0xFFFFFFFF).to_bytes(4, "big")
assert _MAGIC_HEAD[:3] == (MESSAGE_MAGIC_CODE_V2 & 0xFFFFFFFF).to_bytes(4, "big")[:3]  # one prefix, two last bytes
_MAGIC_LAST = (_MAGIC_HEAD[3], MESSAGE_MAGIC_CODE_V2 & 0xFF)
#: Bytes compared per block while looking for MAGICCODE candidates: the compare buffers stay in the CPU cache.
_CANDIDATE_BLOCK = 1 << 20
#: Below this many bytes the per-record walk is as fast as setting up the vectorised one.
_VECTOR_MIN = 256 << 10
#: The vectorised walk costs about 0.3 ns a byte, the per-record one about 0.35 us a record: records larger
#: than this on average (in the window before) are walked one by one.
_VECTOR_MAX_RECORD = 1200


def magic_candidates(b: np.ndarray, pos: int, hi: int) -> np.ndarray:
    """Every c in [pos, hi) whose bytes c+4..c+7 are a message MAGICCODE (v1 or v2); b must reach hi + 7."""
    m0, m1, m2 = _MAGIC_HEAD[0], _MAGIC_HEAD[1], _MAGIC_HEAD[2]
    block = min(_CANDIDATE_BLOCK, hi - pos)
    x, y = np.empty(block, bool), np.empty(block, bool)
    found = []
    pairs = False  # text bodies rarely hold the first magic byte: one compare, then the second byte gathered
    for s in range(pos, hi, block):
        k = min(block, hi - s)
        xk = x[:k]
        np.equal(b[s + 4:s + 4 + k], m0, out=xk)
        if pairs:  # binary bodies: the first byte is common, compare the second one too
            yk = y[:k]
            np.equal(b[s + 5:s + 5 + k], m1, out=yk)
            xk &= yk
            idx = np.flatnonzero(xk)
        else:
            idx = np.flatnonzero(xk)
            pairs = len(idx) > k >> 9
            idx = idx[b[idx + (s + 5)] == m1]
        if len(idx):
            found.append(idx + s)
    if not found:
        return np.empty(0, np.int64)
    c = np.concatenate(found) if len(found) > 1 else found[0]
    c = c.astype(np.int64, copy=False)
    last = b[c + 7]
    return c[(b[c + 6] == m2) & ((last == _MAGIC_LAST[0]) | (last == _MAGIC_LAST[1]))]


class _Candidates:
    """MAGICCODE candidates by blocks of a fixed grid (block k: [origin + k*size, origin + (k+1)*size)), the
    block after the last one asked for offered ahead to `submit(a, b)`, which returns a future of
    magic_candidates over [a, b) of the same bytes (run by another process: see decode_segment), or None when
    that process is busy: then the block is scanned here when it is needed."""

    def __init__(self, b: np.ndarray, submit, origin: int, size: int, hi: int):
        self.b, self.submit, self.origin, self.size, self.hi = b, submit, origin, size, hi
        self.blocks: dict[int, object] = {}

    def _bounds(self, k: int) -> tuple[int, int]:
        a = self.origin + k * self.size
        return a, min(a + self.size, self.hi)

    def _get(self, k: int) -> np.ndarray:
        f = self.blocks.get(k)
        return magic_candidates(self.b, *self._bounds(k)) if f is None else f.result()

    def __call__(self, pos: int, hi: int) -> np.ndarray:
        """Every candidate in [pos, hi), hi <= self.hi; then the next block is offered."""
        k0, k1 = (pos - self.origin) // self.size, (hi - 1 - self.origin) // self.size
        for k in [k for k in self.blocks if k < k0]:
            del self.blocks[k]
        nxt = k1 + 1
        if nxt not in self.blocks and self.origin + nxt * self.size < self.hi:
            self.blocks[nxt] = self.submit(*self._bounds(nxt))
        parts = [self._get(k) for k in range(k0, k1 + 1)]
        c = np.concatenate(parts) if len(parts) > 1 else parts[0]
        return c[np.searchsorted(c, pos):np.searchsorted(c, hi)]


def _vouched(v: "BufferViews", h: np.ndarray, pos: int, hi: int) -> np.ndarray:
    """The hinted positions in [pos, hi) (h sorted) whose bytes +4..+7 are a message MAGICCODE."""
    h = h[np.searchsorted(h, pos):np.searchsorted(h, hi)]
    magic = v.i32[h + 4]
    return h[(magic == MESSAGE_MAGIC_CODE) | (magic == MESSAGE_MAGIC_CODE_V2)]


def _follow(v: "BufferViews", cand: np.ndarray, pos: int, limit: int) -> tuple[list, int, bool]:
    """Follow the chain from pos over the candidates (sorted): (pieces of record starts, where it stopped,
    stuck: it stopped before `limit` at a position the candidates do not vouch for)."""
    n = v.n
    if not len(cand):
        return [], pos, True
    total = v.i32[cand].astype(np.int64)
    good = (total >= 4) & (total <= n - cand)  # the TOTALSIZE test of record_chain
    nxt = cand + total
    # run ends: the candidates whose successor is not the next candidate (or that are not good themselves)
    linked = np.empty(len(cand), bool)
    linked[:-1] = good[:-1] & (nxt[:-1] == cand[1:])
    linked[-1] = False
    breaks = np.flatnonzero(~linked)
    pieces = []
    while pos < limit:
        j = int(np.searchsorted(cand, pos))
        if j == len(cand) or int(cand[j]) != pos or not good[j]:
            return pieces, pos, True
        k = int(breaks[np.searchsorted(breaks, j)])
        if not good[k]:
            k -= 1  # k itself is refused by the TOTALSIZE test: the run ends before it (k > j, as good[j])
        pieces.append(cand[j:k + 1])
        pos = int(nxt[k])
    return pieces, pos, False


def _joined(pieces: list) -> np.ndarray:
    return np.concatenate(pieces) if len(pieces) > 1 else pieces[0]


def record_chain_vector(v: "BufferViews", buf, pos: int, limit: int, per_record: float = 0.0,
                  candidates: _Candidates | None = None, hints=None) -> tuple[np.ndarray, int, SegmentEnd | None]:
    """Phase A over whole arrays: what record_chain(buf, pos, n, limit) returns, the starts as an int64 array.
    per_record: the mean record size seen so far (0: unknown), which picks the cheaper of the two walks;
    candidates: where the MAGICCODE candidates come from (computed here when None); hints: a function
    (pos, hi) -> sorted positions where records are believed to start (decode_segment), followed first: where
    the chain reaches a record they do not name, the candidates take over for the rest of the window."""
    n = v.n
    hi = min(limit, n - 7)
    pieces: list = []
    if hi - pos >= _VECTOR_MIN and hints is not None:
        got, pos, stuck = _follow(v, _vouched(v, hints(pos, hi), pos, hi), pos, limit)
        pieces += got
        if not stuck:
            return _joined(pieces), pos, None
    if hi - pos >= _VECTOR_MIN and per_record <= _VECTOR_MAX_RECORD:
        cand = candidates(pos, hi) if candidates is not None else magic_candidates(v.b, pos, hi)
        got, pos, stuck = _follow(v, cand, pos, limit)
        pieces += got
        if not stuck:
            return _joined(pieces), pos, None
    # not a record start the candidates vouch for (or a short stretch): the per-record walk says why
    starts, pos, end = record_chain(buf, pos, n, limit)
    pieces.append(np.array(starts, dtype=np.int64))
    return _joined(pieces), pos, end


def decode_segment(buf, start: int = 0, window: int = SCAN_WINDOW, prefetch=None, hints=None, release: bool = True,
                   first_window: int | None = None) -> Iterator[RecordBatch | SegmentEnd]:
    """Yield a RecordBatch per window of about `window` bytes of records from `start`, then one SegmentEnd.

    hints: a function (pos, hi) -> sorted int64 positions in the buffer where records are believed to start
    (recovery: the offsets its consume queues hold); the walk follows them, checking each one, and falls back
    to the MAGICCODE candidates where they miss a record, so the result is the same with or without them.

    prefetch: a function (a, b) -> future of the MAGICCODE candidates in [a, b) of the same bytes (a helper
    process over its own mapping of the file: engine.broker.commitlog.walk.CrcHelper), or None when it is busy, asked one
    window ahead, so that on two cores the byte scan of window k+1 overlaps the chain and decoding of window k
    and its consumers.

    The batches hold numpy views of `buf` only while they are being yielded: copy what you keep before the
    next one. Pages of an mmap that have been decoded are released from the resident set as the walk moves
    on (MADV_DONTNEED; they stay in the page cache), so memory stays bounded by the window; release=False
    leaves that to the caller (one that holds a batch while the next is decoded and reads its pages after,
    which would otherwise map them again).

    first_window: the first batch covers about this many bytes, each next one twice as many up to `window` (a
    caller that expects to stop early, at damage found right after `start`, pays for what it reads).
    """
    n = len(buf)
    madvise = getattr(buf, "madvise", None) if release else None
    page = mmap.PAGESIZE
    pos = start
    released = (start // page) * page
    if n == 0 or pos >= n:
        yield SegmentEnd(ZERO, pos)
        return
    views = BufferViews(buf)
    per_record = 0.0
    candidates = (_Candidates(views.b, prefetch, pos, window, n - 7)
                  if prefetch is not None and hints is None and n - pos >= 2 * window and window >= _VECTOR_MIN
                  else None)
    step = min(window, first_window) if first_window else window
    try:
        while True:
            was = pos
            starts, pos, end = record_chain_vector(views, buf, pos, pos + step, per_record, candidates, hints)
            step = min(window, step * 2)
            if len(starts):
                per_record = (pos - was) / len(starts)
                batch, cut = decode_positions(views, starts)
                if len(batch):
                    yield batch
                if cut is not None:
                    yield SegmentEnd(CORRUPT, cut, "record fields run past TOTALSIZE (or a negative topic length)")
                    return
            if end is not None:
                yield end
                return
            if madvise is not None:  # done with these pages: drop them from our resident set (not the cache)
                upto = (pos // page) * page
                if upto > released:
                    madvise(mmap.MADV_DONTNEED, released, upto - released)
                    released = upto
    finally:
        views.close()


def gather(buf, pos: np.ndarray, rel: int, dtype: str) -> list:
    """One fixed-position header field of every record (record starts `pos`), as Python ints."""
    width = np.dtype(dtype).itemsize
    view = np.ndarray((len(buf) - width + 1,), dtype=dtype, buffer=buf, strides=(1,))
    out = view[pos + rel].tolist()
    del view  # no export of the mapping may outlive the call: the segment is unmapped after the walk
    return out
