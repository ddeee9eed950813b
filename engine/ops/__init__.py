"""Operations on a store: recovery (scan -> trust -> plan -> apply), clean, index verification, and the read-side
views of consume queues, consumers and time ranges. Nothing is imported here: import the module you need.

    plan_recovery, apply_recovery, recover, RecoveryPlan      engine.ops.recovery
    plan_clean, apply_clean, clean, CleanPlan                 engine.ops.clean
    verify_index_file, VerifyReport                           engine.broker.index.verify

Both store-changing operations share engine.ops.operation (lock, re-plan under the lock, dry run) and
everything recovery removes is kept by engine.ops.footprint.quarantine first.
"""
