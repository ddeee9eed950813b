"""The index geometry (hash slots, max index) of a store, read from its index files when the configuration does
not give it: the read commands need --hash-slots/--max-index only when the files cannot tell, and the writers
take it the same way and never write another geometry beside the files' unless asked (writer_index_geometry).

An index file is 40 + 4*slots + 20*items bytes (format §5.1), so its size alone leaves every fifth slot count
open. The header bounds them (slots >= hashSlotCount, items >= indexCount: pitfall 20), and the items decide:
with the right geometry every item's slot holds that item or a newer one of its chain, every item links back
to an older item of the same slot, and item 0 is never written. When the items cannot decide (a file without
items), the broker's default ratio (items = 4*slots) is taken if the size fits it; else the geometry is
ambiguous and the error names the flags to give and the candidates.

Commit-log and consume-queue segment sizes need no help of this kind: each segment queue takes its file size
from its files (engine.broker.commitlog.segments, SegmentQueue), the configured size only when there are none.
"""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.index.file import INDEX_HEADER_SIZE, ITEM_SIZE, SLOT_SIZE, index_file_size
from engine.java.lang import INT_MAX
from engine.broker.layout import list_index_files
from engine.errors import GeometryError
from engine.fsutil import map_readonly

if TYPE_CHECKING:  # numpy is imported where an ambiguous size is checked: query-key starts without it
    import numpy as np

#: Items of a file checked against each candidate geometry: the first and the last ones written.
SAMPLE_ITEMS = 64
#: Candidates listed in the error of an ambiguous size.
LISTED = 5


def resolve_index_geometry(cfg: BrokerConfig, paths: list[Path] | None = None) -> BrokerConfig:
    """THE geometry inference of the read commands: cfg with maxHashSlotNum / maxIndexNum settled from the
    index files (`paths`, default: every file of the store's index directory) where neither broker.conf nor a
    flag gave them (a new BrokerConfig whose sources say "files"; cfg itself is never changed). Without index
    files cfg is returned as it is (the defaults stand: there is nothing to read). Raises GeometryError when the
    files fit several geometries, naming the flags and the candidates. The store's own files are read once per
    settled configuration (BrokerConfig.cached), as the broker reads its index directory once at start-up."""
    if cfg.hashSlotNumGiven and cfg.indexNumGiven:
        return cfg
    if paths is None:
        settled = cfg.cached("index-geometry", lambda: _settle_from_files(cfg, None))
    else:
        settled = _settle_from_files(cfg, paths)
    return cfg if settled is None else cfg.settled_with(**settled)


def _settle_from_files(cfg: BrokerConfig, paths: list[Path] | None) -> dict[str, int] | None:
    """The values resolve_index_geometry settles from the files, None without index files (asked again once
    there are some)."""
    if paths is None:
        from engine.broker.layout import StoreLayout
        paths = list_index_files(StoreLayout.of(cfg).index_dir)
    facts = [f for f in map(index_file_facts, paths) if f is not None]
    if not facts:
        return None
    sizes = Counter(f[1] for f in facts)
    best = max(sizes.values())
    size = next(f[1] for f in reversed(facts) if sizes[f[1]] == best)  # the most common size; newest on a tie
    same = [f for f in facts if f[1] == size]
    slots = cfg.maxHashSlotNum if cfg.hashSlotNumGiven else None
    items = cfg.maxIndexNum if cfg.indexNumGiven else None
    try:
        s, i = infer_index_geometry(same, size, slots, items)
    except GeometryError:
        if len(same) < 2:
            raise
        s, i = _majority_geometry(same, size, slots, items)
    # settled: later opens use it as they would a flag; a value a flag or broker.conf gave keeps its source
    return {k: v for k, v, given in (("maxHashSlotNum", s, cfg.hashSlotNumGiven),
                                     ("maxIndexNum", i, cfg.indexNumGiven)) if not given}


#: Files asked one by one when the files of the common size cannot be told together (one damaged file among them).
MAX_VOTERS = 9


def _majority_geometry(same: list, size: int, slots: int | None, items: int | None) -> tuple[int, int]:
    """The geometry most of the files of the common size have, each file inferred on its own (the newest
    MAX_VOTERS of them): one damaged file (a header of garbage counts, a zeroed slot table) cannot hide the
    geometry the others share; that file is a finding of doctor and recover (index-untrusted), not a reason to
    refuse. GeometryError (the newest file's) when no geometry has more than half of the answers."""
    answers: list[tuple[int, int]] = []
    first_error: GeometryError | None = None
    for f in list(reversed(same))[:MAX_VOTERS]:
        try:
            answers.append(infer_index_geometry([f], size, slots, items))
        except GeometryError as e:
            first_error = first_error or e
    votes = Counter(answers)
    if votes:
        best, n = votes.most_common(1)[0]
        if 2 * n > len(answers):  # the well-formed files decide
            return best
    raise first_error or GeometryError(f"cannot tell the index geometry of the {size}-byte index files; give "
                                       "--hash-slots and --max-index (or --broker-conf)")


def writer_index_geometry(cfg: BrokerConfig, new_geometry: bool = False, what: str = "rmqtool") -> BrokerConfig:
    """THE geometry rule of the writers of broker index files (put, spark-reindex, recover's index repair): they
    take the geometry the way readers do (broker.conf, then --hash-slots/--max-index, then the store's index
    files: resolve_index_geometry, which refuses files it cannot tell apart), and never write a geometry other
    than the one of the store's index files: a configured geometry that no index file of the store has is
    refused (GeometryError naming both), unless the user asked for a new one explicitly (new_geometry, with
    both numbers configured). Without index files the configured (or default) geometry stands. Returns the
    settled configuration (cfg itself is never changed)."""
    from engine.broker.layout import StoreLayout
    from engine.errors import InvalidArgumentError

    given = cfg.hashSlotNumGiven and cfg.indexNumGiven
    if new_geometry and not given:
        raise InvalidArgumentError("--new-geometry needs the new geometry: give --hash-slots and --max-index (or "
                                   "maxHashSlotNum and maxIndexNum in --broker-conf)")
    index_dir = StoreLayout.of(cfg).index_dir
    paths = list_index_files(index_dir)
    facts = [f for f in map(index_file_facts, paths) if f is not None]
    if new_geometry or not facts:
        return cfg
    if not given:
        return resolve_index_geometry(cfg, paths)
    size = index_file_size(cfg.maxHashSlotNum, cfg.maxIndexNum)
    if any(f[1] == size for f in facts):
        return cfg  # files of another size beside them are damaged files (readers and recover say so)
    theirs = _files_geometry(facts)
    raise GeometryError(f"the index files in {index_dir} have the geometry {theirs}, but the configured one is "
                        f"--hash-slots {cfg.maxHashSlotNum} --max-index {cfg.maxIndexNum} ({size} bytes): {what} "
                        "never writes "
                        "index files of another geometry than the store's; drop --hash-slots/--max-index (the files "
                        "tell their geometry), or rebuild the whole index in the new geometry with "
                        "`rmqtool spark-reindex --new-geometry --hash-slots N --max-index M`")


def _files_geometry(facts: list) -> str:
    """The geometry the index files have, in words, for an error (their size when it cannot be told)."""
    sizes = Counter(f[1] for f in facts)
    size = sizes.most_common(1)[0][0]
    try:
        s, i = infer_index_geometry([f for f in facts if f[1] == size], size)
    except GeometryError:
        return f"of {size}-byte files"
    return f"--hash-slots {s} --max-index {i} ({size} bytes each)"


def existing_index_size(index_dir: Path) -> int | None:
    """The size most index files of a directory have (None without index files)."""
    sizes = Counter(f[1] for f in map(index_file_facts, list_index_files(index_dir)) if f is not None)
    return sizes.most_common(1)[0][0] if sizes else None


def index_file_facts(path: Path):
    """(path, size, hashSlotCount, indexCount) of one index file, None when it cannot be read or is too short."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(INDEX_HEADER_SIZE)
            size = os.fstat(fh.fileno()).st_size
    except OSError:
        return None
    if len(head) < INDEX_HEADER_SIZE:
        return None
    slot_count = int.from_bytes(head[32:36], "big", signed=True)
    index_count = int.from_bytes(head[36:40], "big", signed=True)
    return path, size, slot_count, index_count


#: Candidates checked against the items at once (bounds the memory of the check: a few arrays of this length).
CHUNK = 1 << 18


class Candidates:
    """Every (slots, items) with 40 + 4*slots + 20*items == size, slots >= min_slots, items >= min_items (and a
    given one fixed): slots run over an arithmetic progression (step 5), never materialised whole (a 400 MB file
    has millions)."""

    def __init__(self, size: int, min_slots: int = 1, min_items: int = 2, slots: int | None = None,
                 items: int | None = None):
        room = size - INDEX_HEADER_SIZE
        self.units = room // SLOT_SIZE                 # slots + 5*items == units
        self.lo, self.hi = 1, 0                        # empty
        if room <= 0 or room % SLOT_SIZE or size > INT_MAX:
            return
        u = self.units
        lo, hi = max(min_slots, 1), u - 5 * max(min_items, 2)
        if slots is not None:
            lo, hi = max(lo, slots), min(hi, slots)
        if items is not None:
            lo, hi = max(lo, u - 5 * items), min(hi, u - 5 * items)
        lo += (u - lo) % 5                             # the smallest slot count >= lo with the right residue
        self.lo, self.hi = lo, hi

    def __len__(self) -> int:
        return max(0, (self.hi - self.lo) // 5 + 1)

    def chunks(self):
        """The candidates as (n, 2) int64 arrays of CHUNK rows (numpy: only an ambiguous size needs it)."""
        import numpy as np

        for a in range(self.lo, self.hi + 1, 5 * CHUNK):
            s = np.arange(a, min(self.hi, a + 5 * (CHUNK - 1)) + 1, 5, dtype=np.int64)
            yield np.stack([s, (self.units - s) // 5], axis=1)

    def first(self, k: int) -> list[tuple[int, int]]:
        return [(s, (self.units - s) // 5) for s in range(self.lo, self.hi + 1, 5)[:k]]

    def ratio(self) -> tuple[int, int] | None:
        """The broker's default shape (items = 4*slots, so size = 40 + 84*slots) when it is a candidate."""
        s = self.units // 21
        return (s, 4 * s) if self.units % 21 == 0 and self.lo <= s <= self.hi else None


def infer_index_geometry(facts: list, size: int, slots: int | None = None, items: int | None = None) -> tuple[int, int]:
    """(slots, items) of index files that all have `size` bytes; facts are (path, size, hashSlotCount,
    indexCount) tuples. GeometryError when the files cannot tell."""
    min_slots = max(max(f[2] for f in facts), 1)
    min_items = max(max(f[3] for f in facts), 2)
    cands = Candidates(size, min_slots, min_items, slots, items)
    if not len(cands):  # the header counts are damaged: the size alone
        cands = Candidates(size, slots=slots, items=items)
    if not len(cands):
        raise GeometryError(f"index file {facts[0][0]} is {size} bytes: no index geometry gives that size "
                            f"(40 + 4*slots + 20*items){_given(slots, items)}; the file is damaged or not an index "
                            "file")
    if len(cands) == 1:
        return cands.first(1)[0]
    richest = max(facts, key=lambda f: f[3])
    ratio = cands.ratio()
    if richest[3] <= 1:  # no item to decide by
        if ratio:
            return ratio
        _ambiguous(richest, size, cands.first(LISTED), len(cands), "")
    if ratio and fits(richest[0], ratio, richest[3]):
        return ratio  # the broker's default shape, confirmed by the items (no numpy on this, the usual, path)
    if ratio and fits(richest[0], ratio, richest[3], heads=False):
        # Its items and their chains read as the broker's under the default shape, only the slot table does not
        # (a zeroed slot table): the shape stands (a search over every candidate would take seconds and find
        # none); doctor, recover and the readers name the file as damaged (IndexFile.header_damage).
        return ratio
    passing = [c for c in (_content_check(richest[0], ch, richest[3]) for ch in cands.chunks()) if len(c)]
    passing = [tuple(map(int, row)) for c in passing for row in c.tolist()]
    if len(passing) == 1:
        return passing[0]
    if passing:
        _ambiguous(richest, size, passing[:LISTED], len(passing), "")
    _ambiguous(richest, size, cands.first(LISTED), len(cands),
               " (under none of them do its items read as the broker writes them: the file may be damaged)")


def _ambiguous(fact, size: int, shown: list, total: int, why: str):
    listed = ", ".join(f"--hash-slots {s} --max-index {i}" for s, i in shown)
    more = f", ... ({total} in all)" if total > len(shown) else ""
    raise GeometryError(f"cannot tell the index geometry from {fact[0]} ({size} bytes, {max(fact[3] - 1, 0)} "
                        f"items): it fits {listed}{more}{why}; give --hash-slots and --max-index (or --broker-conf)")


def _given(slots, items) -> str:
    parts = [f"--hash-slots {slots}"] * (slots is not None) + [f"--max-index {items}"] * (items is not None)
    return f" with {' and '.join(parts)}" if parts else ""


def sample_items(n: int) -> list[int]:
    """The items checked: the first and the last SAMPLE_ITEMS written (1 <= k < n)."""
    return sorted(set(range(1, min(n, SAMPLE_ITEMS + 1))) | set(range(max(1, n - SAMPLE_ITEMS), n)))


def fits(path: Path, geometry: tuple[int, int], index_count: int, heads: bool = True) -> bool:
    """One candidate checked as _items_fit checks many, in plain Python: the sampled items are read in one call
    per run of consecutive items, then one small read per slot head and per previous item outside the runs
    (about 150 reads for the default sample, where one read per field took 640: every command that infers the
    geometry pays them at start-up). heads=False: the slot heads are not asked (the items and chains only)."""
    s, i = geometry
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        def i32(pos: int) -> int:
            b = os.pread(fd, 4, pos)
            return int.from_bytes(b, "big", signed=True) if len(b) == 4 else -1

        base = INDEX_HEADER_SIZE + SLOT_SIZE * s
        if os.pread(fd, ITEM_SIZE, base) != bytes(ITEM_SIZE):
            return False  # item 0 is never written (pitfall 20)
        ks = sample_items(index_count)
        if any(k >= i for k in ks):
            return False
        fields = _item_fields(fd, base, ks)  # k -> (keyHash, timeDiff, prevIndex); -1 where the file ends
        for k in ks:
            key_hash, time_diff, prev = fields[k]
            if key_hash < 0 or time_diff < 0 or not 0 <= prev < k:
                return False
            slot = key_hash % s
            if heads and not k <= i32(INDEX_HEADER_SIZE + SLOT_SIZE * slot) < i:
                return False
            if prev:
                their = fields[prev][0] if prev in fields else i32(base + ITEM_SIZE * prev)
                if their < 0 or their % s != slot:
                    return False
        return True
    finally:
        os.close(fd)


def _item_fields(fd: int, base: int, ks: list[int]) -> dict[int, tuple[int, int, int]]:
    """(keyHash, timeDiff, prevIndex) of items ks (sorted), one read per run of consecutive items; a field the
    file does not reach reads as -1."""
    out: dict[int, tuple[int, int, int]] = {}
    j = 0
    while j < len(ks):
        e = j
        while e + 1 < len(ks) and ks[e + 1] == ks[e] + 1:
            e += 1
        raw = os.pread(fd, ITEM_SIZE * (ks[e] - ks[j] + 1), base + ITEM_SIZE * ks[j])
        for n, k in enumerate(ks[j:e + 1]):
            at = n * ITEM_SIZE
            out[k] = tuple(int.from_bytes(raw[at + f:at + f + 4], "big", signed=True) if at + f + 4 <= len(raw)
                           else -1 for f in (0, 12, 16))
        j = e + 1
    return out


def _content_check(path: Path, cands: np.ndarray, index_count: int) -> np.ndarray:
    """The candidates under which the file's items read as the broker wrote them (see the module docstring):
    a cheap pass on the newest item over every candidate, then SAMPLE_ITEMS first and last items on the rest."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return cands
    try:
        mm = map_readonly(fd, os.fstat(fd).st_size)  # holes read as zeros, never a fault (a sparse file)
    finally:
        os.close(fd)
    import numpy as np

    try:
        view = np.frombuffer(mm, dtype=np.uint8)
        n = index_count
        keep = _items_fit(view, cands, np.array([n - 1], dtype=np.int64))
        cands = cands[keep]
        if len(cands) > 1:
            cands = cands[_items_fit(view, cands, np.array(sample_items(n), dtype=np.int64))]
        del view
        return cands
    finally:
        mm.close()


def _i32(view: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Big-endian int32 at byte positions pos (positions past the end read as -1)."""
    import numpy as np

    ok = (pos >= 0) & (pos + 4 <= len(view))
    p = np.where(ok, pos, 0)
    v = ((view[p].astype(np.int64) << 24) | (view[p + 1].astype(np.int64) << 16) | (view[p + 2].astype(np.int64) << 8)
         | view[p + 3].astype(np.int64))
    v = np.where(v >= 2**31, v - 2**32, v)
    return np.where(ok, v, -1)


def _items_fit(view: np.ndarray, cands: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """For each candidate (row), do items ks (1 <= k < n) read as the broker's? Vectorised over both."""
    import numpy as np

    s = cands[:, 0:1]
    base = INDEX_HEADER_SIZE + SLOT_SIZE * s                        # (m, 1)
    k = ks[None, :]                                                 # (1, K)
    ok = np.all(k < cands[:, 1:2], axis=1)
    item = base + ITEM_SIZE * k                                     # (m, K)
    key_hash = _i32(view, item)
    time_diff = _i32(view, item + 12)
    prev = _i32(view, item + 16)
    fine = (key_hash >= 0) & (time_diff >= 0) & (prev >= 0) & (prev < k)
    slot = np.where(key_hash >= 0, key_hash, 0) % s
    head = _i32(view, INDEX_HEADER_SIZE + SLOT_SIZE * slot)
    # The slot's head is this item or a newer one (bounded by the capacity, not by n: a live writer may have
    # added items since the header was read).
    fine &= (head >= k) & (head < cands[:, 1:2])
    prev_hash = _i32(view, base + ITEM_SIZE * np.maximum(prev, 0))
    fine &= (prev == 0) | ((prev_hash >= 0) & (np.where(prev_hash >= 0, prev_hash, 0) % s == slot))
    item0 = [_i32(view, base[:, 0] + o) for o in (0, 4, 8, 12, 16)]
    zero0 = np.all([x == 0 for x in item0], axis=0)                 # item 0 is never written (pitfall 20)
    return ok & zero0 & np.all(fine, axis=1)
