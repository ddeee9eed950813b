"""Tiered-storage index files (RocketMQ 5, format §9): rmqtool compact-index, and the rendering shared by
inspect-index and query-key when they work on tiered files."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.errors import InvalidArgumentError
from engine.tiered.index.file import (COMPACT_INDEX_ITEM_SIZE, HASH_SLOT_SIZE, HEADER_SIZE, MAX_QUERY_COUNT, IndexStoreFile,
                           TieredIndexError, tiered_key_hash, tiered_slot)
from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.options import GEOMETRY_PANEL, JsonOpt

TieredSlotsOpt = Annotated[Optional[int], typer.Option(
    "--hash-slots", help="Slots of the tiered file (tieredStoreIndexFileMaxHashSlotNum; default: inferred from the "
    "file).", rich_help_panel=GEOMETRY_PANEL)]
TieredItemsOpt = Annotated[Optional[int], typer.Option(
    "--max-index", help="Items of the tiered file (tieredStoreIndexFileMaxIndexNum; default: inferred from the "
    "file).", rich_help_panel=GEOMETRY_PANEL)]

VERIFY_FAILED = 3

STOP_TEXT = {
    "empty": "empty slot",
    "end": "end of chain",
    "limit": "--limit reached",
    "beyond_count": "next item number is beyond indexItemCount (the broker's query stops here too)",
    "out_of_range": "next item lies outside the file",
    "cycle": "cycle: an item was reached twice",
    "bad_length": "slot length is not a multiple of 28 bytes (the broker's query returns nothing)",
    "negative_slot": "the key's hash is Integer.MIN_VALUE and its slot is negative: the broker reads a header word "
                     "or fails instead of a slot (format §9.5)",
}


def open_tiered(path: Path, hash_slots: Optional[int], max_index: Optional[int]) -> IndexStoreFile:
    """Open read-only; geometry: the given values, else what engine.tiered.index.file infers from the file."""
    if not Path(path).exists():
        raise InvalidArgumentError(f"tiered index file {path} does not exist")
    return IndexStoreFile.open(path, hash_slots, max_index)


def header_row(f: IndexStoreFile, name: str) -> dict:
    d = {"file": name}
    d.update(f.header())
    return d


def render_headers(rows: list[dict]) -> None:
    if len(rows) == 1:
        r = rows[0]
        render.kv_table(f"tiered index file {r['file']}", [
            ("magic", f"{r['magicName']} ({r['magicHex']})" if r["magic"] is not None else "(empty upload)"),
            ("layout", r["layout"]),
            ("status", r["status"]),
            ("beginTimestamp", f"{r['beginTimestamp']} ({render.fmt_time(r['beginTimestamp'])})"),
            ("endTimestamp", f"{r['endTimestamp']} ({render.fmt_time(r['endTimestamp'])})"),
            ("hashSlotCount", r["hashSlotCount"]),
            ("indexItemCount", r["indexItemCount"]),
            ("slots (hashSlotNum)", r["hashSlotNum"]),
            ("indexNum", r["indexNum"] if r["indexNum"] is not None else "-"),
            ("file size", r["fileSize"]),
        ])
        return
    render.table("tiered index files", ["file", "magic", "layout", "status", "beginTime", "endTime", "hashSlotCount",
                                        "indexItemCount", "slots", "indexNum", "fileSize"],
                 [[r["file"], r["magicName"], r["layout"], r["status"], render.fmt_time(r["beginTimestamp"]),
                   render.fmt_time(r["endTimestamp"]), r["hashSlotCount"], r["indexItemCount"], r["hashSlotNum"],
                   r["indexNum"] if r["indexNum"] is not None else "-", r["fileSize"]] for r in rows])


def walk(f: IndexStoreFile, name: str, slot: Optional[int], key: Optional[str], limit: int, json_out: bool) -> None:
    """Chain (unsealed) or slot range (compacted) of one slot; --walk-key hashes TOPIC#KEY with the tiered rules."""
    hc = None
    if key is not None:
        if "#" not in key:
            raise InvalidArgumentError(f"--walk-key takes TOPIC#KEY, got {key!r}")
        topic, k = key.split("#", 1)
        hc = tiered_key_hash(topic, k)
        slot = tiered_slot(hc, f.hash_slot_num)
    extra: dict = {}
    if slot is not None and slot < 0:
        items, stop = [], "negative_slot"
    else:
        items, stop = f.walk_slot(slot, limit)
        if f.layout == "compacted":
            start, length, _ = f.slot_range(slot)
            extra = {"itemsStart": start, "itemsLength": length}
    begin = f.begin_timestamp
    if json_out:
        obj = {"file": name, "layout": f.layout, "slot": slot}
        if hc is not None:
            obj["key"], obj["hashCode"] = key, hc
        obj.update(extra)
        obj.update({"items": items, "stop": stop})
        render.emit_json(obj)
        return
    title = f"{name} slot {slot}" + (f" ({key}: tiered hash {hc})" if key is not None else "")
    if extra:
        title += f", items at [{extra['itemsStart']}, {extra['itemsStart'] + extra['itemsLength']})"
    first = "item" if f.layout == "unsealed" else "position"
    cols = [first, "hashCode", "topicId", "queueId", "offset", "size", "timeDiff", "time"]
    if f.layout == "unsealed":
        cols.append("itemIndex")
    cols += ["hash slot", ""]
    rows = []
    for it in items:
        mark = ""
        if hc is not None:
            mark = "match" if it["hashCode"] == hc else "other key"
        elif it["slot"] != slot:
            mark = "wrong slot"
        row = [it["item"] if f.layout == "unsealed" else it["position"], it["hashCode"], it["topicId"],
               it["queueId"], it["offset"], it["size"], it["timeDiff"], render.fmt_time(begin + it["timeDiff"] * 1000)]
        if f.layout == "unsealed":
            row.append(it["itemIndex"])
        rows += [row + [it["slot"], mark]]
    render.table(title, cols, rows)
    text = "end of the slot's item range" if stop == "end" and f.layout == "compacted" else STOP_TEXT.get(stop, stop)
    render.out.print(f"stopped: {text}", markup=False)
    if f.layout == "unsealed" and len(items) > MAX_QUERY_COUNT:
        render.out.print(f"note: the broker's query visits only the first {MAX_QUERY_COUNT} items of a chain",
                         markup=False)


def render_stats(s: dict, name: str) -> None:
    render.kv_table(f"{name} statistics ({s['layout']})", [
        ("items (indexItemCount)", s["indexItemCount"]),
        ("items in chains" if s["layout"] == "unsealed" else "items in slot ranges", s["chainedItems"]),
        ("used slots", f"{s['usedSlots']} of {s['hashSlotNum']} ({s['occupancy']:.2%})"),
        ("mean chain length", f"{s['meanChainLength']:.3f}"),
        ("max chain length", s["maxChainLength"]),
        ("cyclic slots", s["cyclicSlots"]),
        (f"slots over the query cap ({s['queryCap']})", s["slotsOverQueryCap"]),
    ])
    render.table("chain-length histogram", ["length", "slots"], [[k, v] for k, v in s["chainLengthHistogram"].items()])
    render.table("longest chains", ["slot", "length"], [[a, b] for a, b in s["longestChains"]])


def verify(f: IndexStoreFile, name: str, json_out: bool) -> bool:
    """Structural check of one file; True when consistent."""
    problems = f.verify()
    if json_out:
        render.emit_json({"verify": {"file": name, "layout": f.layout, "indexItemCount": f.index_item_count,
                                     "ok": not problems, "problems": problems}})
    else:
        status = "OK" if not problems else f"{len(problems)} problem(s)"
        render.out.print(f"{name}: {f.layout}, {f.index_item_count} items, structure {status}", markup=False)
        for p in problems:
            render.out.print(f"  {p}", markup=False)
    return not problems


def inspect_files(paths: list[Path], *, walk_slot: Optional[int], walk_key: Optional[str], limit: int,
                  stats: bool, do_verify: bool, json_out: bool, hash_slots: Optional[int],
                  max_index: Optional[int]) -> None:
    """inspect-index on tiered files: headers, walks, statistics, structural verification (exit 3)."""
    failed = False
    headers = []
    for p in paths:
        with open_tiered(p, hash_slots, max_index) as f:
            headers.append(header_row(f, p.name))
            if walk_slot is not None or walk_key is not None:
                walk(f, p.name, walk_slot, walk_key, limit, json_out)
            if stats:
                s = f.stats()
                if json_out:
                    render.emit_json({"stats": {"file": p.name, **s}})
                else:
                    render_stats(s, p.name)
            if do_verify:
                failed |= not verify(f, p.name, json_out)
    if not (walk_slot is not None or walk_key is not None or stats or do_verify):
        if json_out:
            for h in headers:
                render.emit_json(h)
        else:
            render_headers(headers)
    if failed:
        render.note("verification found problems")
        raise typer.Exit(VERIFY_FAILED)


# ------------------------------------------------------------------ compact-index


@handles_errors
def compact_index(
    file: Annotated[Path, typer.Argument(help="Unsealed or sealed tiered index file (tiered_index_file/<timestamp>).",
                                         dir_okay=False)],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the compacted file.", dir_okay=False)],
    force: Annotated[bool, typer.Option("--force", help="Replace --out if it exists.")] = False,
    mapped: Annotated[bool, typer.Option("--mapped", help="Write the whole local compacting/ file the broker maps "
                                         "(28 + 8*slots + 28*indexItemCount bytes) instead of the bytes it uploads; "
                                         "they differ only when some items are unreachable from the slot table.")]
    = False,
    json_out: JsonOpt = False,
    hash_slots: TieredSlotsOpt = None,
    max_index: TieredItemsOpt = None,
) -> None:
    """Compact a tiered index file into the layout the broker uploads (format §9.4), byte for byte. The input is
    only read; the output is written to a temporary name and renamed."""
    if out.exists() and not force:
        raise InvalidArgumentError(f"{out} exists; pass --force to replace it")
    if out.exists() and file.exists() and os.path.samefile(out, file):
        raise InvalidArgumentError(f"--out {out} is the input file")
    if not out.parent.is_dir():
        raise InvalidArgumentError(f"directory {out.parent} does not exist")
    with open_tiered(file, hash_slots, max_index) as f:
        if f.layout != "unsealed":
            raise TieredIndexError(f"{file} is already compacted (END magic, {f.hash_slot_num} slot ranges); "
                                   "only an unsealed or sealed file can be compacted")
        before = f.file_size
        tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
        try:
            f.compact(tmp, form="mapped" if mapped else "uploaded")
            os.replace(tmp, out)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        after = out.stat().st_size
        base = HEADER_SIZE + HASH_SLOT_SIZE * f.hash_slot_num
        summary = {
            "file": str(file), "out": str(out), "form": "mapped" if mapped else "uploaded",
            "hashSlotNum": f.hash_slot_num, "indexNum": f.index_num, "hashSlotCount": f.hash_slot_count,
            "indexItemCount": f.index_item_count,
            "itemsWritten": max(0, after - base) // COMPACT_INDEX_ITEM_SIZE if after else 0,
            "beginTimestamp": f.begin_timestamp, "endTimestamp": f.end_timestamp,
            "bytesBefore": before, "bytesAfter": after,
        }
    if mapped:
        # The mapped form is sized by indexItemCount; count what the slot ranges really hold.
        with IndexStoreFile.open(out, f.hash_slot_num) as g:
            summary["itemsWritten"] = g.stats()["chainedItems"]
    if json_out:
        render.emit_json(summary)
    else:
        render.kv_table(f"compacted {file.name}", [
            ("written to", summary["out"] + (" (mapped form)" if mapped else "")),
            ("items", f"{summary['itemsWritten']} of indexItemCount {summary['indexItemCount']}"),
            ("slots", f"{summary['hashSlotNum']} ({summary['hashSlotCount']} used)"),
            ("bytes", f"{before} -> {after}"),
        ])
    lost = summary["indexItemCount"] - summary["itemsWritten"]
    if lost > 0:
        render.note(f"{lost} counted item(s) are not reachable from any slot and were left out, as the broker's "
                    "compaction does")
    if after == 0:
        render.note("no item is reachable: the broker uploads 0 bytes for this file")


# ------------------------------------------------------------------ query-key --tiered-dir


def _item_json(it: dict) -> dict:
    keys = ("queueId", "offset", "size", "hashCode", "topicId", "timeDiff", "itemIndex", "time", "file",
            "fileTimestamp")
    return {k: it[k] for k in keys if k in it}


def _conf_value(props: dict, name: str, kind=str):
    v = props.get(name)
    if v is None or v == "":
        return None
    if kind is int:
        try:
            return int(v)
        except ValueError:
            raise InvalidArgumentError(f"broker.conf: {name}={v!r} is not a number") from None
    return v


def run_query(*, tiered_dir: Path, topic: str, key: str, max_num: int, begin: int, end: int, unique: bool,
              raw: bool, explain: bool, json_out: bool, store: Optional[Path], broker_conf: Optional[Path],
              tiered_metadata: Optional[Path], topic_id: Optional[int], tiered_store_path: Optional[Path],
              cluster_name: Optional[str], broker_name: Optional[str], tiered_hash_slots: Optional[int],
              tiered_max_index: Optional[int], hash_slots: Optional[int], max_index: Optional[int],
              commitlog_file_size: Optional[int]) -> None:
    """query-key over a directory of tiered index files (format §9.7), optionally verified against messages."""
    from engine.broker.config import read_properties_file
    from engine.broker.layout import StoreLayout
    from engine.tiered.index.service import (FlatCommitLogVerifier, LocalStoreLocator,
                                    load_tiered_metadata, metadata_broker_names, metadata_topic_id,
                                    query_tiered_dir)

    props = read_properties_file(broker_conf) if broker_conf is not None else {}
    root = store if store is not None else (Path(props["storePathRootDir"]) if props.get("storePathRootDir")
                                            else None)
    have_store = store is not None or broker_conf is not None
    # Tiered geometry: explicit tiered options, else broker.conf's tiered keys, else --hash-slots/--max-index
    # when there is no local store they could belong to, else inferred from each file.
    slots = tiered_hash_slots or _conf_value(props, "tieredStoreIndexFileMaxHashSlotNum", int)
    items_num = tiered_max_index or _conf_value(props, "tieredStoreIndexFileMaxIndexNum", int)
    if not have_store:
        slots = slots or hash_slots
        items_num = items_num or max_index
    tiered_store_path = tiered_store_path or (Path(p) if (p := _conf_value(props, "tieredStoreFilePath")) else None)
    cluster_name = cluster_name or _conf_value(props, "brokerClusterName")
    broker_name = broker_name or _conf_value(props, "brokerName")

    # topicId of the topic: --topic-id, else the tiered metadata (explicit file, else under the store root).
    meta = None
    topic_missing = False
    if topic_id is None:
        meta_path = tiered_metadata
        if meta_path is None and root is not None:
            cand = StoreLayout(root).tiered_metadata
            if cand.exists() or cand.with_name(cand.name + ".bak").exists():
                meta_path = cand
        if meta_path is not None:
            meta = load_tiered_metadata(meta_path)
            topic_id = metadata_topic_id(meta, topic)
            topic_missing = topic_id is None
    # Everything that can fail on bad input is opened before anything is printed.
    with contextlib.ExitStack() as stack:
        verifier = locator = None
        if not raw and tiered_store_path is not None:
            hints = metadata_broker_names(meta, topic) if meta is not None else set()
            verifier = FlatCommitLogVerifier(tiered_store_path, topic, cluster_name=cluster_name,
                                             broker_name=broker_name, broker_hints=hints)
        elif not raw and have_store:
            from engine.broker.store import MessageStore
            from rmqtool.options import build_config

            cfg = build_config(store, broker_conf, hash_slots, max_index, commitlog_file_size)
            locator = LocalStoreLocator(stack.enter_context(MessageStore(cfg)), topic)
        res = query_tiered_dir(tiered_dir, topic, key, max_num, begin, end, topic_id=topic_id,
                               hash_slot_num=slots, index_num=items_num)

        notes = [f"query failed on {e}" for e in res.errors]
        if topic_id is None and meta is None:
            notes.append("no tiered metadata (pass --tiered-metadata, --topic-id or --store): items are not "
                         "filtered by topicId")
        if topic_missing:
            # MessageStoreFetcherImpl: no topic metadata -> an empty answer.
            for it in res.items:
                res.dropped.append({**it, "reason": f"topic {topic!r} is not in the tiered metadata"})
            res.items = []
            notes.append(f"topic {topic!r} is not in the tiered metadata: the broker answers nothing")

        kept: list[dict] = []
        rejected: list[dict] = [{**_item_json(d), "reason": d["reason"]} for d in res.dropped]
        mode = "unverified"
        if verifier is not None:
            mode = "tiered-commitlog"
            for it in res.items:
                rec, why = verifier.verify(it, key, unique, begin, end)
                if rec is not None and not why:
                    kept.append({**_item_json(it), "verifiedBy": mode, "message": rec.to_json()})
                else:
                    rejected.append({**_item_json(it), "reason": why})
        elif locator is not None:
            mode = "local-store"
            for it in res.items:
                rec, why = locator.locate(it, key, unique, begin, end)
                if rec is not None:
                    kept.append({**_item_json(it), "verifiedBy": mode, "message": rec.to_json()})
                else:
                    kept.append({**_item_json(it), "verifiedBy": None, "unverifiedReason": why, "message": None})
        else:
            kept = [_item_json(it) for it in res.items]

    if json_out:
        for k in kept:
            render.emit_json(k)
        if explain:
            for r in rejected:
                render.emit_json({"rejected": r})
    else:
        _render_items(kept, rejected if explain else [], topic, key, mode)
    if mode == "unverified" and not raw and kept:
        notes.append("index items only, not checked against the messages (hash collisions possible); pass "
                     "--tiered-store-path (or --store) to verify")
    if mode == "local-store":
        n = sum(1 for k in kept if k["verifiedBy"] is None)
        if n:
            notes.append(f"{n} item(s) could not be located in the local store and are unverified")
    if not kept:
        dropped = f", {len(rejected)} rejected (see --explain)" if rejected else ""
        notes.append(f"no item found for key {key!r} in topic {topic!r} ({res.candidates} index candidate(s) in "
                     f"{len(res.files_selected)} of {res.files_total} tiered file(s){dropped}; files are selected "
                     f"by their begin timestamp within [begin, end])")
    for n in notes:
        render.note(n)


def _render_items(kept: list[dict], rejected: list[dict], topic: str, key: str, mode: str) -> None:
    base = ["queueId", "offset", "size", "hashCode", "topicId", "time", "file"]
    rows = []
    if mode == "unverified":
        for k in kept:
            rows.append([k["queueId"], k["offset"], k["size"], k["hashCode"], k["topicId"], render.fmt_time(k["time"]),
                         k["file"]])
        render.table(f"{len(kept)} tiered index item(s) for {topic}#{key} (not verified)", base, rows)
    else:
        for k in kept:
            m = k.get("message") or {}
            rows.append([k["queueId"], k["offset"], k["size"], k["hashCode"], k["topicId"], render.fmt_time(k["time"]),
                         k["file"], k["verifiedBy"] or f"no: {k.get('unverifiedReason', '')}",
                         render.fmt_time(m.get("storeTimestamp")) if m else "", " ".join(m.get("keys", [])),
                         m.get("uniqKey") or "", render.body_preview(m) if m else ""])
        nv = sum(1 for k in kept if k.get("verifiedBy"))
        render.table(f"{len(kept)} tiered index item(s) for {topic}#{key}, {nv} verified against the message "
                     f"({mode})", base +
                     ["verified", "storeTime", "keys", "uniqKey", "body"], rows)
    if rejected:
        render.table("rejected tiered index items", ["queueId", "offset", "size", "file", "reason"],
                     [[r["queueId"], r["offset"], r["size"], r["file"], r["reason"]] for r in rejected])
