"""rmqtool recover: bring a store back to a consistent state after a crash (format §6, §7)."""
from __future__ import annotations

from typing import Annotated

import typer

from engine.views.times import local_time
from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.options import GEOMETRY, STORE, JsonOpt, QuietOpt, StoreOptions, store_options
from rmqtool.options import WorkersOpt


def _names(names: list[str], limit: int = 6) -> str:
    if not names:
        return "-"
    shown = ", ".join(names[:limit])
    return shown + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


def _note(msg: str) -> None:
    render.note(f"note: {msg}")  # one line, however long


def _summary(plan, d: dict, dry_run: bool) -> list[tuple[str, object]]:
    cb, ca = d["checkpointBefore"], d["checkpointAfter"]
    if plan.nothing_to_do:
        status = "already consistent: nothing to do"
    elif plan.consistent:
        status = "data consistent; " + ("would remove" if dry_run else "removed") + " the abort marker"
    else:
        status = "would repair (dry run, nothing changed)" if dry_run else "repaired"
    cq, ix = d["consumeQueues"], d["index"]
    why_mode = "abort file present: last exit was not clean" if plan.mode == "abnormal" else "no abort file"

    def change(field: str, fmt=local_time) -> tuple[str, str]:
        return f"checkpoint {field}", f"{fmt(cb[field])} -> {fmt(ca[field])}"

    pairs = [
        ("status", status),
        ("mode", f"{plan.mode} ({why_mode})"),
        ("broker start segment", f"{plan.broker_start_segment or '-'}  [{plan.broker_start_rule}]"),
        ("scan start offset", plan.scan_start_offset),
        ("records scanned", plan.records_scanned),
        ("scan stopped at", f"{plan.end_offset}: {plan.stop_reason}"),
        ("max offset before / after", f"{plan.max_offset_before} / {plan.end_offset}"),
        ("last valid record", plan.last_valid_offset if plan.last_valid_offset >= 0 else "-"),
        ("last message stored before / after", f"{local_time(plan.last_store_timestamp_before) or '-'} / "
                                               f"{local_time(plan.last_store_timestamp) or '-'}"),
        ("bytes truncated", plan.truncated_bytes),
        ("records truncated", plan.truncated_records),
        ("damaged ranges skipped",   # within 40 columns (issue 33 item 9): what is kept goes in the value
         f"{plan.repair_count} ({plan.skipped_bytes} bytes; the valid records after them kept)"
         if plan.repair_count else "0"),
        ("segments deleted", _names(plan.segments_deleted)),
        ("consume-queue units removed / added",
         f"{cq['unitsRemoved']} / {cq['unitsAdded']} ({cq['queuesChanged']} queue(s), "
         f"{cq['filesDeleted']} file(s) deleted)"),
        ("index files kept", f"{len(ix['kept'])}: {_names(ix['kept'])}"),
        ("index files rebuilt", f"{len(ix['rebuilt'])}: {_names(ix['rebuilt'])}"),
        ("index files created", f"{len(ix['created'])}: {_names(ix['created'])}"),
        ("index files removed", f"{len(ix['removed'])}: {_names(ix['removed'])}"),
        ("index checked from offset", ix["reindexFromOffset"] if ix["reindexFromOffset"] is not None else "-"),
        change("physicMsgTimestamp"), change("logicsMsgTimestamp"), change("indexMsgTimestamp"),
        change("confirmPhyOffset", str),
    ]
    t = plan.timer
    if t is not None:
        if t.skipped:
            pairs.append(("timer store", "left alone"))
        elif not t.changed:
            pairs.append(("timer store", "consistent with the commit log"))
        else:
            pairs.append(("timer store", f"log ends at {t.new_end} ({t.units_removed} unit(s) removed), "
                                         f"{len(t.slots)} slot(s) fixed, {len(t.tombstones)} unit(s) emptied"))
            pairs.append(("pending timer messages lost", t.lost_total))
    if not plan.checkpoint_readable:
        pairs.append(("checkpoint problem", plan.checkpoint_problem))
    if plan.quarantine_dir:
        pairs.append(("removed and overwritten bytes kept in", plan.quarantine_dir))
    return pairs


def _render(plan, dry_run: bool) -> None:
    d = plan.as_dict()
    cq, ix = d["consumeQueues"], d["index"]
    render.kv_table("recovery" + (" plan (dry run)" if dry_run else ""), _summary(plan, d, dry_run))
    if len(plan.scan_start_reasons) > 1:
        render.table("why the scan starts where it does", ["reason"], [[r] for r in plan.scan_start_reasons])
    if cq["queues"]:
        render.table("consume queues changed", ["topic", "queueId", "maxOffset before", "maxOffset after",
                                                "units removed", "units added", "files deleted"],
                     [[q["topic"], q["queueId"], q["maxOffsetBefore"], q["maxOffsetAfter"], q["unitsRemoved"],
                       q["unitsAdded"], len(q["filesDeleted"])] for q in cq["queues"]])
    if d["skipped"]:
        render.table("damaged ranges skipped" + (" (first ones)" if plan.repair_count > 50 else ""),
                     ["offset", "bytes", "segment", "replaced by", "why"],
                     [[x["offset"], x["bytes"], x["segment"], x["repair"], x["reason"]] for x in d["skipped"][:50]])
    if d["placeholders"]:
        render.table("placeholders: what a consumer receives in place of each damaged message",
                     ["commit-log offset", "bytes", "in place of"],
                     [[p["commitLogOffset"], p["size"], "{topic}/{queueId} queue offset {queueOffset}".format(
                         **p["origin"]) if p["origin"] else "(no consume-queue unit points at it)"]
                      for p in d["placeholders"][:50]])
        _note(d["placeholderNotes"][0])
    if ix["problems"]:
        render.table("index files that could not be trusted", ["file", "problem"],
                     [[k, v] for k, v in ix["problems"].items()])
    t = d.get("timer")
    if t and t["lost"]:
        shown = t["lost"][:50]
        render.table("timer messages lost" + (f" (first {len(shown)} of {t['pendingLost']})"
                                              if t["pendingLost"] > len(shown) else ""),
                     ["what", "uniqKey", "topic", "fireAtMs", "commitLogOffset", "why"],
                     [[x["what"], x["uniqKey"], x["topic"], x["fireAtMs"], x["commitLogOffset"], x["why"]]
                      for x in shown])
    acts = d["actions"]
    if acts and not plan.nothing_to_do:
        render.table("would do" if dry_run else "done", ["step"], [[a] for a in acts])
    for n in plan.notes:
        _note(n)


@handles_errors
@store_options(STORE, GEOMETRY)
def recover(  # typer: one parameter per option

    opts: StoreOptions,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Compute and print the plan; change nothing.")] = False,
    no_check_crc: Annotated[bool, typer.Option("--no-check-crc", help="Do not check body CRCs while scanning "
                                               "(the broker's checkCRCOnRecover=false).")] = False,
    index_safe: Annotated[bool, typer.Option("--index-safe", help="Start the scan from the index's durable "
                                             "point too (the broker's messageIndexSafe=true).")] = False,
    full_scan: Annotated[bool, typer.Option("--full-scan", help="Validate the whole commit log from its first "
                                            "segment, not just from where recovery would start (finds damage the "
                                            "checkpoint says cannot be there; reads the whole log).")] = False,
    force: Annotated[bool, typer.Option("--force", help="Remove or overwrite damaged data even when the store's "
                                        "file system has no room to keep a copy in its quarantine folder.")] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    workers: WorkersOpt = None,
) -> None:
    """Recover a store after a crash: end the commit log after its last valid record, step over damaged records
    in the middle (every valid record after them is kept; the damaged bytes get a placeholder the broker accepts),
    cut and re-dispatch the consume queues, repair the index so every surviving message is found by each of its
    keys, make the timer store agree with the commit log it leaves (timer-log units whose records are gone are
    cut or emptied, the wheel and timercheck follow; the plan lists the pending timer messages lost), write the
    checkpoint and remove the abort marker. Everything removed or overwritten is first copied to
    the store's quarantine folder with a manifest.json, or recover refuses and says what --force would remove.

    The placeholder: the broker's own recovery would cut every message after a damaged record; recover keeps them
    and puts one placeholder record in each damaged range. A consumer of the queue that held the damaged message
    receives, at its queue offset, a message of topic rmq_sys_rmqtool_quarantine with no tags, no keys and a
    body of zero-valued bytes (padding to the damaged range's size); its property RMQTOOL_QUARANTINED names the
    quarantine manifest holding the damaged bytes and RMQTOOL_ORIGIN_TOPIC, RMQTOOL_ORIGIN_QUEUE_ID and
    RMQTOOL_ORIGIN_QUEUE_OFFSET the message it replaces.
    Consumers subscribed by tag never receive it; others should skip that topic. The plan lists each one;
    `rmqtool info` lists a store's placeholders.

    Takes the store lock. A store that is already consistent is left untouched.
    """
    from engine.commands.recover import recover as run_recovery

    cfg = opts.settle()
    with render.phase_progress("recover") as progress:
        plan = run_recovery(cfg, no_check_crc=no_check_crc, index_safe=index_safe, dry_run=dry_run,
                            full_scan=full_scan, force=force, broker_conf_given=opts.broker_conf is not None,
                            progress=progress, say=_note)
    if json_out:
        render.emit_plan(plan, dry_run)
    else:
        _render(plan, dry_run)
