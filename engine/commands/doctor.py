"""rmqtool doctor: what will stop a broker, or make it lose or hide messages or state, at its next start."""
from __future__ import annotations


def doctor(cfg, store_args: list[str], now=None, deep: bool = False, progress=None, tier=None):
    """engine.survey.doctor.doctor: the findings with their fixes (store_args: the options the fix commands
    repeat)."""
    from engine.survey.doctor import doctor as run_doctor

    return run_doctor(cfg, store_args, now=now, deep=deep, progress=progress, tier=tier)
