"""The topics a store has, and the one answer every read command gives for a topic it does not have.

A store's topics are the names under consumequeue/ (every dispatched message has a consume queue, format §4)
and the topics of config/topics.json (read as the broker reads it, .bak included; a topic created but never
written has an entry there and no queue). A topic named in neither is an error (exit 2) that names it, lists
a few of the store's topics ("and N more") and the close spellings first: a typo must not look like an empty
answer. A store that names no topic at all (a commit log copied out alone) cannot tell, so nothing is refused.
"""
from __future__ import annotations

import difflib

from engine.broker.layout import StoreLayout
from engine.errors import InvalidArgumentError

#: Topics named in the error before "and N more".
LISTED = 5

#: TopicValidator.SYSTEM_TOPIC_SET as the class initialises it, and SYSTEM_TOPIC_PREFIX: topics the broker defines
#: itself (TopicConfigManager's constructor) or keeps to itself.
SYSTEM_TOPICS = frozenset({
    "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
    "CHECKPOINT_TOPIC",
})
SYSTEM_TOPIC_PREFIX = "rmq_sys_"


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
