"""Reading the flat store as a restarted broker does (flat-store §6-§8): which queues it loads, each queue's
min/max offsets and times (FlatMessageFile), messages by queue offset (MessageStoreFetcherImpl), the two-segment
batch read, offset by time, and the consume-queue units.

Every file is opened read-only. Where the broker would throw, a TieredReadError says why.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from engine.broker.commitlog.message import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2
from engine.java.lang import java_div
from engine.tiered.flat.config import CQ_UNIT_SIZE, TieredConfig
from engine.tiered.flat.scan import QUEUE_OFFSET_POSITION, STORE_TIMESTAMP_POSITION
from engine.tiered.flat.segments import LONG_MAX, FlatAppendFile, TieredReadError

COMMIT_LOG_CODA_SIZE = 16
LOWER, UPPER = "LOWER", "UPPER"
FOUND = "FOUND"
NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
GET_OFFSET_ERROR = -1

_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_UNIT = struct.Struct(">qiq")


def _long_at(buf: bytes, pos: int, what: str) -> int:
    if pos < 0 or pos + 8 > len(buf):
        raise TieredReadError(f"{what}: the {len(buf)}-byte buffer has no 8 bytes at {pos}")
    return _Q.unpack_from(buf, pos)[0]


def store_time(record: bytes) -> int:
    """MessageFormatUtil.getStoreTimeStamp: the 8 bytes at 56 (flat-store pitfall 14)."""
    return _long_at(record, STORE_TIMESTAMP_POSITION, "store time")


@dataclass
class Fetched:
    """One message the fetcher returns: the tiered record bytes, its CQ tagsCode, its queue offset."""
    record: bytes
    tags_code: int
    queue_offset: int


@dataclass
class FetchResult:
    status: str
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[Fetched] = field(default_factory=list)
    requested: int = 0          # consume-queue units the read covered
    left_out: int = 0           # units covered but not returned (the two-segment cut, bad records)
    problem: str | None = None  # why a read stopped early
    read_ahead: int = 0         # consumer view: messages the read-ahead put in the fetcher's cache


class FlatQueue:
    """One queue's FlatMessageFile: its COMMIT_LOG and CONSUME_QUEUE as the broker holds them after a restart."""

    def __init__(self, topic: str, queue_id: int, commit_log: FlatAppendFile, consume_queue: FlatAppendFile,
                 config: TieredConfig, topic_id: int | None = None, reserve_time: int = -1, loaded: bool = True):
        self.topic, self.queue_id = topic, queue_id
        self.commit_log, self.consume_queue = commit_log, consume_queue
        self.config = config
        self.topic_id, self.reserve_time = topic_id, reserve_time
        self.loaded = loaded
        self._first_offset: int | None = None

    def close(self) -> None:
        self.commit_log.close()
        self.consume_queue.close()

    # ------------------------------------------------------------------ FlatMessageFile figures
    @property
    def is_flat_file_init(self) -> bool:
        return bool(self.consume_queue.segments)

    @property
    def first_message_offset(self) -> int:
        """FlatCommitLogFile.getMinOffsetFromFile: QUEUEOFFSET of the record at the COMMIT_LOG min offset."""
        if self._first_offset is None:
            cl = self.commit_log
            if not cl.segments or cl.commit_offset - cl.min_offset < QUEUE_OFFSET_POSITION + 8:
                self._first_offset = GET_OFFSET_ERROR
            else:
                buf = cl.read(cl.min_offset, QUEUE_OFFSET_POSITION + 8)
                self._first_offset = _long_at(buf, QUEUE_OFFSET_POSITION, "queue offset")
        return self._first_offset

    @property
    def min_offset(self) -> int:
        """getConsumeQueueMinOffset = max(CQ start / 20, QUEUEOFFSET of the first record) (flat-store pitfall 13)."""
        return max(java_div(self.consume_queue.min_offset, CQ_UNIT_SIZE), self.first_message_offset)

    @property
    def max_offset(self) -> int:
        """getConsumeQueueCommitOffset (= the append offset after a restart)."""
        return java_div(self.consume_queue.commit_offset, CQ_UNIT_SIZE)

    @property
    def min_store_timestamp(self) -> int:
        t = -1
        for f in (self.commit_log, self.consume_queue):
            if f.min_timestamp != LONG_MAX:
                t = max(t, f.min_timestamp)
        return t

    @property
    def max_store_timestamp(self) -> int:
        return self.commit_log.max_timestamp

    def reserved_hours(self) -> int:
        return self.reserve_time if self.reserve_time > 0 else self.config.tieredStoreFileReservedTime

    # ------------------------------------------------------------------ reads
    def unit(self, queue_offset: int) -> tuple[int, int, int]:
        buf = self.consume_queue.read(queue_offset * CQ_UNIT_SIZE, CQ_UNIT_SIZE)
        if len(buf) < CQ_UNIT_SIZE:
            raise TieredReadError(f"consume-queue unit {queue_offset} is cut short ({len(buf)} bytes)")
        return _UNIT.unpack_from(buf, 0)

    def message(self, queue_offset: int) -> bytes:
        """FlatMessageFile.getMessageAsync: the unit, then `size` bytes at its commit-log offset."""
        offset, size, _ = self.unit(queue_offset)
        return self.commit_log.read(offset, size)

    def message_store_timestamp(self, queue_offset: int) -> int:
        """getMessageStoreTimeStampAsync: byte 56 of the message, -1 when the read fails."""
        try:
            return store_time(self.message(queue_offset))
        except TieredReadError:
            return -1

    def get(self, queue_offset: int, count: int) -> FetchResult:
        """Every message in [queue_offset, queue_offset + count) below the max offset, read unit by unit, after the
        fetcher's status checks; nextBeginOffset follows the last message returned."""
        res = self._status(queue_offset)
        if res.status != FOUND:
            return res
        end = min(queue_offset + count, res.max_offset)
        res.requested = end - queue_offset
        q = queue_offset
        while q < end:
            try:
                offset, size, tags = self.unit(q)
                rec = self.commit_log.read(offset, size)
                why = _split_problem(rec, size)
                if why:
                    raise TieredReadError(why)
            except TieredReadError as e:
                res.problem = f"queue offset {q}: {e}"
                break
            res.messages.append(Fetched(rec, tags, _long_at(rec, QUEUE_OFFSET_POSITION, "queue offset")))
            q += 1
        res.next_begin_offset = q
        res.left_out = res.requested - len(res.messages)
        if not res.messages:
            res.status = OFFSET_FOUND_NULL
        return res

    def _status(self, queue_offset: int) -> FetchResult:
        """MessageStoreFetcherImpl.getMessageAsync's offset checks."""
        mn, mx = self.min_offset, self.max_offset
        if mx <= 0:
            return FetchResult(NO_MESSAGE_IN_QUEUE, queue_offset, mn, mx)
        if queue_offset < mn:
            return FetchResult(OFFSET_TOO_SMALL, mn, mn, mx)
        if queue_offset == mx:
            return FetchResult(OFFSET_OVERFLOW_ONE, mx, mn, mx)
        if queue_offset > mx:
            return FetchResult(OFFSET_OVERFLOW_BADLY, mx, mn, mx)
        return FetchResult(FOUND, queue_offset, mn, mx)

    def batch(self, queue_offset: int, batch_size: int) -> FetchResult:
        """getMessageFromTieredStoreAsync after the fetcher's checks: one CQ read and one COMMIT_LOG read, each of at
        most two segments, so records past the second COMMIT_LOG segment are left out while nextBeginOffset still
        moves past every unit read (flat-store §7; flat-store pitfall 15)."""
        res = self._status(queue_offset)
        if res.status != FOUND:
            return res
        cfg = self.config
        batch_size = min(batch_size, min(res.max_offset - queue_offset, cfg.readAheadMessageCountThreshold))
        try:
            cq = self.consume_queue.read(queue_offset * CQ_UNIT_SIZE, batch_size * CQ_UNIT_SIZE)
            msg, limit = self._batch_commit_log(cq)
        except TieredReadError as e:
            return FetchResult(OFFSET_FOUND_NULL, queue_offset, res.min_offset, res.max_offset, problem=str(e))
        found = _split_message_buffer(cq[:limit], msg)
        res.requested = limit // CQ_UNIT_SIZE
        res.messages = found
        res.left_out = res.requested - len(found)
        res.next_begin_offset = queue_offset + res.requested
        if not found:
            res.status = NO_MATCHED_MESSAGE
        return res

    def pull(self, queue_offset: int, max_count: int) -> FetchResult:
        """What a consumer pulling `max_count` messages from `queue_offset` receives (getMessageAsync, flat-store
        §7), with the read-ahead cache on and cold: one batch read of 32 messages (max_count 1) or
        readAheadMessageCountThreshold into the cache, keyed queue_offset + i in the order the batch split them,
        then messages from the cache until max_count, or until the bytes handed over reach
        maxTransferBytesOnMessageInMemory (256 KiB by default; the message that crosses it is included), or a
        cache miss. With readAheadCacheEnable off: the batch read of max_count messages itself."""
        res = self._status(queue_offset)
        cfg = self.config
        if res.status != FOUND or not cfg.readAheadCacheEnable:
            return res if res.status != FOUND else self.batch(queue_offset, max_count)
        ahead = self.batch(queue_offset, 32 if max_count == 1 else cfg.readAheadMessageCountThreshold)
        cache = ahead.messages if ahead.status == FOUND else []
        out = FetchResult(NO_MATCHED_MESSAGE, queue_offset, res.min_offset, res.max_offset, read_ahead=len(cache),
                          requested=ahead.requested, problem=ahead.problem)
        total = 0
        for i in range(cfg.readAheadMessageCountThreshold):
            if i >= len(cache):   # a cache miss ends the answer
                out.next_begin_offset = queue_offset + i
                break
            out.next_begin_offset = queue_offset + i + 1
            out.messages.append(cache[i])
            total += len(cache[i].record)
            if len(out.messages) == max_count or total >= cfg.maxTransferBytesOnMessageInMemory:
                break
        if out.messages:
            out.status = FOUND
        out.left_out = len(cache) - len(out.messages)
        return out

    def _batch_commit_log(self, cq: bytes) -> tuple[bytes, int]:
        """The COMMIT_LOG range from the first to the last unit read, trimmed to readAheadMessageSizeThreshold."""
        first = _long_at(cq, 0, "consume-queue unit")
        last_pos = len(cq) - CQ_UNIT_SIZE
        last = _long_at(cq, last_pos, "consume-queue unit")
        if last < first:
            return b"", len(cq)
        limit = len(cq)
        length = last - first + _I.unpack_from(cq, last_pos + 8)[0]
        while limit > CQ_UNIT_SIZE and length > self.config.readAheadMessageSizeThreshold:
            limit = last_pos
            last_pos = limit - CQ_UNIT_SIZE
            length = _long_at(cq, last_pos, "unit") - first + _I.unpack_from(cq, last_pos + 8)[0]
        if length <= 0:
            raise TieredReadError(f"COMMIT_LOG read length {length} is illegal")
        return self.commit_log.read(first, int(length)), limit

    # ------------------------------------------------------------------ time
    def offset_by_time(self, timestamp: int, boundary: str = LOWER) -> int:
        """FlatMessageFile.getQueueOffsetByTimeAsync (flat-store §8; flat-store pitfall 16); TieredReadError where it throws."""
        cq_min = self.min_offset
        cq_max = self.max_offset - 1
        if cq_max == -1 or cq_max < cq_min:
            return cq_min
        if store_time(self.message(cq_max)) < timestamp:
            return cq_max + 1
        if store_time(self.message(cq_min)) > timestamp:
            return cq_min
        segs = self.consume_queue.segments
        low, high = 0, len(segs) - 1
        mid = low + java_div(high - low, 2)
        while low <= high:
            s = segs[mid]
            if s.min_ts <= timestamp <= s.max_ts:
                break
            if timestamp < s.min_ts:
                high = mid - 1
            else:
                low = mid + 1
            mid = low + java_div(high - low, 2)
        if not 0 <= mid < len(segs):
            raise TieredReadError(f"no CONSUME_QUEUE segment at index {mid} (the broker's search runs off the list)")
        target = segs[mid]
        lo = java_div(target.base, CQ_UNIT_SIZE)
        hi = java_div(target.end, CQ_UNIT_SIZE) - 1
        while lo < hi:
            middle = lo + (hi - lo) // 2
            if store_time(self.message(middle)) < timestamp:
                lo = middle + 1
            else:
                hi = middle
        offset = lo
        if boundary == UPPER:
            while offset + 1 <= cq_max and store_time(self.message(offset + 1)) == timestamp:
                offset += 1
        return offset

    # ------------------------------------------------------------------ units
    def units(self):
        """(queueOffset, commitLogOffset, size, tagsCode) of every whole unit in the CONSUME_QUEUE files, from the
        first segment's base, as the broker's reads see them (committed sizes)."""
        for seg in self.consume_queue.segments:
            first = -(-seg.base // CQ_UNIT_SIZE)
            last = (seg.end // CQ_UNIT_SIZE) - 1
            for q in range(first, last + 1):
                try:
                    yield (q, *self.unit(q))
                except TieredReadError:
                    continue


def _split_problem(record: bytes, size: int) -> str | None:
    """The checks MessageFormatUtil.splitMessageBuffer makes on each record."""
    if len(record) < 8:
        return f"the record is cut short ({len(record)} of {size} bytes)"
    magic = _I.unpack_from(record, 4)[0]
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        return f"bad magic code 0x{magic & 0xFFFFFFFF:08X}"
    total = _I.unpack_from(record, 0)[0]
    if total != size:
        return f"TOTALSIZE {total} does not match the unit's size {size}"
    if len(record) < size:
        return f"the record is cut short ({len(record)} of its {size} bytes can be read)"
    return None


def _split_message_buffer(cq: bytes, msg: bytes) -> list[Fetched]:
    """MessageFormatUtil.splitMessageBuffer: a record per unit, skipping a coda, dropping bad ones, stopping at
    the first unit whose record runs past the buffer."""
    out: list[Fetched] = []
    if not msg or not cq or len(cq) % CQ_UNIT_SIZE:
        return out
    first = _Q.unpack_from(cq, 0)[0]
    for p in range(0, len(cq), CQ_UNIT_SIZE):
        log_offset, size, tags = _UNIT.unpack_from(cq, p)
        off = log_offset - first
        if off + size > len(msg):
            break
        if off < 0 or off + 8 > len(msg):
            continue
        magic = _I.unpack_from(msg, off + 4)[0]
        if magic == BLANK_MAGIC_CODE:
            off += COMMIT_LOG_CODA_SIZE
            if off + 8 > len(msg):
                continue
            magic = _I.unpack_from(msg, off + 4)[0]
        if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
            continue
        if size != _I.unpack_from(msg, off)[0]:
            continue
        rec = msg[off:off + size]
        if len(rec) < QUEUE_OFFSET_POSITION + 8:
            continue
        out.append(Fetched(rec, tags, _Q.unpack_from(rec, QUEUE_OFFSET_POSITION)[0]))
    return out
