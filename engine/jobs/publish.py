"""Making built index files visible by renames only, knowing the index directories rmqtool built, and
repairing what an interrupted run left behind.

The marker. Every directory of index files a job writes has a `rmqtool-index.json` (MANIFEST): who wrote it
(tool, format, run id, geometry, time), its state (building -> complete; publishing while files move into
an --out directory) and its files as built. `--replace` removes only index files of a directory that has
this marker, or (for the store's own index/ directory only) one that holds nothing but index files of the
configured geometry. Staging directories and --out directories hold it. The store's own index/ does not: the
broker's IndexService.load parses every name in index/ as a number and logs an ERROR with a stack trace for any
other (format §5.8), so its marker lives beside it, at the store root (`store_marker_path`), which no part of the
broker lists, and names the directory it describes (device and inode: a directory put in index/'s place by hand
is not taken for rmqtool's). The marker travels inside the staging directory and is moved out right after the
swap, under the store lock; one found inside index/ (written there by earlier versions, or left by a run killed
between the two renames) is read all the same and moved out by the next spark-reindex (`settle_store_marker`).

Into the store. The new index is built in `<store>/.index.reindex-<run>` and swapped with `<store>/index` in
one renameat2(RENAME_EXCHANGE): a reader sees the old directory or the new one, never none. The old one,
now under the staging name, becomes `index.bak-<time>` or (with --replace) is deleted. On a file system
without RENAME_EXCHANGE it takes two renames (index -> .index.old-<run>, staging -> index); a kill between
them leaves no index/ until repair_store_index runs (the next spark-reindex does it first, and says so;
missing_index_note tells a read-only command what happened).

Into --out DIR. Files are built in DIR/.reindex-<run>, then the marker (state publishing), then each file
by os.replace, stale index files removed, the marker completed, the staging directory removed.

Repair. Staging directories are named after their run and carry its marker, so the next run tells a
build it may delete from an old index it must keep (repair_store_index, repair_out_dir).
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from engine.broker.layout import INDEX_NAME, list_index_files
from engine.fsutil import atomic_write, fsync_dir

MANIFEST = "rmqtool-index.json"
_RUN = r"([0-9a-f]{12})"
_TEMP_NAME = re.compile(r"^\.\d{6}\.[0-9a-f]{12}\.[A-Za-z0-9]+\.tmp$")  # engine.jobs.broker_index.temp_name
_MANIFEST_TEMP = re.compile(r"^" + re.escape(MANIFEST) + r"\.tmp\d+$")    # engine.fsutil.atomic_write
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


# ============================================================================ the marker

def write_manifest(directory: Path, info: dict) -> None:
    atomic_write(Path(directory) / MANIFEST, (json.dumps(info, indent=1, sort_keys=True) + "\n").encode())


def read_manifest(directory: Path) -> Optional[dict]:
    """The marker a directory rmqtool built holds, or None (missing, unreadable, or not rmqtool's). For the store's
    own index/ ask read_store_index_marker: its marker lives beside it."""
    return _read_marker(Path(directory) / MANIFEST)


def _read_marker(path: Path) -> Optional[dict]:
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("tool") != "rmqtool" or info.get("kind") != "index-directory":
        return None
    return info


def store_marker_path(index_dir: Path) -> Path:
    """Where the marker of the store's own index directory lives: beside it, at the store root."""
    return Path(index_dir).parent / MANIFEST


def _dir_id(directory: Path) -> Optional[list[int]]:
    try:
        st = os.stat(directory, follow_symlinks=False)
    except OSError:
        return None
    return [st.st_dev, st.st_ino]


def read_store_index_marker(index_dir: Path) -> Optional[dict]:
    """The marker of the store's index/, or None: one inside it (earlier versions, or a run killed between the swap
    and the move) first, else the one at the store root when it names this very directory."""
    inside = read_manifest(index_dir)
    if inside is not None:
        return inside
    info = _read_marker(store_marker_path(index_dir))
    if info is None or info.get("directory") != _dir_id(index_dir):
        return None
    return info


def settle_store_marker(index_dir: Path) -> Optional[str]:
    """Move the marker out of the store's index/ to the store root (naming the directory it describes), so the
    broker never meets it; what was done, or None when there was nothing inside."""
    inside = Path(index_dir) / MANIFEST
    info = read_manifest(index_dir)
    if info is None:
        return None
    # Written whole at the root first (atomic_write: nothing temporary ever appears in index/), then the one
    # inside goes; killed between the two, the next run finds both and does it again.
    write_manifest(Path(index_dir).parent, {**info, "directory": _dir_id(index_dir)})
    os.unlink(inside)
    fsync_dir(index_dir)
    return (f"moved {Path(index_dir).name}/{MANIFEST} to the store root: the broker parses every name in "
            f"{Path(index_dir).name}/ as a number and logs an error for any other")


def new_manifest(run_id: str, fmt: str, state: str, **extra) -> dict:
    return {"tool": "rmqtool", "kind": "index-directory", "format": fmt, "run_id": run_id, "state": state,
            "written": datetime.now(timezone.utc).isoformat(timespec="seconds"), **extra}


def create_staging(path: Path, run_id: str, fmt: str) -> Path:
    """The staging directory of a run, marked as building before any file goes in."""
    path.mkdir()
    write_manifest(path, new_manifest(run_id, fmt, "building"))
    return path


def foreign_entries(directory: Path, file_size: Optional[int]) -> list[str]:
    """What keeps a directory from being "nothing but index files" (of file_size bytes, when given)."""
    out = []
    for e in sorted(os.scandir(directory), key=lambda e: e.name):
        if e.name == MANIFEST:
            continue
        if not INDEX_NAME.match(e.name) or not e.is_file(follow_symlinks=False):
            out.append(e.name)
        elif file_size is not None and e.stat(follow_symlinks=False).st_size != file_size:
            out.append(f"{e.name} ({e.stat(follow_symlinks=False).st_size} bytes)")
    return out


# ============================================================================ renames

def exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (renameat2 RENAME_EXCHANGE). False when the system or file system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def backup_name(target: Path) -> Path:
    stamp = datetime.now().strftime("%Y%m%d%H%M%S")
    cand = target.with_name(f"{target.name}.bak-{stamp}")
    i = 1
    while cand.exists():
        cand = target.with_name(f"{target.name}.bak-{stamp}-{i}")
        i += 1
    return cand


def staging_path(target: Path, run_id: str) -> Path:
    """Where a run builds the store's index: beside it, on the same file system."""
    return target.with_name(f".{target.name}.reindex-{run_id}")


def _old_path(target: Path, run_id: str) -> Path:
    return target.with_name(f".{target.name}.old-{run_id}")


def publish_directory(staging: Path, target: Path, run_id: str, replace: bool) -> Optional[Path]:
    """Put the sealed staging directory in target's place (the store's index/), then move its marker out of it
    to the store root. Returns the backup of the old one (None when there was none or replace deleted it)."""
    parent = target.parent
    if not target.exists():
        os.rename(staging, target)
        fsync_dir(parent)
        settle_store_marker(target)
        return None
    if exchange(staging, target):
        old = staging                     # the old index now lives under the staging name
    else:
        old = _old_path(target, run_id)   # no atomic swap here: two renames, repaired if killed between
        os.rename(target, old)
        os.rename(staging, target)
    fsync_dir(parent)
    settle_store_marker(target)
    return _dispose_old(old, target, replace, run_id)


def _mark_backup(old: Path, run_id: str) -> None:
    # Imported here: the footprint module brings recovery's and the timer store's modules with it, about 70 ms of
    # every job's start, and only a backup needs it.
    from engine.ops.footprint.leftovers import mark_backup

    mark_backup(old, run_id, "spark-reindex")


def _dispose_old(old: Path, target: Path, replace: bool, run_id: str) -> Optional[Path]:
    if replace:
        shutil.rmtree(old)
        fsync_dir(target.parent)
        return None
    backup = backup_name(target)
    _mark_backup(old, run_id)  # before the rename: every index.bak-* of ours says so (prune)
    os.rename(old, backup)
    fsync_dir(target.parent)
    return backup


def publish_files(staging: Path, out_dir: Path, names: list[str], manifest: dict, replace: bool) -> bool:
    """Move the sealed files of staging into out_dir (os.replace each), remove the directory's other index
    files when replace, complete its marker. Returns whether old index files were replaced or removed."""
    old = list_index_files(out_dir) if replace else []
    write_manifest(out_dir, {**manifest, "state": "publishing"})
    for name in names:
        os.replace(staging / name, out_dir / name)
    keep = set(names)
    for p in old:
        if p.name not in keep:
            os.unlink(p)
    write_manifest(out_dir, {**manifest, "state": "complete"})
    shutil.rmtree(staging)
    fsync_dir(out_dir)
    return bool(old)


# ============================================================================ repair

def repair_store_index(target: Path) -> list[str]:
    """Finish or undo what an interrupted run left beside the store's index directory, and move a marker found
    inside it to the store root; what was done."""
    parent = target.parent
    notes: list[str] = []
    olds = []
    for st in sorted(parent.glob(f".{target.name}.reindex-*")):
        m = re.fullmatch(rf"\.{re.escape(target.name)}\.reindex-{_RUN}", st.name)
        if not m or not st.is_dir() or st.is_symlink():
            continue
        info = read_manifest(st)
        if info is not None and info.get("run_id") == m.group(1):  # the build of that run
            if not target.exists() and info.get("state") == "complete":
                os.rename(st, target)
                notes.append(f"published {st.name}/, the complete index an interrupted spark-reindex had left "
                             f"unpublished, as {target.name}/")
            else:
                shutil.rmtree(st)
                notes.append(f"removed {st.name}/, the staging directory of an interrupted spark-reindex")
        elif _only_ours(st, index_names=False):  # killed before its marker was in place
            shutil.rmtree(st)
            notes.append(f"removed {st.name}/, the staging directory of an interrupted spark-reindex")
        else:
            olds.append((st, m.group(1)))  # the old index, swapped out by a run killed right after the swap
    for old in sorted(parent.glob(f".{target.name}.old-*")):
        m = re.fullmatch(rf"\.{re.escape(target.name)}\.old-{_RUN}", old.name)
        if m and old.is_dir() and not old.is_symlink():
            olds.append((old, m.group(1)))
    for old, run_id in olds:
        notes.append(_settle_old(old, target, run_id))
    if target.is_dir() and not target.is_symlink():
        moved = settle_store_marker(target)
        if moved:
            notes.append(moved)
    if notes:
        fsync_dir(parent)
    return notes


def _settle_old(old: Path, target: Path, run_id: str) -> str:
    if not target.exists():
        from engine.ops.footprint.leftovers import BACKUP_MARKER

        (old / BACKUP_MARKER).unlink(missing_ok=True)  # marked as a backup just before a kill: it is the index again
        os.rename(old, target)
        return f"restored {target.name}/ from {old.name}/, where an interrupted spark-reindex had moved it"
    info = read_store_index_marker(target)
    if info is not None and info.get("run_id") == run_id and info.get("replace"):
        shutil.rmtree(old)
        return f"removed {old.name}/, the old index an interrupted spark-reindex --replace was deleting"
    backup = backup_name(target)
    _mark_backup(old, run_id)
    os.rename(old, backup)
    return f"kept the old index an interrupted spark-reindex had moved aside as {backup.name}/"


def repair_out_dir(out_dir: Path) -> list[str]:
    """Remove the staging directories interrupted runs left in an --out directory (only files we write)."""
    notes = []
    if not out_dir.is_dir():
        return notes
    for st in sorted(out_dir.glob(".reindex-*")):
        m = re.fullmatch(rf"\.reindex-{_RUN}", st.name)
        if not m or not st.is_dir() or st.is_symlink():
            continue
        info = read_manifest(st)
        if (info is not None and info.get("run_id") == m.group(1)) or _only_ours(st, index_names=True):
            shutil.rmtree(st)
            notes.append(f"removed {out_dir.name}/{st.name}/, the staging directory of an interrupted spark-reindex")
    return notes


def _only_ours(directory: Path, index_names: bool) -> bool:
    """Whether a directory holds nothing but files a job writes while building (an empty one included)."""
    for e in os.scandir(directory):
        if e.name == ".scratch" and e.is_dir(follow_symlinks=False):  # engine.jobs.framework.SCRATCH
            continue
        if not e.is_file(follow_symlinks=False):
            return False
        if not (e.name == MANIFEST or _MANIFEST_TEMP.match(e.name) or _TEMP_NAME.match(e.name)
                or (index_names and INDEX_NAME.match(e.name))):
            return False
    return True


def missing_index_note(target: Path) -> Optional[str]:
    """For read-only commands: why the store's index directory is missing, when an interrupted
    spark-reindex is the reason (the next spark-reindex repairs it), else None. Reads only."""
    if target.exists():
        return None
    for st in target.parent.glob(f".{target.name}.reindex-*"):
        info = read_manifest(st)
        if info is not None and info.get("state") == "complete":
            return (f"{target} is missing: an interrupted spark-reindex left the new index in {st.name}/; "
                    "run `rmqtool spark-reindex` again to finish it")
    for old in target.parent.glob(f".{target.name}.old-*"):
        return (f"{target} is missing: an interrupted spark-reindex moved the old index to {old.name}/; "
                "run `rmqtool spark-reindex` again to repair it")
    return None
