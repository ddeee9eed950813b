"""The note path of every command (docs/output-contract.md): notes on stderr that --quiet silences, and problems
(errors, warnings, damage) that it never does. rmqtool.render re-exports these; rmqtool.tables uses them too."""
from __future__ import annotations

import sys

#: --quiet of the command running now (rmqtool.cli.handles_errors sets it from the command's `quiet` option).
state = {"quiet": False}


#: A note that starts with one of these is a problem all the same, and prints under --quiet.
PROBLEMS = ("error:", "warning:")


def set_quiet(quiet: bool) -> None:
    state["quiet"] = bool(quiet)


def note(msg: str) -> None:
    """A note on stderr, one line whatever the terminal width: what was done or left out, an empty answer, a
    summary. --quiet silences it; errors and warnings go through problem()."""
    if state["quiet"] and not msg.startswith(PROBLEMS):
        return
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def problem(msg: str) -> None:
    """An error, a warning or damage on stderr, one line: printed whatever --quiet says (it explains a non-zero
    exit, or something the user must know)."""
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()
