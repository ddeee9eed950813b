"""Which topics a tiered store keeps out of the tier: RocketMQ's MessageStoreTopicFilter, written once (flat-store
§10; flat-store pitfall 19). The tier dispatch (engine.tiered.flat.dispatch) and the tiered index job
(engine.jobs.tiered_index) both ask it.

filterTopic(topic) is true for a blank topic, a system topic (TopicValidator.isSystemTopic: its SYSTEM_TOPIC_SET or
the "rmq_sys_" prefix), a POP revive topic ("rmq_sys_REVIVE_LOG_", inside that prefix), the cluster's or the
broker's name (the filter's black set) and an LMQ topic ("%LMQ%"). At the source (RocketMQ 8fc57f1468):
TopicValidator's set holds ten names (no *_SYNC topic); the broker's TopicConfigManager.init adds to the same static
set, before any message is tiered, the cluster and broker names, "<cluster>_REPLY_TOPIC", and the trace topic when
traceTopicEnable is on (msgTraceTopicName; its default is already in the set). %RETRY% and %DLQ% topics are tiered.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from engine.broker.topics import (LMQ_PREFIX, REPLY_TOPIC_POSTFIX, REVIVE_TOPIC_PREFIX,  # the broker's, stated once
                                  is_system_topic)
from engine.java.lang import java_is_blank


@dataclass(frozen=True)
class TieredTopicFilter:
    """MessageStoreTopicFilter of one broker: its cluster and broker names (the black set) and, when the broker
    has traceTopicEnable on, its trace topic. Picklable (the index job sends it to its Spark tasks)."""

    cluster: str
    broker: Optional[str]
    trace_topic: Optional[str] = None

    def why(self, topic: Optional[str]) -> Optional[str]:
        """Why the tier never holds `topic`, or None when it is tiered."""
        if java_is_blank(topic):
            return "blank topic"
        if topic.startswith(REVIVE_TOPIC_PREFIX):
            return "POP revive topic"
        if is_system_topic(topic):
            return "system topic"
        if topic in (self.cluster, self.broker):
            return "named like the cluster or the broker"
        if topic == f"{self.cluster}_{REPLY_TOPIC_POSTFIX}" or topic == self.trace_topic:
            return "system topic (added by the broker at start-up)"
        if topic.startswith(LMQ_PREFIX):
            return "LMQ topic"
        return None

    def filtered(self, topic: Optional[str]) -> bool:
        """filterTopic: True when the tier does not keep `topic`."""
        return self.why(topic) is not None


def topic_filter(config, cluster: str, broker: Optional[str]) -> TieredTopicFilter:
    """The filter of the broker `config` (a TieredConfig: traceTopicEnable, msgTraceTopicName) describes."""
    trace = config.msgTraceTopicName if config.traceTopicEnable else None
    return TieredTopicFilter(cluster, broker, trace or None)
