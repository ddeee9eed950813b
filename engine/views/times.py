"""Store times (epoch milliseconds) as text, in local time: the two forms every view uses, each stated once.

* iso_time: ISO-8601 with milliseconds and the zone offset ("2024-01-31T10:00:00.007+01:00"), where a time is
  shown with a message or a file (get, dump-commitlog, put, query-key, index headers); cached per second, so a
  table of a million records formats each second once.
* local_time: "2024-01-31 10:00:00.007", compact, for the columns of operator tables and for messages.

Both use the local time zone, as the broker's own index file names do. Light: no numpy, every command imports it.
"""
from __future__ import annotations

from datetime import datetime

_CACHE_LIMIT = 1 << 14
_seconds: dict[int, str] = {}


def iso_time(ms: int | None) -> str:
    """Epoch ms -> local ISO-8601 with milliseconds and offset; "" for None; a value <= 0 (no time) as it is."""
    if ms is None:
        return ""
    if ms <= 0:
        return str(ms)
    sec, milli = divmod(ms, 1000)
    s = _seconds.get(sec)
    if s is None:
        try:
            iso = datetime.fromtimestamp(sec).astimezone().isoformat(timespec="milliseconds")
        except (OverflowError, OSError, ValueError):
            return str(ms)
        if len(_seconds) > _CACHE_LIMIT:
            _seconds.clear()
        s = _seconds[sec] = iso  # "...T12:00:00.000+01:00": the milliseconds are put in below
    return f"{s[:20]}{milli:03d}{s[23:]}"


def local_time(ms: int | None) -> str:
    """Epoch ms -> `YYYY-MM-DD HH:MM:SS.mmm` in local time; "" for None; a value out of range as it is."""
    if ms is None:
        return ""
    try:
        return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}"
    except (OverflowError, OSError, ValueError):
        return str(ms)
