"""The quarantine: everything recover removes, truncates or overwrites is kept first, inside the store.

`<store>/quarantine/<yyyyMMdd-HHmmss>-<pid>/` holds the bytes (a range of a file copied to a .bin file, sparse
where the original is, a whole file moved or hard-linked in) and `manifest.json` saying where each piece came from (path relative to the store,
offset, length, sha256, why, what replaced it). The manifest is written before the first change and rewritten
when the run completes ("complete": true), so an interrupted run still says what it kept. Bytes that are all zero
are not copied (there is nothing to keep); the manifest lists them as such.

The broker ignores unknown directories in its store root; clean never touches this one. Delete a quarantine
folder yourself once you no longer need what it holds.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from engine.broker.layout import relative_name
from engine.errors import StoreError
from engine.fsutil import atomic_write, data_ranges, fsync_dir, is_zero, pread_fully, write_fully

#: The quarantine folder's name under the store root (engine.broker.layout is the natural home of this name).
QUARANTINE_DIR = "quarantine"
MANIFEST = "manifest.json"
#: The manifest's `tool` starts with this ("rmqtool recover", "rmqtool repair ..."): how engine.ops.footprint.leftovers
#: recognises a quarantine run (info, prune).
QUARANTINE_TOOL_PREFIX = "rmqtool "
_COPY_CHUNK = 1 << 20


class RecoverRefusedError(StoreError):
    """Recovery would have to remove data it cannot keep a copy of; nothing was changed."""


@dataclass
class Kept:
    kind: str                 # "range" (bytes of a file) or "file" (a whole file)
    path: str                 # where it was, relative to the store root (absolute if outside it)
    reason: str
    offset: int = 0           # range: position in the file
    length: int = 0
    stored: str | None = None  # file name inside the quarantine folder, None when not kept
    how: str = ""             # copied, moved, linked, zero (nothing to keep), not kept (--force)
    sha256: str = ""
    replaced_by: str = ""     # what took the bytes' place: placeholder record, BLANK filler, zeros, rebuilt file, ...
    placeholder: dict | None = None  # a placeholder's commit-log offset and origin (engine.ops.recovery.placeholder)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["replacedBy"] = d.pop("replaced_by")
        if d["placeholder"] is None:
            del d["placeholder"]
        return d


@dataclass
class Quarantine:
    root: Path
    force: bool = False               # --force: remove without keeping a copy when copying is impossible
    name: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}")
    entries: list[Kept] = field(default_factory=list)
    extra: dict = field(default_factory=dict)     # further sections of the manifest (e.g. "timer": what was lost)
    tool: str = "rmqtool recover"                 # the command that made the changes (the manifest says it)

    @property
    def dir(self) -> Path:
        return self.root / QUARANTINE_DIR / self.name

    def rel(self, path: Path) -> str:
        return relative_name(path, self.root)

    def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        fsync_dir(self.dir.parent)
        self.write_manifest(False)

    def write_manifest(self, complete: bool) -> None:
        doc = {"tool": self.tool, "store": str(self.root), "created": self.name, "complete": complete,
               "entries": [e.as_dict() for e in self.entries], **self.extra}
        atomic_write(self.dir / MANIFEST, (json.dumps(doc, indent=1) + "\n").encode())

    def keep_range(self, path: Path, pos: int, length: int, reason: str, replaced_by: str,
                   placeholder: dict | None = None) -> Kept:
        """Copy bytes [pos, pos+length) of a file before they are overwritten."""
        e = Kept("range", self.rel(path), reason, pos, length, replaced_by=replaced_by, placeholder=placeholder)
        fd = os.open(path, os.O_RDONLY)
        try:
            if is_zero(fd, pos, pos + length):
                e.how = "zero"
            elif self.force and not self._room(length):
                e.how = "not kept"
            else:
                e.stored = f"{e.path.replace(os.sep, '_')}@{pos}+{length}.bin"
                e.sha256 = self._copy(fd, pos, length, self.dir / e.stored)
                e.how = "copied"
        finally:
            os.close(fd)
        self._record(e)
        return e

    def keep_file(self, path: Path, reason: str, replaced_by: str = "", link: bool = False) -> Kept:
        """Move a whole file in (link=True: hard-link it, the caller then replaces the original atomically)."""
        st = os.lstat(path)
        e = Kept("file", self.rel(path), reason, 0, st.st_size, replaced_by=replaced_by)
        e.stored = e.path.replace(os.sep, "_")
        target = self.dir / e.stored
        try:
            if link:
                os.link(path, target)
                e.how = "linked"
            else:
                os.rename(path, target)
                e.how = "moved"
        except OSError:  # another file system (a commit-log directory elsewhere) or no hard links: copy
            fd = os.open(path, os.O_RDONLY)
            try:
                if self.force and not self._room(st.st_size):
                    e.stored, e.how = None, "not kept"
                else:
                    e.sha256 = self._copy(fd, 0, st.st_size, target)
                    e.how = "copied"
            finally:
                os.close(fd)
            if not link:
                os.unlink(path)
        self._record(e)
        return e

    def _room(self, length: int) -> bool:
        return shutil.disk_usage(self.dir).free > length + (64 << 20)

    def _copy(self, fd: int, pos: int, length: int, target: Path) -> str:
        """Copy bytes [pos, pos+length) of fd to a new file, sparse: holes and all-zero chunks are not written
        (SEEK_DATA/SEEK_HOLE), so a copy costs what the original's bytes hold. Returns the sha256 of the bytes."""
        h = hashlib.sha256()
        zeros = bytes(_COPY_CHUNK)
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(out, length)
            done = 0
            for a, b in data_ranges(fd, pos, pos + length):
                while done < a - pos:  # a hole: zeros in the hash, nothing on disk
                    k = min(_COPY_CHUNK, a - pos - done)
                    h.update(zeros[:k])
                    done += k
                while done < b - pos:
                    data = pread_fully(fd, min(_COPY_CHUNK, b - pos - done), pos + done)
                    if not data:
                        break
                    h.update(data)
                    for a2, b2 in _nonzero_pages(data):
                        write_fully(out, memoryview(data)[a2:b2], done + a2, target, undo=False)
                    done += len(data)
            while done < length:
                k = min(_COPY_CHUNK, length - done)
                h.update(zeros[:k])
                done += k
            os.fsync(out)
        finally:
            os.close(out)
        return h.hexdigest()

    def _record(self, e: Kept) -> None:
        self.entries.append(e)
        fsync_dir(self.dir)
        # Before the caller changes the original (with many entries, every 100th: the .bin names say enough).
        if len(self.entries) <= 200 or len(self.entries) % 100 == 0:
            self.write_manifest(False)


_PAGE = 4096


def _nonzero_pages(data: bytes) -> list[tuple[int, int]]:
    """The runs of 4 KiB pages of data that hold a non-zero byte, as (start, end) positions (the rest is left a
    hole in a sparse copy)."""
    n = len(data)
    if not n:
        return []
    full = n - n % _PAGE
    arr = np.frombuffer(data, dtype=np.uint8)
    nz = np.zeros(-(-n // _PAGE), dtype=bool)
    if full:
        nz[:full // _PAGE] = arr[:full].reshape(-1, _PAGE).any(axis=1)
    if full < n:
        nz[-1] = bool(arr[full:].any())
    edges = np.diff(np.concatenate(([0], nz.view(np.int8), [0])))
    return [(int(a) * _PAGE, min(int(b) * _PAGE, n)) for a, b in zip(np.flatnonzero(edges == 1),
                                                                     np.flatnonzero(edges == -1))]


def check_room(root: Path, copy_bytes: int, what_force_removes: str) -> None:
    """Refuse (nothing changed) when the store's file system cannot hold the copies recovery must keep."""
    free = shutil.disk_usage(root).free
    if copy_bytes + (64 << 20) > free:
        raise RecoverRefusedError(
            f"recover must keep {copy_bytes} bytes in {root / QUARANTINE_DIR} before changing the store, but only "
            f"{free} bytes are free; free some space, or run with --force to {what_force_removes} without a copy")
