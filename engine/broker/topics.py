"""The broker's routing names (the system topics, the topics a message waits in before its own, the group and
LMQ prefixes), the topics a store has, and the one answer every read command gives for a topic it does not have.

The routing names are stated here once (or imported here from the one module that states them) and checked
against RocketMQ 8fc57f1468: TopicValidator (the system set and prefix, isSystemTopic), MixAll (%RETRY%, %DLQ%,
%LMQ%, REPLY_TOPIC), PopAckConstants (the revive topics), TimerMessageStore (the timer topic). The tiered topic
filter (engine.tiered.flat.topic_filter) and the reader's labels (engine.broker.read copy_role) ask is_system_topic.

A store's topics are the names under consumequeue/ (every dispatched message has a consume queue, format §4)
and the topics of config/topics.json (read as the broker reads it, .bak included; a topic created but never
written has an entry there and no queue). A topic named in neither is an error (exit 2) that names it, lists
a few of the store's topics ("and N more") and the close spellings first: a typo must not look like an empty
answer. A store that names no topic at all (a commit log copied out alone) cannot tell, so nothing is refused.
"""
from __future__ import annotations

import difflib

from engine.broker.commitlog.message import SCHEDULE_TOPIC, TRANS_HALF_TOPIC
from engine.broker.layout import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, StoreLayout
from engine.broker.mode import LMQ_PREFIX
from engine.errors import InvalidArgumentError

#: Topics named in the error before "and N more".
LISTED = 5

# TopicValidator's topics (SCHEDULE_TOPIC_XXXX and RMQ_SYS_TRANS_HALF_TOPIC are the record codec's: imported above).
AUTO_CREATE_TOPIC = "TBW102"                         # AUTO_CREATE_TOPIC_KEY_TOPIC
BENCHMARK_TOPIC = "BenchmarkTest"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"                  # msgTraceTopicName's default
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"  # a transaction's commit/rollback op records
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"  # half messages checked too often
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"                # RMQ_SYS_ROCKSDB_OFFSET_TOPIC: RocksDB queues' dispatched offset
#: TopicValidator.SYSTEM_TOPIC_SET as the class initialises it, and SYSTEM_TOPIC_PREFIX: topics the broker defines
#: itself (TopicConfigManager's constructor) or keeps to itself.
SYSTEM_TOPICS = frozenset({
    AUTO_CREATE_TOPIC, SCHEDULE_TOPIC, BENCHMARK_TOPIC, TRANS_HALF_TOPIC, TRACE_TOPIC, TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT, CHECKPOINT_TOPIC,
})
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
# Inside the prefix: topics of the broker's own services.
TIMER_TOPIC = "rmq_sys_wheel_timer"                  # TimerMessageStore.TIMER_TOPIC: timer messages wait here
REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"          # PopAckConstants.REVIVE_TOPIC: POP revive topics
# MixAll's: a consumer group's redeliveries and dead letters, the reply topic's postfix ("<cluster>_REPLY_TOPIC"),
# and the LMQ prefix (engine.broker.mode's, where the store's mode is decided).
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"
ROUTING_NAMES = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX, LMQ_PREFIX)


def is_system_topic(topic: str) -> bool:
    """TopicValidator.isSystemTopic."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


class TopicNotFoundError(InvalidArgumentError):
    """A read asked for a topic the store does not have (exit 2)."""


def store_topics(layout: StoreLayout) -> list[str]:
    """Every topic the store has (consume-queue directories and config/topics.json), sorted; [] when it names none."""
    from engine.broker.config.jsonfiles import ConfigFileError, topic_configs

    names = {t for t, _q in layout.list_queues().queues}
    try:
        table = topic_configs(layout).value or {}
    except ConfigFileError:  # a damaged topics.json is the consumers command's to report
        table = {}
    names.update(table)
    return sorted(names)


def topics_text(topics: list[str], near: str | None = None, listed: int = LISTED) -> str:
    """`A, B, C, D, E and 12 more`, the spellings closest to `near` first."""
    close = difflib.get_close_matches(near, topics, n=3, cutoff=0.6) if near else []
    ordered = close + [t for t in topics if t not in close]
    shown = ", ".join(repr(t) for t in ordered[:listed])
    return shown + (f" and {len(ordered) - listed} more" if len(ordered) > listed else "")


def require_topic(layout: StoreLayout, topic: str | None) -> None:
    """TopicNotFoundError unless the store has `topic` (None: no topic asked for; a store that names no topic
    at all cannot tell, and refuses nothing)."""
    if topic is None:
        return
    topics = store_topics(layout)
    if not topics or topic in topics:
        return
    close = difflib.get_close_matches(topic, topics, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise TopicNotFoundError(f"topic {topic!r} is not in the store {layout.root}: it has {len(topics)} topic(s), "
                             f"{topics_text(topics, topic)}{hint}")
