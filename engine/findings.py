"""The one located problem every verifier returns (timer verify, tiered verify, inspect-index --verify,
verify-cq, the DLedger checks) and doctor collects: the severities and their order, and the finding. Doctor adds
`fix`, the command that fixes it; a verifier leaves it None. In --json every verify prints a list of them under
"findings", each {kind, severity, file, offset, problem, brokerWill} (doctor's with "fix" too).

Some lower types name a problem as a value their module acts on, not as a report, and stay: SegmentProblem
(engine.broker.commitlog.segments: recovery renames and resizes by it, writers refuse on it), NameProblem
(engine.broker.layout: listings skip the entry), DamagedIndexFile (engine.broker.index.service: a query's partial
answer). Where they are reported (doctor, verify-cq) they become a Finding at that boundary.

Beside the findings, Note: a line a command says on stderr (a note, a warning met on the way) with a stable kind
and its numbers as fields, which --json prints as one JSON object (docs/output-contract.md)."""
from __future__ import annotations

from dataclasses import dataclass

ERROR, WARNING, INFO = "error", "warning", "info"
#: Worst first.
RANK = {ERROR: 0, WARNING: 1, INFO: 2}


@dataclass
class Finding:
    """One problem, located: `file` relative to the store root, `offset` a byte offset in it (None: the whole
    file); `broker_will` what the broker does with it at its next start; `kind` a stable identifier."""
    kind: str
    severity: str
    file: str
    offset: int | None
    problem: str
    broker_will: str
    fix: str | None = None       # doctor's: an rmqtool command line runnable as printed (None: a person decides)

    def line(self) -> str:
        """One line of text: `file: offset N: problem` (no offset when it is the whole file)."""
        return f"{self.file}: offset {self.offset}: {self.problem}" if self.offset is not None \
            else f"{self.file}: {self.problem}"

    def as_dict(self) -> dict:
        return {"kind": self.kind, "severity": self.severity, "file": self.file, "offset": self.offset,
                "problem": self.problem, "brokerWill": self.broker_will}


class Note(str):
    """What a command says beside its answer that is not a located problem: the line as printed (the string
    itself, so a note goes wherever a str went), a stable `kind` (a name declared once, next to where the note is
    made, as Finding kinds are) and its numbers as `fields` (camelCase keys). Under --json rmqtool prints it on
    stderr as {"note": kind, "message": text, **fields} (docs/output-contract.md, "Notes and warnings")."""
    kind: str
    fields: dict

    def __new__(cls, kind: str, text: str, **fields) -> "Note":
        n = super().__new__(cls, text)
        n.kind, n.fields = kind, fields
        return n

    def __getnewargs__(self) -> tuple:   # pickles (worker processes) with its kind; fields travel as its state
        return self.kind, str(self)
