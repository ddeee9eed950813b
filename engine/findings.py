"""A located problem, as `rmqtool timer verify` and `rmqtool doctor` report it: the severities and their order,
and the finding both build on (doctor's adds the command that fixes it)."""
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

    def as_dict(self) -> dict:
        return {"kind": self.kind, "severity": self.severity, "file": self.file, "offset": self.offset,
                "problem": self.problem, "brokerWill": self.broker_will}
