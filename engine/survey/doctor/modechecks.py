"""Doctor's view of the store's mode (engine.broker.mode): a mode broker.conf and the files disagree on, and every
part of the store rmqtool cannot read in this mode, are findings, so doctor never calls healthy what it did not
check."""
from __future__ import annotations

from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.mode import StoreMode, detect_mode
from engine.survey.doctor.report import ERROR, INFO, DoctorReport, Finding

#: The file a mode finding is filed under: the store root (the mode is the whole store's).
STORE_ROOT = "."


def check_mode(cfg: BrokerConfig, rep: DoctorReport) -> StoreMode:
    """Record the mode in the report and its findings; returns it so the other checks skip what cannot be read."""
    mode = detect_mode(cfg)
    rep.mode = mode.as_dict()
    rep.checked.append("store mode")
    for c in mode.conflicts:
        rep.findings.append(Finding(
            "mode-conflict", ERROR, STORE_ROOT, None, f"the store's mode is contradictory: {c}",
            "start in the mode its broker.conf says, and not find the data the other mode wrote", None))
    for what in mode.unsupported_reads():
        rep.findings.append(Finding(
            "mode-not-checked", ERROR, STORE_ROOT, None,
            f"rmqtool cannot read {what} in this mode ({mode.name}), so doctor did not check it",
            "read it as usual (doctor cannot tell whether that will succeed)", None))
    if not mode.is_file_store:
        refused = [w["writer"] for w in mode.as_dict()["writers"] if not w["allowed"]]
        rep.findings.append(Finding(
            "store-mode", INFO, STORE_ROOT, None,
            f"the store runs in {mode.name}" + (f"; rmqtool refuses to write it with: {', '.join(refused)}"
                                                 if refused else ""),
            "run in that mode", None))
    return mode


def withdraw_refused_fixes(mode: StoreMode, rep: DoctorReport) -> None:
    """A fix whose writer the write guard refuses in this mode is no fix: doctor never prints a command that would
    only be refused. The finding keeps its problem, says why there is no command, and its fix becomes None."""
    for f in rep.findings:
        if not f.fix:
            continue
        words = f.fix.split()[1:3]  # "rmqtool repair config ..." -> ["repair", "config"]
        writer = " ".join(words) if words[:1] == ["repair"] else " ".join(words[:1])
        if mode.write_refusal(writer):
            f.problem += f"; rmqtool cannot fix it in this mode ({mode.name}): {writer} refuses such a store"
            f.fix = None
