"""A byte count as a person reads it (1.5 GiB): the one wording of every size shown."""
from __future__ import annotations

from engine.fsutil import format_bytes

__all__ = ["format_bytes"]
