"""config/topics.json as a put leaves it: the topics the put created, as a broker records them.

A broker that receives a message for a topic it does not know creates the topic
(TopicConfigManager.createTopicInSendMessageMethod: queue counts min(the client's defaultTopicQueueNums 4, TBW102's
8), TBW102's perm less PERM_INHERIT: 6, SINGLE_TAG), moves its DataVersion on and persists the table
(ConfigManager.persist: the previous file becomes topics.json.bak, the new text replaces it). A put does the same
once, at its clean shutdown, for every topic it wrote that the table does not hold, with queue counts that cover
every queue it wrote (at least the broker's 4). System topics (TopicValidator) are the broker's own: never
written. A topics.json (or, when it is missing, a .bak) that does not decode is left as it is for doctor and
`repair config` to report: the broker would not read what rmqtool added to it either.
"""
from __future__ import annotations

import time

from engine.broker.config.jsonfiles import (BAK_SUFFIX, TOPICS, data_version, encode_topics, topic_config_entry)
from engine.broker.layout import StoreLayout
from engine.broker.topics import is_system_topic
from engine.fsutil import atomic_write, fsync_dir
from engine.java import fastjson

#: min(clientDefaultTopicQueueNums 4, TBW102's writeQueueNums 8): the queue count of a topic created on a send.
CREATED_TOPIC_QUEUE_NUMS = 4
CREATED_TOPIC_PERM = 6  # PERM_READ | PERM_WRITE (TBW102's 7 less PERM_INHERIT)


def record_created_topics(layout: StoreLayout, queues: dict[str, int], now_ms: int | None = None) -> list[str]:
    """Add to config/topics.json each topic of `queues` ({topic: highest queue id written + 1}) it does not hold,
    as the broker creates one on a send; returns the topics added (none: nothing is written)."""
    path = layout.config_file(TOPICS)
    bak = layout.config_file(TOPICS + BAK_SUFFIX)
    old_text = _read(path)
    base = old_text if old_text else _read(bak)
    if base:
        try:
            root = fastjson.loads(base)
            table = root.get("topicConfigTable") if isinstance(root, dict) else None
            version = root.get("dataVersion") if isinstance(root, dict) else None
        except ValueError:
            return []
        if not isinstance(table, dict):
            return []
    else:
        table, version = {}, None
    new = sorted(t for t in queues if t not in table and not is_system_topic(t))
    if not new:
        return []
    table = dict(table)
    for t in new:
        table[t] = topic_config_entry(t, max(CREATED_TOPIC_QUEUE_NUMS, queues[t]), CREATED_TOPIC_PERM)
    counter = version.get("counter", 0) if isinstance(version, dict) else 0
    state = version.get("stateVersion", 0) if isinstance(version, dict) else 0
    ver = data_version(int(time.time() * 1000) if now_ms is None else now_ms,
                       (counter if isinstance(counter, int) else 0) + 1)
    ver["stateVersion"] = state if isinstance(state, int) else 0
    path.parent.mkdir(exist_ok=True)
    if old_text:  # ConfigManager.persist: the previous save is kept as the .bak
        atomic_write(bak, old_text)
    atomic_write(path, encode_topics(table, ver).encode("utf-8"))
    fsync_dir(path.parent)
    return new


def _read(path) -> bytes | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    return data if data.strip() else None
