"""RocketMQ 5 tiered-storage index file format (``tieredstore/.../index/IndexStoreFile``, format §9): constants,
the header/slot/item codecs, sizes, the tiered key hash and the errors every other module of this package shares.

Two on-disk layouts:

* **unsealed** (local working file): ``28 + 8*slotNum + 32*maxIndexNum`` bytes, slot = int32 number of the
  newest item of the chain (upper 4 bytes of each 8-byte slot unused), 32-byte items with an ``itemIndex``
  pointer to the previous item of the chain (format §9.2, §9.3);
* **compacted** (uploaded segment): ``28 + 8*slotNum + 28*indexItemCount`` bytes, slot = (itemsStart,
  itemsLength), 28-byte items stored contiguously per slot, newest first (format §9.4).

Only stdlib + numpy + :mod:`engine.java.lang` are used.
"""
from __future__ import annotations

import struct
from typing import Callable

import numpy as np

from engine.java.lang import INT_MAX, java_rem, java_string_hash, tiered_hash, to_i32

# ---- constants (IndexStoreFile / IndexItem) -------------------------------------------------------

#: ``0xCCDDEEFF ^ 1880681586 + 4``: Java ``+`` binds tighter than ``^``.
BEGIN_MAGIC_CODE = to_i32(0xCCDDEEFF ^ (1880681586 + 4))  # -1127939447 = 0xBCC50289
END_MAGIC_CODE = to_i32(0xCCDDEEFF ^ (1880681586 + 8))  # -1127939451 = 0xBCC50285

HEADER_SIZE = 28
HASH_SLOT_SIZE = 8
INDEX_ITEM_SIZE = 32
COMPACT_INDEX_ITEM_SIZE = 28
MAX_QUERY_COUNT = 512  # chain items an unsealed query visits at most (format §9.7)
MAX_COMPACT_READ_ITEMS = 1024  # items a compacted query reads at most (format §9.7)
DEFAULT_HASH_SLOT_NUM = 5_000_000
DEFAULT_INDEX_NUM = 20_000_000

# IndexStoreFile.IndexStatusEnum
UNSEALED = "UNSEALED"
SEALED = "SEALED"
UPLOAD = "UPLOAD"
CLOSED = "CLOSED"

HEADER = struct.Struct(">iqqii")  # magic, beginTimestamp, endTimestamp, hashSlotCount, indexItemCount
ITEM = struct.Struct(">iiiqiii")  # unsealed item: the 7 ITEM_FIELDS
CITEM = struct.Struct(">iiiqii")  # compacted item: without itemIndex
INT = struct.Struct(">i")
SLOT = struct.Struct(">ii")  # compacted slot: itemsStart, itemsLength

ITEM_FIELDS = ("hashCode", "topicId", "queueId", "offset", "size", "timeDiff", "itemIndex")

ITEM_DTYPE = np.dtype([
    ("hashCode", ">i4"), ("topicId", ">i4"), ("queueId", ">i4"), ("offset", ">i8"), ("size", ">i4"),
    ("timeDiff", ">i4"), ("itemIndex", ">i4"),
])
COMPACT_ITEM_DTYPE = np.dtype([
    ("hashCode", ">i4"), ("topicId", ">i4"), ("queueId", ">i4"), ("offset", ">i8"), ("size", ">i4"),
    ("timeDiff", ">i4"),
])
assert ITEM_DTYPE.itemsize == INDEX_ITEM_SIZE and COMPACT_ITEM_DTYPE.itemsize == COMPACT_INDEX_ITEM_SIZE

#: ``reader(offset, length) -> bytes``: replaces the file access of a query (e.g. a CountingReader).
Reader = Callable[[int, int], bytes]


# ---- errors ---------------------------------------------------------------------------------------


class TieredIndexError(ValueError):
    """Bad input: not a tiered index file, wrong geometry, truncated file, misuse of the API."""


class TieredQueryError(TieredIndexError):
    """A compacted-file query whose Java future completes exceptionally (TieredStoreException: illegal segment
    read)."""


class JavaRuntimeError(Exception):
    """A runtime exception the Java code would throw; caught where Java catches it (never leaves the package)."""


# ---- keys, slots, sizes ---------------------------------------------------------------------------


def tiered_key_hash(topic: str, key: str) -> int:
    """Stored hashCode of ``topic#key`` (sign flipped; Integer.MIN_VALUE stays negative)."""
    return tiered_hash(java_string_hash(f"{topic}#{key}"))


def tiered_slot(hash_code: int, hash_slot_num: int) -> int:
    """Java ``hashCode % slotNum`` (negative only for Integer.MIN_VALUE)."""
    return java_rem(hash_code, hash_slot_num)


def unsealed_file_size(hash_slot_num: int, index_num: int) -> int:
    return HEADER_SIZE + HASH_SLOT_SIZE * hash_slot_num + INDEX_ITEM_SIZE * index_num


def compacted_file_size(hash_slot_num: int, item_count: int) -> int:
    """Size of a compacted file whose every item is reachable (the normal case)."""
    return HEADER_SIZE + HASH_SLOT_SIZE * hash_slot_num + COMPACT_INDEX_ITEM_SIZE * item_count


# ---- small shared helpers -------------------------------------------------------------------------


def check_int(name: str, value, lo: int, hi: int) -> int:
    """``value`` as an int within [lo, hi] (a Java int or long), else TieredIndexError."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TieredIndexError(f"{name} must be an integer, got {type(value).__name__}")
    value = int(value)
    if not lo <= value <= hi:
        kind = "int32" if hi == INT_MAX else "int64"
        raise TieredIndexError(f"{name}={value} does not fit a Java {kind}")
    return value


def jstr(x) -> str:
    """``String.valueOf``: None prints as "null"."""
    return "null" if x is None else str(x)


def magic_name(magic: int) -> str:
    if magic == BEGIN_MAGIC_CODE:
        return "BEGIN"
    if magic == END_MAGIC_CODE:
        return "END"
    return "UNKNOWN"


def hex32(v: int) -> str:
    return f"0x{v & 0xFFFFFFFF:08X}"

