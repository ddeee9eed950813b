"""RocketMQ 5 tiered-storage index file (``tieredstore/.../index/IndexStoreFile``), format §9.

Reads and writes both on-disk layouts byte for byte:

* **unsealed** (local working file): ``28 + 8*slotNum + 32*maxIndexNum`` bytes, slot = int32 number of
  the newest item of the chain (upper 4 bytes of each 8-byte slot unused), 32-byte items with a
  ``itemIndex`` pointer to the previous item of the chain;
* **compacted** (uploaded segment): ``28 + 8*slotNum + 28*indexItemCount`` bytes, slot = (itemsStart,
  itemsLength), 28-byte items stored contiguously per slot, newest first.

Every algorithm follows what the Java code *does* (HEAD ``8fc57f1468d1``), including its quirks:

* a put whose key set does not fit is rejected as a whole (``FILE_FULL``, status becomes SEALED);
* the tiered hash flips the sign, ``Integer.MIN_VALUE`` stays negative, and ``slot = hash % slotNum``
  (Java ``%``) is then negative.  The Java code computes ``slotPosition = 28 + 8*slot`` and uses the
  mapped buffer's *absolute* int accessors, which only throw when the position is outside the buffer:

  - slot -1/-2/-3 (e.g. 5 slots -> -3, 7 slots -> -2) gives position 20/12/4, i.e. a header field.
    Nothing throws: the old "slot value" is read from the header (hashSlotCount / high word of
    endTimestamp / high word of beginTimestamp), the item is written with that value as its
    ``itemIndex``, the item number is written into the header and immediately overwritten by the
    header rewrite.  The put returns SUCCESS, the item is counted but unreachable (no slot points at
    it) and a later compaction therefore writes fewer items than ``indexItemCount``.  Queries read
    the same header word as their chain head.
  - slot <= -4 (e.g. the default 5,000,000 slots, or 10 slots) gives a negative position: Java throws
    ``IndexOutOfBoundsException`` before writing anything for that key; ``putKey`` catches every
    exception and returns ``UNKNOWN_ERROR``.  Keys of the same call that came earlier stay written (each
    followed by a header rewrite).  ``put_key`` here returns ``"UNKNOWN_ERROR"`` in that case and keeps
    the Java exception text in ``last_error``.

  (Spec 9.5 says "Java then throws" for every negative slot; that is only true for slot <= -4.)
* timeDiff = ``(int)((timestamp - begin) / 1000L)``: truncation toward zero, then int32 wrap, no clamp;
* unsealed query: at most 512 chain items visited, may return ``maxCount + 1`` items, time filter
  ``timeDiff*1000 + begin`` (HEAD), any exception ends the walk and returns what was found so far;
* compacted query: two reads (8-byte slot, then the slot's items, at most 1024 items), with the
  tiered FileSegment read rules (position outside ``[0, committed)`` -> the query future fails, which is
  raised here as :class:`TieredQueryError`; reads are clamped to the committed length) and the
  "committed length <= 28 -> empty" guard.

Only stdlib + numpy + :mod:`engine.java.lang` are used.
"""
from __future__ import annotations

import math
import mmap
import os
import stat as _stat
import struct
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from engine.java.lang import java_is_blank
from engine.java.lang import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    java_div,
    java_rem,
    java_string_hash,
    tiered_hash,
    to_i32,
    to_i64,
)

__all__ = [
    "BEGIN_MAGIC_CODE",
    "END_MAGIC_CODE",
    "HEADER_SIZE",
    "HASH_SLOT_SIZE",
    "INDEX_ITEM_SIZE",
    "COMPACT_INDEX_ITEM_SIZE",
    "MAX_QUERY_COUNT",
    "MAX_COMPACT_READ_ITEMS",
    "DEFAULT_HASH_SLOT_NUM",
    "DEFAULT_INDEX_NUM",
    "TieredIndexError",
    "TieredQueryError",
    "IndexStoreFile",
    "CountingReader",
    "detect_tiered",
    "tiered_key_hash",
    "tiered_slot",
    "unsealed_file_size",
    "compacted_file_size",
]

# --------------------------------------------------------------------------------------------------
# Constants (IndexStoreFile / IndexItem)
# --------------------------------------------------------------------------------------------------

#: ``0xCCDDEEFF ^ 1880681586 + 4``: Java ``+`` binds tighter than ``^``.
BEGIN_MAGIC_CODE = to_i32(0xCCDDEEFF ^ (1880681586 + 4))  # -1127939447 = 0xBCC50289
END_MAGIC_CODE = to_i32(0xCCDDEEFF ^ (1880681586 + 8))  # -1127939451 = 0xBCC50285

HEADER_SIZE = 28
HASH_SLOT_SIZE = 8
INDEX_ITEM_SIZE = 32
COMPACT_INDEX_ITEM_SIZE = 28
MAX_QUERY_COUNT = 512
MAX_COMPACT_READ_ITEMS = 1024
DEFAULT_HASH_SLOT_NUM = 5_000_000
DEFAULT_INDEX_NUM = 20_000_000

UNSEALED = "UNSEALED"
SEALED = "SEALED"
UPLOAD = "UPLOAD"
CLOSED = "CLOSED"

_HEADER = struct.Struct(">iqqii")
_ITEM = struct.Struct(">iiiqiii")
_CITEM = struct.Struct(">iiiqii")
_INT = struct.Struct(">i")
_SLOT = struct.Struct(">ii")

_ITEM_FIELDS = ("hashCode", "topicId", "queueId", "offset", "size", "timeDiff", "itemIndex")

ITEM_DTYPE = np.dtype(
    [
        ("hashCode", ">i4"),
        ("topicId", ">i4"),
        ("queueId", ">i4"),
        ("offset", ">i8"),
        ("size", ">i4"),
        ("timeDiff", ">i4"),
        ("itemIndex", ">i4"),
    ]
)
COMPACT_ITEM_DTYPE = np.dtype(
    [
        ("hashCode", ">i4"),
        ("topicId", ">i4"),
        ("queueId", ">i4"),
        ("offset", ">i8"),
        ("size", ">i4"),
        ("timeDiff", ">i4"),
    ]
)
assert ITEM_DTYPE.itemsize == INDEX_ITEM_SIZE and COMPACT_ITEM_DTYPE.itemsize == COMPACT_INDEX_ITEM_SIZE


class TieredIndexError(ValueError):
    """Bad input: not a tiered index file, wrong geometry, truncated file, misuse of the API."""


class TieredQueryError(TieredIndexError):
    """A compacted-file query whose Java future completes exceptionally (illegal segment read)."""

    def __init__(self, message: str, java_exception: str = "TieredStoreException"):
        super().__init__(message)
        self.java_exception = java_exception


class _JavaRuntimeError(Exception):
    """Internal: a runtime exception the Java code would throw (caught where Java catches it)."""


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


def _check_int(name: str, value, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TieredIndexError(f"{name} must be an integer, got {type(value).__name__}")
    value = int(value)
    if not lo <= value <= hi:
        kind = "int32" if hi == INT_MAX else "int64"
        raise TieredIndexError(f"{name}={value} does not fit a Java {kind}")
    return value


def _jstr(x) -> str:
    return "null" if x is None else str(x)


def _magic_name(magic: int) -> str:
    if magic == BEGIN_MAGIC_CODE:
        return "BEGIN"
    if magic == END_MAGIC_CODE:
        return "END"
    return "UNKNOWN"


def _hex32(v: int) -> str:
    return f"0x{v & 0xFFFFFFFF:08X}"


# --------------------------------------------------------------------------------------------------
# Readers
# --------------------------------------------------------------------------------------------------

Reader = Callable[[int, int], bytes]


class CountingReader:
    """``reader(offset, length) -> bytes`` over ``os.pread`` that counts calls and bytes.

    Pass it as ``reader=`` to :meth:`IndexStoreFile.query` to count the file accesses a query makes.
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self.fd = os.open(self.path, os.O_RDONLY)
        self.reads = 0
        self.bytes_read = 0

    def __call__(self, offset: int, length: int) -> bytes:
        self.reads += 1
        data = os.pread(self.fd, length, offset)
        self.bytes_read += len(data)
        return data

    def reset(self) -> None:
        self.reads = 0
        self.bytes_read = 0

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# --------------------------------------------------------------------------------------------------
# Detection / geometry
# --------------------------------------------------------------------------------------------------


def _pread_exact(fd: int, length: int, offset: int) -> bytes:
    chunks = []
    got = 0
    while got < length:
        b = os.pread(fd, min(length - got, 1 << 30), offset + got)
        if not b:
            break
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def _compacted_candidate(size: int, first_start: int) -> Optional[int]:
    """Slot count implied by a compacted file whose slot 0 starts at ``first_start``, or None."""
    if first_start < HEADER_SIZE + HASH_SLOT_SIZE or (first_start - HEADER_SIZE) % HASH_SLOT_SIZE:
        return None
    if first_start > size or (size - first_start) % COMPACT_INDEX_ITEM_SIZE:
        return None
    return (first_start - HEADER_SIZE) // HASH_SLOT_SIZE


def _compacted_contiguous(fd: int, size: int, slots: int, limit: int = 1 << 20) -> bool:
    """Slot ranges of a compacted file start where the previous one ended (as the writer makes them)."""
    n = min(slots, limit)
    raw = _pread_exact(fd, 8 * n, HEADER_SIZE)
    if len(raw) < 8 * n:
        return False
    tab = np.frombuffer(raw, dtype=">i4").astype(np.int64).reshape(n, 2)
    starts, lens = tab[:, 0], tab[:, 1]
    if starts[0] != HEADER_SIZE + HASH_SLOT_SIZE * slots:
        return False
    if (lens < 0).any() or (lens % COMPACT_INDEX_ITEM_SIZE).any():
        return False
    if n > 1 and (starts[1:] != starts[:-1] + lens[:-1]).any():
        return False
    if n == slots:
        end = int(starts[-1] + lens[-1])
        return end <= size
    return True


def detect_tiered(path) -> bool:
    """Whether ``path`` looks like a tiered index file (unsealed or compacted).

    The first int must be the BEGIN or END magic (the broker's own index files start with a
    timestamp) and the size must fit one of the layouts: ``28 + 8*s + 32*m`` (unsealed) or a
    compacted file whose slot 0 starts at ``28 + 8*s`` with ``28``-byte items after it.  Returns
    False for anything that cannot be read as a regular file.
    """
    try:
        st = os.stat(path)
        if not _stat.S_ISREG(st.st_mode):
            return False
        size = st.st_size
        if size < HEADER_SIZE + HASH_SLOT_SIZE:
            return False
        fd = os.open(path, os.O_RDONLY)
        try:
            head = _pread_exact(fd, HEADER_SIZE + 4, 0)
            if len(head) < HEADER_SIZE + 4:
                return False
            magic, _b, _e, _sc, count = _HEADER.unpack_from(head, 0)
            if magic not in (BEGIN_MAGIC_CODE, END_MAGIC_CODE):
                return False
            unsealed_ok = (size - HEADER_SIZE) % HASH_SLOT_SIZE == 0 and size >= HEADER_SIZE + 8 + 32
            if magic == END_MAGIC_CODE:
                first = _INT.unpack_from(head, HEADER_SIZE)[0]
                s = _compacted_candidate(size, first)
                if s is not None and _compacted_contiguous(fd, size, s, limit=4096):
                    return True
            return unsealed_ok
        finally:
            os.close(fd)
    except OSError:
        return False


# --------------------------------------------------------------------------------------------------
# The file
# --------------------------------------------------------------------------------------------------


class IndexStoreFile:
    """One tiered index file, unsealed (local) or compacted (uploaded)."""

    # ---- construction -------------------------------------------------------------------------

    def __init__(self, _token=None):
        if _token is not _PRIVATE:
            raise TypeError("use IndexStoreFile.create(...) or IndexStoreFile.open(...)")
        self.path: str = ""
        self.layout: str = ""
        self.writable = False
        self.hash_slot_num = 0
        self.index_num: Optional[int] = None
        self.file_size = 0
        self.commit_length = 0
        self.last_error: Optional[str] = None
        self._status = CLOSED
        self._closed = True
        self._fh = None
        self._mm = None  # mmap (or b"" for an empty uploaded segment)
        self._begin = 0
        self._end = 0
        self._slot_count = 0
        self._item_count = 0

    @classmethod
    def create(
        cls, path, hash_slot_num: int, index_num: int, file_timestamp: int, *, overwrite: bool = False
    ) -> "IndexStoreFile":
        """New unsealed file, as ``new IndexStoreFile(config, timestamp)`` on a missing file."""
        s = _check_int("hash_slot_num", hash_slot_num, 1, INT_MAX)
        m = _check_int("index_num", index_num, 1, INT_MAX)
        ts = _check_int("file_timestamp", file_timestamp, LONG_MIN, LONG_MAX)
        size = unsealed_file_size(s, m)
        if size > INT_MAX:
            raise TieredIndexError(
                f"geometry hash_slot_num={s}, index_num={m} needs {size} bytes; Java computes the size "
                f"as an int and cannot create files over {INT_MAX} bytes"
            )
        path = os.fspath(path)
        try:
            fh = open(path, "w+b" if overwrite else "x+b")
        except FileExistsError:
            raise TieredIndexError(f"{path}: file already exists (pass overwrite=True to replace it)") from None
        except OSError as e:
            raise TieredIndexError(f"{path}: cannot create: {e.strerror or e}") from None
        try:
            fh.truncate(size)
            mm = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_WRITE)
        except Exception:
            fh.close()
            raise
        self = cls(_PRIVATE)
        self.path = path
        self.layout = "unsealed"
        self.writable = True
        self.hash_slot_num = s
        self.index_num = m
        self.file_size = size
        self.commit_length = size
        self._fh = fh
        self._mm = mm
        self._closed = False
        self._status = UNSEALED
        # Java constructor: begin = timestamp, end/counts read from the (all-zero) header, header written.
        self._begin = ts
        self._end = self._get_long(4)
        self._slot_count = self._get_int(20)
        self._item_count = self._get_int(24)
        self._flush_header()
        return self

    @classmethod
    def open(
        cls,
        path,
        hash_slot_num: Optional[int] = None,
        index_num: Optional[int] = None,
        *,
        writable: bool = False,
        layout: Optional[str] = None,
        begin_timestamp: Optional[int] = None,
        force_geometry: bool = False,
    ) -> "IndexStoreFile":
        """Open an existing file; the layout is detected from the magic, slot table and size.

        * read-only (``writable=False``, the default): the file is opened ``"rb"`` and mapped
          ``ACCESS_READ``; nothing is ever written.
        * ``writable=True`` (unsealed only) behaves like the broker re-opening a local file at
          startup: status UNSEALED, endTimestamp reset to the header's beginTimestamp and the header
          rewritten at once (format §9.8 / pitfall 38).
        * ``begin_timestamp`` overrides the beginTimestamp used for time filtering and timeDiffs
          (Java takes it from the file name for local files and from the segment's minTimestamp for
          uploaded ones); default: the header's value.
        * compacted files: ``hash_slot_num`` is the broker's configured slot count; it must match
          the slot table unless ``force_geometry=True`` (then the given value is used, as Java does).
        """
        path = os.fspath(path)
        if layout not in (None, "unsealed", "compacted"):
            raise TieredIndexError(f"layout must be 'unsealed' or 'compacted', not {layout!r}")
        if hash_slot_num is not None:
            hash_slot_num = _check_int("hash_slot_num", hash_slot_num, 1, INT_MAX)
        if index_num is not None:
            index_num = _check_int("index_num", index_num, 1, INT_MAX)
        if begin_timestamp is not None:
            begin_timestamp = _check_int("begin_timestamp", begin_timestamp, LONG_MIN, LONG_MAX)
        try:
            st = os.stat(path)
        except OSError as e:
            raise TieredIndexError(f"{path}: {e.strerror or e}") from None
        if not _stat.S_ISREG(st.st_mode):
            raise TieredIndexError(f"{path}: not a regular file")
        size = st.st_size
        try:
            fh = open(path, "r+b" if writable else "rb")
        except OSError as e:
            raise TieredIndexError(f"{path}: cannot open: {e.strerror or e}") from None
        try:
            self = cls._open_fh(
                fh, path, size, hash_slot_num, index_num, writable, layout, begin_timestamp, force_geometry
            )
        except BaseException:
            fh.close()
            raise
        return self

    @classmethod
    def _open_fh(cls, fh, path, size, hash_slot_num, index_num, writable, layout, begin_override, force):
        fd = fh.fileno()
        if size == 0 and layout in (None, "compacted") and not writable:
            # The only thing a 0-byte file can be: the upload of a compaction that found no item
            # (format §9.4).  Queries hit the "committed length <= 28" guard and return nothing.
            self = cls(_PRIVATE)
            self.path, self.layout, self.file_size, self.commit_length = path, "compacted", 0, 0
            self.hash_slot_num = hash_slot_num or 0
            self.index_num = index_num
            self._fh, self._mm, self._closed, self._status = fh, b"", False, UPLOAD
            self._begin = begin_override or 0
            return self
        if size < HEADER_SIZE:
            raise TieredIndexError(
                f"{path}: file is {size} bytes, smaller than the {HEADER_SIZE}-byte tiered index header "
                f"(truncated or empty; an index file without items uploads 0 bytes)"
            )
        head = _pread_exact(fd, min(size, HEADER_SIZE + 4), 0)
        magic, h_begin, h_end, h_slots, h_count = _HEADER.unpack_from(head, 0)
        first_start = _INT.unpack_from(head, HEADER_SIZE)[0] if len(head) >= HEADER_SIZE + 4 else None

        if magic not in (BEGIN_MAGIC_CODE, END_MAGIC_CODE) and layout is None:
            raise TieredIndexError(
                f"{path}: not a tiered index file: magic {_hex32(magic)} at offset 0, expected "
                f"BEGIN {_hex32(BEGIN_MAGIC_CODE)} or END {_hex32(END_MAGIC_CODE)}"
            )

        if layout is None:
            layout = cls._detect_layout(fd, path, size, magic, h_count, first_start, hash_slot_num, index_num)

        self = cls(_PRIVATE)
        self.path = path
        self.layout = layout
        self.file_size = size
        self.commit_length = size
        self._fh = fh

        if layout == "compacted":
            if writable:
                raise TieredIndexError(f"{path}: compacted (uploaded) index files are immutable; open read-only")
            s_file = _compacted_candidate(size, first_start) if first_start is not None else None
            if hash_slot_num is None:
                if s_file is None:
                    raise TieredIndexError(
                        f"{path}: cannot derive the slot count of this compacted file ({size} bytes, slot 0 "
                        f"starts at {first_start}); pass hash_slot_num"
                    )
                s = s_file
            else:
                s = hash_slot_num
                base = HEADER_SIZE + HASH_SLOT_SIZE * s
                if not force and (base > size or (size - base) % COMPACT_INDEX_ITEM_SIZE):
                    exp = compacted_file_size(s, h_count)
                    raise TieredIndexError(
                        f"{path}: file size {size} bytes does not match a compacted file with hash_slot_num={s}: "
                        f"the slot table ends at byte {base}, leaving {size - base} bytes, not a whole number of "
                        f"28-byte items (with indexItemCount={h_count} it would be {exp} bytes; slot 0 says the "
                        f"items start at {first_start})"
                    )
            self.hash_slot_num = s
            self.index_num = index_num
            self._status = UPLOAD
            self._begin = h_begin if begin_override is None else begin_override
            self._end = h_end
            self._slot_count = h_slots
            self._item_count = h_count
        else:
            s, m = cls._unsealed_geometry(fd, path, size, magic, h_count, hash_slot_num, index_num)
            if not force and not 0 <= h_count <= m - 1:
                raise TieredIndexError(
                    f"{path}: header indexItemCount {h_count} does not fit geometry hash_slot_num={s}, "
                    f"index_num={m} (at most {m - 1} items); wrong geometry? (force_geometry=True opens it anyway)"
                )
            self.hash_slot_num = s
            self.index_num = m
            self._status = UNSEALED
            self._begin = h_begin if begin_override is None else begin_override
            self._end = h_end
            self._slot_count = h_slots
            self._item_count = h_count
        self._mm = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
        self._closed = False
        self.writable = writable
        if writable:
            # Java re-open: endTimestamp = getLong(INDEX_BEGIN_TIME_STAMP); header rewritten immediately.
            self._end = self._get_long(4)
            self._flush_header()
        return self

    @staticmethod
    def _detect_layout(fd, path, size, magic, count, first_start, hash_slot_num, index_num) -> str:
        if magic == BEGIN_MAGIC_CODE:
            return "unsealed"  # a compacted file always carries END
        s_c = _compacted_candidate(size, first_start) if first_start is not None else None
        compact_ok = s_c is not None and (hash_slot_num is None or hash_slot_num == s_c)
        # END on an unsealed file means "completely full": maxIndexNum == indexItemCount + 1.
        unsealed_ok = False
        if count >= 0:
            rem = size - HEADER_SIZE - INDEX_ITEM_SIZE * (count + 1)
            unsealed_ok = rem >= HASH_SLOT_SIZE and rem % HASH_SLOT_SIZE == 0
            if unsealed_ok and hash_slot_num is not None:
                unsealed_ok = rem // HASH_SLOT_SIZE == hash_slot_num
            if unsealed_ok and index_num is not None:
                unsealed_ok = index_num == count + 1
        if compact_ok and unsealed_ok:
            return "compacted" if _compacted_contiguous(fd, size, s_c) else "unsealed"
        if compact_ok:
            if _compacted_contiguous(fd, size, s_c) or hash_slot_num is not None:
                return "compacted"
        if unsealed_ok:
            return "unsealed"
        if compact_ok:
            return "compacted"
        if hash_slot_num is not None or index_num is not None:
            return "unsealed"  # let the geometry check produce the precise size message
        raise TieredIndexError(
            f"{path}: END magic but the file ({size} bytes, indexItemCount={count}, slot 0 value "
            f"{first_start}) fits neither a full unsealed file nor a compacted file; truncated or corrupt"
        )

    @staticmethod
    def _unsealed_geometry(fd, path, size, magic, count, s, m) -> tuple[int, int]:
        if s is not None and m is not None:
            exp = unsealed_file_size(s, m)
            if exp != size:
                raise TieredIndexError(
                    f"{path}: file size {size} bytes does not match hash_slot_num={s}, index_num={m} "
                    f"(expected 28 + 8*{s} + 32*{m} = {exp} bytes)"
                )
            return s, m
        if s is not None:
            rem = size - HEADER_SIZE - HASH_SLOT_SIZE * s
            if rem < INDEX_ITEM_SIZE or rem % INDEX_ITEM_SIZE:
                raise TieredIndexError(
                    f"{path}: file size {size} bytes does not match hash_slot_num={s}: an unsealed file "
                    f"is 28 + 8*{s} + 32*index_num bytes (slot table ends at byte {HEADER_SIZE + 8 * s}, "
                    f"{rem} bytes left, not a positive multiple of 32)"
                )
            return s, rem // INDEX_ITEM_SIZE
        if m is not None:
            rem = size - HEADER_SIZE - INDEX_ITEM_SIZE * m
            if rem < HASH_SLOT_SIZE or rem % HASH_SLOT_SIZE:
                raise TieredIndexError(
                    f"{path}: file size {size} bytes does not match index_num={m}: an unsealed file is "
                    f"28 + 8*hash_slot_num + 32*{m} bytes (item table is {INDEX_ITEM_SIZE * m} bytes, "
                    f"{rem} bytes left for header slots)"
                )
            return rem // HASH_SLOT_SIZE, m
        if (size - HEADER_SIZE) % HASH_SLOT_SIZE or size < HEADER_SIZE + HASH_SLOT_SIZE + INDEX_ITEM_SIZE:
            raise TieredIndexError(
                f"{path}: file size {size} bytes is not 28 + 8*hash_slot_num + 32*index_num for any "
                f"geometry (truncated?)"
            )
        if count < 0:
            raise TieredIndexError(f"{path}: header indexItemCount is negative ({count}); pass the geometry")
        if magic == END_MAGIC_CODE:
            m = count + 1
            rem = size - HEADER_SIZE - INDEX_ITEM_SIZE * m
            if rem < HASH_SLOT_SIZE or rem % HASH_SLOT_SIZE:
                raise TieredIndexError(
                    f"{path}: END magic implies index_num = indexItemCount+1 = {m}, but file size {size} bytes "
                    f"leaves {rem} bytes for the slot table (not a positive multiple of 8)"
                )
            s_end = rem // HASH_SLOT_SIZE
            if not _geometry_plausible(fd, size, s_end, count):
                raise TieredIndexError(
                    f"{path}: END magic implies index_num = indexItemCount+1 = {m} and so hash_slot_num = "
                    f"{s_end} for {size} bytes, but the slot table and items do not fit that geometry "
                    f"(truncated or corrupt?); pass hash_slot_num or index_num to open it anyway"
                )
            return s_end, m
        if size == unsealed_file_size(DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM):
            return DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM
        return _infer_unsealed_geometry(fd, path, size, count)

    # ---- state ---------------------------------------------------------------------------------

    @property
    def status(self) -> str:
        return self._status

    @property
    def begin_timestamp(self) -> int:
        return self._begin

    @property
    def end_timestamp(self) -> int:
        return self._end

    @property
    def hash_slot_count(self) -> int:
        return self._slot_count

    @property
    def index_item_count(self) -> int:
        return self._item_count

    def close(self) -> None:
        if isinstance(self._mm, mmap.mmap):
            try:
                if self.writable:
                    self._mm.flush()
                self._mm.close()
            except BufferError:  # pragma: no cover - an exported view still alive
                pass
        self._mm = None
        self._closed = True
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        self._status = CLOSED

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):  # pragma: no cover
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return (
            f"IndexStoreFile({self.path!r}, layout={self.layout}, status={self._status}, "
            f"slots={self.hash_slot_num}, index_num={self.index_num}, items={self._item_count})"
        )

    def _check_open(self):
        if self._closed:
            raise TieredIndexError(f"{self.path}: file is closed")

    # ---- Java ByteBuffer absolute accessors (bounds-checked like Java) ---------------------------

    def _get_int(self, pos: int, reader: Optional[Reader] = None) -> int:
        if pos < 0 or pos > self.file_size - 4:
            raise _JavaRuntimeError(f"java.lang.IndexOutOfBoundsException: getInt({pos}), limit {self.file_size}")
        data = reader(pos, 4) if reader is not None else self._mm[pos : pos + 4]
        if len(data) < 4:
            raise _JavaRuntimeError(f"short read at {pos}")
        return _INT.unpack(data)[0]

    def _get_long(self, pos: int) -> int:
        if pos < 0 or pos > self.file_size - 8:
            raise _JavaRuntimeError(f"java.lang.IndexOutOfBoundsException: getLong({pos})")
        return struct.unpack(">q", self._mm[pos : pos + 8])[0]

    def _put_int(self, pos: int, value: int) -> None:
        if pos < 0 or pos > self.file_size - 4:
            raise _JavaRuntimeError(f"java.lang.IndexOutOfBoundsException: putInt({pos}), limit {self.file_size}")
        self._mm[pos : pos + 4] = _INT.pack(value)

    def _get_block(self, pos: int, length: int, reader: Optional[Reader] = None) -> bytes:
        """``buffer.position(pos); buffer.get(byte[length])`` on a duplicate of the mapped buffer."""
        if pos < 0 or pos > self.file_size:
            raise _JavaRuntimeError(f"java.lang.IllegalArgumentException: newPosition {pos} > limit {self.file_size}")
        if self.file_size - pos < length:
            raise _JavaRuntimeError("java.nio.BufferUnderflowException")
        data = reader(pos, length) if reader is not None else self._mm[pos : pos + length]
        if len(data) < length:
            raise _JavaRuntimeError(f"short read at {pos}")
        return data

    def _flush_header(self) -> None:
        end = self.index_num is not None and self.index_num == to_i32(self._item_count + 1)
        self._mm[0:HEADER_SIZE] = _HEADER.pack(
            END_MAGIC_CODE if end else BEGIN_MAGIC_CODE, self._begin, self._end, self._slot_count, self._item_count
        )

    def _slot_position(self, slot: int) -> int:
        return to_i32(HEADER_SIZE + slot * HASH_SLOT_SIZE)

    def _item_position(self, n: int) -> int:
        return to_i32(HEADER_SIZE + self.hash_slot_num * HASH_SLOT_SIZE + n * INDEX_ITEM_SIZE)

    @property
    def _items_base(self) -> int:
        return HEADER_SIZE + self.hash_slot_num * HASH_SLOT_SIZE

    # ---- writing -------------------------------------------------------------------------------

    def put_key(
        self,
        topic: str,
        topic_id: int,
        queue_id: int,
        keys,
        offset: int,
        size: int,
        timestamp: int,
    ) -> str:
        """``IndexStoreFile.putKey``; returns ``"SUCCESS"``, ``"FILE_FULL"`` or ``"UNKNOWN_ERROR"``.

        ``keys`` is the Java ``Set<String>`` as a sequence **in its iteration order** (for a
        dispatcher-built set use :func:`engine.broker.keys.tiered_key_set`).  Python sets are refused because their order
        is not Java's.  ``UNKNOWN_ERROR`` is returned for a blank topic and when Java would throw inside
        the put (a slot position outside the buffer, see module doc); ``last_error`` then says why.
        """
        self._check_open()
        if not self.writable or self.layout != "unsealed":
            raise TieredIndexError(f"{self.path}: opened read-only (use create() or open(..., writable=True))")
        topic_id = _check_int("topic_id", topic_id, INT_MIN, INT_MAX)
        queue_id = _check_int("queue_id", queue_id, INT_MIN, INT_MAX)
        size = _check_int("size", size, INT_MIN, INT_MAX)
        offset = _check_int("offset", offset, LONG_MIN, LONG_MAX)
        timestamp = _check_int("timestamp", timestamp, LONG_MIN, LONG_MAX)
        key_list = self._key_list(keys)
        self.last_error = None
        if topic is not None and not isinstance(topic, str):
            raise TieredIndexError(f"topic must be a string, got {type(topic).__name__}")

        if java_is_blank(topic):
            self.last_error = "blank topic"
            return "UNKNOWN_ERROR"
        if not key_list:
            return "SUCCESS"
        if self._status != UNSEALED:
            return "FILE_FULL"
        if to_i32(self._item_count + len(key_list)) >= self.index_num:
            self._status = SEALED
            return "FILE_FULL"
        s = self.hash_slot_num
        try:
            for key in key_list:
                hc = tiered_hash(java_string_hash(f"{topic}#{key}"))
                slot_pos = self._slot_position(java_rem(hc, s))
                old = max(self._get_int(slot_pos), 0)
                time_diff = to_i32(java_div(to_i64(timestamp - self._begin), 1000))
                self._item_count = to_i32(self._item_count + 1)
                n = self._item_count
                pos = self._item_position(n)
                if pos < 0 or pos > self.file_size:
                    raise _JavaRuntimeError(f"java.lang.IllegalArgumentException: newPosition {pos}")
                if self.file_size - pos < INDEX_ITEM_SIZE:
                    raise _JavaRuntimeError("java.nio.BufferOverflowException")
                self._mm[pos : pos + INDEX_ITEM_SIZE] = _ITEM.pack(
                    hc, topic_id, queue_id, offset, size, time_diff, old
                )
                self._put_int(slot_pos, n)
                if old <= 0:
                    self._slot_count = to_i32(self._slot_count + 1)
                if self._end < timestamp:
                    self._end = timestamp
                self._flush_header()
            return "SUCCESS"
        except _JavaRuntimeError as e:
            self.last_error = str(e)
            return "UNKNOWN_ERROR"

    @staticmethod
    def _key_list(keys) -> list[str]:
        if keys is None:
            return []
        if isinstance(keys, (str, bytes)):
            raise TieredIndexError("keys must be a sequence of strings, not a single string")
        if isinstance(keys, (set, frozenset)):
            raise TieredIndexError(
                "keys must be ordered as the Java Set iterates them; a Python set has no such order "
                "(use engine.broker.keys.tiered_key_set() or engine.java.collections.hashset_order())"
            )
        out = list(keys)
        for k in out:
            if not isinstance(k, str):
                raise TieredIndexError(f"keys must be strings, got {type(k).__name__}")
        if len(set(out)) != len(out):
            raise TieredIndexError("keys contain duplicates; a Java Set cannot")
        return out

    # ---- compaction ----------------------------------------------------------------------------

    def compact(self, dest_path, *, form: str = "uploaded", method: str = "auto") -> str:
        """``compactToNewFile`` (format §9.4); writes the compacted file and returns its path.

        ``form="uploaded"`` (default) writes what Java returns and uploads: bytes ``[0, end of the last
        item written)`` -- 0 bytes when no item is reachable.  ``form="mapped"`` writes the whole local
        ``compacting/`` file Java maps (``28 + 8*slots + 28*indexItemCount`` bytes); the two differ only
        when some counted items are unreachable (e.g. Integer.MIN_VALUE keys with 5 or 7 slots).
        ``method``: ``"auto"``/``"fast"`` (numpy, falls back to the item-by-item walk for files that are
        not well-formed) or ``"slow"`` (the item-by-item walk).  Afterwards the status is SEALED.
        """
        self._check_open()
        if self.layout != "unsealed":
            raise TieredIndexError(f"{self.path}: only an unsealed file can be compacted")
        if form not in ("uploaded", "mapped"):
            raise TieredIndexError(f"form must be 'uploaded' or 'mapped', not {form!r}")
        if method not in ("auto", "fast", "slow"):
            raise TieredIndexError(f"method must be 'auto', 'fast' or 'slow', not {method!r}")
        s = self.hash_slot_num
        w0 = HEADER_SIZE + HASH_SLOT_SIZE * s
        limit = to_i32(w0 + COMPACT_INDEX_ITEM_SIZE * self._item_count)
        if limit < w0:
            raise TieredIndexError(
                f"{self.path}: cannot compact: indexItemCount={self._item_count} gives a compacted size of "
                f"{limit} (Java fails to create the file)"
            )
        plan = None
        if method != "slow":
            plan = self._compaction_plan_fast()
        if plan is None:
            plan = self._compaction_plan_slow(limit)
        order, counts = plan
        total = int(order.size)
        lens = counts.astype(np.int64) * COMPACT_INDEX_ITEM_SIZE
        starts = w0 + np.cumsum(lens) - lens
        table = np.empty((s, 2), dtype=">i4")
        table[:, 0] = starts
        table[:, 1] = lens
        header = _HEADER.pack(END_MAGIC_CODE, self._begin, self._end, self._slot_count, self._item_count)

        dest_path = os.fspath(dest_path)
        if os.path.exists(dest_path) and os.path.samefile(dest_path, self.path):
            raise TieredIndexError(f"{dest_path}: compaction output would overwrite its source")
        Path(dest_path).parent.mkdir(parents=True, exist_ok=True)
        out_size = limit if form == "mapped" else (w0 + COMPACT_INDEX_ITEM_SIZE * total if total else 0)
        with open(dest_path, "wb") as out:
            if out_size:
                out.write(header)
                out.write(table.tobytes())
                written = w0
                chunk = 1 << 18
                for i in range(0, total, chunk):
                    sel = order[i : i + chunk]
                    rows = self._read_item_rows(sel)
                    out.write(rows[:, :COMPACT_INDEX_ITEM_SIZE].tobytes())
                    written += COMPACT_INDEX_ITEM_SIZE * sel.size
                if written < out_size:
                    out.truncate(out_size)
        self._status = SEALED
        return dest_path

    def _read_item_rows(self, numbers: np.ndarray) -> np.ndarray:
        """32-byte rows of the given item numbers (any order), as a (k, 32) uint8 array."""
        if numbers.size == 0:
            return np.empty((0, INDEX_ITEM_SIZE), dtype=np.uint8)
        lo, hi = int(numbers.min()), int(numbers.max())
        base = self._items_base
        raw = _pread_exact(self._fh.fileno(), (hi - lo + 1) * INDEX_ITEM_SIZE, base + lo * INDEX_ITEM_SIZE)
        block = np.frombuffer(raw, dtype=np.uint8).reshape(-1, INDEX_ITEM_SIZE)
        return block[numbers - lo]

    def _read_slot_heads(self) -> np.ndarray:
        want = HASH_SLOT_SIZE * self.hash_slot_num
        raw = _pread_exact(self._fh.fileno(), want, HEADER_SIZE)
        if len(raw) < want:  # slot table cut short (only possible for a forced compacted geometry)
            raw += bytes(want - len(raw))
        return np.frombuffer(raw, dtype=">i4").astype(np.int64).reshape(-1, 2)

    def _read_items(self, first: int, count: int, dtype=ITEM_DTYPE) -> np.ndarray:
        """Items ``first .. first+count-1`` (clamped to the file) as a structured array."""
        base = self._items_base
        avail = max(0, (self.file_size - base) // dtype.itemsize - first)
        count = max(0, min(count, avail))
        raw = _pread_exact(self._fh.fileno(), count * dtype.itemsize, base + first * dtype.itemsize)
        return np.frombuffer(raw, dtype=dtype)

    def _compaction_plan_fast(self):
        """Vectorised compaction order for well-formed files, or None to fall back to the walk.

        Well-formed: every slot head in [0, count], every item's pointer strictly backward
        (0 <= itemIndex < n, so no cycles), and no item pointed at twice (chains disjoint).  Then every
        chain is a simple path; list ranking by pointer jumping gives each item its chain and depth.
        """
        n_items = self._item_count
        s = self.hash_slot_num
        max_items = (self.file_size - self._items_base) // INDEX_ITEM_SIZE
        if n_items < 0 or n_items >= max_items:
            return None
        heads = np.maximum(self._read_slot_heads()[:, 0], 0)
        if heads.size and heads.max() > n_items:
            return None
        nxt = self._read_items(0, n_items + 1)["itemIndex"].astype(np.int64)
        nxt[0] = 0
        idx = np.arange(n_items + 1, dtype=np.int64)
        if n_items and ((nxt[1:] < 0).any() or (nxt[1:] >= idx[1:]).any()):
            return None
        edges = np.concatenate([heads[heads > 0], nxt[1:][nxt[1:] > 0]])
        if edges.size and np.bincount(edges, minlength=n_items + 1).max() > 1:
            return None
        rank, last = _list_rank(nxt)
        head_slots = np.flatnonzero(heads > 0)
        head_items = heads[head_slots]
        slot_of_term = np.full(n_items + 1, -1, dtype=np.int64)
        slot_of_term[last[head_items]] = head_slots
        head_rank = np.zeros(s, dtype=np.int64)
        head_rank[head_slots] = rank[head_items]
        item_slot = slot_of_term[last[1:]]
        members = np.flatnonzero(item_slot >= 0) + 1
        m_slot = item_slot[members - 1]
        depth = head_rank[m_slot] - rank[members]
        order = members[np.lexsort((depth, m_slot))]
        counts = np.bincount(m_slot, minlength=s)
        return order.astype(np.int64), counts

    def _compaction_plan_slow(self, limit: int):
        """Item-by-item transcription of the Java loop (handles cycles, shared tails, odd pointers)."""
        s = self.hash_slot_num
        base = self._items_base
        heads = self._read_slot_heads()[:, 0]
        order: list[int] = []
        counts = np.zeros(s, dtype=np.int64)
        w = base
        for i in range(s):
            v = int(heads[i])
            c = 0
            while v > 0 and w < limit:
                pos = self._item_position(v)
                if pos < 0 or pos > self.file_size or self.file_size - pos < INDEX_ITEM_SIZE:
                    raise TieredIndexError(
                        f"{self.path}: cannot compact: slot {i} chain reaches item {v} at byte {pos}, outside "
                        f"the {self.file_size}-byte file (Java's doCompaction fails and returns null)"
                    )
                order.append(v)
                v = _INT.unpack(self._mm[pos + 28 : pos + 32])[0]
                w += COMPACT_INDEX_ITEM_SIZE
                c += 1
            counts[i] = c
        return np.asarray(order, dtype=np.int64), counts

    # ---- queries -------------------------------------------------------------------------------

    def query(
        self,
        topic: str,
        key: str,
        max_count: int,
        begin: int,
        end: int,
        *,
        reader: Optional[Reader] = None,
        begin_timestamp: Optional[int] = None,
    ) -> list[dict]:
        """``IndexStoreFile.queryAsync`` for this file's state.

        Unsealed/SEALED files walk the chain (format §9.7, up to 512 items, may return ``max_count + 1``
        items); compacted files do the two-read segment lookup (at most 1024 items read).  Items are
        dicts ``hashCode, topicId, queueId, offset, size, timeDiff, itemIndex`` (itemIndex 0 for
        compacted items).  ``reader(offset, length) -> bytes`` replaces the file access (e.g. a
        :class:`CountingReader`); ``begin_timestamp`` overrides the file's beginTimestamp for this call.
        Raises :class:`TieredQueryError` where the Java future fails (compacted reads out of range).
        """
        self._check_open()
        max_count = _check_int("max_count", max_count, INT_MIN, INT_MAX)
        begin = _check_int("begin", begin, LONG_MIN, LONG_MAX)
        end = _check_int("end", end, LONG_MIN, LONG_MAX)
        if begin_timestamp is not None:
            begin_timestamp = _check_int("begin_timestamp", begin_timestamp, LONG_MIN, LONG_MAX)
        base_ts = self._begin if begin_timestamp is None else begin_timestamp
        key_str = f"{_jstr(topic)}#{_jstr(key)}"  # String.format("%s#%s", topic, key)
        if self._status == UPLOAD:
            return self._query_segment(key_str, max_count, begin, end, reader, base_ts)
        if self._status in (UNSEALED, SEALED):
            return self._query_unsealed(key_str, max_count, begin, end, reader, base_ts)
        return []

    def _query_unsealed(self, key_str, max_count, begin, end, reader, base_ts) -> list[dict]:
        hc = tiered_hash(java_string_hash(key_str))
        result: list[dict] = []
        try:
            slot_pos = self._slot_position(java_rem(hc, self.hash_slot_num))
            v = max(self._get_int(slot_pos, reader), 0)
            left = MAX_QUERY_COUNT
            count = self._item_count
            while left > 0 and 0 < v <= count:
                data = self._get_block(self._item_position(v), INDEX_ITEM_SIZE, reader)
                item = _ITEM.unpack(data)
                t = to_i64(item[5] * 1000 + base_ts)
                if item[0] == hc and begin <= t <= end:
                    result.append(dict(zip(_ITEM_FIELDS, item)))
                    if len(result) > max_count:
                        break
                v = item[6]
                left -= 1
        except _JavaRuntimeError:
            pass  # Java logs the exception and returns what it has collected
        return result

    def _segment_read(self, position: int, length: int, reader) -> bytes:
        commit = self.commit_length
        if position < 0 or position >= commit:
            raise TieredQueryError(
                f"{self.path}: compacted query read at position {position} outside the committed "
                f"{commit} bytes (Java: TieredStoreException ILLEGAL_PARAM 'FileSegment read position is "
                f"illegal position')"
            )
        if length <= 0:
            raise TieredQueryError(
                f"{self.path}: compacted query read of length {length} (Java: TieredStoreException "
                f"ILLEGAL_PARAM 'FileSegment read length illegal')"
            )
        length = min(length, commit - position)
        if reader is not None:
            return reader(position, length)
        return self._mm[position : min(position + length, self.file_size)]

    def _query_segment(self, key_str, max_count, begin, end, reader, base_ts) -> list[dict]:
        if self.commit_length <= HEADER_SIZE:  # getCommitPosition() <= getSlotPosition(0)
            return []
        hc = tiered_hash(java_string_hash(key_str))
        slot_pos = self._slot_position(java_rem(hc, self.hash_slot_num))
        slot_buf = self._segment_read(slot_pos, HASH_SLOT_SIZE, reader)
        if len(slot_buf) < HASH_SLOT_SIZE:
            return []
        items_pos, items_len = _SLOT.unpack_from(slot_buf, 0)
        items_len = min(items_len, COMPACT_INDEX_ITEM_SIZE * MAX_COMPACT_READ_ITEMS)
        if items_pos <= 0 or items_len <= 0:
            return []
        buf = self._segment_read(items_pos, items_len, reader)
        if len(buf) % COMPACT_INDEX_ITEM_SIZE:
            return []
        result: list[dict] = []
        for off in range(0, len(buf), COMPACT_INDEX_ITEM_SIZE):
            item = _CITEM.unpack_from(buf, off)
            t = to_i64(item[5] * 1000 + base_ts)
            if item[0] == hc and begin <= t <= end and len(result) < max_count:
                d = dict(zip(_ITEM_FIELDS, item))
                d["itemIndex"] = 0
                result.append(d)
        return result

    # ---- inspection ----------------------------------------------------------------------------

    def header(self) -> dict:
        """The header as stored on disk plus the geometry in use."""
        self._check_open()
        if self.file_size < HEADER_SIZE:  # empty uploaded segment: no header at all
            magic = b = e = sc = ic = None
        else:
            magic, b, e, sc, ic = _HEADER.unpack(self._mm[0:HEADER_SIZE])
        return {
            "magic": magic,
            "magicHex": None if magic is None else _hex32(magic),
            "magicName": None if magic is None else _magic_name(magic),
            "layout": self.layout,
            "status": self._status,
            "beginTimestamp": b,
            "endTimestamp": e,
            "hashSlotCount": sc,
            "indexItemCount": ic,
            "hashSlotNum": self.hash_slot_num,
            "indexNum": self.index_num,
            "fileSize": self.file_size,
        }

    def _item_dict(self, n: Optional[int], pos: int, data: bytes, compact: bool) -> dict:
        if compact:
            vals = _CITEM.unpack(data) + (0,)
        else:
            vals = _ITEM.unpack(data)
        d = {"item": n, "position": pos}
        d.update(zip(_ITEM_FIELDS, vals))
        d["slot"] = tiered_slot(d["hashCode"], self.hash_slot_num)
        return d

    def walk_slot(self, slot: int, limit: int = MAX_QUERY_COUNT) -> tuple[list[dict], str]:
        """Items of one slot, newest first, and why the walk stopped.

        Unsealed stop reasons: ``empty`` (slot value <= 0), ``end`` (itemIndex <= 0), ``limit``,
        ``beyond_count`` (item number > indexItemCount; Java's query stops there too),
        ``out_of_range`` (item outside the file), ``cycle`` (an item seen twice).  Compacted files
        return the slot range's items with ``empty``/``end``/``limit``/``out_of_range``/``bad_length``.
        Each item dict has ``item`` (number; None for compacted), ``position``, the 7 fields and
        ``slot`` = the slot its hash belongs to.
        """
        self._check_open()
        if self.file_size < HEADER_SIZE:
            return [], "empty"
        slot = self._check_slot(slot)
        limit = max(0, int(limit))
        if self.layout == "compacted":
            start, length, items = self.slot_range(slot)
            if length == 0:
                return [], "empty"
            reason = "end"
            if length < 0 or length % COMPACT_INDEX_ITEM_SIZE:
                reason = "bad_length"
            if len(items) * COMPACT_INDEX_ITEM_SIZE < max(length, 0) and reason == "end":
                reason = "out_of_range"
            if len(items) > limit:
                items, reason = items[:limit], "limit"
            return items, reason
        v = _INT.unpack(self._mm[HEADER_SIZE + HASH_SLOT_SIZE * slot : HEADER_SIZE + HASH_SLOT_SIZE * slot + 4])[0]
        items: list[dict] = []
        if v <= 0:
            return items, "empty"
        seen: set[int] = set()
        while True:
            if len(items) >= limit:
                return items, "limit"
            if v > self._item_count:
                return items, "beyond_count"
            pos = self._item_position(v)
            if pos < self._items_base or pos + INDEX_ITEM_SIZE > self.file_size:
                return items, "out_of_range"
            if v in seen:
                return items, "cycle"
            seen.add(v)
            items.append(self._item_dict(v, pos, self._mm[pos : pos + INDEX_ITEM_SIZE], False))
            v = items[-1]["itemIndex"]
            if v <= 0:
                return items, "end"

    def slot_range(self, slot: int) -> tuple[int, int, list[dict]]:
        """Compacted file: (itemsStart, itemsLength, items) of one slot; items only where they fit the file."""
        self._check_open()
        if self.layout != "compacted":
            raise TieredIndexError(f"{self.path}: slot_range() is for compacted files; use walk_slot()")
        if self.file_size < HEADER_SIZE:
            return 0, 0, []
        slot = self._check_slot(slot)
        p = HEADER_SIZE + HASH_SLOT_SIZE * slot
        if p + 8 > self.file_size:
            return 0, 0, []
        start, length = _SLOT.unpack(self._mm[p : p + 8])
        items = []
        if start > 0 and length > 0:
            n = length // COMPACT_INDEX_ITEM_SIZE
            for i in range(n):
                q = start + i * COMPACT_INDEX_ITEM_SIZE
                if q + COMPACT_INDEX_ITEM_SIZE > self.file_size:
                    break
                items.append(self._item_dict(None, q, self._mm[q : q + COMPACT_INDEX_ITEM_SIZE], True))
        return start, length, items

    def _check_slot(self, slot) -> int:
        if isinstance(slot, bool) or not isinstance(slot, (int, np.integer)):
            raise TieredIndexError("slot must be an integer")
        slot = int(slot)
        if not 0 <= slot < self.hash_slot_num:
            raise TieredIndexError(f"slot {slot} out of range 0..{self.hash_slot_num - 1}")
        return slot

    def _chain_lengths(self):
        """Unsealed: per-slot chain length as Java walks it (pointers in 1..count), -1 for cyclic chains."""
        count = max(self._item_count, 0)
        max_items = (self.file_size - self._items_base) // INDEX_ITEM_SIZE
        count = min(count, max_items - 1)
        heads = self._read_slot_heads()[:, 0]
        nxt = self._read_items(0, count + 1)["itemIndex"].astype(np.int64)
        nxt[0] = 0
        nxt[(nxt < 0) | (nxt > count)] = 0
        rank, _last, cyclic = _list_rank(nxt, detect_cycles=True)
        valid = (heads > 0) & (heads <= count)
        lengths = np.zeros(heads.size, dtype=np.int64)
        hv = heads[valid]
        lengths[valid] = rank[hv]
        cyc = np.zeros(heads.size, dtype=bool)
        cyc[valid] = cyclic[hv]
        lengths[cyc] = -1
        return heads, lengths, nxt, cyclic

    def stats(self, top: int = 10) -> dict:
        """Slot occupancy, chain-length histogram and longest chains (numpy over the whole tables)."""
        self._check_open()
        s = self.hash_slot_num
        if self.layout == "compacted":
            tab = self._read_slot_heads()
            lens = tab[:, 1]
            lengths = np.where(lens > 0, lens // COMPACT_INDEX_ITEM_SIZE, 0)
            cyclic_slots = 0
            cap = MAX_COMPACT_READ_ITEMS
        else:
            _heads, lengths, _nxt, _cyc = self._chain_lengths()
            cyclic_slots = int((lengths < 0).sum())
            cap = MAX_QUERY_COUNT
        used = lengths != 0
        occ = int(used.sum())
        pos = lengths[lengths > 0]
        uniq, cnt = np.unique(pos, return_counts=True)
        order = np.argsort(-lengths, kind="stable")[: max(0, int(top))]
        longest = [(int(i), int(lengths[i])) for i in order if lengths[i] > 0]
        return {
            "layout": self.layout,
            "hashSlotNum": s,
            "indexNum": self.index_num,
            "indexItemCount": self._item_count,
            "usedSlots": occ,
            "emptySlots": s - occ,
            "occupancy": occ / s if s else 0.0,
            "chainedItems": int(pos.sum()),
            "meanChainLength": float(pos.mean()) if pos.size else 0.0,
            "maxChainLength": int(pos.max()) if pos.size else 0,
            "chainLengthHistogram": {int(k): int(v) for k, v in zip(uniq, cnt)},
            "longestChains": longest,
            "cyclicSlots": cyclic_slots,
            "queryCap": cap,
            "slotsOverQueryCap": int((lengths > cap).sum()),
        }

    def verify(self, max_examples: int = 10) -> list[str]:
        """Structural problems as one-line strings (empty list = consistent)."""
        self._check_open()
        problems: list[str] = []
        if self.file_size < HEADER_SIZE:
            return problems  # an empty upload (no reachable item) is legitimate

        def report(kind: str, bad: list, fmt) -> None:
            if not bad:
                return
            shown = ", ".join(fmt(x) for x in bad[:max_examples])
            more = f" (+{len(bad) - max_examples} more)" if len(bad) > max_examples else ""
            problems.append(f"{kind}: {shown}{more}")

        magic, h_begin, h_end, h_slots, h_count = _HEADER.unpack(self._mm[0:HEADER_SIZE])
        if magic not in (BEGIN_MAGIC_CODE, END_MAGIC_CODE):
            problems.append(f"bad magic {_hex32(magic)}")
        if h_count < 0:
            problems.append(f"header indexItemCount is negative ({h_count})")
        if h_slots < 0:
            problems.append(f"header hashSlotCount is negative ({h_slots})")
        if self.layout == "compacted":
            self._verify_compacted(problems, report, magic, h_slots, h_count)
        else:
            self._verify_unsealed(problems, report, magic, h_slots, h_count)
        return problems

    def _verify_unsealed(self, problems, report, magic, h_slots, h_count):
        s, m = self.hash_slot_num, self.index_num
        if h_count > m - 1:
            problems.append(f"header indexItemCount {h_count} exceeds the capacity {m - 1} (index_num {m} - 1)")
        expect_end = m == h_count + 1
        if magic in (BEGIN_MAGIC_CODE, END_MAGIC_CODE) and (magic == END_MAGIC_CODE) != expect_end:
            problems.append(
                f"magic is {_magic_name(magic)} but indexItemCount+1 {'==' if expect_end else '!='} index_num "
                f"({h_count}+1 vs {m})"
            )
        tab = self._read_slot_heads()
        heads, hi = tab[:, 0], tab[:, 1]
        count = min(max(h_count, 0), m - 1)
        report("slots with nonzero upper word (unused in this layout)", np.flatnonzero(hi != 0).tolist(), str)
        report("slots with a negative value", np.flatnonzero(heads < 0).tolist(), lambda i: f"{i}={heads[i]}")
        report(
            "slots pointing past indexItemCount",
            np.flatnonzero(heads > count).tolist(),
            lambda i: f"{i}->{heads[i]}",
        )
        used = int((heads > 0).sum())
        if used != h_slots:
            problems.append(f"header hashSlotCount {h_slots} != {used} non-empty slots")
        items = self._read_items(0, m)
        if items.size and items[0].tobytes() != bytes(INDEX_ITEM_SIZE):
            problems.append("item 0 is not all zero (it is never used)")
        tail = items[count + 1 :]
        if tail.size:
            nz = np.flatnonzero(np.frombuffer(tail.tobytes(), dtype=np.uint8).reshape(-1, 32).any(axis=1))
            report(
                "non-zero items after indexItemCount (count disagrees with the item table)",
                (nz + count + 1).tolist(),
                str,
            )
        if count == 0:
            return
        body = items[1 : count + 1]
        nums = np.arange(1, count + 1, dtype=np.int64)
        ptr = body["itemIndex"].astype(np.int64)
        report(
            "items pointing outside 0..indexItemCount",
            nums[(ptr < 0) | (ptr > count)].tolist(),
            lambda n: f"{n}->{int(ptr[n - 1])}",
        )
        report(
            "items pointing forward (not to an older item)",
            nums[(ptr >= nums) & (ptr <= count)].tolist(),
            lambda n: f"{n}->{int(ptr[n - 1])}",
        )
        _h, lengths, nxt, cyclic = self._chain_lengths()
        report("slots whose chain has a cycle", np.flatnonzero(lengths < 0).tolist(), str)
        hashes = body["hashCode"].astype(np.int64)
        exp_slot = np.fmod(hashes, s)  # Java % (sign of the dividend)
        # Chain membership: slot heads must hold items of their slot; links must stay within a slot.
        valid_heads = np.flatnonzero((heads > 0) & (heads <= count))
        wrong_head = [int(i) for i in valid_heads if exp_slot[heads[i] - 1] != i]
        report(
            "slots whose newest item hashes to another slot",
            wrong_head,
            lambda i: f"slot {i} item {int(heads[i])} (hash {int(hashes[heads[i] - 1])} -> slot {int(exp_slot[heads[i] - 1])})",
        )
        linked = (ptr > 0) & (ptr <= count)
        src = nums[linked]
        dst = ptr[linked]
        bad_link = src[exp_slot[src - 1] != exp_slot[dst - 1]]
        report(
            "items whose chain link crosses slots (hash does not land in the chain's slot)",
            bad_link.tolist(),
            lambda n: f"{n}(slot {int(exp_slot[n - 1])})->{int(ptr[n - 1])}(slot {int(exp_slot[ptr[n - 1] - 1])})",
        )
        indeg = np.bincount(np.concatenate([heads[(heads > 0) & (heads <= count)], dst]), minlength=count + 1)
        merged = (np.flatnonzero(indeg[1:] > 1) + 1).tolist()
        report("items reached from more than one place (chains merge)", merged, str)
        # Reachability from the slots by pointer doubling: after round k every node within 2^k steps
        # of a head is marked (O(N log N), also terminates on cycles).
        reach = np.zeros(count + 1, dtype=bool)
        reach[heads[(heads > 0) & (heads <= count)]] = True
        jump = nxt.copy()
        for _ in range(max(1, math.ceil(math.log2(count + 1))) + 1):
            reach[jump[np.flatnonzero(reach)]] = True
            jump = jump[jump]
        reach[0] = True
        unreachable = (np.flatnonzero(~reach[1:]) + 1).tolist()

        def fmt_unreach(n):
            h = int(hashes[n - 1])
            sl = int(exp_slot[n - 1])
            why = f" (hash {h} -> slot {sl}: position {28 + 8 * sl} is in the header, Java quirk)" if sl < 0 else ""
            return f"{n}{why}"

        report("items not reachable from any slot", unreachable, fmt_unreach)

    def _verify_compacted(self, problems, report, magic, h_slots, h_count):
        s = self.hash_slot_num
        size = self.file_size
        base = HEADER_SIZE + HASH_SLOT_SIZE * s
        if magic != END_MAGIC_CODE:
            problems.append(f"compacted file has magic {_magic_name(magic)} (expected END)")
        if base > size:
            problems.append(f"slot table ({s} slots, ends at {base}) is longer than the file ({size} bytes)")
            return
        tab = self._read_slot_heads()
        starts, lens = tab[:, 0], tab[:, 1]
        ends = starts + lens
        idx = np.arange(s)
        report(
            "slot ranges with a negative length",
            idx[lens < 0].tolist(),
            lambda i: f"{i}(len {lens[i]})",
        )
        report(
            "slot lengths not a multiple of 28",
            idx[(lens > 0) & (lens % COMPACT_INDEX_ITEM_SIZE != 0)].tolist(),
            lambda i: f"{i}(len {lens[i]})",
        )
        oob = idx[(lens > 0) & ((starts < base) | (ends > size))]
        report("slot ranges outside the item area", oob.tolist(), lambda i: f"{i}[{starts[i]},{ends[i]})")
        nonempty = idx[lens > 0]
        if nonempty.size > 1:
            o = nonempty[np.argsort(starts[nonempty], kind="stable")]
            ov = np.flatnonzero(starts[o[1:]] < ends[o[:-1]])
            report(
                "overlapping slot ranges",
                ov.tolist(),
                lambda j: f"slot {o[j]}[{starts[o[j]]},{ends[o[j]]}) / slot {o[j + 1]}[{starts[o[j + 1]]},{ends[o[j + 1]]})",
            )
        if s and starts[0] != base:
            problems.append(f"slot 0 starts at {starts[0]}, expected {base} (end of the slot table)")
        misplaced = idx[1:][starts[1:] != ends[:-1]] if s > 1 else np.empty(0, dtype=np.int64)
        report("slot ranges not contiguous with the previous slot", misplaced.tolist(), lambda i: f"{i}@{starts[i]}")
        total = int(lens[lens > 0].sum())
        n_items = total // COMPACT_INDEX_ITEM_SIZE
        if n_items != h_count:
            problems.append(
                f"slot ranges hold {n_items} items but header indexItemCount is {h_count}"
                + (" (unreachable items are not compacted)" if n_items < h_count else "")
            )
        if size not in (base + total, base + COMPACT_INDEX_ITEM_SIZE * max(h_count, 0)):
            problems.append(
                f"file size {size} is neither slot table + items ({base + total}) nor the mapped size "
                f"{base + COMPACT_INDEX_ITEM_SIZE * max(h_count, 0)}"
            )
        used = int((lens > 0).sum())
        if used != h_slots:
            problems.append(f"header hashSlotCount {h_slots} != {used} non-empty slots")
        good = idx[(lens > 0) & (lens % COMPACT_INDEX_ITEM_SIZE == 0) & (starts >= base) & (ends <= size)]
        if good.size:
            k = lens[good] // COMPACT_INDEX_ITEM_SIZE
            raw = _pread_exact(self._fh.fileno(), size - base, base)
            arr = np.frombuffer(raw, dtype=np.uint8)
            offs = np.repeat(starts[good] - base, k) + (
                np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k)
            ) * COMPACT_INDEX_ITEM_SIZE
            hbytes = arr[offs[:, None] + np.arange(4)]
            hashes = hbytes.astype(np.int64) @ np.array([1 << 24, 1 << 16, 1 << 8, 1], dtype=np.int64)
            hashes = np.where(hashes >= 1 << 31, hashes - (1 << 32), hashes)
            slot_of = np.repeat(good, k)
            wrong = np.flatnonzero(np.fmod(hashes, s) != slot_of)
            report(
                "items whose hash does not land in their slot",
                wrong.tolist(),
                lambda j: f"@{int(offs[j]) + base} in slot {int(slot_of[j])} (hash {int(hashes[j])})",
            )


_PRIVATE = object()


# --------------------------------------------------------------------------------------------------
# numpy helpers
# --------------------------------------------------------------------------------------------------


def _list_rank(nxt: np.ndarray, detect_cycles: bool = False):
    """Pointer jumping over ``nxt`` (0 = end; entry 0 is the sink).

    Returns ``rank`` (nodes from n to the end of its path, inclusive) and ``last`` (the path's final
    node); with ``detect_cycles`` also a boolean array of nodes whose path never ends.
    """
    n = nxt.size
    nx = nxt.astype(np.int64).copy()
    nx[0] = 0
    rank = np.ones(n, dtype=np.int64)
    rank[0] = 0
    last = np.arange(n, dtype=np.int64)
    rounds = max(1, math.ceil(math.log2(max(n, 2)))) + 2
    for _ in range(rounds):
        active = nx != 0
        if not active.any():
            break
        rank = rank + rank[nx]
        last = np.where(active, last[nx], last)
        nx = nx[nx]
    if detect_cycles:
        return rank, last, nx != 0
    return rank, last


def _infer_unsealed_geometry(fd: int, path: str, size: int, count: int) -> tuple[int, int]:
    """Slot count of an unsealed (BEGIN) file when neither geometry value is given.

    Candidates: ``s + 4*m = (size-28)/8`` with ``m >= count + 2`` (BEGIN: not full).  A candidate must
    have zero upper slot words, all slot values in 0..count, an all-zero item 0, a non-zero last item,
    zeros after it, non-negative pointers in its first items and slot heads whose hash lands in their slot.
    """
    words = (size - HEADER_SIZE) // HASH_SLOT_SIZE
    s_max = words - 4 * (count + 2)
    if s_max < 1:
        raise TieredIndexError(
            f"{path}: file size {size} bytes cannot hold indexItemCount={count} items; truncated or corrupt"
        )
    if count == 0:
        raise TieredIndexError(
            f"{path}: cannot infer the geometry of an empty unsealed file ({size} bytes); pass hash_slot_num or index_num"
        )
    r = words % 4
    # First 8-byte word (from byte 28) whose upper half is non-zero: slots never have one, item 1 usually does.
    scan_words = s_max + 8
    first_hi = None
    step = 1 << 20
    for w in range(0, scan_words, step):
        n = min(step, scan_words - w)
        raw = _pread_exact(fd, 8 * n, HEADER_SIZE + 8 * w)
        hi = np.frombuffer(raw, dtype=">u4")[1::2]
        nz = np.flatnonzero(hi)
        if nz.size:
            first_hi = w + int(nz[0])
            break
    top = s_max if first_hi is None else min(s_max, first_hi - 4)
    top -= (top - r) % 4
    cands = list(range(top, 0, -4))[:64]
    passing = []
    for s in cands:
        if _geometry_plausible(fd, size, s, count):
            passing.append(s)
            if len(passing) > 1:
                break
    if len(passing) != 1:
        what = "no geometry fits" if not passing else f"ambiguous (hash_slot_num {passing[0]} or {passing[1]})"
        raise TieredIndexError(
            f"{path}: cannot infer the slot count of this unsealed file ({size} bytes, indexItemCount={count}): "
            f"{what}; pass hash_slot_num or index_num"
        )
    s = passing[0]
    return s, (size - HEADER_SIZE - HASH_SLOT_SIZE * s) // INDEX_ITEM_SIZE


def _geometry_plausible(fd: int, size: int, s: int, count: int) -> bool:
    base = HEADER_SIZE + HASH_SLOT_SIZE * s
    m = (size - base) // INDEX_ITEM_SIZE
    tab = np.frombuffer(_pread_exact(fd, 8 * s, HEADER_SIZE), dtype=">i4").astype(np.int64).reshape(-1, 2)
    if (tab[:, 1] != 0).any() or (tab[:, 0] < 0).any() or (tab[:, 0] > count).any():
        return False
    if _pread_exact(fd, INDEX_ITEM_SIZE, base) != bytes(INDEX_ITEM_SIZE):
        return False
    last = _pread_exact(fd, INDEX_ITEM_SIZE, base + INDEX_ITEM_SIZE * count)
    if last == bytes(INDEX_ITEM_SIZE):
        return False
    if count + 1 < m:
        nxt_item = _pread_exact(fd, INDEX_ITEM_SIZE, base + INDEX_ITEM_SIZE * (count + 1))
        if nxt_item != bytes(INDEX_ITEM_SIZE):
            return False
    k = min(count, 256)
    items = np.frombuffer(_pread_exact(fd, INDEX_ITEM_SIZE * k, base + INDEX_ITEM_SIZE), dtype=ITEM_DTYPE)
    # A chain pointer is never negative.  (Pointers of unreachable Integer.MIN_VALUE items hold a header
    # word and may point anywhere, so nothing stricter is required.)
    if (items["itemIndex"] < 0).any():
        return False
    # Every counted item was written by a put: none is all zero.
    if not np.frombuffer(items.tobytes(), dtype=np.uint8).reshape(-1, INDEX_ITEM_SIZE).any(axis=1).all():
        return False
    # A chain link joins two items of the same slot (links of MIN_VALUE items are exempt, see above).
    hashes = items["hashCode"].astype(np.int64)
    ptr = items["itemIndex"].astype(np.int64)
    nums = np.arange(1, k + 1)
    link = (ptr > 0) & (ptr < nums)
    src, dst = nums[link], ptr[link]
    hs, hd = hashes[src - 1], hashes[dst - 1]
    ok = (np.fmod(hs, s) == np.fmod(hd, s)) | (hs == INT_MIN) | (hd == INT_MIN)
    if not ok.all():
        return False
    heads = tab[:, 0]
    used = np.flatnonzero(heads > 0)[:256]
    for slot in used:
        n = int(heads[slot])
        h = _INT.unpack(_pread_exact(fd, 4, base + INDEX_ITEM_SIZE * n))[0]
        if java_rem(h, s) != slot:
            return False
    return True
