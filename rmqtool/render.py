"""Rendering: rich tables for people on stdout, NDJSON for programs, messages and progress on stderr."""
from __future__ import annotations

import json
import sys
from datetime import datetime

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from engine.errors import InvalidArgumentError

out = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, highlight=False)


def reset_consoles() -> None:
    """Re-bind the consoles to the current sys.stdout/stderr (CliRunner swaps them per invocation)."""
    global out, err
    # Piped output is not cut to 80 columns: tables stay one row per line for grep and less.
    width = None if sys.stdout.isatty() else 220
    out = Console(file=sys.stdout, soft_wrap=True, highlight=False, width=width)
    err = Console(file=sys.stderr, highlight=False)


def emit_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def note(msg: str) -> None:
    """One message on stderr, never wrapped (a warning or a summary is one line, whatever the terminal width)."""
    err.print(msg, markup=False, soft_wrap=True)


def table(title: str | None, columns: list[str], rows: list[list], **kw) -> None:
    t = Table(title=title, **kw)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*["" if v is None else str(v) for v in r])
    out.print(t)


def kv_table(title: str, pairs: list[tuple[str, object]]) -> None:
    t = Table(title=title, show_header=False)
    t.add_column("field", style="bold")
    t.add_column("value", overflow="fold")
    for k, v in pairs:
        t.add_row(k, "" if v is None else str(v))
    out.print(t)


def progress(total: int | None, description: str) -> Progress:
    """A progress bar on stderr (only when stderr is a terminal). It never captures stdout: data written while
    it runs (NDJSON acknowledgements, rows) goes straight to stdout, whatever stderr is."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err, transient=True, disable=not err.is_terminal, redirect_stdout=False,
                    redirect_stderr=False)


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


def fmt_time(ms: int | None) -> str:
    """Epoch ms -> local ISO-8601 with milliseconds (the broker's index names use local time too)."""
    if ms is None:
        return ""
    if ms <= 0:
        return str(ms)
    try:
        return datetime.fromtimestamp(ms / 1000).astimezone().isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return str(ms)


def parse_time(text: str | None, default: int, what: str) -> int:
    """Epoch milliseconds or ISO-8601 (naive = local time) -> epoch ms."""
    if text is None:
        return default
    t = text.strip()
    if t.lstrip("-").isdigit():
        v = int(t)
        if not -(2**63) <= v < 2**63:
            raise InvalidArgumentError(f"{what} {text!r} is out of range")
        return v
    try:
        dt = datetime.fromisoformat(t)
    except ValueError:
        raise InvalidArgumentError(f"{what} {text!r} is not a time: use epoch milliseconds or ISO-8601") from None
    if dt.tzinfo is None:
        dt = dt.astimezone()
    return int(dt.timestamp() * 1000)


def body_preview(j: dict, width: int = 40) -> str:
    b = j.get("body", "")
    if j.get("bodyEncoding") == "base64":
        return f"<{len(b) * 3 // 4} bytes binary>"
    b = b.replace("\n", "\\n")
    return b if len(b) <= width else b[: width - 1] + "…"
