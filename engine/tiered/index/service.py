"""Query by key over a directory of tiered index files (``IndexStoreService.queryAsync``, format §9.7), the
tiered metadata (topic ids) and checking the answers against the messages themselves.

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
  (POSIX backend layout ``<tieredStoreFilePath>/<md5(cluster)[:8]>_<cluster>/<broker>/<topic>/<queueId>/
  COMMIT_LOG/<md5(str(base))[:8]><base:020d>``, format §9.1) and decodes it;
* :class:`LocalStoreLocator` looks for the same message in the broker's local store: the tiered record is
  a copy of the local one, so it is searched in the local consume queue of ``topic/queueId`` by store
  time (the item's timeDiff pins it to one second), then matched on size, topic and key.

Only stdlib + numpy + engine modules are used (no typer/rich).
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from engine.errors import InvalidArgumentError
from engine.java.lang import INT_MAX, java_div, to_i32
from engine.broker.message import VALID, check_message
from engine.tiered.index.file import IndexStoreFile
from engine.tiered.index.format import TieredQueryError

__all__ = [
    "TieredQueryResult",
    "list_tiered_index_files",
    "query_tiered_dir",
    "load_tiered_metadata",
    "metadata_topic_id",
    "metadata_broker_names",
    "md5_prefix",
    "offset_to_file_name",
    "FlatCommitLog",
    "FlatCommitLogVerifier",
    "LocalStoreLocator",
    "check_record",
]


_NUMERIC = re.compile(r"^[0-9]+$")


# --------------------------------------------------------------------------------------------------
# Directory query (IndexStoreService.queryAsync)
# --------------------------------------------------------------------------------------------------


def list_tiered_index_files(directory) -> list[tuple[int, Path]]:
    """(beginTimestamp, path) of every file with a purely numeric name, oldest first (as the service loads)."""
    d = Path(directory)
    if not d.exists():
        raise InvalidArgumentError(f"tiered index directory {d} does not exist")
    if not d.is_dir():
        raise InvalidArgumentError(f"{d} is not a directory")
    out = []
    for p in d.iterdir():
        # StringUtils.isNumeric: ASCII digits here; directories (compacting/) are skipped.
        if p.is_file() and _NUMERIC.match(p.name):
            ts = int(p.name)
            if ts > 2**63 - 1:
                continue  # Long.parseLong would fail: the broker skips it with an error log
            out.append((ts, p))
    out.sort()
    return out


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
    merged: dict[str, dict] = {}
    # subMap(begin, true, end, true).descendingMap(): file key within [begin, end], newest first.
    for ts, path in reversed(files):
        if not begin <= ts <= end:
            continue
        res.files_selected.append(path.name)
        with IndexStoreFile.open(path, hash_slot_num, index_num, begin_timestamp=ts) as f:
            try:
                found = f.query(topic, key, max_count, begin, end)
            except TieredQueryError as e:
                res.errors.append(f"{path.name}: {e}")
                continue
        res.candidates += len(found)
        for it in found:
            k = f"{it['queueId']}-{it['offset']}"
            # Java puts into a ConcurrentHashMap from parallel futures, so which file's copy of a duplicate
            # wins is unspecified; the newest file's (first seen) is kept here.  Counts are the same either way.
            if len(merged) < max_count and k not in merged:
                it = dict(it)
                it["file"] = path.name
                it["fileTimestamp"] = ts
                it["time"] = ts + it["timeDiff"] * 1000
                merged[k] = it
    if not merged and res.errors:
        # Java: allOf(...) failed and nothing was found -> the query future fails.
        raise TieredQueryError("tiered index query failed: " + "; ".join(res.errors))
    items = list(merged.values())[:max_count]
    for it in items:
        if filter_topic_id and topic_id is not None and it["topicId"] != topic_id:
            d = dict(it)
            d["reason"] = f"topicId {it['topicId']} is not the topic's id {topic_id}"
            res.dropped.append(d)
        else:
            res.items.append(it)
    return res


# --------------------------------------------------------------------------------------------------
# Tiered metadata (DefaultMetadataStore, config/tieredStoreMetadata.json)
# --------------------------------------------------------------------------------------------------


def _quote_bare_keys(text: str) -> str:
    """fastjson writes maps with integer keys unquoted (``{0:{...}}``, format §1.2); quote them for json."""
    out = []
    i, n = 0, len(text)
    in_str = False
    expect_key = False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_str = False
            i += 1
            continue
        if c == '"':
            in_str = True
            expect_key = False
        elif c in "{,":
            expect_key = True
        elif c.isspace():
            pass
        elif expect_key and (c == "-" or c.isdigit()):
            j = i + 1
            while j < n and text[j].isdigit():
                j += 1
            k = j
            while k < n and text[k].isspace():
                k += 1
            if k < n and text[k] == ":":
                out.append('"' + text[i:j] + '"')
                i = j
                expect_key = False
                continue
            expect_key = False
        else:
            expect_key = False
        out.append(c)
        i += 1
    return "".join(out)


def _parse_metadata(path: Path) -> dict:
    raw = path.read_text(encoding="utf-8")
    if not raw.strip():
        raise ValueError("empty file")
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError:
        obj = json.loads(_quote_bare_keys(raw))
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj


def load_tiered_metadata(path) -> dict:
    """The decoded metadata; like the broker's ConfigManager, ``<file>.bak`` is used when the file is
    missing, empty or unparsable.  Raises :class:`InvalidArgumentError` when neither can be read."""
    path = Path(path)
    problems = []
    for p in (path, path.with_name(path.name + ".bak")):
        if not p.exists():
            problems.append(f"{p} does not exist")
            continue
        try:
            return _parse_metadata(p)
        except (OSError, ValueError, UnicodeDecodeError) as e:
            problems.append(f"{p}: {e}")
    raise InvalidArgumentError("cannot read the tiered metadata: " + "; ".join(problems))


def metadata_topic_id(meta: dict, topic: str) -> Optional[int]:
    """``topicMetadataTable[topic].topicId``, or None when the topic is not in the metadata."""
    table = meta.get("topicMetadataTable") or {}
    if not isinstance(table, dict):
        raise InvalidArgumentError("tiered metadata: topicMetadataTable is not an object")
    entry = table.get(topic)
    if entry is None:
        return None
    tid = entry.get("topicId") if isinstance(entry, dict) else None
    if isinstance(tid, bool) or not isinstance(tid, int):
        raise InvalidArgumentError(f"tiered metadata: topic {topic!r} has no integer topicId ({tid!r})")
    return tid


def metadata_broker_names(meta: dict, topic: str) -> set[str]:
    """Broker names the metadata knows for ``topic`` (queue entries and commit-log segment paths)."""
    names: set[str] = set()
    queues = (meta.get("queueMetadataTable") or {}).get(topic) or {}
    if isinstance(queues, dict):
        for q in queues.values():
            mq = q.get("queue") if isinstance(q, dict) else None
            if isinstance(mq, dict) and isinstance(mq.get("brokerName"), str):
                names.add(mq["brokerName"])
    segs = meta.get("commitLogFileSegmentTable") or {}
    if isinstance(segs, dict):
        for p in segs:
            parts = str(p).split("/")
            if len(parts) == 3 and parts[1] == topic:
                names.add(parts[0])
    return names


# --------------------------------------------------------------------------------------------------
# Tiered flat commit log (POSIX backend)
# --------------------------------------------------------------------------------------------------


def md5_prefix(text: str) -> str:
    """``MessageStoreUtil.getHash``: first 8 hex digits of the MD5 of the UTF-8 bytes."""
    return hashlib.md5(text.encode("utf-8")).hexdigest()[:8]


def offset_to_file_name(offset: int) -> str:
    """``MessageStoreUtil.offset2FileName``: md5 prefix of the decimal offset + 20-digit offset."""
    return md5_prefix(str(offset)) + f"{offset:020d}"


_SEGMENT = re.compile(r"^[0-9a-f]{8}([0-9]{20})$")


class FlatCommitLog:
    """Read-only view of one queue's tiered commit log: ``.../<topic>/<queueId>/COMMIT_LOG/`` segments
    named by base offset; a segment's committed bytes are the file's bytes."""

    def __init__(self, directory):
        self.dir = Path(directory)
        self.segments: list[tuple[int, Path, int]] = []
        if self.dir.is_dir():
            for p in self.dir.iterdir():
                m = _SEGMENT.match(p.name)
                if m and p.is_file():
                    self.segments.append((int(m.group(1)), p, p.stat().st_size))
        self.segments.sort()

    def read(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes from the global offset (``FlatAppendFile.readAsync``: may span two segments)."""
        idx = None
        for i, (base, _p, _s) in enumerate(self.segments):
            if base <= offset:
                idx = i
            else:
                break
        if idx is None or length <= 0:
            return b""
        out = b""
        while idx < len(self.segments) and len(out) < length:
            base, p, size = self.segments[idx]
            pos = offset + len(out) - base
            if pos < 0 or pos >= size:
                break
            with open(p, "rb") as fh:
                fh.seek(pos)
                out += fh.read(min(length - len(out), size - pos))
            idx += 1
        return out


def check_record(rec, topic: str, key: str, unique: bool, begin: int, end: int) -> str:
    """'' when the record really carries topic/key and a store time in [begin, end], else why not."""
    if rec.topic != topic:
        return f"hash collision: topic is {rec.topic!r}"
    if unique:
        if rec.uniq_key != key:
            return "hash collision: different UNIQ_KEY"
    elif key not in rec.keys:
        return "hash collision: key not among the message's KEYS"
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
        self.cluster_dir = self._cluster_dir(root, cluster_name)
        self.broker_dir = self._broker_dir(self.cluster_dir, topic, broker_name, broker_hints or set())
        self._logs: dict[int, FlatCommitLog] = {}

    @staticmethod
    def _cluster_dir(root: Path, cluster: Optional[str]) -> Path:
        if cluster is not None:
            d = root / f"{md5_prefix(cluster)}_{cluster}"
            if not d.is_dir():
                raise InvalidArgumentError(f"no directory {d.name} for cluster {cluster!r} under {root}")
            return d
        found = []
        for d in sorted(root.iterdir()):
            if d.is_dir() and len(d.name) > 9 and d.name[8] == "_" and md5_prefix(d.name[9:]) == d.name[:8]:
                found.append(d)
        if not found:
            raise InvalidArgumentError(
                f"no <md5>_<clusterName> directory under {root}: is it the tieredStoreFilePath of a POSIX backend?")
        if len(found) > 1:
            names = ", ".join(d.name[9:] for d in found)
            raise InvalidArgumentError(f"{root} holds several clusters ({names}); pass --cluster-name")
        return found[0]

    @staticmethod
    def _broker_dir(cluster_dir: Path, topic: str, broker: Optional[str], hints: set[str]) -> Path:
        if broker is not None:
            d = cluster_dir / broker
            if not d.is_dir():
                raise InvalidArgumentError(f"no broker directory {d}")
            return d
        brokers = [d for d in sorted(cluster_dir.iterdir()) if d.is_dir()]
        with_topic = [d for d in brokers if (d / topic).is_dir()]
        if hints:
            hinted = [d for d in with_topic if d.name in hints]
            if len(hinted) == 1:
                return hinted[0]
        if len(with_topic) == 1:
            return with_topic[0]
        if not with_topic:
            raise InvalidArgumentError(f"no broker under {cluster_dir} has tiered data for topic {topic!r}")
        names = ", ".join(d.name for d in with_topic)
        raise InvalidArgumentError(f"several brokers under {cluster_dir} hold topic {topic!r} ({names}); "
                                   "pass --broker-name")

    def queue_dir(self, queue_id: int) -> Path:
        return self.broker_dir / self.topic / str(queue_id) / "COMMIT_LOG"

    def verify(self, item: dict, key: str, unique: bool, begin: int, end: int):
        """(record or None, reason): reason is '' when the item's record really matches."""
        qid = item["queueId"]
        log = self._logs.get(qid)
        if log is None:
            log = self._logs[qid] = FlatCommitLog(self.queue_dir(qid))
        if not log.segments:
            return None, f"no tiered commit log for queue {qid} ({self.queue_dir(qid)})"
        if item["size"] <= 0:
            return None, f"index item size {item['size']} is not a record size"
        buf = log.read(item["offset"], item["size"])
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
