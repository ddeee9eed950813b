"""rmqtool timer ...: the RocketMQ 5 timer store (timerwheel, timerlog/, config/timercheck, config/timermetrics).

Read-only: each command parses its options, calls one engine function (engine.timer) and renders the answer.
"""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from engine.views.times import local_time
from rmqtool import render, tables, times
from rmqtool.cli import handles_errors
from rmqtool.options import BrokerConfOpt, JsonOpt, QuietOpt, StoreOpt, build_config

app = typer.Typer(name="timer", no_args_is_help=True, rich_markup_mode=None,
                  help="The RocketMQ 5 timer store (RIP-43: timerwheel, timerlog/, config/timercheck, "
                       "config/timermetrics): inspect it, list the pending timer messages, verify it. Read-only.")

#: Live slots a text `timer inspect` lists (--json lists every one).
SHOWN_SLOTS = 30

LIST_COLUMNS = [
    tables.Column("fireAt", "fireAt", tables.FIXED),
    tables.Column("topic", "topic", tables.TEXT, min_width=8),
    tables.Column("queueId", "qid"),
    tables.Column("uniqKey", "uniqKey", tables.FIXED, drop=4),
    tables.Column("tags", "tags", tables.TEXT, drop=3, min_width=6),
    tables.Column("keys", "keys", tables.TEXT, drop=6, min_width=8),
    tables.Column("rollTimes", "rolls", drop=2),
    tables.Column("state", "state", tables.FIXED, drop=1),
    tables.Column("commitLogOffset", "commitLogOffset", drop=5),
    tables.Column("timerLogPosition", "timerLogPos", drop=7),
]

SLOT_COLUMNS = [
    tables.Column("index", "slot"),
    tables.Column("time", "time", tables.FIXED),
    tables.Column("firstPos", "firstPos", drop=2),
    tables.Column("lastPos", "lastPos", drop=1),
    tables.Column("num", "num"),
    tables.Column("units", "units"),
    tables.Column("chain", "chain", tables.FIXED, drop=3),
]

FILE_COLUMNS = [
    tables.Column("file", "file", tables.FIXED),
    tables.Column("units", "units"),
    tables.Column("rolls", "rolls"),
    tables.Column("deletes", "deletes", drop=3),
    tables.Column("blankAt", "blankAt", drop=2),
    tables.Column("walkStopsAt", "walkStops", drop=1),
    tables.Column("dataEnd", "dataEnd", drop=4),
]

METRICS_COLUMNS = [
    tables.Column("topic", "topic", tables.TEXT, min_width=12),
    tables.Column("count", "count"),
    tables.Column("timeStamp", "timeStamp", tables.FIXED),
]


@app.command("inspect")
@handles_errors
def inspect_cmd(
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """What the timer store holds: the wheel (length, non-zero, live and stale slots, each live slot's chain),
    the timer log (files, units by magic, rolls, delete markers, blanks, where the broker's start-up would end
    it), the checkpoint's fields, the metrics, and where the enqueue resumes in rmq_sys_wheel_timer/0.

    Geometry comes from broker.conf (mappedFileSizeTimerLog, timerPrecisionMs, timerRollWindowSlot), else the
    timer-log files' size and RocketMQ's defaults; the wheel's size is fixed (2 x 7 days of slots).
    """
    from engine.timer import inspect_timer

    ins = inspect_timer(build_config(store, broker_conf))
    if json_out:
        render.emit_json(ins.as_dict())
        return
    d = ins.as_dict()
    _render_wheel(d["wheel"])
    _render_live_slots(ins.live_slots)
    _render_timer_log(d["timerLog"])
    _render_checkpoint(d["checkpoint"])
    _render_metrics(d["metrics"])
    _render_enqueue(d["enqueue"])


def _render_wheel(w: dict) -> None:
    render.kv_table("timer wheel", [
        ("file", f"{w['file']}" + ("" if w["exists"] else " (missing)")),
        ("length", f"{w['length']} (expected {w['expectedLength']}: {w['slots']} slots x {w['slotSize']} B)"
         + ("" if w["lengthOk"] or not w["exists"] else " WRONG")),
        ("non-zero slots", w["nonZeroSlots"]),
        ("live / stale / misplaced", f"{w['live']} / {w['stale']} / {w['misplaced']}"),
        ("units counted by live slots (num)", w["liveNum"]),
        ("read time (lastReadTimeMs)", f"{w['readTimeMs']} ({local_time(w['readTimeMs'])})"),
    ])


def _render_live_slots(live_slots: list[dict]) -> None:
    """The first SHOWN_SLOTS live slots, with a note when there are more."""
    rows = [dict(s, time=local_time(s["timeMs"])) for s in live_slots[:SHOWN_SLOTS]]
    tables.table(rows, SLOT_COLUMNS, title="live slots", empty="(no live slot)")
    if len(live_slots) > SHOWN_SLOTS:
        tables.note(f"showing {SHOWN_SLOTS} of {len(live_slots)} live slots (--json lists every one)")


def _render_timer_log(log: dict) -> None:
    tables.table(log["files"], FILE_COLUMNS, title="timer log files", empty="(no timer-log file)")
    render.kv_table("timer log", [
        ("directory", log["dir"]),
        ("file size (mappedFileSizeTimerLog)", log["fileSize"]),
        ("units", log["units"]),
        ("units by magic", ", ".join(f"{k} {v}" for k, v in log["unitsByMagic"].items()) or "-"),
        ("rolls / delete markers / blanks", f"{log['rolls']} / {log['deletes']} / {log['blanks']}"),
        ("valid end (the broker's recovery)", f"{log['validEnd']} ({log['validEndReason']}; walk from "
                                              f"{log['recoveryWalkStart']})"),
        ("data end", log["dataEnd"]),
    ])
    for p in log["fileProblems"]:
        tables.note(p)


def _render_checkpoint(cp: dict) -> None:
    dv = cp["dataVersion"]
    render.kv_table("timer checkpoint (" + cp["file"] + ")", [
        ("length", f"{cp['length']}" + (f" ({cp['problem']})" if cp["problem"] else "")),
        ("lastReadTimeMs", f"{cp['lastReadTimeMs']} ({local_time(cp['lastReadTimeMs'])})"),
        ("lastTimerLogFlushPos", cp["lastTimerLogFlushPos"]),
        ("lastTimerQueueOffset", cp["lastTimerQueueOffset"]),
        ("masterTimerQueueOffset", cp["masterTimerQueueOffset"]),
        ("dataVersion (stateVersion, timestamp, counter)",
         f"{dv['stateVersion']}, {dv['timestamp']}, {dv['counter']}"),
    ])


def _render_metrics(m: dict) -> None:
    rows = [{"topic": t, "count": v["count"], "timeStamp": local_time(v["timeStamp"])}
            for t, v in m["timingCount"].items()]
    tables.table(rows, METRICS_COLUMNS, title=f"timer metrics ({m['source'] or 'not loaded'})",
                 empty="(no topic counted)")
    for n in m["notes"]:
        tables.note(n)


def _render_enqueue(e: dict) -> None:
    render.kv_table("enqueue (rmq_sys_wheel_timer/0)", [
        ("queue min / max offset", f"{e['queueMinOffset']} / {e['queueMaxOffset']}"),
        ("cursor at the next start", f"{e['cursor']} ({e['cursorFrom']})"),
        ("units still to enqueue", e["toEnqueue"]),
    ])
    if e["startupThrows"]:
        tables.note(e["startupThrows"])


@app.command("list")
@handles_errors
def list_cmd(
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    topic: Annotated[Optional[str], typer.Option("--topic", "-t", help="Only timer messages for this (real) "
                                                 "topic.")] = None,
    due_after: Annotated[Optional[str], typer.Option("--due-after", help=f"Only messages that fire at or after this "
                                                     f"time: {times.GRAMMAR}.")] = None,
    due_before: Annotated[Optional[str], typer.Option("--due-before", help=f"Only messages that fire before this "
                                                      f"time: {times.GRAMMAR}.")] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Every pending timer message: what the broker will still deliver, sorted by fire time.

    Each shows its uniqKey, real topic and queue, keys, tags, fire time (TIMER_OUT_MS), roll count, state
    (wheel: in its slot; rolled: in a nearer slot, re-put when it fires; queued: in rmq_sys_wheel_timer/0, not
    yet in the wheel), the commit-log offset of the record its unit points at (the latest roll copy for a rolled
    message) and its timer-log position. Recalled messages (a pending delete marker names them) and delay-level
    messages (SCHEDULE_TOPIC_XXXX) are not timer messages pending here. --json prints one object per line.
    Exits 3 when units the broker will read cannot be resolved (they are reported on stderr, not listed), or when
    config/timercheck cannot be a broker's (a lastReadTimeMs ahead of the clock leaves no slot live).
    """
    from engine.timer import list_pending

    now = times.now_ms()
    after = times.parse_time(due_after, "--due-after", now=now) if due_after is not None else None
    before = times.parse_time(due_before, "--due-before", now=now) if due_before is not None else None
    cfg = build_config(store, broker_conf)
    with list_pending(cfg, topic, after, before, now_ms=now) as res:
        for n in res.notes:
            tables.note(n)
        out = None if json_out else tables.Stream(LIST_COLUMNS, {
            "fireAt": 23, "topic": 16, "queueId": 3, "uniqKey": 56, "tags": 10, "keys": 16, "rollTimes": 5,
            "state": 7, "commitLogOffset": 12, "timerLogPosition": 11})
        shown = 0
        for m in res:
            shown += 1
            if out is None:
                render.emit_json(m.as_dict())
            else:
                d = m.as_dict()
                d["fireAt"] = local_time(m.fire_at_ms)
                out.row(d)
        if out is not None:
            out.finish()  # an empty list: the note below says so
    if not shown:
        tables.note("no pending timer message" + (" matches" if res.total else ""))
    else:
        tables.note(f"{shown} of {res.total} pending timer message(s)"
                    + (f"; {res.recalled} recalled (not listed)" if res.recalled else ""))
    for p in res.problems:  # what the list lacks and why: printed whatever --quiet says, exit 3
        render.problem(f"warning: {p}")
    if res.unresolved_total:  # they explain the exit 3: printed whatever --quiet says
        for u in res.unresolved[:20]:
            render.problem(f"note: not listed: {u.why}")
        if res.unresolved_total > 20:
            render.problem(f"note: ... and {res.unresolved_total - 20} more")
        render.problem(f"note: {res.unresolved_total} unit(s) cannot be resolved; run `rmqtool timer verify` for "
                       "what the broker will do with them")
        raise typer.Exit(3)
    if res.problems:
        raise typer.Exit(3)


@app.command("verify")
@handles_errors
def verify_cmd(
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    now: Annotated[Optional[str], typer.Option("--now", help=f"Judge the time rules (the wheel keeps 7 days) as if "
                                               f"the broker started at this time: {times.GRAMMAR} (default: now).")]
    = None,
    no_check_crc: Annotated[bool, typer.Option("--no-check-crc", help="Do not check the body CRCs of pending "
                                               "timer messages.")] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Check that the wheel, the timer log, the checkpoint, the metrics and the commit log agree: file lengths
    (a wheel of the wrong length stops the broker's start), every live slot's chain (bounds, cycles, units), every
    unit's record (no unit pointing past the commit log or at a record that is not a timer message), the
    enqueue cursor and the checkpoint's offsets.

    Prints one line per problem, located (file and byte offset in it), worst first; --json gives each with its
    severity, kind and what the broker does with it. Exits 3 when there is an error or a warning (info findings
    do not count).
    """
    from engine.timer import verify_timer

    at = times.parse_time(now, "--now") if now is not None else None
    cfg = build_config(store, broker_conf)
    rep = verify_timer(cfg, now=at, check_crc=not no_check_crc)
    if json_out:
        render.emit_json(rep.as_dict())
    else:
        for f in rep.findings:
            where = f.file + (f"@{f.offset}" if f.offset is not None else "")
            render.line(f"{f.severity}: {where}: {f.problem}")
        c = rep.checked
        tables.note(f"{c['liveSlots']} live slot(s), {c['unitsWalked']} unit(s) walked, {c['queuedUnits']} still to "
                    f"enqueue, {c['pendingMessages']} pending message(s); "
                    + ", ".join(f"{n} {s}(s)" for s, n in rep.counts().items()))
    if not rep.ok:
        raise typer.Exit(3)
