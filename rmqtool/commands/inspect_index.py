"""rmqtool inspect-index: headers, slot chains, statistics and verification of index files."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.views.times import local_time
from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.options import (BrokerConfOpt, CommitLogSizeOpt, HashSlotsOpt, JsonOpt, MaxIndexOpt, QuietOpt,
                             StoreOpt, build_config)
from rmqtool.options import WorkersOpt

VERIFY_FAILED = 3
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
def inspect_index(
    file: FileArg = None,
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    walk_slot: WalkSlotOpt = None,
    walk_key: WalkKeyOpt = None,
    max_items: MaxOpt = DEFAULT_MAX,
    stats: StatsOpt = False,
    verify: VerifyOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    hash_slots: HashSlotsOpt = None,
    max_index: MaxIndexOpt = None,
    commitlog_file_size: CommitLogSizeOpt = None,
    workers: WorkersOpt = None,
) -> None:
    """Show index file headers; walk hash-slot chains; slot statistics; verify items against the commit log.
    (Tiered index files: `rmqtool tiered inspect-index`.)"""
    # (a typer command: one parameter per option)
    from engine.errors import InvalidArgumentError
    from engine.broker.index.inspect import InspectRequest

    if file is not None and _is_tiered(file):
        raise InvalidArgumentError(f"{file} is a tiered index file: use `rmqtool tiered inspect-index`")
    if walk_slot is not None and walk_key is not None:
        raise InvalidArgumentError("give --walk-slot or --walk-key, not both")
    req = InspectRequest(walk_slot, walk_key, max_items, stats, verify)
    with_store = not (file is not None and store is None and broker_conf is None)
    if with_store:
        cfg = build_config(store, broker_conf, hash_slots, max_index, commitlog_file_size)
    else:
        from engine.broker.config.brokerconf import load_config

        cfg = load_config(None, maxHashSlotNum=hash_slots, maxIndexNum=max_index)
    _inspect_broker(cfg, file, with_store, req, json_out)


def _inspect_broker(cfg, file, with_store: bool, req, json_out: bool) -> None:
    from engine.broker.index.inspect import inspect_index_files

    headers, damaged, failed = [], [], False
    with render.progress(None, "slot statistics") as bar:
        task = bar.add_task("slot statistics", total=None, visible=req.stats)
        for rep in inspect_index_files(cfg, file, with_store, req, progress=lambda _phase, done, total: bar.update(
                task, completed=done, total=total)):
            damaged += [rep] if rep.damage is not None else []
            headers += [rep.header] if rep.header is not None else []
            _render_report(rep, json_out)
            failed |= rep.verify is not None and not rep.verify.ok
    if not (req.walk_slot is not None or req.walk_key is not None or req.stats or req.verify):
        if json_out:
            for h in headers:
                render.emit_json(h)
        else:
            _render_headers(headers)
    # one line on stderr (a script reads one line per failure)
    problems = ["verification found problems"] if failed else []
    problems += [f"index file {rep.path.name} is damaged: {rep.damage}" for rep in damaged]
    if problems:
        render.problem("; ".join(problems))
        raise typer.Exit(VERIFY_FAILED)


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


def _is_tiered(path: Path) -> bool:
    """Tiered layout detected, or at least a tiered magic at offset 0 (then a damaged tiered file gets the tiered
    error message; a broker index file starts with a positive timestamp and never has it)."""
    import struct

    from engine.tiered.index import BEGIN_MAGIC_CODE, END_MAGIC_CODE, detect_tiered

    if detect_tiered(path):
        return True
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return False
    return len(head) == 4 and struct.unpack(">i", head)[0] in (BEGIN_MAGIC_CODE, END_MAGIC_CODE)


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
