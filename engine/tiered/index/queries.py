"""Query by key on one tiered index file (``IndexStoreFile.queryAsync``, format §9.7), as the Java code does it:

* unsealed (and SEALED) files walk the key's slot chain with the shared ChainWalk: at most 512 chain items
  visited (other keys of the slot count too), no cycle or self-link check, may return ``maxCount + 1`` items,
  time filter ``timeDiff*1000 + begin``, and any exception ends the walk and returns what was found so far;
* compacted files do two reads (8-byte slot, then the slot's items, at most 1024 items), with the tiered
  FileSegment read rules (position outside ``[0, committed)`` -> the query future fails, raised here as
  :class:`TieredQueryError`; reads are clamped to the committed length) and the "committed length <= 28 ->
  empty" guard.
"""
from __future__ import annotations

import operator
import os
from typing import Optional

from engine.broker.index.chain import ChainWalk
from engine.java.lang import (INT_MAX, INT_MIN, LONG_MAX, LONG_MIN, java_rem, java_string_hash, tiered_hash, to_i32,
                              to_i64)
from engine.tiered.index.format import (CITEM, COMPACT_INDEX_ITEM_SIZE, HASH_SLOT_SIZE, HEADER_SIZE,
                                        INDEX_ITEM_SIZE, ITEM, ITEM_FIELDS, MAX_COMPACT_READ_ITEMS,
                                        MAX_QUERY_COUNT, SEALED, SLOT, UNSEALED, UPLOAD, JavaRuntimeError,
                                        Reader, TieredQueryError, check_int, jstr)

# `f` below is an engine.tiered.index.file.IndexStoreFile, named in annotations only: file.py imports this module.


def query(f: "IndexStoreFile", topic: str, key: str, max_count: int, begin: int, end: int, *,
          reader: Optional[Reader] = None, begin_timestamp: Optional[int] = None) -> list[dict]:
    """``IndexStoreFile.queryAsync`` for the file's state.

    Unsealed/SEALED files walk the chain (up to 512 items, may return ``max_count + 1`` items); compacted
    files do the two-read segment lookup (at most 1024 items read).  Items are dicts ``hashCode, topicId,
    queueId, offset, size, timeDiff, itemIndex`` (itemIndex 0 for compacted items).  ``reader(offset,
    length) -> bytes`` replaces the file access (e.g. a :class:`CountingReader`); ``begin_timestamp``
    overrides the file's beginTimestamp for this call.  Raises :class:`TieredQueryError` where the Java
    future fails (compacted reads out of range).
    """
    f.check_open()
    max_count = check_int("max_count", max_count, INT_MIN, INT_MAX)
    begin = check_int("begin", begin, LONG_MIN, LONG_MAX)
    end = check_int("end", end, LONG_MIN, LONG_MAX)
    if begin_timestamp is not None:
        begin_timestamp = check_int("begin_timestamp", begin_timestamp, LONG_MIN, LONG_MAX)
    base_ts = f.begin_timestamp if begin_timestamp is None else begin_timestamp
    hc = tiered_hash(java_string_hash(f"{jstr(topic)}#{jstr(key)}"))  # String.format("%s#%s", topic, key)
    window = (begin, end, base_ts)
    if f.status == UPLOAD:
        return _query_segment(f, hc, max_count, window, reader)
    if f.status in (UNSEALED, SEALED):
        return _query_unsealed(f, hc, max_count, window, reader)
    return []


def _query_unsealed(f: "IndexStoreFile", hc: int, max_count: int, window: tuple[int, int, int],
                    reader: Optional[Reader]) -> list[dict]:
    begin, end, base_ts = window
    result: list[dict] = []
    base, get_block, unpack = f.items_base, f.get_block, ITEM.unpack

    def read_item(n: int) -> tuple:
        return unpack(get_block(to_i32(base + n * INDEX_ITEM_SIZE), INDEX_ITEM_SIZE, reader))  # item_position(n)

    try:
        head = max(f.get_int(f.slot_position(java_rem(hc, f.hash_slot_num)), reader), 0)
        walk = ChainWalk(head, read_item, _PREV_OF, last=f.index_item_count, limit=MAX_QUERY_COUNT,
                         detect_cycles=False, max_steps=MAX_QUERY_COUNT, stop_at_self=False)
        for _n, item in walk:
            t = to_i64(item[5] * 1000 + base_ts)
            if item[0] == hc and begin <= t <= end:
                result.append(dict(zip(ITEM_FIELDS, item)))
                if len(result) > max_count:  # checked after the add: Java may return maxCount + 1 items
                    break
    except JavaRuntimeError:
        pass  # Java logs the exception and returns what it has collected
    return result


_PREV_OF = operator.itemgetter(6)  # an item's itemIndex: the previous item of its chain


def _segment_read(f: "IndexStoreFile", position: int, length: int, reader: Optional[Reader]) -> bytes:
    """``FileSegment.readAsync`` over the committed bytes of an uploaded file."""
    commit = f.commit_length
    if position < 0 or position >= commit:
        raise TieredQueryError(
            f"{f.path}: compacted query read at position {position} outside the committed "
            f"{commit} bytes (Java: TieredStoreException ILLEGAL_PARAM 'FileSegment read position is "
            f"illegal position')"
        )
    if length <= 0:
        raise TieredQueryError(
            f"{f.path}: compacted query read of length {length} (Java: TieredStoreException "
            f"ILLEGAL_PARAM 'FileSegment read length illegal')"
        )
    length = min(length, commit - position)
    if reader is not None:
        return reader(position, length)
    return f.read_bytes(position, length)  # the mapping ends at the file's end


def _query_segment(f: "IndexStoreFile", hc: int, max_count: int, window: tuple[int, int, int],
                   reader: Optional[Reader]) -> list[dict]:
    return query_compacted(lambda pos, n: _segment_read(f, pos, n, reader), f.commit_length, f.hash_slot_num, hc,
                           max_count, window)


def query_compacted(read: Reader, commit_length: int, hash_slot_num: int, hc: int, max_count: int,
                    window: tuple[int, int, int]) -> list[dict]:
    """``queryAsyncFromSegmentFile`` (format §9.7) over any segment: ``read(position, length)`` is the
    FileSegment read (it raises where the Java future fails), ``hash_slot_num`` the configured slot count and
    ``window`` = (begin, end, the segment's minTimestamp)."""
    begin, end, base_ts = window
    if commit_length <= HEADER_SIZE:  # getCommitPosition() <= getSlotPosition(0)
        return []
    slot_buf = read(to_i32(HEADER_SIZE + java_rem(hc, hash_slot_num) * HASH_SLOT_SIZE), HASH_SLOT_SIZE)
    if len(slot_buf) < HASH_SLOT_SIZE:
        return []
    items_pos, items_len = SLOT.unpack_from(slot_buf, 0)
    items_len = min(items_len, COMPACT_INDEX_ITEM_SIZE * MAX_COMPACT_READ_ITEMS)
    if items_pos <= 0 or items_len <= 0:
        return []
    buf = read(items_pos, items_len)
    if len(buf) % COMPACT_INDEX_ITEM_SIZE:
        return []
    result: list[dict] = []
    for off in range(0, len(buf), COMPACT_INDEX_ITEM_SIZE):
        if len(result) >= max_count:
            break  # Java reads on but keeps nothing more
        item = CITEM.unpack_from(buf, off)
        t = to_i64(item[5] * 1000 + base_ts)
        if item[0] == hc and begin <= t <= end:
            d = dict(zip(ITEM_FIELDS, item))
            d["itemIndex"] = 0
            result.append(d)
    return result


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
