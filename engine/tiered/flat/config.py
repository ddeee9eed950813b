"""The tiered store plugin's configuration keys that shape or read the flat files (flat-store §1) and the tiered
index files, with RocketMQ's defaults; broker.conf fills them by name, as MessageStorePluginContext does. Every
reader of a tiered broker.conf key asks here (load_tiered_config)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from engine.broker.config.brokerconf import (CQ_STORE_UNIT_SIZE as CQ_UNIT_SIZE, FROM_CONF, FROM_DEFAULT,
                                             FROM_OPTION, read_properties_file, set_from_properties)
from engine.broker.topics import TRACE_TOPIC
from engine.errors import InvalidArgumentError
from engine.java.lang import INT_MAX, INT_MIN, LONG_MAX

GIB = 1024 * 1024 * 1024
MIB = 1024 * 1024


@dataclass
class TieredConfig:
    """The subset of tieredstore's MessageStoreConfig rmqtool uses; names are the broker.conf keys."""

    tieredStoreFilePath: str = ""
    storePathRootDir: str = ""
    brokerClusterName: str = ""          # RocketMQ's default is DefaultCluster, applied when resolving the tier
    brokerName: str = ""                 # RocketMQ's default is the host name: never guessed here
    tieredStoreCommitLogMaxSize: int = GIB
    tieredStoreConsumeQueueMaxSize: int = 100 * MIB
    tieredStoreFileReservedTime: int = 72
    commitLogRollingInterval: int = 24
    commitLogRollingMinimumSize: int = 16 * MIB
    tieredStoreGroupCommitCount: int = 4096
    tieredStoreGroupCommitSize: int = 4 * MIB
    readAheadMessageCountThreshold: int = 4096
    readAheadMessageSizeThreshold: int = 16 * MIB
    messageIndexEnable: bool = True
    tieredStoreIndexFileMaxHashSlotNum: int = 5_000_000
    tieredStoreIndexFileMaxIndexNum: int = 20_000_000
    maxTransferBytesOnMessageInMemory: int = 256 * 1024   # the local store's key; the fetcher's read-ahead stops there
    readAheadCacheEnable: bool = True
    traceTopicEnable: bool = False                      # the broker's keys: its trace topic is a system topic
    msgTraceTopicName: str = TRACE_TOPIC                # TopicValidator.RMQ_SYS_TRACE_TOPIC
    given: frozenset = field(default=frozenset(), compare=False)   # the keys broker.conf or an option set
    options: frozenset = field(default=frozenset(), compare=False)  # the keys an option set (over broker.conf)
    broker_conf: str | None = field(default=None, compare=False)   # the broker.conf read, if any

    def validate(self) -> None:
        if not 0 < self.tieredStoreCommitLogMaxSize <= LONG_MAX:
            raise InvalidArgumentError(f"tieredStoreCommitLogMaxSize {self.tieredStoreCommitLogMaxSize} must be positive")
        if not CQ_UNIT_SIZE <= self.tieredStoreConsumeQueueMaxSize <= LONG_MAX:
            raise InvalidArgumentError(f"tieredStoreConsumeQueueMaxSize {self.tieredStoreConsumeQueueMaxSize} must be at "
                                       f"least {CQ_UNIT_SIZE} (one consume-queue unit)")
        if not 0 < self.readAheadMessageCountThreshold <= INT_MAX:
            raise InvalidArgumentError("readAheadMessageCountThreshold must be a positive int")
        if not 0 < self.readAheadMessageSizeThreshold <= INT_MAX:
            raise InvalidArgumentError("readAheadMessageSizeThreshold must be a positive int")
        if not INT_MIN <= self.tieredStoreFileReservedTime <= INT_MAX:
            raise InvalidArgumentError("tieredStoreFileReservedTime is not a Java int")
        if not 0 < self.tieredStoreIndexFileMaxHashSlotNum <= INT_MAX:
            raise InvalidArgumentError("tieredStoreIndexFileMaxHashSlotNum must be a positive int")
        if not 1 < self.tieredStoreIndexFileMaxIndexNum <= INT_MAX:
            raise InvalidArgumentError("tieredStoreIndexFileMaxIndexNum must be an int above 1")
        if not 0 < self.maxTransferBytesOnMessageInMemory <= INT_MAX:
            raise InvalidArgumentError("maxTransferBytesOnMessageInMemory must be a positive int")

    def is_given(self, key: str) -> bool:
        """Whether broker.conf or an option set `key` (else RocketMQ's default is in force)."""
        return key in self.given

    def source(self, key: str) -> str:
        """Where `key`'s value came from, in the words of engine.broker.config.brokerconf (BrokerConfig.sources):
        an option, broker.conf, else RocketMQ's default."""
        return FROM_OPTION if key in self.options else FROM_CONF if key in self.given else FROM_DEFAULT


def load_tiered_config(broker_conf: str | os.PathLike | None = None, **overrides) -> TieredConfig:
    """Defaults, then broker.conf, then explicit overrides (None values ignored)."""
    cfg = TieredConfig()
    given = set()
    if broker_conf is not None:
        given |= set_from_properties(cfg, read_properties_file(broker_conf), broker_conf,
                                     lambda name: name in ("given", "options", "broker_conf"))
    for k, v in overrides.items():
        if v is not None:
            setattr(cfg, k, v)
            given.add(k)
    cfg.given = frozenset(given)
    cfg.options = frozenset(k for k, v in overrides.items() if v is not None)
    cfg.broker_conf = os.fspath(broker_conf) if broker_conf is not None else None
    cfg.validate()
    return cfg
