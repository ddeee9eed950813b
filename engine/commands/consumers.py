"""rmqtool consumers: consumer progress per group, topic and queue (mqadmin consumerProgress)."""
from __future__ import annotations

from typing import Optional

from engine.broker.config.brokerconf import BrokerConfig


def consumers(cfg: BrokerConfig, group: Optional[str] = None):
    """Committed offsets against the queues' max offsets, from config/consumerOffset.json (or its .bak):
    engine.broker.config.consumers.ConsumersReport."""
    from engine.broker.store import MessageStore
    from engine.broker.config.consumers import consumer_progress

    with MessageStore(cfg) as st:
        return consumer_progress(st, group)
