"""The note path of every command (docs/output-contract.md): notes on stderr that --quiet silences, and problems
(errors, warnings, damage) that it never does. rmqtool.render re-exports these; rmqtool.tables uses them too.

Under --json each of them is one JSON object on its line of stderr, for a script to read:
{"note" | "warning" | "error": kind, "message": the text as printed without its label, ...fields}. The kind is
the note's stable name (engine.findings.Note, or the `kind` passed here), null for a line that has none yet. The
error that ends a command stays one `error: ...` line (cli.fail), whatever --json says."""
from __future__ import annotations

import json
import sys

#: --quiet and --json of the command running now (rmqtool.cli.handles_errors sets them from the command's
#: `quiet` and `json_out` options).
state = {"quiet": False, "json": False}


#: A note that starts with one of these is a problem all the same, and prints under --quiet.
PROBLEMS = ("error:", "warning:")
#: The label a line of text starts with -> the key naming its level in its JSON form. A line labelled note: or
#: not labelled keeps its path's level: "note" from note() (what --quiet silences), "warning" from problem().
LABELS = {"note: ": "note", "warning: ": "warning", "problem: ": "warning", "error: ": "error"}


def set_quiet(quiet: bool) -> None:
    state["quiet"] = bool(quiet)


def set_json(json_out: bool) -> None:
    state["json"] = bool(json_out)


def note(msg: str, kind: str | None = None, **fields) -> None:
    """A note on stderr, one line whatever the terminal width: what was done or left out, an empty answer, a
    summary. --quiet silences it; errors and warnings go through problem(). `kind` and `fields` (or those of an
    engine.findings.Note given as `msg`) are what --json prints besides the text."""
    if state["quiet"] and not msg.startswith(PROBLEMS):
        return
    _say(msg, "note", kind, fields)


def problem(msg: str, kind: str | None = None, **fields) -> None:
    """An error, a warning or damage on stderr, one line: printed whatever --quiet says (it explains a non-zero
    exit, or something the user must know)."""
    _say(msg, "warning", kind, fields)


def error_line(msg: str) -> None:
    """The `error: ...` line that ends a command: text in every output form (the contract for errors)."""
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def as_json(msg: str, level: str = "note", kind: str | None = None, fields: dict | None = None) -> dict:
    """The JSON form of a line of stderr: its level naming its kind, the text without its label, and the fields
    (the Note's, then the ones given). The level is `level` ("note" for note(), "warning" for problem()) unless
    the label says warning or error: a "note" is exactly what --quiet silences."""
    text = str(msg)
    for label, lv in LABELS.items():
        if text.startswith(label):
            text, level = text[len(label):], level if lv == "note" else lv  # a problem labelled note: a warning
            break
    own_kind, own = carried(msg)
    return {level: kind if kind is not None else own_kind, "message": text, **own, **(fields or {})}


def carried(msg) -> tuple[str | None, dict]:
    """(kind, fields) a line carries itself: an engine.findings.Note's (a config note's `file` among its fields),
    or (None, {}) for plain text. A caller that wraps the text (a label, a prefix) passes them on."""
    return getattr(msg, "kind", None), dict(getattr(msg, "fields", None) or {})


def _plain(value):
    """A field json cannot write as it is: a numpy number as its Python value, anything else (a path) as text."""
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)


def _say(msg: str, level: str, kind: str | None, fields: dict) -> None:
    line = json.dumps(as_json(msg, level, kind, fields), ensure_ascii=False, default=_plain) if state["json"] \
        else str(msg)
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
