"""Tables that read at 80 columns (issue 14 item 8): one renderer for every command.

The rules: a number (and any other NUM or FIXED cell: times, ids) is never folded across lines; only TEXT
cells wrap. When the columns cannot fit the terminal, the columns with a drop rank are left out, highest rank
first, with a note on stderr; when even that is too wide, every record is printed as a vertical block (field,
value), nothing left out. The terminal width is COLUMNS when set, else the terminal's, else (output piped) WIDE,
so piped tables keep one row per line. --json output never comes through here, so it never depends on the width.

Rows may be streamed (Stream.row writes and flushes each one): widths are then planned from the header and the
caller's hints, and a value wider than its hint widens its own line rather than fold. The read paths that stream
millions of rows (dump-commitlog, get) use RowStream: the same plan, each row formatted by one %-template and the
lines written in batches by a LineWriter (which also carries their NDJSON).
"""
from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass
from operator import itemgetter

from rich.cells import cell_len

NUM, FIXED, TEXT = "num", "fixed", "text"
_INT = re.compile(r"-?\d+")
_DIGITS = re.compile(r"[-+]?[\d.,]+")
GAP = "  "
WIDE = 220
NARROWEST = 20
#: Lines a LineWriter writes between two flushes once the first line is out (the first goes out alone: `| head -1`).
FLUSH_LINES = 512
#: The widest number a cell holds (a Java long with its sign): a TEXT column that may hold numbers never wraps below it.
NUMBER_WIDTH = 20


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    kind: str = NUM        # NUM: right-aligned; FIXED: left-aligned; neither ever folds. TEXT: wraps.
    drop: int = 0          # 0: always shown; otherwise dropped when too wide, the highest rank first
    min_width: int = 10    # TEXT: the narrowest it may wrap to


def terminal_width() -> int:
    """COLUMNS when set (tests and scripts pin it), else the terminal's width, else WIDE for piped output."""
    env = os.environ.get("COLUMNS", "").strip()
    if env.isdigit() and int(env) > 0:
        return max(NARROWEST, int(env))
    if sys.stdout.isatty():
        return max(NARROWEST, shutil.get_terminal_size((80, 24)).columns)
    return WIDE


#: The kinds of the notes said here (their --json form, rmqtool.notes): a limit cut the answer; columns were left
#: out of a table, or each record became a block, to fit the terminal; a table without rows.
COUNT_CUT, COLUMNS_LEFT_OUT, BLOCKS, EMPTY_ANSWER = "count-cut", "columns-left-out", "one-block-per-record", \
    "empty-answer"


def note(message: str, kind: str | None = None, **fields) -> None:
    """`note: ...` on stderr, silenced by --quiet (rmqtool.notes); `kind` and `fields` (or those of an
    engine.findings.Note given as `message`) are what --json prints besides the text."""
    from rmqtool import notes

    own_kind, own = notes.carried(message)
    notes.note(f"note: {message}", kind if kind is not None else own_kind, **{**own, **fields})


def cut_note(shown: int, limit_flag: str, what: str, total: int | None = None, at_least: int | None = None) -> None:
    """Say on stderr that --count (or another limit) cut a result, with the total when it is known (--json:
    kind count-cut, fields shown, limit (the option), total or atLeast when known)."""
    fields = {"shown": shown, "limit": limit_flag}
    if total is not None:
        note(f"showing the first {shown} of {total} {what} ({limit_flag} {shown})", COUNT_CUT, **fields, total=total)
    elif at_least is not None:
        note(f"showing the first {shown} {what} ({limit_flag} {shown}); up to {at_least} in all "
             "(the exact total is not known without reading them all)", COUNT_CUT, **fields, atLeast=at_least)
    else:
        note(f"showing the first {shown} {what} ({limit_flag} {shown}); more may follow", COUNT_CUT, **fields)


def infer_kind(values) -> str:
    """The kind of a column from its values: NUM when every value is an integer, TEXT when some value has spaces
    (it may wrap there), else FIXED (names, paths, times: never folded)."""
    texts = [cell(v) for v in values if v is not None and v != ""]
    if texts and all(isinstance(v, int) and not isinstance(v, bool) or _INT.fullmatch(cell(v))
                     for v in values if v is not None and v != ""):
        return NUM
    return TEXT if any(" " in t for t in texts) else FIXED


def longest_number(values) -> int:
    """The widest number (a run of digits) in any of the values: a TEXT column holding them never wraps below it."""
    return max((len(m) for v in values for m in _DIGITS.findall(cell(v))), default=0)


def cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    return str(value).replace("\n", "\\n").replace("\r", "\\r").replace("\t", " ")


class Stream:
    """A table printed row by row. `hints` gives the expected widest value of a column (by key)."""

    def __init__(self, columns: list[Column], hints: dict[str, int] | None = None, title: str | None = None,
                 width: int | None = None, out=None, header: bool = True):
        self.out = out or sys.stdout
        self.header = header
        self.width = width or terminal_width()
        self.columns = list(columns)
        self.title = title
        natural = {c.key: max(cell_len(c.header) if header else 0, (hints or {}).get(c.key, 0)) for c in columns}
        self.shown, self.widths, self.dropped = _plan(self.columns, natural, self.width)
        self.vertical = self.shown is None
        self._started = False
        self.count = 0

    def _start(self) -> None:
        self._started = True
        if self.dropped:
            note(f"{', '.join(c.header for c in self.dropped)} left out to fit {self.width} columns "
                 "(a wider terminal, COLUMNS=..., or --json shows every field)", COLUMNS_LEFT_OUT,
                 columns=[c.key for c in self.dropped], width=self.width)
        elif self.vertical:
            note(f"the table is too wide for {self.width} columns: one block per record "
                 "(a wider terminal, COLUMNS=..., or --json gives one row per record)", BLOCKS, width=self.width)
        if self.title:
            for part in _wrap(self.title, self.width):  # a title naming a long path wraps, as TEXT does
                self._write(part)
        if not self.vertical and self.header:
            self._write(GAP.join(_pad(c.header, self.widths[c.key], c.kind) for c in self.shown).rstrip())
            self._write(GAP.join("-" * self.widths[c.key] for c in self.shown))

    def shows(self, key: str) -> bool:
        """Whether the column `key` is printed (callers repeat a dropped column's important values on stderr)."""
        return self.vertical or any(c.key == key for c in self.shown)

    def row(self, values: dict) -> None:
        if not self._started:
            self._start()
        self.count += 1
        if self.vertical:
            self._vertical(values)
        else:
            self._row(values)
        self.out.flush()

    def rows(self, rows) -> None:
        for r in rows:
            self.row(r)

    def finish(self, empty: str | None = None) -> None:
        """End the table. A table without rows prints nothing on stdout, neither its title nor its header: an empty
        answer says so on stderr (docs/output-contract.md), with `empty` as a note (silenced by --quiet)."""
        if not self.count:
            if empty:
                note(empty.strip("()"), EMPTY_ANSWER)
            return
        self.out.flush()

    def _write(self, line: str) -> None:
        self.out.write(line + "\n")

    def _row(self, values: dict) -> None:
        cells = {c.key: cell(values.get(c.key)) for c in self.shown}
        parts = {c.key: (_wrap(cells[c.key], self.widths[c.key]) if c.kind == TEXT else [cells[c.key]])
                 for c in self.shown}
        height = max(len(p) for p in parts.values())
        for i in range(height):
            line = GAP.join(_pad(parts[c.key][i] if i < len(parts[c.key]) else "", self.widths[c.key], c.kind)
                            for c in self.shown)
            self._write(line.rstrip())

    def _vertical(self, values: dict) -> None:
        """One block per record: `field  value`; a value that does not fit beside its name goes below it,
        indented (a number or time whole, text wrapped)."""
        name_w = max(cell_len(c.header) for c in self.columns)
        beside = self.width - name_w - len(GAP)
        head = f"-[ {self.count} ]"
        self._write(head + "-" * max(0, min(self.width, 40) - len(head)))
        for c in self.columns:
            text = cell(values.get(c.key))
            if cell_len(text) <= beside or (c.kind == TEXT and beside >= NARROWEST // 2):
                lines = _wrap(text, beside) if c.kind == TEXT else [text]
                for i, part in enumerate(lines):
                    self._write(((c.header if i == 0 else "").ljust(name_w) + GAP + part).rstrip())
                continue
            self._write(c.header)
            for part in (_wrap(text, self.width - len(GAP)) if c.kind == TEXT else [text]):
                self._write(GAP + part)


class LineWriter:
    """Lines to stdout, flushed after the first one and then every FLUSH_LINES: a streamed answer shows its first
    line at once and costs one write per batch of lines after that."""

    def __init__(self):
        self._buf: list[str] = []
        self._first = True

    def line(self, text: str) -> None:
        self._buf.append(text)
        if self._first or len(self._buf) >= FLUSH_LINES:
            self._first = False
            self.flush()

    def lines(self, texts: list[str]) -> None:
        if self._first and texts:
            self.line(texts[0])
            texts = texts[1:]
        self._buf += texts
        if len(self._buf) >= FLUSH_LINES:
            self.flush()

    def data(self, chunk: bytes) -> None:
        """Many lines at once, UTF-8 encoded (each ending with "\\n"), written and flushed now: one write per run
        of records."""
        self.flush()
        self._first = False
        if chunk:
            raw = getattr(sys.stdout, "buffer", None)
            if raw is not None and _utf8_stdout():
                raw.write(chunk)
            else:
                sys.stdout.write(chunk.decode("utf-8", "surrogateescape"))
        sys.stdout.flush()

    def flush(self) -> None:
        if self._buf:
            text = "\n".join(self._buf) + "\n"
            self._buf.clear()
            raw = getattr(sys.stdout, "buffer", None)
            if raw is not None and _utf8_stdout():
                sys.stdout.flush()  # whatever the text layer holds goes first
                raw.write(text.encode("utf-8", "surrogateescape"))
            else:
                sys.stdout.write(text)
        sys.stdout.flush()


def _utf8_stdout() -> bool:
    return (sys.stdout.encoding or "").lower().replace("-", "") == "utf8"


def stdout_fd() -> int | None:
    """The file descriptor of the output when UTF-8 lines may be written to it as bytes by any process (worker
    processes inherit it: dump-commitlog --json's write their segments' lines themselves), else None (an output
    that is no file descriptor, as a test's captured one, or that is not UTF-8: lines go through LineWriter)."""
    raw = getattr(sys.stdout, "buffer", None)
    if raw is None or not _utf8_stdout():
        return None
    try:
        return raw.fileno()
    except (OSError, ValueError):
        return None


class _LineSink:
    """A Stream's output (write(text) of whole lines, flush()) through a LineWriter."""

    def __init__(self, lines: LineWriter):
        self._lines = lines

    def write(self, text: str) -> None:
        for line in text.rstrip("\n").split("\n"):
            self._lines.line(line)

    def flush(self) -> None:
        self._lines.flush()


class RowStream(Stream):
    """A table of many streamed rows, planned as Stream plans it (columns dropped to fit, with a note; one block
    per record when even that is too wide) but each row formatted by one %-template, widths counted in characters:
    a value wider than its column pushes its row on, never folds. Lines go out through `lines` (a LineWriter),
    which the caller may also give its own lines (records that are not rows: none here)."""

    def __init__(self, columns: list[Column], hints: dict[str, int], lines: LineWriter, width: int | None = None):
        super().__init__(columns, hints, width=width, out=_LineSink(lines))
        self.lines = lines
        self._formats: dict[tuple, object] = {}

    def start(self) -> None:
        """The header now (and the note of what was left out), before any row."""
        if not self._started:
            self._start()

    def rows(self, rows, fixed: dict[str, str] | None = None) -> None:
        """Rows as tuples of the values of the columns not in `fixed`, in column order; `fixed` gives the value
        of some columns for every row (written into the template once)."""
        self.start()
        fixed = fixed or {}
        keys = [c.key for c in self.columns if c.key not in fixed]
        if self.vertical:
            for r in rows:
                self.row({**dict(zip(keys, r)), **fixed})
            return
        fmt = self._formats.get(tuple(fixed.items()))
        if fmt is None:
            fmt = self._formats[tuple(fixed.items())] = self._format(keys, fixed)
        self.count += len(rows)
        self.lines.lines(fmt(rows))

    def values(self, values: dict) -> None:
        """One row given by column key (missing keys are empty)."""
        self.rows([tuple(values.get(c.key, "") for c in self.columns)])

    def _format(self, keys: list[str], fixed: dict[str, str]):
        parts, pick = [], []
        for c in self.shown:
            w = self.widths[c.key]
            if c.key in fixed:
                parts.append(_pad(fixed[c.key], w, c.kind).replace("%", "%%"))
            else:
                parts.append(("%" if c.kind == NUM else "%-") + f"{w}s")
                pick.append(keys.index(c.key))
        tmpl = GAP.join(parts)
        if pick == list(range(len(keys))):
            return lambda rows: list(map(str.rstrip, map(tmpl.__mod__, rows)))
        get = itemgetter(*pick) if len(pick) > 1 else (lambda r, i=pick[0]: (r[i],))
        return lambda rows: list(map(str.rstrip, map(tmpl.__mod__, map(get, rows))))


def table(rows: list[dict], columns: list[Column], title: str | None = None, width: int | None = None,
          empty: str | None = None, out=None, header: bool = True) -> Stream:
    """A whole table at once: widths come from the rows themselves. Returns the Stream (see Stream.shows).
    header=False: no header line (field/value lists)."""
    hints = {c.key: max((cell_len(cell(r.get(c.key))) for r in rows), default=0) for c in columns}
    s = Stream(columns, hints, title=title, width=width, out=out, header=header)
    s.rows(rows)
    s.finish(empty)
    return s


# ------------------------------------------------------------------------------------------- layout


def _plan(columns: list[Column], natural: dict[str, int], width: int):
    """(shown columns, widths, dropped columns), or (None, {}, []) for the vertical layout."""
    shown = list(columns)
    dropped: list[Column] = []
    while True:
        widths = _fit(shown, natural, width)
        if widths is not None:
            return shown, widths, dropped
        droppable = [c for c in shown if c.drop]
        if not droppable:
            return None, {}, []
        victim = max(droppable, key=lambda c: c.drop)
        shown.remove(victim)
        dropped.append(victim)


def _fit(columns: list[Column], natural: dict[str, int], width: int) -> dict[str, int] | None:
    """Widths that fit `width`: fixed columns at their natural width, text columns shrunk towards min_width."""
    widths = {c.key: natural[c.key] for c in columns}
    room = width - len(GAP) * (len(columns) - 1) - sum(widths[c.key] for c in columns if c.kind != TEXT)
    text = sorted((c for c in columns if c.kind == TEXT), key=lambda c: natural[c.key])
    mins = [min(natural[c.key], c.min_width) for c in text]
    if room < sum(mins):
        return None
    for i, c in enumerate(text):
        share = min(room // (len(text) - i), room - sum(mins[i + 1:]))
        widths[c.key] = max(mins[i], min(natural[c.key], share))
        room -= widths[c.key]
    return widths


def _pad(text: str, width: int, kind: str) -> str:
    fill = " " * max(0, width - cell_len(text))
    return fill + text if kind == NUM else text + fill


def _wrap(text: str, width: int) -> list[str]:
    """Greedy word wrap by terminal cells; a word longer than the width is cut (TEXT cells only)."""
    if cell_len(text) <= width:
        return [text]
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        candidate = f"{line} {word}" if line else word
        if cell_len(candidate) <= width:
            line = candidate
            continue
        if line:
            lines.append(line)
        line = ""
        while cell_len(word) > width:
            cut = _cut(word, width)
            lines.append(word[:cut])
            word = word[cut:]
        line = word
    if line or not lines:
        lines.append(line)
    return lines


def _cut(word: str, width: int) -> int:
    used = 0
    for i, ch in enumerate(word):
        used += cell_len(ch)
        if used > width:
            return max(1, i)
    return len(word)
