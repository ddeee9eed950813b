"""`rmqtool doctor`: every check the broker makes when it loads a store, plus rmqtool's own, each finding
located, with what the broker does at its next start and the rmqtool command that fixes it (docs/doctor.md).

    report.py       DoctorReport (engine.findings.Finding with fix), Fixes (the command lines)
    dledgerchecks.py  a DLedger store's entry log, its index and the queues over it (instead of recovery's plan)
    storechecks.py  the lock, abort marker and checkpoint, commit log, consume queues, index (recovery's plan,
                    read-only)
    modechecks.py   the store's mode (engine.broker.mode): conflicts, and what rmqtool cannot read in it
    configs.py      config/*.json and their .bak as ConfigManager.load reads them
    timerchecks.py  the timer store (engine.timer.verify_timer)
    tieredchecks.py the tiered store broker.conf configures (engine.tiered: the metadata, `tiered verify`)

Reads only: every file is opened read-only, nothing is written, a broker holding the store lock is reported and
left alone. Work is bounded as the broker's own start-up is: recovery's plan reads from the checkpoint's window
(`deep`: the whole commit log), one unit per consume queue, the config files, the timer store's live chains; the
tiered store, when configured, is verified whole (`tiered verify`: every segment file of the broker is read once).

Public surface: doctor, DoctorReport, Finding.
"""
from __future__ import annotations

from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.consumequeue.geometry import settle_cq_file_size
from engine.broker.layout import StoreLayout
from engine.broker.mode import DLEDGER
from engine.survey.doctor.configs import check_configs
from engine.survey.doctor.dledgerchecks import check_dledger, check_dledger_timer
from engine.survey.doctor.modechecks import check_mode, withdraw_refused_fixes
from engine.survey.doctor.rocksdbchecks import check_rocksdb_queues
from engine.survey.doctor.report import ERROR, INFO, WARNING, DoctorReport, Finding, Fixes
from engine.survey.doctor.storechecks import (check_commitlog_files, check_commitlog_present,
                                           check_consume_queue_files, check_consume_queue_order,
                                           check_consume_queue_tails, check_index_dir,
                                           check_lock, check_recovery)
from engine.survey.doctor.tieredchecks import check_tiered
from engine.survey.doctor.timerchecks import check_timer
from engine.progress import Progress
from engine.tiered.flat.store import TierSource

__all__ = ["ERROR", "INFO", "WARNING", "DoctorReport", "Finding", "doctor"]


def doctor(cfg: BrokerConfig, store_args: list[str], now: int | None = None, deep: bool = False,
           progress: Progress | None = None, tier: TierSource | None = None) -> DoctorReport:
    """Check the store; `store_args` are the arguments that name it on a command line (`-s DIR` or `-c FILE`,
    with any geometry option), repeated in every fix. `now` (epoch ms): when the broker would start (the timer
    store's 7-day rule). `tier`: where the tiered store is (its tieredStoreFilePath from -T or broker.conf); it is
    checked when one is given. NotAStoreError when the directory is no store."""
    layout = StoreLayout.of(cfg)
    layout.require_store(allow_markers=True)
    fix = Fixes(store_args)
    rep = DoctorReport(str(cfg.root))
    check_lock(layout, rep)
    rep.checked.append("lock")
    mode = check_mode(cfg, rep)
    plan = None
    if mode.commitlog == DLEDGER and mode.reads_commitlog and mode.reads_consume_queues:
        # DLedgerCommitLog recovers its own way (DLedgerMmapFileStore.recover): the entry log is checked whole
        check_dledger(cfg, mode, layout, rep, deep)
        rep.checked += ["DLedger commit log", "DLedger index", "consume queues"]
        if mode.cq_reads == "rocksdb":
            rep.notes.append("the RocksDB consume queues of a DLedger store are not checked against its log")
        else:
            check_consume_queue_files(cfg, layout, fix, rep)
            check_consume_queue_tails(cfg, layout, fix, rep)
    elif mode.reads_commitlog and mode.reads_consume_queues:
        plan = _check_file_log(cfg, layout, fix, rep, deep, progress, mode)
    if mode.reads_configs:
        check_configs(layout, fix, rep, json_tables=mode.configs == "json")
        rep.checked.append("config files")
    pending = plan.timer.pending if plan is not None and plan.timer is not None else None
    if mode.commitlog == DLEDGER and mode.reads_commitlog:
        check_dledger_timer(cfg, layout, rep)
    elif plan is not None and check_timer(cfg, fix, rep, now, deep, pending):
        rep.checked.append("timer store")
    if check_tiered(layout, tier, fix, rep):
        rep.checked.append("tiered store")
    withdraw_refused_fixes(mode, rep)
    rep.sort()
    return rep


def _check_file_log(cfg: BrokerConfig, layout: StoreLayout, fix: Fixes, rep: DoctorReport, deep: bool,
                    progress: Progress | None, mode):
    """A file commit log: its files, recovery's plan (None when the log is missing), the index directory, the
    consume queues (the files' checks, or the RocksDB database's when the broker serves its queues from it)."""
    rocks_cq = mode.cq_reads == "rocksdb"  # the file queues' checks do not apply (format §11.4)
    check_commitlog_files(cfg, layout, rep)
    plan = None
    if check_commitlog_present(cfg, layout, rep):
        plan = check_recovery(cfg, layout, fix, rep, deep, progress, file_queues=not rocks_cq)
        cfg = settle_cq_file_size(cfg)  # the queue-file size recovery's plan was made with, for the queues' checks
        rep.checked += ["abort marker and checkpoint", "commit log", "consume queues", "index"]
    check_index_dir(layout, rep, plan.stale_temp_files if plan is not None else [])
    if rocks_cq:
        if plan is not None:
            check_rocksdb_queues(mode, plan.end_offset, rep)
    else:
        check_consume_queue_files(cfg, layout, fix, rep)
        check_consume_queue_tails(cfg, layout, fix, rep)
        if plan is not None:
            check_consume_queue_order(cfg, layout, fix, rep)
    if plan is None:  # the commit log is missing: nothing that points into it can be judged, recover refuses
        rep.notes.append("the commit log is missing: the timer store and what recover would do were not checked")
        for f in rep.findings:
            if f.fix is not None and f.fix.split()[1:2] == ["recover"]:
                f.fix = None
    return plan
