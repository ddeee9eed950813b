"""The batch write path of MessageStore (format §7): encode, make room, write, index, flush, acknowledge.

Order of a batch, chosen so that a full disk stops it cleanly between two messages:
  1. encode every message (a message that cannot be stored cuts the batch just before it);
  2. make room: consume-queue files and index space for the batch are allocated (or measured) first; the
     batch is cut before the first message that has no room;
  3. commit log, one piece per segment: the next segment is created and allocated before the BLANK filler
     that rolls to it, so a full disk leaves the log ending at a record boundary;
  4. consume-queue units, one write per queue; 5. index (IndexService.build_index_batch when it exists);
  6. with sync_flush, one flush of the commit log for the whole batch (group commit), then the result.
Only what reached step 6 is acknowledged. A write that fails half-way (not for lack of room) marks the
store dirty: the abort marker stays and the next writer must recover.
"""
from __future__ import annotations

import mmap
import os
import time
from dataclasses import dataclass

import numpy as np

from engine.broker.index.file import index_file_size
from engine.broker.consumequeue.queue import UNIT_DTYPE
from engine.broker.index.keys import broker_index_keys
from engine.broker.commitlog.message import END_FILE_MIN_BLANK_LENGTH, MessageEncodeError, offset_msg_id
from engine.broker.write.batch import PARTS, QUEUE_OFFSET_POS, MessageBatch
from engine.fsutil import DiskFullError, WriteFailedError, allocate, format_bytes, free_bytes
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


def allocate_file(path) -> None:
    """Allocate a whole existing file on disk (index files are written through a mapping)."""
    fd = os.open(path, os.O_RDWR)
    try:
        allocate(fd, 0, os.fstat(fd).st_size, path)
    finally:
        os.close(fd)


def store_full(store, e: WriteFailedError) -> WriteFailedError:
    """The error a put reports: the store, the file, and the room left."""
    free = free_bytes(store.root)
    cls = DiskFullError if isinstance(e, DiskFullError) else WriteFailedError
    out = cls(e.path, f"{e.reason}; store {store.root} has {format_bytes(free)} free", None)
    out.args = (f"store {store.root} has {format_bytes(free)} free: cannot write {e.path}: {e.reason}",)
    return out


def put_batch(store, batch: MessageBatch, sync_flush: bool = False):
    n, error, sizes = _fits(store, batch)
    if n == 0:
        return _result(batch, None, None, 0, error)
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
    sizes = sizes[:n]
    phys, pieces = cl.layout(sizes)
    hashes = counts = None
    if store.config.messageIndexEnable:
        counts, hashes = index_hashes(topics, uniqs, keys, rollback)
    n, error = make_room(store, pieces, groups, counts, n, error)
    if n == 0:
        return _result(batch, None, None, 0, error)
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
    if n:
        store.note_written(int(phys[n - 1]), tss[n - 1])
    return _result(batch, phys, qoffs, n, error)


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


def make_room(store, pieces, groups: dict, counts, n: int, error):
    """Allocate every file the first n messages need, in message order: the commit-log segments they roll into,
    the consume-queue files their units go into, and room for the index files they start (index files are
    created and written through a mapping by the index service: their room is measured and kept free for them).
    Returns (n, error): n is cut at the first message whose room could not be had, with the DiskFullError."""
    cl = store.commitlog
    # At one message, the commit-log segment comes last: a stop at that message then leaves no new segment
    # without the BLANK filler that would roll to it.
    events = [(p.first, 2, "commitlog", p) for p in pieces if p.new_segment]
    for (topic, qid), idx in groups.items():
        cq = store.consume_queue(topic, qid)
        want = int(np.count_nonzero(idx < n))
        events += [(int(idx[j]), 0, "cq", (cq, start)) for j, start in cq.files_needed(want)]
    if counts is not None:
        events += [(i, 1, "index", nbytes) for i, nbytes in index_rolls(store, counts[:n])]
    events.sort(key=lambda e: (e[0], e[1]))
    kept = 0  # bytes kept free for index files started earlier in the batch
    for i, _, kind, what in events:
        if i >= n:
            break
        try:
            if kind == "index":
                kept += _keep_index_room(store, what, kept)
                continue
            if kept:
                need = cl.file_size if kind == "commitlog" else what[0].file_size
                free = free_bytes(store.root)
                if free is not None and free - kept < need:
                    raise DiskFullError(store.root, f"a new {kind} file needs {format_bytes(need)} beside the "
                                                    f"{format_bytes(kept)} kept for index files", free)
            if kind == "commitlog":
                cl.prepare_piece(what)
            else:
                what[0].allocate_file(what[1])
        except DiskFullError as e:
            return i, store_full(store, e)
    return n, error


def _keep_index_room(store, need: int, kept: int) -> int:
    """Check there is room for one more index file beside what is kept already; returns the bytes to keep for it
    (its size in whole blocks, plus the slack for checkpoint rewrites with the first one)."""
    free = free_bytes(store.index_dir)
    if need < 0:
        raise DiskFullError(store.index_dir, "the index file being written cannot be allocated", free)
    block = max(mmap.PAGESIZE, _block_size(store.index_dir))
    keep = -(-need // block) * block + (0 if kept else INDEX_SLACK)
    if free is not None and free - kept < keep:
        raise DiskFullError(store.index_dir, f"a new index file needs {format_bytes(need)}", free)
    return keep


def _block_size(path) -> int:
    try:
        return os.statvfs(path if os.path.exists(path) else os.path.dirname(path)).f_frsize
    except OSError:
        return 4096


def index_rolls(store, counts) -> list[tuple[int, int]]:
    """(message index, bytes) for each index file the index service will start while indexing these messages
    (message i's keys do not all fit the files before it). The file being written is allocated first."""
    cfg = store.config
    files = store.index.files
    try:
        store.secure_index_files()
    except DiskFullError:
        has_keys = np.flatnonzero(np.asarray(counts) > 0)
        return [(int(has_keys[0]), -1)] if len(has_keys) else []  # no key can go in: stop before the first
    left = cfg.maxIndexNum - files[-1].header.indexCount if files and not files[-1].is_write_full() else 0
    cum = np.cumsum(counts)
    if not len(cum) or int(cum[-1]) <= left:
        return []
    per_file = cfg.maxIndexNum - 1
    size = index_file_size(cfg.maxHashSlotNum, cfg.maxIndexNum)
    out = []
    k = 0
    while left + k * per_file < int(cum[-1]):
        out.append((int(np.searchsorted(cum, left + k * per_file, side="right")), size))
        k += 1
    return out


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
        if piece.new_segment:
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
    try:
        store.secure_index_files()  # a file started by this batch: allocated now, or by the next batch's check
    except DiskFullError:
        pass


def _result(batch, phys, qoffs, n: int, error):
    if n == 0:
        return BatchResult([], [], [], [], [], [], [], [], [], error)
    b = batch
    return BatchResult(b.topic[:n], b.queue_id[:n], phys[:n].tolist(), qoffs[:n].tolist(), b.size[:n],
                       b.store_ts[:n], b.uniq[:n], b.store_host[:n], b.store_port[:n], error)
