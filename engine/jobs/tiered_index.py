"""tiered reindex: compacted tiered-storage index files (format §9) built from the commit log.

What a RocketMQ 5 tiered store would have indexed and uploaded, had every queue been copied to tiered storage
from its first message, computed straight from the local commit log:

* which messages: the records the tiered store copies, i.e. those with a consume-queue unit (valid records of
  transaction type NOT_TYPE or COMMIT; PREPARED and ROLLBACK records and LENGTH_MISMATCH records get no unit,
  format §4.2, §7.7), of topics the tiered store accepts (MessageStoreTopicFilter: not blank, not a system topic
  -- TopicValidator's set or the ``rmq_sys_`` prefix --, not an LMQ ``%LMQ%`` topic, not the cluster or broker
  name). Their key set is what MessageStoreDispatcherImpl.constructIndexFile builds (format §9.6): UNIQ_KEY if not
  blank plus every token of KEYS split on " " (empty tokens kept, Java's trailing empty tokens dropped),
  de-duplicated, in Java HashSet order -- engine.broker.index.keys.tiered_key_set.
* item fields: topicId from ``<store>/config/tieredStoreMetadata.json`` when the topic is there, else a new
  id: after the metadata's topicSerialNumber / largest id, or from 0 without metadata (the broker's
  topicSequenceNumber starts at -1 and is incremented before use), in first-seen commit-log order;
  queueId = QUEUEID; offset = the record's offset in its queue's tiered commit log, i.e. the sum of the sizes
  of the earlier copied records of the same topic/queue in commit-log order (the queue uploaded from its
  start, tiered commit log starting at 0); size = TOTALSIZE; timestamp = STORETIMESTAMP.
* files: keys are put in commit-log order with IndexStoreService.putKey's semantics over unsealed files of the
  given geometry: a key set that does not fit (FILE_FULL) goes whole to a new file, a put that fails
  (UNKNOWN_ERROR: a key hashing to Integer.MIN_VALUE whose slot lies before the header, format §9.5) is retried
  twice on the same file, three attempts at most. A file's begin timestamp (= its name) is the store time of
  the first message put into it, raised to previous + 1 when not increasing (deterministic reruns; the broker
  uses the wall clock). Each file is then compacted (format §9.4) and written in its uploaded form. Files that end up
  with no item (they upload 0 bytes) are not written.

The output equals, byte for byte, engine.tiered.index.file.IndexStoreFile.create / put_key in a loop / compact() over the
same inputs (the tests check it). Unlike the broker, it does not need the 28 + 8*slots + 32*items byte
unsealed file: each compacted file is assembled in memory from its items with numpy.

Job layout (the framework and runners of engine.jobs.framework, as the broker-format job): scan one segment
range per task (records decoded window by window with engine.broker.commitlog.records.decode_segment, key sets found,
de-duplicated, ordered and hashed in bulk by engine.broker.index.keycolumns.tiered_keys), plan on the driver
(engine.jobs.tiered_plan: topic ids, queue base offsets, the greedy FILE_FULL cut with searchsorted per file
and an exact emulation of the service's retry loop for the rare irregular key sets), one build task per file.
"""
from __future__ import annotations

import functools
import os
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from engine.broker.write.guard import require_writable
from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.index.keycolumns import distinct_ranges, tiered_keys
from engine.broker.commitlog.message import TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE
from engine.broker.commitlog.records import SCAN_WINDOW, RecordBatch
from engine.errors import InvalidArgumentError
from engine.fsutil import write_fully
from engine.java.lang import INT_MAX, INT_MIN, to_i32
from engine.jobs.broker_index import temp_name
from engine.jobs.framework import (DEFAULT_MASTER, Job, ReindexError, ReindexResult, check_master, check_store,
                                   resolve_output)
from engine.broker.commitlog.ranges import RANGE_BYTES, SegmentRange, segment_ranges, walk_buffer, walk_range
from engine.exec.ranges import RangeScan, range_summary
from engine.jobs.tiered_plan import TieredPlan, file_ranges, make_tiered_plan, metadata_topic_ids
from engine.progress import Progress, no_progress
from engine.tiered.flat.layout import DEFAULT_CLUSTER
from engine.tiered.flat.metadata import read_metadata
from engine.tiered.flat.topic_filter import TieredTopicFilter
from engine.tiered.index.format import (COMPACT_INDEX_ITEM_SIZE, COMPACT_ITEM_DTYPE, DEFAULT_HASH_SLOT_NUM,
                                        DEFAULT_INDEX_NUM, END_MAGIC_CODE, HASH_SLOT_SIZE, HEADER_SIZE,
                                        INDEX_ITEM_SIZE)

#: the filter of a broker whose name is not known: only for tools and tests (tiered_reindex_request needs the name)
DEFAULT_TOPIC_FILTER = TieredTopicFilter(DEFAULT_CLUSTER, None)

_HEADER = struct.Struct(">iqqii")


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
class TieredSegmentScan(RangeScan):
    """One range's copied records (per record arrays) and their keys (key_hash, per key, HashSet order)."""
    topics: list[str]        # topics of the copied records, first-seen order
    rec_topic: np.ndarray    # int32 index into topics
    rec_qid: np.ndarray      # int32 QUEUEID
    rec_size: np.ndarray     # int32 TOTALSIZE
    rec_ts: np.ndarray       # int64 STORETIMESTAMP
    rec_nkeys: np.ndarray    # int32 size of the key set
    key_hash: np.ndarray     # int32 tiered hashCode of "topic#key" (sign flipped), record by record
    valid_records: int = 0   # valid records walked (copied or not)
    tx_skipped: int = 0      # PREPARED / ROLLBACK records: no consume-queue unit, never copied
    filtered: int = 0        # records of topics the tiered store does not copy

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, f).nbytes for f in ("rec_topic", "rec_qid", "rec_size", "rec_ts", "rec_nkeys",
                                                     "key_hash"))

    def summary(self) -> dict:
        keyed = self.rec_nkeys > 0
        nk = self.rec_nkeys[keyed]
        return {
            "index": self.index, "segment": self.segment, "start": self.start, "begin": self.begin,
            "end": self.end, "first": self.first, "exit": self.exit, "seconds": self.seconds,
            "started": self.started,
            "records": self.valid_records, "copied": self.records, "keyed": int(len(nk)), "keys": int(nk.sum()),
            "bytes_scanned": self.bytes_scanned, "end_kind": self.end_kind, "end_offset": self.end_offset,
            "end_reason": self.end_reason, "length_mismatches": self.length_mismatches, "phy_mismatches": 0,
            "tx_skipped": self.tx_skipped, "filtered": self.filtered, "topics": list(self.topics),
            "queues": self._queues(), "nkeys_z": zlib.compress(nk.astype("<u4").tobytes(), 1),
            "min_hash": self._min_hash(keyed),
        }

    def _min_hash(self, keyed: np.ndarray) -> dict:
        """Keyed-message number -> positions of its keys whose hash is Integer.MIN_VALUE: their put may fail
        depending on the slot count."""
        out: dict = {}
        bad = np.flatnonzero(self.key_hash == INT_MIN)
        if len(bad):
            key_start = np.cumsum(self.rec_nkeys, dtype=np.int64) - self.rec_nkeys
            key_rec = np.searchsorted(key_start, bad, side="right") - 1
            keyed_no = np.cumsum(keyed) - 1
            for b, r in zip(bad.tolist(), key_rec.tolist()):
                out.setdefault(int(keyed_no[r]), []).append(int(b - key_start[r]))
        return out

    def _queues(self) -> list[tuple]:
        """(local topic number, queueId, bytes, records) per queue of this range."""
        qkey = self.rec_topic.astype(np.int64) << 32 | (self.rec_qid.astype(np.int64) & 0xFFFFFFFF)
        uq, inv = np.unique(qkey, return_inverse=True)
        inv = inv.reshape(-1)
        qcount = np.bincount(inv, minlength=len(uq))
        qsize = np.zeros(len(uq), dtype=np.int64)
        np.add.at(qsize, inv, self.rec_size.astype(np.int64))
        return [(int(u >> 32), to_i32(u & 0xFFFFFFFF), int(sz), int(c))
                for u, sz, c in zip(uq.tolist(), qsize.tolist(), qcount.tolist())]


class _TieredColumns:
    """Collects the copied records and key sets of the windows of one range walk."""

    def __init__(self, keep_out: TieredTopicFilter):
        self.keep_out = keep_out
        self.topics: list[str] = []
        self.topic_no: dict[str, int] = {}
        self.filtered_cache: dict[str, bool] = {}
        self.parts: list[tuple] = []
        self.valid = self.mismatches = self.tx = self.filtered = 0

    def __call__(self, buf, b: np.ndarray, batch: RecordBatch) -> None:
        bad = int(len(batch) - np.count_nonzero(batch.length_ok))
        if bad:  # LENGTH_MISMATCH: no consume-queue unit (format §7.7)
            self.mismatches += bad
            batch = batch.select(batch.length_ok)
        self.valid += len(batch)
        tx = np.isin(batch.sys_flag & 0xC, (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE))
        self.tx += int(np.count_nonzero(tx))
        batch = batch.select(~tx)
        group, values = distinct_ranges(buf, b, batch.topic_pos, batch.topic_len)
        names = [v.decode("utf-8", "replace") for v in values]
        dropped = np.array([self._filtered(t) for t in names], dtype=bool)
        keep = ~dropped[group] if len(group) else np.zeros(0, dtype=bool)
        self.filtered += int(len(keep) - np.count_nonzero(keep))
        batch, group = batch.select(keep), group[keep]
        _, first = np.unique(group, return_index=True)
        for gi in group[np.sort(first)].tolist():  # this scan's topic numbers, in first-seen order
            self.topic_no.setdefault(names[gi], len(self.topic_no))
        self.topics = list(self.topic_no)
        number = np.array([self.topic_no.get(t, -1) for t in names] or [0], dtype=np.int32)
        nkeys, key_hash = tiered_keys(buf, b, batch.topic_pos, batch.topic_len, batch.props_pos, batch.props_len)
        self.parts.append((number[group], batch.queue_id.astype(np.int32), batch.total.astype(np.int32),
                           batch.store_ts.copy(), nkeys, key_hash))

    def _filtered(self, topic: str) -> bool:
        f = self.filtered_cache.get(topic)
        if f is None:
            f = self.filtered_cache[topic] = self.keep_out.filtered(topic)
        return f

    def column(self, j: int, dtype) -> np.ndarray:
        if not self.parts:
            return np.empty(0, dtype)
        return np.concatenate([p[j] for p in self.parts]).astype(dtype, copy=False)


def scan_range_tiered(unit: SegmentRange, keep_out: TieredTopicFilter = DEFAULT_TOPIC_FILTER,
                      window: int = SCAN_WINDOW) -> TieredSegmentScan:
    """Decode one segment range the way the broker dispatches it (no CRC), keeping what the tiered store copies."""
    return _scan(unit, keep_out, lambda on_batch: walk_range(unit, on_batch, window))


def scan_buffer_tiered(buf, unit: SegmentRange, keep_out: TieredTopicFilter = DEFAULT_TOPIC_FILTER,
                       window: int = SCAN_WINDOW) -> TieredSegmentScan:
    """scan_range_tiered over a buffer holding the whole segment file (tools and tests)."""
    return _scan(unit, keep_out, lambda on_batch: walk_buffer(buf, unit, on_batch, window))


def _scan(unit: SegmentRange, keep_out: TieredTopicFilter, walk) -> TieredSegmentScan:
    t, started = time.perf_counter(), time.time()
    cols = _TieredColumns(keep_out)
    w = walk(cols)
    s = range_summary(unit, w, 0, time.perf_counter() - t)
    return TieredSegmentScan(
        unit.index, unit.seg_start, cols.topics, cols.column(0, np.int32), cols.column(1, np.int32),
        cols.column(2, np.int32), cols.column(3, np.int64), cols.column(4, np.int32), cols.column(5, np.int32),
        valid_records=cols.valid, bytes_scanned=s["bytes_scanned"], end_kind=w.end_kind, end_offset=s["end_offset"],
        end_reason=w.end_reason, length_mismatches=cols.mismatches, tx_skipped=cols.tx, filtered=cols.filtered,
        segment=unit.segment, begin=unit.begin, end=unit.end, first=w.first, exit=w.exit, seconds=s["seconds"],
        started=started)


# ============================================================================ pieces and build


def _range_columns(scan: TieredSegmentScan, plan: TieredPlan):
    """Per record: tiered commit-log offset and topicId; per record: first key number."""
    nrec = scan.records
    off = np.zeros(nrec, dtype=np.int64)
    if nrec:
        qkey = scan.rec_topic.astype(np.int64) << 32 | (scan.rec_qid.astype(np.int64) & 0xFFFFFFFF)
        uq, inv = np.unique(qkey, return_inverse=True)
        bases = plan.range_queue_base[scan.index]
        qbase = np.array([bases[(int(u >> 32), to_i32(u & 0xFFFFFFFF))] for u in uq.tolist()],
                         dtype=np.int64)
        order = np.argsort(inv, kind="stable")
        sz = scan.rec_size.astype(np.int64)[order]
        cs = np.cumsum(sz) - sz                              # exclusive running sum over the sorted records
        grp = inv[order]
        first = np.searchsorted(grp, np.arange(len(uq)))     # first sorted position of each queue
        off[order] = qbase[grp] + cs - cs[first][grp]
    tids = np.asarray(plan.range_topic_ids[scan.index] or [0], dtype=np.int64)
    tid = tids[scan.rec_topic] if nrec else np.empty(0, dtype=np.int64)
    key_start = np.cumsum(scan.rec_nkeys, dtype=np.int64) - scan.rec_nkeys
    return off, tid, key_start


def tiered_pieces(scan: TieredSegmentScan, plan: TieredPlan) -> Iterator[tuple[int, tuple]]:
    """(file number, (event number, range, items...)) for every put event touching this range."""
    k0 = plan.range_keyed_start[scan.index]
    nk_seg = plan.range_keyed[scan.index]
    if nk_seg == 0:
        return
    keyed = np.flatnonzero(scan.rec_nkeys > 0)
    if len(keyed) != nk_seg:
        raise ReindexError(f"range {scan.index}: {len(keyed)} keyed messages, planned {nk_seg} (the data changed?)")
    off, tid, key_start = _range_columns(scan, plan)
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
    """The uploaded compacted file of an unsealed file that got these items put in this order (format §9.4, §9.6)."""
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
        write_fully(fd, data, 0, path, undo=False)
        os.fsync(fd)
    finally:
        os.close(fd)
    return TieredBuiltFile(fp.number, path, fp.entries, len(data), info["reachable"], info["endTimestamp"],
                           info["hashSlotCount"])


def rebuild_tiered_from_scans(scans: list[TieredSegmentScan], hash_slot_num: int, index_num: int, out_dir,
                              topic_ids: Optional[dict[str, int]] = None, next_id: int = 0) -> list[Path]:
    """Plan and build from ready scans into out_dir (no lock, no publishing): for tests and tools."""
    from engine.exec.runners import InlineRunner

    check_tiered_geometry(hash_slot_num, index_num)
    runner = InlineRunner(scans)
    plan = make_tiered_plan(runner, [sc.summary() for sc in scans], hash_slot_num, index_num, topic_ids or {},
                            next_id)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    built = runner.build_with(len(plan.files), tiered_pieces, build_tiered_file, plan, str(out_dir), "0" * 12,
                              no_progress)
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
                   hash_slot_num: int = DEFAULT_HASH_SLOT_NUM, index_num: int = DEFAULT_INDEX_NUM,
                   metadata_path: Optional[Path] = None,
                   keep_out: Optional[TieredTopicFilter] = DEFAULT_TOPIC_FILTER,
                   range_bytes: int = RANGE_BYTES, spark_conf: Optional[dict] = None
                   ) -> TieredReindexResult:  # 12 parameters: the CLI's options, passed through one by one
    """Build compacted tiered index files from the store's commit log into `out` (see the module docstring).
    `keep_out` None: the broker's name is unknown, refused once the inputs are checked."""
    progress = progress or no_progress
    check_tiered_geometry(hash_slot_num, index_num)
    require_writable(config, "tiered reindex")
    layout = check_store(config)
    check_master(master)
    target = resolve_output(layout, out, "tiered", replace, dry_run)
    if keep_out is None:
        raise InvalidArgumentError("the broker name is unknown (no --broker-name, no brokerName in broker.conf, no "
                                   "single broker in the tiered metadata): the tier never holds a topic named like "
                                   "the broker, so it cannot be told apart; pass --broker-name")
    if metadata_path is None:
        cand = layout.tiered_metadata
        metadata_path = cand if cand.exists() or cand.with_name(cand.name + ".bak").exists() else None
    loaded = read_metadata(metadata_path) if metadata_path is not None else None
    meta = loaded.metadata if loaded is not None else None
    known_ids, next_id = metadata_topic_ids(meta)
    result = TieredReindexResult(master, dry_run, str(config.root), str(target.directory) if target else "",
                                 hash_slot_num=hash_slot_num, index_num=index_num, format="tiered",
                                 tiered_metadata=str(metadata_path) if meta is not None else None)
    with Job(layout, master, result, target, "tiered") as job:
        job.start_runner(spark_conf)
        scan_fn = functools.partial(scan_range_tiered, keep_out=keep_out)
        summaries = job.scan(segment_ranges(config, range_bytes), scan_fn, progress)
        plan = make_tiered_plan(job.runner, summaries, hash_slot_num, index_num, known_ids, next_id)
        _report(result, summaries, plan)
        if loaded is not None:
            result.anomalies += loaded.warnings   # the main file was unusable and its .bak was read
        if not dry_run:
            _build_and_publish(job, plan, progress)
        return result


def _report(result: TieredReindexResult, summaries: list[dict], plan: TieredPlan) -> None:
    result.copied_messages = sum(d["copied"] for d in summaries)
    result.keyed_messages = sum(d["keyed"] for d in summaries)
    result.transaction_records_skipped = sum(d["tx_skipped"] for d in summaries)
    result.system_topic_records = sum(d["filtered"] for d in summaries)
    result.keys_indexed = plan.total_entries
    result.index_files = len(plan.files)
    result.key_sets_too_large = plan.oversize_sets
    result.key_sets_failed = plan.failed_sets
    if plan.oversize_sets:
        result.anomalies.append(f"{plan.oversize_sets} message(s) have more keys than a tiered index file holds "
                                f"({plan.index_num - 1}); the broker's putKey fails for them too: not indexed")
    if plan.failed_sets:
        result.anomalies.append(f"{plan.failed_sets} message(s) have a key whose hash is Integer.MIN_VALUE; with "
                                f"{plan.hash_slot_num} slots the broker's put fails at that key (the keys before it "
                                "are written on each of its three attempts), reproduced here")
    new = set(plan.new_topics)
    result.topics = [{"topic": t, "topicId": i, "source": "new" if t in new else "metadata"}
                     for t, i in sorted(plan.topic_ids.items(), key=lambda x: x[1])]
    result.files = [{"name": fp.name, "items": fp.entries, "beginTimestamp": fp.begin} for fp in plan.files]


def _build_and_publish(job: Job, plan: TieredPlan, progress: Progress) -> None:
    result = job.result
    staging = job.open_staging()
    t = time.perf_counter()
    built = (job.runner.build_with(len(plan.files), tiered_pieces, build_tiered_file, plan, str(staging),
                                   job.run_id, progress, file_ranges) if plan.files else [])
    result.build_seconds = time.perf_counter() - t
    names = job.seal(built, [fp.name for fp in plan.files],
                     {"hash_slot_num": plan.hash_slot_num, "index_num": plan.index_num})
    for b, info in zip(sorted(built, key=lambda x: x.number), result.files):
        info.update({"endTimestamp": b.end_timestamp, "hashSlotCount": b.hash_slot_count, "bytes": b.bytes})
        if b.reachable != b.entries:
            result.anomalies.append(f"file {info['name']}: {b.entries - b.reachable} item(s) of Integer.MIN_VALUE "
                                    "keys landed in the header (slot -1..-3) and are unreachable, as with the broker")
    job.publish(names)


@dataclass
class TieredReindexRequest:
    """`rmqtool tiered reindex` as asked: the local store, the output, the runner, and the tier options that decide
    the geometry, the topic ids and which topics the tier keeps."""

    store: Optional[Path] = None
    broker_conf: Optional[Path] = None
    out: Optional[Path] = None
    master: str = DEFAULT_MASTER
    spark_conf: Optional[dict] = None
    dry_run: bool = False
    replace: bool = False
    metadata: Optional[Path] = None
    cluster_name: Optional[str] = None
    broker_name: Optional[str] = None
    hash_slots: Optional[int] = None
    max_index: Optional[int] = None
    commitlog_file_size: Optional[int] = None
    tiered_store_path: Optional[Path] = None
    new_geometry: bool = False


def tiered_reindex_request(req: TieredReindexRequest, progress: Optional[Progress] = None) -> TieredReindexResult:
    """tiered_reindex with everything resolved: the geometry by the writers' rule (engine.tiered.index.table
    writer_tiered_geometry: broker.conf, the options, else the store's tiered index files, never another one than
    theirs without --new-geometry); the cluster name from the option, broker.conf, else DefaultCluster; the broker
    name from the option, broker.conf, else the tiered metadata's queues. Without a broker name the job is refused:
    the tier never holds a topic named like the broker (MessageStoreTopicFilter) and guessing it would index one."""
    from engine.broker.config.brokerconf import load_config
    from engine.broker.layout import StoreLayout
    from engine.tiered.flat.config import load_tiered_config
    from engine.tiered.flat.topic_filter import topic_filter

    if req.store is None and req.broker_conf is None:
        raise InvalidArgumentError("no store given: pass --store DIR or --broker-conf FILE")
    config = load_config(req.broker_conf, storePathRootDir=req.store,
                         mappedFileSizeCommitLog=req.commitlog_file_size)
    tcfg = load_tiered_config(req.broker_conf, tieredStoreIndexFileMaxHashSlotNum=req.hash_slots,
                              tieredStoreIndexFileMaxIndexNum=req.max_index)
    metadata_path = req.metadata
    if metadata_path is None:
        cand = StoreLayout(config.root).tiered_metadata
        metadata_path = cand if cand.exists() or cand.with_name(cand.name + ".bak").exists() else None
    broker = req.broker_name or tcfg.brokerName or _metadata_broker(metadata_path)
    cluster = req.cluster_name or tcfg.brokerClusterName or DEFAULT_CLUSTER
    keep_out = topic_filter(tcfg, cluster, broker) if broker else None
    geometry = _writer_geometry(req, config, tcfg, metadata_path, cluster, broker)
    return tiered_reindex(config, req.out, req.master, req.dry_run, req.replace, progress,
                          geometry.hash_slot_num, geometry.index_num, metadata_path, keep_out,
                          spark_conf=req.spark_conf)


def _writer_geometry(req: TieredReindexRequest, config: BrokerConfig, tcfg, metadata_path: Optional[Path],
                     cluster: str, broker: Optional[str]):
    """The geometry the job writes, checked against the store's tiered index files: the local ones of
    tiered_index_file/ and the INDEX segments the metadata lists (read from the tier, -T or tieredStoreFilePath)."""
    from engine.broker.layout import StoreLayout
    from engine.errors import GeometryError
    from engine.tiered.flat.layout import INDEX, TieredLayout
    from engine.tiered.index.flatfile import index_file_path, index_segments
    from engine.tiered.index.table import local_index_files, writer_tiered_geometry

    local = local_index_files(StoreLayout(config.root).tiered_index_dir)
    meta = read_metadata(metadata_path).metadata if metadata_path is not None else None
    root = req.tiered_store_path or (Path(tcfg.tieredStoreFilePath) if tcfg.tieredStoreFilePath else None)
    segments = index_segments(TieredLayout(root, cluster, broker), meta) if root is not None and broker else []
    listed = meta.segment_entries(index_file_path(broker), INDEX) if meta is not None and broker else []
    if listed and not segments and not req.new_geometry and not (tcfg.is_given("tieredStoreIndexFileMaxHashSlotNum")
                                                                 or tcfg.broker_conf is not None):
        raise GeometryError(f"the tiered metadata lists {len(listed)} uploaded index file(s) whose slot count "
                            "cannot be read without the tiered store: pass --tiered-store-path, or --hash-slots and "
                            "--max-index as the broker has them")
    return writer_tiered_geometry(tcfg, segments, local, req.new_geometry, "tiered reindex")


def _metadata_broker(path: Optional[Path]) -> Optional[str]:
    """The broker the tiered metadata's queues belong to, when they name exactly one."""
    if path is None:
        return None
    meta = read_metadata(path).metadata
    names = {q.broker_name for t in meta.topics.keys() for q in (meta.queues.get(t) or {}).values()
             if q.broker_name}
    return names.pop() if len(names) == 1 else None
