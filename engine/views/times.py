"""Store times (epoch milliseconds) as text: the one form every table and message uses (docs/output-contract.md).

local_time: "2024-01-31 10:00:00.007", local time (as the broker's own index file names are), compact, the same in
the operator tables, the message views (get, dump-commitlog, put, query-key) and the summaries; `--json` gives the
epoch milliseconds. Cached per second, so a table of a million records formats each second once. A value <= 0
(the broker's "not set") and a value beyond datetime's range are shown as the number they are. Light: no numpy,
every command imports it.
"""
from __future__ import annotations

from datetime import datetime

_CACHE_LIMIT = 1 << 14
_seconds: dict[int, str] = {}
#: The format of the seconds; the milliseconds follow it.
TIME_FORMAT = "%Y-%m-%d %H:%M:%S."


def local_time(ms: int | None) -> str:
    """Epoch ms -> `YYYY-MM-DD HH:MM:SS.mmm` in local time; "" for None; a value <= 0 or out of range as it is."""
    if ms is None:
        return ""
    if ms <= 0:
        return str(ms)
    sec, milli = divmod(ms, 1000)
    s = _seconds.get(sec)
    if s is None:
        try:
            s = datetime.fromtimestamp(sec).strftime(TIME_FORMAT)
        except (OverflowError, OSError, ValueError):
            return str(ms)
        if len(_seconds) > _CACHE_LIMIT:
            _seconds.clear()
        _seconds[sec] = s  # "2024-01-31 10:00:00.": the milliseconds are put in below
    return f"{s}{milli:03d}"
