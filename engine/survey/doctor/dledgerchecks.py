"""Doctor on a DLedger store (engine.broker.dledger): the entry log walked whole (headers, index sequence and
terms, records, DLedger's index units) and the consume queues against the log's end, in place of the file commit
log's recovery plan, which does not apply (DLedgerCommitLog recovers through DLedgerMmapFileStore.recover)."""
from __future__ import annotations

from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.dledger.index import check_log
from engine.broker.layout import StoreLayout
from engine.broker.mode import StoreMode
from engine.broker.store import MessageStore
from engine.errors import StoreError
from engine.survey.doctor.report import ERROR, WARNING, DoctorReport, Finding
from engine.timer.layout import TimerLayout


def check_dledger(cfg: BrokerConfig, mode: StoreMode, layout: StoreLayout, rep: DoctorReport,
                  deep: bool = False) -> None:
    """Findings for the DLedger log and the queues over it; nothing is written. Without `deep` the entries are
    checked from the file DLedger's recovery starts at (what the broker reads at start-up); `deep`: all of them."""

    def rel(p) -> str:
        try:
            return str(p.relative_to(layout.root))
        except ValueError:
            return str(p)

    try:
        with MessageStore(cfg) as st:
            cl = st.commitlog
            for p in cl.problems:
                rep.findings.append(Finding("dledger-file", ERROR, rel(_as_path(p.path)), None, p.detail,
                                            "refuses to load its data files (MmapFileList.load/checkSelf) and "
                                            "does not start", None))
            dl = check_log(cl, mode.dledger_dir, rel, check_crc=cfg.checkCRCOnRecover, whole=deep)
            rep.findings += dl.findings
            rep.read.update(commitLogFrom=dl.min_offset, commitLogTo=dl.end_offset,
                            commitLogBytes=max(0, dl.end_offset - dl.min_offset), records=dl.records,
                            brokerWindow=not deep, dledger=dl.as_dict())
            queues = layout.list_queues().queues
            for topic, qid in queues:
                try:
                    b = st.broker_view.bounds(st.consume_queue(topic, qid), cl.min_offset)
                except (StoreError, OSError) as e:
                    rep.findings.append(Finding("cq-unreadable", ERROR, f"consumequeue/{topic}/{qid}", None, str(e),
                                                "cannot load the queue", None))
                    continue
                if b.cut:
                    rep.findings.append(Finding(
                        "cq-after-log-end", WARNING, f"consumequeue/{topic}/{qid}", b.max_offset * 20,
                        f"{b.cut} consume-queue unit(s) of {topic}/{qid} point at or after the end of the DLedger "
                        f"log ({dl.end_offset})", "truncates them at start-up (truncateDirtyLogicFiles)", None))
            rep.read["consumeQueues"] = len(queues)
    except StoreError as e:
        rep.findings.append(Finding("dledger-unreadable", ERROR, rel(mode.dledger_data_dir) if mode.dledger_data_dir
                                    else "dledger", None, f"the DLedger commit log cannot be read: {e}",
                                    "does not start", None))


def _as_path(p):
    from pathlib import Path
    return Path(p)


def check_dledger_timer(cfg: BrokerConfig, layout: StoreLayout, rep: DoctorReport) -> None:
    """The timer store's checks read the file commit log (engine.timer): on a DLedger store a timer store the broker
    loads is not checked, and doctor says so rather than calling it healthy."""
    if not TimerLayout.of(cfg).exists():
        return
    if not cfg.timerWheelEnable:
        rep.notes.append("timerWheelEnable=false: the broker does not load the timer store; it was not checked")
        return
    rep.findings.append(Finding("mode-not-checked", ERROR, "timerwheel", None,
                                "rmqtool does not check a timer store over a DLedger commit log, so doctor did not "
                                "check it", "read it as usual (doctor cannot tell whether that will succeed)", None))
