"""The one walker of a wheel slot's chain of timer-log units (timer §3): from the slot's lastPos along prevPos to -1.

The broker's dequeue walks it with no protection at all (a cycle keeps it in the slot forever, a pointer into
garbage hands it garbage offsets). This walker stops, and says why, at the first step the broker would go wrong
on: a position no file holds or that is not a unit boundary, a unit past the log's valid end, bytes that are not
a unit, a cycle. Every step is bounded: a chain cannot be longer than the units the log can hold.

Memory: a chain whose pointers all go backward cannot cycle, so positions are remembered only from the first
pointer that does not (every cycle has one); a caller that passes `visit` gets each unit as it is read and the
walk keeps none of them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from engine.timer.codec import UNIT_SIZE, TimerUnit
from engine.timer.files import TimerLogFiles

END, PAST_END, DELETED, BROKEN, NOT_A_UNIT, CYCLE = ("end", "past-end", "deleted-file", "broken", "not-a-unit",
                                                     "cycle")
#: Forward pointers a walk names one by one.
MAX_FORWARD_NOTED = 10


@dataclass
class ChainWalk:
    """How a chain walk went: its units (newest first, unless a visitor took them), its length, how it ended."""
    units: list[TimerUnit] = field(default_factory=list)
    count: int = 0               # units read
    oldest: int | None = None    # position of the last unit read (the chain's first, when complete)
    outcome: str = END
    at: int = -1                 # the position the walk stopped at (when outcome is not END)
    why: str = ""
    forward: list[int] = field(default_factory=list)  # units whose prevPos does not point backward

    @property
    def complete(self) -> bool:
        return self.outcome == END


def walk_chain(log: TimerLogFiles, last_pos: int, valid_end: int, max_steps: int | None = None,
               visit: Callable[[TimerUnit], None] | None = None) -> ChainWalk:
    """Walk from `last_pos`; a unit must start before `valid_end` (the broker truncates the log there)."""
    out = ChainWalk()
    if max_steps is None:
        max_steps = max(1, (log.max_pos - log.min_pos) // UNIT_SIZE + 1)
    seen: set[int] | None = None
    pos = last_pos
    while pos != -1:
        if seen is not None:
            if pos in seen:
                out.outcome, out.at = CYCLE, pos
                out.why = f"the chain comes back to position {pos}: the broker's dequeue would walk it forever"
                return out
            seen.add(pos)
        if out.count >= max_steps:
            out.outcome, out.at = CYCLE, pos
            out.why = f"the chain is longer than the {max_steps} units the timer log can hold"
            return out
        if pos >= valid_end:
            out.outcome, out.at = PAST_END, pos
            out.why = f"position {pos} is at or past the timer log's valid end {valid_end}"
            return out
        unit, why = log.unit_at(pos)
        if unit is None:
            out.outcome, out.at = (DELETED if 0 <= pos < log.min_pos else BROKEN), pos
            out.why = why
            return out
        if not unit.valid or unit.blank:
            out.outcome, out.at = NOT_A_UNIT, pos
            out.why = (f"the bytes at position {pos} are not a timer-log unit (size {unit.size}, "
                       f"magic {unit.magic})")
            return out
        out.count += 1
        out.oldest = pos
        if visit is None:
            out.units.append(unit)
        else:
            visit(unit)
        if unit.prev != -1 and unit.prev >= pos:
            if len(out.forward) < MAX_FORWARD_NOTED:
                out.forward.append(pos)
            if seen is None:
                seen = {pos}
        pos = unit.prev
    return out
