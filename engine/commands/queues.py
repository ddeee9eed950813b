"""rmqtool queues: every consume queue's broker offsets, messages, bytes and store times (mqadmin topicStatus)."""
from __future__ import annotations

from typing import Callable, Optional

from engine.broker.config.brokerconf import BrokerConfig


def queues(cfg: BrokerConfig, topic: Optional[str] = None, progress: Optional[Callable[[int, int], None]] = None):
    """The status of every consume queue of the store (or of one topic): engine.broker.consumequeue.view.QueuesReport."""
    from engine.broker.store import MessageStore
    from engine.broker.consumequeue.view import queue_status

    with MessageStore(cfg) as st:
        return queue_status(st, topic, progress=progress)
