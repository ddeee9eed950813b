"""The broker's system topics, stated once in engine.broker.topics (TopicValidator at RocketMQ 8fc57f1468), and the
two rules that ask them: the tiered topic filter (MessageStoreTopicFilter) and the reader's label of a record
carrying a message's UNIQ_KEY (engine.broker.read copy_role). The three agree on a few topics."""
from __future__ import annotations

import pytest

from engine.broker.commitlog.message import MessageRecord
from engine.broker.topics import SYSTEM_TOPIC_PREFIX, SYSTEM_TOPICS, is_system_topic
from engine.broker.read import copy_role
from engine.tiered.flat.topic_filter import TieredTopicFilter

#: TopicValidator.SYSTEM_TOPIC_SET at the golden commit (its static initialiser: ten names).
VALIDATOR_SET = {"TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
                 "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC",
                 "OFFSET_MOVED_EVENT", "CHECKPOINT_TOPIC"}

FILTER = TieredTopicFilter("DefaultCluster", "broker-a")


def test_the_set_is_topic_validators():
    assert SYSTEM_TOPICS == VALIDATOR_SET and SYSTEM_TOPIC_PREFIX == "rmq_sys_"


@pytest.mark.parametrize("topic, system", [
    ("TopicTest", False),
    ("TRANS_CHECK_MAX_TIME_TOPIC", True),      # in the set: the reader's old list missed it
    ("CHECKPOINT_TOPIC", True),
    ("SELF_TEST_TOPIC", True),
    ("RMQ_SYS_TRACE_TOPIC", True),
    ("OFFSET_MOVED_EVENT", True),
    ("rmq_sys_SYNC_BROKER_MEMBER_x", True),    # the prefix
    ("RMQ_SYS_SOMETHING", False),              # upper case is no prefix of TopicValidator's: the old list had it
    ("%RETRY%group", False),
    ("%DLQ%group", False),
])
def test_filter_and_reader_agree(topic, system):
    assert is_system_topic(topic) is system
    # the tier keeps no system topic (and keeps %RETRY%/%DLQ% ones)
    assert FILTER.filtered(topic) is system
    if system:
        assert FILTER.why(topic) in ("system topic", "POP revive topic")
    # the reader never calls a system topic's record the message as delivered
    role, delivered = copy_role(MessageRecord(topic=topic, properties={}))
    if system:
        assert delivered is False
    elif not topic.startswith("%"):
        assert delivered is True and role.endswith(f"{topic}/0")


def test_revive_topics_are_system_topics_the_filter_names():
    topic = "rmq_sys_REVIVE_LOG_DefaultCluster"
    assert is_system_topic(topic) and FILTER.why(topic) == "POP revive topic"
    assert copy_role(MessageRecord(topic=topic))[1] is False
