"""The doctor's view of the timer store: engine.timer.verify_timer's findings (timer §10), each given the command
that fixes it. `recover` makes the timer store agree with the commit log; `repair timer` rebuilds the wheel, the
chains, the checkpoint and the metrics from the timer log (engine.timer.rebuild)."""
from __future__ import annotations

from engine.broker.config.brokerconf import BrokerConfig
from engine.survey.doctor.report import DoctorReport, Finding, Fixes
from engine.timer import verify_timer
from engine.timer.layout import TimerLayout
from engine.timer.pending import PendingScan

#: verify_timer kinds that `rmqtool recover` fixes (timer §10: the cut, slots, tombstones, timercheck).
BY_RECOVER = {"slot-past-log-end", "timerlog-torn-tail", "timerlog-file-after-end", "timerlog-last-unit-unreadable",
              "timerlog-end-unreadable", "unit-past-commit-log", "unit-not-a-record", "unit-size-mismatch",
              "unit-not-timer-message", "timercheck-queue-offset", "timercheck-flush-past-end"}
#: verify_timer kinds that `rmqtool repair timer` fixes (a rebuild from the timer log).
BY_REPAIR_TIMER = {"wheel-length", "wheel-missing", "wheel-empty-file", "chain-cycle", "chain-broken",
                   "chain-not-a-unit", "chain-past-log-end", "chain-forward", "timerlog-file-size",
                   "timerlog-misnamed", "timercheck-missing", "timercheck-torn", "timermetrics-unloadable",
                   "timermetrics-damaged", "slot-misplaced"}
#: Losses already made: nothing brings the messages back (record-expired, chain-into-deleted-file, ...).


def fix_for(kind: str, fix: Fixes) -> str | None:
    if kind in BY_RECOVER:
        return fix("recover")
    if kind in BY_REPAIR_TIMER:
        return fix("repair", "timer")
    return None


def check_timer(cfg: BrokerConfig, fix: Fixes, rep: DoctorReport, now: int | None, deep: bool,
                pending: PendingScan | None = None) -> bool:
    """False when the store has no timer store (or the broker does not load it). `pending`: the recovery plan's
    pending scan (no CRCs), reused unless `deep` checks the bodies (the live chains are walked once)."""
    tl = TimerLayout.of(cfg)
    if not tl.exists():
        return False
    if not cfg.timerWheelEnable:
        rep.notes.append("timerWheelEnable=false: the broker does not load the timer store; it was not checked")
        return False
    tr = verify_timer(cfg, now=now, check_crc=deep, result=None if deep else pending)
    for f in tr.findings:
        rep.findings.append(Finding(f.kind, f.severity, f.file, f.offset, f.problem, f.broker_will,
                                    fix_for(f.kind, fix)))
    return True
