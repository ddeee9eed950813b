"""The one time grammar (issue 14 item 7): rmqtool.times.parse_time / parse_range."""
from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest

from engine.errors import InvalidArgumentError
from engine.views.times import local_time
from rmqtool.times import LONG_MAX, parse_range, parse_time

NOW = 1_706_700_000_123   # 2024-01-31T11:20:00.123Z


def local_ms(*args) -> int:
    return int(datetime(*args).astimezone().timestamp() * 1000)


@pytest.mark.parametrize("text,want", [
    ("0", 0),
    ("1706700000123", 1_706_700_000_123),
    ("now", NOW),
    ("NOW", NOW),
    ("now-1h", NOW - 3_600_000),
    ("now - 30m", NOW - 1_800_000),
    ("now-2d", NOW - 2 * 86_400_000),
    ("now+10s", NOW + 10_000),
    ("now-1h30m", NOW - 5_400_000),
    ("now-250ms", NOW - 250),
    ("now-1w", NOW - 7 * 86_400_000),
    ("2024-01-31T10:00:00.123Z", 1_706_695_200_123),
    ("2024-01-31T18:00:00.5+08:00", 1_706_695_200_500),
    ("2024-01-31 10:00:00.123+00:00", 1_706_695_200_123),
])
def test_accepted(text, want):
    assert parse_time(text, now=NOW) == want


def test_naive_is_local_time_and_dates():
    assert parse_time("2024-01-31T10:00:00") == local_ms(2024, 1, 31, 10)
    assert parse_time("2024-01-31") == local_ms(2024, 1, 31)
    # --end given as a date: the last millisecond of that local day
    end = parse_time("2024-01-31", "--end", end=True)
    assert end == local_ms(2024, 2, 1) - 1
    assert local_time(end).endswith("23:59:59.999")
    # a time is never widened
    assert parse_time("2024-01-31T10:00", "--end", end=True) == local_ms(2024, 1, 31, 10)


def test_exact_milliseconds_without_float_rounding():
    # .123 seconds is not exact in binary floating point; the parse must still give ...123
    for ms in (1, 123, 999):
        text = datetime.fromtimestamp(1_700_000_000 + ms / 1000, timezone.utc).isoformat(timespec="milliseconds")
        assert parse_time(text) == 1_700_000_000_000 + ms


@pytest.mark.parametrize("text,hint", [
    ("1706700000", "did you mean 1706700000000?"),          # 10 digits: epoch seconds
    ("170670000", "did you mean 170670000000?"),            # 1975 in seconds: still seconds
    ("1706700000123000", "epoch microseconds; rmqtool takes epoch milliseconds: did you mean 1706700000123?"),
    ("1706700000123000000", "epoch nanoseconds"),
    ("20240131", "did you mean 2024-01-31?"),
    ("20240131101010123", "did you mean 2024-01-31T10:10:10.123?"),   # an index file's name
    ("12345", "not a plausible epoch in milliseconds"),
    ("-5", "is negative"),
    ("yesterday", "is not a time"),
    ("2024-13-01", "is not a date"),
    ("now-1y", "relative times look like"),
    ("now-", "relative times look like"),
    ("", "is empty"),
    ("1969-12-31T00:00:00Z", "before 1970"),
    ("now-1000000w", "before 1970"),
])
def test_refused_with_one_line(text, hint):
    with pytest.raises(InvalidArgumentError) as e:
        parse_time(text, "--begin", now=NOW)
    msg = str(e.value)
    assert hint in msg and "\n" not in msg and msg.startswith("--begin")


def test_range():
    assert parse_range(None, None, now=NOW) == (0, LONG_MAX)
    assert parse_range("now-1h", "now", now=NOW) == (NOW - 3_600_000, NOW)
    assert parse_range("2024-01-31", "2024-01-31", now=NOW) == (local_ms(2024, 1, 31), local_ms(2024, 2, 1) - 1)
    with pytest.raises(InvalidArgumentError, match="is after --end"):
        parse_range("now", "now-1m", now=NOW)
    with pytest.raises(InvalidArgumentError, match="^--end"):
        parse_range("now", "1706700000", now=NOW)


def test_local_time_is_local_and_compact():
    ms = local_ms(2024, 1, 31, 10, 0, 0) + 7
    assert local_time(ms) == "2024-01-31 10:00:00.007"
    assert local_time(None) == ""
    assert (datetime(2024, 2, 1) - timedelta(milliseconds=1)).strftime("%H:%M:%S") == "23:59:59"


def test_local_time_is_cached_per_second_and_shows_no_time_as_it_is():
    """The cached form (one datetime per second) equals a datetime formatted for each value; the one form of every
    table and message (docs/output-contract.md)."""
    rnd = random.Random(1)
    for ms in [1, 999, 1_700_000_000_001, 1_700_000_000_999] + [rnd.randrange(1, 2**42) for _ in range(500)]:
        sec, milli = divmod(ms, 1000)
        want = datetime.fromtimestamp(sec).strftime("%Y-%m-%d %H:%M:%S.") + f"{milli:03d}"
        assert local_time(ms) == want, ms
    assert local_time(None) == "" and local_time(0) == "0" and local_time(-5) == "-5"
    assert local_time(2**62) == str(2**62)  # beyond datetime: the number as it is
