"""The broker's IndexService (format §5.8): the index directory as a sequence of IndexFiles, rolling to a seeded
new file when the last is full, the full-file flush that advances the checkpoint's indexMsgTimestamp, buildIndex
(one record, or a batch), and queryOffset.

A file that cannot be one the broker wrote (wrong size, impossible header, an empty or part-filled file that is
not the newest) is kept out of `files` and listed in `damaged`: queries answer from the others and say so. When
every file has the wrong size the geometry given is wrong, not the files: that is an error.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from engine.broker.index.file import IndexFile, check_index_geometry, open_failure
from engine.broker.config.lock import lock_held_elsewhere
from engine.broker.layout import index_file_name, list_index_files
from engine.errors import CorruptFileError, GeometryError, InvalidArgumentError
from engine.java.lang import java_string_hash, key_index_hash


@dataclass
class DamagedIndexFile:
    """An index file a query could not use, or used only in part, and why."""
    path: Path
    reason: str

    def as_dict(self) -> dict:
        return {"file": str(self.path), "reason": self.reason}

    def line(self) -> str:
        return f"index file {self.path.name} is damaged: {self.reason}"


class IndexService:
    def __init__(self, index_dir: Path, hash_slot_num: int, index_num: int, writable: bool = False,
                 on_full_flush: Callable[[int], None] | None = None, clock: Callable[[], int] | None = None):
        check_index_geometry(hash_slot_num, index_num)
        self.dir = Path(index_dir)
        self.hash_slot_num, self.index_num = hash_slot_num, index_num
        self.writable = writable
        self.on_full_flush = on_full_flush
        self.clock = clock or (lambda: int(time.time() * 1000))
        self.files: list[IndexFile] = []
        self.damaged: list[DamagedIndexFile] = []
        try:
            self._open_all()
        except BaseException:
            self.close()
            raise

    def _open_all(self) -> None:
        paths = list_index_files(self.dir)
        wrong_size: list[GeometryError] = []
        previous = None
        # A read-only reader beside a live writer may see the newest file's next item before its header count;
        # whether a writer holds the lock is asked only when such an item is there, and once.
        live = None if self.writable else functools.cache(lambda: lock_held_elsewhere(self.dir.parent))
        for i, p in enumerate(paths):
            try:
                f = IndexFile.open(p, self.hash_slot_num, self.index_num, random_access=not self.writable)
                why = f.header_damage(newest=i == len(paths) - 1, previous=previous, live_writer=live)
                previous = f.header
                if why is None and self.writable:  # checked read-only first: a damaged file is never opened for writing
                    f.close()
                    f = IndexFile.open(p, self.hash_slot_num, self.index_num, writable=True)
            except (GeometryError, InvalidArgumentError, OSError) as e:
                if isinstance(e, GeometryError):
                    wrong_size.append(e)
                self.damaged.append(DamagedIndexFile(p, open_failure(p, e)))
                continue
            if why is not None:
                f.close()
                self.damaged.append(DamagedIndexFile(p, why))
            else:
                self.files.append(f)
        if wrong_size and len(wrong_size) == len(paths):
            raise wrong_size[0]  # no file has the size: the geometry given is wrong (--hash-slots, broker.conf)
        if self.writable and self.damaged and self.damaged[-1].path == paths[-1]:
            raise CorruptFileError(f"{self.damaged[-1].line()}; the index cannot be appended to: "
                                   f"run `rmqtool recover` first")

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []

    def flush_all(self) -> None:
        for f in self.files:
            f.flush()

    # ---------------------------------------------------------------- write
    def _new_file_name(self) -> Path:
        name = index_file_name(self.clock())
        if self.files:
            last = self.files[-1].path.name
            if (len(name), name) <= (len(last), last):
                name = str(int(last) + 1)  # two files in one millisecond: keep names unique and ordered
        while (self.dir / name).exists():
            name = str(int(name) + 1)  # never over a file already there (a damaged one, say)
        return self.dir / name

    def last_file_for_write(self) -> IndexFile:
        """getAndCreateLastIndexFile: the last file if not full, else a new one seeded from it (format §5.8)."""
        if self.files and not self.files[-1].is_write_full():
            return self.files[-1]
        prev = self.files[-1] if self.files else None
        self.dir.mkdir(parents=True, exist_ok=True)
        f = IndexFile.create(self._new_file_name(), self.hash_slot_num, self.index_num,
                             prev.header.endPhyOffset if prev else 0, prev.header.endTimestamp if prev else 0)
        self.files.append(f)
        if prev is not None:
            self.flush_file(prev)
        return f

    def flush_file(self, f: IndexFile) -> None:
        """IndexService.flush: the header rewrite + force; a full file advances indexMsgTimestamp."""
        ts = f.header.endTimestamp if f.is_write_full() else 0
        f.flush()
        if ts > 0 and self.on_full_flush:
            self.on_full_flush(ts)

    def build_index(self, rec) -> int:
        """buildIndex for one decoded record; returns the number of keys put."""
        keys = rec.index_keys()
        f = self.last_file_for_write()
        if rec.physical_offset < f.header.endPhyOffset:
            return 0  # already indexed (strict: the record at endPhyOffset is indexed again, pitfall 23)
        n = 0
        for k in keys:
            h = java_string_hash(k)
            while not f.put_hash(h, rec.physical_offset, rec.store_timestamp):
                f = self.last_file_for_write()
            n += 1
        return n

    def build_index_batch(self, phy_offsets, store_timestamps, key_counts, key_hashes) -> None:
        """build_index for each record of a batch, in order, vectorized; the same bytes, files, rolls (file names
        from the clock), flushes and on_full_flush calls as the loop.

        phy_offsets, store_timestamps: int64 per record; key_counts: int32 per record, the number of its
        broker_index_keys; key_hashes: int32, the Java hashCodes of those "topic#key" strings, record after
        record. The per-record loop calls last_file_for_write for every record, so a file filled by one record
        rolls when any later record of the batch arrives, even one with no keys.
        """
        from engine.broker.index.build import append_puts, indexed_records
        import numpy as np

        phy, ts, counts, hashes = _batch_arrays(phy_offsets, store_timestamps, key_counts, key_hashes)
        n = len(phy)
        if n == 0:
            return
        f = self.last_file_for_write()  # the first record's call
        put = indexed_records(phy, counts, f.header.endPhyOffset)
        per_record = np.where(put, counts, 0)
        item_phy, item_ts = np.repeat(phy, per_record), np.repeat(ts, per_record)
        item_hash = hashes[np.repeat(put, counts)]
        # the record whose keys end at each item count: after a file fills, a later record rolls it
        ends = np.cumsum(per_record)
        total, done = len(item_hash), 0
        while True:
            take = min(self.index_num - f.header.indexCount, total - done)
            append_puts(f, item_hash[done:done + take], item_phy[done:done + take], item_ts[done:done + take])
            done += take
            if not f.is_write_full():
                return
            filler = int(np.searchsorted(ends, done, side="left")) if done else 0
            if done == total and filler >= n - 1:
                return  # the file stays full until the next call's first record rolls it
            f = self.last_file_for_write()
            if done == total:
                return

    # ---------------------------------------------------------------- read
    def query_offsets(self, key_string: str, max_num: int, begin: int, end: int,
                      damaged: list | None = None) -> list[int]:
        """IndexService.queryOffset for a full "topic#key" string (max_num already clamped by the caller).
        Chains found damaged on the way are appended to `damaged` as DamagedIndexFile."""
        out: list[int] = []
        kh = key_index_hash(key_string)
        for f in reversed(self.files):
            if f.is_time_matched(begin, end):
                start = len(out)
                why = f.select_hash(kh, max_num, begin, end, out)
                if why is not None and f.refresh_header(wait=True):
                    del out[start:]  # a pointer past our header's count: a writer appended meanwhile
                    why = f.select_hash(kh, max_num, begin, end, out)
                if why is not None and damaged is not None:
                    damaged.append(DamagedIndexFile(f.path, f"slot {kh % f.hash_slot_num}: {why}"))
            if f.header.beginTimestamp < begin:
                break
            if len(out) >= max_num:
                break
        return out


def _batch_arrays(phy_offsets, store_timestamps, key_counts, key_hashes):
    import numpy as np

    phy = np.asarray(phy_offsets, dtype=np.int64)
    ts = np.asarray(store_timestamps, dtype=np.int64)
    counts = np.asarray(key_counts, dtype=np.int64)
    hashes = np.asarray(key_hashes, dtype=np.int32)
    if not (phy.ndim == ts.ndim == counts.ndim == hashes.ndim == 1 and len(phy) == len(ts) == len(counts)):
        raise InvalidArgumentError("phy_offsets, store_timestamps and key_counts must be 1-d and of one length")
    if len(counts) and (counts.min() < 0 or phy.min() < 0):
        raise InvalidArgumentError("key counts and physical offsets must not be negative")
    if int(counts.sum()) != len(hashes):
        raise InvalidArgumentError(f"key_counts add up to {int(counts.sum())}, but {len(hashes)} key hashes given")
    return phy, ts, counts, hashes
