"""rmqtool info: a store at a glance (engine.survey.info)."""
from __future__ import annotations

import typer

from engine.views.times import local_time
from rmqtool import render, tables
from rmqtool.cli import handles_errors
from rmqtool.leftovers import leftover_table, size_text
from rmqtool.options import STORE, JsonOpt, QuietOpt, StoreOptions, store_options

PLACEHOLDER_COLUMNS = [
    tables.Column("commitLogOffset", "commitLogOffset"),
    tables.Column("size", "bytes"),
    tables.Column("origin", "replaces (topic/queueId@queueOffset)", tables.FIXED),
    tables.Column("present", "present"),
    tables.Column("run", "quarantine run", tables.FIXED, drop=1),
]


def _t(ms) -> str:
    return "-" if ms is None else local_time(ms)


def _origin(o: dict | None) -> str:
    return "-" if not o else f"{o['topic']}/{o['queueId']}@{o['queueOffset']}"


def _pairs(d: dict) -> list[tuple[str, str]]:
    """The field/value lines of the text form, in the order of the JSON document."""
    return [("store", d["store"]), *_mode_pairs(d["mode"]), *_commit_log_pairs(d["commitLog"]), _consume_queues_pair(d["consumeQueues"]),
            *_index_pairs(d["index"]), *_checkpoint_pairs(d["checkpoint"]), _abort_pair(d["abort"]),
            _lock_pair(d), _config_files_pair(d["configFiles"]), *_leftover_pairs(d), *_tiered_pairs(d["tiered"]),
            *_timer_pairs(d["timer"]), *_epoch_pairs(d.get("epochFile"))]


def _epoch_pairs(ep: dict | None) -> list[tuple[str, str]]:
    """The controller-mode epoch file: its entries (epoch@startOffset), from which file, and its problems."""
    if ep is None:
        return []
    shown = ", ".join(f"{e['epoch']}@{e['startOffset']}" for e in ep["entries"][-8:]) or "none"
    more = f" (last 8 of {len(ep['entries'])})" if len(ep["entries"]) > 8 else ""
    src = {"file": "", "bak": " (from the .bak)"}.get(ep["source"] or "", "")
    out = [("epoch file", f"{len(ep['entries'])} epoch(s){src}: {shown}{more}")]
    out += [("epoch problem", p["detail"]) for p in ep["problems"]]
    return out


def _mode_pairs(m: dict) -> list[tuple[str, str]]:
    """The store's mode, what rmqtool cannot read in it and which writers refuse it (engine.broker.mode)."""
    out = [("mode", m["name"])]
    if m["unsupportedReads"]:
        out.append(("", "rmqtool cannot read " + "; ".join(m["unsupportedReads"])))
    refused = [w["writer"] for w in m["writers"] if not w["allowed"]]
    if refused and not m["fileStore"]:
        import textwrap  # the value column is 64 wide at 80 columns: one line each, never one long line

        out += [("", line) for line in textwrap.wrap("writers refused: " + ", ".join(refused), 62)]
    for c in m["conflicts"]:
        out.append(("", f"conflict: {c}"))
    return out


def _commit_log_pairs(cl: dict) -> list[tuple[str, str]]:
    from engine.views.sizes import format_bytes

    if not cl["segments"]:
        return [("commit log", "no segment files")]
    pairs = [("commit log", f"{cl['segments']} segment(s) of {format_bytes(cl['segmentSize'])}, "
                            f"{cl['firstSegment']} .. {cl['lastSegment']}"),
             ("", f"offsets {cl['minOffset']} .. {cl['maxOffset']}; {size_text(cl['bytes'])}")]
    if cl.get("endReason") and not cl["endReason"].startswith("end of data"):
        pairs.append(("", f"the log ends there: {cl['endReason']}"))
    dl = cl.get("dledger")
    if dl:  # DLedger: where its entries start (below: the old file commit log) and what its checkpoint commits
        committed = dl["committedOffset"] if dl["committedOffset"] is not None else "?"
        pairs.append(("", f"DLedger entries from {dl['dividedCommitlogOffset']}, committed to {committed}"))
    return pairs


def _consume_queues_pair(cq: dict) -> tuple[str, str]:
    if cq["queues"] is None:
        return ("consume queues", "not read (see mode)")
    return ("consume queues", ("in RocksDB: " if cq.get("source") == "rocksdb" else "")
            + f"{cq['topics']} topic(s), {cq['queues']} queue(s), {cq['files']} file(s); "
                              f"{size_text(cq['bytes'])}" + (f"; {cq['skipped']} entr(ies) skipped"
                                                          if cq["skipped"] else ""))


def _index_pairs(ix: dict) -> list[tuple[str, str]]:
    if not ix["files"]:
        return [("index", "no index files" if ix["present"] else "no index/ directory")]
    geom = (f"{ix['hashSlotNum']} slots x {ix['indexNum']} items (from the {ix['geometryFrom']})"
            if ix["hashSlotNum"] is not None else "geometry unknown (see the problems)")
    return [("index", f"{ix['files']} file(s), {geom}, "
                      f"{ix['items'] if ix['items'] is not None else '?'} item(s); {size_text(ix['bytes'])}"),
            ("", f"store times {_t(ix['firstStoreTimestamp'])} .. {_t(ix['lastStoreTimestamp'])}")]


def _checkpoint_pairs(cp: dict) -> list[tuple[str, str]]:
    if not cp["present"]:
        return [("checkpoint", "none")]
    if not cp["readable"]:
        return [("checkpoint", f"not usable: {cp.get('problem', '')} (reads do not need it; see "
                               "`rmqtool doctor`)")]
    return [("checkpoint", f"physicMsgTimestamp {_t(cp['physicMsgTimestamp'])}"),
            ("", f"logicsMsgTimestamp {_t(cp['logicsMsgTimestamp'])}"),
            ("", f"indexMsgTimestamp  {_t(cp['indexMsgTimestamp'])}")]


def _abort_pair(ab: dict) -> tuple[str, str]:
    return ("abort", "present: the last writer did not shut down cleanly (rmqtool recover)"
            + (f", PID {ab['pid']}" if ab["pid"] else "") if ab["present"] else "none")


def _lock_pair(d: dict) -> tuple[str, str]:
    pid = d["lockHolderPid"]
    return ("lock", ("held by a live broker or rmqtool" + (f" (PID {pid})" if pid else "")) if d["locked"]
            else "free")


def _config_files_pair(cf: list[dict]) -> tuple[str, str]:
    return ("config files", ", ".join(c["name"] + (" (+.bak)" if c["bak"] is not None else "")
                                      for c in cf) if cf else "none")


def _leftover_pairs(d: dict) -> list[tuple[str, str]]:
    """What rmqtool left in the store: quarantine runs, index backups, recovery placeholders, an unfinished
    reindex."""
    from engine.views.sizes import format_bytes

    pairs = []
    for key, label in (("quarantine", "quarantine"), ("backups", "index backups")):
        xs = d[key]
        total = sum(x["bytes"]["allocated"] for x in xs)
        pairs.append((label, f"{len(xs)} folder(s), {format_bytes(total)} on disk" if xs else "none"))
    ph = d["placeholders"]
    if ph:
        pairs.append(("recovery placeholders", f"{len(ph)}, {sum(p['present'] for p in ph)} still in the commit log "
                                               "(consumers of their queues receive them)"))
    if d["interruptedReindex"]:
        pairs.append(("interrupted reindex", ", ".join(d["interruptedReindex"])
                      + " (the next spark-reindex finishes or removes them)"))
    return pairs


def _tiered_pairs(t: dict | None) -> list[tuple[str, str]]:
    if t is None:
        return []
    pairs = [("tiered", f"{t['indexFiles']} local tiered index file(s), {size_text(t['indexBytes'])}; "
                        f"metadata {'present' if t['metadata'] is not None else 'missing'}"
                        + (" (+.bak)" if t["metadataBak"] is not None else ""))]
    if t["flatStore"] is not None:
        pairs += _flat_pairs(t["flatStore"])
    return pairs


def _timer_pairs(tm: dict | None) -> list[tuple[str, str]]:
    if tm is None:
        return []
    return [("timer", f"timerwheel {size_text(tm['wheel']) if tm['wheel'] else 'missing'}; "
                      f"timerlog {tm['logFiles']} file(s), {size_text(tm['logBytes'])}; timercheck "
                      f"{'present' if tm['checkpoint'] is not None else 'missing'}")]


def _flat_pairs(f: dict) -> list[tuple[str, str]]:
    """The external tiered store's lines of the text form."""
    pairs = [("tiered store", f["path"] + ("" if f["exists"] else " (no directory)"))]
    if f["brokerDir"] is None:
        who = f"broker {f['broker']!r}" if f["broker"] else "an unknown broker"
        pairs.append(("", f"nothing of {who} tiered" if f["exists"] else "not there"))
    else:
        seg = ", ".join(f"{n} {k}" for k, n in f["segments"].items())
        pairs += [("", f"{f['brokerDir']}: {f['topics']} topic(s), {f['queues']} queue(s)"),
                  ("", f"segments: {seg}; {size_text(f['bytes'])}")]
    if f["metadataTopics"] is not None:
        pairs.append(("", f"metadata ({f['metadataSource']}): {f['metadataTopics']} topic(s), "
                          f"{f['metadataQueues']} queue(s) loaded"))
    return pairs


@handles_errors
@store_options(STORE, ("tiered_store_path",))
def info(
    opts: StoreOptions,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """The store at a glance: commit log, consume queues, index, checkpoint, abort marker, lock, config files,
    the folders rmqtool left (quarantine runs with their recovery placeholders, index backups), and the tiered
    store when broker.conf's tieredStoreFilePath (or -T) gives one (its queues and segment files, listed).

    Read-only and fast on any size of store: directory listings, file headers and the small manifests; the
    commit log's max offset reads record headers of the last segment only. The lock is tested, never taken.
    Exits 3 when something could not be read (listed on stderr).
    """
    from engine.commands.info import info as store_info

    res = store_info(opts.settle(), tier=opts.tier())
    d = res.as_dict()
    if json_out:
        render.emit_json(d)
    else:
        render.kv_table(None, _pairs(d))
        xs = d["quarantine"] + d["backups"]
        if xs:
            render.line()
            leftover_table(xs, "folders rmqtool left (prune removes those it recognises as its own)")
        holders = d["placeholders"]
        if holders:
            render.line()
            rows = [dict(p, origin=_origin(p["origin"]), run=p["manifest"].split("/")[1]) for p in holders]
            tables.table(rows, PLACEHOLDER_COLUMNS, title="recovery placeholders (records recover wrote in place of "
                         "damaged bytes: consumers of those queues receive them)")
    for p in res.problems:
        render.problem(f"problem: {p}")
    if res.problems:
        raise typer.Exit(3)
