"""One RocketMQ 5 tiered index file (``IndexStoreFile``, format §9): create, open, put_key, close, and the
byte accessors the compaction, query, inspection and check modules of this package read it through.

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

  (Format format §9.5 says "Java then throws" for every negative slot; that is only true for slot <= -4.)
* timeDiff = ``(int)((timestamp - begin) / 1000L)``: truncation toward zero, then int32 wrap, no clamp.

The query rules are in :mod:`engine.tiered.index.queries`, compaction in :mod:`.compaction`.
"""
from __future__ import annotations

import contextlib
import mmap
import os
import stat as _stat
import struct
from typing import Optional

import numpy as np

from engine.errors import InvalidArgumentError
from engine.fsutil import allocate, pread_fully
from engine.java.lang import INT_MAX, INT_MIN, LONG_MAX, LONG_MIN, java_div, java_is_blank, java_rem, to_i32, to_i64
from engine.tiered.index import checks, compaction, inspection, queries
from engine.tiered.index.format import (BEGIN_MAGIC_CODE, CLOSED, END_MAGIC_CODE, HASH_SLOT_SIZE, HEADER,
                                        HEADER_SIZE, INDEX_ITEM_SIZE, INT, ITEM, ITEM_DTYPE, MAX_QUERY_COUNT,
                                        SEALED, UNSEALED, UPLOAD, JavaRuntimeError, Reader, TieredIndexError,
                                        check_int, hex32, magic_name, tiered_key_hash,
                                        unsealed_file_size)
from engine.tiered.index.geometry import (check_tiered_magic, compacted_geometry, detect_layout, read_head,
                                          unsealed_geometry)

_PRIVATE = object()


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
        s = check_int("hash_slot_num", hash_slot_num, 1, INT_MAX)
        m = check_int("index_num", index_num, 1, INT_MAX)
        ts = check_int("file_timestamp", file_timestamp, LONG_MIN, LONG_MAX)
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
            # Real blocks before the file is mapped for writing: a store into a hole of a mapping on a full disk
            # is a SIGBUS; a failed allocation is a DiskFullError naming the file and the free space.
            allocate(fh.fileno(), 0, size, path)
            mm = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_WRITE)
        except BaseException:
            fh.close()
            with contextlib.suppress(OSError):
                os.unlink(path)  # no half-made file is left behind
            raise
        self = cls(_PRIVATE)
        self.path, self.layout, self.writable = path, "unsealed", True
        self.hash_slot_num, self.index_num = s, m
        self.file_size = self.commit_length = size
        self._fh, self._mm, self._closed, self._status = fh, mm, False, UNSEALED
        # Java constructor: begin = timestamp, end/counts read from the (all-zero) header, header written.
        self._begin = ts
        self._end = self._get_long(4)
        self._slot_count = self.get_int(20)
        self._item_count = self.get_int(24)
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
            hash_slot_num = check_int("hash_slot_num", hash_slot_num, 1, INT_MAX)
        if index_num is not None:
            index_num = check_int("index_num", index_num, 1, INT_MAX)
        if begin_timestamp is not None:
            begin_timestamp = check_int("begin_timestamp", begin_timestamp, LONG_MIN, LONG_MAX)
        try:
            st = os.stat(path)
        except OSError as e:
            raise TieredIndexError(f"{path}: {e.strerror or e}") from None
        if not _stat.S_ISREG(st.st_mode):
            raise TieredIndexError(f"{path}: not a regular file")
        try:
            fh = open(path, "r+b" if writable else "rb")
        except OSError as e:
            raise TieredIndexError(f"{path}: cannot open: {e.strerror or e}") from None
        self = cls(_PRIVATE)
        self.path, self.file_size, self.commit_length, self._fh = path, st.st_size, st.st_size, fh
        try:
            self._load(hash_slot_num, index_num, writable, layout, begin_timestamp, force_geometry)
        except BaseException:
            fh.close()
            raise
        return self

    def _load(self, hash_slot_num, index_num, writable, layout, begin_override, force) -> None:
        """Layout, geometry and header state of the file just opened; maps it and, if writable, re-opens it
        the way the broker does."""
        path, size, fd = self.path, self.file_size, self._fh.fileno()
        if size == 0 and layout in (None, "compacted") and not writable:
            # The only thing a 0-byte file can be: the upload of a compaction that found no item
            # (format §9.4).  Queries hit the "committed length <= 28" guard and return nothing.
            self.layout, self.hash_slot_num, self.index_num = "compacted", hash_slot_num or 0, index_num
            self._mm, self._closed, self._status = b"", False, UPLOAD
            self._begin = begin_override or 0
            return
        if size < HEADER_SIZE:
            raise TieredIndexError(
                f"{path}: file is {size} bytes, smaller than the {HEADER_SIZE}-byte tiered index header "
                f"(truncated or empty; an index file without items uploads 0 bytes)"
            )
        head = read_head(fd, path, size)
        if layout is None:
            check_tiered_magic(path, head.magic)
            layout = detect_layout(fd, path, size, head, hash_slot_num, index_num)
        self.layout = layout
        if layout == "compacted":
            if writable:
                raise TieredIndexError(f"{path}: compacted (uploaded) index files are immutable; open read-only")
            self.hash_slot_num = compacted_geometry(path, size, head, hash_slot_num, force)
            self.index_num = index_num
            self._status = UPLOAD
        else:
            s, m = unsealed_geometry(fd, path, size, head, hash_slot_num, index_num)
            if not force and not 0 <= head.item_count <= m - 1:
                raise TieredIndexError(
                    f"{path}: header indexItemCount {head.item_count} does not fit geometry hash_slot_num={s}, "
                    f"index_num={m} (at most {m - 1} items); wrong geometry? (force_geometry=True opens it anyway)"
                )
            self.hash_slot_num, self.index_num, self._status = s, m, UNSEALED
        self._begin = head.begin if begin_override is None else begin_override
        self._end, self._slot_count, self._item_count = head.end, head.slot_count, head.item_count
        if writable:
            allocate(fd, 0, size, path)  # a broker's file may be sparse: no holes where puts will write
        self._mm = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
        self._closed = False
        self.writable = writable
        if writable:
            # Java re-open: endTimestamp = getLong(INDEX_BEGIN_TIME_STAMP); header rewritten immediately.
            self._end = self._get_long(4)
            self._flush_header()

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

    def check_open(self) -> None:
        if self._closed:
            raise TieredIndexError(f"{self.path}: file is closed")

    def header(self) -> dict:
        """The header as stored on disk plus the geometry in use."""
        self.check_open()
        if self.file_size < HEADER_SIZE:  # empty uploaded segment: no header at all
            magic = b = e = sc = ic = None
        else:
            magic, b, e, sc, ic = HEADER.unpack(self._mm[0:HEADER_SIZE])
        return {
            "magic": magic,
            "magicHex": None if magic is None else hex32(magic),
            "magicName": None if magic is None else magic_name(magic),
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

    # ---- reading (Java ByteBuffer absolute accessors, bounds-checked like Java; bulk numpy reads) ------

    def get_int(self, pos: int, reader: Optional[Reader] = None) -> int:
        if pos < 0 or pos > self.file_size - 4:
            raise JavaRuntimeError(f"java.lang.IndexOutOfBoundsException: getInt({pos}), limit {self.file_size}")
        data = reader(pos, 4) if reader is not None else self._mm[pos : pos + 4]
        if len(data) < 4:
            raise JavaRuntimeError(f"short read at {pos}")
        return INT.unpack(data)[0]

    def get_block(self, pos: int, length: int, reader: Optional[Reader] = None) -> bytes:
        """``buffer.position(pos); buffer.get(byte[length])`` on a duplicate of the mapped buffer."""
        if pos < 0 or pos > self.file_size:
            raise JavaRuntimeError(f"java.lang.IllegalArgumentException: newPosition {pos} > limit {self.file_size}")
        if self.file_size - pos < length:
            raise JavaRuntimeError("java.nio.BufferUnderflowException")
        data = reader(pos, length) if reader is not None else self._mm[pos : pos + length]
        if len(data) < length:
            raise JavaRuntimeError(f"short read at {pos}")
        return data

    def read_bytes(self, pos: int, length: int) -> bytes:
        """The mapped bytes [pos, pos+length), cut at the end of the file (no Java bounds rule)."""
        return self._mm[pos : pos + length]

    def pread(self, pos: int, length: int) -> bytes:
        """Bytes read with pread (bulk reads that should not fault the mapping in page by page)."""
        return pread_fully(self._fh.fileno(), length, pos)

    def slot_position(self, slot: int) -> int:
        return to_i32(HEADER_SIZE + slot * HASH_SLOT_SIZE)

    def item_position(self, n: int) -> int:
        return to_i32(HEADER_SIZE + self.hash_slot_num * HASH_SLOT_SIZE + n * INDEX_ITEM_SIZE)

    @property
    def items_base(self) -> int:
        return HEADER_SIZE + self.hash_slot_num * HASH_SLOT_SIZE

    def read_slot_table(self) -> np.ndarray:
        """The slot table as an (s, 2) int64 array: (head, unused) unsealed, (itemsStart, itemsLength) compacted."""
        want = HASH_SLOT_SIZE * self.hash_slot_num
        raw = self.pread(HEADER_SIZE, want)
        if len(raw) < want:  # slot table cut short (only possible for a forced compacted geometry)
            raw += bytes(want - len(raw))
        return np.frombuffer(raw, dtype=">i4").astype(np.int64).reshape(-1, 2)

    def read_items(self, first: int, count: int, dtype=ITEM_DTYPE) -> np.ndarray:
        """Items ``first .. first+count-1`` (clamped to the file) as a structured array."""
        base = self.items_base
        avail = max(0, (self.file_size - base) // dtype.itemsize - first)
        count = max(0, min(count, avail))
        raw = self.pread(base + first * dtype.itemsize, count * dtype.itemsize)
        return np.frombuffer(raw, dtype=dtype)

    def read_item_rows(self, numbers: np.ndarray) -> np.ndarray:
        """32-byte rows of the given item numbers (any order), as a (k, 32) uint8 array."""
        if numbers.size == 0:
            return np.empty((0, INDEX_ITEM_SIZE), dtype=np.uint8)
        lo, hi = int(numbers.min()), int(numbers.max())
        raw = self.pread(self.items_base + lo * INDEX_ITEM_SIZE, (hi - lo + 1) * INDEX_ITEM_SIZE)
        block = np.frombuffer(raw, dtype=np.uint8).reshape(-1, INDEX_ITEM_SIZE)
        return block[numbers - lo]

    # ---- writing -------------------------------------------------------------------------------

    def _get_long(self, pos: int) -> int:
        if pos < 0 or pos > self.file_size - 8:
            raise JavaRuntimeError(f"java.lang.IndexOutOfBoundsException: getLong({pos})")
        return struct.unpack(">q", self._mm[pos : pos + 8])[0]

    def _put_int(self, pos: int, value: int) -> None:
        if pos < 0 or pos > self.file_size - 4:
            raise JavaRuntimeError(f"java.lang.IndexOutOfBoundsException: putInt({pos}), limit {self.file_size}")
        self._mm[pos : pos + 4] = INT.pack(value)

    def _flush_header(self) -> None:
        end = self.index_num is not None and self.index_num == to_i32(self._item_count + 1)
        self._mm[0:HEADER_SIZE] = HEADER.pack(
            END_MAGIC_CODE if end else BEGIN_MAGIC_CODE, self._begin, self._end, self._slot_count, self._item_count
        )

    def put_key(self, topic: str, topic_id: int, queue_id: int, keys, offset: int, size: int, timestamp: int) -> str:
        """``IndexStoreFile.putKey``; returns ``"SUCCESS"``, ``"FILE_FULL"`` or ``"UNKNOWN_ERROR"``.

        ``keys`` is the Java ``Set<String>`` as a sequence **in its iteration order** (for a
        dispatcher-built set use :func:`engine.broker.index.keys.tiered_key_set`).  Python sets are refused because
        their order is not Java's.  ``UNKNOWN_ERROR`` is returned for a blank topic and when Java would throw inside
        the put (a slot position outside the buffer, see module doc); ``last_error`` then says why.
        """
        self.check_open()
        if not self.writable or self.layout != "unsealed":
            raise TieredIndexError(f"{self.path}: opened read-only (use create() or open(..., writable=True))")
        topic_id = check_int("topic_id", topic_id, INT_MIN, INT_MAX)
        queue_id = check_int("queue_id", queue_id, INT_MIN, INT_MAX)
        size = check_int("size", size, INT_MIN, INT_MAX)
        offset = check_int("offset", offset, LONG_MIN, LONG_MAX)
        timestamp = check_int("timestamp", timestamp, LONG_MIN, LONG_MAX)
        key_list = _key_list(keys)
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
        try:
            for key in key_list:
                self._put_item(tiered_key_hash(topic, key), topic_id, queue_id, offset, size, timestamp)
            return "SUCCESS"
        except JavaRuntimeError as e:
            self.last_error = str(e)
            return "UNKNOWN_ERROR"

    def _put_item(self, hc: int, topic_id: int, queue_id: int, offset: int, size: int, timestamp: int) -> None:
        """One key of putKey: item appended, slot pointed at it, header rewritten (format §9.6)."""
        slot_pos = self.slot_position(java_rem(hc, self.hash_slot_num))
        old = max(self.get_int(slot_pos), 0)
        time_diff = to_i32(java_div(to_i64(timestamp - self._begin), 1000))
        self._item_count = to_i32(self._item_count + 1)
        n = self._item_count
        pos = self.item_position(n)
        if pos < 0 or pos > self.file_size:
            raise JavaRuntimeError(f"java.lang.IllegalArgumentException: newPosition {pos}")
        if self.file_size - pos < INDEX_ITEM_SIZE:
            raise JavaRuntimeError("java.nio.BufferOverflowException")
        self._mm[pos : pos + INDEX_ITEM_SIZE] = ITEM.pack(hc, topic_id, queue_id, offset, size, time_diff, old)
        self._put_int(slot_pos, n)
        if old <= 0:
            self._slot_count = to_i32(self._slot_count + 1)
        if self._end < timestamp:
            self._end = timestamp
        self._flush_header()

    # ---- compaction, queries, inspection, checks (in their own modules) -------------------------

    def compact(self, dest_path, *, form: str = "uploaded", method: str = "auto") -> str:
        """``compactToNewFile`` (format §9.4); see :func:`engine.tiered.index.compaction.compact`.
        Afterwards the status is SEALED."""
        out = compaction.compact(self, dest_path, form=form, method=method)
        self._status = SEALED
        return out

    def query(self, topic: str, key: str, max_count: int, begin: int, end: int, *,
              reader: Optional[Reader] = None, begin_timestamp: Optional[int] = None) -> list[dict]:
        """``IndexStoreFile.queryAsync`` for this file's state; see :func:`engine.tiered.index.queries.query`."""
        return queries.query(self, topic, key, max_count, begin, end, reader=reader,
                             begin_timestamp=begin_timestamp)

    def walk_slot(self, slot: int, limit: int = MAX_QUERY_COUNT) -> tuple[list[dict], str]:
        """Items of one slot, newest first, and why the walk stopped (:func:`.inspection.walk_slot`)."""
        return inspection.walk_slot(self, slot, limit)

    def slot_range(self, slot: int) -> tuple[int, int, list[dict]]:
        """Compacted file: (itemsStart, itemsLength, items) of one slot (:func:`.inspection.slot_range`)."""
        return inspection.slot_range(self, slot)

    def stats(self, top: int = 10) -> dict:
        """Slot occupancy, chain-length histogram and longest chains (:func:`.inspection.stats`)."""
        return inspection.stats(self, top)

    def verify(self, max_examples: int = 10) -> list[str]:
        """Structural problems as one-line strings, empty when consistent (:func:`.checks.verify`)."""
        return checks.verify(self, max_examples)


def _key_list(keys) -> list[str]:
    """The Java Set as a list in its iteration order; refuses what cannot be one."""
    if keys is None:
        return []
    if isinstance(keys, (str, bytes)):
        raise TieredIndexError("keys must be a sequence of strings, not a single string")
    if isinstance(keys, (set, frozenset)):
        raise TieredIndexError(
            "keys must be ordered as the Java Set iterates them; a Python set has no such order "
            "(use engine.broker.index.keys.tiered_key_set() or engine.java.collections.hashset_order())"
        )
    out = list(keys)
    for k in out:
        if not isinstance(k, str):
            raise TieredIndexError(f"keys must be strings, got {type(k).__name__}")
    if len(set(out)) != len(out):
        raise TieredIndexError("keys contain duplicates; a Java Set cannot")
    return out


def open_tiered(path, hash_slot_num: Optional[int] = None, index_num: Optional[int] = None) -> IndexStoreFile:
    """Open read-only for the CLI: a missing path is bad input; geometry: the given values, else inferred."""
    if not os.path.exists(path):
        raise InvalidArgumentError(f"tiered index file {path} does not exist")
    return IndexStoreFile.open(path, hash_slot_num, index_num)
