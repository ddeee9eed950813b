"""Java semantics the on-disk formats depend on (spec §0.2, §0.3).

Everything here is pure Python + numpy; no other engine module is imported.
"""
from __future__ import annotations

import zlib

import numpy as np

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


def java_string_hash(s: str) -> int:
    """Java String.hashCode(): over UTF-16 code units, 32-bit wrap (spec §0.3, pitfall 2)."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def java_string_hashes(keys, chunk: int = 1 << 20) -> np.ndarray:
    """Java String.hashCode() of many strings at once, as an int32 numpy array.

    Keys are right-aligned in a zero-padded matrix of UTF-16 code units; leading zero
    units leave a Horner hash at 0, so one pass over the columns hashes every row.
    """
    if not isinstance(keys, list):
        keys = list(keys)
    n = len(keys)
    out = np.empty(n, dtype=np.int32)
    for start in range(0, n, chunk):
        part = keys[start:start + chunk]
        out[start:start + len(part)] = _hash_chunk(part)
    return out


def _hash_chunk(keys: list) -> np.ndarray:
    m = len(keys)
    if m == 0:
        return np.empty(0, dtype=np.int32)
    joined = "".join(keys)
    units = np.frombuffer(joined.encode("utf-16-le", "surrogatepass"), dtype="<u2")
    if len(units) == len(joined):  # no surrogate pairs: code units == characters
        lengths = np.fromiter(map(len, keys), dtype=np.int64, count=m)
    else:
        lengths = np.fromiter(
            (len(k.encode("utf-16-le", "surrogatepass")) // 2 for k in keys), dtype=np.int64, count=m
        )
    return hash_code_units(units, lengths)


def hash_code_units(units: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Java hashCode of strings given as concatenated UTF-16 code units and per-string lengths."""
    m = len(lengths)
    if m == 0:
        return np.empty(0, dtype=np.int32)
    width = int(lengths.max()) if m else 0
    h = np.zeros(m, dtype=np.uint32)
    if width == 0:
        return h.view(np.int32)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    # Column c (0..width-1) of the right-aligned matrix holds unit starts + lengths - width + c.
    for c in range(width):
        idx = starts + lengths - width + c
        valid = idx >= starts
        col = np.zeros(m, dtype=np.uint32)
        col[valid] = units[idx[valid]]
        h *= np.uint32(31)
        h += col
    return h.view(np.int32)


def rmq_crc32(data: bytes) -> int:
    """java.util.zip.CRC32 masked to 31 bits, as UtilAll.crc32 (spec §2.6)."""
    return zlib.crc32(data) & 0x7FFFFFFF


def index_hash(h: int) -> int:
    """Broker IndexFile hash: abs(hashCode), with Integer.MIN_VALUE forced to 0 (spec §5.5)."""
    return 0 if h == INT_MIN else abs(h)


def tiered_hash(h: int) -> int:
    """Tiered IndexStoreFile hash: sign flipped, MIN_VALUE stays negative (spec §9.5)."""
    return h if h >= 0 else to_i32(-h)


def hashset_order(keys: list[str]) -> list[str]:
    """Iteration order of a java.util.HashSet built by adding `keys` in order (spec §9.6).

    Duplicates are dropped; buckets ascend by (h ^ (h >>> 16)) & (cap - 1), ties keep insertion order.
    """
    unique: list[str] = []
    seen = set()
    for k in keys:
        if k not in seen:
            seen.add(k)
            unique.append(k)
    cap = 16
    while len(unique) > 0.75 * cap:
        cap *= 2

    def bucket(k: str) -> int:
        h = java_string_hash(k) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (cap - 1)

    return sorted(unique, key=bucket)  # sorted() is stable: ties stay in insertion order
