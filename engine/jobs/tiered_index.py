"""spark-reindex --format tiered: compacted tiered-storage index files (format §9) built from the commit log.

What a RocketMQ 5 tiered store would have indexed and uploaded, had every queue been copied to tiered storage
from its first message, computed straight from the local commit log:

* which messages: the records the tiered store copies, i.e. those with a consume-queue unit (valid records of
  transaction type NOT_TYPE or COMMIT; PREPARED and ROLLBACK records and LENGTH_MISMATCH records get no unit,
  §4.2, §7.7), of topics the tiered store accepts (MessageStoreTopicFilter: not blank, not a system topic
  -- TopicValidator's set or the ``rmq_sys_`` prefix --, not an LMQ ``%LMQ%`` topic, not the cluster or broker
  name). Their key set is what MessageStoreDispatcherImpl.constructIndexFile builds (§9.6): UNIQ_KEY if not
  blank plus every token of KEYS split on " " (empty tokens kept, Java's trailing empty tokens dropped),
  de-duplicated, in Java HashSet order -- engine.broker.keys.tiered_key_set.
* item fields: topicId from ``<store>/config/tieredStoreMetadata.json`` when the topic is there, else a new
  id: after the metadata's topicSerialNumber / largest id, or from 0 without metadata (the broker's
  topicSequenceNumber starts at -1 and is incremented before use), in first-seen commit-log order;
  queueId = QUEUEID; offset = the record's offset in its queue's tiered commit log, i.e. the sum of the sizes
  of the earlier copied records of the same topic/queue in commit-log order (the queue uploaded from its
  start, tiered commit log starting at 0); size = TOTALSIZE; timestamp = STORETIMESTAMP.
* files: keys are put in commit-log order with IndexStoreService.putKey's semantics over unsealed files of the
  given geometry: a key set that does not fit (FILE_FULL) goes whole to a new file, a put that fails
  (UNKNOWN_ERROR: a key hashing to Integer.MIN_VALUE whose slot lies before the header, §9.5) is retried
  twice on the same file, three attempts at most. A file's begin timestamp (= its name) is the store time of
  the first message put into it, raised to previous + 1 when not increasing (deterministic reruns; the broker
  uses the wall clock). Each file is then compacted (§9.4) and written in its uploaded form. Files that end up
  with no item (they upload 0 bytes) are not written.

The output equals, byte for byte, engine.tiered.index.file.IndexStoreFile.create / put_key in a loop / compact() over the
same inputs (the tests check it). Unlike the broker, it does not need the 28 + 8*slots + 32*items byte
unsealed file: each compacted file is assembled in memory from its items with numpy.

Job layout (same runners as the broker-format reindex): scan one commit-log segment per task (records decoded
one by one with engine.broker.message.check_message, ~10 us per record, the key hashing and HashSet ordering
vectorized with numpy per batch; key sets of more than 8 keys are ordered by engine.java.collections.hashset_order),
plan on the driver (topic ids, queue base offsets, the greedy FILE_FULL cut with searchsorted per file and an
exact emulation of the service's retry loop for the rare irregular key sets), one build task per output file.
"""
from __future__ import annotations

import functools
import mmap
import os
import struct
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Optional

import numpy as np

from engine.java.collections import hashset_order
from engine.java.lang import java_is_blank, java_split

from engine.broker.config import BrokerConfig
from engine.errors import InvalidArgumentError, NotAStoreError
from engine.fsutil import fsync_dir
from engine.broker.layout import list_index_files
from engine.java.lang import INT_MAX, INT_MIN, java_rem, java_string_hashes, to_i32
from engine.broker.commitlog import scan_stop
from engine.broker.message import (LENGTH_MISMATCH, TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, VALID,
                            check_message)
from engine.jobs.reindex import (DEFAULT_MASTER, InlineRunner, Progress, ReindexError, ReindexJob,
                            ReindexResult, SegmentInfo, _anomalies, _no_progress, _publish, list_segments, temp_name)
from engine.tiered.index.format import (COMPACT_INDEX_ITEM_SIZE, COMPACT_ITEM_DTYPE, END_MAGIC_CODE, HASH_SLOT_SIZE, HEADER_SIZE,
                           INDEX_ITEM_SIZE)
from engine.broker.layout import StoreLayout
from engine.tiered.index.service import load_tiered_metadata

TIERED_DEFAULT_HASH_SLOT_NUM = 5_000_000
TIERED_DEFAULT_INDEX_NUM = 20_000_000
DEFAULT_CLUSTER_NAME = "DefaultCluster"

#: TopicValidator.SYSTEM_TOPIC_SET (5.x) -- MessageStoreTopicFilter skips these, and every "rmq_sys_" topic.
SYSTEM_TOPICS = frozenset({
    "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
    "CHECKPOINT_TOPIC", "RMQ_SYS_TOPIC_CONFIG_SYNC", "RMQ_SYS_CONSUMER_OFFSET_SYNC", "RMQ_SYS_DELAY_OFFSET_SYNC",
    "RMQ_SYS_SUBSCRIPTION_GROUP_SYNC", "RMQ_SYS_MESSAGE_MODE_SYNC", "RMQ_SYS_TIMER_METRICS_SYNC",
})
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
LMQ_PREFIX = "%LMQ%"

_HEADER = struct.Struct(">iqqii")
_KEY_BATCH = 1 << 18  # keys hashed per numpy batch during the scan


def topic_filtered(topic: str, black: Iterable[str] = (DEFAULT_CLUSTER_NAME,)) -> bool:
    """MessageStoreTopicFilter.filterTopic: True when the tiered store does not copy this topic."""
    if java_is_blank(topic):
        return True
    return (topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX) or topic.startswith(LMQ_PREFIX)
            or topic in black)


def check_tiered_geometry(hash_slot_num: int, index_num: int) -> None:
    """IndexStoreFile computes its unsealed size in Java int; at least 2 items so that one key fits."""
    if hash_slot_num <= 0 or index_num <= 1:
        raise InvalidArgumentError(f"tiered index geometry {hash_slot_num} slots x {index_num} items is invalid "
                                   "(need slots >= 1, items >= 2)")
    size = HEADER_SIZE + HASH_SLOT_SIZE * hash_slot_num + INDEX_ITEM_SIZE * index_num
    if size > INT_MAX:
        raise InvalidArgumentError(f"tiered index geometry {hash_slot_num} slots x {index_num} items gives a "
                                   f"{size}-byte unsealed file; the broker's int arithmetic caps it at {INT_MAX}")


# ============================================================================ scan

@dataclass
class TieredSegmentScan:
    """One segment's copied records (per record arrays) and their keys (key_hash, per key, HashSet order)."""
    index: int
    start: int
    topics: list[str]        # topics of the copied records, first-seen order
    rec_topic: np.ndarray    # int32 index into topics
    rec_qid: np.ndarray      # int32 QUEUEID
    rec_size: np.ndarray     # int32 TOTALSIZE
    rec_ts: np.ndarray       # int64 STORETIMESTAMP
    rec_nkeys: np.ndarray    # int32 size of the key set
    key_hash: np.ndarray     # int32 tiered hashCode of "topic#key" (sign flipped), record by record
    valid_records: int = 0   # valid records walked (copied or not)
    bytes_scanned: int = 0
    end_kind: str = "empty"
    end_offset: int = 0
    end_reason: str = ""
    length_mismatches: int = 0
    tx_skipped: int = 0      # PREPARED / ROLLBACK records: no consume-queue unit, never copied
    filtered: int = 0        # records of topics the tiered store does not copy

    @property
    def records(self) -> int:
        return len(self.rec_ts)

    def summary(self) -> dict:
        keyed = self.rec_nkeys > 0
        nk = self.rec_nkeys[keyed]
        # Records holding a key whose hash is Integer.MIN_VALUE: their put may fail depending on the slot count.
        min_hash = {}
        bad = np.flatnonzero(self.key_hash == INT_MIN)
        if len(bad):
            key_start = np.cumsum(self.rec_nkeys, dtype=np.int64) - self.rec_nkeys
            key_rec = np.searchsorted(key_start, bad, side="right") - 1
            keyed_no = np.cumsum(keyed) - 1
            for b, r in zip(bad.tolist(), key_rec.tolist()):
                min_hash.setdefault(int(keyed_no[r]), []).append(int(b - key_start[r]))
        qkey = self.rec_topic.astype(np.int64) << 32 | (self.rec_qid.astype(np.int64) & 0xFFFFFFFF)
        uq, inv = np.unique(qkey, return_inverse=True)
        qcount = np.bincount(inv, minlength=len(uq))
        qsize = np.zeros(len(uq), dtype=np.int64)
        np.add.at(qsize, inv, self.rec_size.astype(np.int64))
        # (local topic number, queueId, bytes, records) per queue of this segment
        queues = [(int(u >> 32), to_i32(u & 0xFFFFFFFF), int(sz), int(c))
                  for u, sz, c in zip(uq.tolist(), qsize.tolist(), qcount.tolist())]
        return {
            "index": self.index, "start": self.start, "records": self.valid_records,
            "copied": self.records, "keyed": int(len(nk)), "keys": int(nk.sum()),
            "bytes_scanned": self.bytes_scanned, "end_kind": self.end_kind, "end_offset": self.end_offset,
            "end_reason": self.end_reason, "length_mismatches": self.length_mismatches, "phy_mismatches": 0,
            "tx_skipped": self.tx_skipped, "filtered": self.filtered, "topics": list(self.topics),
            "queues": queues, "nkeys_z": zlib.compress(nk.astype("<u4").tobytes(), 1), "min_hash": min_hash,
        }


def _order_and_hash(keys: list[str], fulls: list[str], counts: list[int]) -> np.ndarray:
    """Tiered hashes of each record's de-duplicated keys, records in order, keys in Java HashSet order."""
    if not keys:
        return np.empty(0, dtype=np.int32)
    cnt = np.asarray(counts, dtype=np.int64)
    h = java_string_hashes(keys).view(np.uint32)
    bucket = (h ^ (h >> np.uint32(16))) & np.uint32(15)  # a HashSet of <= 12 keys keeps its 16 buckets
    rec = np.repeat(np.arange(len(cnt)), cnt)
    perm = np.lexsort((bucket, rec))  # stable: ties keep insertion order (UNIQ_KEY first, then KEYS order)
    big = np.flatnonzero(cnt > 8)  # a bucket could get its 9th key: resizes, let the exact simulation decide
    if len(big):
        starts = np.cumsum(cnt) - cnt
        for r in big.tolist():
            a, b = int(starts[r]), int(starts[r] + cnt[r])
            sub = keys[a:b]
            where = {k: i for i, k in enumerate(sub)}
            perm[a:b] = [a + where[k] for k in hashset_order(sub)]
    fh = java_string_hashes(fulls)
    hc = np.where(fh < 0, np.negative(fh), fh).astype(np.int32)  # -MIN_VALUE wraps to MIN_VALUE, as in Java
    return hc[perm]


def scan_segment_tiered(seg: SegmentInfo, black: tuple = (DEFAULT_CLUSTER_NAME,)) -> TieredSegmentScan:
    """Decode one segment the way the broker dispatches it (no CRC), keeping what the tiered store copies."""
    with open(seg.path, "rb") as f:
        length = os.fstat(f.fileno()).st_size
        if length == 0:
            return scan_buffer_tiered(b"", seg.index, seg.start, black)
        mm = mmap.mmap(f.fileno(), length, access=mmap.ACCESS_READ)
    try:
        return scan_buffer_tiered(mm, seg.index, seg.start, black)
    finally:
        mm.close()  # check_message copies what it keeps: no view of the mapping survives


def scan_buffer_tiered(buf, index: int, start: int,
                       black: Iterable[str] = (DEFAULT_CLUSTER_NAME,)) -> TieredSegmentScan:
    black = frozenset(black)
    n = len(buf)
    pos = 0
    end_kind, reason = ("empty", "") if n == 0 else ("zero", "")
    topic_no: dict[str, int] = {}
    topics: list[str] = []
    filtered_cache: dict[str, bool] = {}
    r_topic, r_qid, r_size, r_ts, r_nk = [], [], [], [], []
    keys: list[str] = []
    fulls: list[str] = []
    counts: list[int] = []
    hashes: list[np.ndarray] = []
    valid = mism = tx = filt = 0
    while n:
        r = check_message(buf, pos, n, check_crc=False, read_body=False)
        if r.status == VALID:
            rec = r.record
            valid += 1
            pos += r.size
            if (rec.sys_flag & 0xC) in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
                tx += 1
                continue
            topic = rec.topic
            f_ = filtered_cache.get(topic)
            if f_ is None:
                f_ = filtered_cache[topic] = topic_filtered(topic, black)
            if f_:
                filt += 1
                continue
            t = topic_no.get(topic)
            if t is None:
                t = topic_no[topic] = len(topics)
                topics.append(topic)
            r_topic.append(t)
            r_qid.append(rec.queue_id)
            r_size.append(r.size)
            r_ts.append(rec.store_timestamp)
            props = rec.properties
            raw = []
            uk = props.get("UNIQ_KEY")
            if uk is not None and not java_is_blank(uk):
                raw.append(uk)
            ks = props.get("KEYS")
            if ks is not None and not java_is_blank(ks):
                raw.extend(java_split(ks, " "))
            if raw:
                if len(raw) > 1:
                    raw = list(dict.fromkeys(raw))
                keys.extend(raw)
                fulls.extend(f"{topic}#{k}" for k in raw)
            counts.append(len(raw))
            r_nk.append(len(raw))
            if len(keys) >= _KEY_BATCH:
                hashes.append(_order_and_hash(keys, fulls, counts))
                keys, fulls, counts = [], [], []
            continue
        if r.status == LENGTH_MISMATCH:
            mism += 1
            pos += r.size
            continue
        end_kind, reason = scan_stop(r, buf, pos, n)
        break
    hashes.append(_order_and_hash(keys, fulls, counts))
    return TieredSegmentScan(
        index, start, topics, np.array(r_topic, dtype=np.int32), np.array(r_qid, dtype=np.int32),
        np.array(r_size, dtype=np.int32), np.array(r_ts, dtype=np.int64), np.array(r_nk, dtype=np.int32),
        np.concatenate(hashes).astype(np.int32, copy=False), valid_records=valid, bytes_scanned=pos,
        end_kind=end_kind, end_offset=start + pos, end_reason=reason, length_mismatches=mism, tx_skipped=tx,
        filtered=filt)


# ============================================================================ plan

@dataclass
class TieredFilePlan:
    number: int
    events: list            # (g0, g1, p): keyed messages g0..g1-1 put whole (p = -1), or the first p keys of g0
    entries: int            # items (indexItemCount)
    begin: int = 0          # begin timestamp = file name
    name: str = ""
    first: int = 0          # global keyed-message number of its first put


@dataclass
class TieredPlan:
    hash_slot_num: int
    index_num: int
    seg_keyed_start: dict[int, int] = field(default_factory=dict)   # global number of a segment's first keyed msg
    seg_keyed: dict[int, int] = field(default_factory=dict)
    seg_topic_ids: dict[int, list[int]] = field(default_factory=dict)
    seg_queue_base: dict[int, dict[tuple[int, int], int]] = field(default_factory=dict)
    files: list[TieredFilePlan] = field(default_factory=list)
    topic_ids: dict[str, int] = field(default_factory=dict)
    new_topics: list[str] = field(default_factory=list)
    total_entries: int = 0
    oversize_sets: int = 0      # key sets larger than a whole file: FILE_FULL everywhere, not indexed
    failed_sets: int = 0        # puts that ended in UNKNOWN_ERROR (a MIN_VALUE key before the header)


def metadata_topic_ids(meta: Optional[dict]) -> tuple[dict[str, int], int]:
    """topic -> topicId from a decoded tieredStoreMetadata.json, and the next id the broker would assign."""
    if meta is None:
        return {}, 0
    table = meta.get("topicMetadataTable") or {}
    if not isinstance(table, dict):
        raise InvalidArgumentError("tiered metadata: topicMetadataTable is not an object")
    ids: dict[str, int] = {}
    for name, entry in table.items():
        tid = entry.get("topicId") if isinstance(entry, dict) else None
        if isinstance(tid, bool) or not isinstance(tid, int):
            raise InvalidArgumentError(f"tiered metadata: topic {name!r} has no integer topicId ({tid!r})")
        ids[str(name)] = tid
    serial = meta.get("topicSerialNumber")
    top = max([serial if isinstance(serial, int) and not isinstance(serial, bool) else -1] + list(ids.values()),
              default=-1)
    return ids, top + 1


class _Planner:
    """The service's putKey loop over key counts only (IndexStoreService.putKey + IndexStoreFile.putKey)."""

    def __init__(self, index_num: int):
        self.m = index_num
        self.files: list[tuple[list, int]] = []
        self.events: list = []
        self.c = 0

    def roll(self):
        self.files.append((self.events, self.c))
        self.events, self.c = [], 0

    def add(self, g0: int, g1: int, p: int, n: int):
        ev = self.events
        if p < 0 and ev and ev[-1][2] < 0 and ev[-1][1] == g0:
            ev[-1] = (ev[-1][0], g1, -1)
        else:
            ev.append((g0, g1, p))
        self.c += n

    def run(self, g_base: int, nk: np.ndarray, cum: np.ndarray, j: int, stop: int):
        """Regular messages j..stop-1 (key set fits an empty file, no failing key): greedy FILE_FULL cuts."""
        m = self.m
        while j < stop:
            base = int(cum[j] - nk[j])
            e = min(int(np.searchsorted(cum, m - 1 - self.c + base, side="right")), stop)
            if e > j:
                self.add(g_base + j, g_base + e, -1, int(cum[e - 1]) - base)
                j = e
            if j < stop:  # message j does not fit: FILE_FULL, sealed; the retry goes to a new file
                self.roll()

    def irregular(self, g: int, k: int, p: Optional[int]) -> str:
        """At most three attempts, as the service does; p = keys written before the failing one."""
        for _ in range(3):
            if self.c + k >= self.m:
                self.roll()  # FILE_FULL (status SEALED): createNewIndexFile, then retry
                continue
            if p is None:
                self.add(g, g + 1, -1, k)
                return "ok"
            if p > 0:
                self.add(g, g + 1, p, p)
        return "full" if k >= self.m else "failed"

    def finish(self) -> list[tuple[list, int]]:
        self.roll()
        return [(ev, c) for ev, c in self.files if c > 0]


def plan_tiered(summaries: list[dict], hash_slot_num: int, index_num: int, topic_ids: dict[str, int],
                next_id: int) -> TieredPlan:
    summaries = sorted(summaries, key=lambda d: d["index"])
    plan = TieredPlan(hash_slot_num, index_num)
    ids = dict(topic_ids)
    running: dict[tuple[str, int], int] = {}
    g = 0
    for d in summaries:
        i = d["index"]
        local_ids = []
        for t in d["topics"]:
            if t not in ids:
                ids[t] = next_id
                next_id += 1
                plan.new_topics.append(t)
            local_ids.append(ids[t])
        plan.seg_topic_ids[i] = local_ids
        base = {}
        for t, q, size, _count in d["queues"]:
            key = (d["topics"][t], q)
            base[(t, q)] = running.get(key, 0)
            running[key] = running.get(key, 0) + size
        plan.seg_queue_base[i] = base
        plan.seg_keyed_start[i] = g
        plan.seg_keyed[i] = d["keyed"]
        g += d["keyed"]
    seen = dict.fromkeys(t for d in summaries for t in d["topics"])
    plan.topic_ids = {t: ids[t] for t in seen}

    bad_slot = java_rem(INT_MIN, hash_slot_num) <= -4  # a MIN_VALUE key makes the put fail (§9.5)
    pl = _Planner(index_num)
    for d in summaries:
        g_base = plan.seg_keyed_start[d["index"]]
        nk = np.frombuffer(zlib.decompress(d["nkeys_z"]), dtype="<u4").astype(np.int64)
        if len(nk) != d["keyed"]:
            raise ReindexError(f"segment {d['index']}: key counts do not match the scan")
        if not len(nk):
            continue
        cum = np.cumsum(nk)
        irregular: dict[int, Optional[int]] = {}
        if bad_slot:
            for j, positions in d["min_hash"].items():
                irregular[int(j)] = min(positions)
        for j in np.flatnonzero(nk >= index_num).tolist():
            irregular.setdefault(j, None)
        j = 0
        for stop in sorted(irregular) + [len(nk)]:
            pl.run(g_base, nk, cum, j, stop)
            if stop < len(nk):
                outcome = pl.irregular(g_base + stop, int(nk[stop]), irregular[stop])
                if outcome == "full":
                    plan.oversize_sets += 1
                elif outcome == "failed":
                    plan.failed_sets += 1
                j = stop + 1
    for n_, (events, c) in enumerate(pl.finish()):
        plan.files.append(TieredFilePlan(n_, events, c, first=events[0][0]))
    plan.total_entries = sum(fp.entries for fp in plan.files)
    return plan


def locate_keyed(plan: TieredPlan, g: int) -> tuple[int, int]:
    """(segment index, local keyed-message number) of global keyed message g."""
    for i, s in plan.seg_keyed_start.items():
        if s <= g < s + plan.seg_keyed[i]:
            return i, g - s
    raise KeyError(g)


def probe_first_ts(scan: TieredSegmentScan, locals_: list[int]) -> dict:
    keyed = np.flatnonzero(scan.rec_nkeys > 0)
    return {"index": scan.index, "ts": {j: int(scan.rec_ts[keyed[j]]) for j in locals_}}


def name_files(plan: TieredPlan, probes: list[dict]) -> None:
    """Begin timestamp = store time of the file's first message, kept increasing and non-negative."""
    ts = {p["index"]: p["ts"] for p in probes}
    prev = None
    for fp in plan.files:
        seg, local = locate_keyed(plan, fp.first)
        b = max(0, ts[seg][local])
        if prev is not None and b <= prev:
            b = prev + 1
        fp.begin, fp.name = b, str(b)
        prev = b


def make_tiered_plan(runner, summaries: list[dict], hash_slot_num: int, index_num: int,
                     topic_ids: dict[str, int], next_id: int) -> TieredPlan:
    plan = plan_tiered(summaries, hash_slot_num, index_num, topic_ids, next_id)
    want: dict[int, list[int]] = {}
    for fp in plan.files:
        seg, local = locate_keyed(plan, fp.first)
        want.setdefault(seg, []).append(local)
    name_files(plan, runner.ask(probe_first_ts, want) if want else [])
    return plan


# ============================================================================ pieces and build

def _segment_columns(scan: TieredSegmentScan, plan: TieredPlan):
    """Per record: tiered commit-log offset and topicId; per record: first key number."""
    nrec = scan.records
    off = np.zeros(nrec, dtype=np.int64)
    if nrec:
        qkey = scan.rec_topic.astype(np.int64) << 32 | (scan.rec_qid.astype(np.int64) & 0xFFFFFFFF)
        uq, inv = np.unique(qkey, return_inverse=True)
        bases = plan.seg_queue_base[scan.index]
        qbase = np.array([bases[(int(u >> 32), to_i32(u & 0xFFFFFFFF))] for u in uq.tolist()],
                         dtype=np.int64)
        order = np.argsort(inv, kind="stable")
        sz = scan.rec_size.astype(np.int64)[order]
        cs = np.cumsum(sz) - sz                              # exclusive running sum over the sorted records
        grp = inv[order]
        first = np.searchsorted(grp, np.arange(len(uq)))     # first sorted position of each queue
        off[order] = qbase[grp] + cs - cs[first][grp]
    tids = np.asarray(plan.seg_topic_ids[scan.index] or [0], dtype=np.int64)
    tid = tids[scan.rec_topic] if nrec else np.empty(0, dtype=np.int64)
    key_start = np.cumsum(scan.rec_nkeys, dtype=np.int64) - scan.rec_nkeys
    return off, tid, key_start


def tiered_pieces(scan: TieredSegmentScan, plan: TieredPlan) -> Iterator[tuple[int, tuple]]:
    """(file number, (event number, segment, items...)) for every put event touching this segment."""
    k0 = plan.seg_keyed_start[scan.index]
    nk_seg = plan.seg_keyed[scan.index]
    if nk_seg == 0:
        return
    keyed = np.flatnonzero(scan.rec_nkeys > 0)
    if len(keyed) != nk_seg:
        raise ReindexError(f"segment {scan.index}: {len(keyed)} keyed messages, planned {nk_seg} (the data changed?)")
    off, tid, key_start = _segment_columns(scan, plan)
    nks = scan.rec_nkeys.astype(np.int64)
    for fp in plan.files:
        for e, (g0, g1, p) in enumerate(fp.events):
            a, b = max(g0, k0) - k0, min(g1, k0 + nk_seg) - k0
            if a >= b:
                continue
            ra, rb = int(keyed[a]), int(keyed[b - 1])
            ka = int(key_start[ra])
            kb = ka + p if p >= 0 else int(key_start[rb] + nks[rb])
            recs = np.repeat(np.arange(ra, rb + 1), nks[ra:rb + 1])[: kb - ka]
            yield fp.number, (e, scan.index, scan.key_hash[ka:kb].copy(), tid[recs], scan.rec_qid[recs],
                              off[recs], scan.rec_size[recs], scan.rec_ts[recs])


def _trunc_div_1000(d: np.ndarray) -> np.ndarray:
    q = d // 1000
    return q + ((d % 1000 != 0) & (d < 0))


def compacted_bytes(hc, topic_id, queue_id, offset, size, ts, begin: int, hash_slot_num: int) -> tuple[bytes, dict]:
    """The uploaded compacted file of an unsealed file that got these items put in this order (§9.4, §9.6)."""
    s = hash_slot_num
    n = len(hc)
    hc = np.asarray(hc, dtype=np.int64)
    ts = np.asarray(ts, dtype=np.int64)
    slot = np.fmod(hc, s)                      # Java %: negative only for MIN_VALUE
    normal = slot >= 0
    if (slot <= -4).any():
        raise ReindexError("an item whose slot lies before the header was planned (internal error)")
    end = max(0, int(ts.max())) if n else 0
    nidx = np.flatnonzero(normal)
    extra = 0
    for i in np.flatnonzero(~normal).tolist():
        # A MIN_VALUE key whose slot is -1..-3: its "slot" is a header word (hashSlotCount / high word of
        # endTimestamp / high word of beginTimestamp) as last flushed; hashSlotCount grows when it is <= 0.
        if slot[i] == -1:
            word = len(np.unique(slot[:i][normal[:i]])) + extra
        elif slot[i] == -2:
            word = to_i32((max(0, int(ts[:i].max())) if i else 0) >> 32)
        else:
            word = to_i32(begin >> 32)
        if word <= 0:
            extra += 1
    slot_count = len(np.unique(slot[nidx])) + extra
    w0 = HEADER_SIZE + HASH_SLOT_SIZE * s
    order = nidx[np.lexsort((-nidx, slot[nidx]))]       # slots ascending, newest first within a slot
    counts = np.bincount(slot[nidx], minlength=s)
    lens = counts.astype(np.int64) * COMPACT_INDEX_ITEM_SIZE
    starts = w0 + np.cumsum(lens) - lens
    info = {"items": n, "reachable": int(len(order)), "endTimestamp": end, "hashSlotCount": to_i32(slot_count)}
    if not len(order):
        return b"", info
    table = np.empty((s, 2), dtype=">i4")
    table[:, 0] = starts
    table[:, 1] = lens
    items = np.empty(len(order), dtype=COMPACT_ITEM_DTYPE)
    items["hashCode"] = hc[order]
    items["topicId"] = np.asarray(topic_id)[order]
    items["queueId"] = np.asarray(queue_id)[order]
    items["offset"] = np.asarray(offset)[order]
    items["size"] = np.asarray(size)[order]
    td = _trunc_div_1000(ts[order] - np.int64(begin))
    items["timeDiff"] = (td & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    header = _HEADER.pack(END_MAGIC_CODE, begin, end, to_i32(slot_count), n)
    return header + table.tobytes() + items.tobytes(), info


@dataclass
class TieredBuiltFile:
    number: int
    temp_path: str
    entries: int
    bytes: int
    reachable: int
    end_timestamp: int
    hash_slot_count: int


def build_tiered_file(k: int, pieces: list, plan: TieredPlan, staging: str, run_id: str,
                      attempt: str = "a0") -> TieredBuiltFile:
    fp = plan.files[k]
    pieces = sorted(pieces, key=lambda p: (p[0], p[1]))
    if pieces:
        cols = [np.concatenate([p[j] for p in pieces]) for j in range(2, 8)]
    else:
        cols = [np.empty(0, dtype=np.int64)] * 6
    if len(cols[0]) != fp.entries:
        raise ReindexError(f"tiered index file {fp.number}: got {len(cols[0])} items, planned {fp.entries}")
    data, info = compacted_bytes(*cols, fp.begin, plan.hash_slot_num)
    path = os.path.join(staging, temp_name(fp.number, run_id, attempt))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    return TieredBuiltFile(fp.number, path, fp.entries, len(data), info["reachable"], info["endTimestamp"],
                           info["hashSlotCount"])


def rebuild_tiered_from_scans(scans: list[TieredSegmentScan], hash_slot_num: int, index_num: int, out_dir,
                              topic_ids: Optional[dict[str, int]] = None, next_id: int = 0) -> list[Path]:
    """Plan and build from ready scans into out_dir (no lock, no publishing): for tests and tools."""
    check_tiered_geometry(hash_slot_num, index_num)
    runner = InlineRunner()
    runner._scans = {sc.index: sc for sc in scans}
    plan = make_tiered_plan(runner, [sc.summary() for sc in scans], hash_slot_num, index_num, topic_ids or {},
                            next_id)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    built = runner.build_with(len(plan.files), tiered_pieces, build_tiered_file, plan, str(out_dir),
                              uuid.uuid4().hex[:12], _no_progress)
    paths = []
    for b, fp in zip(built, plan.files):
        os.rename(b.temp_path, out_dir / fp.name)
        paths.append(out_dir / fp.name)
    return paths


# ============================================================================ the job

@dataclass
class TieredReindexResult(ReindexResult):
    copied_messages: int = 0          # records the tiered store would copy (consume-queue records, topic kept)
    keyed_messages: int = 0
    transaction_records_skipped: int = 0
    system_topic_records: int = 0
    key_sets_too_large: int = 0
    key_sets_failed: int = 0
    tiered_metadata: Optional[str] = None
    topics: list[dict] = field(default_factory=list)


def tiered_reindex(config: BrokerConfig, out: Optional[Path], master: str = DEFAULT_MASTER, dry_run: bool = False,
                   replace: bool = False, progress: Optional[Progress] = None,
                   hash_slot_num: int = TIERED_DEFAULT_HASH_SLOT_NUM, index_num: int = TIERED_DEFAULT_INDEX_NUM,
                   metadata_path: Optional[Path] = None,
                   black_topics: Iterable[str] = (DEFAULT_CLUSTER_NAME,)) -> TieredReindexResult:
    """Build compacted tiered index files from the store's commit log into `out` (see the module docstring)."""
    progress = progress or _no_progress
    t0 = time.perf_counter()
    root = config.root
    check_tiered_geometry(hash_slot_num, index_num)
    if not root.exists():
        raise NotAStoreError(f"store directory {root} does not exist")
    if not root.is_dir():
        raise NotAStoreError(f"{root} is not a directory")
    if not any(d.is_dir() for d in config.commitlog_dirs):
        raise NotAStoreError(f"{root} is not a RocketMQ store: it has no commitlog/ directory "
                             f"({', '.join(map(str, config.commitlog_dirs))})")
    if not master:
        raise InvalidArgumentError("--master must not be empty")
    if out is None and not dry_run:
        raise InvalidArgumentError("--format tiered needs --out DIR: the compacted files are uploaded segments, "
                                   "which have no place in the local store")
    out_dir = Path(out).resolve() if out is not None else None
    if out_dir is not None:
        layout = StoreLayout.of(config)
        for forbidden, why in ((layout.tiered_index_dir, "the broker loads every numeric file there as an "
                                                         "unsealed working file"),
                               (layout.index_dir, "that is the broker's own index directory")):
            if out_dir == forbidden.resolve():
                raise InvalidArgumentError(f"--out {out_dir}: {why}; choose another directory")
        if out_dir.exists() and not out_dir.is_dir():
            raise InvalidArgumentError(f"--out {out_dir} exists and is not a directory")
        if out_dir.is_dir() and list_index_files(out_dir) and not replace and not dry_run:
            raise InvalidArgumentError(f"--out {out_dir} already holds index files; pass --replace to overwrite "
                                       "them or choose an empty directory")
    meta = None
    if metadata_path is not None:
        meta = load_tiered_metadata(metadata_path)
    else:
        cand = StoreLayout.of(config).tiered_metadata
        if cand.exists() or cand.with_name(cand.name + ".bak").exists():
            metadata_path = cand
            meta = load_tiered_metadata(cand)
    known_ids, next_id = metadata_topic_ids(meta)
    result = TieredReindexResult(master, dry_run, str(root), str(out_dir) if out_dir else "",
                                 hash_slot_num=hash_slot_num, index_num=index_num, format="tiered",
                                 tiered_metadata=str(metadata_path) if meta is not None else None)

    with ReindexJob(root, master, dry_run, result, t0) as job:
        segments = list_segments(config)
        result.segments = len(segments)
        runner = job.start_runner()

        t_scan = time.perf_counter()
        scan_fn = functools.partial(scan_segment_tiered, black=tuple(sorted(set(black_topics))))
        summaries = runner.scan(segments, progress, scan_fn=scan_fn) if segments else []
        summaries.sort(key=lambda d: d["index"])
        result.scan_seconds = time.perf_counter() - t_scan
        result.messages = sum(d["records"] for d in summaries)
        result.copied_messages = sum(d["copied"] for d in summaries)
        result.keyed_messages = sum(d["keyed"] for d in summaries)
        result.bytes_read = sum(d["bytes_scanned"] for d in summaries)
        result.transaction_records_skipped = sum(d["tx_skipped"] for d in summaries)
        result.system_topic_records = sum(d["filtered"] for d in summaries)
        result.length_mismatches = sum(d["length_mismatches"] for d in summaries)
        result.anomalies = _anomalies(summaries)

        plan = make_tiered_plan(runner, summaries, hash_slot_num, index_num, known_ids, next_id)
        result.keys_indexed = plan.total_entries
        result.index_files = len(plan.files)
        result.key_sets_too_large = plan.oversize_sets
        result.key_sets_failed = plan.failed_sets
        if plan.oversize_sets:
            result.anomalies.append(f"{plan.oversize_sets} message(s) have more keys than a tiered index file holds "
                                    f"({index_num - 1}); the broker's putKey fails for them too: not indexed")
        if plan.failed_sets:
            result.anomalies.append(f"{plan.failed_sets} message(s) have a key whose hash is Integer.MIN_VALUE; with "
                                    f"{hash_slot_num} slots the broker's put fails at that key (the keys before it "
                                    "are written on each of its three attempts), reproduced here")
        new = set(plan.new_topics)
        result.topics = [{"topic": t, "topicId": i, "source": "new" if t in new else "metadata"}
                         for t, i in sorted(plan.topic_ids.items(), key=lambda x: x[1])]
        result.files = [{"name": fp.name, "items": fp.entries, "beginTimestamp": fp.begin} for fp in plan.files]
        if dry_run:
            return result

        run_id = uuid.uuid4().hex[:12]
        out_dir.mkdir(parents=True, exist_ok=True)
        staging = out_dir / f".reindex-{run_id}"
        staging.mkdir()
        job.staging = staging
        t_build = time.perf_counter()
        built = (runner.build_with(len(plan.files), tiered_pieces, build_tiered_file, plan, str(staging), run_id,
                                   progress) if plan.files else [])
        result.build_seconds = time.perf_counter() - t_build
        by_no = {b.number: b for b in built}
        if sorted(by_no) != [fp.number for fp in plan.files]:
            raise ReindexError("not every tiered index file was built; nothing was published")
        keep = {os.path.basename(b.temp_path) for b in built}
        for p in staging.iterdir():  # leftovers of failed or speculative task attempts
            if p.name not in keep:
                p.unlink()
        for fp, info in zip(plan.files, result.files):
            b = by_no[fp.number]
            os.rename(b.temp_path, staging / fp.name)
            info.update({"endTimestamp": b.end_timestamp, "hashSlotCount": b.hash_slot_count, "bytes": b.bytes})
            if b.reachable != b.entries:
                result.anomalies.append(f"file {fp.name}: {b.entries - b.reachable} item(s) of Integer.MIN_VALUE keys "
                                        "landed in the header (slot -1..-3) and are unreachable, as with the broker")
        fsync_dir(staging)
        _publish(result, staging, out_dir, False, replace, plan)
        job.staging = None
        return result
