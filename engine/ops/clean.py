"""Expired-file clean-up (format §8): commit-log segments by age, then consume-queue and index files below the
new minimum commit-log offset, and the consume queues' corrected minimum offsets; for the timer store (timer §8),
the pending timer messages that lose their record and the timer-log files the broker's own rule deletes.

plan_clean() only reads (lstat, headers, last units: memory is one consume-queue file at a time, whatever the
store's size); apply_clean() deletes under the store lock, through the scaffolding recovery shares
(engine.ops.operation: lock, re-plan if the store changed, dry run). Nothing
outside the store is ever followed or deleted: a symlink anywhere on the way (a segment, a queue directory,
commitlog/ itself) is reported and left, and for ordered deletions it ends the run there, because deleting
past it would leave a hole (the broker never deletes out of order, pitfall 32).
"""
from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.broker.config import epochfile
from engine.broker.config.brokerconf import CQ_STORE_UNIT_SIZE, BrokerConfig
from engine.broker.consumequeue.queue import UNIT, UNIT_DTYPE
from engine.broker.index.file import HEADER
from engine.broker.layout import SEGMENT_NAME, StoreLayout, list_index_files
from engine.broker.mode import detect_mode
from engine.broker.config.lock import StoreLock
from engine.errors import InvalidArgumentError, UncleanStoreError
from engine.fsutil import fsync_dir
from engine.ops import operation
from engine.progress import Progress, no_progress
from engine.timer.cleanup import lowest_needed_offset, timer_clean_impact

HOUR_MS = 3_600_000


@dataclass
class CleanItem:
    path: str           # relative to the store root when inside it
    kind: str           # commitlog, consumequeue, index
    size: int           # apparent size
    disk: int           # allocated bytes (st_blocks * 512): what deleting frees
    reason: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class QueueMin:
    topic: str
    queue_id: int
    min_offset_before: int
    min_offset_after: int
    max_offset: int
    files_deleted: int = 0

    def as_dict(self) -> dict:
        return {"topic": self.topic, "queueId": self.queue_id, "minOffsetBefore": self.min_offset_before,
                "minOffsetAfter": self.min_offset_after, "maxOffset": self.max_offset,
                "filesDeleted": self.files_deleted}


@dataclass
class CleanPlan:
    store: str
    now: int
    reserved_hours: float
    force_now: bool
    min_offset_before: int
    min_offset_after: int
    commitlog: list[CleanItem] = field(default_factory=list)
    commitlog_stop: str = ""
    consume_queue_files: list[CleanItem] = field(default_factory=list)
    queues: list[QueueMin] = field(default_factory=list)
    index: list[CleanItem] = field(default_factory=list)
    index_stop: str = ""
    skipped: list[dict] = field(default_factory=list)   # {"path", "reason"}: symlinks and the like, left alone
    unclean: bool = False
    fingerprint: tuple = ()
    keep_timer: bool = False                            # --keep-timer-messages
    timer: dict | None = None                           # what the deletions cost pending timer messages (timer §8)
    timer_log: list[CleanItem] = field(default_factory=list)
    #: controller mode: the epoch file after the deletions (EpochFileCache.truncatePrefixByOffset at the new min
    #: offset - 1, as the broker's CleanCommitLogService does): {"path", "truncateOffset", "before", "after"}
    epoch: dict | None = None

    @property
    def nothing_to_do(self) -> bool:
        """Only deletions change the store (the corrected minimum offsets are the broker's in-memory state)."""
        return not self.items

    @property
    def items(self) -> list[CleanItem]:
        return self.commitlog + self.consume_queue_files + self.index + self.timer_log

    @property
    def bytes_freed(self) -> int:
        return sum(i.disk for i in self.items)

    @property
    def file_bytes(self) -> int:
        return sum(i.size for i in self.items)

    def as_dict(self) -> dict:
        return {
            "store": self.store, "now": self.now, "reservedHours": self.reserved_hours, "forceNow": self.force_now,
            "minCommitLogOffsetBefore": self.min_offset_before, "minCommitLogOffsetAfter": self.min_offset_after,
            "commitLog": {"deleted": [i.as_dict() for i in self.commitlog], "stoppedBecause": self.commitlog_stop},
            "consumeQueues": {"deleted": [i.as_dict() for i in self.consume_queue_files],
                              "queues": [q.as_dict() for q in self.queues]},
            "index": {"deleted": [i.as_dict() for i in self.index], "stoppedBecause": self.index_stop},
            "timer": dict(self.timer, deleted=[i.as_dict() for i in self.timer_log]) if self.timer else None,
            "keepTimerMessages": self.keep_timer,
            "skipped": self.skipped,
            "filesDeleted": len(self.items), "bytesFreed": self.bytes_freed, "fileBytes": self.file_bytes,
            "uncleanStore": self.unclean,
            "epochFile": ({k: ([e.as_dict() for e in v] if k in ("before", "after") else v)
                           for k, v in self.epoch.items()} if self.epoch else None),
        }


# ==================================================================== containment

class _Fence:
    """Which paths are the store's: under the store root, or under a commit-log directory the config names."""

    def __init__(self, cfg: BrokerConfig):
        self.raw_root = Path(cfg.root)
        self.root = Path(os.path.realpath(cfg.root))
        self.roots = [str(self.root)]
        if cfg.storePathCommitLog:
            self.roots += [os.path.realpath(d) for d in cfg.commitlog_dirs]

    def inside(self, path: Path | str) -> bool:
        rp = os.path.realpath(path)
        return any(rp == r or rp.startswith(r.rstrip(os.sep) + os.sep) for r in self.roots)

    def rel(self, path: Path) -> str:
        for base in (self.raw_root, self.root):
            try:
                return str(Path(path).relative_to(base))
            except ValueError:
                pass
        return str(path)

    def check(self, path: Path) -> str:
        """'' when path is a regular file or directory we may use; otherwise why it is left alone."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return "vanished"
        if stat.S_ISLNK(st.st_mode):
            target = os.path.realpath(path)
            if not self.inside(path):
                return f"symlink leading outside the store (to {target}); left alone"
            return f"symlink (to {target}); left alone"
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            return "not a regular file; left alone"
        if not self.inside(path):
            return "outside the store; left alone"
        return ""


def _item(fence: _Fence, path: Path, kind: str, reason: str) -> CleanItem:
    st = os.lstat(path)
    return CleanItem(fence.rel(path), kind, st.st_size, st.st_blocks * 512, reason)


# ==================================================================== consume queue helpers

def _read_units(path: Path) -> np.ndarray:
    """One consume-queue file's units (one read, no copy: clean holds one file at a time)."""
    n = os.lstat(path).st_size // CQ_STORE_UNIT_SIZE
    with open(path, "rb") as f:
        return np.fromfile(f, dtype=UNIT_DTYPE, count=n)


def _valid_prefix(units: np.ndarray) -> int:
    bad = np.flatnonzero(~((units["offset"] >= 0) & (units["size"] > 0)))
    return int(bad[0]) if len(bad) else len(units)


def _correct_min(files: list[tuple[int, Path]], min_cl: int) -> tuple[int, int]:
    """(minOffsetInQueue, maxOffsetInQueue) after correctMinOffset(min_cl) (format §8.3, HEAD: binary search).

    Reads at most the last files (for the queue's last unit) and the first one (for the search).
    """
    if not files:
        return 0, 0
    max_logical, last_unit = files[0][0], None
    for start, p in reversed(files):
        units = _read_units(p)
        n = _valid_prefix(units)
        if n:
            last_unit, max_logical = units[n - 1], start + n * CQ_STORE_UNIT_SIZE
            break
    if last_unit is None:
        return files[0][0] // CQ_STORE_UNIT_SIZE, max_logical // CQ_STORE_UNIT_SIZE
    if int(last_unit["offset"]) < min_cl:
        return max_logical // CQ_STORE_UNIT_SIZE, max_logical // CQ_STORE_UNIT_SIZE  # nothing left: min = max
    start, p = files[0]
    units = _read_units(p)
    offs = units["offset"][:_valid_prefix(units)].astype(np.int64)
    i = int(np.searchsorted(offs, min_cl, side="left"))
    return (start + i * CQ_STORE_UNIT_SIZE) // CQ_STORE_UNIT_SIZE, max_logical // CQ_STORE_UNIT_SIZE


def _segment_files(fence: _Fence, d: Path, skipped: list[dict]) -> list[tuple[int, Path]] | None:
    """(start, path) of 20-digit files in d, sorted; None when d itself must be left alone."""
    why = fence.check(d)
    if why == "vanished":
        return []
    if why:
        skipped.append({"path": fence.rel(d), "reason": why})
        return None
    return sorted((int(p.name), p) for p in d.iterdir() if SEGMENT_NAME.match(p.name))


# ==================================================================== plan

def plan_clean(cfg: BrokerConfig, reserved_hours: float | None = None, force_now: bool = False,
               now: int | None = None, progress: Progress | None = None, keep_timer: bool = False) -> CleanPlan:
    """What clean deletes (format §8). Reads only.

    Pending timer messages (timer §8): the broker deletes commit-log segments by age alone, so does clean; the
    plan says which pending timer messages lose their record, and deletes the timer-log files the broker's own
    rule deletes once the commit log starts later. keep_timer: stop before the first segment that holds the record
    of a pending timer message instead."""
    progress = progress or no_progress
    layout = StoreLayout.of(cfg)
    layout.require_store()
    hours = cfg.fileReservedTime if reserved_hours is None else reserved_hours
    if hours < 0:
        raise InvalidArgumentError(f"--reserved-hours must not be negative, got {hours}")
    now = int(time.time() * 1000) if now is None else now
    fence = _Fence(cfg)
    plan = CleanPlan(str(cfg.root), now, hours, force_now, 0, 0, unclean=layout.abort.exists(),
                     fingerprint=operation.fingerprint(cfg), keep_timer=keep_timer)
    needed = lowest_needed_offset(cfg) if keep_timer and cfg.timerWheelEnable else None
    if not _plan_commitlog(cfg, fence, plan, needed):
        return plan
    _plan_queues(layout, fence, plan, progress)
    _plan_index(layout, fence, plan)
    if cfg.timerWheelEnable:
        _plan_timer(cfg, fence, plan)
    _plan_epoch(cfg, plan)
    return plan


def _plan_epoch(cfg: BrokerConfig, plan: CleanPlan) -> None:
    """Controller mode: once commit-log segments are deleted the broker drops the epochs that ended before the new
    min offset (DefaultMessageStore.CleanCommitLogService -> AutoSwitchHAService.truncateEpochFilePrefix(min - 1))."""
    if not plan.commitlog:
        return
    mode = detect_mode(cfg)
    if not mode.controller or mode.epoch_file is None:
        return
    r = epochfile.read(mode.epoch_file)
    if r.fatal or not r.entries:
        return  # the broker loads no epochs from it: it has none to drop
    offset = plan.min_offset_after - 1
    after = epochfile.truncate_prefix_by_offset(r.entries, offset)
    # truncatePrefixByOffset flushes whether or not it dropped an epoch: the file is written again either way
    plan.epoch = {"path": str(mode.epoch_file), "truncateOffset": offset, "before": r.entries, "after": after}


def _plan_timer(cfg: BrokerConfig, fence: _Fence, plan: CleanPlan) -> None:
    """The pending timer messages the new minimum costs, and the timer-log files the broker's rule deletes."""
    impact = timer_clean_impact(cfg, plan.min_offset_after)
    if impact is None:
        return
    plan.timer = impact.as_dict()
    for p in impact.log_files:
        why = fence.check(p)
        if why:
            plan.skipped.append({"path": fence.rel(p), "reason": why})
            break
        plan.timer_log.append(_item(fence, p, "timerlog", f"its last unit points below {plan.min_offset_after}"))


def _plan_commitlog(cfg: BrokerConfig, fence: _Fence, plan: CleanPlan, needed: int | None = None) -> bool:
    """Expired segments, oldest first, never the last (format §8.1). False when nothing else may be cleaned.
    `needed`: the lowest offset a pending timer message needs (--keep-timer-messages): its segment stays."""
    segs: list[tuple[int, Path]] = []
    blocked = False
    for d in cfg.commitlog_dirs:
        found = _segment_files(fence, d, plan.skipped)
        if found is None:
            blocked = True
            continue
        segs.extend(found)
    segs.sort()
    plan.min_offset_before = segs[0][0] if segs else 0
    if blocked:
        plan.commitlog_stop = "a commit-log directory leads outside the store; nothing is deleted"
        plan.min_offset_after = plan.min_offset_before
        return False
    expired_ms = int(plan.reserved_hours * HOUR_MS)
    deleted_upto = 0
    for i, (start, p) in enumerate(segs[:-1]):
        why = fence.check(p)
        if why:
            plan.skipped.append({"path": fence.rel(p), "reason": why})
            plan.commitlog_stop = f"{p.name}: {why}"
            break
        mtime_ms = int(os.lstat(p).st_mtime * 1000)
        age_h = (plan.now - mtime_ms) / HOUR_MS
        if not (plan.force_now or plan.now >= mtime_ms + expired_ms):
            plan.commitlog_stop = (f"{p.name} is not expired (last modified {age_h:.1f} h ago, "
                                   f"reserved {plan.reserved_hours:g} h)")
            break
        end = segs[i + 1][0]
        if needed is not None and needed < end:
            plan.commitlog_stop = (f"{p.name} holds the record of a pending timer message (commit-log offset "
                                   f"{needed}; --keep-timer-messages)")
            break
        forced = plan.force_now and plan.now < mtime_ms + expired_ms
        plan.commitlog.append(_item(fence, p, "commitlog", "forced" if forced else f"last modified {age_h:.1f} h ago"))
        deleted_upto = i + 1
    else:
        if segs:
            plan.commitlog_stop = f"{segs[-1][1].name} is the last (active) segment"
    plan.min_offset_after = segs[deleted_upto][0] if segs else 0
    return True


def _plan_queues(layout: StoreLayout, fence: _Fence, plan: CleanPlan, progress: Progress) -> None:
    """Consume-queue files whose last unit lies below the new minimum, and corrected minimum offsets (format §8.3)."""
    min_cl = plan.min_offset_after
    qdirs = [(tdir, qdir) for tdir in _segment_dirs(fence, layout.consumequeue_dir, plan.skipped, numeric=False)
             for qdir in _segment_dirs(fence, tdir, plan.skipped, numeric=True)]
    jobs = [(fence, tdir, qdir, plan.min_offset_before, min_cl) for tdir, qdir in qdirs]
    for skipped, items, qmin in _queue_surveys(jobs, progress):
        plan.skipped += skipped
        plan.consume_queue_files += items
        if qmin is not None:
            plan.queues.append(qmin)


#: By default clean surveys the consume queues on worker processes (engine.workers, a batch of queue directories
#: each) when there are this many of them; with --workers N whatever their number.
PARALLEL_SURVEY_QUEUES = 4096
#: Queue directories surveyed per worker job at most (each reads a few units of its first and last files).
QUEUES_PER_JOB = 256


def _queue_surveys(jobs: list[tuple], progress: Progress):
    """_survey_queue of each job, in order: on worker processes when there are many queues or --workers was
    given, else in this process (the same answers); progress counts the queues done."""
    from engine import workers

    if len(jobs) < 2 or not workers.fan_out(len(jobs), PARALLEL_SURVEY_QUEUES):
        for n, job in enumerate(jobs):
            progress("consume queues", n + 1, len(jobs))
            yield _survey_queue(*job)
        return
    per = max(1, min(QUEUES_PER_JOB, -(-len(jobs) // (4 * workers.count()))))
    batches = [(jobs[i:i + per],) for i in range(0, len(jobs), per)]
    done = 0
    for answers in workers.ordered_map(_survey_queues, batches):
        for got in answers:
            done += 1
            progress("consume queues", done, len(jobs))
            yield got


def _survey_queues(jobs: list[tuple]) -> list[tuple]:
    """In a worker: _survey_queue of each job."""
    return [_survey_queue(*job) for job in jobs]


def _survey_queue(fence: _Fence, tdir: Path, qdir: Path, min_before: int, min_cl: int) -> tuple:
    """One queue directory: (paths left alone, consume-queue files to delete, its QueueMin or None)."""
    skipped: list[dict] = []
    items: list[CleanItem] = []
    files = _segment_files(fence, qdir, skipped)
    if not files:
        return skipped, items, None
    before = _correct_min(files, min_before)
    n_del = 0
    for start, p in files[:-1]:
        why = fence.check(p)
        if why:
            skipped.append({"path": fence.rel(p), "reason": why})
            break
        off = _last_unit_offset(p)
        if off is None or off >= min_cl:
            break  # not full, or still needed: never delete past it
        items.append(_item(fence, p, "consumequeue", f"last unit points at {off} < {min_cl}"))
        n_del += 1
    after = _correct_min(files[n_del:], min_cl)
    if not n_del and after[0] == before[0]:
        return skipped, items, None
    return skipped, items, QueueMin(tdir.name, int(qdir.name), before[0], after[0], after[1], n_del)


def _last_unit_offset(p: Path) -> int | None:
    """The commit-log offset of a consume-queue file's last unit, None when that unit is not valid."""
    size = os.lstat(p).st_size
    if size < CQ_STORE_UNIT_SIZE:
        return None
    with open(p, "rb") as f:
        f.seek(size - size % CQ_STORE_UNIT_SIZE - CQ_STORE_UNIT_SIZE)
        off, usize, _ = UNIT.unpack(f.read(CQ_STORE_UNIT_SIZE))
    return off if off >= 0 and usize > 0 else None


def _plan_index(layout: StoreLayout, fence: _Fence, plan: CleanPlan) -> None:
    """Index files whose endPhyOffset lies below the new minimum, never the newest (format §5.8, §8.4)."""
    min_cl = plan.min_offset_after
    idir = layout.index_dir
    why = fence.check(idir) if idir.exists() or idir.is_symlink() else "vanished"
    if why and why != "vanished":
        plan.skipped.append({"path": fence.rel(idir), "reason": why})
        plan.index_stop = "index/ leads outside the store"
        return
    if why:
        return
    files = list_index_files(idir)
    for p in files[:-1]:
        why = fence.check(p)
        if why:
            plan.skipped.append({"path": fence.rel(p), "reason": why})
            plan.index_stop = f"{p.name}: {why}"
            return
        with open(p, "rb") as f:
            head = f.read(HEADER.size)
        if len(head) < HEADER.size:
            plan.index_stop = f"{p.name} is too short to have a header"
            return
        end_phy = HEADER.unpack(head)[3]
        if end_phy >= min_cl:
            plan.index_stop = f"{p.name} has endPhyOffset {end_phy} >= {min_cl}"
            return
        plan.index.append(_item(fence, p, "index", f"endPhyOffset {end_phy} < {min_cl}"))
    if files:
        plan.index_stop = f"{files[-1].name} is the newest index file (never deleted)"


def _segment_dirs(fence: _Fence, base: Path, skipped: list[dict], numeric: bool) -> list[Path]:
    if not (base.exists() or base.is_symlink()):
        return []
    why = fence.check(base)
    if why:
        skipped.append({"path": fence.rel(base), "reason": why})
        return []
    out = []
    for p in sorted(base.iterdir()):
        if numeric and not p.name.isdigit():
            continue
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode):
            skipped.append({"path": fence.rel(p), "reason": fence.check(p)})
            continue
        if stat.S_ISDIR(st.st_mode):
            out.append(p)
    return out


# ==================================================================== apply

def _execute(cfg: BrokerConfig, plan: CleanPlan) -> None:
    """Delete what the plan lists, oldest first (the caller holds the lock)."""
    if StoreLayout.of(cfg).abort.exists():
        raise UncleanStoreError(f"store {cfg.root} was not shut down cleanly (abort file present); "
                                "run `rmqtool recover` first")
    fence = _Fence(cfg)
    dirs: set[Path] = set()
    for it in plan.items:
        p = fence.root / it.path if not os.path.isabs(it.path) else Path(it.path)
        # Checked again right before the unlink: never remove a symlink or anything outside.
        if fence.check(p):
            continue
        os.unlink(p)
        dirs.add(p.parent)
    for d in dirs:
        fsync_dir(d)
    if plan.epoch is not None and plan.epoch["after"]:
        epochfile.write(Path(plan.epoch["path"]), plan.epoch["after"])  # as CheckpointFile.write: old text to .bak


def apply_clean(cfg: BrokerConfig, plan: CleanPlan, lock: StoreLock | None = None) -> CleanPlan:
    """Delete what the plan lists under the store lock (re-planned first if the store changed since)."""
    return operation.apply_under_lock(
        cfg, plan, lambda: plan_clean(cfg, plan.reserved_hours, plan.force_now, plan.now, keep_timer=plan.keep_timer),
        lambda p: _execute(cfg, p), lock)


def clean(cfg: BrokerConfig, reserved_hours: float | None = None, force_now: bool = False, dry_run: bool = False,
          now: int | None = None, progress: Progress | None = None, keep_timer: bool = False) -> CleanPlan:
    """The `rmqtool clean` entry point: lock (unless dry run), plan, apply."""
    return operation.run(cfg, lambda: plan_clean(cfg, reserved_hours, force_now, now, progress, keep_timer),
                         lambda p: _execute(cfg, p), dry_run, writer="clean")
