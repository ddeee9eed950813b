"""The doctor's checks of a store whose broker serves its consume queues from RocksDB (format §11.4): the database
opens read-only, its offset table's entries are in the broker's layout, and the commit-log offset it says it has
dispatched (CHECKPOINT_TOPIC) and the queues' last units against the commit log's end (RocksDBConsumeQueueStore:
the broker dispatches what is missing at start, and truncateDirty cuts the max entries past the end)."""
from __future__ import annotations

from engine.broker.mode import StoreMode
from engine.errors import StoreError
from engine.survey.doctor.report import ERROR, INFO, WARNING, DoctorReport, Finding

#: Queues named in one finding before "and N more".
LISTED = 5


def check_rocksdb_queues(mode: StoreMode, end_offset: int, rep: DoctorReport) -> None:
    from engine.broker.consumequeue.rocksdb import RocksDBConsumeQueueStore
    rel = "consumequeue"
    if mode.rocksdb_cq_dir is None:
        return
    try:
        rel = mode.rocksdb_cq_dir.relative_to(mode.root).as_posix()
    except ValueError:
        rel = str(mode.rocksdb_cq_dir)
    try:
        db = RocksDBConsumeQueueStore(mode.rocksdb_cq_dir, rel + "/")
    except (StoreError, OSError) as e:
        rep.findings.append(Finding("rocksdb-cq-unreadable", ERROR, rel, None,
                                    f"the RocksDB consume-queue database cannot be opened: {e}",
                                    "fails to load its consume queues (RocksDBConsumeQueueStore.load) and does "
                                    "not start", None))
        return
    with db:
        listing = db.listing()
        for p in listing.problems[:LISTED]:
            rep.findings.append(Finding("rocksdb-cq-entry", WARNING, rel, None, f"{p.path}: {p.reason}",
                                        "skips the entry", None))
        past = sorted((t, q) for (t, q), e in db.offset_table.items()
                      if e.max is not None and e.max.phy_offset >= end_offset)
        if past:
            some = ", ".join(f"{t}/{q}" for t, q in past[:LISTED]) + (" ..." if len(past) > LISTED else "")
            rep.findings.append(Finding(
                "rocksdb-cq-past-log", WARNING, rel, end_offset,
                f"{len(past)} queue(s) end with a unit at or past the commit log's end {end_offset} ({some})",
                "moves their max offsets back below the end at start (RocksDBConsumeQueueOffsetTable."
                "truncateDirty): consumers whose offsets lie past it are moved back", None))
        cp = db.checkpoint
        if cp is not None and cp < end_offset:
            rep.findings.append(Finding(
                "cq-behind-log", INFO, rel, cp,
                f"the RocksDB consume queues are dispatched up to commit-log offset {cp}, the commit log ends at "
                f"{end_offset}", "dispatches the rest from the commit log (ReputMessageService) before consumers "
                "see it", None))
