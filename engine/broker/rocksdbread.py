"""A RocksDB database of a broker store, opened read-only without writing a byte into the store or taking its
lock (format §11.6): the consume-queue database (engine.broker.consumequeue.rocksdb) and the config databases
(engine.broker.config.rocksdb) are read through it.

The binding is rocksdict, imported here only (a command that reads no RocksDB store never loads it). Its
read-only and secondary modes both write a `rocksdict-config.json` beside the database they open (measured:
tests/test_rocksdb_binding.py), and a broker's database must not get one. So the database is opened from a
shadow directory in a temporary directory: RocksDB's immutable table files (*.sst, *.blob) are symlinked, the
files it rewrites (CURRENT, MANIFEST-*, OPTIONS-*, the *.log write-ahead logs, IDENTITY) are copied, and the
shadow is opened read-only with every table file opened at once (max_open_files=-1), so a compaction of the live
broker that deletes a table file after the open changes nothing. LOCK is neither read nor locked: a running
broker keeps its lock. A copy that raced a broker rolling its MANIFEST is retried.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from engine.errors import CorruptFileError, StoreError

#: Files RocksDB never rewrites once written: linked into the shadow, not copied.
IMMUTABLE = re.compile(r"^\d+\.(sst|blob)$")
#: Files RocksDB opens and may rewrite or append to: copied into the shadow.
COPIED = re.compile(r"^(CURRENT|IDENTITY|MANIFEST-\d+|OPTIONS-\d+|\d+\.log)$")
#: Attempts at a consistent shadow while a broker writes the database.
SHADOW_ATTEMPTS = 3


class RocksDBUnavailableError(StoreError):
    """The RocksDB binding is not installed, or the database cannot be opened."""


class ReadOnlyDB:
    """One database opened read-only from a shadow copy; `items(cf, start, stop)` walks a key range in key
    order as raw bytes. Close it (or use it as a context manager): the shadow directory is removed."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._tmp: str | None = None
        self._db = None
        self.column_families: list[str] = []
        try:
            import rocksdict  # the binding: imported when a RocksDB store is read
        except ImportError as e:  # pragma: no cover - a dependency of the package
            raise RocksDBUnavailableError(f"reading {self.path} needs the rocksdict package ({e}); "
                                          "pip install rocksdict") from None
        self._rd = rocksdict
        last = None
        for _ in range(SHADOW_ATTEMPTS):
            try:
                self._open()
                return
            except (OSError, Exception) as e:  # rocksdict raises plain Exception subclasses
                last = e
                self._cleanup()
        raise CorruptFileError(f"the RocksDB database {self.path} cannot be opened read-only: {last}")

    def _open(self) -> None:
        rd = self._rd
        self._tmp = tempfile.mkdtemp(prefix="rmqtool-rocksdb-")
        shadow = Path(self._tmp) / "db"
        shadow.mkdir()
        current = (self.path / "CURRENT").read_bytes()
        for e in os.scandir(self.path):
            if IMMUTABLE.match(e.name):
                os.symlink(os.path.abspath(e.path), shadow / e.name)
            elif COPIED.match(e.name) and e.is_file(follow_symlinks=False):
                shutil.copyfile(e.path, shadow / e.name)
        if (self.path / "CURRENT").read_bytes() != current or (shadow / "CURRENT").read_bytes() != current:
            raise OSError("the database's CURRENT changed while it was copied")
        names = rd.Rdict.list_cf(str(shadow))
        self.column_families = list(names)
        opts = rd.Options(raw_mode=True)
        opts.set_max_open_files(-1)
        opts.create_if_missing(False)
        cfs = {n: rd.Options(raw_mode=True) for n in names if n != "default"}
        self._db = rd.Rdict(str(shadow), opts, column_families=cfs, access_type=rd.AccessType.read_only())

    def _cf(self, name: str):
        if name == "default":
            return self._db
        if name not in self.column_families:
            return None
        return self._db.get_column_family(name)

    def has_cf(self, name: str) -> bool:
        return name in self.column_families

    def get(self, cf: str, key: bytes) -> bytes | None:
        h = self._cf(cf)
        if h is None:
            return None
        return h.get(key)

    def items(self, cf: str, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) from `start` (inclusive) to `stop` (exclusive), in key order (bytewise)."""
        h = self._cf(cf)
        if h is None:
            return
        it = h.iter()
        try:
            if start is None:
                it.seek_to_first()
            else:
                it.seek(start)
            while it.valid():
                k = it.key()
                if stop is not None and k >= stop:
                    break
                yield k, it.value()
                it.next()
        finally:
            del it

    def close(self) -> None:
        self._cleanup()

    def _cleanup(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except Exception:  # noqa: BLE001 - closing a read-only handle cannot lose anything
                pass
            self._db = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self._cleanup()


def prefix_end(prefix: bytes) -> bytes | None:
    """The first key after every key that starts with `prefix` (None: no such key, the prefix is all 0xff)."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return None
    p[-1] += 1
    return bytes(p)
