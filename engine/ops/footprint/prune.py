"""`rmqtool prune`: remove the quarantine runs and index backups rmqtool made, and nothing else.

What may go: a quarantine run whose manifest.json says rmqtool recover made it and finished it, and an
index.bak-* directory holding rmqtool's backup marker (engine.ops.footprint.leftovers), optionally only those older than
a duration. What stays, and is listed with why: a folder whose manifest or marker is missing or not
rmqtool's, a quarantine run of a recover that did not finish (it may hold the only copy of what that recover
changed), index backups while the store has no index/ directory (a backup may then be the only index), and
everything newer than --older-than. Nothing outside those folders is touched; links are not followed.

The plan is made read-only (a dry run prints it); the removal takes the store lock and re-plans under it when
the store changed since (engine.ops.operation), so what is removed is what was listed.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from typing import Callable

from engine import clock
from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.layout import StoreLayout
from engine.fsutil import fsync_dir
from engine.ops import operation
from engine.ops.footprint.leftovers import Leftover, index_backups, quarantine_runs


@dataclass
class PrunePlan:
    root: object
    older_than_ms: int | None
    now_ms: int
    remove: list[Leftover] = field(default_factory=list)
    keep: list[tuple[Leftover, str]] = field(default_factory=list)
    fingerprint: tuple = ()
    removed: list[Leftover] = field(default_factory=list)

    @property
    def nothing_to_do(self) -> bool:
        return not self.remove

    @property
    def bytes(self) -> int:
        return sum(x.usage.allocated for x in self.remove)

    def as_dict(self) -> dict:
        return {"store": str(self.root), "olderThanSeconds": None if self.older_than_ms is None
                else self.older_than_ms // 1000,
                "remove": [x.as_dict(self.root, self.now_ms) for x in self.remove],
                "keep": [dict(x.as_dict(self.root, self.now_ms), why=why) for x, why in self.keep],
                "bytes": {"apparent": sum(x.usage.apparent for x in self.remove), "allocated": self.bytes}}


def plan_prune(cfg: BrokerConfig, older_than_ms: int | None = None, now_ms: int | None = None) -> PrunePlan:
    """What prune would remove and what it keeps (reads only)."""
    layout = StoreLayout.of(cfg)
    layout.require_store(allow_markers=True)
    plan = PrunePlan(layout.root, older_than_ms, clock.now_ms() if now_ms is None else now_ms,
                     fingerprint=operation.fingerprint(cfg))
    no_index = not layout.index_dir.is_dir()
    for x in quarantine_runs(layout.root) + index_backups(layout.root):
        why = _why_kept(x, plan, no_index)
        if why:
            plan.keep.append((x, why))
        else:
            plan.remove.append(x)
    return plan


def _why_kept(x: Leftover, plan: PrunePlan, no_index: bool) -> str:
    if not x.recognised:
        return f"not recognised as rmqtool's: {x.why_not}"
    if x.kind == "quarantine" and not x.complete:
        return "the recover that made it did not finish: it may hold the only copy of what it changed"
    if x.kind == "index-backup" and no_index:
        return "the store has no index/ directory: this backup may be the only index"
    if plan.older_than_ms is not None:
        age = x.age_ms(plan.now_ms)
        if age is None or age < plan.older_than_ms:
            return "newer than --older-than"
    return ""


def prune(cfg: BrokerConfig, older_than_ms: int | None = None, dry_run: bool = False,
          before: Callable[[PrunePlan], None] | None = None) -> PrunePlan:
    """Remove what plan_prune lists, under the store lock (dry_run: only plan). `before(plan)` is called with
    the plan about to be carried out, under the lock, before the first folder goes (the CLI lists it there)."""
    def make_plan() -> PrunePlan:
        return plan_prune(cfg, older_than_ms)

    def execute(plan: PrunePlan) -> None:
        if before is not None:
            before(plan)
        _execute(plan)
    return operation.run(cfg, make_plan, execute, dry_run)


def _execute(plan: PrunePlan) -> None:
    for x in plan.remove:
        if x.path.is_symlink() or not x.path.is_dir():
            continue  # replaced by something else since the plan: not ours to remove
        shutil.rmtree(x.path)
        fsync_dir(x.path.parent)
        plan.removed.append(x)
