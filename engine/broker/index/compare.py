"""Two broker indexes compared by content (format §5.1): the same files in the same order, each with the same
geometry, header, slot table and items, whatever the files are named (put names them by the wall clock, a rebuild
by store time) and whatever lies past a file's items (zeros, holes, or nothing in flight).

A file the broker created but never put into has indexCount 0 on disk until its shutdown flush writes 1; both
are the same empty file. Memory: one chunk of each file (CHUNK bytes) at a time.
"""
from __future__ import annotations

import os
from pathlib import Path

from engine.broker.index.file import HEADER, INDEX_HEADER_SIZE
from engine.fsutil import pread_fully

CHUNK = 1 << 20


def same_index(before: list[Path], after: list[Path], hash_slot_num: int) -> bool:
    """Whether the index files `after` hold what `before` hold, file by file in the given order (see the module
    docstring). Files that cannot be read differ."""
    if len(before) != len(after):
        return False
    return all(same_index_file(a, b, hash_slot_num) for a, b in zip(before, after))


def same_index_file(a: Path, b: Path, hash_slot_num: int) -> bool:
    try:
        fa = os.open(a, os.O_RDONLY)
    except OSError:
        return False
    try:
        try:
            fb = os.open(b, os.O_RDONLY)
        except OSError:
            return False
        try:
            return _same(fa, fb, hash_slot_num)
        finally:
            os.close(fb)
    finally:
        os.close(fa)


def _same(fa: int, fb: int, hash_slot_num: int) -> bool:
    size = os.fstat(fa).st_size
    if size != os.fstat(fb).st_size or size < INDEX_HEADER_SIZE + 4 * hash_slot_num:
        return False
    ha, hb = (HEADER.unpack(os.pread(fd, HEADER.size, 0)) for fd in (fa, fb))
    if ha[:5] != hb[:5] or max(ha[5], 1) != max(hb[5], 1):  # indexCount 0 and 1: the same empty file
        return False
    items = max(ha[5], 1)
    end = min(size, INDEX_HEADER_SIZE + 4 * hash_slot_num + 20 * items)  # slots, then items 0..indexCount-1
    pos = INDEX_HEADER_SIZE
    while pos < end:
        n = min(CHUNK, end - pos)
        if pread_fully(fa, n, pos) != pread_fully(fb, n, pos):
            return False
        pos += n
    return True
