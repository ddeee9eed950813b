"""The folders rmqtool leaves in a store root, recognised by what they hold, never by their name alone.

* Quarantine runs, `<store>/quarantine/<yyyyMMdd-HHmmss>-<pid>/` (engine.ops.footprint.quarantine): what a recover (or a
  repair) removed or overwrote. Recognised by `manifest.json` whose tool is rmqtool's ("rmqtool recover",
  "rmqtool repair ...") and whose `created` is the folder's name. A run whose manifest is not complete belongs to
  an interrupted run and may hold the only copy of bytes it changed: it is listed, never pruned.
* Index backups, `<store>/index.bak-<time>/` (engine.jobs.publish): the index directory a spark-reindex swapped
  out. Recognised by `rmqtool-backup.json` (BACKUP_MARKER, written before the directory gets its backup name).
  An index.bak-* without it (made by hand, or by an older rmqtool) is listed as not recognised and left alone.
* A recovery placeholder: a record recover wrote in place of damaged bytes so the records after them stay
  readable. The quarantine manifest names each one; engine.ops.recovery.placeholder.list_placeholders lists
  them for `info`, and a run counts its own here.

Everything here reads only (directory listings, the small manifests, stat): `rmqtool info` and `prune` use it.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from engine import clock
from engine.broker.layout import relative_name
from engine.fsutil import atomic_write
from engine.ops.footprint.quarantine import MANIFEST, QUARANTINE_DIR, QUARANTINE_TOOL_PREFIX
from engine.ops.recovery.placeholder import REPLACED_BY

BACKUP_MARKER = "rmqtool-backup.json"
BACKUP_KIND = "index-backup"
BACKUP_PREFIX = "index.bak-"
#: Manifests and markers larger than this are not rmqtool's (they are read whole).
MAX_MANIFEST_BYTES = 64 << 20


@dataclass
class Usage:
    """Bytes of a file or a tree: as `ls` counts them (apparent) and as the disk does (allocated)."""
    apparent: int = 0
    allocated: int = 0
    files: int = 0

    def add(self, st: os.stat_result) -> None:
        self.apparent += st.st_size
        self.allocated += st.st_blocks * 512
        self.files += 1

    def as_dict(self) -> dict:
        return {"apparent": self.apparent, "allocated": self.allocated}


def tree_usage(path: Path) -> Usage:
    """Bytes of every regular file below `path` (links are not followed)."""
    u = Usage()
    if path.is_symlink():
        return u
    if path.is_file():
        u.add(path.stat())
        return u
    for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
        for n in filenames:
            try:
                st = os.lstat(os.path.join(dirpath, n))
            except FileNotFoundError:
                continue
            if not os.path.islink(os.path.join(dirpath, n)):
                u.add(st)
    return u


@dataclass
class Leftover:
    """One folder rmqtool left: a quarantine run or an index backup."""
    kind: str                    # "quarantine" or "index-backup"
    path: Path
    recognised: bool             # its manifest / marker says rmqtool made it
    created_ms: int | None       # when it was made (from its manifest or name, else the folder's mtime)
    usage: Usage
    complete: bool = True        # quarantine: the recover that made it finished
    detail: dict = field(default_factory=dict)
    placeholder_count: int = 0   # quarantine: the recovery placeholders its manifest names
    why_not: str = ""            # why it is not recognised

    @property
    def name(self) -> str:
        return self.path.name

    def age_ms(self, now_ms: int | None = None) -> int | None:
        if self.created_ms is None:
            return None
        return max(0, (clock.now_ms() if now_ms is None else now_ms) - self.created_ms)

    def as_dict(self, root: Path | None = None, now_ms: int | None = None) -> dict:
        path = str(self.path) if root is None else relative_name(self.path, root)
        d = {"kind": self.kind, "name": self.name, "path": path, "recognised": self.recognised,
             "created": self.created_ms, "ageSeconds": None if self.created_ms is None else self.age_ms(now_ms) // 1000,
             "bytes": self.usage.as_dict(), "files": self.usage.files}
        if self.kind == "quarantine":
            d["complete"] = self.complete
            d["placeholderCount"] = self.placeholder_count
        if not self.recognised:
            d["notRecognisedBecause"] = self.why_not
        d["manifest"] = self.detail
        return d


def _read_json(path: Path) -> tuple[dict | None, str]:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None, f"it has no {path.name}"
    if not os.path.isfile(path) or os.path.islink(path):
        return None, f"its {path.name} is not a regular file"
    if st.st_size > MAX_MANIFEST_BYTES:
        return None, f"its {path.name} is {st.st_size} bytes, too large to be rmqtool's"
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError) as e:
        return None, f"its {path.name} does not read as JSON ({e})"
    if not isinstance(doc, dict):
        return None, f"its {path.name} is not a JSON object"
    return doc, ""


def _name_time_ms(name: str, fmt: str) -> int | None:
    try:
        return int(datetime.strptime(name, fmt).timestamp() * 1000)
    except ValueError:
        return None


def _mtime_ms(path: Path) -> int | None:
    try:
        return int(os.lstat(path).st_mtime * 1000)
    except OSError:
        return None


# ------------------------------------------------------------------------------------------- quarantine


def quarantine_runs(root: Path) -> list[Leftover]:
    """Every folder under <store>/quarantine/, oldest first, recognised or not."""
    qroot = Path(root) / QUARANTINE_DIR
    if not qroot.is_dir() or qroot.is_symlink():
        return []
    return [quarantine_run(Path(e.path)) for e in sorted(os.scandir(qroot), key=lambda e: e.name)
            if e.is_dir(follow_symlinks=False)]


def quarantine_run(path: Path) -> Leftover:
    doc, why = _read_json(path / MANIFEST)
    stamp = path.name.rsplit("-", 1)[0] if "-" in path.name else path.name
    created = _name_time_ms(stamp, "%Y%m%d-%H%M%S") or _mtime_ms(path)
    run = Leftover("quarantine", path, False, created, tree_usage(path))
    if doc is not None:
        if not str(doc.get("tool", "")).startswith(QUARANTINE_TOOL_PREFIX):
            why = f"its {MANIFEST} was not written by rmqtool (tool {doc.get('tool')!r})"
        elif doc.get("created") != path.name:
            why = f"its {MANIFEST} belongs to run {doc.get('created')!r}, not to this folder"
        elif not isinstance(doc.get("entries"), list):
            why = f"its {MANIFEST} has no list of entries"
        else:
            why = ""
    if why:
        run.why_not = why
        return run
    run.recognised = True
    run.complete = doc.get("complete") is True
    entries = [e for e in doc["entries"] if isinstance(e, dict)]
    how: dict[str, int] = {}
    kept = 0
    for e in entries:
        how[str(e.get("how"))] = how.get(str(e.get("how")), 0) + 1
        if e.get("how") in ("copied", "moved", "linked") and isinstance(e.get("length"), int):
            kept += e["length"]
        run.placeholder_count += e.get("replacedBy") == REPLACED_BY
    run.detail = {"tool": doc.get("tool"), "complete": run.complete, "entries": len(entries), "keptBytes": kept,
                  "entriesByHow": how}
    return run


# ------------------------------------------------------------------------------------------- index backups


def backup_marker(run_id: str, by: str, created_ms: int | None = None) -> dict:
    """The marker of an index backup (written into the swapped-out index directory before it is renamed)."""
    ms = clock.now_ms() if created_ms is None else created_ms
    return {"tool": "rmqtool", "kind": BACKUP_KIND, "of": "index", "by": by, "runId": run_id, "created": ms}


def mark_backup(directory: Path, run_id: str, by: str) -> None:
    """Write the backup marker into `directory` (durably: it is what lets `prune` remove the folder later)."""
    atomic_write(Path(directory) / BACKUP_MARKER, (json.dumps(backup_marker(run_id, by), indent=1) + "\n").encode())


def index_backups(root: Path) -> list[Leftover]:
    """Every <store>/index.bak-* directory, oldest first, recognised (its marker) or not."""
    root = Path(root)
    if not root.is_dir():
        return []
    out = []
    for e in sorted(os.scandir(root), key=lambda e: e.name):
        if e.name.startswith(BACKUP_PREFIX) and e.is_dir(follow_symlinks=False):
            out.append(index_backup(Path(e.path)))
    return out


def index_backup(path: Path) -> Leftover:
    doc, why = _read_json(path / BACKUP_MARKER)
    if doc is not None and (doc.get("tool") != "rmqtool" or doc.get("kind") != BACKUP_KIND):
        doc, why = None, f"its {BACKUP_MARKER} is not an rmqtool index-backup marker"
    created = doc.get("created") if doc is not None and isinstance(doc.get("created"), int) else None
    stamp = path.name[len(BACKUP_PREFIX):len(BACKUP_PREFIX) + 14]
    created = created or _name_time_ms(stamp, "%Y%m%d%H%M%S") or _mtime_ms(path)
    b = Leftover("index-backup", path, doc is not None, created, tree_usage(path), why_not=why)
    if doc is not None:
        b.detail = {"tool": "rmqtool", "by": doc.get("by"), "runId": doc.get("runId")}
    return b


def leftovers(root: Path) -> list[Leftover]:
    """Quarantine runs, then index backups."""
    return quarantine_runs(root) + index_backups(root)
