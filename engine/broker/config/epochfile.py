"""The epoch file of a controller-mode broker: <root>/epochFileCheckpoint and its .bak (format §11.8).

EpochFileCache keeps, per epoch (a term of one master), the commit-log offset it started at; an epoch ends where the
next one starts, the last one at Long.MAX_VALUE. It is stored by CheckpointFile as text: the number of entries, the
CRC32 of the entry lines (UtilAll.crc32: masked to 31 bits, 0 meaning "not checked"), then one "epoch-startOffset"
line per entry, every line ending in the line separator ("\\n" on Linux). A write (MixAll.string2File) first copies
the previous file to .bak; a write of no entries writes nothing; a read falls back to the .bak when the file yields
no entries or fails its count or CRC.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from engine.fsutil import atomic_write, fsync_dir
from engine.java.crc import crc32

LONG_MAX = (1 << 63) - 1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN = -(1 << 63)
#: System.lineSeparator() on the platforms brokers run on.
LINE_SEPARATOR = "\n"
BAK_SUFFIX = ".bak"
_LINES = re.compile(r"\r\n|\r|\n")


@dataclass
class EpochEntry:
    """EpochEntry: an epoch, the commit-log offset it starts at, and where it ends (the next epoch's start)."""
    epoch: int
    start_offset: int
    end_offset: int = LONG_MAX

    def as_dict(self) -> dict:
        return {"epoch": self.epoch, "startOffset": self.start_offset,
                "endOffset": None if self.end_offset == LONG_MAX else self.end_offset}


@dataclass
class EpochFileRead:
    """What CheckpointFile.read gives (entries, from "file" or "bak"), and what is wrong with either file."""
    path: Path
    entries: list[EpochEntry] = field(default_factory=list)
    source: str | None = None          # "file", "bak" or None (neither exists or yields entries)
    file_problem: str | None = None
    bak_problem: str | None = None
    fatal: str | None = None           # the broker fails to load it (a number it cannot parse)
    exists: bool = False
    bak_exists: bool = False

    def as_dict(self) -> dict:
        return {"path": str(self.path), "exists": self.exists, "bakExists": self.bak_exists, "source": self.source,
                "entries": [e.as_dict() for e in self.entries], "fileProblem": self.file_problem,
                "bakProblem": self.bak_problem, "fatal": self.fatal}


class EpochFileError(ValueError):
    """A file CheckpointFile.read throws on: `fatal` when the broker's start fails on it (a parse error, not an
    IOException)."""

    def __init__(self, msg: str, fatal: bool = False):
        super().__init__(msg)
        self.fatal = fatal


def _java_int(text: str | None, lo: int, hi: int) -> int | None:
    if text is None:
        return None
    t = text[1:] if text[:1] in "+-" else text
    if not t or not t.isascii() or not t.isdigit():
        return None
    v = int(text)
    return v if lo <= v <= hi else None


def bak_path(path: Path) -> Path:
    return path.with_name(path.name + BAK_SUFFIX)


def entry_line(e: EpochEntry) -> str:
    """EpochEntrySerializer.toLine."""
    return f"{e.epoch}-{e.start_offset}"


def parse_entry(line: str) -> EpochEntry | None:
    """EpochEntrySerializer.fromLine: "epoch-startOffset" (String.split("-"), exactly two parts), else None."""
    parts = line.split("-")
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    if len(parts) != 2:
        return None
    epoch, start = _java_int(parts[0], _INT_MIN, _INT_MAX), _java_int(parts[1], _LONG_MIN, LONG_MAX)
    if epoch is None or start is None:
        raise EpochFileError(f"entry line {line!r} is not epoch-startOffset numbers", fatal=True)
    return EpochEntry(epoch, start)


def parse(data: bytes) -> list[EpochEntry]:
    """CheckpointFile.read(path) of one file's bytes; EpochFileError where it throws."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise EpochFileError("it is not UTF-8 text") from None
    lines = _LINES.split(text)
    if lines and lines[-1] == "" and text:
        lines.pop()  # the separator ends the last line: readLine yields no line after it
    if not text:
        lines = []
    size = _java_int(lines[0] if lines else None, _INT_MIN, _INT_MAX)
    crc = _java_int(lines[1] if len(lines) > 1 else None, _INT_MIN, _INT_MAX)
    if size is None or crc is None:
        raise EpochFileError("its first two lines are not the entry count and the CRC", fatal=True)
    entries = []
    body = []
    for line in lines[2:]:
        body.append(line + LINE_SEPARATOR)
        e = parse_entry(line)
        if e is not None:
            entries.append(e)
    truth = crc32("".join(body).encode("utf-8")) & 0x7FFFFFFF
    if len(entries) != size:
        raise EpochFileError(f"it says {size} entries but holds {len(entries)}")
    if crc != 0 and truth != crc:
        raise EpochFileError(f"its CRC is {crc} but the entries give {truth}")
    return init_end_offsets(entries)


def init_end_offsets(entries: list[EpochEntry]) -> list[EpochEntry]:
    """EpochFileCache.initEntries: kept by epoch (a later line of the same epoch replaces the earlier), each
    ending where the next starts."""
    by_epoch: dict[int, EpochEntry] = {}
    prev = None
    for e in entries:
        e = EpochEntry(e.epoch, e.start_offset)
        by_epoch[e.epoch] = e
        if prev is not None:
            prev.end_offset = e.start_offset
        prev = e
    return [by_epoch[k] for k in sorted(by_epoch)]


def read(path: Path) -> EpochFileRead:
    """CheckpointFile.read: the file, or its .bak when the file yields no entries or fails; read-only."""
    path = Path(path)
    out = EpochFileRead(path, exists=path.exists(), bak_exists=bak_path(path).exists())
    main = _read_one(path, out, "file_problem")
    if main:
        out.entries, out.source = main, "file"
        return out
    if out.fatal:
        return out  # a parse error is no IOException: read() throws instead of trying the .bak
    bak = _read_one(bak_path(path), out, "bak_problem")
    if bak:
        out.entries, out.source = bak, "bak"
    return out


def _read_one(p: Path, out: EpochFileRead, slot: str) -> list[EpochEntry]:
    if not p.exists():
        return []
    try:
        data = p.read_bytes()
    except OSError as e:
        setattr(out, slot, f"cannot be read: {e.strerror or e}")
        return []
    try:
        return parse(data)
    except EpochFileError as e:
        setattr(out, slot, str(e))
        if e.fatal and out.fatal is None:
            out.fatal = f"{p.name}: {e}"
        return []


def serialize(entries: list[EpochEntry]) -> bytes:
    """CheckpointFile.write's text: count, CRC of the entry lines, the lines."""
    body = "".join(entry_line(e) + LINE_SEPARATOR for e in entries)
    crc = crc32(body.encode("utf-8")) & 0x7FFFFFFF
    return f"{len(entries)}{LINE_SEPARATOR}{crc}{LINE_SEPARATOR}{body}".encode("utf-8")


def write(path: Path, entries: list[EpochEntry]) -> bool:
    """CheckpointFile.write through MixAll.string2File: nothing for no entries (returns False); else the file's
    previous bytes to .bak, then the new text to the file (each replaced atomically here, the content the
    broker's)."""
    if not entries:
        return False
    path = Path(path)
    if path.exists():
        atomic_write(bak_path(path), path.read_bytes())
    atomic_write(path, serialize(entries))
    fsync_dir(path.parent)
    return True


def truncate_suffix_by_offset(entries: list[EpochEntry], offset: int) -> list[EpochEntry]:
    """EpochFileCache.truncateSuffixByOffset: drop the epochs starting at or after `offset`; the last kept one
    then ends at Long.MAX_VALUE."""
    kept = [EpochEntry(e.epoch, e.start_offset, e.end_offset) for e in entries if e.start_offset < offset]
    if kept:
        kept[-1].end_offset = LONG_MAX
    return kept


def truncate_prefix_by_offset(entries: list[EpochEntry], offset: int) -> list[EpochEntry]:
    """EpochFileCache.truncatePrefixByOffset: drop the epochs ending at or before `offset` (the broker's clean-up
    calls it with the commit log's new min offset - 1 once it has deleted segments)."""
    return [EpochEntry(e.epoch, e.start_offset, e.end_offset) for e in entries if e.end_offset > offset]


@dataclass
class EpochProblem:
    """One thing wrong with the epoch file as the commit log sees it."""
    kind: str        # "past-end", "order", "unreadable", "bak-only", "fatal", "below-min"
    detail: str
    epoch: int | None = None


def check_against_log(r: EpochFileRead, min_offset: int, max_offset: int) -> list[EpochProblem]:
    """What is wrong with the epochs the broker would load, given the commit log's [min, max) offsets."""
    out = []
    if r.fatal:
        out.append(EpochProblem("fatal", f"the broker cannot load it: {r.fatal}"))
    elif r.file_problem and r.source == "bak":
        out.append(EpochProblem("bak-only", f"{r.path.name} {r.file_problem}: the broker reads the .bak"))
    elif r.file_problem or r.bak_problem:
        which = r.file_problem or r.bak_problem
        out.append(EpochProblem("unreadable", f"{which}: the broker loads no epochs"))
    prev = None
    for e in r.entries:
        if prev is not None and e.start_offset <= prev.start_offset:
            out.append(EpochProblem("order", f"epoch {e.epoch} starts at {e.start_offset}, not after epoch "
                                             f"{prev.epoch}'s start {prev.start_offset}", e.epoch))
        if e.start_offset > max_offset:
            out.append(EpochProblem("past-end", f"epoch {e.epoch} starts at {e.start_offset}, past the commit log's "
                                                f"end {max_offset}", e.epoch))
        prev = e
    return out


def remove_files(path: Path) -> list[Path]:
    """The epoch file and its .bak that exist (what a truncation to no entries takes away)."""
    return [p for p in (Path(path), bak_path(Path(path))) if p.exists()]


