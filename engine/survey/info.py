"""`rmqtool info`: a store at a glance, read-only and fast on any size of store.

What it reads: directory listings, stat, the 40-byte header of each index file, the checkpoint, the small
manifests and markers rmqtool leaves (engine.ops.footprint.leftovers), /proc/locks (the lock is tested without being
taken: this process never opens the lock file). The one read that grows with the store is the commit log's max
offset, where the broker's recovery would end it: after an unclean stop (abort marker) the records from the
segment the checkpoint names, as the broker walks them (format §7.4; CRCs checked when checkCRCOnRecover is on:
a damaged record ends the log there, as it does for the broker); else the records of the last segment that holds
any (a pre-allocated all-zero segment after it stepped over) from the checkpoint's confirm offset (format §6).
No file is opened for writing and nothing else is scanned whole.

The answer is one document (as_dict, camelCase): mode (engine.broker.mode: the store's mode, what rmqtool cannot
read in it and which writers it allows), commitLog, consumeQueues, index, checkpoint, abort, locked,
configFiles, placeholders (engine.ops.recovery.placeholder), quarantine, backups, interruptedReindex, tiered and
timer (null when the store has none). `tiered.flatStore` is the external tiered store (tieredStoreFilePath, from
broker.conf or -T) when one is configured: its broker's queues and segment files from directory listings, and
what the metadata lists (the metadata file is parsed; no segment is read).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.broker.dledger.log import open_log
from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.config.checkpoint import Checkpoint
from engine.broker.config.lock import lock_holder
from engine.broker.index.file import HEADER, INDEX_HEADER_SIZE
from engine.broker.index.geometry import resolve_index_geometry
from engine.broker.config import epochfile
from engine.broker.layout import TIERED_INDEX_DIR, StoreLayout, list_index_files
from engine.broker.mode import StoreMode, detect_mode
from engine.errors import StoreError
from engine.ops.footprint.leftovers import Leftover, Usage, index_backups, quarantine_runs, tree_usage
from engine.ops.footprint.quarantine import QUARANTINE_DIR
from engine.ops.recovery.placeholder import list_placeholders
from engine.tiered.flat.layout import FILE_TYPE_NAMES, INDEX_TOPIC, TieredLayout, cluster_dir_name, is_dir_no_follow
from engine.tiered.flat.metadata import bak_path, load_metadata
from engine.tiered.flat.store import TierSource
from engine.timer.layout import TimerLayout

#: What an interrupted spark-reindex leaves beside index/ (engine.jobs.publish; the next run repairs it).
INTERRUPTED_PREFIXES = (".index.reindex-", ".index.old-")
#: Index-file headers read (each 40 bytes); a store with more files is summarised from its first and last ones.
MAX_HEADERS = 100_000


@dataclass
class StoreInfo:
    root: Path
    sections: dict = field(default_factory=dict)
    quarantine: list[Leftover] = field(default_factory=list)
    backups: list[Leftover] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    now_ms: int = 0

    def as_dict(self) -> dict:
        d = {"store": str(self.root), **self.sections,
             "quarantine": [q.as_dict(self.root, self.now_ms) for q in self.quarantine],
             "backups": [b.as_dict(self.root, self.now_ms) for b in self.backups],
             "problems": list(self.problems)}
        return d


def store_info(cfg: BrokerConfig, now_ms: int | None = None, tier: TierSource | None = None) -> StoreInfo:
    """Everything `rmqtool info` shows, read-only. A directory that is not a store is a NotAStoreError. `tier`:
    where the tiered store is (-T, or broker.conf's tieredStoreFilePath); shown when it gives one."""
    layout = StoreLayout.of(cfg)
    layout.require_store(allow_markers=True)
    info = StoreInfo(layout.root, now_ms=int(time.time() * 1000) if now_ms is None else now_ms)
    mode = detect_mode(cfg)
    info.sections["mode"] = mode.as_dict()
    info.problems += [f"mode: {c}" for c in mode.conflicts]
    info.problems += [f"mode: rmqtool cannot read {what}" for what in mode.unsupported_reads()]
    cp = _checkpoint(layout, info)
    info.sections["commitLog"] = _commitlog(cfg, cp, info)
    info.sections["consumeQueues"] = _consume_queues(layout, info, mode)
    info.sections["index"] = _index(cfg, layout, info)
    info.sections["checkpoint"] = cp
    info.sections["abort"] = _abort(layout)
    holder = lock_holder(layout.root)
    info.sections["locked"] = holder is not None
    info.sections["lockHolderPid"] = holder or None  # 0: held from another PID namespace (a container)
    info.sections["configFiles"] = _config_files(layout)
    info.sections["placeholders"] = _placeholders(cfg, layout, info)
    info.quarantine = quarantine_runs(layout.root)
    info.backups = index_backups(layout.root)
    info.sections["interruptedReindex"] = sorted(e.name for e in os.scandir(layout.root)
                                                 if e.name.startswith(INTERRUPTED_PREFIXES))
    info.sections["tiered"] = _tiered(layout, tier, info)
    info.sections["timer"] = _timer(layout)
    info.sections["epochFile"] = _epoch_file(mode, info.sections["commitLog"], info)
    return info


def _epoch_file(mode: StoreMode, cl: dict, info: StoreInfo) -> dict | None:
    """A controller-mode store's epoch file (engine.broker.config.epochfile): its entries as the broker loads them,
    checked against the commit log's offsets; None when the store is not in controller mode."""
    if not mode.controller or mode.epoch_file is None:
        return None
    r = epochfile.read(mode.epoch_file)
    out = r.as_dict()
    out["path"] = str(mode.epoch_file)
    probs = epochfile.check_against_log(r, cl.get("minOffset") or 0, cl.get("maxOffset") or 0) \
        if cl.get("maxOffset") is not None else []
    out["problems"] = [{"kind": p.kind, "epoch": p.epoch, "detail": p.detail} for p in probs]
    info.problems += [f"epoch file: {p.detail}" for p in probs]
    return out


def _usage_of(paths) -> Usage:
    u = Usage()
    for p in paths:
        try:
            u.add(os.lstat(p))
        except OSError:
            pass
    return u


def _commitlog(cfg: BrokerConfig, cp: dict, info: StoreInfo) -> dict:
    out = {"dirs": [str(d) for d in cfg.commitlog_dirs], "minOffset": None, "maxOffset": None, "segments": 0,
           "segmentSize": None, "firstSegment": None, "lastSegment": None, "bytes": Usage().as_dict(),
           "endReason": None}
    try:
        cl = open_log(cfg)
    except StoreError as e:
        info.problems.append(f"commit log: {e}")
        return out
    data_dir = getattr(cl, "data_dir", None)
    if data_dir is not None:  # DLedger: the entry log in dledger-<id>/data (engine.broker.dledger)
        out["dirs"] = [str(d) for d in cl.old_dirs] + [str(data_dir)]
    try:
        segs = cl.segments
        out["segments"] = len(segs)
        out["segmentSize"] = cl.file_size
        out["bytes"] = _usage_of(s.path for s in segs).as_dict()
        info.problems += [f"commit log: {p}" for p in cl.problems]
        if segs:
            out.update(firstSegment=segs[0].path.name, lastSegment=segs[-1].path.name, minOffset=cl.min_offset)
            if data_dir is not None:  # DLedger: the end of its last entry, its own offsets beside it
                out["maxOffset"] = cl.find_end(hint=cp.get("confirmPhyOffset") or None)
                out["dledger"] = _dledger(cl)
            else:
                out["maxOffset"], out["endReason"] = _log_end(cfg, cl, cp)
        else:
            out.update(minOffset=0, maxOffset=0)
    except StoreError as e:
        info.problems.append(f"commit log: {e}")
    finally:
        cl.close()
    return out


def _dledger(cl) -> dict:
    """A DLedger log's own offsets: dividedCommitlogOffset (the first DLedger file: the old file commit log lies
    below it) and the committed offset DLedger's checkpoint gives (DLedgerCommitLog.getMaxOffset once started)."""
    from engine.broker.dledger.index import IndexFiles, committed_offset, read_checkpoint

    d = cl.data_dir.parent
    cp = read_checkpoint(d)
    index = IndexFiles(d / "index")
    return {"dataDir": str(cl.data_dir), "dividedCommitlogOffset": cl.divided,
            "checkpointCommittedIndex": cp.get("committedIndex"),
            "committedOffset": committed_offset(index, cp.get("committedIndex"), index.last_index())}


def _log_end(cfg: BrokerConfig, cl, cp: dict) -> tuple[int, str]:
    """The commit log's end as the broker's recovery finds it (module doc), and why it ends there. After an
    unclean stop (abort marker) the broker walks from the segment its checkpoint names (format §7.4), so a
    damaged record there ends its log: info walks the same records. Otherwise the last segment that holds
    records is read from the checkpoint's confirm offset."""
    from engine.broker.commitlog.startup import RecoveryScan, broker_start

    hint = cp.get("confirmPhyOffset") or None
    if not StoreLayout.of(cfg).abort.exists():
        return cl.data_end(hint=hint, check_crc=cfg.checkCRCOnRecover)
    fields = ("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp")
    ck = Checkpoint(**{k: cp[k] for k in fields}) if cp.get("readable") else Checkpoint()
    start, _rule = broker_start(cl, "abnormal", ck, -1, cfg.messageIndexSafe, cfg.checkCRCOnRecover)
    scan = RecoveryScan(cl, start, check_crc=cfg.checkCRCOnRecover)
    return scan.run(), scan.reason


@dataclass
class _LogView:
    """What list_placeholders reads of a store: its root and commit log."""
    root: Path
    commitlog: object


def _placeholders(cfg: BrokerConfig, layout: StoreLayout, info: StoreInfo) -> list[dict]:
    """The recovery placeholders the quarantine manifests name, each checked against the commit log (one record
    read per placeholder)."""
    if not (layout.root / QUARANTINE_DIR).is_dir():
        return []
    try:
        cl = open_log(cfg)
    except StoreError:
        return []  # said under commitLog
    try:
        return [p.as_dict() for p in list_placeholders(_LogView(layout.root, cl))]
    except StoreError as e:
        info.problems.append(f"recovery placeholders: {e}")
        return []
    finally:
        cl.close()


def _consume_queues(layout: StoreLayout, info: StoreInfo, mode=None) -> dict:
    source = "file"
    try:
        if mode is not None and mode.cq_reads == "rocksdb":  # the broker serves the RocksDB queues (format §11.4)
            from engine.broker.consumequeue.rocksdb import RocksDBConsumeQueueStore
            from engine.broker.layout import QueueListing
            source = "rocksdb"
            with RocksDBConsumeQueueStore(mode.rocksdb_cq_dir) as db:
                got = db.listing()
            listing = QueueListing(got.queues, got.problems)
        else:
            listing = layout.list_queues()
    except StoreError as e:  # queues rmqtool cannot read in this mode: named under mode
        info.problems.append(f"consume queues: {e}")
        return {"topics": None, "queues": None, "files": None, "bytes": Usage().as_dict(), "skipped": 0,
                "source": source}
    info.problems += [f"consume queues: {p.path}: {p.reason}" for p in listing.problems]
    topics = {t for t, _q in listing.queues}
    u = tree_usage(layout.consumequeue_dir) if layout.consumequeue_dir.is_dir() else Usage()
    return {"topics": len(topics), "queues": len(listing.queues), "files": u.files, "bytes": u.as_dict(),
            "skipped": len(listing.problems), "source": source}


def _header(path: Path) -> tuple[int, int, int] | None:
    """(beginTimestamp, endTimestamp, indexCount) of one index file (format §5.2), None when it is too short."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(INDEX_HEADER_SIZE)
    except OSError:
        return None
    if len(head) < INDEX_HEADER_SIZE:
        return None
    begin, end, _bp, _ep, _slots, count = HEADER.unpack_from(head)
    return begin, end, count


def _index(cfg: BrokerConfig, layout: StoreLayout, info: StoreInfo) -> dict:
    files = list_index_files(layout.index_dir) if layout.index_dir.is_dir() else []
    out = {"present": layout.index_dir.is_dir(), "files": len(files), "hashSlotNum": None, "indexNum": None,
           "geometryFrom": None, "geometry": None, "items": 0, "firstStoreTimestamp": None, "lastStoreTimestamp": None,
           "bytes": _usage_of(files).as_dict()}
    given = cfg.hashSlotNumGiven and cfg.indexNumGiven
    try:
        g = resolve_index_geometry(cfg, files)
        out.update(hashSlotNum=g.maxHashSlotNum, indexNum=g.maxIndexNum,
                   geometryFrom="broker.conf or options" if given else ("index files" if files else "defaults"),
                   geometry={name: {"value": getattr(g, key), "from": g.source(key)}  # the resolver's record
                             for name, key in (("hashSlots", "maxHashSlotNum"), ("maxIndex", "maxIndexNum"))})
    except StoreError as e:
        info.problems.append(f"index geometry: {e}")
    read = files if len(files) <= MAX_HEADERS else files[:1] + files[-1:]
    heads = [h for h in map(_header, read) if h is not None]
    out["items"] = sum(max(0, n - 1) for _b, _e, n in heads) if read is files else None
    begins = [b for b, _e, _n in heads if b > 0]
    ends = [e for _b, e, _n in heads if e > 0]
    out["firstStoreTimestamp"] = min(begins) if begins else None
    out["lastStoreTimestamp"] = max(ends) if ends else None
    if len(heads) < len(read):
        info.problems.append(f"index: {len(read) - len(heads)} file(s) shorter than a header")
    return out


def _checkpoint(layout: StoreLayout, info: StoreInfo) -> dict:
    """The checkpoint's fields; a missing, short or garbage one (Checkpoint.read_checked) is shown with its
    `problem` and `readable` false. It is no failure of info: reads do not need the checkpoint (the broker and
    recover read a bad one as zeros; doctor reports it)."""
    path = layout.checkpoint
    out = {"present": path.exists(), "readable": False, "physicMsgTimestamp": None, "logicsMsgTimestamp": None,
           "indexMsgTimestamp": None, "confirmPhyOffset": None}
    if not out["present"]:
        return out
    cp, why = Checkpoint.read_checked(path)
    if why is not None:
        out["problem"] = why
        return out
    out.update(readable=True, physicMsgTimestamp=cp.physicMsgTimestamp, logicsMsgTimestamp=cp.logicsMsgTimestamp,
               indexMsgTimestamp=cp.indexMsgTimestamp, confirmPhyOffset=cp.confirmPhyOffset)
    return out


def _abort(layout: StoreLayout) -> dict:
    if not layout.abort.exists():
        return {"present": False, "pid": None}
    try:
        text = layout.abort.read_bytes()[:32].decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return {"present": True, "pid": int(text) if text.isdigit() else None}  # 5.x brokers write their PID


def _config_files(layout: StoreLayout) -> list[dict]:
    d = layout.config_dir
    if not d.is_dir():
        return []
    sizes = {e.name: e.stat(follow_symlinks=False).st_size for e in os.scandir(d) if e.is_file(follow_symlinks=False)}
    bases = sorted({n[:-4] if n.endswith(".bak") else n for n in sizes})
    out = [{"name": b, "bytes": sizes.get(b), "bak": sizes.get(b + ".bak")} for b in bases]
    return out


def _tiered(layout: StoreLayout, tier: TierSource | None, info: StoreInfo) -> dict | None:
    d, meta = layout.root / TIERED_INDEX_DIR, layout.tiered_metadata
    bak = bak_path(meta)
    flat = _flat_store(layout, tier, info) if tier is not None and tier.tier_root() is not None else None
    if not (d.is_dir() or meta.exists() or bak.exists() or flat is not None):
        return None
    names = [e for e in os.scandir(d) if e.is_file(follow_symlinks=False)] if d.is_dir() else []
    u = _usage_of(e.path for e in names)
    return {"indexDir": TIERED_INDEX_DIR if d.is_dir() else None, "indexFiles": len(names), "indexBytes": u.as_dict(),
            "metadata": meta.stat().st_size if meta.exists() else None,
            "metadataBak": bak.stat().st_size if bak.exists() else None, "flatStore": flat}


def _flat_store(layout: StoreLayout, tier: TierSource, info: StoreInfo) -> dict:
    """The external tiered store at a glance: listings and stat of the broker's directory, and the metadata's
    counts (flat-store §2, §6). Segments are counted, never read."""
    cfg = tier.config()
    root = tier.tier_root(cfg)
    loaded = load_metadata(layout.tiered_metadata) if layout.tiered_metadata.exists() or \
        bak_path(layout.tiered_metadata).exists() else None
    md = loaded.metadata if loaded is not None else None
    cluster, broker = tier.broker_names(cfg, md)
    out = {"path": str(root), "exists": is_dir_no_follow(root), "cluster": cluster, "broker": broker,
           "brokerDir": None, "topics": 0, "queues": 0, "segments": {n: 0 for n in FILE_TYPE_NAMES.values()},
           "bytes": Usage().as_dict(), "metadataSource": None, "metadataTopics": None, "metadataQueues": None}
    if loaded is not None:
        out["metadataSource"] = loaded.source.name if loaded.source is not None else None
        info.problems += [f"tiered metadata: {w}" for w in loaded.warnings]
    if md is not None:
        out["metadataTopics"] = len(md.topics.keys())
        out["metadataQueues"] = len(md.loaded_queues())
    if not out["exists"]:
        if md is not None and md.paths():   # else nothing is tiered yet: the broker makes the directories lazily
            info.problems.append(f"tiered store: tieredStoreFilePath {root} is no directory, but the tiered "
                                 "metadata lists segments")
        return out
    if broker is None:
        info.problems.append(f"tiered store: cannot tell which broker's files under {root} to show (give brokerName "
                             "in broker.conf)")
        return out
    tl = TieredLayout(root, cluster, broker)
    if not is_dir_no_follow(tl.broker_dir):
        return out   # nothing of this broker tiered yet
    out["brokerDir"] = str(Path(cluster_dir_name(cluster)) / broker)
    queues, problems = tl.list_queues()
    info.problems += [f"tiered store: {p.path}: {p.reason}" for p in problems]
    out["topics"], out["queues"] = len({t for t, _q in queues}), len(queues)
    for t, q in queues + [(INDEX_TOPIC, 0)]:
        for ft, name in FILE_TYPE_NAMES.items():
            out["segments"][name] += len(tl.list_segments(t, q, ft).files)
    out["bytes"] = tree_usage(tl.broker_dir).as_dict()
    return out


def _timer(layout: StoreLayout) -> dict | None:
    """The timer store's files (timer §1), sizes only: `rmqtool timer inspect` reads them."""
    t = TimerLayout(layout)
    wheel, log, check, metrics = t.wheel, t.log_dir, t.checkpoint, t.metrics
    if not (t.exists() or metrics.exists()):
        return None
    segs = sorted(e.path for e in os.scandir(log) if e.is_file(follow_symlinks=False)) if log.is_dir() else []
    return {"wheel": _usage_of([wheel]).as_dict() if wheel.exists() else None,
            "logFiles": len(segs), "logBytes": _usage_of(segs).as_dict(),
            "checkpoint": check.stat().st_size if check.exists() else None,
            "metrics": metrics.stat().st_size if metrics.exists() else None}
