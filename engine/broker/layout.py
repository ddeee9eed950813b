"""Every path and file name of a broker store (format §1), and the rules names from input must pass
before they become paths.

Nothing else in the engine spells "commitlog", "abort" or a segment-name pattern: it asks a StoreLayout.
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

from engine.errors import InvalidArgumentError, ModeRefusedError, NotAStoreError
from engine.java.lang import INT_MAX

COMMITLOG_DIR = "commitlog"
CONSUMEQUEUE_DIR = "consumequeue"
INDEX_DIR = "index"
CHECKPOINT_FILE = "checkpoint"
ABORT_FILE = "abort"
LOCK_FILE = "lock"
CONFIG_DIR = "config"
#: The timer store's wheel file and log directory (engine/timer/layout.py builds on these; timer §1).
TIMER_WHEEL_FILE = "timerwheel"
TIMER_LOG_DIR = "timerlog"
#: Local working directory of the tiered index (format §9.1), relative to storePathRootDir.
TIERED_INDEX_DIR = "tiered_index_file"
#: DefaultMetadataStore's file, relative to storePathRootDir.
TIERED_METADATA_FILE = "tieredStoreMetadata.json"

#: RocksDB consume queues in newer releases (RocksDBConsumeQueueStore; older ones use consumequeue/ itself).
ROCKSDB_CQ_DIR_NEW = "consumequeue_r"

#: Commit-log and consume-queue segments: 20-digit start offsets (format §1, §3.3).
SEGMENT_NAME = re.compile(r"^\d{20}$")
#: Index files: a yyyyMMddHHmmssSSS creation time in local time (format §1, pitfall 27); any digits are read.
INDEX_NAME = re.compile(r"^\d+$")
#: The queue directories the broker loads are decimal integers (format §1 notes).
QUEUE_DIR_NAME = re.compile(r"^\d+$")

# ------------------------------------------------------------------------------------------- names


TOPIC_MAX_LENGTH = 127
RETRY_OR_DLQ_TOPIC_MAX_LENGTH = 255
#: MixAll.RETRY_GROUP_TOPIC_PREFIX and DLQ_GROUP_TOPIC_PREFIX: topics named after a consumer group.
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
#: KeyBuilder's pop retry topics: v1 %RETRY%<group>_<topic>, v2 %RETRY%<group>+<topic> (enableRetryTopicV2).
POP_RETRY_SEPARATOR_V1, POP_RETRY_SEPARATOR_V2 = "_", "+"
_NAME_CHARS = r"[%|a-zA-Z0-9_-]+"
_TOPIC_CHARS = re.compile(rf"^{_NAME_CHARS}$")
#: A v2 pop retry topic: the broker makes it itself, '+' and all, so a store may hold it.
_POP_RETRY_V2 = re.compile(rf"^{re.escape(RETRY_GROUP_TOPIC_PREFIX)}{_NAME_CHARS}"
                           rf"{re.escape(POP_RETRY_SEPARATOR_V2)}{_NAME_CHARS}$")


def _topic_chars_ok(topic: str) -> bool:
    return bool(_TOPIC_CHARS.match(topic) or _POP_RETRY_V2.match(topic))


def topic_problem(topic) -> str | None:
    """Why `topic` is not a topic a broker accepts (TopicValidator.validateTopic), or None.

    System topics (SCHEDULE_TOPIC_XXXX, RMQ_SYS_*, rmq_sys_*, %RETRY%/%DLQ% groups) pass: the broker writes them.
    """
    if not isinstance(topic, str) or not topic.strip():
        return "the topic is blank"
    if not _topic_chars_ok(topic):
        bad = sorted({c for c in topic if not _TOPIC_CHARS.match(c)})
        shown = ", ".join(repr(c) for c in bad[:5])
        return f"topic {topic!r} contains {shown}; a topic may hold only letters, digits and %|_-"
    limit = (RETRY_OR_DLQ_TOPIC_MAX_LENGTH
             if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)) else TOPIC_MAX_LENGTH)
    if len(topic) > limit:
        return f"topic {topic[:40]!r}... is {len(topic)} characters; the limit is {limit}"
    return None


# A name a store already holds (a record's topic, a consume-queue directory) may be longer than a client may send:
# RocketMQ 5 writes a topic over 127 characters in the v2 record layout (format §2.2). It still names one directory,
# so it must be path-safe: TopicValidator's characters, and at most 255 bytes (a file name's limit).
STORED_TOPIC_MAX_LENGTH = 255


def stored_topic_problem(topic) -> str | None:
    """Why a topic found in a store cannot name its consume-queue directory, or None (topic_problem's characters,
    the file system's length limit instead of the client's)."""
    if isinstance(topic, str) and topic.strip() and _topic_chars_ok(topic):
        if len(topic) > STORED_TOPIC_MAX_LENGTH:
            return (f"topic {topic[:40]!r}... is {len(topic)} characters; a directory name holds "
                    f"{STORED_TOPIC_MAX_LENGTH}")
        return None
    return topic_problem(topic)


def validate_topic(topic) -> str:
    why = topic_problem(topic)
    if why:
        raise InvalidArgumentError(why)
    return topic


def validate_queue_id(queue_id) -> int:
    """A queue id is a Java int >= 0 (it names a directory and fills an int field)."""
    if isinstance(queue_id, bool) or not isinstance(queue_id, int):
        raise InvalidArgumentError(f"queue id {queue_id!r} is not an integer")
    if not 0 <= queue_id <= INT_MAX:
        raise InvalidArgumentError(f"queue id {queue_id} is out of range: it must be in 0..{INT_MAX}")
    return queue_id


def segment_name(start: int) -> str:
    """UtilAll.offset2FileName: the 20-digit zero-padded start offset."""
    return f"{start:020d}"


def index_file_name(ts_ms: int) -> str:
    """yyyyMMddHHmmssSSS in the local time zone, as the broker names index files."""
    dt = datetime.fromtimestamp(ts_ms / 1000)
    return dt.strftime("%Y%m%d%H%M%S") + f"{ts_ms % 1000:03d}"


def list_index_files(index_dir) -> list[Path]:
    """The index files of a directory in the order the broker loads them (by name: numeric, shorter first)."""
    d = Path(index_dir)
    if not d.is_dir():
        return []
    files = [p for p in d.iterdir() if p.is_file() and INDEX_NAME.match(p.name)]
    return sorted(files, key=lambda p: (len(p.name), p.name))


# ------------------------------------------------------------------------------------------- the store


@dataclass
class NameProblem:
    """A directory entry the store cannot use: a bad name, a symlink, a file where a directory belongs."""
    path: str
    reason: str

    def as_dict(self) -> dict:
        return {"path": self.path, "reason": self.reason}


@dataclass
class QueueListing:
    queues: list[tuple[str, int]] = field(default_factory=list)
    problems: list[NameProblem] = field(default_factory=list)


class StoreLayout:
    """The paths of one store root (storePathRootDir) and its commit-log directories (storePathCommitLog)."""

    def __init__(self, root, commitlog_dirs=None):
        self.root = Path(os.path.expanduser(os.fspath(root)))
        dirs = commitlog_dirs or [self.root / COMMITLOG_DIR]
        self.commitlog_dirs = [Path(os.path.expanduser(os.fspath(d))) for d in dirs]

    @classmethod
    def of(cls, config) -> "StoreLayout":
        """The layout a BrokerConfig describes."""
        return cls(config.root, config.commitlog_dirs)

    # -- fixed names
    @property
    def consumequeue_dir(self) -> Path:
        return self.root / CONSUMEQUEUE_DIR

    @property
    def index_dir(self) -> Path:
        return self.root / INDEX_DIR

    @property
    def checkpoint(self) -> Path:
        return self.root / CHECKPOINT_FILE

    @property
    def abort(self) -> Path:
        return self.root / ABORT_FILE

    @property
    def lock(self) -> Path:
        return self.root / LOCK_FILE

    @property
    def config_dir(self) -> Path:
        return self.root / CONFIG_DIR

    def config_file(self, name: str) -> Path:
        return self.config_dir / name

    @property
    def tiered_index_dir(self) -> Path:
        return self.root / TIERED_INDEX_DIR

    @property
    def tiered_metadata(self) -> Path:
        return self.config_dir / TIERED_METADATA_FILE

    def cq_dir(self, topic: str, queue_id: int) -> Path:
        """consumequeue/<topic>/<queueId>; the names are checked so they cannot leave the store (the put path
        checks a new topic against the client's rules before it gets here)."""
        why = stored_topic_problem(topic)
        if why:
            raise InvalidArgumentError(why)
        validate_queue_id(queue_id)
        return self.consumequeue_dir / topic / str(queue_id)

    # -- what the store holds
    def is_store(self) -> bool:
        return (self.consumequeue_dir.is_dir() or self.index_dir.is_dir()
                or any(d.is_dir() for d in self.commitlog_dirs))

    def holds_store(self) -> bool:
        """What makes a directory a store for a writer (put): any of commitlog/ (or the configured commit-log
        directories), consumequeue/, index/, config/, the checkpoint or the abort marker."""
        return self.is_store() or self.config_dir.is_dir() or self.checkpoint.is_file() or self.abort.is_file()

    def require_store(self, allow_markers: bool = False) -> None:
        """NotAStoreError unless the root holds a commit log, consume queues or an index (or, with
        allow_markers, only an abort marker or checkpoint: a writer killed before its first write)."""
        if not self.root.exists():
            raise NotAStoreError(f"store directory {self.root} does not exist")
        if not self.root.is_dir():
            raise NotAStoreError(f"{self.root} is not a directory")
        if self.is_store() or (allow_markers and (self.abort.is_file() or self.checkpoint.is_file())):
            return
        raise NotAStoreError(
            f"{self.root} is not a RocketMQ store: it has no {COMMITLOG_DIR}/, {CONSUMEQUEUE_DIR}/ or {INDEX_DIR}/ directory")

    def list_queues(self) -> QueueListing:
        """Every (topic, queueId) directory under consumequeue/, and the entries a broker would not load.

        Symlinks are reported and never followed, so a listing cannot leave the store.
        """
        out = QueueListing()
        if self.consumequeue_dir.is_dir():
            out.queues, out.problems = list_queue_dirs(self.consumequeue_dir, lambda p: f"{CONSUMEQUEUE_DIR}/"
                                                       + p.relative_to(self.consumequeue_dir).as_posix())
        if out.problems and is_rocksdb_dir(self.consumequeue_dir):
            # a RocksDB consume-queue database shares consumequeue/ with the file queues (double write): its files
            # are the database's, not misplaced queue entries
            out.problems = [p for p in out.problems if "/" in p.path[len(CONSUMEQUEUE_DIR) + 1:]
                            or (self.root / p.path).is_dir()]
        if not out.queues:
            for d in (self.consumequeue_dir, self.root / ROCKSDB_CQ_DIR_NEW):
                if is_rocksdb_dir(d):  # never "no queues" for a store whose queues are in RocksDB
                    raise ModeRefusedError(f"{self.root} keeps its consume queues in a RocksDB database "
                                           f"({relative_name(d, self.root)}/), which rmqtool cannot read yet")
        return out

    def protected_paths(self) -> list[Path]:
        """What an output path must never be, contain, or lie inside: the broker's own data."""
        paths = [self.root / COMMITLOG_DIR, *self.commitlog_dirs, self.consumequeue_dir, self.config_dir,
                 self.checkpoint, self.root / TIMER_WHEEL_FILE, self.root / TIMER_LOG_DIR]
        seen, out = set(), []
        for p in paths:
            r = _real(p)
            if r not in seen:
                seen.add(r)
                out.append(r)
        return out

    def clash(self, target) -> str | None:
        """Why writing to `target` (a file or directory) could destroy store data, or None.

        Refused: the store root itself, a path that contains the store, and any path that is, contains,
        or lies inside commitlog/, consumequeue/, config/, checkpoint, timerwheel or timerlog/.
        """
        t = _real(Path(os.path.expanduser(os.fspath(target))))
        root = _real(self.root)
        if t == root:
            return f"{target} is the store root"
        if is_inside(root, t):
            return f"{target} contains the store {self.root}"
        for p in self.protected_paths():
            if t == p or is_inside(t, p) or is_inside(p, t):
                return f"{target} overlaps the store's {p.name}"
        return None


def is_rocksdb_dir(path) -> bool:
    """A directory holding a RocksDB database: its CURRENT file and a MANIFEST (what RocksDB opens first)."""
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return "CURRENT" in names and any(n.startswith("MANIFEST-") for n in names)


def relative_name(path, root) -> str:
    """A path as messages and manifests name it: relative to `root` when it lies below it, else as given."""
    try:
        return str(Path(path).relative_to(root))
    except ValueError:
        return str(path)


def symlink_on_path(root, path) -> Path | None:
    """The first symlink among the components of `path` below `root` (root itself may be a link), or None.

    Names from a store's directories never become paths that leave the store: a queue directory reached through
    a link is refused, as a broker-made store never has one.
    """
    root, path = Path(root), Path(path)
    try:
        rel = path.relative_to(root)
    except ValueError:
        return path
    p = root
    for part in rel.parts:
        p = p / part
        if p.is_symlink():
            return p
    return None


def _real(p: Path) -> Path:
    """The absolute path with symlinks resolved as far as they exist (the rest kept as given)."""
    return Path(os.path.realpath(os.path.abspath(p)))


def is_inside(p: Path, parent: Path) -> bool:
    """True when p lies strictly inside parent."""
    try:
        p.relative_to(parent)
    except ValueError:
        return False
    return p != parent


def is_dir_no_follow(path) -> bool:
    """A directory that is not a symlink."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def entry_problem(e: os.DirEntry, want_dir: bool) -> str | None:
    """Why a directory entry cannot stand where a directory (want_dir) or a regular file belongs, or None.
    Listings report symlinks and never follow them, so they cannot leave the store."""
    if e.is_symlink():
        return "symlink (not followed)"
    if want_dir and not e.is_dir(follow_symlinks=False):
        return "not a directory"
    if not want_dir and not e.is_file(follow_symlinks=False):
        return "not a regular file"
    return None


def list_queue_dirs(base: Path, rel: Callable[[Path], str], skip_topics: tuple = ()
                    ) -> tuple[list[tuple[str, int]], list[NameProblem]]:
    """Every `<topic>/<queueId>` directory under base (a broker's consumequeue/, a tiered broker directory), by
    name, and the entries a broker would not load; `rel` names an entry in a problem."""
    queues: list[tuple[str, int]] = []
    problems: list[NameProblem] = []
    for t in sorted(os.scandir(base), key=lambda e: e.name):
        why = entry_problem(t, want_dir=True)
        if why is None and t.name in skip_topics:
            continue
        if why is None and stored_topic_problem(t.name):
            why = f"not a valid topic name: {stored_topic_problem(t.name)}"
        if why:
            problems.append(NameProblem(rel(Path(t.path)), why))
            continue
        for q in sorted(os.scandir(t.path), key=lambda e: e.name):
            why = entry_problem(q, want_dir=True)
            if why is None and (not QUEUE_DIR_NAME.match(q.name) or int(q.name) > INT_MAX):
                why = "not a queue id (the broker ignores it)"
            if why:
                problems.append(NameProblem(rel(Path(q.path)), why))
            else:
                queues.append((t.name, int(q.name)))
    return queues, problems


def is_regular_file(path) -> bool:
    """A regular file that is not a symlink (segment loaders never follow links out of the store)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
