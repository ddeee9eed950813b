"""The doctor's answer: findings (each located, with what the broker does at its next start and the command that
fixes it) and a summary. Plain data; the CLI renders it (docs/doctor.md lists every kind)."""
from __future__ import annotations

import shlex
from collections import Counter
from dataclasses import dataclass, field

from engine.findings import ERROR, INFO, RANK, WARNING, Finding

#: Doctor's findings are engine.findings.Finding, the verifiers' type, with `fix` set: an rmqtool command line
#: runnable as printed, or None when only a person can decide (then `problem` says the manual step).


@dataclass
class DoctorReport:
    store: str
    findings: list[Finding] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)        # the areas looked at, in order
    locked_by_broker: bool = False
    estimates: dict = field(default_factory=dict)           # e.g. the broker's recovery: bytes and seconds
    read: dict = field(default_factory=dict)                # what doctor walked (the commit-log range, ...)
    notes: list[str] = field(default_factory=list)
    mode: dict = field(default_factory=dict)                # engine.broker.mode.StoreMode.as_dict()

    def sort(self) -> None:
        self.findings.sort(key=lambda f: (RANK[f.severity], f.file, f.offset if f.offset is not None else -1))

    def counts(self) -> dict:
        c = Counter(f.severity for f in self.findings)
        return {s: c.get(s, 0) for s in (ERROR, WARNING, INFO)}

    @property
    def healthy(self) -> bool:
        """No error finding (the exit-code rule: 0 when healthy, 3 otherwise)."""
        return not any(f.severity == ERROR for f in self.findings)

    def commands(self) -> list[str]:
        """The fixes to run, each once, in the order of the worst finding that names it."""
        seen: list[str] = []
        for f in self.findings:
            if f.fix and f.fix not in seen:
                seen.append(f.fix)
        return seen

    def by_file(self) -> list[tuple[str, list[Finding]]]:
        """Findings grouped by file, the group with the worst finding first."""
        groups: dict[str, list[Finding]] = {}
        for f in self.findings:
            groups.setdefault(f.file, []).append(f)
        return sorted(groups.items(), key=lambda kv: (min(RANK[f.severity] for f in kv[1]), kv[0]))

    def as_dict(self) -> dict:
        return {"store": self.store, "healthy": self.healthy, "lockedByBroker": self.locked_by_broker,
                "mode": self.mode,
                "summary": {**self.counts(), "findings": len(self.findings), "checked": self.checked,
                            "estimates": self.estimates, "read": self.read},
                "findings": [{**f.as_dict(), "fix": f.fix} for f in self.findings], "commands": self.commands(),
                "notes": self.notes}


class Fixes:
    """Builds the fix command lines: `rmqtool <command> <the store arguments doctor was given> <more>`, quoted
    for a POSIX shell."""

    def __init__(self, store_args: list[str]):
        self.store_args = list(store_args)

    def __call__(self, *words: str) -> str:
        cmd = list(words[:1]) + (list(words[1:2]) if words[:1] == ("repair",) else [])
        rest = list(words[len(cmd):])
        return "rmqtool " + shlex.join(cmd + self.store_args + rest)
