"""What every store-changing operation (recover, clean) shares: plan read-only, then apply under the store
lock, re-planning first when the store changed since the plan was made; a dry run only plans.

An operation is two functions: plan(cfg) -> plan (reads only; every file opened read-only) and
execute(cfg, plan) (changes the store; called with the lock held, only when the plan has something to do).
Plans carry the store's fingerprint (the size and mtime of every file, the lock file and the quarantine
excepted), which is how apply knows whether the plan still describes the store.
"""
from __future__ import annotations

import os
from typing import Callable, Protocol, TypeVar

from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.layout import LOCK_FILE, StoreLayout
from engine.broker.config.lock import StoreLock
from engine.broker.write.guard import require_writable
from engine.errors import NotAStoreError
from engine.ops.footprint.quarantine import QUARANTINE_DIR

class Plan(Protocol):
    fingerprint: tuple

    @property
    def nothing_to_do(self) -> bool: ...


P = TypeVar("P", bound=Plan)


def fingerprint(cfg: BrokerConfig) -> tuple:
    """Sizes and mtimes of every file the operations read: apply re-plans when the store changed since."""
    out = []
    roots = [cfg.root] + [d for d in cfg.commitlog_dirs if not str(d).startswith(str(cfg.root))]
    for r in roots:
        if not r.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(r):
            if dirpath == str(r):
                dirnames[:] = [d for d in dirnames if d != QUARANTINE_DIR]
            for n in filenames:
                if n == LOCK_FILE and dirpath == str(cfg.root):
                    continue
                p = os.path.join(dirpath, n)
                try:
                    st = os.lstat(p)
                except FileNotFoundError:
                    continue
                out.append((p, st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


def apply_under_lock(cfg: BrokerConfig, plan: P, replan: Callable[[], P], execute: Callable[[P], None],
                     lock: StoreLock | None = None) -> P:
    """Carry out `plan` holding the store lock (taken here unless the caller holds it): re-planned first when
    the store changed since it was made. Returns the plan that was applied."""
    own = lock is None
    if own:
        lock = StoreLock(cfg.root).acquire()
    try:
        if fingerprint(cfg) != plan.fingerprint:
            plan = replan()
        if not plan.nothing_to_do:
            execute(plan)
        return plan
    finally:
        if own:
            lock.release()


def require_store(cfg: BrokerConfig) -> None:
    """NotAStoreError unless cfg.root holds a store (StoreLayout.holds_store) or rmqtool's quarantine: checked
    before the lock is taken, so a directory that is not a store (`-s ~`) is refused with nothing written in it
    (the lock file included)."""
    if not cfg.root.exists():
        raise NotAStoreError(f"store directory {cfg.root} does not exist")
    if not cfg.root.is_dir():
        raise NotAStoreError(f"{cfg.root} is not a directory")
    if StoreLayout.of(cfg).holds_store() or (cfg.root / QUARANTINE_DIR).is_dir():
        return
    raise NotAStoreError(f"{cfg.root} is not a RocketMQ store: it has no commitlog/, consumequeue/, index/ or "
                         "config/ directory, no checkpoint and no abort marker; nothing was written")


def run(cfg: BrokerConfig, make_plan: Callable[[], P], execute: Callable[[P], None], dry_run: bool,
        writer: str | None = None) -> P:
    """An operation's entry point: a dry run plans without the lock; otherwise lock, plan, apply. `writer` names
    the operation for the write guard (engine.broker.write.guard): a store whose mode it cannot write as the broker
    does is refused before anything is planned, dry run included; None for rmqtool's own leftovers (prune)."""
    require_store(cfg)
    if writer is not None:
        require_writable(cfg, writer)
    if dry_run:
        return make_plan()
    lock = StoreLock(cfg.root).acquire()
    try:
        plan = make_plan()
        return apply_under_lock(cfg, plan, make_plan, execute, lock=lock)
    finally:
        lock.release()
