"""The one time grammar of every command's --begin/--end (issue 14 item 7).

Accepted: ISO-8601 dates and times (`2024-01-31`, `2024-01-31T10:00`, `2024-01-31 10:00:00.250+08:00`; naive
means the local time zone, as the broker's own index file names use), `now`, `now-1h` / `now-30m` / `now-2d` /
`now+10s` (units ms, s, m, h, d, w, combinable: `now-1h30m`), and epoch milliseconds. An epoch in seconds (10
digits today, or any value that cannot be epoch milliseconds) is refused with the value it probably meant.
0 and 9223372036854775807 (Long.MAX_VALUE, the broker's "no limit") are taken as they are.
An end given as a date alone means the end of that day (23:59:59.999 local time).
Every refusal is an InvalidArgumentError: one line on stderr, exit 2.
"""
from __future__ import annotations

import re
import time
from datetime import date, datetime, timedelta, timezone

from engine.errors import InvalidArgumentError
from engine.views.times import local_time

LONG_MAX = 2**63 - 1
#: 1973-03-03: a non-zero epoch below this is not plausible as milliseconds (it is seconds, or a typo).
MIN_PLAUSIBLE_MS = 100_000_000_000
#: The year 5138: above this an epoch is micro- or nanoseconds, not milliseconds.
MAX_PLAUSIBLE_MS = 99_999_999_999_999

GRAMMAR = "an ISO date or time (naive = local time), now, now-1h / now-30m / now-2d, or epoch milliseconds"
BEGIN_HELP = f"Start of the store-time range, inclusive: {GRAMMAR}."
END_HELP = (f"End of the store-time range, inclusive: {GRAMMAR}. A date alone means the end of that day "
            "(23:59:59.999 local time).")

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_RELATIVE = re.compile(r"now(?:\s*([+-])\s*((?:\d+(?:ms|s|m|h|d|w))+))?")
_PART = re.compile(r"(\d+)(ms|s|m|h|d|w)")
_DATE_ONLY = re.compile(r"\d{4}-\d{2}-\d{2}")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_COMPACT = {8: "%Y%m%d", 14: "%Y%m%d%H%M%S", 17: "%Y%m%d%H%M%S%f"}


def now_ms() -> int:
    return int(time.time() * 1000)


def parse_time(text: str, option: str = "--begin", *, end: bool = False, now: int | None = None) -> int:
    """One time value -> epoch milliseconds. `end`: a date alone means the end of that day."""
    t = (text or "").strip()
    if not t:
        raise InvalidArgumentError(f"{option} is empty: give {GRAMMAR}")
    low = t.lower()
    if low.startswith("now"):
        return _relative(t, low, option, now)
    if re.fullmatch(r"[+-]?\d+", t):
        return _epoch(t, option)
    if _DATE_ONLY.fullmatch(t):
        try:
            d = date.fromisoformat(t)
        except ValueError as e:
            raise InvalidArgumentError(f"{option} {t!r} is not a date: {e}") from None
        if end:
            # The last millisecond of that local day (the next local midnight minus 1 ms, so DST days are right).
            return _ms(datetime.combine(d + timedelta(days=1), datetime.min.time()).astimezone(), option, t) - 1
        return _ms(datetime.combine(d, datetime.min.time()).astimezone(), option, t)
    try:
        dt = datetime.fromisoformat(t)
    except ValueError:
        raise InvalidArgumentError(f"{option} {t!r} is not a time: give {GRAMMAR}") from None
    if dt.tzinfo is None:
        dt = dt.astimezone()
    return _ms(dt, option, t)


def parse_range(begin: str | None, end: str | None, *, now: int | None = None, begin_option: str = "--begin",
                end_option: str = "--end", default_begin: int = 0, default_end: int = LONG_MAX) -> tuple[int, int]:
    """--begin/--end -> (begin, end) epoch ms, both inclusive; refuses an end before the begin."""
    now = now_ms() if now is None else now
    b = default_begin if begin is None else parse_time(begin, begin_option, now=now)
    e = default_end if end is None else parse_time(end, end_option, end=True, now=now)
    if b > e:
        raise InvalidArgumentError(f"{begin_option} {begin} ({local_time(b)}) is after {end_option} {end} "
                                   f"({local_time(e)})")
    return b, e


DURATION_GRAMMAR = "a duration such as 30m, 12h, 7d, 2w or 1d12h (units ms, s, m, h, d, w)"
_DURATION = re.compile(r"(?:\d+(?:ms|s|m|h|d|w))+")


def parse_duration(text: str, option: str) -> int:
    """A duration (`7d`, `12h`, `1d12h`, `0s`) -> milliseconds; InvalidArgumentError for anything else."""
    t = (text or "").strip().lower()
    if not _DURATION.fullmatch(t):
        raise InvalidArgumentError(f"{option} {text!r} is not a duration: give {DURATION_GRAMMAR}")
    v = sum(int(n) * _UNITS_MS[u] for n, u in _PART.findall(t))
    if v > LONG_MAX:
        raise InvalidArgumentError(f"{option} {text!r} is out of range")
    return v


def format_duration(ms: int | None) -> str:
    """Milliseconds -> `3 d 4 h`, `5 min`, `12 s` (two units at most: an age at a glance)."""
    if ms is None:
        return "?"
    s = ms // 1000
    for size, unit, sub, subunit in ((86_400, "d", 3600, "h"), (3600, "h", 60, "min"), (60, "min", 1, "s")):
        if s >= size:
            rest = (s % size) // sub
            return f"{s // size} {unit}" + (f" {rest} {subunit}" if rest else "")
    return f"{s} s"


def _ms(dt: datetime, option: str, text: str) -> int:
    try:
        v = (dt - _EPOCH) // timedelta(milliseconds=1)  # exact: no float rounding of .123
    except (OverflowError, OSError, ValueError):
        raise InvalidArgumentError(f"{option} {text!r} is out of range") from None
    if v < 0:
        raise InvalidArgumentError(f"{option} {text!r} is before 1970: store times are epoch milliseconds >= 0")
    return v


def _relative(t: str, low: str, option: str, now: int | None) -> int:
    m = _RELATIVE.fullmatch(low)
    if not m:
        raise InvalidArgumentError(f"{option} {t!r} is not a time: relative times look like now, now-1h, now-30m, "
                                   "now-2d, now-1h30m (units ms, s, m, h, d, w)")
    base = now_ms() if now is None else now
    if not m.group(1):
        return base
    delta = sum(int(n) * _UNITS_MS[u] for n, u in _PART.findall(m.group(2)))
    v = base - delta if m.group(1) == "-" else base + delta
    if v < 0:
        raise InvalidArgumentError(f"{option} {t!r} is before 1970")
    if v > LONG_MAX:
        raise InvalidArgumentError(f"{option} {t!r} is out of range")
    return v


def _epoch(t: str, option: str) -> int:
    v = int(t)
    if v < 0:
        raise InvalidArgumentError(f"{option} {t} is negative: store times are epoch milliseconds >= 0")
    if v in (0, LONG_MAX):
        return v  # 0 and Long.MAX_VALUE: the broker's own "from the start" and "no limit"
    digits = t.lstrip("+0")
    if v < MIN_PLAUSIBLE_MS:
        if MIN_PLAUSIBLE_MS <= v * 1000 <= MAX_PLAUSIBLE_MS:
            raise InvalidArgumentError(
                f"{option} {t} looks like epoch seconds ({local_time(v * 1000)}); rmqtool takes epoch "
                f"milliseconds: did you mean {v}000?")
        hint = _compact_hint(digits)
        raise InvalidArgumentError(f"{option} {t} is not a plausible epoch in milliseconds (it would be "
                                   f"{local_time(v)}){hint or f'; give {GRAMMAR}'}")
    if v > MAX_PLAUSIBLE_MS:
        hint = _compact_hint(digits)
        if hint:
            raise InvalidArgumentError(f"{option} {t} is not epoch milliseconds{hint}")
        for div, unit in ((1000, "microseconds"), (1_000_000, "nanoseconds")):
            if MIN_PLAUSIBLE_MS <= v // div <= MAX_PLAUSIBLE_MS:
                raise InvalidArgumentError(f"{option} {t} looks like epoch {unit}; rmqtool takes epoch "
                                           f"milliseconds: did you mean {v // div}?")
        raise InvalidArgumentError(f"{option} {t} is not a plausible epoch in milliseconds; give {GRAMMAR}")
    return v


def _compact_hint(digits: str) -> str:
    """yyyyMMdd / yyyyMMddHHmmss / yyyyMMddHHmmssSSS (an index file's name) -> '; did you mean <ISO>?'."""
    fmt = _COMPACT.get(len(digits))
    if not fmt:
        return ""
    try:
        dt = datetime.strptime(digits if len(digits) != 17 else digits + "000", fmt)
    except ValueError:
        return ""
    iso = dt.date().isoformat() if len(digits) == 8 else dt.isoformat(sep="T", timespec="milliseconds")
    return f"; did you mean {iso}?"

