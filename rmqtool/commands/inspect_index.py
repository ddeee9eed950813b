"""rmqtool inspect-index: headers, slot chains, statistics and verification of index files."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.views.times import local_time
from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.options import INDEX_GEOMETRY, STORE, JsonOpt, QuietOpt, StoreOptions, store_options
from rmqtool.options import WorkersOpt

DEFAULT_MAX = 10_000

FileArg = Annotated[Optional[Path], typer.Argument(help="One index file (default: every file in <store>/index).",
                                                   dir_okay=False)]
WalkSlotOpt = Annotated[Optional[int], typer.Option("--walk-slot", help="Print the chain of hash slot N.")]
WalkKeyOpt = Annotated[Optional[str], typer.Option("--walk-key", help="Print the chain of the slot of TOPIC#KEY.")]
MaxOpt = Annotated[int, typer.Option("--count", "-n", help="At most this many chain items per walk (default 10000); "
                                     "a cut is reported on stderr.", min=1)]
StatsOpt = Annotated[bool, typer.Option("--stats", help="Slot occupancy, chain-length histogram, longest chains.")]
VerifyOpt = Annotated[bool, typer.Option("--verify", help="Check every item against the commit log; exit 3 on "
                                         "problems.")]


def _render_headers(rows: list[dict]) -> None:
    damage = any(r["damage"] for r in rows)
    render.table("index files", ["file", "beginTime", "endTime", "beginPhyOffset", "endPhyOffset", "hashSlotCount",
                                 "indexCount", "fill"] + (["damage"] if damage else []),
                 [[r["file"], local_time(r["beginTimestamp"]), local_time(r["endTimestamp"]),
                   r["beginPhyOffset"], r["endPhyOffset"], r["hashSlotCount"], r["indexCount"],
                   f"{r['fill']:.1%}"] + ([r["damage"] or ""] if damage else []) for r in rows])


@handles_errors
@store_options(STORE, INDEX_GEOMETRY)
def inspect_index(
    file: FileArg = None,
    opts: StoreOptions = StoreOptions(),
    walk_slot: WalkSlotOpt = None,
    walk_key: WalkKeyOpt = None,
    max_items: MaxOpt = DEFAULT_MAX,
    stats: StatsOpt = False,
    verify: VerifyOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    workers: WorkersOpt = None,
) -> None:
    """Show index file headers; walk hash-slot chains; slot statistics; verify items against the commit log.
    (Tiered index files: `rmqtool tiered inspect-index`.)"""
    # (a typer command: one parameter per option)
    from engine.commands.inspect_index import inspect_request

    req = inspect_request(file, walk_slot, walk_key, max_items, stats, verify)
    with_store = not (file is not None and opts.store is None and opts.broker_conf is None)
    cfg = None  # the file on its own: the engine settles its geometry
    if with_store:
        cfg = opts.settle()
    _inspect_broker(cfg, file, req, json_out, opts.hash_slots, opts.max_index)


#: The kind of the one line inspect-index says when it exits 3 (--json: rmqtool.notes): verification found
#: problems (verificationFailed), index files are damaged (damagedFiles [{file, reason}]).
INDEX_PROBLEMS = "index-problems"


def _inspect_broker(cfg, file, req, json_out: bool, hash_slots, max_index) -> None:
    from engine.commands.inspect_index import asked_headers, exit_code, inspect_index as run_inspect, verify_failed

    headers, damaged, failed = [], [], False
    with render.progress(None, "slot statistics") as bar:
        task = bar.add_task("slot statistics", total=None, visible=req.stats)
        for rep in run_inspect(cfg, file, req, hash_slots, max_index, progress=lambda _phase, done, total: bar.update(
                task, completed=done, total=total)):
            damaged += [rep] if rep.damage is not None else []
            headers += [rep.header] if rep.header is not None else []
            _render_report(rep, json_out)
            failed |= verify_failed(rep)
    if asked_headers(req):
        if json_out:
            for h in headers:
                render.emit_json(h)
        else:
            _render_headers(headers)
    # one line on stderr (a script reads one line per failure)
    problems = ["verification found problems"] if failed else []
    problems += [f"index file {rep.path.name} is damaged: {rep.damage}" for rep in damaged]
    if problems:
        render.problem("; ".join(problems), INDEX_PROBLEMS, verificationFailed=failed,
                       damagedFiles=[{"file": rep.path.name, "reason": rep.damage} for rep in damaged])
    if exit_code(failed, damaged):
        raise typer.Exit(exit_code(failed, damaged))


def _render_report(rep, json_out: bool) -> None:
    if rep.walk is not None:
        _walk(rep.walk, json_out)
        if "(limit)" in str(rep.walk["stop"]):
            from rmqtool import tables

            tables.cut_note(len(rep.walk["items"]), "--count", f"items of the chain of slot {rep.walk['slot']}")
    if rep.stats is not None:
        if json_out:
            render.emit_json({"stats": rep.stats})
        else:
            _render_stats(rep.stats)
    if rep.verify is not None:
        if json_out:
            render.emit_json({"verify": rep.verify.as_dict()})
        else:
            _render_verify(rep.verify)


def _walk(w: dict, json_out: bool) -> None:
    if json_out:
        render.emit_json({"file": w["file"], "slot": w["slot"], "items": w["items"], "stop": w["stop"]})
        return
    key, kh = w["key"], w["keyHash"]
    title = f"{w['file']} slot {w['slot']}" + (f" ({key}: hash {kh})" if key else "")
    rows = []
    for it in w["items"]:
        mark = "" if key is None else ("match" if it["keyHash"] == kh else "other key")
        rows.append([it["item"], it["keyHash"], it["phyOffset"], local_time(it["timestamp"]), it["timeDiff"],
                     it["prevIndex"], mark])
    render.table(title, ["item", "keyHash", "phyOffset", "time", "timeDiff", "prevIndex", ""], rows)
    render.line(f"stopped: {w['stop']}")


def _render_stats(s: dict) -> None:
    render.kv_table(f"{s['file']} statistics", [
        ("items", s["items"]), ("fill", f"{s['fill']:.2%}"),
        ("occupied slots", f"{s['occupiedSlots']} of {s['hashSlotNum']} ({s['slotOccupancy']:.2%})"),
        ("mean chain length", f"{s['meanChainLength']:.3f}"), ("max chain length", s["maxChainLength"]),
    ])
    render.table("chain-length histogram", ["length", "slots"],
                 [[k, v] for k, v in s["chainLengthHistogram"].items()])
    render.table("longest chains", ["slot", "length"], [[c["slot"], c["length"]] for c in s["longestChains"]])


def _render_verify(rep) -> None:
    status = "OK" if rep.ok else f"{rep.problem_count} problem(s)"
    render.line(f"{rep.file}: {rep.items_checked} items checked, {status}")
    for p in rep.problems:
        render.line(f"  {p.problem}")
