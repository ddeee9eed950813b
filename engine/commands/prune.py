"""rmqtool prune: the folders rmqtool left in a store (quarantine runs, index backups), removed under the lock."""
from __future__ import annotations


def prune(cfg, older_than_ms=None, dry_run: bool = False, before=None):
    """engine.ops.footprint.prune.prune: the plan (what goes, what stays and why), carried out unless dry_run; `before` is
    called with the plan before the first folder is removed."""
    from engine.ops.footprint.prune import prune as run_prune

    return run_prune(cfg, older_than_ms, dry_run, before=before)
