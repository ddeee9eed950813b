"""rmqtool doctor: what will stop a broker, or lose or hide messages or state, at its next start; and the rmqtool
command that fixes each problem. Read-only: parses options, calls engine.survey.doctor.doctor, renders."""
from __future__ import annotations

import textwrap
from typing import Annotated, Optional

import typer

from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.options import GEOMETRY, STORE, JsonOpt, StoreOptions, store_options
from rmqtool.options import WorkersOpt

WIDTH = 80  # at most: the terminal's width when it is narrower (COLUMNS=40), see width()
_LABEL = {"error": "ERROR", "warning": "WARN ", "info": "info "}


def width() -> int:
    """The text's width: WIDTH, or a narrower terminal's (rmqtool.tables.terminal_width)."""
    from rmqtool.tables import terminal_width

    return min(WIDTH, terminal_width())


def _wrap(text: str, first: str, rest: str) -> list[str]:
    return textwrap.wrap(text, width(), initial_indent=first, subsequent_indent=rest, break_long_words=True,
                         break_on_hyphens=False) or [first.rstrip()]


def command_lines(cmd: str, indent: str, more: str) -> list[str]:
    """A command line cut to WIDTH columns with shell continuations (` \\`), so that it still runs when pasted; a
    word too long for a line of its own (a deep path) is cut too (word_lines)."""
    import shlex

    lines, cur = [], indent
    words = shlex.split(cmd)
    for i, w in enumerate(words):
        q = shlex.quote(w)
        sep = "" if cur in (indent, more) else " "
        if len(cur) + len(sep) + len(q) + 2 > width() and cur not in (indent, more):
            lines.append(cur + " \\")
            cur, sep = more, ""
        tail = 2 if i + 1 < len(words) else 0   # room for the ` \\` a later word may need
        if len(cur) + len(sep) + len(q) + tail > width():
            *full, last = word_lines(w, width() - len(cur) - len(sep), tail)
            lines += [cur + sep + full[0], *full[1:]]
            cur = last
            continue
        cur += sep + q
    lines.append(cur)
    return lines


def word_lines(word: str, room: int, tail: int = 0) -> list[str]:
    """A word cut into shell-quoted pieces, each but the last ending in a backslash: the shell removes a
    backslash-newline before it splits words, so the pieces are the one word again. The first piece fits `room`
    columns, the others start at column 0 (an indent there would end the word) and fit WIDTH, the last with `tail`
    columns to spare; a cut falls after a `/` where one is near the end of the piece."""
    import shlex

    out = []
    while True:
        if len(shlex.quote(word)) + tail <= room:
            out.append(shlex.quote(word))
            return out
        n = max(1, room - 1)                     # the backslash takes a column
        while n > 1 and len(shlex.quote(word[:n])) > room - 1:
            n -= 1
        slash = word.rfind("/", 0, n)
        if slash >= n // 2:
            n = slash + 1
        out.append(shlex.quote(word[:n]) + "\\")
        word, room = word[n:], width()


def render_text(rep) -> None:
    for file, items in rep.by_file():
        render.line(file)
        for f in items:
            where = f" @{f.offset}" if f.offset is not None else ""
            for ln in _wrap(f"{f.kind}{where}: {f.problem}", f"  {_LABEL[f.severity]} ", "        "):
                render.line(ln)
            for ln in _wrap(f"broker: {f.broker_will}", "        ", "          "):
                render.line(ln)
            if f.fix:
                for ln in command_lines(f.fix, "        fix: ", "            "):
                    render.line(ln)
    c = rep.counts()
    est = rep.estimates.get("brokerRecovery")
    if est:
        for ln in _wrap(f"broker recovery: abnormal, {est['bytesToScan']} bytes to read, about "
                        f"{est['estimatedSeconds']:.0f} s (estimate)", "", ""):
            render.line(ln)
    status = "healthy" if rep.healthy else "NOT healthy"
    for ln in _wrap(f"{status}: {c['error']} error(s), {c['warning']} warning(s), {c['info']} info", "", ""):
        render.line(ln)
    cmds = rep.commands()
    if cmds:
        render.line("commands to run, in this order" + (" (after stopping the broker):" if rep.locked_by_broker
                                                          else ":"))
        for cmd in cmds:
            for ln in command_lines(cmd, "  ", "      "):
                render.line(ln)


@handles_errors
@store_options(STORE, GEOMETRY + ("tiered_store_path",))
def doctor(
    opts: StoreOptions,
    deep: Annotated[bool, typer.Option("--deep", help="Read the whole commit log (every record and its CRC, "
                                       "every index item) and check the bodies of pending timer messages, not "
                                       "just what the broker's start-up reads.")] = False,
    now: Annotated[Optional[str], typer.Option("--now", help="Judge time rules (the timer wheel keeps 7 days) as "
                                               "if the broker started at this time: epoch ms or ISO-8601 (default: "
                                               "now).")] = None,
    json_out: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-Q", help="No notes on stderr.")] = False,
    workers: WorkersOpt = None,
) -> None:
    """Find what will stop a broker, or make it lose or hide messages or state, at its next start: the lock, the
    abort marker and checkpoint (with an estimate of the broker's recovery time), the commit log, consume queues
    and index as recovery reads them, every config/*.json with its .bak, the timer store, and the tiered store
    when broker.conf's tieredStoreFilePath (or -T) gives one: its metadata and `tiered verify`'s checks.

    Each finding has a severity (error: the broker will not start, or starts and loses or hides messages or
    state), the file and offset, the problem, what the broker will do, and the rmqtool command that fixes it
    (none when only a person can decide: the problem says what to do). The text groups findings by file, worst
    first, and ends with the commands to run; --json prints one document. Never writes; a running broker is
    reported and left alone. Exits 0 when there is no error finding, 3 when there is one.
    """
    from engine.commands.doctor import doctor as run_doctor
    from rmqtool import times

    at = times.parse_time(now, "--now") if now is not None else None
    cfg, args = opts.settle(), opts.args()  # the fixes repeat the options that name the store
    with render.progress(None, "doctor") as bar:
        task = bar.add_task("doctor", total=None)

        def progress(phase: str, done: int, total: int) -> None:
            bar.update(task, description=phase, completed=done, total=total)

        rep = run_doctor(cfg, args, now=at, deep=deep, progress=progress, tier=opts.tier())
    if json_out:
        render.emit_json(rep.as_dict())
    else:
        render_text(rep)
    if not quiet:
        for n in rep.notes:
            render.note(f"note: {n}")
    if not rep.healthy:
        raise typer.Exit(3)
