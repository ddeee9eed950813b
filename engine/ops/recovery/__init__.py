"""Crash recovery (format §6, §7, §4.4, §4.5, format §5.8): the broker's recovery, made safe for the data and the index.

    scan.py     read the commit log (resynchronising past damage) and what points into it
    trust.py    which checkpoint values, consume queues and index files can be trusted
    plan.py     the RecoveryPlan (and how damaged records are treated); planner.py builds it
    dispatch.py consume-queue units and index keys re-dispatched as the broker's dispatchers would
    apply.py    carrying a plan out crash-safely, keeping what it removes in the quarantine
    placeholder.py  the placeholder record written over a damaged range, what a consumer receives, listing them

Public surface: plan_recovery, apply_recovery, recover, RecoveryPlan, list_placeholders (`rmqtool info`).
"""
from __future__ import annotations

from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.config.lock import StoreLock
from engine.ops import operation
from engine.ops.recovery.placeholder import Placeholder, list_placeholders
from engine.ops.recovery.plan import RecoveryPlan
from engine.ops.recovery.planner import plan_recovery
from engine.progress import Progress

__all__ = ["Placeholder", "RecoveryPlan", "apply_recovery", "list_placeholders", "plan_recovery", "recover"]


def apply_recovery(cfg: BrokerConfig, plan: RecoveryPlan, lock: StoreLock | None = None,
                   progress: Progress | None = None) -> RecoveryPlan:
    """Carry out a plan under the store lock (re-planned first if the store changed since it was made).

    Returns the plan that was applied. With `lock` given the caller already holds it.
    """
    from engine.ops.recovery.apply import execute

    def replan() -> RecoveryPlan:
        return plan_recovery(cfg, plan.check_crc, plan.index_safe, plan.full_scan, progress, plan.force)

    if plan.broker_window:  # a plan made for judging (doctor's) took index items on trust: never applied as it is
        plan = replan()
    return operation.apply_under_lock(cfg, plan, replan, lambda p: execute(cfg, p, progress), lock)


def recover(cfg: BrokerConfig, check_crc: bool = True, index_safe: bool = False, dry_run: bool = False,
            full_scan: bool = False, force: bool = False, progress: Progress | None = None) -> RecoveryPlan:
    """The `rmqtool recover` entry point: lock (unless dry run), plan, apply."""
    from engine.ops.recovery.apply import execute

    return operation.run(cfg, lambda: plan_recovery(cfg, check_crc, index_safe, full_scan, progress, force),
                         lambda p: execute(cfg, p, progress), dry_run, writer="recover")
