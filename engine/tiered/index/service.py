"""Query by key over a directory of tiered index files (``IndexStoreService.queryAsync``, format §9.7), and
checking the answers against the messages themselves (the topic ids come from engine.tiered.flat.metadata).

Service-level rules reproduced from the Java code (``IndexStoreService`` / ``MessageStoreFetcherImpl``):

* files are keyed by their begin timestamp (the numeric file name); the candidates are the files whose
  key lies in ``[begin, end]`` (inclusive), queried newest first;
* the answers are merged into a map keyed ``"<queueId>-<offset>"``, putting only while the map holds
  fewer than ``maxCount`` entries, and the list is cut to ``maxCount``;
* the fetcher then drops items whose topicId differs from the topic's id in the tiered metadata (and
  answers nothing when the topic is not in the metadata at all).

Item offsets are offsets in the **tiered** commit log of the item's queue, not in the broker's local
commit log.  Two ways to check an item against a real message are offered:

* :class:`FlatCommitLogVerifier` reads the record at that offset from the tiered store's flat commit log
  (the POSIX backend layout of engine.tiered.flat.layout, format §9.1) and decodes it;
* :class:`LocalStoreLocator` looks for the same message in the broker's local store: the tiered record is
  a copy of the local one, so it is searched in the local consume queue of ``topic/queueId`` by store
  time (the item's timeDiff pins it to one second), then matched on size, topic and key.

Only stdlib + numpy + engine modules are used (no typer/rich).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from engine.errors import InvalidArgumentError
from engine.java.lang import INT_MAX, java_div, to_i32
from engine.broker.commitlog.message import PROP_KEYS, VALID, check_message
from engine.broker.index.keys import tiered_key_set
from engine.tiered.flat.layout import COMMIT_LOG, TieredLayout, brokers_of, cluster_dir_name, list_clusters
from engine.tiered.flat.segments import FlatAppendFile, Segment, TieredReadError
from engine.tiered.index.file import IndexStoreFile
from engine.tiered.index.format import TieredQueryError
from engine.tiered.index.table import local_index_files, merge_items

__all__ = [
    "TieredQueryResult",
    "list_tiered_index_files",
    "query_tiered_dir",
    "FlatCommitLogVerifier",
    "LocalStoreLocator",
    "check_record",
]


# --------------------------------------------------------------------------------------------------
# Directory query (IndexStoreService.queryAsync)
# --------------------------------------------------------------------------------------------------


def list_tiered_index_files(directory) -> list[tuple[int, Path]]:
    """(beginTimestamp, path) of every file the service loads from `directory`, oldest first (the rule is
    engine.tiered.index.table.local_index_files); a directory that does not exist is bad input here."""
    d = Path(directory)
    if not d.exists():
        raise InvalidArgumentError(f"tiered index directory {d} does not exist")
    if not d.is_dir():
        raise InvalidArgumentError(f"{d} is not a directory")
    return local_index_files(d)


@dataclass
class TieredQueryResult:
    """What the tiered index service answers, before and after the fetcher's topicId filter."""

    items: list[dict] = field(default_factory=list)        # kept items (after the topicId filter)
    dropped: list[dict] = field(default_factory=list)      # items whose topicId differs (with "reason")
    files_total: int = 0
    files_selected: list[str] = field(default_factory=list)
    candidates: int = 0                                     # items the files returned before the merge
    errors: list[str] = field(default_factory=list)         # files whose query failed (Java: future failed)
    topic_id: Optional[int] = None


def query_tiered_dir(directory, topic: str, key: str, max_count: int, begin: int, end: int, *,
                     topic_id: Optional[int] = None, filter_topic_id: bool = True,
                     hash_slot_num: Optional[int] = None, index_num: Optional[int] = None) -> TieredQueryResult:
    """``IndexStoreService.queryAsync`` over the files of ``directory``, then the fetcher's topicId filter.

    ``topic_id=None`` (or ``filter_topic_id=False``) keeps every item.  Each returned item is the
    engine's item dict plus ``file`` (name), ``fileTimestamp`` and ``time`` (``fileTimestamp +
    timeDiff*1000``, the time the query filtered on).  Geometry: given values, else inferred per file.
    """
    if not 0 < max_count <= INT_MAX:
        raise InvalidArgumentError(f"max count {max_count} is out of range 1..{INT_MAX}")
    if begin > end:
        raise InvalidArgumentError(f"time range is empty: begin {begin} is after end {end}")
    files = list_tiered_index_files(directory)
    res = TieredQueryResult(files_total=len(files), topic_id=topic_id)
    answers = []
    # subMap(begin, true, end, true).descendingMap(): file key within [begin, end], newest first.
    for ts, path in reversed(files):
        if not begin <= ts <= end:
            continue
        res.files_selected.append(path.name)
        with IndexStoreFile.open(path, hash_slot_num, index_num, begin_timestamp=ts) as f:
            try:
                found = f.query(topic, key, max_count, begin, end)
            except TieredQueryError as e:
                res.errors.append(f"{path.name}: {e}")   # Java logs it and answers with the other files
                continue
        res.candidates += len(found)
        answers.append([{**it, "file": path.name, "fileTimestamp": ts, "time": ts + it["timeDiff"] * 1000}
                        for it in found])
    items = merge_items(answers, max_count)
    for it in items:
        if filter_topic_id and topic_id is not None and it["topicId"] != topic_id:
            d = dict(it)
            d["reason"] = f"topicId {it['topicId']} is not the topic's id {topic_id}"
            res.dropped.append(d)
        else:
            res.items.append(it)
    return res


# --------------------------------------------------------------------------------------------------
# Checking items against the tiered flat commit log (POSIX backend, engine.tiered.flat)
# --------------------------------------------------------------------------------------------------


def check_record(rec, topic: str, key: str, unique: bool, begin: int, end: int) -> str:
    """'' when the record really carries topic/key and a store time in [begin, end], else why not. The key is
    looked for where the tiered index took it from (format §9.6): the UNIQ_KEY and every KEYS token; with
    `unique`, the UNIQ_KEY only."""
    if rec.topic != topic:
        return f"hash collision: topic is {rec.topic!r}"
    if unique:
        if rec.uniq_key != key:
            return "hash collision: different UNIQ_KEY"
    elif key not in tiered_key_set(rec.uniq_key, rec.properties.get(PROP_KEYS)):
        return "hash collision: the key is neither the message's UNIQ_KEY nor one of its KEYS"
    if not begin <= rec.store_timestamp <= end:
        return f"store time {rec.store_timestamp} outside the window"
    return ""


class FlatCommitLogVerifier:
    """Reads and checks the record a tiered index item points at, in the tiered store's flat commit log."""

    def __init__(self, tiered_store_path, topic: str, *, cluster_name: Optional[str] = None,
                 broker_name: Optional[str] = None, broker_hints: Optional[set[str]] = None):
        root = Path(tiered_store_path)
        if not root.is_dir():
            raise InvalidArgumentError(f"tiered store path {root} is not a directory")
        self.topic = topic
        cluster = self._cluster(root, cluster_name)
        broker = self._broker(root / cluster_dir_name(cluster), topic, broker_name, broker_hints or set())
        self.layout = TieredLayout(root, cluster, broker)
        self._logs: dict[int, FlatAppendFile] = {}

    @staticmethod
    def _cluster(root: Path, cluster: Optional[str]) -> str:
        if cluster is not None:
            if not (root / cluster_dir_name(cluster)).is_dir():
                raise InvalidArgumentError(f"no directory {cluster_dir_name(cluster)} for cluster {cluster!r} "
                                           f"under {root}")
            return cluster
        found = [c for c, dirname in list_clusters(root) if dirname == cluster_dir_name(c)]
        if not found:
            raise InvalidArgumentError(
                f"no <md5>_<clusterName> directory under {root}: is it the tieredStoreFilePath of a POSIX backend?")
        if len(found) > 1:
            raise InvalidArgumentError(f"{root} holds several clusters ({', '.join(found)}); pass --cluster-name")
        return found[0]

    @staticmethod
    def _broker(cluster_dir: Path, topic: str, broker: Optional[str], hints: set[str]) -> str:
        if broker is not None:
            if not (cluster_dir / broker).is_dir():
                raise InvalidArgumentError(f"no broker directory {cluster_dir / broker}")
            return broker
        with_topic = [b for b in brokers_of(cluster_dir.parent, cluster_dir.name) if (cluster_dir / b / topic).is_dir()]
        hinted = [b for b in with_topic if b in hints]
        if len(hinted) == 1:
            return hinted[0]
        if len(with_topic) == 1:
            return with_topic[0]
        if not with_topic:
            raise InvalidArgumentError(f"no broker under {cluster_dir} has tiered data for topic {topic!r}")
        raise InvalidArgumentError(f"several brokers under {cluster_dir} hold topic {topic!r} "
                                   f"({', '.join(with_topic)}); pass --broker-name")

    def queue_dir(self, queue_id: int) -> Path:
        return self.layout.type_dir(self.topic, queue_id, COMMIT_LOG)

    def _log(self, queue_id: int) -> FlatAppendFile:
        log = self._logs.get(queue_id)
        if log is None:
            # The POSIX backend's committed bytes are the file's bytes.
            files = self.layout.list_segments(self.topic, queue_id, COMMIT_LOG).files
            log = self._logs[queue_id] = FlatAppendFile(
                COMMIT_LOG, [Segment(COMMIT_LOG, f.base, f.length, -1, -1, f.path, f.length) for f in files])
        return log

    def close(self) -> None:
        for log in self._logs.values():
            log.close()

    def verify(self, item: dict, key: str, unique: bool, begin: int, end: int):
        """(record or None, reason): reason is '' when the item's record really matches."""
        qid = item["queueId"]
        log = self._log(qid)
        if not log.segments:
            return None, f"no tiered commit log for queue {qid} ({self.queue_dir(qid)})"
        if item["size"] <= 0:
            return None, f"index item size {item['size']} is not a record size"
        try:
            buf = log.read(item["offset"], item["size"])
        except TieredReadError:
            buf = b""
        if not buf:
            return None, f"tiered offset {item['offset']} is outside the committed tiered commit log of queue {qid}"
        r = check_message(buf, 0, len(buf), check_crc=True)
        if r.status != VALID:
            return None, f"no valid record at tiered offset {item['offset']} ({r.reason or r.status.lower()})"
        rec = r.record
        if rec.total_size != item["size"]:
            return None, f"record is {rec.total_size} bytes, the index item says {item['size']}"
        if rec.queue_id != qid:
            return None, f"record is in queue {rec.queue_id}, the index item says {qid}"
        return rec, check_record(rec, self.topic, key, unique, begin, end)


class LocalStoreLocator:
    """Finds the local copy of a tiered item's message through the local consume queue of its queue.

    The consume queue is binary-searched by store time for the one-second bucket the item's timeDiff
    allows (``(int)((storeTs - fileBegin)/1000) == timeDiff``), then the records of that bucket are
    matched on size, topic, queue and key.  Items whose message is no longer (or never was) in the
    local store are reported as not located.
    """

    MAX_SCAN = 100_000

    def __init__(self, store, topic: str):
        self.store = store
        self.topic = topic
        self._units: dict[int, object] = {}
        self._used: set[int] = set()

    def _queue_units(self, qid: int):
        u = self._units.get(qid)
        if u is None:
            if not self.store.layout.cq_dir(self.topic, qid).is_dir():
                u = None
            else:
                u = self.store.consume_queue(self.topic, qid).all_units()
            self._units[qid] = u
        return u

    def _store_time(self, offset: int) -> Optional[int]:
        r = self.store.commitlog.check_at(int(offset), check_crc=False)
        return r.record.store_timestamp if r.status == VALID else None

    def locate(self, item: dict, key: str, unique: bool, begin: int, end: int):
        """(record or None, reason): '' when a local record matches the item."""
        qid = item["queueId"]
        units = self._queue_units(qid)
        if units is None or len(units) == 0:
            return None, f"queue {self.topic}/{qid} has no local consume queue"
        fb, td = item["fileTimestamp"], item["timeDiff"]
        t = fb + td * 1000
        lo_t = t - 999 if td <= 0 else t
        hi_t = t + 999 if td >= 0 else t
        offs = units["offset"]
        # First unit whose record is readable and not older than lo_t (unreadable = expired = older).
        lo, hi = 0, len(units)
        while lo < hi:
            mid = (lo + hi) // 2
            ts = self._store_time(offs[mid])
            if ts is None or ts < lo_t:
                lo = mid + 1
            else:
                hi = mid
        seen_any = False
        why = ""
        for i in range(lo, min(len(units), lo + self.MAX_SCAN)):
            off = int(offs[i])
            r = self.store.commitlog.check_at(off, check_crc=False)
            if r.status != VALID:
                continue
            rec = r.record
            if rec.store_timestamp > hi_t:
                break
            if rec.store_timestamp < lo_t or int(units["size"][i]) != item["size"] or off in self._used:
                continue
            if to_i32(java_div(rec.store_timestamp - fb, 1000)) != td or rec.total_size != item["size"]:
                continue
            seen_any = True
            why = check_record(rec, self.topic, key, unique, begin, end)
            if not why and rec.queue_id == qid:
                self._used.add(off)
                return rec, ""
        if seen_any:
            return None, f"the local records of that second in queue {qid} do not match ({why})"
        return None, f"not found in the local store (queue {qid}, store time {lo_t}..{hi_t}, {item['size']} bytes)"
