"""Rendering of tiered index answers (format §9): what inspect-index shows for tiered files, the compact-index
summary and the query-key --tiered-dir answer. Each function takes an engine result and prints it (rich tables,
or one JSON object per line with --json); none computes anything the engine did not."""
from __future__ import annotations

from typing import Iterable

from engine.tiered.index import MAX_QUERY_COUNT, FileInspection, SlotWalk
from engine.views.times import local_time
from rmqtool import render

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


# ------------------------------------------------------------------ inspect-index


def render_inspection(reports: Iterable[FileInspection], json_out: bool) -> bool:
    """Each file's walk, statistics and check as it comes; the headers when nothing else was asked for.
    Returns True when a structural check found problems."""
    failed = False
    headers = []
    detail = False
    for r in reports:
        headers.append(r.header)
        if r.walk is not None:
            detail = True
            render_walk(r, r.walk, json_out)
        if r.stats is not None:
            detail = True
            if json_out:
                render.emit_json({"stats": {"file": r.name, **r.stats}})
            else:
                render_stats(r.stats, r.name)
        if r.problems is not None:
            detail = True
            failed |= not render_verify(r, json_out)
    if not detail:
        if json_out:
            for h in headers:
                render.emit_json(h)
        else:
            render_headers(headers)
    return failed


def render_headers(rows: list[dict]) -> None:
    if len(rows) == 1:
        r = rows[0]
        render.kv_table(f"tiered index file {r['file']}", [
            ("magic", f"{r['magicName']} ({r['magicHex']})" if r["magic"] is not None else "(empty upload)"),
            ("layout", r["layout"]),
            ("status", r["status"]),
            ("beginTimestamp", f"{r['beginTimestamp']} ({local_time(r['beginTimestamp'])})"),
            ("endTimestamp", f"{r['endTimestamp']} ({local_time(r['endTimestamp'])})"),
            ("hashSlotCount", r["hashSlotCount"]),
            ("indexItemCount", r["indexItemCount"]),
            ("slots (hashSlotNum)", r["hashSlotNum"]),
            ("indexNum", r["indexNum"] if r["indexNum"] is not None else "-"),
            ("file size", r["fileSize"]),
        ])
        return
    render.table("tiered index files", ["file", "magic", "layout", "status", "beginTime", "endTime", "hashSlotCount",
                                        "indexItemCount", "slots", "indexNum", "fileSize"],
                 [[r["file"], r["magicName"], r["layout"], r["status"], local_time(r["beginTimestamp"]),
                   local_time(r["endTimestamp"]), r["hashSlotCount"], r["indexItemCount"], r["hashSlotNum"],
                   r["indexNum"] if r["indexNum"] is not None else "-", r["fileSize"]] for r in rows])


def render_walk(r: FileInspection, w: SlotWalk, json_out: bool) -> None:
    """Chain (unsealed) or slot range (compacted) of one slot; with a key, which items are that key's."""
    compacted = r.layout == "compacted"
    if json_out:
        obj = {"file": r.name, "layout": r.layout, "slot": w.slot}
        if w.hash_code is not None:
            obj["key"], obj["hashCode"] = w.key, w.hash_code
        if compacted and w.items_start is not None:
            obj.update({"itemsStart": w.items_start, "itemsLength": w.items_length})
        obj.update({"items": w.items, "stop": w.stop})
        render.emit_json(obj)
        return
    title = f"{r.name} slot {w.slot}" + (f" ({w.key}: tiered hash {w.hash_code})" if w.key is not None else "")
    if compacted and w.items_start is not None:
        title += f", items at [{w.items_start}, {w.items_start + w.items_length})"
    cols = ["position" if compacted else "item", "hashCode", "topicId", "queueId", "offset", "size", "timeDiff",
            "time"] + ([] if compacted else ["itemIndex"]) + ["hash slot", ""]
    render.table(title, cols, [_walk_row(it, w, compacted, r.begin_timestamp) for it in w.items])
    text = "end of the slot's item range" if w.stop == "end" and compacted else STOP_TEXT.get(w.stop, w.stop)
    render.out.print(f"stopped: {text}", markup=False)
    if not compacted and len(w.items) > MAX_QUERY_COUNT:
        render.note(f"note: the broker's query visits only the first {MAX_QUERY_COUNT} items of a chain")


def _walk_row(it: dict, w: SlotWalk, compacted: bool, begin: int) -> list:
    mark = ""
    if w.hash_code is not None:
        mark = "match" if it["hashCode"] == w.hash_code else "other key"
    elif it["slot"] != w.slot:
        mark = "wrong slot"
    row = [it["position"] if compacted else it["item"], it["hashCode"], it["topicId"], it["queueId"], it["offset"],
           it["size"], it["timeDiff"], local_time(begin + it["timeDiff"] * 1000)]
    if not compacted:
        row.append(it["itemIndex"])
    return row + [it["slot"], mark]


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


def render_verify(r: FileInspection, json_out: bool) -> bool:
    """The structural check of one file; True when consistent."""
    problems = r.problems or []
    if json_out:
        render.emit_json({"verify": {"file": r.name, "layout": r.layout, "indexItemCount": r.index_item_count,
                                     "ok": not problems, "problemCount": len(problems),
                                     "findings": [f.as_dict() for f in r.findings()]}})
    else:
        status = "OK" if not problems else f"{len(problems)} problem(s)"
        render.out.print(f"{r.name}: {r.layout}, {r.index_item_count} items, structure {status}", markup=False)
        for p in problems:
            render.out.print(f"  {p}", markup=False)
    return not problems


# ------------------------------------------------------------------ compact-index


def render_compaction(summary: dict, name: str, json_out: bool) -> None:
    mapped = summary["form"] == "mapped"
    if json_out:
        render.emit_json(summary)
    else:
        render.kv_table(f"compacted {name}", [
            ("written to", summary["out"] + (" (mapped form)" if mapped else "")),
            ("items", f"{summary['itemsWritten']} of indexItemCount {summary['indexItemCount']}"),
            ("slots", f"{summary['hashSlotNum']} ({summary['hashSlotCount']} used)"),
            ("bytes", f"{summary['bytesBefore']} -> {summary['bytesAfter']}"),
        ])
    lost = summary["indexItemCount"] - summary["itemsWritten"]
    if lost > 0:
        render.note(f"{lost} counted item(s) are not reachable from any slot and were left out, as the broker's "
                    "compaction does")
    if summary["bytesAfter"] == 0:
        render.note("no item is reachable: the broker uploads 0 bytes for this file")


# ------------------------------------------------------------------ tiered reindex


def render_tiered_reindex(r) -> None:
    """The summary of a tiered index rebuild (engine.jobs.tiered_index.TieredReindexResult)."""
    title = "tiered reindex" + (" (dry run: nothing written)" if r.dry_run else "")
    rows = [
        ("master", r.master),
        ("segments", r.segments),
        ("messages", f"{r.messages} ({r.copied_messages} copied to tiered storage, {r.keyed_messages} with keys)"),
        ("keys indexed (items)", r.keys_indexed),
        ("index files", f"{r.index_files} ({r.hash_slot_num} slots x {r.index_num} items, compacted)"),
        ("bytes read", f"{r.bytes_read} ({render.size_text(r.bytes_read)})"),
        ("elapsed", f"{r.seconds:.2f} s (scan {r.scan_seconds:.2f} s, build {r.build_seconds:.2f} s)"),
        ("tiered metadata", r.tiered_metadata or "none (topic ids assigned from 0)"),
    ]
    if r.transaction_records_skipped:
        rows.append(("prepared/rollback records (not copied)", r.transaction_records_skipped))
    if r.system_topic_records:
        rows.append(("records of topics not tiered", r.system_topic_records))
    if r.length_mismatches:
        rows.append(("length-mismatch records (skipped)", r.length_mismatches))
    if r.key_sets_too_large:
        rows.append(("key sets larger than a file (not indexed)", r.key_sets_too_large))
    if r.key_sets_failed:
        rows.append(("key sets with a failing MIN_VALUE key", r.key_sets_failed))
    if not r.dry_run:
        rows.append(("written to", r.out_dir))
        if r.replaced:
            rows.append(("old index files", "removed (--replace)"))
    render.kv_table(title, rows)
    if r.topics:
        render.table("topics", ["topic", "topicId", "source"], [[t["topic"], t["topicId"], t["source"]]
                                                                for t in r.topics])
    if r.files:
        render.table("tiered index files" + (" (planned)" if r.dry_run else ""),
                     ["file (beginTimestamp)", "items", "bytes"],
                     [[f["name"], f["items"], f.get("bytes", "-")] for f in r.files])


# ------------------------------------------------------------------ tiered query-key


def render_tier_key_answer(ans, view: str, json_out: bool, explain: bool) -> None:
    """One answer of `tiered query-key` (engine.tiered.index.fetcher.KeyAnswer) in the asked view: "checked" (the
    messages that really carry the key), "broker" (the broker's answer as it is) or "raw" (the index items);
    --explain adds what was left out; a closing note on stderr says why an answer is empty."""
    q = ans.question
    if view == "raw":
        _render_raw_items(ans, json_out)
        if explain:
            _render_left_out(ans, view, json_out)
    else:
        shown = ans.kept if view == "checked" else ans.broker_messages
        if json_out:
            for m in shown:
                render.emit_json(_message_json(m))
        else:
            what = "message(s)" if view == "checked" else "message(s) as the broker answers (unchecked)"
            render.table(f"{len(shown)} {what} for {q.topic}#{q.key}", MESSAGE_COLUMNS,
                         [_message_row(m) for m in shown])
        if explain:
            _render_left_out(ans, view, json_out)
    if ans.failed:
        render.note(f"error: the broker's answer fails: {ans.failed}")
    for f in ans.index.per_file:
        if f.error:
            render.note(f"warning: tiered index file {f.timestamp} ({f.status}) failed and adds nothing: {f.error}")
    _closing_note(ans, view)


MESSAGE_COLUMNS = ["commitLogOffset", "storeTime", "queueId", "queueOffset", "keys", "uniqKey", "body"]


def _message_json(m) -> dict:
    return m.record.to_json() if m.record is not None else m.broker_json()


def _message_row(m) -> list:
    r = m.record
    if r is None:
        return [m.item["offset"], "", m.item["queueId"], "", "", "", f"({m.reason or m.status})"]
    return [r.physical_offset, local_time(r.store_timestamp), r.queue_id, r.queue_offset, " ".join(r.keys),
            r.uniq_key or "", render.body_preview(r.to_json())]


def _raw_item(it: dict) -> dict:
    keys = ("hashCode", "topicId", "queueId", "offset", "size", "timeDiff", "itemIndex", "fileTimestamp")
    d = {k: it[k] for k in keys}
    d["itemTime"] = it["fileTimestamp"] + it["timeDiff"] * 1000
    return d


def _render_raw_items(ans, json_out: bool) -> None:
    skipped = {(s["queueId"], s["offset"]): s["reason"] for s in ans.skipped}
    rows = []
    for it in ans.index.items:
        d = _raw_item(it)
        why = skipped.get((it["queueId"], it["offset"]))
        if why:
            d["skippedByFetcher"] = why
        rows.append(d)
    if json_out:
        for d in rows:
            render.emit_json(d)
        return
    q = ans.question
    render.table(f"{len(rows)} tiered index item(s) for {q.topic}#{q.key} (IndexStoreService.queryAsync)",
                 ["queueId", "offset", "size", "topicId", "hashCode", "itemTime", "file", "fetcher"],
                 [[d["queueId"], d["offset"], d["size"], d["topicId"], d["hashCode"], local_time(d["itemTime"]),
                   d["fileTimestamp"], d.get("skippedByFetcher", "reads it")] for d in rows])


def _render_left_out(ans, view: str, json_out: bool) -> None:
    rejected = ans.rejected if view == "checked" else []
    if json_out:
        for m, why in rejected:
            render.emit_json({"rejected": {**m.broker_json(), "reason": why}})
        for s in ans.skipped if view != "raw" else []:
            render.emit_json({"skipped": {**_raw_item(s), "reason": s["reason"]}})
        for f in ans.index.per_file:
            render.emit_json({"file": f.as_dict()})
        return
    if rejected:
        render.table("left out: not the key's messages", ["commitLogOffset", "queueId", "storeSize", "reason"],
                     [[m.item["offset"], m.item["queueId"], m.item["size"], why] for m, why in rejected])
    if ans.skipped and view != "raw":
        render.table("index items the broker's fetcher skips", ["queueId", "offset", "topicId", "reason"],
                     [[s["queueId"], s["offset"], s["topicId"], s["reason"]] for s in ans.skipped])
    render.table("files asked (newest first)", ["fileTimestamp", "status", "items", "error"],
                 [[f.timestamp, f.status, len(f.items), f.error or ""] for f in ans.index.per_file])


def _closing_note(ans, view: str) -> None:
    q = ans.question
    shown = ans.index.items if view == "raw" else ans.kept if view == "checked" else ans.broker_messages
    if shown:
        if view == "checked" and ans.rejected:
            render.note(f"note: {len(ans.rejected)} message(s) of the broker's answer are not the key's "
                        "(--explain shows them)")
        return
    files = len(ans.index.per_file)
    why = [f"{len(ans.index.items)} index item(s) from {files} file(s) whose begin timestamp lies in "
           f"[{q.begin}, {q.end}]"]
    if ans.topic_id is None:
        why.append(f"topic {q.topic!r} is not in the tiered metadata")
    if ans.skipped:
        why.append(f"{len(ans.skipped)} skipped by the fetcher")
    if view == "checked" and ans.rejected:
        why.append(f"{len(ans.rejected)} not the key's (--explain)")
    render.note(f"note: no {'item' if view == 'raw' else 'message'} found for key {q.key!r} in topic {q.topic!r} ("
                + "; ".join(why) + ")")
