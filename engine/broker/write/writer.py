"""The batch write path of MessageStore (format §7): encode, make room, write, index, flush, acknowledge.

Order of a batch, chosen so that a full disk stops it cleanly between two messages:
  1. encode every message (a message that cannot be stored cuts the batch just before it);
  2. make room (Room): the room the batch's records, consume-queue units and index items take is allocated
     in every file they go into before anything is written, and the room of index files the batch starts is
     measured and kept free for them (the index service creates them); when the disk cannot give it all, the
     batch is cut after the most messages whose room could be had;
  3. commit log, one piece per segment: the next segment is created and its room allocated before the BLANK
     filler that rolls to it, so a full disk leaves the log ending at a record boundary;
  4. consume-queue units, one write per queue; 5. index (IndexService.build_index_batch when it exists);
  6. with sync_flush, one flush of the commit log for the whole batch (group commit), then the result.
Only what reached step 6 is acknowledged. A write that fails half-way (not for lack of room) marks the
store dirty: the abort marker stays and the next writer must recover.

Allocation by range: files are sparse, as the broker's, and a store costs what it holds. Room is allocated from
the write position on, a little ahead of it at once when the disk gives it (commit log RESERVE_AHEAD, consume
queues UNITS_AHEAD, index items ITEMS_AHEAD; the index slot table is allocated whole with its file), so a put
of a few messages takes a few MiB, not a 1 GiB segment and a 420 MB index file.
"""
from __future__ import annotations

import mmap
import os
import time
from dataclasses import dataclass

import numpy as np

from engine.broker.commitlog.log import RESERVE_AHEAD
from engine.broker.index.file import INDEX_HEADER_SIZE, SLOT_SIZE
from engine.broker.consumequeue.queue import UNIT_DTYPE
from engine.broker.index.file import ITEM_SIZE
from engine.broker.index.keys import broker_index_keys
from engine.broker.commitlog.message import END_FILE_MIN_BLANK_LENGTH, MessageEncodeError, offset_msg_id
from engine.broker.write.batch import PARTS, QUEUE_OFFSET_POS, MessageBatch
from engine.fsutil import DiskFullError, WriteFailedError, format_bytes, free_bytes
from engine.java.hashes import java_string_hashes
from engine.java.lang import java_string_hash

#: Room kept free beyond a new index file before one is started (checkpoint rewrites, index headers).
INDEX_SLACK = 64 << 10


@dataclass
class PutResult:
    commitLogOffset: int
    queueOffset: int
    msgId: str
    uniqKey: str | None
    storeSize: int
    topic: str
    queueId: int
    storeTimestamp: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class BatchResult:
    """What put_batch committed: the first len(self) messages of the batch, in order, and why it stopped
    early (`error`, with `error.batch_index`), if it did. Every message counted here is written (and, with
    sync_flush, flushed)."""
    topic: list[str]
    queue_id: list[int]
    phy: list[int]
    queue_offset: list[int]
    size: list[int]
    store_ts: list[int]
    uniq_key: list[str | None]
    store_host: list[bytes]
    store_port: list[int]
    error: Exception | None = None
    #: messages whose store time is below that of a message stored before them (a clock that stepped back: index
    #: headers then do not bound their messages' times), and the first of them: (commit-log offset, store time,
    #: the latest store time before it)
    went_back: int = 0
    went_back_first: tuple[int, int, int] | None = None
    #: messages carrying INNER_MULTI_DISPATCH that were stored as they came, the store not enabling LMQ (as the
    #: broker ignores it then), and the %LMQ% consume-queue units written
    lmq_ignored: int = 0
    lmq_units: int = 0

    def __len__(self) -> int:
        return len(self.phy)

    def msg_id(self, i: int) -> str:
        return offset_msg_id(self.store_host[i], self.store_port[i], self.phy[i])

    def results(self) -> list[PutResult]:
        return [PutResult(self.phy[i], self.queue_offset[i], self.msg_id(i), self.uniq_key[i], self.size[i],
                          self.topic[i], self.queue_id[i], self.store_ts[i]) for i in range(len(self))]


class IndexRecord:
    """What IndexService.build_index reads from a record (the per-record fallback of a batch put)."""
    __slots__ = ("physical_offset", "store_timestamp", "_keys")

    def __init__(self, phy: int, ts: int, keys: list[str]):
        self.physical_offset, self.store_timestamp, self._keys = phy, ts, keys

    def index_keys(self) -> list[str]:
        return self._keys


def now_ms() -> int:
    return int(time.time() * 1000)


def store_full(store, e: WriteFailedError) -> WriteFailedError:
    """The error a put reports: the store, the file, and the room left when the write failed (the error's own
    figure: measured again now, after the room taken for the batch was given back, it could exceed what the write
    needed)."""
    free = e.free if e.free is not None else free_bytes(store.root)
    cls = DiskFullError if isinstance(e, DiskFullError) else WriteFailedError
    out = cls(e.path, f"{e.reason}; store {store.root} has {format_bytes(free)} free", None)
    out.args = (f"store {store.root} has {format_bytes(free)} free: cannot write {e.path}: {e.reason}",)
    return out


def put_batch(store, batch: MessageBatch, sync_flush: bool = False):
    lmq = _lmq_step(store, batch) if batch.multi else None
    n, error, sizes = _fits(store, batch)
    if lmq is not None and lmq.cut < n:
        n, error = lmq.cut, lmq.error
    if n == 0:
        return _lmq_noted(_result(batch, None, None, 0, error), lmq, 0)
    store.begin_put()
    cl = store.commitlog
    b = batch
    topics, qids, tss, in_cq, tags, uniqs, keys, rollback = (b.topic[:n], b.queue_id[:n], b.store_ts[:n], b.in_cq[:n],
                                                             b.tags_code[:n], b.uniq[:n], b.keys[:n], b.rollback[:n])
    groups = _queue_groups(topics, qids, in_cq)
    qoffs = np.zeros(n, dtype=np.int64)
    for (topic, qid), idx in groups.items():
        base = store.consume_queue(topic, qid).max_offset_in_queue
        qoffs[idx] = np.arange(base, base + len(idx), dtype=np.int64)
    if lmq is not None:  # the %LMQ% units go with the others (their queue offsets are in the records already)
        for key, idx in lmq.groups.items():
            if len(idx) and idx[0] < n:
                groups[key] = idx
    sizes = sizes[:n]
    phys, pieces = cl.layout(sizes)
    hashes = counts = None
    if store.config.messageIndexEnable:
        counts, hashes = index_hashes(topics, uniqs, keys, rollback)
    n, error = make_room(store, Room(store, phys, sizes, pieces, groups, counts), n, error)
    if n == 0:
        return _lmq_noted(_result(batch, None, None, 0, error), lmq, 0)
    try:
        n, error = _write_commitlog(store, batch.parts, phys, qoffs, pieces, n, error)
        _write_queues(store, groups, phys, sizes, tags, tss, n)
        if hashes is not None and n:
            _write_index(store, phys, tss, counts, hashes, topics, uniqs, keys, rollback, n)
        if n and sync_flush:
            cl.sync()
            store.checkpoint.physicMsgTimestamp = tss[n - 1]
    except WriteFailedError as e:
        store.mark_dirty()
        raise store_full(store, e) from None
    except BaseException:
        store.mark_dirty()
        raise
    res = _lmq_noted(_result(batch, phys, qoffs, n, error), lmq, n)
    if n:
        _time_went_back(store, res, tss[:n], phys)
        store.note_written(int(phys[n - 1]), max(tss[:n]))
    return res


def _lmq_step(store, batch: MessageBatch):
    """The LMQ step (engine.broker.write.lmq) with the store's enableLmq / enableMultiDispatch (its mode, decided
    once per open store)."""
    from engine.broker.write.lmq import assign_lmq

    mode = store.mode
    main = {(t, q) for t, q, c in zip(batch.topic, batch.queue_id, batch.in_cq) if c}
    return assign_lmq(store, batch, mode.lmq, mode.multi_dispatch, main)


def _lmq_noted(res: BatchResult, lmq, n: int) -> BatchResult:
    if lmq is not None:
        res.lmq_ignored = sum(1 for i in lmq.ignored if i < n)
        res.lmq_units = sum(int(np.count_nonzero(idx < n)) for idx in lmq.groups.values())
    return res


def _time_went_back(store, res: BatchResult, tss: list, phys) -> None:
    """Count the messages stored before a message stored earlier (BatchResult.went_back)."""
    ts = np.asarray(tss, dtype=np.int64)
    latest = np.maximum.accumulate(np.concatenate(([store.latest_store_ts()], ts)))[:-1]
    back = np.flatnonzero(ts < latest)
    if len(back):
        i = int(back[0])
        res.went_back, res.went_back_first = len(back), (int(phys[i]), int(ts[i]), int(latest[i]))


def _fits(store, batch) -> tuple[int, Exception | None, np.ndarray]:
    """How many leading messages of the batch this store can take at all (body and record size limits)."""
    n = len(batch)
    cl = store.commitlog
    limit = cl.file_size - END_FILE_MIN_BLANK_LENGTH
    max_body = store.config.maxMessageSize
    sizes = np.asarray(batch.size, dtype=np.int64)
    bad = sizes > limit
    if batch.max_body > max_body:
        bad |= np.asarray(batch.body_len, dtype=np.int64) > max_body
    if not bad.any():
        return n, None, sizes
    i = int(np.argmax(bad))
    blen, size = batch.body_len[i], int(sizes[i])
    e = MessageEncodeError(f"message body is {blen} bytes; maxMessageSize is {max_body}" if blen > max_body
                           else f"message record is {size} bytes; it cannot fit a {cl.file_size}-byte commit-log "
                                "segment")
    e.batch_index = i
    return i, e, sizes


def _queue_groups(topics, qids, in_cq) -> dict[tuple[str, int], np.ndarray]:
    """The batch positions of the messages of each consume queue, in order (messages without a unit left out)."""
    pairs = list(zip(topics, qids))
    kinds = dict.fromkeys(pairs)
    if len(kinds) == 1 and all(in_cq):
        return {pairs[0]: np.arange(len(pairs), dtype=np.int64)}
    ids = {k: j for j, k in enumerate(kinds)}
    qid_of = np.fromiter(map(ids.__getitem__, pairs), dtype=np.int64, count=len(pairs))
    qid_of[~np.fromiter(in_cq, dtype=bool, count=len(pairs))] = -1
    order = np.argsort(qid_of, kind="stable")
    sorted_ids = qid_of[order]
    cuts = np.flatnonzero(np.diff(sorted_ids)) + 1
    out = {}
    for part in np.split(order, cuts):
        j = int(qid_of[part[0]])
        if j >= 0:
            out[pairs[part[0]]] = part
    return out


def make_room(store, room: "Room", n: int, error):
    """Allocate the room of the first n messages (Room.reserve), or of as many of them as the disk gives room
    for. Returns (n, error): n is cut after the last message whose room could be had, with the DiskFullError."""
    try:
        room.reserve(n)
        return n, error
    except DiskFullError as e:
        full = e
    lo, hi = 0, n - 1  # reserve(m) succeeding means every m' < m fits too: the most that fit, by bisection
    while lo < hi:
        mid = (lo + hi + 1) // 2
        try:
            room.reserve(mid)
            lo = mid
        except DiskFullError as e:
            full, hi = e, mid - 1
    room.settle(lo)
    return lo, store_full(store, full)


class Room:
    """The room the first m messages of a batch take, in every file they go into (allocation by range).

    reserve(m) allocates the commit-log bytes of their records (creating the segments they roll into, sparse,
    and the BLANK filler's 8 bytes before each), the room of their consume-queue units (creating files as
    needed) and of their index items in the index file being written, each a little ahead when the disk gives
    it; it checks that the free space left holds the index files they start (IndexService creates those while
    indexing: their header and slot table whole, their items). Calls are cumulative (what a call allocated stays
    allocated); settle(m) removes the files the calls created that the first m messages do not need."""

    def __init__(self, store, phys, sizes, pieces, groups: dict, counts):
        self.store, self.phys, self.sizes, self.pieces = store, phys, sizes, pieces
        self.queues = [(store.consume_queue(t, q), idx, []) for (t, q), idx in groups.items()]
        self.created: list = []   # pieces whose segment a reserve() call created
        self.cum = None
        if counts is not None:
            cfg = store.config
            self.cum = np.cumsum(counts, dtype=np.int64)
            files = store.index.files
            self.current = files[-1] if files and not files[-1].is_write_full() else None
            self.left = cfg.maxIndexNum - self.current.header.indexCount if self.current is not None else 0
            self.per_file = cfg.maxIndexNum - 1
            self.head_bytes = INDEX_HEADER_SIZE + SLOT_SIZE * cfg.maxHashSlotNum

    def reserve(self, m: int) -> None:
        """Allocate the room of the first m messages; DiskFullError when some of it cannot be had."""
        if m <= 0:
            return
        cl = self.store.commitlog
        for piece in self.pieces:
            if piece.first >= m:
                break
            if cl.reserve_piece(piece, cl.piece_end(piece, self.phys, self.sizes, m), RESERVE_AHEAD):
                self.created.append(piece)
        for cq, idx, made in self.queues:
            made += cq.reserve_units(int(np.searchsorted(idx, m)))
        if self.cum is not None:
            self._index_room(int(self.cum[m - 1]))

    def _index_room(self, items: int) -> None:
        if self.current is not None and items:
            self.current.ensure_items(self.current.header.indexCount + min(items, self.left))
        if items <= self.left:
            return
        block = max(mmap.PAGESIZE, _block_size(self.store.index_dir))
        keep, rest = INDEX_SLACK, items - self.left  # slack: checkpoint rewrites, index headers
        while rest > 0:
            k = min(rest, self.per_file)
            keep += -(-(self.head_bytes + ITEM_SIZE * (k + 1)) // block) * block
            rest -= k
        free = free_bytes(self.store.index_dir)
        if free is not None and free < keep:
            raise DiskFullError(self.store.index_dir, f"a new index file needs {format_bytes(keep)} (header, "
                                                      "slot table and these messages' items, in whole blocks) beyond "
                                                      "the commit-log and consume-queue room they take", free)

    def settle(self, m: int) -> None:
        """Remove the files reserve() created that the first m messages do not use (newest first)."""
        cl = self.store.commitlog
        for piece in reversed(self.created):
            if piece.first >= m:
                cl.unmake_piece(piece)
        for cq, idx, made in self.queues:
            end = cq.end_after(int(np.searchsorted(idx, m)))
            cq.remove_unwritten([seg for seg in made if seg.start >= end])


def _block_size(path) -> int:
    try:
        return os.statvfs(path if os.path.exists(path) else os.path.dirname(path)).f_frsize
    except OSError:
        return 4096


def index_hashes(topics, uniqs, keys, rollback) -> tuple[np.ndarray, np.ndarray]:
    """Per message, the number of index keys (engine.broker.index.keys.broker_index_keys: UNIQ_KEY then each KEYS
    token, none for a rollback), and the Java hashCodes of all their "topic#key" strings, in put order.

    Vectorised: every message's "uniq keys" text is joined with \u0001 (which no key can hold) and cut into
    tokens on " " and \u0001 over its UTF-16 units; hash("topic#" + key) is hash("topic#") * 31^len(key) +
    hash(key) (mod 2^32), so the joined strings are never built.
    """
    n = len(topics)
    if any(rollback) or None in uniqs or "" in uniqs:
        return _index_hashes_slow(topics, uniqs, keys, rollback)
    big = "\x01".join([u if k is None else f"{u} {k}" for u, k in zip(uniqs, keys)])
    u16 = np.frombuffer(big.encode("utf-16-le", "surrogatepass"), dtype="<u2")
    if len(u16) != len(big):  # characters outside the BMP: hash the joined strings one by one
        return _index_hashes_slow(topics, uniqs, keys, rollback)
    starts, ends, msg = _tokens(u16)
    counts = np.bincount(msg, minlength=n).astype(np.int32)
    hk = substring_hashes(u16, starts, ends)
    names = list(dict.fromkeys(topics))
    prefix = np.array([java_string_hash(t + "#") & 0xFFFFFFFF for t in names], dtype=np.uint32)
    if len(names) == 1:
        pre = prefix[0]
    else:
        where = {t: j for j, t in enumerate(names)}
        pre = prefix[np.fromiter(map(where.__getitem__, topics), dtype=np.int64, count=n)[msg]]
    with np.errstate(over="ignore"):
        return counts, (pre * _powers(int((ends - starts).max()) + 1, 31)[ends - starts] + hk).view(np.int32)


def _tokens(u16: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start, end and message number of each token: runs of units other than " " and \u0001 (the message
    separator)."""
    word = (u16 != 1) & (u16 != 32)
    edge = np.diff(word.astype(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts, ends = np.flatnonzero(edge == 1), np.flatnonzero(edge == -1)
    return starts, ends, np.cumsum(u16 == 1)[starts]


_POW_CACHE: dict[int, np.ndarray] = {}


def _powers(n: int, base: int) -> np.ndarray:
    """base^0 .. base^(n-1) mod 2^32 (uint32, wrapping as Java int arithmetic does)."""
    have = _POW_CACHE.get(base)
    if have is None or len(have) < n:
        size = max(n, 1 << 16, 2 * len(have) if have is not None else 0)
        have = np.full(size, base, dtype=np.uint32)
        have[0] = 1
        with np.errstate(over="ignore"):
            have = np.cumprod(have, dtype=np.uint32)
        _POW_CACHE[base] = have
    return have[:n]


_INV31 = pow(31, -1, 1 << 32)


def substring_hashes(units: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Java String.hashCode of units[a:b] for every (a, b), all at once: with P the prefix sums of
    units[j] * 31^-j (31 is odd, so invertible mod 2^32), hash(units[a:b]) = 31^(b-1) * (P[b] - P[a])."""
    n = len(units)
    with np.errstate(over="ignore"):
        w = units.astype(np.uint32) * _powers(n, _INV31)
        p = np.zeros(n + 1, dtype=np.uint32)
        np.cumsum(w, dtype=np.uint32, out=p[1:])
        return (_powers(n, 31)[ends - 1] * (p[ends] - p[starts])).view(np.uint32)


def _index_hashes_slow(topics, uniqs, keys, rollback) -> tuple[np.ndarray, np.ndarray]:
    """index_hashes through the key strings themselves (rollbacks, empty or missing UNIQ_KEYs, non-BMP text)."""
    counts = np.zeros(len(topics), dtype=np.int32)
    flat: list[str] = []
    for i, t in enumerate(topics):
        ks = broker_index_keys(t, uniqs[i], keys[i], rollback[i])
        counts[i] = len(ks)
        flat += ks
    return counts, (java_string_hashes(flat) if flat else np.empty(0, dtype=np.int32))


def _write_commitlog(store, parts, phys, qoffs, pieces, n: int, error):
    cl = store.commitlog
    for piece in pieces:
        if piece.first >= n:
            break
        piece.end = min(piece.end, n)
        if piece.new_segment:  # make_room created it; a batch put without make_room allocates as it writes
            try:
                cl.prepare_piece(piece)
            except DiskFullError as e:  # nothing of this piece is written: the log ends at a record boundary
                return piece.first, store_full(store, e)
        cl.write_piece(piece, fill_offsets(parts, piece.first, piece.end, phys, qoffs))
    return n, error


_OFFSET_BYTES = np.arange(QUEUE_OFFSET_POS, QUEUE_OFFSET_POS + 16, dtype=np.int64)


def fill_offsets(parts: list[bytes], a: int, b: int, phys: np.ndarray, qoffs: np.ndarray) -> bytearray:
    """Records a..b-1 back to back, with their QUEUEOFFSET and PHYSICALOFFSET filled in (they are contiguous)."""
    chunk = bytearray(b"".join(parts[a * PARTS:b * PARTS]))
    k = b - a
    vals = np.empty((k, 2), dtype=">i8")
    vals[:, 0] = qoffs[a:b]
    vals[:, 1] = phys[a:b]
    rel = phys[a:b] - phys[a]
    np.frombuffer(chunk, dtype=np.uint8)[rel[:, None] + _OFFSET_BYTES] = vals.view(np.uint8).reshape(k, 16)
    return chunk


def _write_queues(store, groups: dict, phys, sizes, tags, tss, n: int) -> None:
    last_ts = None
    tags = np.asarray(tags, dtype=np.int64)
    for (topic, qid), idx in groups.items():
        idx = idx[idx < n]
        if not len(idx):
            continue
        units = np.empty(len(idx), dtype=UNIT_DTYPE)
        units["offset"] = phys[idx]
        units["size"] = sizes[idx]
        units["tags_code"] = tags[idx]
        last = int(idx[-1])
        store.consume_queue(topic, qid).append_units(units.tobytes(), int(phys[last] + sizes[last]))
        last_ts = tss[last] if last_ts is None else max(last_ts, tss[last])
    if last_ts is not None:
        store.checkpoint.logicsMsgTimestamp = last_ts


def _write_index(store, phys, tss, counts, hashes, topics, uniqs, keys, rollback, n: int) -> None:
    index = store.index
    batch_fn = getattr(index, "build_index_batch", None)
    if batch_fn is not None:
        cut = int(counts[:n].sum())
        batch_fn(phys[:n], np.asarray(tss[:n], dtype=np.int64), counts[:n], hashes[:cut])
    else:
        for i in range(n):
            ks = broker_index_keys(topics[i], uniqs[i], keys[i], rollback[i])
            index.build_index(IndexRecord(int(phys[i]), tss[i], ks))


def _result(batch, phys, qoffs, n: int, error):
    if n == 0:
        return BatchResult([], [], [], [], [], [], [], [], [], error)
    b = batch
    return BatchResult(b.topic[:n], b.queue_id[:n], phys[:n].tolist(), qoffs[:n].tolist(), b.size[:n],
                       b.store_ts[:n], b.uniq[:n], b.store_host[:n], b.store_port[:n], error)
