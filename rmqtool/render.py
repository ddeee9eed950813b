"""Rendering: tables for people on stdout (through rmqtool.tables), NDJSON for programs, messages and progress on stderr.

Light at import: rich is imported only when a console or a progress bar is first used (start-up, issue 13 item 3).
"""
from __future__ import annotations

import contextlib
import json
import os
import sys

# notes (silenced by --quiet) and problems (always printed) on stderr live in rmqtool.notes, which rmqtool.tables
# uses too; commands call them as render.note / render.problem
from rmqtool.notes import error_line, note, problem, set_json, set_quiet, state  # noqa: F401


def __getattr__(name: str):
    """`render.out` / `render.err`: rich consoles, made on first use (rich costs start-up time)."""
    if name in ("out", "err"):
        reset_consoles()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def reset_consoles() -> None:
    """Re-bind the consoles to the current sys.stdout/stderr (CliRunner swaps them per invocation)."""
    from rich.console import Console

    # Piped output is not cut to 80 columns: lines stay whole for grep and less.
    width = None if sys.stdout.isatty() else 220
    globals()["out"] = Console(file=sys.stdout, soft_wrap=True, highlight=False, width=width)
    globals()["err"] = Console(file=sys.stderr, highlight=False)


def forget_consoles() -> None:
    """Drop the consoles, so that the next use binds them to the current sys.stdout/stderr (without importing
    rich when the command never prints through one)."""
    globals().pop("out", None)
    globals().pop("err", None)


def emit_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def write_whole(text: str) -> None:
    """Text on stdout, every byte of it, now. A signal that interrupts a blocked write to a pipe (a slow reader)
    makes write(2) return short, and Python's text and buffer layers then drop the rest of that write (observed
    with 3.11: 64 KiB of a 200 KB write reached the pipe, the command exited 130 with its last line cut): the
    bytes go to the file descriptor in a loop here instead. Without a descriptor (a test's captured stdout) it is
    sys.stdout.write."""
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    view = memoryview(text.encode(sys.stdout.encoding or "utf-8", "surrogateescape"))
    while view:
        view = view[os.write(fd, view):]


def line(text: str = "") -> None:
    """One line of data on stdout, as it is (no markup, no wrapping)."""
    sys.stdout.write(text + "\n")


def table(title: str | None, columns: list[str], rows: list[list], **_kw) -> None:
    """A table of rows (lists, in column order) through rmqtool.tables: numbers never fold, a table too wide for
    the terminal drops to one block per record. Column kinds are read from the values."""
    from rmqtool import tables

    keys = [str(i) for i in range(len(columns))]
    dict_rows = [dict(zip(keys, r)) for r in rows]
    cols = []
    for i, (k, c) in enumerate(zip(keys, columns)):
        values = [r[i] if i < len(r) else None for r in rows]
        cols.append(tables.Column(k, c, tables.infer_kind(values), min_width=max(10, tables.longest_number(values))))
    tables.table(dict_rows, cols, title=title)


def kv_table(title: str, pairs: list[tuple[str, object]]) -> None:
    """Field/value pairs, one per line (the value wraps at spaces only; a number is never cut)."""
    from rmqtool import tables

    tables.table([{"field": k, "value": v} for k, v in pairs],
                 [tables.Column("field", "field", tables.FIXED),
                  tables.Column("value", "value", tables.TEXT, min_width=tables.NUMBER_WIDTH)],
                 title=title, header=False)


class _NoProgress:
    """What progress() gives when stderr is not a terminal: the same calls, nothing drawn, rich not imported."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def add_task(self, *args, **kwargs) -> int:
        return 0

    def update(self, *args, **kwargs) -> None:
        pass

    def advance(self, *args, **kwargs) -> None:
        pass


#: Environment variables that make rich treat a non-terminal stderr as a terminal.
_FORCE_TERMINAL_ENV = ("FORCE_COLOR", "TTY_INTERACTIVE", "TTY_COMPATIBLE")


def progress(total: int | None, description: str):
    """A progress bar on stderr (only when stderr is a terminal). It never captures stdout: data written while
    it runs (NDJSON acknowledgements, rows) goes straight to stdout, whatever stderr is."""
    if state["quiet"] or (not _stderr_is_terminal() and not any(map(os.environ.get, _FORCE_TERMINAL_ENV))):
        return _NoProgress()  # piped or redirected: no bar, and no ~30 ms of rich imports
    from rich.progress import Progress

    console = globals()["err"] if "err" in globals() else __getattr__("err")
    return Progress(*progress_columns(),
                    console=console, transient=True, disable=not console.is_terminal, redirect_stdout=False,
                    redirect_stderr=False)


def progress_columns() -> list:
    """The bar's columns: the description, then a bar and done/total while the total is known; while it is not
    (put reading a pipe, a phase not yet sized), the count alone: no bar drawn full at "0/?"."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.text import Text

    class Bar(BarColumn):
        def render(self, task):
            return Text("") if task.total is None else super().render(task)

    class Count(MofNCompleteColumn):
        def render(self, task):
            return Text(f"{int(task.completed):,}") if task.total is None else super().render(task)

    return [TextColumn("{task.description}"), Bar(), Count(), TimeElapsedColumn()]


@contextlib.contextmanager
def phase_progress(description: str):
    """progress() as the engine's Progress callback (phase, done, total): one bar, named after each phase."""
    with progress(None, description) as bar:
        task = bar.add_task(description, total=None)

        def report(phase: str, done: int, total: int) -> None:
            bar.update(task, description=phase, completed=done, total=total)

        yield report


def emit_plan(plan, dry_run: bool) -> None:
    """A repair's plan as its --json document, with whether it was a dry run and whether the store changed."""
    d = plan.as_dict()
    d["dryRun"] = dry_run
    d["changed"] = not dry_run and not plan.nothing_to_do
    emit_json(d)


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class gc_paused:
    """No cyclic garbage collection inside: streaming commands create and drop millions of small, acyclic objects
    (parsed JSON, records), which reference counting frees at once; the collector's passes over them only cost
    time (put and dump run 2-3x faster without them). Memory stays bounded by the batch."""

    def __enter__(self):
        import gc

        self._was = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, *exc):
        import gc

        if self._was:
            gc.enable()


def size_text(n: float) -> str:
    """A byte count (or rate) for a person: 512 B, 1.5 KiB, ... TiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def body_preview(j: dict, width: int = 40) -> str:
    if "compressionError" in j:  # never previewed as if the stored bytes were the message
        return f"<{j.get('compression')} body does not decode>"
    b = j.get("body") or ""
    if j.get("bodyEncoding") == "base64":
        return f"<{len(b) * 3 // 4} bytes binary>"
    b = b.replace("\n", "\\n")
    return b if len(b) <= width else b[: width - 1] + "…"
