"""IndexStoreService's table of tiered index files as a restarted broker builds it, and its queryAsync
(format §9.7, §9.8).

recover(): the numeric files of `<storePathRootDir>/tiered_index_file` (legacy `0000`/`1111` under the timestamp
their header holds), each an UNSEALED IndexStoreFile read with the configured geometry, keyed by its name; then the
segments of the INDEX flat file (engine.tiered.index.flatfile), each an UPLOAD file keyed by its minTimestamp, an
uploaded file replacing a local one with the same key. (The empty file recover creates when the table is empty
answers nothing and is not made here: everything is read-only.)

queryAsync(topic, key, maxCount, begin, end): nothing when begin > end; the files whose key lies in [begin, end]
(both included), newest first, each asked the same question; their items merged into a map keyed
"<queueId>-<offset>" while it holds fewer than maxCount (a later put of a held key replaces its item), cut to
maxCount. Java asks the files in parallel, so when more than maxCount distinct items come back which of them fill
the places depends on thread timing; here the files answer newest first, one of the orders Java can produce. A file
whose query fails (a segment read outside what is committed) adds nothing, as Java logs it and answers with the rest.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from engine.broker.config.brokerconf import FROM_DEFAULT, FROM_FILES
from engine.errors import GeometryError, InvalidArgumentError
from engine.java.lang import INT_MAX, LONG_MAX, java_string_hash, tiered_hash
from engine.tiered.flat.segments import FlatAppendFile, TieredReadError
from engine.tiered.index.file import IndexStoreFile
from engine.tiered.index.flatfile import IndexSegment, index_flat_file, slot_count_of
from engine.tiered.index.format import (DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM, HEADER_SIZE, UNSEALED, UPLOAD,
                                        TieredIndexError, jstr)
from engine.tiered.index.queries import query_compacted

_NUMERIC = re.compile(r"^[0-9]+$")
LEGACY_NAMES = ("0000", "1111")   # converted at start-up to the begin timestamp at header offset 4
SLOTS_KEY = "tieredStoreIndexFileMaxHashSlotNum"
ITEMS_KEY = "tieredStoreIndexFileMaxIndexNum"


def local_index_files(directory) -> list[tuple[int, Path]]:
    """(timestamp, path) of the local tiered index files the service loads, oldest first: purely numeric names
    (StringUtils.isNumeric; directories such as compacting/ skipped), a legacy name under its header's begin
    timestamp (skipped when that is <= 0), a name too large for a long skipped; of two names with one value the
    later by name wins. A missing directory holds no file."""
    d = Path(directory)
    if not d.is_dir():
        return []
    table: dict[int, Path] = {}
    for p in sorted(d.iterdir(), key=lambda p: p.name):
        if not _NUMERIC.match(p.name) or not p.is_file():
            continue
        ts = _legacy_timestamp(p) if p.name in LEGACY_NAMES else int(p.name)
        if ts is None or ts > LONG_MAX:
            continue
        table[ts] = p
    return sorted(table.items())


def _legacy_timestamp(p: Path) -> Optional[int]:
    try:
        with open(p, "rb") as fh:
            raw = fh.read(12)
    except OSError:
        return None
    if len(raw) < 12:
        return None
    ts = int.from_bytes(raw[4:12], "big", signed=True)
    return ts if ts > 0 else None


# ------------------------------------------------------------------ geometry


@dataclass
class Geometry:
    """The tiered index geometry the service reads with (format pitfall 40: uploaded files are read with the
    configured slot count): hash_slot_num, index_num (None: each local file's from its size), and where they
    came from ("configured", "inferred" from the files, or RocketMQ's "default"); `sources`: where each value
    came from, in the words of the broker index's (engine.broker.config.brokerconf.BrokerConfig.sources:
    "option", "broker.conf", "files", "default"), keyed hashSlots and maxIndex."""

    hash_slot_num: int
    index_num: Optional[int]
    source: str
    sources: dict = field(default_factory=dict, compare=False)

    @property
    def reported_index_num(self) -> int:
        return self.index_num if self.index_num is not None else DEFAULT_INDEX_NUM


def resolve_geometry(config, segments: list[IndexSegment], local: list[tuple[int, Path]]) -> Geometry:
    """The options' tieredStoreIndexFileMaxHashSlotNum/MaxIndexNum, else broker.conf's (RocketMQ's defaults when
    broker.conf leaves them out: that is what the broker reads with); without either, the slot count every file was
    written with (uploaded: where slot 0's items start; local: the file's layout), else RocketMQ's defaults. Files
    that disagree are an error: the broker reads them all with one configuration."""
    slots_given, items_given = config.is_given(SLOTS_KEY), config.is_given(ITEMS_KEY)
    if slots_given or config.broker_conf is not None:   # a broker.conf without the key: RocketMQ's default rules
        items = config.tieredStoreIndexFileMaxIndexNum if items_given or not slots_given else None
        items_from = config.source(ITEMS_KEY) if items is not None else FROM_FILES  # None: each file's size
        return Geometry(config.tieredStoreIndexFileMaxHashSlotNum, items, "configured",
                        _sources(config.source(SLOTS_KEY), items_from))
    seen = _segment_slot_counts(segments)
    for _ts, p in local:
        try:
            with IndexStoreFile.open(p, None, config.tieredStoreIndexFileMaxIndexNum if items_given else None) as f:
                seen.setdefault(f.hash_slot_num, p.name)
        except TieredIndexError:
            continue
    if len(seen) > 1:
        which = ", ".join(f"{n} ({name})" for n, name in sorted(seen.items()))
        raise InvalidArgumentError(f"the tiered index files were written with different slot counts: {which}; "
                                   "pass --hash-slots (tieredStoreIndexFileMaxHashSlotNum) as the broker has it")
    if seen:
        return Geometry(next(iter(seen)), config.tieredStoreIndexFileMaxIndexNum if items_given else None,
                        "inferred", _sources(FROM_FILES, config.source(ITEMS_KEY) if items_given else FROM_FILES))
    return Geometry(DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM, "default", _sources(FROM_DEFAULT, FROM_DEFAULT))


def _sources(slots: str, items: str) -> dict[str, str]:
    return {"hashSlots": slots, "maxIndex": items}


def writer_tiered_geometry(config, segments: list[IndexSegment], local: list[tuple[int, Path]],
                           new_geometry: bool = False, what: str = "rmqtool") -> Geometry:
    """THE geometry rule of the writers of tiered index files (tiered reindex, tiered compact-index), the twin of
    engine.broker.index.geometry.writer_index_geometry: they take it as the readers do (resolve_geometry: broker.conf,
    then --hash-slots/--max-index, then the files: the INDEX segments' slot counts, the local files' slot counts
    and capacities), refuse in one line when the files cannot tell it (several slot counts or capacities, a local
    file whose geometry cannot be inferred, or INDEX segments alone, which do not state the item capacity), and
    never write a geometry the existing files do not have (GeometryError naming both) unless the user asked for a
    new one explicitly (new_geometry, with both numbers configured)."""
    if new_geometry:
        if not (config.is_given(SLOTS_KEY) and config.is_given(ITEMS_KEY)):
            raise InvalidArgumentError("--new-geometry needs the new geometry: give --hash-slots and --max-index (or "
                                       f"{SLOTS_KEY} and {ITEMS_KEY} in --broker-conf)")
        return Geometry(config.tieredStoreIndexFileMaxHashSlotNum, config.tieredStoreIndexFileMaxIndexNum,
                        "configured", _sources(config.source(SLOTS_KEY), config.source(ITEMS_KEY)))
    conf = config.broker_conf is not None     # a broker.conf without the keys: RocketMQ's defaults are in force
    slots_given, items_given = conf or config.is_given(SLOTS_KEY), conf or config.is_given(ITEMS_KEY)
    want_slots = config.tieredStoreIndexFileMaxHashSlotNum if slots_given else None
    want_items = config.tieredStoreIndexFileMaxIndexNum if items_given else None
    slots, items, undecided = _files_geometry(segments, local, want_slots, want_items)
    again = (f"; drop --hash-slots/--max-index (the files tell their geometry), or write a new geometry with "
             f"`--new-geometry --hash-slots N --max-index M`")
    if slots_given and slots and want_slots not in slots:
        raise GeometryError(f"the tiered index files have {_listed(slots)} hash slots, but the configured "
                            f"{SLOTS_KEY} is {want_slots}: {what} never writes tiered index files of another "
                            f"geometry than the store's" + again)
    if items_given and items and want_items not in items:
        raise GeometryError(f"the local tiered index files hold {_listed(items)} items, but the configured "
                            f"{ITEMS_KEY} is {want_items}: {what} never writes tiered index files of another "
                            f"geometry than the store's" + again)
    if undecided and not (slots_given and items_given):
        raise GeometryError(f"cannot tell the tiered index geometry: {undecided[0]}; give --hash-slots and "
                            "--max-index (or --broker-conf)")
    for name, seen in (("hash slot counts", slots), ("item capacities", items)):
        if len(seen) > 1:
            raise GeometryError(f"the tiered index files were written with different {name}: {_listed(seen)}; "
                                f"give --hash-slots and --max-index as the broker has them")
    s = want_slots if slots_given else (next(iter(slots)) if slots else None)
    m = want_items if items_given else (next(iter(items)) if items else None)
    if s is not None and m is None and slots:
        raise GeometryError(f"the INDEX segments tell the slot count ({s}) but not the item capacity of the tiered "
                            f"index files; give --max-index ({ITEMS_KEY}) as the broker has it")
    source = "configured" if slots_given or items_given else ("inferred" if slots else "default")
    slots_from = config.source(SLOTS_KEY) if slots_given else FROM_FILES if s is not None else FROM_DEFAULT
    items_from = config.source(ITEMS_KEY) if items_given else FROM_FILES if m is not None else FROM_DEFAULT
    return Geometry(DEFAULT_HASH_SLOT_NUM if s is None else s, DEFAULT_INDEX_NUM if m is None else m, source,
                    _sources(slots_from, items_from))


def _files_geometry(segments: list[IndexSegment], local: list[tuple[int, Path]], want_slots: Optional[int],
                    want_items: Optional[int]) -> tuple[dict[int, str], dict[int, str], list[str]]:
    """({slot count: a file with it}, {item capacity: a local file with it}, [files whose geometry cannot be
    told]); a local file that cannot tell its own geometry is read with the wanted one (when both are given)."""
    slots = _segment_slot_counts(segments)
    items: dict[int, str] = {}
    undecided: list[str] = []
    for _ts, p in local:
        try:
            with IndexStoreFile.open(p, None, None) as f:
                slots.setdefault(f.hash_slot_num, p.name)
                items.setdefault(f.index_num, p.name)
        except TieredIndexError as e:
            if want_slots is None or want_items is None:
                undecided.append(str(e))   # it names the file
                continue
            try:   # its size may still fit the configured geometry (a file whose items cannot decide)
                with IndexStoreFile.open(p, want_slots, want_items):
                    pass
            except TieredIndexError:
                slots.setdefault(-1, p.name)   # fits neither: another geometry than the configured one
    return slots, items, undecided


def _segment_slot_counts(segments: list[IndexSegment]) -> dict[int, str]:
    """{slot count: the first INDEX segment written with it} (a segment of the header alone tells none)."""
    seen: dict[int, str] = {}
    for seg in segments:
        n = slot_count_of(seg) if seg.segment.size > HEADER_SIZE else None
        if n is not None:
            seen.setdefault(n, seg.segment.path.name)
    return seen


def _listed(seen: dict[int, str]) -> str:
    return ", ".join(f"{n} ({name})" if n >= 0 else f"another count ({name})" for n, name in sorted(seen.items()))


# ------------------------------------------------------------------ the table


@dataclass
class TableFile:
    """One entry of the service's table: a local file (UNSEALED) or an uploaded segment (UPLOAD)."""

    timestamp: int
    status: str
    end_timestamp: int
    hash_slot_count: int      # what the service reports: the header's (local) or the configured maxima (UPLOAD)
    index_item_count: int
    local: Optional[Path] = None
    segment: Optional[IndexSegment] = None
    problem: Optional[str] = None   # a local file the broker could not load (it is skipped)
    layout: str = "unsealed"        # of a local file: "compacted" for one `tiered reindex --out` wrote

    @property
    def name(self) -> str:
        return self.local.name if self.local is not None else self.segment.segment.path.name

    def as_dict(self) -> dict:
        d = {"timestamp": self.timestamp, "endTimestamp": self.end_timestamp, "status": self.status,
             "hashSlotCount": self.hash_slot_count, "indexItemCount": self.index_item_count}
        if self.local is not None:
            d["file"] = str(self.local)
        else:
            seg = self.segment.segment
            d.update({"file": str(seg.path), "baseOffset": seg.base, "size": seg.size, "fileBytes": seg.file_len})
        return d


@dataclass
class FileAnswer:
    """What one consulted file answered (IndexFile.queryAsync), in its own order."""

    timestamp: int
    status: str
    items: list[dict] = field(default_factory=list)
    error: Optional[str] = None

    def as_dict(self) -> dict:
        d = {"fileTimestamp": self.timestamp, "status": self.status, "items": [item_row(i) for i in self.items]}
        if self.error:
            d["error"] = self.error
        return d


@dataclass
class ServiceAnswer:
    """IndexStoreService.queryAsync: the merged items (each with its fileTimestamp) and every file's answer."""

    items: list[dict] = field(default_factory=list)
    per_file: list[FileAnswer] = field(default_factory=list)

    @property
    def distinct(self) -> int:
        """Distinct queueId-offset pairs over every file's answer: more than maxCount and which of them the
        broker returns depends on its thread timing."""
        return len({(i["queueId"], i["offset"]) for f in self.per_file for i in f.items})


def merge_items(per_file, max_count: int) -> list[dict]:
    """queryAsync's merge of the files' answers (newest file first): put into a map keyed queueId-offset while it
    holds fewer than maxCount items (a put of a held key replaces its item), the values cut to maxCount."""
    merged: dict[tuple[int, int], dict] = {}
    for items in per_file:
        for it in items:
            if len(merged) < max_count:
                merged[(it["queueId"], it["offset"])] = it
    return list(merged.values())[:max(max_count, 0)]


ITEM_ROW = ("hashCode", "topicId", "queueId", "offset", "size", "timeDiff", "itemIndex")


def item_row(it: dict) -> list[int]:
    """An index item as RocketMQ's IndexItem fields, in its constructor's order of the golden answers."""
    return [it[k] for k in ITEM_ROW]


class TieredIndexService:
    """The table of one broker's tiered index files and their queries; files are opened read-only on first use."""

    def __init__(self, files: list[TableFile], geometry: Geometry, flat: FlatAppendFile):
        self.geometry = geometry
        self._flat = flat
        self._open: dict[Path, IndexStoreFile] = {}
        # IndexStoreFile(config, timestamp) maps such a file at the configured size (a short file grows): it is
        # not skipped, its bytes are read as they are; rmqtool leaves it out of its answers and says so.
        self.problems = [(f.local, f"{f.problem} (the broker maps it at the configured size and reads its bytes "
                          "as an index file)") for f in files if f.problem]
        self.shadowed: set[int] = set()   # timestamps of local files an uploaded file replaces
        self.files = [f for f in files if not f.problem]
        # Files of neither layout: a query whose range holds one fails for it (its FileAnswer names it), since
        # what the broker would read there is unknown; never an empty answer that looks complete.
        self.broken = [f for f in files if f.problem]
        # Local files of the compacted layout (what `tiered reindex --out DIR` writes): read as uploaded ones.
        self.compacted_local = [f.local for f in self.files if f.layout == "compacted"]

    def close(self) -> None:
        for f in self._open.values():
            f.close()
        self._open.clear()
        self._flat.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def query(self, topic: str, key: str, max_count: int, begin: int, end: int) -> ServiceAnswer:
        """queryAsync, with each consulted file's own answer."""
        ans = ServiceAnswer()
        if begin > end:
            return ans
        hc = tiered_hash(java_string_hash(f"{jstr(topic)}#{jstr(key)}"))  # String.format("%s#%s", topic, key)
        for f in reversed(self.files):   # subMap(begin, true, end, true).descendingMap()
            if not begin <= f.timestamp <= end:
                continue
            fa = FileAnswer(f.timestamp, f.status)
            try:
                fa.items = self._query_file(f, topic, key, hc, max_count, begin, end)
            except (TieredReadError, TieredIndexError, OSError) as e:   # Java logs it; the other files answer
                fa.error = str(e)
            ans.per_file.append(fa)
        for f in reversed(self.broken):
            if begin <= f.timestamp <= end:
                ans.per_file.append(FileAnswer(f.timestamp, f.status, error=f"{f.local}: {f.problem}"))
        ans.items = merge_items((fa.items for fa in ans.per_file), max_count)
        return ans

    def _query_file(self, f: TableFile, topic: str, key: str, hc: int, max_count: int, begin: int,
                    end: int) -> list[dict]:
        if f.segment is not None:
            seg = f.segment.segment
            found = query_compacted(lambda pos, n: self._flat.read_segment(seg, pos, n), seg.size,
                                    self.geometry.hash_slot_num, hc, max_count, (begin, end, f.timestamp))
        else:
            found = self._local(f).query(topic, key, max_count, begin, end)
        for it in found:
            it["fileTimestamp"] = f.timestamp
        return found

    def local_file(self, f: TableFile) -> IndexStoreFile:
        """A local file opened read-only as the service reads it (close it when done)."""
        return _open_local(f.local, self.geometry, f.timestamp, f.layout)

    def _local(self, f: TableFile) -> IndexStoreFile:
        h = self._open.get(f.local)
        if h is None:
            h = self._open[f.local] = _open_local(f.local, self.geometry, f.timestamp, f.layout)
        return h


def _open_local(path: Path, g: Geometry, ts: int, layout: str = "unsealed") -> IndexStoreFile:
    slots = g.hash_slot_num if g.source != "default" else None
    if layout == "compacted":
        return IndexStoreFile.open(path, slots, None, layout="compacted", begin_timestamp=ts)
    return IndexStoreFile.open(path, slots, g.index_num, layout="unsealed", begin_timestamp=ts)


def build_table(local: list[tuple[int, Path]], segments: list[IndexSegment], geometry: Geometry) -> list[TableFile]:
    """recover(): local files (UNSEALED), then uploaded segments (UPLOAD) replacing a local file of the same
    timestamp; oldest first."""
    table: dict[int, TableFile] = {}
    for ts, p in local:
        table[ts] = _local_entry(ts, p, geometry)
    for s in segments:
        table[s.timestamp] = TableFile(s.timestamp, UPLOAD, s.end_timestamp, geometry.hash_slot_num,
                                       geometry.reported_index_num, segment=s)
    return [table[k] for k in sorted(table)]


def _local_entry(ts: int, p: Path, g: Geometry) -> TableFile:
    """A local file as `new IndexStoreFile(config, timestamp)` loads it: end timestamp from header offset 4
    (format pitfall 38), counts from the header."""
    try:
        with _open_local(p, g, ts) as f:
            h = f.header()
        return TableFile(ts, UNSEALED, h["beginTimestamp"], h["hashSlotCount"], h["indexItemCount"], local=p)
    except (TieredIndexError, OSError) as e:
        problem = str(e)
    try:  # the compacted layout: a file `tiered reindex --out DIR` (or compact-index) wrote; never empty
        if p.stat().st_size <= HEADER_SIZE:
            raise TieredIndexError(problem)
        with _open_local(p, g, ts, "compacted") as f:
            h = f.header()
        return TableFile(ts, UPLOAD, h["endTimestamp"] or 0, g.hash_slot_num, h["indexItemCount"] or 0, local=p,
                         layout="compacted")
    except (TieredIndexError, OSError):
        return TableFile(ts, UNSEALED, 0, 0, 0, local=p, problem=problem)


def open_service(local_dir: Optional[Path], segments: list[IndexSegment], config) -> TieredIndexService:
    """The service a restarted broker would have: the local files of `local_dir` and the uploaded `segments`,
    read with the configured (else inferred) geometry."""
    local = local_index_files(local_dir) if local_dir is not None else []
    geometry = resolve_geometry(config, segments, local)
    service = TieredIndexService(build_table(local, segments, geometry), geometry, index_flat_file(segments))
    service.shadowed = {ts for ts, _ in local} & {s.timestamp for s in segments}
    return service


def check_query(max_count: int, begin: int, end: int) -> None:
    """The arguments the broker takes as Java int/long. maxCount 0 asks nothing (an empty answer); a negative one
    is refused: Java's subList(0, maxCount) throws inside the merge and the query never completes."""
    if not 0 <= max_count <= INT_MAX:
        raise InvalidArgumentError(f"maxCount {max_count} is out of range 0..{INT_MAX}")
    for name, v in (("begin", begin), ("end", end)):
        if not -(2**63) <= v <= LONG_MAX:
            raise InvalidArgumentError(f"{name} {v} is not a Java long")


__all__ = ["Geometry", "TableFile", "FileAnswer", "ServiceAnswer", "TieredIndexService", "local_index_files",
           "resolve_geometry", "writer_tiered_geometry", "build_table", "open_service", "item_row", "check_query",
           "merge_items"]
