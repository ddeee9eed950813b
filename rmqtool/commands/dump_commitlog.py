"""rmqtool dump-commitlog: the commit log in order, damage reported where it is met (a CORRUPT, MISPLACED or GAP
entry) and in the exit code.

It streams (rmqtool.records): memory does not grow with the number of messages and `| head` answers at once.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from rmqtool import render, times
from rmqtool.cli import handles_errors
from rmqtool.options import STORE, JsonOpt, QuietOpt, StoreOptions, WorkersOpt, store_options, values
from rmqtool.records import MESSAGE, open_table, undecoded_notes, warn_problems
from rmqtool.tables import stdout_fd

DUMP_LIMIT = 1_000_000_000
#: The kinds of the summary lines dump-commitlog says (--json: rmqtool.notes; engine.findings.Note has the others:
#: a segment file's problem, a body that does not decode): bodies written to --body-dir; damaged entries met;
#: compressed bodies that do not decode.
BODIES_WRITTEN, DAMAGED_ENTRIES, BODIES_UNDECODABLE = "bodies-written", "damaged-entries", "bodies-undecodable"


# one parameter per option: typer builds the command from the signature
@handles_errors
@store_options(STORE, ("commitlog_file_size",))
def dump_commitlog(
    opts: StoreOptions,
    topic: Annotated[Optional[str], typer.Option("--topic", "-t", help="Only messages of this topic.")] = None,
    begin: Annotated[Optional[str], typer.Option("--begin", "-b", help=times.BEGIN_HELP)] = None,
    end: Annotated[Optional[str], typer.Option("--end", "-e", help=times.END_HELP)] = None,
    from_offset: Annotated[Optional[int], typer.Option("--from-offset", help="Start at this commit-log offset, a "
                                                       "record boundary (default: the first segment).")] = None,
    to_offset: Annotated[Optional[int], typer.Option("--to-offset", help="Stop before this commit-log offset "
                                                     "(exclusive).")] = None,
    files: Annotated[Optional[List[str]], typer.Option("--files", help="Only these segment files of the store "
                                                       "(20-digit names; repeatable or comma-separated, as "
                                                       "kafka-dump-log --files). Without --store: segment files "
                                                       "read on their own (copied out of a store), the segment "
                                                       "size taken from the file.")] = None,
    count: Annotated[Optional[int], typer.Option("--count", "-n", help="At most this many entries.")] = None,
    body: Annotated[str, typer.Option("--body", help="How --json shows bodies: utf8 (undecodable bytes "
                                      "replaced), hex, base64 or none (default: UTF-8 text, else base64).",
                                      metavar="none|utf8|hex|base64",
                                      autocompletion=values("none", "utf8", "hex", "base64"))] = "auto",
    body_dir: Annotated[Optional[Path], typer.Option("--body-dir", help="Also write each body to DIR/<20-digit "
                                                     "commit-log offset>.body (DIR outside the store, new or "
                                                     "empty).", file_okay=False)] = None,
    max_message_size: Annotated[Optional[int], typer.Option("--max-message-size", help="A record whose TOTALSIZE "
                                                            "is above this is reported CORRUPT, not trusted (the rest "
                                                            "of its segment is skipped).")] = None,
    no_check_crc: Annotated[bool, typer.Option("--no-check-crc", help="Do not verify body CRCs.")] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    workers: WorkersOpt = None,
) -> None:
    """Messages in commit-log order, with BLANK fillers, corrupt records, misplaced segments and gaps reported
    (not skipped silently); filtered by topic, store time, offset range or segment files.

    Streams NDJSON (--json) or a plain table, one row per line. Exits 3 when something damaged was met.

    The offset range and --files seek (nothing before them is read); damage inside them is shown whatever
    --topic and --begin/--end say.
    """
    from engine.commands.dump_commitlog import dump_commitlog as run_dump, dump_filter

    _check_dump_options(count, body, json_out)
    b, e = times.parse_range(begin, end)
    alone = opts.store is None and opts.broker_conf is None and bool(files)  # segment files read on their own
    flt = dump_filter(topic, b, e, from_offset, to_offset, None if alone else files, max_message_size,
                      not no_check_crc)
    cfg = None if alone else opts.settle()
    with run_dump(cfg, flt, files if alone else None, opts.commitlog_file_size, body_dir, body, json_out, count,
                  stdout_fd() if json_out else None) as ans:
        if ans.spooled:
            _dump_spooled(ans)  # segments formatted by worker processes, written in log order
            return
        warn_problems(ans.source)
        bodies = ans.bodies
        if bodies is not None:
            bodies.create()
        with render.gc_paused():
            bad, undecoded = _dump(ans.entries, count, json_out, body, bodies)
    _dump_summary(bodies, body_dir, bad, undecoded)


def _dump_summary(bodies, body_dir: Optional[Path], bad: int, undecoded: int) -> None:
    """The bodies written, the damage met and the bodies that do not decode, on stderr; exit 3 after damage."""
    from engine.commands.dump_commitlog import exit_code

    if bodies is not None:
        render.note(f"{bodies.written} bod{'y' if bodies.written == 1 else 'ies'} written to {body_dir}"
                    + (f" ({bodies.undecoded} that do not decode as stored, to <offset>.stored)"
                       if bodies.undecoded else ""), BODIES_WRITTEN, bodies=bodies.written,
                    storedOnly=bodies.undecoded, dir=str(body_dir))
    if bad:
        render.problem(f"{bad} damaged entr{'y' if bad == 1 else 'ies'} found (corrupt, misplaced or missing)",
                       DAMAGED_ENTRIES, entries=bad)
    if undecoded:
        render.problem(f"{undecoded} compressed bod{'y does' if undecoded == 1 else 'ies do'} not decode",
                       BODIES_UNDECODABLE, bodies=undecoded)
    if exit_code(bad, undecoded):
        raise typer.Exit(exit_code(bad, undecoded))


def _dump_spooled(ans) -> None:
    """dump-commitlog --json on worker processes (engine.broker.commitlog.dump.dump_json_spooled): the same lines
    and exit. Each segment's worker writes its lines to stdout itself when its turn comes (take()); spool files are
    copied out here only where stdout is no file descriptor."""
    from engine.commands.dump_commitlog import entry_json, undecodable_note

    out, _ = open_table(True)
    entries = ans.entries
    warn_problems(ans.source)
    bad = undecoded = 0
    for e in entries:
        if hasattr(e, "take"):
            out.flush()  # everything before the segment is out before its worker writes (its turn)
            seg = e.take()
            for chunk in seg.chunks():
                out.data(chunk)
            bad += seg.damaged
            undecoded += len(seg.notes)
            for off, codec, why in seg.notes:
                render.note(undecodable_note(off, codec, why))
            continue
        bad += 1  # a GAP between segment files
        out.line(entry_json(e))
    out.flush()
    _dump_summary(None, None, bad, undecoded)


def _check_dump_options(count, body: str, json_out: bool) -> None:
    """The options dump-commitlog checks itself (the filter, DumpFilter.check, checks the offsets and the rest)."""
    from engine.views.recordjson import BODY_MODES
    from engine.errors import InvalidArgumentError

    if count is not None and not 0 < count <= DUMP_LIMIT:
        raise InvalidArgumentError(f"--count {count} is out of range 1..{DUMP_LIMIT}")
    if body not in BODY_MODES:
        raise InvalidArgumentError(f"--body {body!r} is not one of none, utf8, hex, base64")
    if body != "auto" and not json_out:
        raise InvalidArgumentError("--body shapes the --json output (the table has no body column): add --json, "
                                   "or use --body-dir")


def _dump(entries, count, json_out: bool, body: str, bodies) -> tuple[int, int]:
    """Write the entries; returns how many were damage (not VALID, not BLANK) and how many compressed bodies do
    not decode."""
    from engine.commands.dump_commitlog import RecordRun, is_damage
    from engine.views.recordjson import run_table_rows
    from engine.views.runjson import run_json_text

    out, table = open_table(json_out)
    bad = n = undecoded = 0
    for e in entries:
        if count is not None and n >= count:
            break
        if isinstance(e, RecordRun):
            if count is not None and n + len(e) > count:
                e = e.head(count - n)
            n += len(e)
            if bodies is not None:
                bodies.write_run(e)
            if json_out:
                out.data(run_json_text(e, ', "type": "MESSAGE"', body))
            else:
                table.rows(run_table_rows(e), MESSAGE)
            undecoded += undecoded_notes(out, e)
            continue
        n += 1
        bad += is_damage(e)
        if json_out:
            out.line(json.dumps({"type": e.kind, "commitLogOffset": e.offset, "size": e.size, "segment": e.segment,
                                 "reason": e.reason}, ensure_ascii=False))
        else:
            table.values({"offset": e.offset, "type": e.kind, "size": e.size if e.size >= 0 else "", "note": e.reason})
    out.flush()
    return bad, undecoded
