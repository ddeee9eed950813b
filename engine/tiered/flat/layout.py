"""Every path and file name under tieredStoreFilePath (flat-store §2; flat-store pitfalls 1, 2, 5).

    <root>/<md5(cluster)[0:8]>_<cluster>/<broker>/<topic>/<queueId>/{COMMIT_LOG,CONSUME_QUEUE}/<md5(offset)[0:8]><offset:020>

The metadata keys every table by the relative "filePath" `<broker>/<topic>/<queueId>`. Names from input are
checked before they become paths; directory listings never follow symlinks.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from engine.broker.layout import (NameProblem, entry_problem, is_dir_no_follow, list_queue_dirs, relative_name,
                                  stored_topic_problem, validate_queue_id)
from engine.errors import InvalidArgumentError, NotAStoreError

COMMIT_LOG, CONSUME_QUEUE, INDEX = 0, 1, 2
FILE_TYPE_NAMES = {COMMIT_LOG: "COMMIT_LOG", CONSUME_QUEUE: "CONSUME_QUEUE", INDEX: "INDEX"}
FILE_TYPE_CODES = {v: k for k, v in FILE_TYPE_NAMES.items()}
INDEX_TOPIC = "rmq_sys_INDEX"   # MessageStoreUtil.RMQ_SYS_TIERED_STORE_INDEX_TOPIC
DEFAULT_CLUSTER = "DefaultCluster"

_SEGMENT_NAME = re.compile(r"^([0-9a-f]{8})([0-9]{20})$")
_CLUSTER_DIR = re.compile(r"^([0-9a-f]{8})_(.+)$")


def md5_prefix(text: str) -> str:
    """MessageStoreUtil.getHash: the first 8 lowercase hex digits of the MD5 of the UTF-8 bytes."""
    return hashlib.md5(text.encode("utf-8")).hexdigest()[:8]


def cluster_dir_name(cluster: str) -> str:
    return f"{md5_prefix(cluster)}_{cluster}"


def offset_to_file_name(offset: int) -> str:
    """MessageStoreUtil.offset2FileName: md5 of the decimal offset, then the offset in 20 digits."""
    return md5_prefix(str(offset)) + f"{offset:020d}"


def file_name_to_offset(name: str) -> int | None:
    """The offset a segment name carries (its last 20 characters), or None when the name is not a segment name."""
    m = _SEGMENT_NAME.match(name)
    return int(m.group(2)) if m else None


def segment_name_problem(name: str) -> str | None:
    """Why `name` is not what offset2FileName writes, or None."""
    off = file_name_to_offset(name)
    if off is None:
        return "not a segment name (8 hex digits of an MD5 and a 20-digit offset)"
    if name[:8] != md5_prefix(str(off)):
        return f"the MD5 prefix should be {md5_prefix(str(off))} for offset {off}"
    return None


def file_path(broker: str, topic: str, queue_id: int) -> str:
    """MessageStoreUtil.toFilePath: the metadata key of a queue."""
    return f"{broker}/{topic}/{queue_id}"


def validate_component(kind: str, name: str) -> str:
    """A cluster or broker name becomes one directory name: refuse what would leave the tier."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\0" in name:
        raise InvalidArgumentError(f"{kind} name {name!r} cannot be a directory name")
    return name


def validate_tiered_topic(topic: str) -> str:
    why = stored_topic_problem(topic)
    if why:
        raise InvalidArgumentError(why)
    return topic


@dataclass
class SegmentFile:
    """A segment file found on disk."""
    base: int
    path: Path
    length: int


@dataclass
class SegmentListing:
    files: list[SegmentFile] = field(default_factory=list)
    problems: list[NameProblem] = field(default_factory=list)


def list_clusters(root: Path) -> list[tuple[str, str]]:
    """(cluster, directory name) for every `<8 hex>_<cluster>` directory under the root."""
    out = []
    if not is_dir_no_follow(root):
        return out
    for e in sorted(os.scandir(root), key=lambda e: e.name):
        m = _CLUSTER_DIR.match(e.name)
        if m and e.is_dir(follow_symlinks=False):
            out.append((m.group(2), e.name))
    return out


def require_tiered_root(root: Path) -> None:
    if not root.exists():
        raise NotAStoreError(f"tiered store path {root} does not exist")
    if not root.is_dir():
        raise NotAStoreError(f"tiered store path {root} is not a directory")
    if not list_clusters(root):
        raise NotAStoreError(f"{root} is not a tiered store root (tieredStoreFilePath): it has no "
                             "<md5>_<cluster> directory")


class TieredLayout:
    """The paths of one broker's flat files: root / cluster directory / broker."""

    def __init__(self, root, cluster: str, broker: str):
        self.root = Path(os.path.expanduser(os.fspath(root)))
        self.cluster = validate_component("cluster", cluster)
        self.broker = validate_component("broker", broker)

    @property
    def cluster_dir(self) -> Path:
        return self.root / cluster_dir_name(self.cluster)

    @property
    def broker_dir(self) -> Path:
        return self.cluster_dir / self.broker

    def file_path(self, topic: str, queue_id: int) -> str:
        return file_path(self.broker, topic, queue_id)

    def queue_dir(self, topic: str, queue_id: int) -> Path:
        """<broker>/<topic>/<queueId>; the topic and queue id are checked so they cannot leave the tier."""
        if topic != INDEX_TOPIC:
            validate_tiered_topic(topic)
        validate_queue_id(queue_id)
        return self.broker_dir / topic / str(queue_id)

    def type_dir(self, topic: str, queue_id: int, file_type: int) -> Path:
        return self.queue_dir(topic, queue_id) / FILE_TYPE_NAMES[file_type]

    def segment_path(self, topic: str, queue_id: int, file_type: int, base: int) -> Path:
        return self.type_dir(topic, queue_id, file_type) / offset_to_file_name(base)

    def rel(self, p: Path) -> str:
        """A path relative to the tier root, for messages."""
        return relative_name(p, self.root)

    def list_segments(self, topic: str, queue_id: int, file_type: int) -> SegmentListing:
        """The segment files of one queue and type, by base offset; bad names and symlinks are reported."""
        out = SegmentListing()
        d = self.type_dir(topic, queue_id, file_type)
        if not is_dir_no_follow(d):
            return out
        for e in sorted(os.scandir(d), key=lambda e: e.name):
            rel = self.rel(Path(e.path))
            why = entry_problem(e, want_dir=False)
            if why:
                out.problems.append(NameProblem(rel, why))
                continue
            why = segment_name_problem(e.name)
            if why:   # the broker computes names from offsets: a file with another name is never read
                out.problems.append(NameProblem(rel, why))
                continue
            base = file_name_to_offset(e.name)
            out.files.append(SegmentFile(base, Path(e.path), e.stat(follow_symlinks=False).st_size))
        out.files.sort(key=lambda f: f.base)
        return out

    def list_queues(self) -> tuple[list[tuple[str, int]], list[NameProblem]]:
        """(topic, queueId) of every queue directory under the broker directory (the INDEX queue excluded)."""
        if not is_dir_no_follow(self.broker_dir):
            return [], []
        queues, problems = list_queue_dirs(self.broker_dir, self.rel, skip_topics=(INDEX_TOPIC,))
        return sorted(queues), problems


def brokers_of(root: Path, cluster_dirname: str) -> list[str]:
    d = root / cluster_dirname
    if not is_dir_no_follow(d):
        return []
    return sorted(e.name for e in os.scandir(d) if e.is_dir(follow_symlinks=False))


def resolve_names(root: Path, cluster: str | None, broker: str | None, for_writing: bool = False) -> tuple[str, str]:
    """The cluster and broker to work on: the given ones, else the only ones under the root (flat-store §2)."""
    clusters = list_clusters(root)
    if cluster is None:
        if len(clusters) == 1:
            cluster = clusters[0][0]
        elif not clusters and for_writing:
            cluster = DEFAULT_CLUSTER
        elif not clusters:
            require_tiered_root(root)
        else:
            names = ", ".join(sorted(c for c, _ in clusters))
            raise InvalidArgumentError(f"{root} holds several clusters ({names}): pass --cluster-name")
    validate_component("cluster", cluster)
    if not for_writing and not is_dir_no_follow(root / cluster_dir_name(cluster)):
        names = ", ".join(c for c, _ in clusters) or "none"
        raise InvalidArgumentError(f"cluster {cluster!r} has no directory {cluster_dir_name(cluster)} under {root} "
                                   f"(clusters there: {names})")
    if broker is None:
        brokers = brokers_of(root, cluster_dir_name(cluster))
        if len(brokers) == 1:
            broker = brokers[0]
        elif not brokers:
            raise InvalidArgumentError(f"cluster {cluster!r} under {root} has no broker directory: pass --broker-name")
        else:
            raise InvalidArgumentError(f"cluster {cluster!r} under {root} holds several brokers "
                                       f"({', '.join(brokers)}): pass --broker-name")
    validate_component("broker", broker)
    if not for_writing and not is_dir_no_follow(root / cluster_dir_name(cluster) / broker):
        brokers = brokers_of(root, cluster_dir_name(cluster))
        raise InvalidArgumentError(f"broker {broker!r} has no directory under {root / cluster_dir_name(cluster)} "
                                   f"(brokers there: {', '.join(brokers) or 'none'})")
    return cluster, broker
