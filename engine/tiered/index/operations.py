"""What the CLI asks of tiered index files besides a key query: inspect files (header, a slot walk, statistics,
the structural check) and compact one file into a new one (compact-index). Both only read their inputs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional

from engine.errors import InvalidArgumentError
from engine.findings import ERROR, Finding
from engine.progress import Progress, no_progress
from engine.tiered.index.fetcher import TierIndex, tier_index_of
from engine.tiered.index.file import IndexStoreFile, open_tiered
from engine.tiered.index.flatfile import (INDEX_GEOMETRY, INDEX_SEGMENT, index_segment_findings,
                                          orphan_index_files)
from engine.tiered.index.format import COMPACT_INDEX_ITEM_SIZE, HEADER_SIZE, MAX_QUERY_COUNT, TieredIndexError
from engine.tiered.index.inspection import SlotWalk, walk
from engine.tiered.index.table import TableFile


@dataclass
class FileInspection:
    """What inspect-index found in one tiered file; walk/stats/problems only when asked for."""

    name: str
    header: dict                          # {"file": name} + IndexStoreFile.header()
    layout: str
    index_item_count: int
    begin_timestamp: int
    walk: Optional[SlotWalk] = None
    stats: Optional[dict] = None
    problems: Optional[list[str]] = None  # the structural check's problems (empty = consistent)

    def findings(self) -> list[Finding]:
        """The structural check's problems as located findings (engine.findings), each of kind INDEX_FILE."""
        severity, will = BROKER_WILL[INDEX_FILE]
        return [Finding(INDEX_FILE, severity, self.name, None, p, will) for p in self.problems or []]


def inspect_files(paths: Iterable[Path], *, hash_slot_num: Optional[int] = None, index_num: Optional[int] = None,
                  walk_slot: Optional[int] = None, walk_key: Optional[str] = None, limit: int = MAX_QUERY_COUNT,
                  stats: bool = False, verify: bool = False) -> Iterator[FileInspection]:
    """One FileInspection per file, in order, each as soon as its file is done (files are opened read-only, one
    at a time); geometry: the given values, else inferred per file. --stats and --verify of several files run a
    file per job on worker processes when they are big enough or --workers was given (the same answers, in
    order; a file that cannot be read fails the command where it comes, as here)."""
    from engine import workers

    jobs = [(Path(p), hash_slot_num, index_num, walk_slot, walk_key, limit, stats, verify) for p in paths]
    size = sum(p.stat().st_size if p.is_file() else 0 for p, *_ in jobs)
    if (stats or verify) and len(jobs) > 1 and workers.fan_out(size, PARALLEL_INDEX_BYTES):
        yield from workers.ordered_map(_inspect_path, jobs)
        return
    for job in jobs:
        yield _inspect_path(*job)


def _inspect_path(p: Path, hash_slot_num, index_num, walk_slot, walk_key, limit, stats, verify) -> FileInspection:
    """inspect_files of one file (in a worker, or here)."""
    with open_tiered(p, hash_slot_num, index_num) as f:
        rep = FileInspection(p.name, {"file": p.name, **f.header()}, f.layout, f.index_item_count,
                             f.begin_timestamp)
        if walk_slot is not None or walk_key is not None:
            rep.walk = walk(f, walk_slot, walk_key, limit)
        if stats:
            rep.stats = f.stats()
        if verify:
            rep.problems = f.verify()
    return rep


def compact_file(src: Path, out: Path, *, force: bool = False, mapped: bool = False,
                 hash_slot_num: Optional[int] = None, index_num: Optional[int] = None,
                 broker_conf: Optional[Path] = None, new_geometry: bool = False) -> dict:
    """compact-index: the compacted form of unsealed file ``src`` (format §9.4) written to a temporary name next
    to ``out`` and renamed onto it; ``src`` is only read. ``mapped`` writes the whole local compacting/ file
    instead of the uploaded bytes. The file is read with the given geometry (else its own); the compacted form
    keeps the file's slot count, which must be the one broker.conf configures and the tiered index files beside it
    (its directory's) have, unless ``new_geometry`` (engine.tiered.index.table.writer_tiered_geometry). Returns
    the summary the command shows (its --json shape)."""
    src, out = Path(src), Path(out)
    if out.exists() and not force:
        raise InvalidArgumentError(f"{out} exists; pass --force to replace it")
    if out.exists() and src.exists() and os.path.samefile(out, src):
        raise InvalidArgumentError(f"--out {out} is the input file")
    if not out.parent.is_dir():
        raise InvalidArgumentError(f"directory {out.parent} does not exist")
    with open_tiered(src, hash_slot_num, index_num) as f:
        if f.layout != "unsealed":
            raise TieredIndexError(f"{src} is already compacted (END magic, {f.hash_slot_num} slot ranges); "
                                   "only an unsealed or sealed file can be compacted")
        _check_compact_geometry(src, broker_conf, hash_slot_num, index_num, new_geometry)
        before = f.file_size
        tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
        try:
            f.compact(tmp, form="mapped" if mapped else "uploaded")
            os.replace(tmp, out)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        after = out.stat().st_size
        summary = {
            "file": str(src), "out": str(out), "form": "mapped" if mapped else "uploaded",
            "hashSlotNum": f.hash_slot_num, "indexNum": f.index_num, "hashSlotCount": f.hash_slot_count,
            "indexItemCount": f.index_item_count,
            "itemsWritten": max(0, after - f.items_base) // COMPACT_INDEX_ITEM_SIZE if after else 0,
            "beginTimestamp": f.begin_timestamp, "endTimestamp": f.end_timestamp,
            "bytesBefore": before, "bytesAfter": after,
        }
    if mapped:
        # The mapped form is sized by indexItemCount; count what the slot ranges really hold.
        with IndexStoreFile.open(out, summary["hashSlotNum"]) as g:
            summary["itemsWritten"] = g.stats()["chainedItems"]
    return summary


def _check_compact_geometry(src: Path, broker_conf: Optional[Path], hash_slot_num: Optional[int],
                            index_num: Optional[int], new_geometry: bool) -> None:
    """The writers' geometry rule over the file and the tiered index files of its directory (GeometryError when
    the compacted form would have another geometry than theirs or broker.conf's)."""
    from engine.tiered.flat.config import load_tiered_config
    from engine.tiered.index.table import local_index_files, writer_tiered_geometry

    config = load_tiered_config(broker_conf, tieredStoreIndexFileMaxHashSlotNum=hash_slot_num,
                                tieredStoreIndexFileMaxIndexNum=index_num)
    files = [(ts, p) for ts, p in local_index_files(src.parent) if not os.path.samefile(p, src)] + [(-1, src)]
    writer_tiered_geometry(config, [], files, new_geometry, "tiered compact-index")


# ------------------------------------------------------------------ the tier's index: local files and INDEX segments


def inspect_tier(ti: TierIndex, *, walk_slot: Optional[int] = None, walk_key: Optional[str] = None,
                 limit: int = MAX_QUERY_COUNT, stats: bool = False, verify: bool = False) -> Iterator[FileInspection]:
    """One FileInspection per file of the service's table, oldest first: local files as the broker loads them
    (UNSEALED, named by their timestamp), uploaded segments read from their files with the configured slot count
    and the metadata's timestamp; with `verify`, a segment's problems include what its metadata entry and file
    disagree on (engine.tiered.index.flatfile)."""
    g = ti.service.geometry
    seg_findings: dict[str, list[str]] = {}
    if verify:
        problems, _notes = index_segment_findings(ti.store.layout, ti.index_segments, g.hash_slot_num)
        for _kind, rel, text in problems:
            seg_findings.setdefault(rel, []).append(text)
    args = (seg_findings, walk_slot, walk_key, limit, stats, verify)
    if not (stats or verify):   # headers and walks: a few reads a file
        for f in ti.service.files:
            yield _inspect_entry(ti, f, *args)
        return
    yield from _per_file(ti, "inspect", args)


#: By default the tiered index's checks (`tiered inspect-index --verify` and `--stats`, the index part of `tiered
#: verify`) run a file per job on worker processes (engine.workers) when the table's files hold this many bytes;
#: with --workers N whatever their size.
PARALLEL_INDEX_BYTES = 256 << 20



def _per_file(ti: TierIndex, what: str, args: tuple, progress: Progress = no_progress) -> Iterator:
    """_file_job(what) for each file of the service's table, in the table's order: on worker processes when the
    files are big enough or --workers was given (and the workers can be forked: they inherit `ti`), else here."""
    from engine import workers

    files = ti.service.files
    size = sum(_file_bytes(f) for f in files)
    if len(files) < 2 or not workers.fan_out(size, PARALLEL_INDEX_BYTES) or not workers.can_fork():
        for i in range(len(files)):
            yield _run_file(ti, what, i, args)
            progress("index files", i + 1, len(files))
        return
    with workers.shared(ti) as token:   # the workers find ti as this process has it (its metadata, table, geometry)
        yield from workers.ordered_map(_file_job, [(token, what, i, args) for i in range(len(files))],
                                       lambda k: progress("index files", k, len(files)))


def _file_bytes(f: TableFile) -> int:
    if f.segment is not None:
        return f.segment.segment.file_len or 0
    try:
        return os.stat(f.local).st_size
    except OSError:
        return 0


def _file_job(token: str, what: str, i: int, args: tuple):
    """In a worker: one file's check on the TierIndex inherited from the parent."""
    from engine.workers import inherited

    return _run_file(inherited(token), what, i, args)


def _run_file(ti: TierIndex, what: str, i: int, args: tuple):
    f = ti.service.files[i]
    if what == "inspect":
        return _inspect_entry(ti, f, *args)
    seg_findings, ids = args   # "verify": the structural check and the items against the records
    rep = _inspect_entry(ti, f, seg_findings, None, None, MAX_QUERY_COUNT, False, True)
    return rep.problems or [], _file_item_findings(ti, ids, f)


def _inspect_entry(ti: TierIndex, f: TableFile, seg_findings, walk_slot, walk_key, limit, stats, verify) -> FileInspection:
    g = ti.service.geometry
    extra = {"timestamp": f.timestamp, "status": f.status}
    if f.segment is not None:
        seg = f.segment.segment
        rel = ti.store.layout.rel(seg.path)
        extra.update({"baseOffset": seg.base, "metadataSize": seg.size, "fileBytes": seg.file_len})
        problems = list(seg_findings.get(rel, []))
        if not seg.file_len or seg.file_len < HEADER_SIZE:
            rep = FileInspection(seg.path.name, {"file": seg.path.name, "layout": "compacted", **extra,
                                                 "fileSize": seg.file_len}, "compacted", 0, f.timestamp)
            empty_upload = seg.size == 0   # an index file without items uploads 0 bytes (format §9.4)
            rep.problems = (problems or ([] if empty_upload else ["no compacted index in the file"])) if verify \
                else None
            return rep
        handle = IndexStoreFile.open(seg.path, g.hash_slot_num, layout="compacted", begin_timestamp=f.timestamp,
                                     force_geometry=True)
    else:
        problems = []
        handle = ti.service.local_file(f)   # as the service reads it: unsealed, or compacted (tiered reindex --out)
    with handle as h:
        header = {"file": os.path.basename(h.path), **h.header(), **extra}
        rep = FileInspection(header["file"], header, h.layout, h.index_item_count, h.begin_timestamp)
        if walk_slot is not None or walk_key is not None:
            rep.walk = walk(h, walk_slot, walk_key, limit)
        if stats:
            rep.stats = h.stats()
        if verify:
            rep.problems = problems + h.verify()
    return rep


# What kind of problem or note each of verify_index's findings is (stable names, as engine.tiered.flat.verify's;
# INDEX_SEGMENT and INDEX_GEOMETRY come from engine.tiered.index.flatfile).
INDEX_FILE = "tiered-index-file"                # a tiered index file's structure (the inspect-index --verify check)
INDEX_LOCAL_UNLOADABLE = "tiered-index-local-unloadable"  # a local file that is no index file of the geometry
INDEX_ITEM = "tiered-index-item"                # items against the records they point at
INDEX_ORPHAN = "tiered-index-orphan"            # note: a file in the INDEX directory the metadata does not list

#: kind -> (severity, what the broker does at its next start), for the tiered index's problems (IndexStoreService,
#: IndexStoreFile at 8fc57f1468).
BROKER_WILL = {
    INDEX_GEOMETRY: (ERROR, "reads the uploaded index files with tieredStoreIndexFileMaxHashSlotNum as the slot "
                     "count (format pitfall 40): key queries look in the wrong slots and miss the messages"),
    INDEX_SEGMENT: (ERROR, "reads the uploaded index file as its metadata entry and "
                    "tieredStoreIndexFileMaxHashSlotNum say: key queries that reach it return nothing or items "
                    "of other keys"),
    INDEX_FILE: (ERROR, "answers key queries from a damaged index file: messages are missed or wrong ones "
                 "returned"),
    INDEX_LOCAL_UNLOADABLE: (ERROR, "maps the file at the size tieredStoreIndexFile* give "
                             "(IndexStoreFile(config, timestamp): a short file grows) and reads its bytes as an "
                             "index file: key queries over it return nothing or wrong items, and while it is "
                             "the newest file new keys are put into it"),
    INDEX_ITEM: (ERROR, "returns these items to key queries, and the reads of their records fail or return "
                 "another message"),
}
#: kind -> what the broker does, for the tiered index's notes.
NOTE_WILL = {
    INDEX_SEGMENT: "reads the segment as its metadata entry says",
    INDEX_ITEM: "skips these items in key queries, or fails their reads",
    INDEX_ORPHAN: "never reads files its metadata does not list",
}


def verify_index(ti: TierIndex, progress: Progress = no_progress) -> tuple[list[tuple[str, str, str]],
                                                                         list[tuple[str, str, str]]]:
    """(problems, notes), each (kind, file, text), of the tier's index: the INDEX flat file against its metadata and
    the configured slot count, every file's structure (the inspect-index --verify check), files in the INDEX
    directory the metadata does not list, local files that are no index file of the configured geometry."""
    layout = ti.store.layout
    seg_problems, seg_notes = index_segment_findings(layout, ti.index_segments, ti.service.geometry.hash_slot_num)
    problems = list(seg_problems)
    notes = [(INDEX_SEGMENT, rel, text) for rel, text in seg_notes]
    said = {(rel, text) for _k, rel, text in seg_problems}
    misread = {rel for k, rel, _t in seg_problems if k == INDEX_GEOMETRY}   # its structure is read wrongly too
    seg_findings: dict[str, list[str]] = {}
    for _kind, rel, text in seg_problems:
        seg_findings.setdefault(rel, []).append(text)
    item_problems: list[tuple[str, str]] = []
    item_notes: list[tuple[str, str]] = []
    checked = _per_file(ti, "verify", (seg_findings, _topic_ids(ti)), progress)
    for f, (structure, (ip, inotes)) in zip(ti.service.files, checked):
        rel = layout.rel(f.segment.segment.path if f.segment is not None else f.local)
        if rel not in misread:   # a segment's repeats seg_problems
            problems += [(INDEX_FILE, rel, text) for text in structure if (rel, text) not in said]
        item_problems += ip
        item_notes += inotes
    problems += [(INDEX_LOCAL_UNLOADABLE, str(path), text) for path, text in ti.service.problems]
    problems += [(INDEX_ITEM, rel, text) for rel, text in item_problems]
    notes += [(INDEX_ITEM, rel, text) for rel, text in item_notes]
    notes += [(INDEX_ORPHAN, rel, text) for rel, text in orphan_index_files(layout, ti.index_segments)]
    return problems, notes


def verify_tier(store, topic: Optional[str] = None, local_dir: Optional[Path] = None,
                progress: Progress = no_progress):
    """`tiered verify`: the flat store's check (engine.tiered.flat.verify) and, unless one topic is asked for, the
    tiered index's (verify_index) in the same report; every finding carries its kind."""
    from engine.tiered.flat.verify import note, problem, verify

    rep = verify(store, topic, progress)
    if topic is None:
        ti = tier_index_of(store, local_dir)
        try:
            problems, notes = verify_index(ti, progress)
        finally:
            ti.service.close()
        rep.problems += [problem(f, None, t, k, BROKER_WILL) for k, f, t in problems]
        rep.notes += [note(f, None, t, k, NOTE_WILL) for k, f, t in notes]
        rep.segments += len(ti.index_segments)
    return rep


# ------------------------------------------------------------------ items against the records they point at

ITEM_CHUNK = 1 << 16          # index items checked at once (memory: ITEM_CHUNK x (28 + RECORD_HEAD) bytes)
RECORD_HEAD = 76              # bytes of a record read per item: TOTALSIZE .. STORETIMESTAMP with an IPv6 born host
MAX_EXAMPLES = 10             # problem lines per file; the rest are counted


def item_findings(ti: TierIndex) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(problems, notes) of every file's items against the tier: an item of a queue the broker holds must point at
    a whole record's start in that queue's tiered commit log, of its size, stored in its second (timeDiff, format
    §9.6). Items whose records retention removed, or of topics/queues the broker no longer holds, are notes. The
    items are read ITEM_CHUNK at a time and the records' heads gathered from read-only mappings."""
    ids = _topic_ids(ti)
    problems: list[tuple[str, str]] = []
    notes: list[tuple[str, str]] = []
    for f in ti.service.files:
        p, n = _file_item_findings(ti, ids, f)
        problems += p
        notes += n
    return problems, notes


def _topic_ids(ti: TierIndex) -> dict:
    return {m.topic_id: t for t, m in ti.store.metadata.topics.items()} if ti.store.metadata is not None else {}


def _file_item_findings(ti: TierIndex, ids: dict, f: TableFile) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """item_findings of one file of the table."""
    rel = ti.store.layout.rel(f.segment.segment.path if f.segment is not None else f.local)
    problems: list[tuple[str, str]] = []
    notes: list[tuple[str, str]] = []
    found: list[str] = []
    counts = {"gone": 0, "unheld": 0, "checked": 0}
    for items in _item_chunks(ti, f):
        _check_items(ti, ids, items, f.timestamp, found, counts)
    problems += [(rel, p) for p in found[:MAX_EXAMPLES]]
    if len(found) > MAX_EXAMPLES:
        problems.append((rel, f"{len(found) - MAX_EXAMPLES} more item(s) like these"))
    if counts["gone"]:
        notes.append((rel, f"{counts['gone']} item(s) point below their queue's tiered commit log (records "
                           "retention removed): queries still return them and the reads fail"))
    if counts["unheld"]:
        notes.append((rel, f"{counts['unheld']} item(s) of topics or queues the broker holds no flat file for "
                           "(the fetcher skips them)"))
    return problems, notes


def _item_chunks(ti: TierIndex, f: TableFile):
    """A file's items as COMPACT_ITEM_DTYPE arrays: an uploaded segment's item area up to its committed size, a
    local file's items 1..indexItemCount."""
    import numpy as np

    from engine.fsutil import pread_fully
    from engine.tiered.index.format import COMPACT_ITEM_DTYPE, HASH_SLOT_SIZE, ITEM_DTYPE

    g = ti.service.geometry
    if f.segment is not None:
        seg = f.segment.segment
        if not seg.file_len:
            return
        base = HEADER_SIZE + HASH_SLOT_SIZE * g.hash_slot_num
        count = max(0, min(seg.size, seg.file_len) - base) // COMPACT_INDEX_ITEM_SIZE
        path, dtype, first = seg.path, COMPACT_ITEM_DTYPE, 0
    else:
        with ti.service.local_file(f) as h:
            base, count, path, dtype, first = h.items_base, h.index_item_count, f.local, ITEM_DTYPE, 1
    fd = os.open(path, os.O_RDONLY)
    try:
        for start in range(0, count, ITEM_CHUNK):
            n = min(ITEM_CHUNK, count - start)
            raw = pread_fully(fd, n * dtype.itemsize, base + (first + start) * dtype.itemsize)
            yield np.frombuffer(raw[:len(raw) // dtype.itemsize * dtype.itemsize], dtype=dtype)
    finally:
        os.close(fd)


def _check_items(ti: TierIndex, ids: dict, items, file_ts: int, found: list[str], counts: dict) -> None:
    import numpy as np

    key = items["topicId"].astype(np.int64) << 32 | (items["queueId"].astype(np.int64) & 0xFFFFFFFF)
    for k in np.unique(key):
        sel = items[key == k]
        topic, qid = ids.get(int(sel["topicId"][0])), int(sel["queueId"][0])
        if topic is None or not ti.store.has_queue(topic, qid):
            counts["unheld"] += len(sel)
            continue
        cl = ti.store.queue(topic, qid).commit_log
        offs, sizes = sel["offset"].astype(np.int64), sel["size"].astype(np.int64)
        gone = offs < cl.min_offset
        counts["gone"] += int(gone.sum())
        past = ~gone & (offs + sizes > cl.commit_offset)
        for o, s in zip(offs[past][:MAX_EXAMPLES].tolist(), sizes[past][:MAX_EXAMPLES].tolist()):
            found.append(f"{topic}/{qid}: item at tiered offset {o} ({s} bytes) points past the committed "
                         f"tiered commit log ({cl.commit_offset})")
        for seg in cl.segments:
            inside = ~gone & ~past & (offs >= seg.base) & (offs < seg.end)
            if inside.any():
                _check_heads(seg, sel[inside], offs[inside], file_ts, topic, qid, found)


def _check_heads(seg, items, offs, file_ts: int, topic: str, qid: int, found: list[str]) -> None:
    """The record heads at the items' offsets in one segment: TOTALSIZE, magic, and the store time's second."""
    import numpy as np

    from engine.broker.commitlog.message import BORNHOST_V6_FLAG, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2

    length = min(seg.size, seg.file_len or 0)
    pos = offs - seg.base
    whole = pos + RECORD_HEAD <= length
    for o in offs[~whole][:MAX_EXAMPLES].tolist():
        found.append(f"{topic}/{qid}: item at tiered offset {o}: no record head there (segment {seg.path.name} "
                     f"holds {length} bytes)")
    if not whole.any():
        return
    pos, items, offs = pos[whole], items[whole], offs[whole]
    mm = np.memmap(seg.path, dtype=np.uint8, mode="r", shape=(length,))
    heads = np.asarray(mm[pos[:, None] + np.arange(RECORD_HEAD)])
    del mm
    be32 = heads[:, :40].copy().view(">i4")
    total, magic, sysflag = be32[:, 0].astype(np.int64), be32[:, 1], be32[:, 9]
    ts_at = np.where(sysflag & BORNHOST_V6_FLAG, 68, 56)
    ts = np.array([int.from_bytes(h[a:a + 8].tobytes(), "big", signed=True) for h, a in zip(heads, ts_at)],
                  dtype=np.int64)
    diff = ts - file_ts
    second = np.where(diff >= 0, diff // 1000, -((-diff) // 1000))
    second = (second + 2**31) % 2**32 - 2**31                       # (int) of a long, as the put computes it
    bad_magic = ~np.isin(magic, (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2))
    bad_size = ~bad_magic & (total != items["size"])
    bad_time = ~bad_magic & ~bad_size & (second != items["timeDiff"])
    for name, mask in (("no record starts there", bad_magic), ("the record there has another size", bad_size),
                       ("its timeDiff is not the record's store second", bad_time)):
        for o in offs[mask][:MAX_EXAMPLES].tolist():
            found.append(f"{topic}/{qid}: item at tiered offset {o}: {name}")
