"""`inspect-index` on broker index files: headers, one slot's chain, streamed slot statistics, verification
against the commit log (engine.broker.index.verify), one file at a time so output streams and memory stays bounded.

A file that cannot be opened with the geometry, or whose header cannot be the broker's, is reported (damage)
and the others are still inspected; when no file fits the geometry, the geometry is wrong: an error.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.index.geometry import resolve_index_geometry
from engine.broker.index.file import IndexFile, index_file_size, open_failure
from engine.broker.index.stats import index_file_stats
from engine.broker.layout import list_index_files
from engine.broker.config.lock import lock_held_elsewhere
from engine.errors import GeometryError, InvalidArgumentError
from engine.java.lang import key_index_hash
from engine.progress import Progress


@dataclass
class InspectRequest:
    walk_slot: Optional[int] = None
    walk_key: Optional[str] = None   # a "topic#key" string
    limit: int = 10_000
    stats: bool = False
    verify: bool = False


@dataclass
class IndexFileReport:
    path: Path
    header: Optional[dict] = None    # None when the file could not be opened
    damage: Optional[str] = None
    walk: Optional[dict] = None
    stats: Optional[dict] = None
    verify: Optional[object] = None  # engine.broker.index.verify.VerifyReport


def header_row(f: IndexFile, damage: Optional[str]) -> dict:
    d = {"file": f.path.name}
    d.update(f.header.as_dict())
    d["indexCount"] = f.on_disk_index_count
    d["fill"] = round(f.item_count / (f.index_num - 1), 6)
    d["damage"] = damage
    return d


def walk_slot(f: IndexFile, slot: Optional[int], key: Optional[str], limit: int) -> dict:
    kh = key_index_hash(key) if key is not None else None
    if kh is not None:
        slot = kh % f.hash_slot_num
    items, reason = f.walk_chain(slot, limit)
    return {"file": f.path.name, "slot": slot, "items": items, "stop": reason, "key": key, "keyHash": kh}


def inspect_index_files(cfg: BrokerConfig, file: Optional[Path], with_store: bool, req: InspectRequest,
                  progress: Optional[Progress] = None) -> Iterator[IndexFileReport]:
    """Reports for FILE, or for every index file of the store (with_store). --verify needs the store."""
    from engine.broker.store import MessageStore

    if req.walk_slot is not None and req.walk_key is not None:
        raise InvalidArgumentError("give --walk-slot or --walk-key, not both")
    if req.verify and not with_store:
        raise InvalidArgumentError("--verify reads the commit log: pass --store (or --broker-conf) too")
    st = MessageStore(cfg) if with_store else None
    ahead = None  # the files' --stats worked out ahead on worker processes
    jobs = None   # --verify's workers, shared by the files (engine.broker.index.verify.SegmentJobs)
    held: deque = deque()  # files opened, their report begun (--verify: their segments on the workers), not yet out
    try:
        paths = [file] if file is not None else list_index_files(st.index_dir)
        if not paths:
            raise InvalidArgumentError(f"no index files in {st.index_dir}")
        cfg = resolve_index_geometry(cfg, paths)  # what broker.conf and the flags leave open, from the files
        if file is None:
            _check_geometry(paths, cfg)
        previous = None
        ahead = _stats_on_workers(paths, cfg, progress) if req.stats else None
        jobs = _verify_jobs(paths, st, req)
        for i, p in enumerate(paths):
            pre = next(ahead) if ahead is not None else None
            try:
                f = IndexFile.open(p, cfg.maxHashSlotNum, cfg.maxIndexNum)
            except (GeometryError, OSError) as e:
                if file is not None:
                    raise
                while held:
                    yield _finish(*held.popleft())
                yield IndexFileReport(p, damage=open_failure(p, e))
                continue
            newest = i == len(paths) - 1
            live = None if st is None else (lambda: lock_held_elsewhere(st.root))
            try:
                held.append((f, *_report(f, f.header_damage(newest, previous, live), req, st, progress, pre, jobs)))
            except BaseException:
                _close_quietly(f)
                raise
            previous = f.header
            # With workers, one file is held while the next one's structure is checked here: the workers go on
            # with its segments meanwhile.
            while len(held) > (1 if jobs is not None else 0):
                yield _finish(*held.popleft())
        while held:
            yield _finish(*held.popleft())
    finally:
        for f, *_ in held:
            _close_quietly(f)
        if jobs is not None:
            jobs.close()
        if ahead is not None:
            ahead.close()
        if st is not None:
            st.close()


def _verify_jobs(paths: list[Path], st, req: InspectRequest):
    """--verify's worker processes (a segment per job, shared by the files) when the log is long or --workers was
    given, else None (each file is walked in order here)."""
    from engine import workers
    from engine.broker.index.verify import PARALLEL_BYTES, SegmentJobs

    if not req.verify or st is None or not workers.can_fork():
        return None
    cl = st.commitlog
    if not cl.segments or not workers.fan_out(cl.max_file_offset() - cl.min_offset, PARALLEL_BYTES):
        return None
    return SegmentJobs(cl)


def _close_quietly(f: IndexFile) -> None:
    """Close a file on the way out of an error (a view of its mapping the error's traceback still holds must not
    turn the error into another one: the mapping then goes with the view)."""
    try:
        f.close()
    except BufferError:
        pass


def _finish(f: IndexFile, rep: "IndexFileReport", verified) -> "IndexFileReport":
    """The report of a held file, its verification waited for (verified: the function that waits for it, or
    None); the file is closed."""
    with f:
        if verified is not None:
            rep.verify = verified()
        return rep


#: By default --stats of index files this big in all runs on worker processes (engine.workers), a file each.
PARALLEL_STATS_BYTES = 256 << 20


def _stats_on_workers(paths: list[Path], cfg: BrokerConfig, progress: Optional[Progress]):
    """An iterator of each file's --stats in order, worked out by worker processes, or None (one worker, one file,
    or little to read: the stats are then worked out as each file is reported)."""
    from engine import workers

    size = sum(p.stat().st_size for p in paths if p.exists())
    if len(paths) < 2 or not workers.fan_out(size, PARALLEL_STATS_BYTES):
        return None
    jobs = [(str(p), cfg.maxHashSlotNum, cfg.maxIndexNum) for p in paths]
    tick = None if progress is None else (lambda done: progress("stats", done, len(jobs)))
    return workers.ordered_map(_file_stats, jobs, tick)


def _file_stats(path: str, slots: int, items: int) -> Optional[dict]:
    """In a worker: index_file_stats of one file, None when it does not open (the parent reports why)."""
    try:
        f = IndexFile.open(Path(path), slots, items)
    except (GeometryError, OSError):
        return None
    with f:
        return index_file_stats(f)


def _check_geometry(paths: list[Path], cfg: BrokerConfig) -> None:
    """When no index file of the store has the geometry's size, the geometry is wrong, not the files."""
    size = index_file_size(cfg.maxHashSlotNum, cfg.maxIndexNum)
    for p in paths:
        try:
            if p.stat().st_size == size:
                return
        except OSError:
            pass
    IndexFile.open(paths[0], cfg.maxHashSlotNum, cfg.maxIndexNum).close()  # raises its GeometryError


def _report(f: IndexFile, damage: Optional[str], req: InspectRequest, st, progress,
            stats: Optional[dict] = None, jobs=None) -> tuple[IndexFileReport, Optional[object]]:
    """The file's report, and its --verify begun (engine.broker.index.verify.begin_verify): the function that
    waits for it and gives rep.verify (_finish), or None without --verify."""
    from engine.broker.index.verify import begin_verify

    rep = IndexFileReport(f.path, header_row(f, damage), damage)
    if req.walk_slot is not None or req.walk_key is not None:
        rep.walk = walk_slot(f, req.walk_slot, req.walk_key, req.limit)
    if req.stats:
        rep.stats = stats if stats is not None else index_file_stats(f, progress=progress)
    return rep, (begin_verify(f, st.commitlog, jobs=jobs) if req.verify else None)
