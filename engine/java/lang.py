"""Java semantics the on-disk formats depend on (format §0.2, §0.3).

Pure Python (no numpy: every command imports this, start-up matters); the bulk numpy forms of String.hashCode
are in engine.java.hashes. No other engine module is imported.
"""
from __future__ import annotations

import unicodedata
import zlib

INT_MIN = -(2**31)
INT_MAX = 2**31 - 1
LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1


def to_i32(x: int) -> int:
    """Wrap to a signed 32-bit value, as Java int arithmetic does."""
    return ((x + 2**31) % 2**32) - 2**31


def to_i64(x: int) -> int:
    return ((x + 2**63) % 2**64) - 2**63


def java_div(a: int, b: int) -> int:
    """Java integer division: truncates toward zero (Python's // floors)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def java_rem(a: int, b: int) -> int:
    """Java %: the result takes the sign of the dividend."""
    return a - b * java_div(a, b)


# An ASCII unit c (< 128 < 31*31) is 31*q + r with q, r < 31, so sum(c_i * 31**(n-1-i)) is the base-31 numeral of
# the q digits (shifted one place) plus that of the r digits: bytes.translate writes both, int() reads them in C.
_B31 = b"0123456789abcdefghijklmnopqrstu"
_Q31 = bytes(_B31[c // 31] for c in range(128)) + bytes(128)
_R31 = bytes(_B31[c % 31] for c in range(128)) + bytes(128)


def java_string_hash(s: str) -> int:
    """Java String.hashCode(): over UTF-16 code units, 32-bit wrap (format §0.3, pitfall 2)."""
    b = s.encode("utf-8", "surrogatepass")
    if len(b) == len(s) and 0 < len(b) <= 2048:  # ASCII: one UTF-16 unit per byte (a key lookup's hot path)
        h = (int(b.translate(_Q31) + b"0", 31) + int(b.translate(_R31), 31)) & 0xFFFFFFFF
        return h - 2**32 if h >= 2**31 else h
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def rmq_crc32(data: bytes) -> int:
    """java.util.zip.CRC32 masked to 31 bits, as UtilAll.crc32 (format §2.6)."""
    return zlib.crc32(data) & 0x7FFFFFFF


def index_hash(h: int) -> int:
    """Broker IndexFile hash: abs(hashCode), with Integer.MIN_VALUE forced to 0 (format §5.5)."""
    return 0 if h == INT_MIN else abs(h)


def key_index_hash(key: str) -> int:
    """index_hash(java_string_hash(key)) in one call, for the key lookups: an ASCII key's hashCode as
    java_string_hash's ASCII branch computes it, then abs() with MIN_VALUE as 0 on the unsigned value. Any other
    key goes through the two functions."""
    b = key.encode("utf-8", "surrogatepass")
    if len(b) == len(key) and 0 < len(b) <= 2048:
        h = (int(b.translate(_Q31) + b"0", 31) + int(b.translate(_R31), 31)) & 0xFFFFFFFF
        return 0x100000000 - h if h > 0x80000000 else (0 if h == 0x80000000 else h)
    return index_hash(java_string_hash(key))


def tiered_hash(h: int) -> int:
    """Tiered IndexStoreFile hash: sign flipped, MIN_VALUE stays negative (format §9.5)."""
    return h if h >= 0 else to_i32(-h)


_JAVA_WS_CONTROL = {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x1F}
_JAVA_NON_BREAKING = {0x00A0, 0x2007, 0x202F}


def _java_is_whitespace(ch: str) -> bool:
    """Character.isWhitespace: Unicode space separators except the non-breaking ones, and nine controls."""
    o = ord(ch)
    if o in _JAVA_WS_CONTROL:
        return True
    if o in _JAVA_NON_BREAKING or o > 0xFFFF:
        return False
    return unicodedata.category(ch) in ("Zs", "Zl", "Zp")


def java_is_blank(s: str | None) -> bool:
    """``org.apache.commons.lang3.StringUtils.isBlank`` (null, empty or only Character.isWhitespace)."""
    if s is None or len(s) == 0:
        return True
    return all(_java_is_whitespace(c) for c in s)


def java_split(text: str, sep: str = " ") -> list[str]:
    """``text.split(sep)`` for a one-character separator, as Java does it: empty tokens kept, *trailing*
    empty tokens removed (an empty text gives [""] in Java; callers here treat it as no token)."""
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts
