"""Rebuild a store's index files from its commit log (spark-reindex), byte-identical to the broker's.

The job, bottom to top:

* scan: one commit-log segment -> compact columns. Records never span segments (format §3.1), so every
  segment decodes on its own. For each record the broker would dispatch: PHYSICALOFFSET, STORETIMESTAMP and
  the number of keys it indexes; for every key (UNIQ_KEY, then each non-empty KEYS token, as `topic#key`,
  rollback records none, format §5.8) the Java hashCode. Record-level columns plus one hash per key are the
  compact form of "offset, timestamp, hash per key": a message's keys share its offset and time.
* plan (driver): the "already indexed" rule, the prefix sum of per-segment key counts, and the cut into
  files of indexNum-1 entries, each seeded from the previous file's last entry (IndexService rolling).
* build: one task per index file, the vectorized builder over that file's entries.
* publish: temporary names, renamed only after every task succeeded; old index kept as a backup unless
  replace; checkpoint indexMsgTimestamp; all under the store lock.

Runners: "inline" (in-process, no JVM) and Spark (local[*] by default, or any master URL). pyspark is
imported only inside the Spark runner, so this module imports without it. Besides the broker-index job's own
steps they offer generic ones (scan with any scan function, ask, build_with) that engine.jobs.tiered_index uses for
`spark-reindex --format tiered`.
"""
from __future__ import annotations

import mmap
import os
import shutil
import struct
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from engine.broker.checkpoint import Checkpoint
from engine.broker.config import BrokerConfig, check_index_geometry
from engine.errors import InvalidArgumentError, NotAStoreError, StoreError, UncleanStoreError
from engine.fsutil import fsync_dir
from engine.broker.indexbuild import build_index_file_from_hashes
from engine.broker.layout import INDEX_NAME, StoreLayout, index_file_name, list_index_files
from engine.java.lang import java_string_hash, to_i32
from engine.broker.lock import StoreLock
from engine.broker.commitlog import open_commitlog, scan_stop
from engine.broker.records import SCAN_WINDOW, ZERO, RecordBatch, SegmentEnd, decode_segment
from engine.broker.message import LENGTH_MISMATCH, TRANSACTION_ROLLBACK_TYPE, VALID, check_message

INLINE = "inline"
DEFAULT_MASTER = "local[*]"
_INT64_MIN = np.iinfo(np.int64).min

Progress = Callable[[str, int, int], None]  # (phase, done, total); phases "scan" and "build"


class ReindexError(StoreError):
    """The rebuild could not run or did not complete (nothing was published)."""


# ============================================================================ scan

@dataclass
class SegmentInfo:
    index: int
    path: str
    start: int
    file_len: int
    is_last: bool  # informational: a zero area ends the data only in the last segment (see _anomalies)


@dataclass
class SegmentScan:
    """What one segment contributes. Arrays are per dispatched record, except key_hash (per key)."""
    index: int
    start: int
    rec_phy: np.ndarray      # int64 PHYSICALOFFSET field
    rec_ts: np.ndarray       # int64 STORETIMESTAMP
    rec_nkeys: np.ndarray    # int32 keys the broker would put (0: none / rollback)
    key_hash: np.ndarray     # int32 Java hashCode of each "topic#key", in put order
    bytes_scanned: int = 0   # bytes of records walked (up to the blank filler / end of data)
    end_kind: str = "empty"  # blank | zero | corrupt | empty
    end_offset: int = 0      # global offset where the walk of this segment stopped
    end_reason: str = ""
    length_mismatches: int = 0
    rollbacks: int = 0
    phy_mismatches: int = 0  # records whose PHYSICALOFFSET field differs from their position

    @property
    def records(self) -> int:
        return len(self.rec_phy)

    @property
    def keys(self) -> int:
        return len(self.key_hash)

    def summary(self) -> dict:
        """Everything the driver needs to plan, without the columns."""
        keyed = self.rec_nkeys > 0
        kp = self.rec_phy[keyed]
        return {
            "index": self.index, "start": self.start, "records": self.records, "keys": self.keys,
            "bytes_scanned": self.bytes_scanned, "end_kind": self.end_kind, "end_offset": self.end_offset,
            "end_reason": self.end_reason, "length_mismatches": self.length_mismatches,
            "rollbacks": self.rollbacks, "phy_mismatches": self.phy_mismatches,
            "first_rec_ts": int(self.rec_ts[0]) if self.records else None,
            "keyed_min": int(kp.min()) if len(kp) else None,
            "keyed_max": int(kp.max()) if len(kp) else None,
            "keyed_monotone": bool(np.all(kp[1:] >= kp[:-1])) if len(kp) > 1 else True,
        }


def _empty_scan(index: int, start: int, **kw) -> SegmentScan:
    return SegmentScan(index, start, np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int32),
                       np.empty(0, np.int32), **kw)


def _pow31(n: int) -> np.ndarray:
    """31^k mod 2^32 for k = 0..n, as uint32."""
    p = np.full(n + 1, 31, dtype=np.uint32)
    p[0] = 1
    return np.cumprod(p, dtype=np.uint32)


def _hash_ranges(b: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """hashCode of byte ranges read in place (as if each byte were one UTF-16 unit), and whether each is ASCII.

    Ranges are grouped by length; a group is an (m, L) matrix copied out of a sliding-window view of the
    buffer and reduced against the powers of 31 in uint32 (Java int wrap-around).
    """
    m = len(starts)
    h = np.zeros(m, dtype=np.uint32)
    ascii_ = np.ones(m, dtype=bool)
    if m == 0:
        return h, ascii_
    order = np.argsort(lengths, kind="stable")
    srt = lengths[order]
    cuts = np.flatnonzero(srt[1:] != srt[:-1]) + 1
    for a0, b0 in zip(np.concatenate(([0], cuts)).tolist(), np.concatenate((cuts, [m])).tolist()):
        length = int(srt[a0])
        if length <= 0:
            continue
        sel = order[a0:b0]
        weights = np.array([pow(31, length - 1 - c, 2**32) for c in range(length)], dtype=np.uint32)
        windows = np.lib.stride_tricks.sliding_window_view(b, length)
        step = max(1, (1 << 22) // length)
        for a in range(0, len(sel), step):
            rows = sel[a:a + step]
            mat = windows[starts[rows]]
            h[rows] = np.einsum("ij,j->i", mat, weights, dtype=np.uint32, casting="unsafe")
            ascii_[rows] = mat.max(axis=1) < 0x80
    return h, ascii_


def _row_matrix(b: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """b[start:start+width] for each start, as a (k, width) copy; rows running past the end are zero-padded."""
    n = len(b)
    over = starts + width > n
    if not over.any():
        return np.lib.stride_tricks.sliding_window_view(b, width)[starts]
    out = np.zeros((len(starts), width), dtype=b.dtype)
    ok = ~over
    if ok.any():
        out[ok] = np.lib.stride_tricks.sliding_window_view(b, width)[starts[ok]]
    base = int(starts[over].min())
    tail = np.zeros(n - base + width, dtype=b.dtype)
    tail[:n - base] = b[base:]
    out[over] = np.lib.stride_tricks.sliding_window_view(tail, width)[starts[over] - base]
    return out


def _length_batches(lengths: np.ndarray, budget: int = 1 << 24):
    """Row indices grouped by similar length (sorted), each batch's rows x max length within the budget."""
    order = np.argsort(lengths, kind="stable")
    srt = lengths[order]
    a, n = 0, len(order)
    while a < n:
        width = int(srt[min(n - 1, a + max(1, budget // max(1, int(srt[a]))) - 1)])
        step = max(1, budget // max(1, width))
        b_ = min(n, a + step)
        yield order[a:b_], int(srt[b_ - 1])
        a = b_


_UNIQ_NAME = b"UNIQ_KEY\x01"
_KEYS_NAME = b"KEYS\x01"


def _last_entry_value(Pf: np.ndarray, width: int, cr, cc, nxt, name: bytes):
    """For entries starting at row cr, column cc of the flattened (rows, width) matrix Pf (sorted by row, then
    column) whose name is `name` minus its 0x01 and whose value is non-empty: the last one per row, as
    (rows, value start column, value length)."""
    k = len(name)
    ok = nxt - 1 - cc > k  # entry longer than "NAME\x01": a non-empty value follows
    idx = np.flatnonzero(ok)
    base = cr[idx] * width + cc[idx]
    limit = len(Pf) - 1
    for j in range(k):  # compare the name byte by byte, narrowing the candidates as we go
        hit = Pf[np.minimum(base + j, limit)] == name[j]
        idx, base = idx[hit], base[hit]
    if len(idx) == 0:
        return idx, idx, idx
    r = cr[idx]
    last = idx[np.append(r[1:] != r[:-1], True)]
    return cr[last], cc[last] + k, nxt[last] - 1 - cc[last] - k


def _index_tokens(b: np.ndarray, starts: np.ndarray, lengths: np.ndarray):
    """The keys the index service takes from each record's properties b[start:start+length] (§2.5, §5.8).

    Returns per key: record number (into starts), a sequence number ordering keys within a record (UNIQ_KEY
    first, then the KEYS tokens in order), and the key's byte range in b. Same answers as parse_properties:
    an entry starts at 0 or after 0x02 and ends before the next 0x02; its name ends at its first 0x01; empty
    values are dropped; the last entry with a name wins; KEYS splits on single spaces, empty tokens skipped.
    Bytes equal decoded text here: 0x01, 0x02, 0x20 and the ASCII names are single bytes that UTF-8 decoding
    (even with replacement characters) never merges into anything else.
    """
    out_rec, out_seq, out_start, out_len = [], [], [], []
    seq_base = 0
    for rows, width in _length_batches(lengths):
        k = len(rows)
        P = _row_matrix(b, starts[rows], width)
        pl = lengths[rows]
        sep = np.flatnonzero(P.reshape(-1) == 2)
        sr, sc = np.divmod(sep, width)
        inside = sc < pl[sr]
        sr, sc = sr[inside], sc[inside]
        # Entry starts, sorted by row then column: column 0 of every row, then one past each separator.
        # Merged without sorting: row r's column 0 comes after the r earlier rows' starts and their separators.
        total = k + len(sr)
        cr = np.empty(total, dtype=np.int64)
        cc = np.empty(total, dtype=np.int64)
        before = np.searchsorted(sr, np.arange(k))
        vpos = np.arange(k) + before
        cr[vpos], cc[vpos] = np.arange(k), 0
        spos = np.arange(len(sr)) + sr + 1
        cr[spos], cc[spos] = sr, sc + 1
        # Each entry ends at its separator (the next entry start - 1) or at the end of the properties.
        nxt = np.empty_like(cc)
        nxt[:-1] = np.where(cr[1:] == cr[:-1], cc[1:], pl[cr[:-1]] + 1)
        nxt[-1] = pl[cr[-1]] + 1
        Pf = P.reshape(-1)
        ur, uc, ul = _last_entry_value(Pf, width, cr, cc, nxt, _UNIQ_NAME)
        kr, kc, kl = _last_entry_value(Pf, width, cr, cc, nxt, _KEYS_NAME)
        out_rec.append(rows[ur])
        out_seq.append(np.full(len(ur), seq_base, dtype=np.int64))
        out_start.append(starts[rows[ur]] + uc)
        out_len.append(ul)
        seq_base += 1
        if len(kr):
            abs_k = starts[rows[kr]] + kc
            for krows, kwidth in _length_batches(kl):
                K = _row_matrix(b, abs_k[krows], kwidth)
                word = (K != 0x20) & (np.arange(kwidth) < kl[krows][:, None])
                edge = np.zeros((len(krows), kwidth + 1), dtype=np.int8)  # +1 where a token starts, -1 past its end
                edge[:, :-1] += word
                edge[:, 1:] -= word
                tr, tc = np.divmod(np.flatnonzero(edge.reshape(-1) == 1), kwidth + 1)
                ec = np.flatnonzero(edge.reshape(-1) == -1) % (kwidth + 1)
                out_rec.append(rows[kr[krows[tr]]])
                out_seq.append(seq_base + np.arange(len(tr), dtype=np.int64))
                out_start.append(abs_k[krows[tr]] + tc)
                out_len.append(ec - tc)
                seq_base += len(tr)
    if not out_rec:
        e = np.empty(0, dtype=np.int64)
        return e, e, e, e
    return (np.concatenate(out_rec).astype(np.int64), np.concatenate(out_seq),
            np.concatenate(out_start).astype(np.int64), np.concatenate(out_len).astype(np.int64))


def scan_segment(seg: SegmentInfo) -> SegmentScan:
    """Decode one commit-log segment the way the broker's dispatcher does (no CRC, §7.7).

    Same records and the same keys as walking the segment with check_message(check_crc=False) and
    MessageRecord.index_keys(), but the header fields are read with numpy for all records at once and the
    properties are searched for the two names the index needs instead of being parsed into dicts.
    """
    with open(seg.path, "rb") as f:
        length = os.fstat(f.fileno()).st_size
        if length == 0:
            return _empty_scan(seg.index, seg.start, end_kind="empty", end_offset=seg.start)
        mm = mmap.mmap(f.fileno(), length, access=mmap.ACCESS_READ)
    try:
        return _scan_buffer(mm, seg.index, seg.start)
    finally:
        try:
            mm.close()
        except BufferError:  # numpy views still alive after an error: the mapping goes with them
            pass


def _scan_buffer(buf, index: int, seg_start: int, window: int = SCAN_WINDOW) -> SegmentScan:
    """The broker index's view of one segment buffer: engine.broker.records decodes the records window by
    window, then _index_columns finds and hashes each dispatched record's keys."""
    parts: list[dict] = []
    end = SegmentEnd(ZERO, 0)
    b = np.frombuffer(buf, dtype=np.uint8) if len(buf) else np.empty(0, np.uint8)
    try:
        for item in decode_segment(buf, 0, window):
            if isinstance(item, SegmentEnd):
                end = item
            else:
                parts.append(_index_columns(buf, b, item, seg_start))
    finally:
        del b
    pos = end.pos
    if not parts:
        return _empty_scan(index, seg_start, bytes_scanned=pos, end_kind=end.kind, end_offset=seg_start + pos,
                           end_reason=end.reason)

    def cat(key, dtype):
        return np.concatenate([p_[key] for p_ in parts]).astype(dtype, copy=False)

    return SegmentScan(index, seg_start, cat("phy", np.int64), cat("ts", np.int64), cat("nkeys", np.int32),
                       cat("key_hash", np.int32), bytes_scanned=pos, end_kind=end.kind, end_offset=seg_start + pos,
                       end_reason=end.reason, length_mismatches=sum(p_["mismatches"] for p_ in parts),
                       rollbacks=sum(p_["rollbacks"] for p_ in parts),
                       phy_mismatches=sum(p_["phy_mismatches"] for p_ in parts))


def _index_columns(buf, b: np.ndarray, batch: RecordBatch, seg_start: int) -> dict:
    """Index keys of one decoded window: the records the dispatcher indexes and each key's Java hash."""
    mismatches = int(len(batch) - np.count_nonzero(batch.length_ok))
    if mismatches:  # LENGTH_MISMATCH: skipped by the dispatcher (format §7.7), the walk goes on by TOTALSIZE
        batch = batch.select(batch.length_ok)
    s, sys_flag, phy, ts = batch.pos, batch.sys_flag, batch.phy.copy(), batch.store_ts.copy()
    p_topic, topic_len, p_props, props_len = batch.topic_pos, batch.topic_len, batch.props_pos, batch.props_len
    rollback = (sys_flag & 0xC) == TRANSACTION_ROLLBACK_TYPE
    phy_mismatches = int(np.count_nonzero(phy != seg_start + s))

    # The two properties the index needs, found the way the 4.9.1+/5.x parser finds them (format §2.5): an
    # entry starts after 0x02, its name ends at its first 0x01, empty values are dropped and the last entry
    # of a name wins. Searching bytes equals searching the decoded text: 0x01, 0x02 and ASCII names are
    # single bytes that UTF-8 decoding (even with replacement) never merges into other characters.
    m = len(s)
    # hashCode(topic + "#") per record, from the topic bytes in place (UTF-16 units = bytes when ASCII).
    prefix, ascii_topic = _hash_ranges(b, p_topic, topic_len)
    prefix *= np.uint32(31)
    prefix += np.uint32(ord("#"))
    if not ascii_topic.all():
        cache: dict[bytes, int] = {}
        for r in np.flatnonzero(~ascii_topic).tolist():
            ta, tl = int(p_topic[r]), int(topic_len[r])
            tb = bytes(buf[ta:ta + tl])
            if tb not in cache:
                cache[tb] = java_string_hash(tb.decode("utf-8", "replace") + "#") & 0xFFFFFFFF
            prefix[r] = cache[tb]
    rows = np.flatnonzero((props_len > 0) & ~rollback)
    rec, seq, t_start, t_len = _index_tokens(b, p_props[rows], props_len[rows])
    rec = rows[rec]
    order = np.lexsort((seq, rec))  # put order: record by record, UNIQ_KEY first, then KEYS tokens
    rec, t_start, t_len = rec[order], t_start[order], t_len[order]
    nkeys = np.bincount(rec, minlength=m).astype(np.int32)

    # Hash every key at once: hashCode(prefix + token) = hashCode(prefix) * 31^len(token) + hashCode(token).
    th, ascii_tok = _hash_ranges(b, t_start, t_len)
    h = prefix[rec]
    if len(h):
        h *= _pow31(int(t_len.max()))[t_len]
    h += th
    key_hash = h.view(np.int32)
    for e in np.flatnonzero(~ascii_tok).tolist():  # a token with non-ASCII bytes: hash its UTF-16 units
        tok = bytes(buf[int(t_start[e]):int(t_start[e] + t_len[e])]).decode("utf-8", "replace")
        n16 = len(tok.encode("utf-16-le", "surrogatepass")) // 2
        key_hash[e] = to_i32(int(prefix[rec[e]]) * pow(31, n16, 2**32) + java_string_hash(tok))
    return {"phy": phy, "ts": ts, "nkeys": nkeys, "key_hash": key_hash, "mismatches": mismatches,
            "rollbacks": int(np.count_nonzero(rollback)), "phy_mismatches": phy_mismatches}


def scan_segment_reference(seg: SegmentInfo) -> SegmentScan:
    """The slow, obviously-right scan: check_message record by record and MessageRecord.index_keys().

    Used by the tests to check scan_segment, and a readable statement of what the scan must produce.
    """
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
            phy_mis += rec.physical_offset != seg.start + pos
            pos += r.size
            continue
        if r.status == LENGTH_MISMATCH:
            mism += 1
            pos += r.size
            continue
        end_kind, reason = scan_stop(r, data, pos, n)
        break
    return SegmentScan(seg.index, seg.start, np.array(phys, dtype=np.int64), np.array(tss, dtype=np.int64),
                       np.array(nks, dtype=np.int32), np.array(hashes, dtype=np.int32), bytes_scanned=pos,
                       end_kind=end_kind, end_offset=seg.start + pos, end_reason=reason, length_mismatches=mism,
                       rollbacks=rollbacks, phy_mismatches=phy_mis)


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
                       np.array(nks, dtype=np.int32), np.array(hashes, dtype=np.int32), end_kind="zero")


# ============================================================================ plan

@dataclass
class FilePlan:
    number: int              # position in the output, 0 = oldest
    first_entry: int         # global entry number of its item 1
    entries: int
    seed_phy: int = 0        # previous file's endPhyOffset / endTimestamp (0 = not seeded)
    seed_ts: int = 0
    name_ts: int | None = None  # store time of its first entry (of the record that created it, if empty)
    name: str = ""


@dataclass
class Plan:
    hash_slot_num: int
    index_num: int
    segments: list[dict]             # scan summaries, in commit-log order
    seg_e_in: list[int]              # endPhyOffset of the current file when each segment begins (§5.8 step 2)
    seg_filter: list[bool]           # False: every keyed record of the segment is indexed
    seg_entry_start: list[int] = field(default_factory=list)
    seg_entries: list[int] = field(default_factory=list)
    total_entries: int = 0
    files: list[FilePlan] = field(default_factory=list)
    trailing_probe: tuple[int, int] | None = None  # (segment, local entry) of the last entry, when T % cap == 0

    @property
    def cap(self) -> int:
        return self.index_num - 1


def accepted_records(scan: SegmentScan, e_in: int, needs_filter: bool = True) -> np.ndarray:
    """Records whose keys the index service puts: keyed, and not "already indexed".

    buildIndex skips a record whose offset is below the current file's endPhyOffset. That value is the offset
    of the last record whose keys were put (seeding a rolled file copies it), and a record is put only if its
    offset is >= it, so it equals the running maximum of the offsets of all earlier keyed records (floor 0).
    """
    keyed = scan.rec_nkeys > 0
    if not needs_filter or not keyed.any():
        return keyed
    kp = np.where(keyed, scan.rec_phy, _INT64_MIN)
    bound = np.empty_like(kp)
    bound[0] = e_in
    if len(kp) > 1:
        np.maximum.accumulate(kp[:-1], out=bound[1:])
        np.maximum(bound[1:], e_in, out=bound[1:])
    return keyed & (scan.rec_phy >= bound)


def accepted_count(scan: SegmentScan, e_in: int, needs_filter: bool) -> int:
    acc = accepted_records(scan, e_in, needs_filter)
    return int(scan.rec_nkeys[acc].sum())


def plan_segments(summaries: list[dict], hash_slot_num: int, index_num: int) -> Plan:
    """Step 1 of planning: the already-indexed state entering each segment."""
    summaries = sorted(summaries, key=lambda d: d["index"])
    e = 0
    e_in, filt = [], []
    for d in summaries:
        e_in.append(e)
        if d["keyed_max"] is None:
            filt.append(False)
            continue
        filt.append(not (d["keyed_monotone"] and d["keyed_min"] >= e))
        e = max(e, d["keyed_max"])
    return Plan(hash_slot_num, index_num, summaries, e_in, filt)


def place_entries(plan: Plan, counts: dict[int, int] | None = None) -> None:
    """Step 2: the prefix sum of accepted key counts, the files, and which entries must be probed."""
    starts, ents = [], []
    g = 0
    for d, f in zip(plan.segments, plan.seg_filter):
        c = d["keys"] if not f else counts[d["index"]]
        starts.append(g)
        ents.append(c)
        g += c
    plan.seg_entry_start, plan.seg_entries, plan.total_entries = starts, ents, g
    cap = plan.cap
    plan.files = []
    if g == 0:
        if any(d["records"] for d in plan.segments):  # the first dispatched record creates a file anyway
            first = next(d for d in plan.segments if d["records"])
            plan.files.append(FilePlan(0, 0, 0, name_ts=first["first_rec_ts"]))
        return
    for k in range(-(-g // cap)):
        a = k * cap
        plan.files.append(FilePlan(k, a, min(cap, g - a)))
    if g % cap == 0:
        plan.trailing_probe = locate_entry(plan, g - 1)


def locate_entry(plan: Plan, g: int) -> tuple[int, int]:
    """(segment index, entry number within the segment's accepted entries) of global entry g."""
    i = int(np.searchsorted(np.array(plan.seg_entry_start), g, side="right")) - 1
    while plan.seg_entries[i] == 0 or g >= plan.seg_entry_start[i] + plan.seg_entries[i]:
        i -= 1  # several segments can start at the same entry number; g lives in the one with entries
    return plan.segments[i]["index"], g - plan.seg_entry_start[i]


def probe_requests(plan: Plan) -> dict[int, list[int]]:
    """Entries whose values the driver needs: each file's first (name) and the previous file's last (seed)."""
    want: dict[int, list[int]] = {}
    for fp in plan.files:
        if fp.entries == 0:
            continue
        for g in ([fp.first_entry - 1] if fp.first_entry else []) + [fp.first_entry]:
            seg, local = locate_entry(plan, g)
            want.setdefault(seg, []).append(local)
    if plan.trailing_probe:
        seg, local = plan.trailing_probe
        want.setdefault(seg, []).append(local)
    return want


def _seg_pos(plan: Plan, seg_index: int) -> int:
    for i, d in enumerate(plan.segments):
        if d["index"] == seg_index:
            return i
    raise KeyError(seg_index)


def entry_columns(scan: SegmentScan, plan: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The segment's accepted entries: (hash, phy, ts, record number) per key, in put order."""
    i = _seg_pos(plan, scan.index)
    acc = accepted_records(scan, plan.seg_e_in[i], plan.seg_filter[i])
    nk = scan.rec_nkeys
    if plan.seg_filter[i]:
        hashes = scan.key_hash[np.repeat(acc, nk)]
    else:
        hashes = scan.key_hash
    nk_acc = np.where(acc, nk, 0)
    rec_no = np.repeat(np.arange(len(nk), dtype=np.int64), nk_acc)
    return hashes, scan.rec_phy[rec_no], scan.rec_ts[rec_no], rec_no


def probe_segment(scan: SegmentScan, plan: Plan, locals_: list[int]) -> dict:
    """Values of the requested local entries, and the store time of the record after the last one."""
    hashes, phy, ts, rec_no = entry_columns(scan, plan)
    out = {"index": scan.index, "entries": {}, "next_ts": None}
    for e in locals_:
        out["entries"][e] = (int(phy[e]), int(ts[e]))
    tp = plan.trailing_probe
    if tp and tp[0] == scan.index:
        r = int(rec_no[tp[1]])
        if r + 1 < scan.records:
            out["next_ts"] = int(scan.rec_ts[r + 1])
    return out


def finish_plan(plan: Plan, probes: list[dict]) -> None:
    """Step 3: seeds, names and the trailing empty file, from the probed values."""
    vals: dict[int, dict[int, tuple[int, int]]] = {p["index"]: p["entries"] for p in probes}

    def value(g):
        seg, local = locate_entry(plan, g)
        return vals[seg][local]

    for fp in plan.files:
        if fp.entries and fp.first_entry:
            fp.seed_phy, fp.seed_ts = value(fp.first_entry - 1)
        if fp.entries:
            fp.name_ts = value(fp.first_entry)[1]
    if plan.trailing_probe:
        # The last file is exactly full: the broker creates the next (empty, seeded) file when the next
        # record is dispatched, whatever that record is. Is there one?
        seg, _ = plan.trailing_probe
        nxt = next((p["next_ts"] for p in probes if p["index"] == seg), None)
        if nxt is None:
            later = [d for d in plan.segments[_seg_pos(plan, seg) + 1:] if d["records"]]
            nxt = later[0]["first_rec_ts"] if later else None
        if nxt is not None:
            phy, ts = value(plan.total_entries - 1)
            plan.files.append(FilePlan(len(plan.files), plan.total_entries, 0, phy, ts, nxt))
    for fp in plan.files:  # the seed only counts when positive (IndexFile constructor)
        fp.seed_phy = fp.seed_phy if fp.seed_phy > 0 else 0
        fp.seed_ts = fp.seed_ts if fp.seed_ts > 0 else 0
    prev = None
    for fp in plan.files:
        name = _safe_index_name(fp.name_ts)
        if prev is not None and (len(name), name) <= (len(prev), prev):
            name = str(int(prev) + 1)  # equal or backwards times: keep names unique and in put order
        fp.name = prev = name


def _safe_index_name(ts: int | None) -> str:
    try:
        name = index_file_name(ts if ts is not None else 0)
        if INDEX_NAME.match(name):
            return name
    except (OverflowError, OSError, ValueError):
        pass
    return "0" * 17


def file_pieces(scan: SegmentScan, plan: Plan) -> Iterator[tuple[int, tuple]]:
    """(file number, (segment, hashes, phy, ts)) for every file this segment's entries fall into."""
    i = _seg_pos(plan, scan.index)
    cnt = plan.seg_entries[i]
    if cnt == 0:
        return
    hashes, phy, ts, _ = entry_columns(scan, plan)
    if len(hashes) != cnt:
        raise ReindexError(f"segment {scan.index}: {len(hashes)} entries, planned {cnt} (the data changed?)")
    g0 = plan.seg_entry_start[i]
    cap = plan.cap
    a = 0
    while a < cnt:
        k = (g0 + a) // cap
        b = min(cnt, (k + 1) * cap - g0)
        yield k, (scan.index, hashes[a:b].copy(), phy[a:b].copy(), ts[a:b].copy())
        a = b


# ============================================================================ build

@dataclass
class BuiltFile:
    number: int
    temp_path: str
    entries: int
    bytes: int


def temp_name(number: int, run_id: str, attempt: str) -> str:
    """Attempt-unique, and never a valid index file name (the broker skips names that are not numbers)."""
    return f".{number:06d}.{run_id}.{attempt}.tmp"


def build_file(fp: FilePlan, pieces: Iterable[tuple], hash_slot_num: int, index_num: int, staging: str,
               run_id: str, attempt: str = "a0") -> BuiltFile:
    """One index file from its pieces (in any order); fsynced before it is reported as built."""
    pieces = sorted(pieces, key=lambda p: p[0])
    if pieces:
        hashes = np.concatenate([p[1] for p in pieces])
        phy = np.concatenate([p[2] for p in pieces])
        ts = np.concatenate([p[3] for p in pieces])
    else:
        hashes, phy, ts = np.empty(0, np.int32), np.empty(0, np.int64), np.empty(0, np.int64)
    if len(hashes) != fp.entries:
        raise ReindexError(f"index file {fp.number}: got {len(hashes)} entries, planned {fp.entries}")
    path = os.path.join(staging, temp_name(fp.number, run_id, attempt))
    n = build_index_file_from_hashes(path, hashes, phy, ts, hash_slot_num, index_num, fp.seed_phy, fp.seed_ts)
    fd = os.open(path, os.O_RDWR)
    try:
        if n == 0:
            # A file the broker created but never put into: its shutdown flush (5.x) writes indexCount 1.
            os.pwrite(fd, struct.pack(">i", 1), 36)
        os.fsync(fd)
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    return BuiltFile(fp.number, path, n, size)


# ============================================================================ runners

class InlineRunner:
    """The whole job in this process: no JVM, for small stores and tests."""

    name = INLINE

    def __init__(self):
        self._scans: dict[int, SegmentScan] = {}

    def scan(self, segments: list[SegmentInfo], progress: Progress, scan_fn=None) -> list[dict]:
        """Scan every segment (scan_fn: SegmentInfo -> an object with .index and .summary(); default
        scan_segment) and keep the scans for the later questions and the build."""
        scan_fn = scan_fn or scan_segment
        out = []
        for i, seg in enumerate(segments):
            sc = scan_fn(seg)
            self._scans[seg.index] = sc
            out.append(sc.summary())
            progress("scan", i + 1, len(segments))
        return out

    def ask(self, fn, requests: dict[int, object]) -> list:
        """fn(scan, argument) for each requested segment index (a question that needs the columns)."""
        return [fn(self._scans[i], a) for i, a in requests.items()]

    def build_with(self, n_files: int, pieces_fn, build_fn, plan, staging: str, run_id: str,
                   progress: Progress) -> list:
        """Generic build: pieces_fn(scan, plan) yields (file number, piece); build_fn(k, pieces, plan, staging,
        run_id, attempt) builds file k from its pieces (in any order) and returns what was built."""
        by_file: dict[int, list] = {k: [] for k in range(n_files)}
        for sc in self._scans.values():
            for k, piece in pieces_fn(sc, plan):
                by_file[k].append(piece)
        built = []
        for k in range(n_files):
            built.append(build_fn(k, by_file.pop(k), plan, staging, run_id, "a0"))
            progress("build", len(built), n_files)
        return built

    def counts(self, plan: Plan) -> dict[int, int]:
        return {d["index"]: accepted_count(self._scans[d["index"]], e, f)
                for d, e, f in zip(plan.segments, plan.seg_e_in, plan.seg_filter) if f}

    def probe(self, plan: Plan, want: dict[int, list[int]]) -> list[dict]:
        return [probe_segment(self._scans[s], plan, locs) for s, locs in want.items()]

    def build(self, plan: Plan, staging: str, run_id: str, progress: Progress) -> list[BuiltFile]:
        by_file: dict[int, list] = {fp.number: [] for fp in plan.files}
        for sc in self._scans.values():
            for k, piece in file_pieces(sc, plan):
                by_file[k].append(piece)
        built = []
        for fp in plan.files:
            built.append(build_file(fp, by_file.pop(fp.number), plan.hash_slot_num, plan.index_num, staging, run_id))
            progress("build", len(built), len(plan.files))
        return built

    def close(self, failed: bool = False) -> None:
        self._scans.clear()


# -- Spark tasks: module-level functions, so executors import them from the engine instead of unpickling code.

def _spark_scan_task(seg: SegmentInfo) -> SegmentScan:
    return scan_segment(seg)


def _spark_attempt() -> str:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return f"s{ctx.stageId()}a{ctx.attemptNumber()}t{ctx.taskAttemptId()}" if ctx else "a0"


def _spark_generic_build(k: int, it, build_fn, plan, staging: str, run_id: str):
    yield build_fn(k, [piece for _, piece in it], plan, staging, run_id, _spark_attempt())


def _spark_build_partition(k: int, it, plan: Plan, staging: str, run_id: str):
    from pyspark import TaskContext

    ctx = TaskContext.get()
    attempt = f"s{ctx.stageId()}a{ctx.attemptNumber()}t{ctx.taskAttemptId()}" if ctx else "a0"
    fp = plan.files[k]
    yield build_file(fp, (piece for _, piece in it), plan.hash_slot_num, plan.index_num, staging, run_id, attempt)


_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
"""


class SparkRunner:
    """The job on Spark: one partition per segment, one task per index file.

    local[*] (the default) starts an embedded Spark in this process. With a cluster master the commit log and
    the output directory must be on storage every executor can read at the same paths, and the engine
    package is shipped to the executors with addPyFile.
    """

    def __init__(self, master: str):
        self.master = master
        self.log_path: str | None = None
        self._conf_file: str | None = None
        self._created = False
        self.spark = self._session(master)
        self.sc = self.spark.sparkContext
        self._scans = None

    def _session(self, master: str):
        if master.startswith("local"):
            # Workers run this interpreter (which has rmqtool and numpy); no network lookups for a local job.
            # A cluster's executors use their own configured Python (spark.pyspark.python / PYSPARK_PYTHON).
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        try:
            from pyspark import SparkContext
            from pyspark.sql import SparkSession
        except ImportError:
            raise ReindexError("pyspark is not installed; install it or use --master inline") from None
        if SparkContext._active_spark_context is not None:
            # A session already runs in this process (a notebook, the tests): use it and leave it running.
            # Its master wins over the one asked for; the result reports the master actually used.
            return SparkSession.builder.getOrCreate()
        import tempfile

        tmp = Path(tempfile.gettempdir())
        conf_file = tmp / f"rmqtool-log4j2-{os.getpid()}.properties"
        conf_file.write_text(_LOG4J2)
        self._conf_file = str(conf_file)
        self.log_path = str(tmp / f"rmqtool-spark-{os.getpid()}.log")
        java_opts = f"-Dlog4j2.configurationFile=file:{conf_file} -Dlog4j.configurationFile=file:{conf_file}"
        builder = (SparkSession.builder.master(master).appName("rmqtool spark-reindex")
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.shuffle.partitions", "8")
                   .config("spark.driver.extraJavaOptions", java_opts)
                   .config("spark.executor.extraJavaOptions", java_opts))
        # The JVM writes banners and warnings straight to file descriptor 2: give it a log file instead, so
        # stderr carries only our progress bar and errors.
        saved = os.dup(2)
        log_fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            sys.stderr.flush()
            os.dup2(log_fd, 2)
            try:
                spark = builder.getOrCreate()
            finally:
                os.dup2(saved, 2)
        except Exception as e:
            raise ReindexError(f"could not start Spark ({master}): {str(e).splitlines()[0] if str(e) else type(e).__name__}; "
                               f"see {self.log_path}") from None
        finally:
            os.close(saved)
            os.close(log_fd)
        self._created = True
        spark.sparkContext.setLogLevel("ERROR")
        if not master.startswith("local"):
            spark.sparkContext.addPyFile(_engine_zip(tmp))
        return spark

    def _run(self, group: str, total: int, progress: Progress, phase: str, action):
        """Run a Spark action, reporting completed tasks of its last stage while it runs."""
        sc = self.sc
        sc.setJobGroup(group, f"rmqtool spark-reindex {phase}")
        stop = threading.Event()

        def poll():
            st = sc.statusTracker()
            while not stop.wait(0.2):
                try:
                    stages = []
                    for jid in st.getJobIdsForGroup(group) or []:
                        info = st.getJobInfo(jid)
                        if info:
                            stages.extend(info.stageIds)
                    if stages:
                        si = st.getStageInfo(max(stages))
                        if si:
                            progress(phase, min(si.numCompletedTasks, total), total)
                except Exception:
                    return

        t = threading.Thread(target=poll, daemon=True)
        t.start()
        try:
            return action()
        except Exception as e:
            msg = str(e).strip().splitlines()
            detail = next((line for line in msg if "Error" in line or "Exception" in line), msg[0] if msg else "")
            raise ReindexError(f"the Spark {phase} job failed: {detail[:300]}") from e
        finally:
            stop.set()
            t.join()
            progress(phase, total, total)

    def scan(self, segments: list[SegmentInfo], progress: Progress, scan_fn=None) -> list[dict]:
        from pyspark import StorageLevel

        rdd = self.sc.parallelize(segments, max(1, len(segments)))
        self._scans = rdd.map(scan_fn or _spark_scan_task).persist(StorageLevel.MEMORY_AND_DISK)
        scans = self._scans
        return self._run(f"rmqtool-scan-{uuid.uuid4().hex}", len(segments), progress, "scan",
                         lambda: scans.map(lambda s: s.summary()).collect())

    def counts(self, plan: Plan) -> dict[int, int]:
        e_in = {d["index"]: (e, f) for d, e, f in zip(plan.segments, plan.seg_e_in, plan.seg_filter) if f}
        return dict(self._scans.filter(lambda s: s.index in e_in)
                    .map(lambda s: (s.index, accepted_count(s, *e_in[s.index]))).collect())

    def probe(self, plan: Plan, want: dict[int, list[int]]) -> list[dict]:
        return self._scans.filter(lambda s: s.index in want).map(lambda s: probe_segment(s, plan, want[s.index])).collect()

    def build(self, plan: Plan, staging: str, run_id: str, progress: Progress) -> list[BuiltFile]:
        n = len(plan.files)
        bplan = self.sc.broadcast(plan)
        pieces = self._scans.flatMap(lambda s: file_pieces(s, bplan.value))
        built = pieces.partitionBy(n, lambda k: k).mapPartitionsWithIndex(
            lambda k, it: _spark_build_partition(k, it, bplan.value, staging, run_id))
        try:
            return self._run(f"rmqtool-build-{run_id}", n, progress, "build", built.collect)
        finally:
            bplan.unpersist()

    def ask(self, fn, requests: dict[int, object]) -> list:
        req = dict(requests)
        return self._scans.filter(lambda s: s.index in req).map(lambda s: fn(s, req[s.index])).collect()

    def build_with(self, n_files: int, pieces_fn, build_fn, plan, staging: str, run_id: str,
                   progress: Progress) -> list:
        bplan = self.sc.broadcast(plan)
        pieces = self._scans.flatMap(lambda s: pieces_fn(s, bplan.value))
        built = pieces.partitionBy(n_files, lambda k: k).mapPartitionsWithIndex(
            lambda k, it: _spark_generic_build(k, it, build_fn, bplan.value, staging, run_id))
        try:
            return self._run(f"rmqtool-build-{run_id}", n_files, progress, "build", built.collect)
        finally:
            bplan.unpersist()

    def close(self, failed: bool = False) -> None:
        try:
            if self._scans is not None:
                self._scans.unpersist()
        finally:
            if self._created:
                self.spark.stop()
                for p in (self._conf_file, None if failed else self.log_path):
                    if p:
                        try:
                            os.unlink(p)
                        except OSError:
                            pass


def _engine_zip(tmp: Path) -> str:
    """The engine package as a zip for addPyFile (cluster executors may not have rmqtool installed)."""
    import zipfile

    pkg = Path(__file__).resolve().parent.parent  # the engine package, with its subpackages
    out = tmp / f"rmqtool-engine-{os.getpid()}.zip"
    with zipfile.ZipFile(out, "w") as z:
        for p in pkg.rglob("*.py"):
            z.write(p, f"engine/{p.relative_to(pkg).as_posix()}")
    return str(out)


# ============================================================================ the job

@dataclass
class ReindexResult:
    master: str
    dry_run: bool
    store: str
    out_dir: str
    segments: int = 0
    messages: int = 0
    keys_indexed: int = 0
    index_files: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    scan_seconds: float = 0.0
    build_seconds: float = 0.0
    hash_slot_num: int = 0
    index_num: int = 0
    skipped_already_indexed: int = 0
    rollback_records: int = 0
    length_mismatches: int = 0
    phy_mismatches: int = 0
    anomalies: list[str] = field(default_factory=list)
    files: list[dict] = field(default_factory=list)
    backup_dir: str | None = None
    replaced: bool = False
    index_msg_timestamp: int | None = None
    spark_log: str | None = None
    format: str = "broker"               # broker | tiered

    @property
    def throughput(self) -> float:
        """Commit-log bytes per second over the whole job."""
        return self.bytes_read / self.seconds if self.seconds > 0 else 0.0

    @property
    def scan_throughput(self) -> float:
        return self.bytes_read / self.scan_seconds if self.scan_seconds > 0 else 0.0

    def as_dict(self) -> dict:
        d = asdict(self)
        d["throughput_bytes_per_s"] = round(self.throughput, 1)
        d["scan_throughput_bytes_per_s"] = round(self.scan_throughput, 1)
        return d


def list_segments(config: BrokerConfig) -> list[SegmentInfo]:
    segs = open_commitlog(config).segments
    return [SegmentInfo(i, str(s.path.resolve()), s.start, s.file_len, i == len(segs) - 1) for i, s in enumerate(segs)]


def _no_progress(phase: str, done: int, total: int) -> None:
    pass


def _anomalies(summaries: list[dict]) -> list[str]:
    """Damage the dispatcher would have met. A zero area before only empty segments is the normal end."""
    out = []
    for i, d in enumerate(summaries):
        later_empty = all(x["records"] == 0 and x["end_kind"] in ("zero", "empty") and x["bytes_scanned"] == 0
                          for x in summaries[i + 1:])
        if d["end_kind"] == "corrupt":
            out.append(f"segment at {d['start']}: stopped at offset {d['end_offset']}: {d['end_reason']}; "
                       "the rest of that segment is not indexed")
        elif d["end_kind"] == "zero" and not later_empty:
            out.append(f"segment at {d['start']}: data ends at offset {d['end_offset']} without a BLANK filler, "
                       "but later segments hold records")
    mis = sum(d["phy_mismatches"] for d in summaries)
    if mis:
        out.append(f"{mis} record(s) carry a PHYSICALOFFSET that is not their position in the commit log (copied or "
                   "moved segments?); the index stores the recorded value, as the broker would")
    return out


def _backup_name(index_dir: Path) -> Path:
    stamp = datetime.now().strftime("%Y%m%d%H%M%S")
    cand = index_dir.with_name(f"{index_dir.name}.bak-{stamp}")
    i = 1
    while cand.exists():
        cand = index_dir.with_name(f"{index_dir.name}.bak-{stamp}-{i}")
        i += 1
    return cand


def make_plan(runner, summaries: list[dict], hash_slot_num: int, index_num: int) -> Plan:
    """Plan from scan summaries; the runner answers the few questions that need the columns."""
    plan = plan_segments(summaries, hash_slot_num, index_num)
    counts = runner.counts(plan) if any(plan.seg_filter) else {}
    place_entries(plan, counts)
    want = probe_requests(plan)
    finish_plan(plan, runner.probe(plan, want) if want else [])
    return plan


def rebuild_from_scans(scans: list[SegmentScan], hash_slot_num: int, index_num: int, out_dir: Path) -> list[Path]:
    """Plan and build index files from ready scans into out_dir (no lock, no publishing): for tests and tools."""
    check_index_geometry(hash_slot_num, index_num)
    runner = InlineRunner()
    runner._scans = {sc.index: sc for sc in scans}
    plan = make_plan(runner, [sc.summary() for sc in scans], hash_slot_num, index_num)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    built = runner.build(plan, str(out_dir), uuid.uuid4().hex[:12], _no_progress)
    paths = []
    for b, fp in zip(built, plan.files):
        os.rename(b.temp_path, out_dir / fp.name)
        paths.append(out_dir / fp.name)
    return paths


class ReindexJob:
    """What both index formats' jobs hold for their run and must release however it ends: the store lock
    (not for a dry run), the Spark or inline runner and the staging directory of unpublished files."""

    def __init__(self, root: Path, master: str, dry_run: bool, result, t0: float):
        self.root, self.master, self.result, self.t0 = root, master, result, t0
        self.lock = None if dry_run else StoreLock(root).acquire()
        self.runner = None
        self.staging: Path | None = None

    def __enter__(self) -> "ReindexJob":
        try:
            if StoreLayout(self.root).abort.exists():
                raise UncleanStoreError(f"store {self.root} was not shut down cleanly (abort file present); "
                                        "run `rmqtool recover` first")
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def start_runner(self):
        self.runner = InlineRunner() if self.master == INLINE else SparkRunner(self.master)
        self.result.spark_log = getattr(self.runner, "log_path", None)
        if isinstance(self.runner, SparkRunner):
            self.result.master = self.runner.sc.master
        return self.runner

    def __exit__(self, exc_type, exc, tb) -> None:
        failed = exc_type is not None
        try:
            if self.staging is not None and self.staging.exists():
                shutil.rmtree(self.staging, ignore_errors=True)
            if self.runner is not None:
                self.runner.close(failed)
                if not failed:
                    self.result.spark_log = None  # the JVM log is kept only when something went wrong
        finally:
            if self.lock is not None:
                self.lock.release()
                self.lock = None
            self.result.seconds = time.perf_counter() - self.t0


def spark_reindex(config: BrokerConfig, out: Path | None = None, master: str = DEFAULT_MASTER,
                  dry_run: bool = False, replace: bool = False, progress: Progress | None = None) -> ReindexResult:
    """Rebuild the store's index files from its commit log (see the module docstring)."""
    progress = progress or _no_progress
    t0 = time.perf_counter()
    root = config.root
    hash_slot_num, index_num = config.maxHashSlotNum, config.maxIndexNum
    check_index_geometry(hash_slot_num, index_num)
    if not root.exists():
        raise NotAStoreError(f"store directory {root} does not exist")
    if not root.is_dir():
        raise NotAStoreError(f"{root} is not a directory")
    if not any(d.is_dir() for d in config.commitlog_dirs):
        raise NotAStoreError(f"{root} is not a RocketMQ store: it has no commitlog/ directory "
                             f"({', '.join(map(str, config.commitlog_dirs))})")
    if not master:
        raise InvalidArgumentError("--master must not be empty")
    store_index = StoreLayout.of(config).index_dir.resolve()
    out_dir = Path(out).resolve() if out is not None else store_index
    into_store = out_dir == store_index
    if not into_store and out_dir.exists() and not out_dir.is_dir():
        raise InvalidArgumentError(f"--out {out_dir} exists and is not a directory")
    if not into_store and out_dir.is_dir() and list_index_files(out_dir) and not replace and not dry_run:
        raise InvalidArgumentError(f"--out {out_dir} already holds index files; pass --replace to overwrite them "
                                   "or choose an empty directory")
    result = ReindexResult(master, dry_run, str(root), str(out_dir), hash_slot_num=hash_slot_num, index_num=index_num)

    with ReindexJob(root, master, dry_run, result, t0) as job:
        cp_path = StoreLayout.of(config).checkpoint
        if into_store:
            Checkpoint.load(cp_path)  # a corrupt checkpoint fails here, before any work
        segments = list_segments(config)
        result.segments = len(segments)
        runner = job.start_runner()

        t_scan = time.perf_counter()
        summaries = runner.scan(segments, progress) if segments else []
        summaries.sort(key=lambda d: d["index"])
        result.scan_seconds = time.perf_counter() - t_scan
        result.messages = sum(d["records"] for d in summaries)
        result.bytes_read = sum(d["bytes_scanned"] for d in summaries)
        result.rollback_records = sum(d["rollbacks"] for d in summaries)
        result.length_mismatches = sum(d["length_mismatches"] for d in summaries)
        result.phy_mismatches = sum(d["phy_mismatches"] for d in summaries)
        result.anomalies = _anomalies(summaries)

        plan = make_plan(runner, summaries, hash_slot_num, index_num)
        result.skipped_already_indexed = sum(d["keys"] for d in summaries) - plan.total_entries
        result.keys_indexed = plan.total_entries
        result.index_files = len(plan.files)
        result.files = [{"name": fp.name, "entries": fp.entries, "full": fp.entries == plan.cap,
                         "seedPhyOffset": fp.seed_phy, "seedTimestamp": fp.seed_ts} for fp in plan.files]
        if dry_run:
            return result

        # Build into a staging directory beside the target (same file system, so publishing is renames).
        run_id = uuid.uuid4().hex[:12]
        if into_store:
            staging = out_dir.parent / f".{out_dir.name}.reindex-{run_id}"
        else:
            out_dir.mkdir(parents=True, exist_ok=True)
            staging = out_dir / f".reindex-{run_id}"
        staging.mkdir()
        job.staging = staging
        t_build = time.perf_counter()
        built = runner.build(plan, str(staging), run_id, progress) if plan.files else []
        result.build_seconds = time.perf_counter() - t_build
        built_by_no = {b.number: b for b in built}
        if sorted(built_by_no) != [fp.number for fp in plan.files]:
            raise ReindexError("not every index file was built; nothing was published")
        keep = {os.path.basename(b.temp_path) for b in built}
        for p in staging.iterdir():  # leftovers of failed or speculative task attempts
            if p.name not in keep:
                p.unlink()
        headers = []
        for fp in plan.files:
            os.rename(built_by_no[fp.number].temp_path, staging / fp.name)
            headers.append(_read_end_timestamp(staging / fp.name))
        fsync_dir(staging)
        for info, end_ts in zip(result.files, headers):
            info["endTimestamp"] = end_ts
        _publish(result, staging, out_dir, into_store, replace, plan)
        job.staging = None
        if into_store:
            result.index_msg_timestamp = max([0] + headers)
            # The broker deletes index files with endTimestamp > indexMsgTimestamp after an unclean exit
            # (§5.8 load). Every rebuilt file is complete and on disk, so the newest end time protects them all.
            checkpoint = Checkpoint.load(cp_path)
            checkpoint.indexMsgTimestamp = result.index_msg_timestamp
            checkpoint.save(cp_path)
        return result


def _read_end_timestamp(path: Path) -> int:
    with open(path, "rb") as f:
        return struct.unpack(">q", f.read(16)[8:16])[0]


def _publish(result: ReindexResult, staging: Path, out_dir: Path, into_store: bool, replace: bool,
             plan: Plan) -> None:
    """Every file is built and fsynced: now make them visible, by renames only."""
    if into_store:
        # Swap whole directories: the store's index is either the old set or the new one, never a mix.
        backup = None
        if out_dir.exists():
            backup = _backup_name(out_dir)
            os.rename(out_dir, backup)
        os.rename(staging, out_dir)
        fsync_dir(out_dir.parent)
        if backup is not None:
            if replace:
                shutil.rmtree(backup)
                result.replaced = True
            else:
                result.backup_dir = str(backup)
        return
    new_names = {fp.name for fp in plan.files}
    old = list_index_files(out_dir) if replace else []
    for fp in plan.files:
        os.replace(staging / fp.name, out_dir / fp.name)
    staging.rmdir()
    for p in old:
        if p.name not in new_names:
            p.unlink()
    result.replaced = bool(old)
    fsync_dir(out_dir)
