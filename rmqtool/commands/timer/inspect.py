"""rmqtool timer inspect: what the timer store holds: the wheel (length, non-zero, live and stale slots, each live
slot's chain), the timer log (files, units by magic, rolls, delete markers, blanks, where the broker's start-up
would end it), the checkpoint's fields, the metrics, and where the enqueue resumes in rmq_sys_wheel_timer/0."""
from __future__ import annotations

from engine.views.times import local_time
from rmqtool import render, tables
from rmqtool.cli import handles_errors
from rmqtool.options import JsonOpt, QuietOpt, StoreOptions, store_options


#: Live slots a text `timer inspect` lists (--json lists every one).
SHOWN_SLOTS = 30

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


@handles_errors
@store_options()
def inspect_cmd(
    opts: StoreOptions,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """What the timer store holds: the wheel (length, non-zero, live and stale slots, each live slot's chain),
    the timer log (files, units by magic, rolls, delete markers, blanks, where the broker's start-up would end
    it), the checkpoint's fields, the metrics, and where the enqueue resumes in rmq_sys_wheel_timer/0.

    Geometry comes from broker.conf (mappedFileSizeTimerLog, timerPrecisionMs, timerRollWindowSlot), else the
    timer-log files' size and RocketMQ's defaults; the wheel's size is fixed (2 x 7 days of slots).
    """
    from engine.commands.timer import inspect as inspect_timer

    ins = inspect_timer(opts.settle())
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
