"""rmqtool clean: the broker's file retention (commit log, consume queues, index, timer log), under the lock."""
from __future__ import annotations


def clean(cfg, reserved_hours=None, force_now: bool = False, dry_run: bool = False, progress=None,
          keep_timer: bool = False):
    """engine.ops.clean.clean: the plan, carried out unless dry_run."""
    from engine.ops.clean import clean as run_clean

    return run_clean(cfg, reserved_hours, force_now, dry_run, progress=progress, keep_timer=keep_timer)
