"""rmqtool clean: delete expired commit-log segments and what lies wholly below the new minimum (format §8)."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.options import GEOMETRY, STORE, JsonOpt, QuietOpt, StoreOptions, WorkersOpt, store_options


def _note(msg: str) -> None:
    render.note(f"note: {msg}")  # one line, however long


def _render(plan, dry_run: bool) -> None:
    verb = "would delete" if dry_run else "deleted"
    rows = [[it.kind, it.path, it.size, it.disk, it.reason] for it in plan.items]
    if rows:
        render.table(f"{verb} {len(rows)} file(s)", ["kind", "file", "size", "disk bytes", "why"], rows)
    if plan.queues:
        render.table("consume-queue minimum offsets (correctMinOffset)",
                     ["topic", "queueId", "minOffset before", "minOffset after", "maxOffset", "files deleted"],
                     [[q.topic, q.queue_id, q.min_offset_before, q.min_offset_after, q.max_offset, q.files_deleted]
                      for q in plan.queues])
    if plan.skipped:
        render.table("left alone", ["path", "reason"], [[s["path"], s["reason"]] for s in plan.skipped])
    render.kv_table("clean" + (" (dry run, nothing changed)" if dry_run else ""), [
        ("reserved time", f"{plan.reserved_hours:g} h" + (" (--force-now: every segment but the last)"
                                                           if plan.force_now else "")),
        ("commit-log segments " + verb, len(plan.commitlog)),
        ("commit-log deletion stopped", plan.commitlog_stop or "-"),
        ("min commit-log offset before / after", f"{plan.min_offset_before} / {plan.min_offset_after}"),
        ("consume-queue files " + verb, len(plan.consume_queue_files)),
        ("index files " + verb, len(plan.index)),
        ("index deletion stopped", plan.index_stop or "-"),
        *_timer_pairs(plan, verb),
        ("space freed" if not dry_run else "space that would be freed",
         f"{render.size_text(plan.bytes_freed)} on disk ({render.size_text(plan.file_bytes)} of file size)"),
    ])
    if plan.unclean:
        _note("the store has an abort file (not shut down cleanly); run `rmqtool recover` first")
    t = plan.timer
    if t and t["pendingLost"]:
        shown = t["lost"][:20]
        render.table(f"pending timer messages whose record {'would be' if dry_run else 'was'} deleted"
                     + (f" (first {len(shown)} of {t['pendingLost']})" if t["pendingLost"] > len(shown) else ""),
                     ["uniqKey", "topic", "fireAtMs", "commitLogOffset"],
                     [[m["uniqKey"], m["topic"], m["fireAtMs"], m["commitLogOffset"]] for m in shown])
        _note(f"{t['pendingLost']} pending timer message(s) lose their record: the broker drops them when they "
              "are due (it deletes commit-log segments by age alone, as clean does); --keep-timer-messages keeps "
              "the segments they need")
    if t and t["deleteMarkersLost"]:
        _note(f"{t['deleteMarkersLost']} pending delete marker(s) (recalls) lose their record: the messages they "
              "recall will be delivered")


def _timer_pairs(plan, verb: str) -> list[tuple[str, object]]:
    t = plan.timer
    if t is None:
        return []
    return [("pending timer messages / losing their record", f"{t['pendingTimerMessages']} / {t['pendingLost']}"),
            ("timer-log files " + verb, len(plan.timer_log)),
            ("timer-log deletion stopped", t["timerLogStoppedBecause"] or "-")]


@handles_errors
@store_options(STORE, GEOMETRY)
def clean(
    opts: StoreOptions,
    reserved_hours: Annotated[Optional[float], typer.Option(
        "--reserved-hours", help="Keep commit-log segments modified within this many hours (fileReservedTime, "
        "default 72).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be deleted; change nothing.")] = False,
    force_now: Annotated[bool, typer.Option("--force-now", help="Delete every commit-log segment but the last, "
                                            "expired or not (the broker's forced clean-up).")] = False,
    keep_timer: Annotated[bool, typer.Option("--keep-timer-messages", help="Stop before the first commit-log "
                                             "segment that holds the record of a pending timer message (the broker "
                                             "does not: it deletes by age alone).")] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    workers: WorkersOpt = None,
) -> None:
    """Delete expired commit-log segments (oldest first, never the last), then consume-queue and index files that
    lie wholly below the new minimum commit-log offset; report the corrected consume-queue minimum offsets.

    Pending timer messages: the broker deletes commit-log segments by age alone, even when a pending timer
    message's record lies in one (its dequeue then drops the message when it is due); clean does the same and says
    which pending timer messages lose their record. --keep-timer-messages keeps every segment they need instead.
    Then, as the broker's timer store does, it deletes the timer-log files (never the last) whose last unit points
    below the new minimum commit-log offset.

    Takes the store lock. Never deletes or follows anything outside the store: symlinks are reported and left.
    """
    # Index geometry is accepted like every store command takes it; clean reads only index headers.
    from engine.commands.clean import clean as run_clean

    cfg = opts.settle()
    with render.phase_progress("clean") as progress:
        plan = run_clean(cfg, reserved_hours, force_now, dry_run, progress=progress, keep_timer=keep_timer)
    if json_out:
        d = plan.as_dict()
        d["dryRun"] = dry_run
        render.emit_json(d)
    else:
        _render(plan, dry_run)
