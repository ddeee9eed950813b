"""rmqtool delays: the delay-level queues (SCHEDULE_TOPIC_XXXX) and their delivery progress."""
from __future__ import annotations

import os
from typing import Optional

from engine.broker.config.brokerconf import BrokerConfig


def delays(cfg: BrokerConfig, broker_conf: Optional[str | os.PathLike] = None):
    """Delay offset, pending messages and next delivery per delay level (levels from broker.conf's
    messageDelayLevel when `broker_conf` gives one): engine.broker.config.consumers.DelaysReport."""
    from engine.broker.store import MessageStore
    from engine.broker.config.consumers import delay_status

    with MessageStore(cfg) as st:
        return delay_status(st, broker_conf)
