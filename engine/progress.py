"""The progress callback every long-running engine call takes: progress(phase, done, total).

Phases are the caller's words ("scan", "build", "dispatch", ...); done and total count whatever that phase
counts (ranges, items, bytes). The CLI turns the calls into a progress bar on stderr.
"""
from __future__ import annotations

from typing import Callable

Progress = Callable[[str, int, int], None]


def no_progress(phase: str, done: int, total: int) -> None:
    """The callback of a caller that shows no progress."""
