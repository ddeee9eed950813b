"""Recovery, step 4: carry a RecoveryPlan out, crash-safely, keeping what it removes.

Order: refuse early when the quarantine cannot hold what must be kept (unless --force); the abort marker first
(a crash from here on leaves a store the next recover handles again); the commit log (renames, segments after
the end, damaged ranges replaced by placeholders or BLANK fillers, the tail zeroed); the consume queues (cut,
then the missing units re-dispatched); the index (new files written under temporary names, forced, renamed
over the old ones, which are hard-linked into the quarantine first); stale temporary files; the checkpoint
once the data it describes is durable; the abort marker last. Every byte removed or overwritten is first kept
by engine.ops.footprint.quarantine.
"""
from __future__ import annotations

import os
from pathlib import Path

from engine.broker.commitlog.log import open_commitlog
from engine.broker.config import epochfile
from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.layout import StoreLayout
from engine.broker.config.lock import mark_clean, mark_in_use
from engine.broker.commitlog.message import blank_record
from engine.errors import CorruptFileError
from engine.fsutil import fsync_dir, write_fully, write_zeros
from engine.progress import Progress, no_progress
from engine.ops.footprint.quarantine import MANIFEST, Quarantine, check_room
from engine.ops.recovery.dispatch import KEEP, IndexReplay, QueueDispatch, QueueFeed
from engine.ops.recovery.placeholder import REPLACED_BY, manifest_path, placeholder_record
from engine.ops.recovery.plan import BLANK_FILLER, PLACEHOLDER, RecoveryPlan
from engine.ops.recovery.planner import redispatch, settle_recovery_config
from engine.ops.recovery.scan import RENAME_SUFFIX
from engine.timer.repair import apply_timer_repair

_ZERO_CHUNK = 1 << 20


def _zero_range(path: Path, lo: int, hi: int) -> None:
    _overwrite(path, lo, b"", zero_to=hi)


def _overwrite(path: Path, pos: int, data: bytes, zero_to: int | None = None) -> None:
    """Write data at pos, then zeros up to zero_to, and force the file."""
    fd = os.open(path, os.O_RDWR)
    try:
        write_fully(fd, data, pos, path, undo=False)
        if zero_to is not None:
            write_zeros(fd, pos + len(data), zero_to - pos - len(data), path, chunk=_ZERO_CHUNK)
        os.fsync(fd)
    finally:
        os.close(fd)


def _segment_paths(cfg: BrokerConfig) -> dict[str, Path]:
    out = {}
    for d in cfg.commitlog_dirs:
        if d.is_dir():
            for p in d.iterdir():
                out[p.name] = p
    return out


def execute(cfg: BrokerConfig, plan: RecoveryPlan, progress: Progress | None = None) -> None:
    """Carry out `plan` (the caller holds the store lock and has re-planned if the store changed)."""
    progress = progress or no_progress
    cfg = settle_recovery_config(cfg)  # the geometry the plan was made with (plan_recovery settles it alike)
    layout = StoreLayout.of(cfg)
    if not plan.force:
        check_room(cfg.root, plan.quarantine_bytes, plan.removals())
    q = Quarantine(cfg.root, force=plan.force)
    q.open()
    plan.quarantine_dir = q.rel(q.dir)
    mark_in_use(layout)
    _commitlog(cfg, plan, q)
    _queues(cfg, layout, plan, q)
    _rewalk(cfg, layout, plan, q, progress)
    if plan.timer is not None and plan.timer.changed:
        # After the commit log and its consume queue: the timer store is made to agree with what they hold now.
        q.extra["timer"] = {"pendingLost": plan.timer.lost_total, "lost": [m.as_dict() for m in plan.timer.lost],
                            "recallsUndone": plan.timer.resurrected}
        apply_timer_repair(cfg, plan.timer, q)
    for t in plan.stale_temp_files:
        p = cfg.root / t
        if p.exists():
            q.keep_file(p, "a temporary file left by an interrupted write")
    if plan.epoch is not None:
        _epoch(plan, q)
    if plan.write_checkpoint:
        if layout.checkpoint.exists():
            q.keep_file(layout.checkpoint, "the checkpoint before recovery", "the recovered checkpoint", link=True)
        plan.checkpoint_after.save(layout.checkpoint)
    q.write_manifest(True)
    if not q.entries:
        _drop_empty(q)
        plan.quarantine_dir = None
    mark_clean(layout)


def _epoch(plan: RecoveryPlan, q: Quarantine) -> None:
    """The epoch file truncated with the commit log (RecoveryPlan.epoch): the old files kept in the quarantine,
    then written as CheckpointFile.write does (or, with no epoch left, removed)."""
    ep = plan.epoch
    path = Path(ep.path)
    for p in epochfile.remove_files(path):
        q.keep_file(p, "the epoch file before recovery", "the truncated epoch file", link=ep.action == "write")
    if ep.action == "write":
        epochfile.write(path, ep.after)


def _drop_empty(q: Quarantine) -> None:
    (q.dir / MANIFEST).unlink(missing_ok=True)
    for d in (q.dir, q.dir.parent):
        try:
            d.rmdir()
        except OSError:
            break


def _resize(paths: dict[str, Path], plan: RecoveryPlan, q: Quarantine) -> None:
    """Bring wrong-size segments to the segment size: a sparse tail appended (as the broker's files are; a
    writer allocates by range before it writes), or the bytes past the size kept and cut."""
    for name, n, size in plan.segment_resizes:
        path = paths[name]
        if n > size:
            q.keep_range(path, size, n - size, "past the segment size", "nothing (the file is cut)")
        fd = os.open(path, os.O_RDWR)
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)


def _commitlog(cfg: BrokerConfig, plan: RecoveryPlan, q: Quarantine) -> None:
    paths = _segment_paths(cfg)
    _resize(paths, plan, q)
    if plan.segment_renames:
        _rename_segments(paths, plan.segment_renames)
        paths = _segment_paths(cfg)
    # Later segments first (newest first), so what remains is always a prefix of the log.
    for name in reversed(plan.segments_deleted):
        if name in paths:
            q.keep_file(paths[name], f"commit-log segment after the recovered end {plan.end_offset}")
    for d in cfg.commitlog_dirs:
        if d.is_dir():
            fsync_dir(d)
    for r in plan.repairs:
        path = paths[r.segment]
        if r.kind == PLACEHOLDER:
            q.keep_range(path, r.pos, r.length, r.reason, REPLACED_BY,
                         placeholder={"commitLogOffset": r.offset, "origin": r.origin.as_dict() if r.origin else None})
            data = placeholder_record(r.offset, r.length, r.prev_ts, manifest_path(q.name), r.origin)
            _overwrite(path, r.pos, data)
        elif r.kind == BLANK_FILLER:
            size = os.path.getsize(path)
            q.keep_range(path, r.pos, size - r.pos, r.reason, "a BLANK filler and zeros")
            _overwrite(path, r.pos, blank_record(size - r.pos), zero_to=size)
    if plan.zero_to > plan.zero_from and plan.zero_segment:
        path = paths[plan.zero_segment]
        q.keep_range(path, plan.zero_from, plan.zero_to - plan.zero_from,
                     f"after the recovered end {plan.end_offset}: {plan.stop_reason}", "zeros")
        _zero_range(path, plan.zero_from, plan.zero_to)


def _rename_segments(paths: dict[str, Path], renames: list[tuple[str, str]]) -> None:
    """Give segments the names their records state. Through temporary names, so swapped files work; a crash
    in between leaves `<name>.rmqtool-rename` files that the next recover renames (scan.place_segments)."""
    staged = []
    for old, new in renames:
        p = paths[old]
        tmp = p.with_name(old + RENAME_SUFFIX)
        os.rename(p, tmp)
        staged.append((tmp, p.with_name(new)))
    for d in {t.parent for t, _ in staged}:
        fsync_dir(d)
    for tmp, target in staged:
        if target.exists():
            raise CorruptFileError(f"cannot rename {tmp.name} to {target.name}: that name is taken")
        os.rename(tmp, target)
    for d in {t.parent for t, _ in staged}:
        fsync_dir(d)


def _queues(cfg: BrokerConfig, layout: StoreLayout, plan: RecoveryPlan, q: Quarantine) -> None:
    """Cut the consume queues (format §4.5) and zero what follows the cut."""
    for qp in plan.queues:
        if not (qp.files_deleted or qp.zero_to > qp.zero_from):
            continue
        qdir = layout.cq_dir(qp.topic, qp.queue_id)
        for name in reversed(qp.files_deleted):
            if (qdir / name).exists():
                q.keep_file(qdir / name, f"consume-queue file after the cut at {qp.truncate_to}")
        if qp.zero_file and qp.zero_to > qp.zero_from:
            q.keep_range(qdir / qp.zero_file, qp.zero_from, qp.zero_to - qp.zero_from,
                         "consume-queue units after the cut", "zeros")
            _zero_range(qdir / qp.zero_file, qp.zero_from, qp.zero_to)
        if qp.files_deleted and qdir.is_dir():
            fsync_dir(qdir)


def _rewalk(cfg: BrokerConfig, layout: StoreLayout, plan: RecoveryPlan, q: Quarantine, progress: Progress) -> None:
    """Re-dispatch the missing units and write the index files the plan rebuilds or creates."""
    ip = plan.index
    writes_index = ip.enabled and (ip.rebuilt or ip.created)
    adds_units = any(qp.units_added for qp in plan.queues)
    replay = dispatch = None
    idir = layout.index_dir
    tmp_of = {}
    hooks = []
    if writes_index:
        idir.mkdir(parents=True, exist_ok=True)
        by_pos = {p.position: p for p in ip.planned}

        def out_path(position: int) -> Path:
            tmp_of[position] = idir / f"{by_pos[position].name}.tmp{os.getpid()}"
            return tmp_of[position]

        replay = IndexReplay(cfg, _fresh_start(ip.start), [], mode="apply", planned=ip.planned, out_path=out_path)
        hooks.append(replay)
    if adds_units:
        feeds = {(qp.topic, qp.queue_id): QueueFeed(*_feed(plan, qp)) for qp in plan.queues}
        dispatch = QueueDispatch(cfg, feeds, plan.dispatch_from, write=True, placeholders=plan.placeholder_units())
        hooks.append(dispatch)
    if hooks:
        cl = open_commitlog(cfg)
        try:
            redispatch(cl, plan, hooks, progress, replay)
        finally:
            cl.close()
    if dispatch is not None:
        for d in dispatch.close():
            fsync_dir(d)
            fsync_dir(d.parent)
        fsync_dir(layout.consumequeue_dir)
    if replay is not None:
        replay.finish()
        _publish_index(idir, ip, tmp_of, q)
    if ip.enabled and ip.removed:
        for name in ip.removed:
            if (idir / name).exists():
                q.keep_file(idir / name, "index file past the re-indexed ones")
        fsync_dir(idir)


def _feed(plan: RecoveryPlan, qp) -> tuple[int, int | None]:
    return qp.dispatch_state if qp.dispatch_state is not None else (-1, None)


def _fresh_start(start):
    """The plan's ReplayStart is mutated by a replay; apply runs its own copy."""
    from dataclasses import replace

    return replace(start)


def _publish_index(idir: Path, ip, tmp_of: dict[int, Path], q: Quarantine) -> None:
    for p in ip.planned:
        if p.action == KEEP:
            continue
        tmp = tmp_of[p.position]
        target = idir / p.name
        if target.exists():
            q.keep_file(target, f"index file replaced by its rebuilt version ({p.count} items)",
                        "the rebuilt file", link=True)
        os.replace(tmp, target)
    fsync_dir(idir)
