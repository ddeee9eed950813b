"""Whole-store surveys, read-only: what an operator asks of a store and everything beside it at once, the local
store (engine.broker, engine.timer, engine.ops' read-only plans) and the tiered store it is configured with
(engine.tiered). They stand above both so that one answer can cover both; nothing here writes.

    doctor/   `rmqtool doctor`: what the broker does at its next start with each problem, and the fix
    info.py   `rmqtool info`: the store at a glance

Nothing is imported here: import the module you need.
"""
