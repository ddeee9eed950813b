"""The store lock: `<store>/lock`, locked the way a broker locks it (FileChannel.tryLock = fcntl)."""
from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from engine.fsutil import fsync_dir, sync, write_fully

from engine.broker.layout import StoreLayout
from engine.errors import NotAStoreError, StoreLockedError, StoreReadOnlyError


class StoreLock:
    def __init__(self, root: Path):
        self.path = StoreLayout(root).lock
        self.fd: int | None = None

    def acquire(self) -> "StoreLock":
        try:  # never through a link: the lock file is the store's own
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as e:
            if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):  # not a lock held: nothing can be written here
                what = "is on a read-only file system" if e.errno == errno.EROFS else "is not writable"
                raise StoreReadOnlyError(f"store {self.path.parent} {what} (cannot open the store lock "
                                         f"{self.path}: {e.strerror}); a command that changes the store cannot "
                                         "run on it") from None
            raise StoreLockedError(f"cannot open the store lock {self.path}: {e.strerror}") from None
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreLockedError(
                f"store {self.path.parent} is locked by another process (a running broker or another rmqtool); "
                "stop it first") from None
        if os.fstat(fd).st_size < 4:
            try:
                os.pwrite(fd, b"lock", 0)  # what the broker writes at start (cosmetic: the fcntl lock is what counts)
            except OSError:
                pass
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            try:
                fcntl.lockf(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()

    def is_locked_elsewhere(self) -> bool:
        """True when another process holds the lock (lock_held_elsewhere: read from /proc/locks, so that no
        descriptor of the lock file is opened and closed here, which would drop a lock this process holds)."""
        return lock_held_elsewhere(self.path.parent)


def mark_in_use(layout: StoreLayout) -> None:
    """Write the abort marker (the writer's PID, as 5.x brokers do) durably before the first change (format §7.1).
    A full disk is a WriteFailedError naming the marker, raised before anything else is changed."""
    if layout.abort.is_symlink():
        raise NotAStoreError(f"{layout.abort} is a symlink; rmqtool never writes through links out of the store")
    existed = layout.abort.exists()
    fd = os.open(layout.abort, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        write_fully(fd, str(os.getpid()).encode("ascii"), 0, layout.abort, undo=False)
        sync(fd, layout.abort, data_only=False)
    except BaseException:
        os.close(fd)
        if not existed:
            layout.abort.unlink(missing_ok=True)  # nothing was changed yet: no marker either
        raise
    os.close(fd)
    fsync_dir(layout.root)


def mark_clean(layout: StoreLayout) -> None:
    """Remove the abort marker once everything it guarded is durable: the last step of a clean shutdown."""
    layout.abort.unlink(missing_ok=True)
    fsync_dir(layout.root)


def lock_held_elsewhere(root: Path) -> bool:
    """True when another process holds the store lock (a broker or a writer): read from /proc/locks, so this
    process never opens (and on close releases) the lock file."""
    return lock_holder(root) is not None


def lock_holder(root: Path) -> int | None:
    """The PID of another process holding the store lock, else None. Read from /proc/locks: the lock is tested
    without being taken and the lock file is never opened here (closing a descriptor of it would drop a lock
    this process holds). A PID from another PID namespace (a broker in a container) reads as 0: held, holder
    unknown."""
    lock = StoreLayout(root).lock
    try:
        st = os.stat(lock)
        with open("/proc/locks") as fh:
            text = fh.read()
    except OSError:
        return None
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    me = str(os.getpid())
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[5].lower() == dev.lower() and parts[4] != me:
            return int(parts[4]) if parts[4].isdigit() else 0
    return None
