"""What encoding a message shares between the message-by-message path (engine.broker.write.batch) and the
whole-list path of plain JSON messages (engine.broker.write.jsonbatch): the fixed record heads, the default hosts,
and the per-process caches of what depends only on a topic, a properties shape or a TAGS value (format §2.4, §2.5).
"""
from __future__ import annotations

import struct

from engine.broker.commitlog.message import (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, NAME_VALUE_SEPARATOR,
                                             PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY, PROPERTY_SEPARATOR,
                                             MessageEncodeError)
from engine.broker.layout import validate_topic
from engine.errors import InvalidArgumentError
from engine.java.collections import hashset_order
from engine.java.lang import java_string_hash

LOCALHOST = b"\x7f\x00\x00\x01"
DEFAULT_STORE_PORT = 10911

#: The record head up to BODYLENGTH, by (born host, store host) address length.
HEADS = {(4, 4): struct.Struct(">iiiiiqqiq4siq4siiqi"), (16, 4): struct.Struct(">iiiiiqqiq16siq4siiqi"),
         (4, 16): struct.Struct(">iiiiiqqiq4siq16siiqi"), (16, 16): struct.Struct(">iiiiiqqiq16siq16siiqi")}
HEAD44 = HEADS[(4, 4)]
#: Entries a per-process cache holds before it starts again (a long run of distinct topics or TAGS values).
CACHE_LIMIT = 1 << 16

# Per-process caches: a topic's encoded prefix, a TAGS value's hashCode.
TOPICS: dict[str, tuple[bytes, int]] = {}
TAGS: dict[str, int] = {}


def topic_info(topic) -> tuple[bytes, int]:
    """(length prefix + topic bytes, magic code) of a valid topic: v2 past 127 UTF-16 units (format §2.4)."""
    if not isinstance(topic, str) or not topic:
        raise InvalidArgumentError("message has no topic")
    validate_topic(topic)
    raw = topic.encode("utf-8")
    v2 = len(topic.encode("utf-16-le", "surrogatepass")) // 2 > 127
    if len(raw) > (32767 if v2 else 127):
        raise MessageEncodeError(f"topic is {len(raw)} bytes; too long for a {'v2' if v2 else 'v1'} record")
    info = ((struct.pack(">h", len(raw)) if v2 else struct.pack(">b", len(raw))) + raw,
            MESSAGE_MAGIC_CODE_V2 if v2 else MESSAGE_MAGIC_CODE)
    if len(TOPICS) >= CACHE_LIMIT:
        TOPICS.clear()
    TOPICS[topic] = info
    return info


SHAPES: dict[tuple[bool, bool], tuple] = {}


def shape_info(has_keys: bool, has_tags: bool) -> tuple:
    """The properties template of a plain JSON message: KEYS?, TAGS?, then UNIQ_KEY (the insertion order of the
    general path), in Java HashMap order; format arguments are (keys, tags, uniq)."""
    names = ([PROP_KEYS] if has_keys else []) + ([PROP_TAGS] if has_tags else []) + [PROP_UNIQ_KEY]
    arg = {PROP_KEYS: 0, PROP_TAGS: 1, PROP_UNIQ_KEY: 2}
    tmpl = "".join(f"{n}{NAME_VALUE_SEPARATOR}{{{arg[n]}}}{PROPERTY_SEPARATOR}" for n in hashset_order(names))
    info = SHAPES[(has_keys, has_tags)] = (tmpl.format, len(names))
    return info


def tags_hash(tags: str) -> int:
    if len(TAGS) >= CACHE_LIMIT:
        TAGS.clear()
    h = TAGS[tags] = java_string_hash(tags)
    return h
