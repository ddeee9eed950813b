"""What the CLI asks of tiered index files besides a key query: inspect files (header, a slot walk, statistics,
the structural check) and compact one file into a new one (compact-index). Both only read their inputs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional

from engine.errors import InvalidArgumentError
from engine.tiered.index.file import IndexStoreFile, open_tiered
from engine.tiered.index.format import COMPACT_INDEX_ITEM_SIZE, MAX_QUERY_COUNT, TieredIndexError
from engine.tiered.index.inspection import SlotWalk, walk


@dataclass
class FileInspection:
    """What inspect-index found in one tiered file; walk/stats/problems only when asked for."""

    name: str
    header: dict                          # {"file": name} + IndexStoreFile.header()
    layout: str
    index_item_count: int
    begin_timestamp: int
    walk: Optional[SlotWalk] = None
    stats: Optional[dict] = None
    problems: Optional[list[str]] = None  # the structural check's problems (empty = consistent)


def inspect_files(paths: Iterable[Path], *, hash_slot_num: Optional[int] = None, index_num: Optional[int] = None,
                  walk_slot: Optional[int] = None, walk_key: Optional[str] = None, limit: int = MAX_QUERY_COUNT,
                  stats: bool = False, verify: bool = False) -> Iterator[FileInspection]:
    """One FileInspection per file, in order, each as soon as its file is done (files are opened read-only, one
    at a time); geometry: the given values, else inferred per file."""
    for p in paths:
        p = Path(p)
        with open_tiered(p, hash_slot_num, index_num) as f:
            rep = FileInspection(p.name, {"file": p.name, **f.header()}, f.layout, f.index_item_count,
                                 f.begin_timestamp)
            if walk_slot is not None or walk_key is not None:
                rep.walk = walk(f, walk_slot, walk_key, limit)
            if stats:
                rep.stats = f.stats()
            if verify:
                rep.problems = f.verify()
        yield rep


def compact_file(src: Path, out: Path, *, force: bool = False, mapped: bool = False,
                 hash_slot_num: Optional[int] = None, index_num: Optional[int] = None) -> dict:
    """compact-index: the compacted form of unsealed file ``src`` (format §9.4) written to a temporary name next
    to ``out`` and renamed onto it; ``src`` is only read. ``mapped`` writes the whole local compacting/ file
    instead of the uploaded bytes. Returns the summary the command shows (its --json shape)."""
    src, out = Path(src), Path(out)
    if out.exists() and not force:
        raise InvalidArgumentError(f"{out} exists; pass --force to replace it")
    if out.exists() and src.exists() and os.path.samefile(out, src):
        raise InvalidArgumentError(f"--out {out} is the input file")
    if not out.parent.is_dir():
        raise InvalidArgumentError(f"directory {out.parent} does not exist")
    with open_tiered(src, hash_slot_num, index_num) as f:
        if f.layout != "unsealed":
            raise TieredIndexError(f"{src} is already compacted (END magic, {f.hash_slot_num} slot ranges); "
                                   "only an unsealed or sealed file can be compacted")
        before = f.file_size
        tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
        try:
            f.compact(tmp, form="mapped" if mapped else "uploaded")
            os.replace(tmp, out)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        after = out.stat().st_size
        summary = {
            "file": str(src), "out": str(out), "form": "mapped" if mapped else "uploaded",
            "hashSlotNum": f.hash_slot_num, "indexNum": f.index_num, "hashSlotCount": f.hash_slot_count,
            "indexItemCount": f.index_item_count,
            "itemsWritten": max(0, after - f.items_base) // COMPACT_INDEX_ITEM_SIZE if after else 0,
            "beginTimestamp": f.begin_timestamp, "endTimestamp": f.end_timestamp,
            "bytesBefore": before, "bytesAfter": after,
        }
    if mapped:
        # The mapped form is sized by indexItemCount; count what the slot ranges really hold.
        with IndexStoreFile.open(out, summary["hashSlotNum"]) as g:
            summary["itemsWritten"] = g.stats()["chainedItems"]
    return summary
