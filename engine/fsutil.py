"""Durable, checked file I/O: every write is checked for a short or failed write, space is allocated for real
before a file is relied on, and read-only mappings never fault on unallocated pages (no SIGBUS).

Why mappings need care: on tmpfs (and other filesystems that allocate on fault) touching a hole of a mapped
file allocates a page; when the filesystem is full that fault is a SIGBUS, even through a read-only mapping.
`map_readonly` maps only the file's allocated extents and backs its holes with anonymous zero pages.
"""
from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path

from engine.errors import StoreError

#: errno values that mean "the device or quota is full".
NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
#: A file split into more allocated extents than this is mapped whole (see map_readonly).
MAX_MAPPED_EXTENTS = 4096


class WriteFailedError(StoreError):
    """A write, allocation or flush did not complete; nothing past `path` was written by that call."""

    def __init__(self, path, reason: str, free: int | None = None):
        self.path = str(path)
        self.reason = reason
        self.free = free
        super().__init__(f"cannot write {self.path}: {reason}" + (f" ({format_bytes(free)} free)" if free is not None
                                                                  else ""))


class DiskFullError(WriteFailedError):
    """The device (or the quota) is full."""


def format_bytes(n: int | None) -> str:
    if n is None:
        return "unknown"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def free_bytes(path) -> int | None:
    """Bytes an unprivileged writer can still allocate on the filesystem of `path` (None if unknown)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _failure(path, e: OSError | None, what: str) -> WriteFailedError:
    free = free_bytes(Path(path).parent)
    if e is None:
        return DiskFullError(path, f"{what}: short write", free)
    if e.errno in NO_SPACE:
        return DiskFullError(path, f"{what}: {e.strerror or 'no space left on device'}", free)
    return WriteFailedError(path, f"{what}: {e.strerror or e}", free)


def write_fully(fd: int, data, pos: int, path, undo: bool = True) -> None:
    """pwrite all of `data` at `pos` or raise WriteFailedError (DiskFullError when the device is full).

    os.pwrite may write less than asked (a full disk); the rest is retried, and the retry reports the error.
    With `undo`, bytes this call managed to write before failing are overwritten with zeros (they are
    allocated, so that needs no new space): a half record never looks like data.
    """
    view = memoryview(data)
    done, n = 0, len(view)
    while done < n:
        try:
            w = os.pwrite(fd, view[done:], pos + done)
        except OSError as e:
            err = e
        else:
            if w > 0:
                done += w
                continue
            err = None
        if undo and done:
            _zero_out(fd, pos, done)
        raise _failure(path, err, f"wrote {done} of {n} bytes at offset {pos}")


def _zero_out(fd: int, pos: int, length: int) -> None:
    try:
        os.pwrite(fd, bytes(length), pos)
    except OSError:
        pass  # best effort: the caller reports the original failure and leaves the store marked unclean


def allocate(fd: int, offset: int, length: int, path) -> None:
    """Allocate [offset, offset + length) on disk for real (posix_fallocate), or raise DiskFullError.

    Data already there is untouched. Filesystems without fallocate get the holes written with zeros.
    """
    if length <= 0:
        return
    if os.fstat(fd).st_size >= offset + length and not holes(fd, offset, offset + length):
        return  # allocated already (what a broker's warmed-up or a fully written file is)
    allocate_range(fd, offset, length, path)


def allocate_range(fd: int, offset: int, length: int, path) -> None:
    """Allocate [offset, offset + length) for real without first asking which parts are allocated (a writer that
    allocates ahead of its write position knows they are not); DiskFullError when the device is full. Filesystems
    without fallocate get the holes of the range written with zeros."""
    if length <= 0:
        return
    try:
        os.posix_fallocate(fd, offset, length)
        return
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise _failure(path, e, f"cannot allocate {length} bytes at offset {offset}") from None
    for start, end in holes(fd, offset, offset + length):
        write_zeros(fd, start, end - start, path)


def reserve(fd: int, have: int, need: int, limit: int, path, ahead: int = 0) -> int:
    """Allocation by range: given [0, have) of the file allocated, make [0, need) allocated, taking up to `ahead`
    bytes more at once (never past `limit`) so that the next writes find their room allocated already; when the
    disk cannot give the extra, just [have, need). Returns the new allocated end; DiskFullError (nothing past
    `have` promised) when even [have, need) cannot be had."""
    if need <= have:
        return have
    want = min(limit, need + ahead)
    if want > need:
        try:
            allocate_range(fd, have, want - have, path)
            return want
        except DiskFullError:
            pass  # the extra is a convenience: try for what is needed now
    allocate_range(fd, have, need - have, path)
    return need


def write_zeros(fd: int, pos: int, length: int, path, chunk: int = 1 << 20) -> None:
    """Write `length` zero bytes at pos, a chunk at a time (write_fully each: a failure names the file)."""
    zeros = memoryview(bytes(min(chunk, max(length, 0))))
    while length > 0:
        n = min(chunk, length)
        write_fully(fd, zeros[:n], pos, path, undo=False)
        pos, length = pos + n, length - n


def zero_data(fd: int, start: int, end: int, path) -> None:
    """Zeros over [start, end) where the file holds data; its holes there stay holes (they read as zeros
    already, and writing them would allocate what the file does not hold)."""
    for a, b in data_ranges(fd, start, end):
        write_zeros(fd, a, b - a, path)


def sync(fd: int, path, data_only: bool = True) -> None:
    """fdatasync (or fsync) with the failure reported as a WriteFailedError naming the file."""
    try:
        (os.fdatasync if data_only else os.fsync)(fd)
    except OSError as e:
        raise _failure(path, e, "flush failed") from None


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, sync: bool = True) -> None:
    """Write-then-rename; a failed write removes its temporary file and raises WriteFailedError."""
    path = Path(path)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_fully(fd, data, 0, tmp, undo=False)
        if sync:
            try:
                os.fsync(fd)
            except OSError as e:
                raise _failure(tmp, e, "flush failed") from None
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


# ------------------------------------------------------------------------------------------ reading


def data_extents(fd: int, length: int) -> list[tuple[int, int]] | None:
    """The allocated (data) ranges of the first `length` bytes (SEEK_DATA/SEEK_HOLE), or None when the
    filesystem cannot tell."""
    out: list[tuple[int, int]] = []
    pos = 0
    try:
        while pos < length:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:  # no data after pos
                    break
                raise
            if start >= length:
                break
            end = min(os.lseek(fd, start, os.SEEK_HOLE), length)
            out.append((start, end))
            pos = end
    except (OSError, AttributeError):
        return None
    return out


def data_ranges(fd: int, lo: int, hi: int) -> list[tuple[int, int]]:
    """The allocated ranges of [lo, hi) (all of it when the filesystem cannot tell)."""
    ext = data_extents(fd, hi)
    if ext is None:
        return [(lo, hi)]
    return [(max(a, lo), min(b, hi)) for a, b in ext if b > lo and a < hi]


def pread_fully(fd: int, length: int, offset: int) -> bytes:
    """`length` bytes at `offset`, fewer only where the file ends (one pread may return short)."""
    parts, got = [], 0
    while got < length:
        b = os.pread(fd, min(length - got, 1 << 30), offset + got)
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def is_zero(fd: int, lo: int, hi: int, chunk: int = 1 << 20) -> bool:
    """Every byte of [lo, hi) is zero (holes are not read; at most `chunk` bytes in memory at once)."""
    for a, b in data_ranges(fd, lo, hi):
        while a < b:
            data = pread_fully(fd, min(chunk, b - a), a)
            if not data:
                break
            if data.count(0) != len(data):
                return False
            a += len(data)
    return True


def holes(fd: int, start: int, end: int) -> list[tuple[int, int]]:
    """The unallocated ranges within [start, end)."""
    ext = data_extents(fd, end)
    if ext is None:
        return [(start, end)]
    out, pos = [], start
    for a, b in ext:
        if b <= pos:
            continue
        if a > pos:
            out.append((pos, min(a, end)))
        pos = max(pos, b)
    if pos < end:
        out.append((pos, end))
    return [(a, b) for a, b in out if a < b]


def map_readonly(fd: int, length: int):
    """A read-only mapping of the first `length` bytes of `fd` (its real size at most) that never faults
    on a hole: allocated extents are mapped from the file, holes read as anonymous zero pages."""
    if length <= 0:
        return b""
    ext = data_extents(fd, length)
    if ext is None or ext == [(0, length)] or len(ext) > MAX_MAPPED_EXTENTS or not _can_overlay():
        return mmap.mmap(fd, length, access=mmap.ACCESS_READ)
    m = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
    try:
        _overlay(m, fd, length, ext)
    except OSError:
        m.close()
        return mmap.mmap(fd, length, access=mmap.ACCESS_READ)
    return m


_libc = None


def _can_overlay() -> bool:
    global _libc
    if _libc is None:
        try:
            import ctypes

            try:  # glibc's name: ctypes.util.find_library costs ~9 ms of imports and an ldconfig run
                lib = ctypes.CDLL("libc.so.6", use_errno=True)
            except OSError:
                import ctypes.util

                lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            lib.mmap.restype = ctypes.c_void_p
            lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                 ctypes.c_long]
            _libc = lib
        except (OSError, AttributeError):
            _libc = False
    return bool(_libc) and hasattr(mmap, "MAP_PRIVATE")


def _address_of(m) -> int:
    """The address of a mapping's first byte, through the buffer protocol (a read-only buffer too; the export is
    released before this returns, so the mapping can still be closed)."""
    import ctypes

    if not hasattr(ctypes.pythonapi, "PyObject_AsReadBuffer"):  # gone from newer CPythons: numpy knows it too
        import numpy as np

        return np.frombuffer(m, dtype=np.uint8).ctypes.data
    with memoryview(m) as view:
        obj = ctypes.py_object(view)
        buf = ctypes.c_void_p()
        size = ctypes.c_ssize_t()
        ctypes.pythonapi.PyObject_AsReadBuffer.argtypes = [ctypes.py_object, ctypes.POINTER(ctypes.c_void_p),
                                                          ctypes.POINTER(ctypes.c_ssize_t)]
        if ctypes.pythonapi.PyObject_AsReadBuffer(obj, ctypes.byref(buf), ctypes.byref(size)) != 0:
            raise OSError("cannot take the address of a mapping")
        return buf.value


def _overlay(m, fd: int, length: int, extents: list[tuple[int, int]]) -> None:
    """Map each data extent of the file over the anonymous mapping m, at its own offset (MAP_FIXED)."""
    import ctypes

    base = _address_of(m)
    page = mmap.PAGESIZE
    map_fixed, map_shared = 0x10, getattr(mmap, "MAP_SHARED", 1)
    for a, b in extents:
        lo = a - a % page
        hi = min(-(-b // page) * page, -(-length // page) * page)
        got = _libc.mmap(ctypes.c_void_p(base + lo), hi - lo, mmap.PROT_READ, map_shared | map_fixed, fd, lo)
        if got != base + lo:
            raise OSError(ctypes.get_errno(), "mmap of a file extent failed")
