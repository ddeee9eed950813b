"""Which layout a tiered index file has and with which geometry (slot count, item capacity), from its header,
slot table and size when the caller does not know them (format §9.2-§9.4): detect_tiered for "is this a tiered
file at all", and the checks and inferences IndexStoreFile.open relies on.
"""
from __future__ import annotations

import os
import stat as _stat
from typing import NamedTuple, Optional

import numpy as np

from engine.fsutil import pread_fully
from engine.java.lang import INT_MIN, java_rem
from engine.tiered.index.format import (BEGIN_MAGIC_CODE, COMPACT_INDEX_ITEM_SIZE, DEFAULT_HASH_SLOT_NUM,
                                        DEFAULT_INDEX_NUM, END_MAGIC_CODE, HASH_SLOT_SIZE, HEADER, HEADER_SIZE,
                                        INDEX_ITEM_SIZE, INT, ITEM_DTYPE, TieredIndexError, compacted_file_size,
                                        hex32, unsealed_file_size)


class Head(NamedTuple):
    """The header fields of a file as stored, and the int after them (slot 0's itemsStart when compacted)."""

    magic: int
    begin: int
    end: int
    slot_count: int
    item_count: int
    first_start: Optional[int]  # None when the file ends with the header


def read_head(fd: int, path: str, size: int) -> Head:
    """The header of a file of ``size`` >= 28 bytes; a magic that is neither BEGIN nor END is returned as is."""
    head = pread_fully(fd, min(size, HEADER_SIZE + 4), 0)
    if len(head) < HEADER_SIZE:  # the file shrank since it was measured
        raise TieredIndexError(f"{path}: file ends inside the {HEADER_SIZE}-byte header")
    first = INT.unpack_from(head, HEADER_SIZE)[0] if len(head) >= HEADER_SIZE + 4 else None
    return Head(*HEADER.unpack_from(head, 0), first)


def check_tiered_magic(path: str, magic: int) -> None:
    if magic not in (BEGIN_MAGIC_CODE, END_MAGIC_CODE):
        raise TieredIndexError(
            f"{path}: not a tiered index file: magic {hex32(magic)} at offset 0, expected "
            f"BEGIN {hex32(BEGIN_MAGIC_CODE)} or END {hex32(END_MAGIC_CODE)}"
        )


def compacted_candidate(size: int, first_start: Optional[int]) -> Optional[int]:
    """Slot count implied by a compacted file whose slot 0 starts at ``first_start``, or None."""
    if first_start is None:
        return None
    if first_start < HEADER_SIZE + HASH_SLOT_SIZE or (first_start - HEADER_SIZE) % HASH_SLOT_SIZE:
        return None
    if first_start > size or (size - first_start) % COMPACT_INDEX_ITEM_SIZE:
        return None
    return (first_start - HEADER_SIZE) // HASH_SLOT_SIZE


def compacted_contiguous(fd: int, size: int, slots: int, limit: int = 1 << 20) -> bool:
    """Slot ranges of a compacted file start where the previous one ended (as the writer makes them)."""
    n = min(slots, limit)
    raw = pread_fully(fd, 8 * n, HEADER_SIZE)
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
            head = read_head(fd, os.fspath(path), size)
            if head.magic not in (BEGIN_MAGIC_CODE, END_MAGIC_CODE) or head.first_start is None:
                return False
            unsealed_ok = (size - HEADER_SIZE) % HASH_SLOT_SIZE == 0 and size >= HEADER_SIZE + 8 + 32
            if head.magic == END_MAGIC_CODE:
                s = compacted_candidate(size, head.first_start)
                if s is not None and compacted_contiguous(fd, size, s, limit=4096):
                    return True
            return unsealed_ok
        finally:
            os.close(fd)
    except (OSError, TieredIndexError):
        return False


def detect_layout(fd: int, path: str, size: int, head: Head, hash_slot_num: Optional[int],
                  index_num: Optional[int]) -> str:
    """"unsealed" or "compacted" for a file with a tiered magic, using the given geometry where there is one."""
    if head.magic == BEGIN_MAGIC_CODE:
        return "unsealed"  # a compacted file always carries END
    count = head.item_count
    s_c = compacted_candidate(size, head.first_start)
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
        return "compacted" if compacted_contiguous(fd, size, s_c) else "unsealed"
    if compact_ok:
        if compacted_contiguous(fd, size, s_c) or hash_slot_num is not None:
            return "compacted"
    if unsealed_ok:
        return "unsealed"
    if compact_ok:
        return "compacted"
    if hash_slot_num is not None or index_num is not None:
        return "unsealed"  # let the geometry check produce the precise size message
    raise TieredIndexError(
        f"{path}: END magic but the file ({size} bytes, indexItemCount={count}, slot 0 value "
        f"{head.first_start}) fits neither a full unsealed file nor a compacted file; truncated or corrupt"
    )


def compacted_geometry(path: str, size: int, head: Head, hash_slot_num: Optional[int], force: bool) -> int:
    """Slot count of a compacted file: the given one (checked against the size unless ``force``), else the one
    slot 0's itemsStart implies."""
    if hash_slot_num is None:
        s_file = compacted_candidate(size, head.first_start)
        if s_file is None:
            raise TieredIndexError(
                f"{path}: cannot derive the slot count of this compacted file ({size} bytes, slot 0 "
                f"starts at {head.first_start}); pass hash_slot_num"
            )
        return s_file
    s = hash_slot_num
    base = HEADER_SIZE + HASH_SLOT_SIZE * s
    if not force and (base > size or (size - base) % COMPACT_INDEX_ITEM_SIZE):
        exp = compacted_file_size(s, head.item_count)
        raise TieredIndexError(
            f"{path}: file size {size} bytes does not match a compacted file with hash_slot_num={s}: "
            f"the slot table ends at byte {base}, leaving {size - base} bytes, not a whole number of "
            f"28-byte items (with indexItemCount={head.item_count} it would be {exp} bytes; slot 0 says the "
            f"items start at {head.first_start})"
        )
    return s


def unsealed_geometry(fd: int, path: str, size: int, head: Head, s: Optional[int],
                      m: Optional[int]) -> tuple[int, int]:
    """(hash_slot_num, index_num) of an unsealed file: the given values checked against the size, else
    derived from the END magic (full file), the default geometry or the slot table and items."""
    if s is not None or m is not None:
        return _given_unsealed_geometry(path, size, s, m)
    count = head.item_count
    if (size - HEADER_SIZE) % HASH_SLOT_SIZE or size < HEADER_SIZE + HASH_SLOT_SIZE + INDEX_ITEM_SIZE:
        raise TieredIndexError(
            f"{path}: file size {size} bytes is not 28 + 8*hash_slot_num + 32*index_num for any "
            f"geometry (truncated?)"
        )
    if count < 0:
        raise TieredIndexError(f"{path}: header indexItemCount is negative ({count}); pass the geometry")
    if head.magic == END_MAGIC_CODE:
        return _full_file_geometry(fd, path, size, count)
    if size == unsealed_file_size(DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM):
        return DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM
    return infer_unsealed_geometry(fd, path, size, count)


def _given_unsealed_geometry(path: str, size: int, s: Optional[int], m: Optional[int]) -> tuple[int, int]:
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
    rem = size - HEADER_SIZE - INDEX_ITEM_SIZE * m
    if rem < HASH_SLOT_SIZE or rem % HASH_SLOT_SIZE:
        raise TieredIndexError(
            f"{path}: file size {size} bytes does not match index_num={m}: an unsealed file is "
            f"28 + 8*hash_slot_num + 32*{m} bytes (item table is {INDEX_ITEM_SIZE * m} bytes, "
            f"{rem} bytes left for header slots)"
        )
    return rem // HASH_SLOT_SIZE, m


def _full_file_geometry(fd: int, path: str, size: int, count: int) -> tuple[int, int]:
    """END magic on an unsealed file: it is full, so index_num = indexItemCount + 1 fixes the slot count."""
    m = count + 1
    rem = size - HEADER_SIZE - INDEX_ITEM_SIZE * m
    if rem < HASH_SLOT_SIZE or rem % HASH_SLOT_SIZE:
        raise TieredIndexError(
            f"{path}: END magic implies index_num = indexItemCount+1 = {m}, but file size {size} bytes "
            f"leaves {rem} bytes for the slot table (not a positive multiple of 8)"
        )
    s_end = rem // HASH_SLOT_SIZE
    if not geometry_plausible(fd, size, s_end, count):
        raise TieredIndexError(
            f"{path}: END magic implies index_num = indexItemCount+1 = {m} and so hash_slot_num = "
            f"{s_end} for {size} bytes, but the slot table and items do not fit that geometry "
            f"(truncated or corrupt?); pass hash_slot_num or index_num to open it anyway"
        )
    return s_end, m


def infer_unsealed_geometry(fd: int, path: str, size: int, count: int) -> tuple[int, int]:
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
            f"{path}: cannot infer the geometry of an empty unsealed file ({size} bytes); pass hash_slot_num or "
            "index_num"
        )
    first_hi = _first_upper_word(fd, s_max + 8)
    top = s_max if first_hi is None else min(s_max, first_hi - 4)
    top -= (top - words % 4) % 4
    passing = []
    for s in list(range(top, 0, -4))[:64]:
        if geometry_plausible(fd, size, s, count):
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


def _first_upper_word(fd: int, scan_words: int) -> Optional[int]:
    """First 8-byte word (from byte 28) whose upper half is non-zero: slots never have one, item 1 usually does."""
    step = 1 << 20
    for w in range(0, scan_words, step):
        n = min(step, scan_words - w)
        raw = pread_fully(fd, 8 * n, HEADER_SIZE + 8 * w)
        nz = np.flatnonzero(np.frombuffer(raw, dtype=">u4")[1::2])
        if nz.size:
            return w + int(nz[0])
    return None


def geometry_plausible(fd: int, size: int, s: int, count: int) -> bool:
    """Whether an unsealed file of ``size`` bytes holding ``count`` items reads sensibly with ``s`` slots."""
    base = HEADER_SIZE + HASH_SLOT_SIZE * s
    m = (size - base) // INDEX_ITEM_SIZE
    tab = np.frombuffer(pread_fully(fd, 8 * s, HEADER_SIZE), dtype=">i4").astype(np.int64).reshape(-1, 2)
    if (tab[:, 1] != 0).any() or (tab[:, 0] < 0).any() or (tab[:, 0] > count).any():
        return False
    if pread_fully(fd, INDEX_ITEM_SIZE, base) != bytes(INDEX_ITEM_SIZE):
        return False
    last = pread_fully(fd, INDEX_ITEM_SIZE, base + INDEX_ITEM_SIZE * count)
    if last == bytes(INDEX_ITEM_SIZE):
        return False
    if count + 1 < m:
        nxt_item = pread_fully(fd, INDEX_ITEM_SIZE, base + INDEX_ITEM_SIZE * (count + 1))
        if nxt_item != bytes(INDEX_ITEM_SIZE):
            return False
    k = min(count, 256)
    items = np.frombuffer(pread_fully(fd, INDEX_ITEM_SIZE * k, base + INDEX_ITEM_SIZE), dtype=ITEM_DTYPE)
    return _items_plausible(items, s) and _heads_plausible(fd, base, tab[:, 0], s)


def _items_plausible(items: np.ndarray, s: int) -> bool:
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
    nums = np.arange(1, items.size + 1)
    link = (ptr > 0) & (ptr < nums)
    src, dst = nums[link], ptr[link]
    hs, hd = hashes[src - 1], hashes[dst - 1]
    ok = (np.fmod(hs, s) == np.fmod(hd, s)) | (hs == INT_MIN) | (hd == INT_MIN)
    return bool(ok.all())


def _heads_plausible(fd: int, base: int, heads: np.ndarray, s: int) -> bool:
    """The newest item of (up to 256) used slots hashes to that slot."""
    for slot in np.flatnonzero(heads > 0)[:256]:
        n = int(heads[slot])
        h = INT.unpack(pread_fully(fd, 4, base + INDEX_ITEM_SIZE * n))[0]
        if java_rem(h, s) != slot:
            return False
    return True
