"""Which kind of store this is: the broker modes a 5.x store may be written in, decided once from broker.conf
and the files (format §11), and what rmqtool can and cannot do on each.

A RocketMQ 5 broker writes the classic file store (commitlog/, consumequeue/, index/, config/*.json) unless its
broker.conf says otherwise:

- enableDLegerCommitLog=true: the commit log is DLedger's entry log in <root>/dledger-<dLegerSelfId>/data
  (DLedgerCommitLog, DLedgerConfig.getDefaultPath); a store that had a file commit log before keeps commitlog/
  and the broker reads it below dividedCommitlogOffset.
- storeType=defaultRocksDB: consume queues in a RocksDB database in consumequeue/ itself (RocksDBConsumeQueueStore,
  StorePathConfigHelper.getStorePathConsumeQueue); newer releases put it in consumequeue_r/. With
  rocksdbCQDoubleWriteEnable=true (CombineConsumeQueueStore) both the file queues and the database are written.
- topics, subscription groups and consumer offsets in RocksDB: v1 (storeType=defaultRocksDB) config/topics/,
  config/subscriptionGroups/, config/consumerOffsets/; v2 (configManagerVersion=v2) config/rdb/; config/metadata/
  in newer releases.
- enableControllerMode=true: the epoch file <root>/epochFileCheckpoint (+ .bak) maps epochs to commit-log offsets.
- enableLmq / enableMultiDispatch: messages with INNER_MULTI_DISPATCH are dispatched to %LMQ% queues as well.
- batchconsumequeue/ (BatchConsumeQueue topics) and compaction/ (CompactionStore) hold other queue kinds.

detect_mode(cfg) is the one place that decides; every reader asks it, and every writer passes require_writable()
(engine.broker.write.guard) with the name of what it is about to do.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.layout import ROCKSDB_CQ_DIR_NEW, is_rocksdb_dir

# --- the names a mode leaves on disk (RocketMQ's own, see the module doc) ---------------------------------------
DLEDGER_DIR_PREFIX = "dledger-"
DLEDGER_DATA_DIR = "data"
DLEDGER_INDEX_DIR = "index"
BATCH_CQ_DIR = "batchconsumequeue"
COMPACTION_DIR = "compaction"
#: CompactionStore's compacted logs and their queues, below compaction/ (beside its position-checkpoint).
COMPACTION_LOG_DIR = "compactionLog"
COMPACTION_CQ_DIR = "compactionCq"
EPOCH_FILE = "epochFileCheckpoint"
#: RocksDB config databases under config/: v1 (one database a table), v2 (one shared database), newer metadata.
ROCKSDB_CONFIG_V1_DIRS = ("topics", "subscriptionGroups", "consumerOffsets")
ROCKSDB_CONFIG_V2_DIR = "rdb"
ROCKSDB_CONFIG_METADATA_DIR = "metadata"

#: MixAll.LMQ_PREFIX: the topic of a light message queue.
LMQ_PREFIX = "%LMQ%"

STORE_TYPE_DEFAULT = "default"
STORE_TYPE_ROCKSDB = "defaultRocksDB"

# --- what rmqtool's readers can read (flipped by the package that reads it: engine/broker/dledger,
# engine/broker/consumequeue's RocksDB reader, engine/broker/config's RocksDB reader) --------------------------
DLEDGER_READABLE = True             # engine/broker/dledger (DLedgerLog)
ROCKSDB_CQ_READABLE = True          # engine/broker/consumequeue/rocksdb.py
ROCKSDB_CONFIGS_READABLE = True     # engine/broker/config/rocksdb.py: v1 and v2, not config/metadata/

# --- mode names as info/doctor print them and the guard names them ---------------------------------------------
FILE_COMMITLOG = "file"
DLEDGER = "dledger"
FILE_CQ = "file"
ROCKSDB_CQ = "rocksdb"
COMBINED_CQ = "file+rocksdb"
JSON_CONFIGS = "json"
ROCKSDB_CONFIGS_V1 = "rocksdb-v1"
ROCKSDB_CONFIGS_V2 = "rocksdb-v2"
ROCKSDB_CONFIGS_METADATA = "rocksdb-metadata"


def _has_queue_dirs(cq_dir: Path) -> bool:
    """consumequeue/ holds at least one <topic>/<queueId>/ directory (file consume queues)."""
    try:
        for t in os.scandir(cq_dir):
            if t.is_dir(follow_symlinks=False):
                for q in os.scandir(t.path):
                    if q.is_dir(follow_symlinks=False) and q.name.isdigit():
                        return True
    except OSError:
        return False
    return False


def _lmq_queue_dirs(cq_dir: Path) -> int:
    """How many %LMQ% topic directories consumequeue/ holds (MixAll.LMQ_PREFIX: only a multi-dispatching
    broker makes them)."""
    try:
        return sum(1 for t in os.scandir(cq_dir) if t.name.startswith(LMQ_PREFIX))
    except OSError:
        return 0


def _nonempty_dir(path: Path) -> bool:
    try:
        return path.is_dir() and any(os.scandir(path))
    except OSError:
        return False


@dataclass(frozen=True)
class Evidence:
    """One thing that spoke for a mode: a broker.conf key or a file."""
    feature: str
    source: str          # "broker.conf" or "files"
    detail: str

    def as_dict(self) -> dict:
        return {"feature": self.feature, "source": self.source, "detail": self.detail}


@dataclass
class StoreMode:
    """The store's mode, decided by detect_mode(); read-only after that."""
    root: Path
    commitlog: str = FILE_COMMITLOG
    consume_queue: str = FILE_CQ
    configs: str = JSON_CONFIGS
    controller: bool = False
    lmq: bool = False
    multi_dispatch: bool = False
    batch_consume_queue: bool = False
    compaction: bool = False
    #: DLedger: <root>/dledger-<selfId> and its data directory; a store switched from a file commit log keeps it.
    dledger_dir: Path | None = None
    dledger_data_dir: Path | None = None
    dledger_self_id: str | None = None
    old_file_commitlog: bool = False
    rocksdb_cq_dir: Path | None = None
    #: Which consume queues the broker serves reads from: "file" or "rocksdb" (a double-writing broker reads
    #: what combineCQPreferCQType names, the file queues by default: CombineConsumeQueueStore.currentReadStore).
    cq_reads: str = FILE_CQ
    rocksdb_config_dirs: tuple[Path, ...] = ()
    epoch_file: Path | None = None
    evidence: list[Evidence] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)

    # -- names
    @property
    def is_file_store(self) -> bool:
        """The classic file store: everything rmqtool reads and writes as the broker does."""
        return (self.commitlog == FILE_COMMITLOG and self.consume_queue == FILE_CQ and self.configs == JSON_CONFIGS
                and not (self.controller or self.lmq or self.multi_dispatch or self.batch_consume_queue
                         or self.compaction))

    def features(self) -> list[str]:
        """Every mode feature of the store beyond the classic file store, in a fixed order."""
        out = []
        if self.commitlog == DLEDGER:
            out.append("dledger-commitlog" + ("+old-file-commitlog" if self.old_file_commitlog else ""))
        if self.consume_queue == ROCKSDB_CQ:
            out.append("rocksdb-consume-queue")
        elif self.consume_queue == COMBINED_CQ:
            out.append("file+rocksdb-consume-queue")
        if self.configs != JSON_CONFIGS:
            out.append(f"{self.configs}-configs")
        if self.controller:
            out.append("controller")
        if self.lmq:
            out.append("lmq")
        if self.multi_dispatch:
            out.append("multi-dispatch")
        if self.batch_consume_queue:
            out.append("batch-consume-queue")
        if self.compaction:
            out.append("compaction")
        return out

    @property
    def name(self) -> str:
        """One line: "file store", or the features joined ("DLedger commit log, RocksDB consume queues")."""
        if self.is_file_store:
            return "file store"
        words = {
            "rocksdb-consume-queue": "RocksDB consume queues",
            "file+rocksdb-consume-queue": "file and RocksDB consume queues (double write)",
            "controller": "controller mode (epoch file)",
            "lmq": "LMQ",
            "multi-dispatch": "multi-dispatch",
            "batch-consume-queue": "batch consume queues",
            "compaction": "compaction topics",
        }
        out = []
        for f in self.features():
            if f.startswith("dledger-commitlog"):
                out.append("DLedger commit log" + (" (after a file commit log)" if self.old_file_commitlog else ""))
            elif f.endswith("-configs"):
                out.append(f"RocksDB configs ({f[len('rocksdb-'):-len('-configs')]})")
            else:
                out.append(words[f])
        return ", ".join(out)

    # -- what rmqtool does on it
    @property
    def reads_commitlog(self) -> bool:
        """rmqtool can read this store's commit log (a file one, or DLedger's once its reader is in)."""
        return self.commitlog == FILE_COMMITLOG or DLEDGER_READABLE

    @property
    def reads_consume_queues(self) -> bool:
        """rmqtool can read this store's consume queues (files, or RocksDB once its reader is in)."""
        return self.consume_queue == FILE_CQ or self.consume_queue == COMBINED_CQ or ROCKSDB_CQ_READABLE

    @property
    def reads_configs(self) -> bool:
        return self.configs == JSON_CONFIGS or (ROCKSDB_CONFIGS_READABLE and self.configs != ROCKSDB_CONFIGS_METADATA)

    def unsupported_reads(self) -> list[str]:
        """What rmqtool's readers cannot read in this mode (they say so and answer from what they can)."""
        out = []
        if not self.reads_commitlog:
            out.append("the DLedger commit log (" + _rel(self.dledger_data_dir, self.root) + ")")
        if not self.reads_consume_queues:
            out.append("RocksDB consume queues (" + _rel(self.rocksdb_cq_dir, self.root) + ")")
        if not self.reads_configs:
            out.append("RocksDB configs (" + ", ".join(_rel(p, self.root) for p in self.rocksdb_config_dirs) + ")")
        if self.batch_consume_queue:
            out.append(f"batch consume queues ({BATCH_CQ_DIR}/)")
        if self.compaction:
            out.append(f"compacted topics ({COMPACTION_DIR}/)")
        return out

    def write_refusal(self, writer: str) -> str | None:
        """Why `writer` cannot write this store exactly as the broker would, or None: one line naming the mode.

        `writer` is the command as the user typed it: put, recover, clean, repair config|consume-queue|timer,
        spark-reindex --replace, tiered dispatch, tiered reindex ... (WRITER_RULES says which mode each may write)."""
        kind = writer_kind(writer)
        why = []
        if self.conflicts:
            why.append("its mode is contradictory (" + "; ".join(self.conflicts) + ")")
        for feature, reason in self._feature_reasons(kind):
            if kind not in WRITER_RULES.get(feature, ()):
                why.append(reason)
        if not why:
            return None
        return (f"{writer} refuses this store ({self.name}): " + "; ".join(why)
                + "; nothing was changed (`rmqtool info` says what rmqtool can do on it)")

    def _feature_reasons(self, kind: str = "") -> list[tuple[str, str]]:
        out = []
        if self.commitlog == DLEDGER:
            where = "the commit log is DLedger's entry log (" + _rel(self.dledger_data_dir, self.root) + ")"
            out.append(("dledger", where + DLEDGER_WRITER_REASONS.get(kind, ", which rmqtool does not write")))
        if self.consume_queue == ROCKSDB_CQ:
            out.append(("rocksdb-cq", "its consume queues are in RocksDB (" + _rel(self.rocksdb_cq_dir, self.root)
                        + "), which rmqtool does not write"))
        elif self.consume_queue == COMBINED_CQ:
            out.append(("combined-cq", "its consume queues are written twice, as files and in RocksDB ("
                        + _rel(self.rocksdb_cq_dir, self.root) + "), and rmqtool writes only the files"))
        if self.configs != JSON_CONFIGS:
            out.append(("rocksdb-configs", f"its configs are in RocksDB ({self.configs}): the broker would merge "
                        "a config JSON over them"))
        if self.batch_consume_queue:
            out.append(("batch-cq", f"it has batch consume queues ({BATCH_CQ_DIR}/), which rmqtool does not write"))
        if self.compaction:
            out.append(("compaction", f"it has compacted topics ({COMPACTION_DIR}/), which rmqtool does not write"))
        if self.lmq or self.multi_dispatch:
            out.append(("lmq", "it dispatches LMQ queues (enableLmq/enableMultiDispatch), which this writer "
                        "does not do as the broker does"))
        if self.controller:
            out.append(("controller", f"it runs in controller mode: the epoch file ({EPOCH_FILE}) would not "
                        "follow the commit log"))
        return out

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "fileStore": self.is_file_store,
            "features": self.features(),
            "commitLog": self.commitlog,
            "consumeQueue": self.consume_queue,
            "configs": self.configs,
            "controller": self.controller,
            "lmq": self.lmq,
            "multiDispatch": self.multi_dispatch,
            "batchConsumeQueue": self.batch_consume_queue,
            "compaction": self.compaction,
            "dledgerDir": _rel(self.dledger_dir, self.root) if self.dledger_dir else None,
            "dledgerSelfId": self.dledger_self_id,
            "oldFileCommitLog": self.old_file_commitlog,
            "consumeQueueReads": self.cq_reads,
            "rocksdbConsumeQueueDir": _rel(self.rocksdb_cq_dir, self.root) if self.rocksdb_cq_dir else None,
            "rocksdbConfigDirs": [_rel(p, self.root) for p in self.rocksdb_config_dirs],
            "epochFile": _rel(self.epoch_file, self.root) if self.epoch_file else None,
            "unsupportedReads": self.unsupported_reads(),
            "writers": [{"writer": w, "allowed": self.write_refusal(w) is None} for w in WRITERS],
            "evidence": [e.as_dict() for e in self.evidence],
            "conflicts": list(self.conflicts),
        }


#: The writers (by writer_kind) that write a store with each mode feature exactly as the broker does; a feature
#: missing here refuses every writer. The index is the same IndexService in every mode, so an index rebuild from a
#: readable commit log (a file one, or the records inside DLedger's entries) is exact whatever holds the queues and
#: configs; configs are only written by repair config; clean deletes %LMQ% queue files as the broker's ConsumeQueue
#: expiry does.
WRITER_RULES: dict[str, frozenset[str]] = {
    "dledger": frozenset({"spark-reindex"}),
    "rocksdb-cq": frozenset({"spark-reindex"}),
    "combined-cq": frozenset({"spark-reindex", "repair config"}),
    "rocksdb-configs": frozenset({"put", "recover", "clean", "repair consume-queue", "repair timer",
                                  "spark-reindex", "tiered"}),
    "batch-cq": frozenset({"spark-reindex", "repair config"}),
    "compaction": frozenset({"spark-reindex", "repair config"}),
    "lmq": frozenset({"put", "recover", "clean", "spark-reindex", "repair config", "repair timer", "tiered"}),
    "controller": frozenset({"put", "recover", "clean", "spark-reindex", "repair config", "repair consume-queue",
                             "repair timer", "tiered"}),
}


#: Why each writer refuses a DLedger commit log (engine.broker.dledger reads it; nothing writes it).
DLEDGER_WRITER_REASONS = {
    "put": ": an append is a DLedger entry with its index unit, term and commit (DLedgerMmapFileStore."
           "appendAsLeader), which rmqtool does not write",
    "recover": ": its recovery is DLedgerMmapFileStore.recover's (entries and DLedger index truncated, "
               "dividedCommitlogOffset), which rmqtool does not reproduce; `rmqtool doctor` says what the broker "
               "will do",
    "clean": ": DLedger deletes its own data files and revises its index (CleanSpaceService), which rmqtool does "
             "not do",
}


#: Every writer rmqtool has, as info lists what it may do on a store.
WRITERS = ("put", "recover", "clean", "repair config", "repair consume-queue", "repair timer",
           "spark-reindex --replace", "tiered dispatch", "tiered reindex")


def writer_kind(writer: str) -> str:
    """The rule a writer's name falls under: "repair config topics.json" -> "repair config", "tiered reindex"
    -> "tiered", "spark-reindex --replace" -> "spark-reindex"."""
    words = writer.split()
    if not words:
        return ""
    if words[0] == "repair" and len(words) > 1:
        return f"repair {words[1]}"
    return words[0]


def _rel(p: Path | None, root: Path) -> str:
    if p is None:
        return "?"
    try:
        rel = Path(p).relative_to(root).as_posix()
        return rel + ("/" if Path(p).is_dir() else "")
    except ValueError:
        return str(p)


def _conf(cfg: BrokerConfig, key: str) -> str | None:
    """A broker.conf key as written (None when broker.conf does not set it)."""
    return (cfg.properties or {}).get(key)


def _conf_true(cfg: BrokerConfig, key: str) -> bool | None:
    v = _conf(cfg, key)
    return None if v is None else v.strip().lower() == "true"


def detect_mode(cfg: BrokerConfig) -> StoreMode:
    """The store's mode from broker.conf (cfg.properties, when a broker.conf was read) and the files. Where they
    disagree the files win for what is there and the disagreement is a conflict; a mode only broker.conf can say
    (LMQ, controller) is taken from it. Decided once per settled configuration (BrokerConfig.cached): every
    reader and writer guard of one command shares the answer."""
    cached = getattr(cfg, "cached", None)
    if cached is None:  # a configuration of another kind: decided each time
        return _decide_mode(cfg)
    return cached("mode", lambda: _decide_mode(cfg))


def _decide_mode(cfg: BrokerConfig) -> StoreMode:
    root = Path(cfg.root)
    m = StoreMode(root=root)
    _detect_dledger(cfg, m)
    _detect_rocksdb_cq(cfg, m)
    _detect_rocksdb_configs(cfg, m)
    _detect_flags(cfg, m)
    return m


def _detect_dledger(cfg: BrokerConfig, m: StoreMode) -> None:
    root = m.root
    conf_on = _conf_true(cfg, "enableDLegerCommitLog")
    self_id = _conf(cfg, "dLegerSelfId")
    try:
        found = sorted(p for p in root.iterdir() if p.name.startswith(DLEDGER_DIR_PREFIX) and p.is_dir()
                       and not p.is_symlink())
    except OSError:
        found = []
    if self_id:
        d = root / f"{DLEDGER_DIR_PREFIX}{self_id}"
        others = [p for p in found if p != d]
        if others and conf_on:
            m.conflicts.append(f"broker.conf names dLegerSelfId={self_id} but the store also holds "
                               + ", ".join(p.name for p in others))
    else:
        d = found[0] if len(found) == 1 else None
        if len(found) > 1:
            m.conflicts.append("the store holds several DLedger directories (" + ", ".join(p.name for p in found)
                               + ") and no broker.conf names dLegerSelfId")
            d = found[0]
    data = None
    if d is not None:
        custom = _conf(cfg, "storePathDLedgerCommitLog")
        data = Path(custom) if custom else d / DLEDGER_DATA_DIR
    has_files = data is not None and _nonempty_dir(data)
    if conf_on or has_files:
        m.commitlog = DLEDGER
        m.dledger_dir = d if d is not None else (root / f"{DLEDGER_DIR_PREFIX}{self_id}" if self_id else None)
        m.dledger_data_dir = data
        m.dledger_self_id = self_id or (d.name[len(DLEDGER_DIR_PREFIX):] if d is not None else None)
        m.old_file_commitlog = any(_nonempty_dir(p) for p in cfg.commitlog_dirs)
        if conf_on:
            m.evidence.append(Evidence("dledger", "broker.conf", "enableDLegerCommitLog=true"))
        if has_files:
            m.evidence.append(Evidence("dledger", "files", _rel(data, root) + " holds DLedger entry files"))
        if conf_on is False and has_files:
            m.conflicts.append(f"broker.conf sets enableDLegerCommitLog=false but {_rel(data, root)} holds "
                               "DLedger entries")


def _detect_rocksdb_cq(cfg: BrokerConfig, m: StoreMode) -> None:
    root = m.root
    store_type = _conf(cfg, "storeType")
    double = _conf_true(cfg, "rocksdbCQDoubleWriteEnable")
    conf_rocks = store_type is not None and store_type.strip().lower() == STORE_TYPE_ROCKSDB.lower()
    cq = root / "consumequeue"
    db = None
    for cand in (root / ROCKSDB_CQ_DIR_NEW, cq):
        if is_rocksdb_dir(cand):
            db = cand
            break
    file_queues = _has_queue_dirs(cq)
    if db is None and not conf_rocks and not double:
        return
    m.rocksdb_cq_dir = db if db is not None else (cq if conf_rocks or double else None)
    if db is not None:
        m.evidence.append(Evidence("rocksdb-consume-queue", "files", _rel(db, root) + " holds a RocksDB database"))
    if conf_rocks:
        m.evidence.append(Evidence("rocksdb-consume-queue", "broker.conf", f"storeType={store_type}"))
    if double:
        m.evidence.append(Evidence("rocksdb-consume-queue", "broker.conf", "rocksdbCQDoubleWriteEnable=true"))
    if double or (db is not None and file_queues):
        m.consume_queue = COMBINED_CQ
        prefer = (_conf(cfg, "combineCQPreferCQType") or "").strip().lower()
        m.cq_reads = ROCKSDB_CQ if prefer == STORE_TYPE_ROCKSDB.lower() else FILE_CQ
    else:
        m.consume_queue = ROCKSDB_CQ
        m.cq_reads = ROCKSDB_CQ
    if db is not None and store_type is not None and not conf_rocks and not double:
        m.conflicts.append(f"broker.conf sets storeType={store_type} but {_rel(db, root)} holds a RocksDB "
                           "consume-queue database")


def _detect_rocksdb_configs(cfg: BrokerConfig, m: StoreMode) -> None:
    root = m.root
    cdir = root / "config"
    found: list[Path] = []
    kind = None
    v2 = cdir / ROCKSDB_CONFIG_V2_DIR
    meta = cdir / ROCKSDB_CONFIG_METADATA_DIR
    v1 = [cdir / n for n in ROCKSDB_CONFIG_V1_DIRS if is_rocksdb_dir(cdir / n)]
    if is_rocksdb_dir(v2):
        kind, found = ROCKSDB_CONFIGS_V2, [v2]
    elif is_rocksdb_dir(meta):
        kind, found = ROCKSDB_CONFIGS_METADATA, [meta]
    elif v1:
        kind, found = ROCKSDB_CONFIGS_V1, v1
    conf_v2 = (_conf(cfg, "configManagerVersion") or "").strip().lower() == "v2"
    conf_rocks = (_conf(cfg, "storeType") or "").strip().lower() == STORE_TYPE_ROCKSDB.lower()
    if kind is None and conf_v2:
        kind, found = ROCKSDB_CONFIGS_V2, [v2]
    elif kind is None and conf_rocks:
        kind, found = ROCKSDB_CONFIGS_V1, [cdir / n for n in ROCKSDB_CONFIG_V1_DIRS]
    if kind is None:
        return
    m.configs = kind
    m.rocksdb_config_dirs = tuple(found)
    if any(is_rocksdb_dir(p) for p in found):
        m.evidence.append(Evidence("rocksdb-configs", "files",
                                   ", ".join(_rel(p, root) for p in found if is_rocksdb_dir(p))
                                   + " hold RocksDB databases"))
    if conf_v2:
        m.evidence.append(Evidence("rocksdb-configs", "broker.conf", "configManagerVersion=v2"))
    elif conf_rocks:
        m.evidence.append(Evidence("rocksdb-configs", "broker.conf", "storeType=defaultRocksDB"))


def _detect_flags(cfg: BrokerConfig, m: StoreMode) -> None:
    root = m.root
    epoch = Path(_conf(cfg, "storePathEpochFile") or root / EPOCH_FILE)
    conf_ctrl = _conf_true(cfg, "enableControllerMode")
    if conf_ctrl or epoch.exists() or epoch.with_name(epoch.name + ".bak").exists():
        m.controller = True
        m.epoch_file = epoch
        if conf_ctrl:
            m.evidence.append(Evidence("controller", "broker.conf", "enableControllerMode=true"))
        if epoch.exists():
            m.evidence.append(Evidence("controller", "files", _rel(epoch, root) + " (the epoch file)"))
        if conf_ctrl is False and epoch.exists():
            m.conflicts.append(f"broker.conf sets enableControllerMode=false but {epoch.name} exists")
    for key, attr in (("enableLmq", "lmq"), ("enableMultiDispatch", "multi_dispatch")):
        if _conf_true(cfg, key):
            setattr(m, attr, True)
            m.evidence.append(Evidence(attr.replace("_", "-"), "broker.conf", f"{key}=true"))
    lmq_dirs = _lmq_queue_dirs(root / "consumequeue")
    if not m.lmq and lmq_dirs:
        m.lmq = True
        m.evidence.append(Evidence("lmq", "files", f"consumequeue/ holds {lmq_dirs} {LMQ_PREFIX} queue(s)"))
    if lmq_dirs and not m.multi_dispatch and _conf(cfg, "enableMultiDispatch") is None:
        # only a multi-dispatching broker writes %LMQ% queue units (ConsumeQueue.multiDispatchLmqQueue)
        m.multi_dispatch = True
        m.evidence.append(Evidence("multi-dispatch", "files", f"consumequeue/ holds {LMQ_PREFIX} queue(s)"))
    bcq = root / BATCH_CQ_DIR
    if _nonempty_dir(bcq):
        m.batch_consume_queue = True
        m.evidence.append(Evidence("batch-consume-queue", "files", f"{BATCH_CQ_DIR}/ holds queues"))
    # every 5.x broker makes compaction/ and its position-checkpoint; compacted topics have logs under compactionLog/
    for sub in (COMPACTION_LOG_DIR, COMPACTION_CQ_DIR):
        if _nonempty_dir(root / COMPACTION_DIR / sub):
            m.compaction = True
            m.evidence.append(Evidence("compaction", "files", f"{COMPACTION_DIR}/{sub}/ holds compacted topics"))
            break
