"""rmqtool verify-cq: every consume-queue unit checked against the record it points at, or (compare) the file
queues and the RocksDB queues compared with each other."""
from __future__ import annotations

from typing import Callable, Optional

from engine.broker.config.brokerconf import BrokerConfig
from engine.errors import InvalidArgumentError


def verify_cq(cfg: BrokerConfig, topic: Optional[str] = None, source: Optional[str] = None, compare: bool = False,
              check_crc: bool = True, progress: Optional[Callable[[int, int], None]] = None):
    """engine.broker.consumequeue.verify's report: verify_queues (of `source`, "file" or "rocksdb", default the one the broker
    serves), or compare_queues with `compare`. InvalidArgumentError for a source that is neither, or both asked."""
    from engine.broker.store import MessageStore
    from engine.broker.consumequeue.verify import compare_queues, verify_queues

    if source is not None and source not in ("file", "rocksdb"):
        raise InvalidArgumentError(f"--source {source!r}: use file or rocksdb")
    if compare and source is not None:
        raise InvalidArgumentError("--compare reads both the files and RocksDB: leave out --source")
    with MessageStore(cfg) as st:
        if compare:
            return compare_queues(st, topic, progress=progress)
        return verify_queues(st, topic, source, check_crc=check_crc, progress=progress)
