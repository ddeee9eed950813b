"""Operations on a store: recovery (scan -> trust -> plan -> apply), clean, index verification.

The public surface, imported lazily so that `import engine.ops.verify` stays light:

    plan_recovery, apply_recovery, recover, RecoveryPlan      engine.ops.recovery
    plan_clean, apply_clean, clean, CleanPlan                 engine.ops.clean
    verify_index_file, VerifyReport                           engine.ops.verify

Both store-changing operations share engine.ops.operation (lock, re-plan under the lock, dry run) and
everything recovery removes is kept by engine.ops.quarantine first.
"""
from __future__ import annotations

import importlib

_WHERE = {
    "plan_recovery": "engine.ops.recovery", "apply_recovery": "engine.ops.recovery", "recover": "engine.ops.recovery",
    "RecoveryPlan": "engine.ops.recovery",
    "plan_clean": "engine.ops.clean", "apply_clean": "engine.ops.clean", "clean": "engine.ops.clean",
    "CleanPlan": "engine.ops.clean",
    "verify_index_file": "engine.ops.verify", "VerifyReport": "engine.ops.verify",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'engine.ops' has no attribute {name!r}")
