"""StoreCheckpoint (format §6): a 4 KiB file, five big-endian longs at its start."""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from engine.errors import CorruptFileError
from engine.fsutil import DiskFullError, atomic_write, write_fully
from engine.fsutil import sync as fsync_file

CHECKPOINT_SIZE = 4096
_FIELDS = struct.Struct(">qqqqq")
#: The latest store timestamp a checkpoint can hold sensibly (9999-12-31): a field beyond it is garbage.
MAX_TIMESTAMP = 253_402_300_799_999
#: The largest commit-log offset a checkpoint can hold sensibly (1 EiB).
MAX_OFFSET = 1 << 60


@dataclass
class Checkpoint:
    physicMsgTimestamp: int = 0
    logicsMsgTimestamp: int = 0
    indexMsgTimestamp: int = 0
    masterFlushedOffset: int = 0
    confirmPhyOffset: int = 0

    def min_timestamp(self) -> int:
        """getMinTimestamp: 3 s safety margin, never negative."""
        return max(0, min(self.physicMsgTimestamp, self.logicsMsgTimestamp) - 3000)

    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp(), self.indexMsgTimestamp)

    def to_bytes(self) -> bytes:
        data = _FIELDS.pack(self.physicMsgTimestamp, self.logicsMsgTimestamp, self.indexMsgTimestamp,
                            self.masterFlushedOffset, self.confirmPhyOffset)
        return data + bytes(CHECKPOINT_SIZE - len(data))

    @classmethod
    def from_bytes(cls, data: bytes) -> "Checkpoint":
        return cls(*_FIELDS.unpack_from(data, 0))

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def load(cls, path: Path, strict: bool = True) -> "Checkpoint":
        """A missing checkpoint reads as zeros (the broker creates a zero file). A file of the wrong size
        is corrupt; with strict=False it reads as zeros too (recovery then rewinds to the first segment)."""
        try:
            with open(path, "rb") as f:
                data = f.read(CHECKPOINT_SIZE + 1)
        except FileNotFoundError:
            return cls()
        if len(data) != CHECKPOINT_SIZE:
            if strict:
                raise CorruptFileError(f"checkpoint {path} is {len(data)} bytes; a broker checkpoint is {CHECKPOINT_SIZE}")
            return cls()
        return cls.from_bytes(data)

    def implausible(self) -> str | None:
        """Why these fields cannot be a checkpoint the broker wrote (negative values, timestamps past the year
        9999, offsets past 1 EiB: garbage bytes), else None."""
        ts = (self.physicMsgTimestamp, self.logicsMsgTimestamp, self.indexMsgTimestamp)
        offs = (self.masterFlushedOffset, self.confirmPhyOffset)
        if any(v < 0 for v in ts + offs):
            return "negative values (garbage)"
        if any(v > MAX_TIMESTAMP for v in ts) or any(v > MAX_OFFSET for v in offs):
            return "values no broker writes (timestamps past the year 9999 or offsets past 1 EiB: garbage)"
        return None

    @classmethod
    def read_checked(cls, path: Path) -> tuple["Checkpoint", str | None]:
        """The checkpoint and why it cannot be trusted (None when it can): a missing file, a file of the wrong
        size (both read as zeros, as the broker reads them), fields no broker writes, or bytes after the five
        fields that are not zero (the broker writes nothing there). Never raises for the file's content."""
        try:
            with open(path, "rb") as f:
                data = f.read(CHECKPOINT_SIZE + 1)
        except FileNotFoundError:
            return cls(), "missing (reads as zeros)"
        except OSError as e:
            return cls(), f"unreadable ({e.strerror or e}); reads as zeros"
        if len(data) != CHECKPOINT_SIZE:
            return cls(), f"is {len(data)} bytes; a broker checkpoint is {CHECKPOINT_SIZE} (reads as zeros)"
        cp = cls.from_bytes(data)
        why = cp.implausible()
        if why is None and any(data[_FIELDS.size:]):
            why = f"bytes after its first {_FIELDS.size} are not zero (garbage: the broker writes nothing there)"
        return cp, why

    def save(self, path: Path, sync: bool = True) -> None:
        """Write-then-rename, so a crash leaves either the old or the new checkpoint. On a full disk (no room
        for the new file) the existing 4 KiB file is rewritten in place, as the broker rewrites its mapped
        checkpoint: its 40 bytes sit in one allocated block, so that needs no space."""
        try:
            atomic_write(Path(path), self.to_bytes(), sync=sync)
        except DiskFullError:
            if not self._rewrite_in_place(Path(path)):
                raise

    def _rewrite_in_place(self, path: Path) -> bool:
        try:
            fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return False
        try:
            if os.fstat(fd).st_size != CHECKPOINT_SIZE:
                return False
            write_fully(fd, self.to_bytes()[:_FIELDS.size], 0, path, undo=False)
            fsync_file(fd, path, data_only=False)
            return True
        finally:
            os.close(fd)
