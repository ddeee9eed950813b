"""The tiered store plugin's configuration keys that shape or read the flat files (flat-store §1) and the tiered
index files, with RocketMQ's defaults; broker.conf fills them by name, as MessageStorePluginContext does. Every
reader of a tiered broker.conf key asks here (load_tiered_config)."""
from __future__ import annotations

import os
from dataclasses import dataclass, fields

from engine.broker.config.brokerconf import CQ_STORE_UNIT_SIZE as CQ_UNIT_SIZE, read_properties_file
from engine.errors import InvalidArgumentError
from engine.java.lang import INT_MAX, INT_MIN, LONG_MAX
from engine.tiered.flat.layout import DEFAULT_CLUSTER

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
    # The tiered index files' geometry; 0: not in broker.conf (RocketMQ's defaults are
    # engine.tiered.index.format.DEFAULT_HASH_SLOT_NUM / DEFAULT_INDEX_NUM).
    tieredStoreIndexFileMaxHashSlotNum: int = 0
    tieredStoreIndexFileMaxIndexNum: int = 0

    @property
    def cluster_name(self) -> str:
        """brokerClusterName, or the broker's default when broker.conf has none."""
        return self.brokerClusterName or DEFAULT_CLUSTER

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


def load_tiered_config(broker_conf: str | os.PathLike | None = None, **overrides) -> TieredConfig:
    """Defaults, then broker.conf, then explicit overrides (None values ignored)."""
    cfg = TieredConfig()
    if broker_conf is not None:
        props = read_properties_file(broker_conf)
        for f in fields(TieredConfig):
            if f.name not in props:
                continue
            raw = props[f.name]
            try:
                if f.type in ("int", int):
                    val = int(raw)
                elif f.type in ("bool", bool):
                    val = raw.strip().lower() == "true"
                else:
                    val = raw
            except ValueError:
                raise InvalidArgumentError(f"{broker_conf}: {f.name}={raw!r} is not a number") from None
            setattr(cfg, f.name, val)
    for k, v in overrides.items():
        if v is not None:
            setattr(cfg, k, v)
    cfg.validate()
    return cfg
