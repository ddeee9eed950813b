"""What changes a store under the lock: recovery (scan -> trust -> plan -> apply), repair, clean; footprint/ for
what rmqtool itself leaves in a store (quarantine, leftovers, prune); read (get, which names the timer topic and so
cannot stand under engine/broker yet). The read-only verbs of one file kind live with it in engine/broker.
Nothing is imported here: import the module you need.

    plan_recovery, apply_recovery, recover, RecoveryPlan      engine.ops.recovery
    plan_clean, apply_clean, clean, CleanPlan                 engine.ops.clean
    verify_index_file, VerifyReport                           engine.broker.index.verify

Both store-changing operations share engine.ops.operation (lock, re-plan under the lock, dry run) and
everything recovery removes is kept by engine.ops.footprint.quarantine first.
"""
