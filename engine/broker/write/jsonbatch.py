"""Plain JSON messages checked and encoded as a whole list (the fast path of MessageBatch.extend_json).

A "plain" message has only topic, body, keys, tags, queueId, storeTimestamp and uniqKey: no other properties,
hosts, flags or transaction bits. For a list of them every field becomes a column, every check runs over the
column (types as a set, ranges through numpy, the property separators counted over the joined text), and every
encoding step is one C-level map over the column. The bytes and columns are exactly what MessageBatch.add_json
appends for each message in turn (tested); when any object is not plain or fails any check, nothing is added and
the caller goes message by message, which names the bad one.
"""
from __future__ import annotations

import struct
import time
from itertools import repeat

import numpy as np

from engine.broker.commitlog.message import MAX_PROPERTIES_LEN, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from engine.broker.write.encoding import (DEFAULT_STORE_PORT, HEAD44, LOCALHOST, SHAPES, TAGS, TOPICS, shape_info,
                                          tags_hash, topic_info)
from engine.errors import InvalidArgumentError
from engine.java.crc import crc32
from engine.java.lang import INT_MAX

PLAIN_FIELDS = frozenset(("topic", "body", "keys", "tags", "queueId", "storeTimestamp", "uniqKey"))
_H = struct.Struct(">h")
_NONE = type(None)


def _column(objs: list, name: str) -> list:
    return list(map(dict.get, objs, repeat(name, len(objs))))


def _texts(col: list, allow_list: bool = False) -> list | None:
    """A column of optional strings (keys may be lists of strings, joined by spaces): None where the message
    has none (missing, null, empty), or None for the whole column when a value needs the per-message path."""
    types = set(map(type, col))
    if not types <= ({_NONE, str, list} if allow_list else {_NONE, str}):
        return None
    if list in types:
        try:
            return [(" ".join(v) if type(v) is list else v) if v else None for v in col]
        except TypeError:
            return None
    return [v or None for v in col]


def _ints(col: list, default: int, lo: int, hi: int) -> list | None:
    types = set(map(type, col))
    if not types <= {_NONE, int}:
        return None
    if _NONE in types:
        col = [default if v is None else v for v in col]
    try:
        arr = np.array(col, dtype=np.int64)
    except OverflowError:
        return None
    if len(arr) and (int(arr.min()) < lo or int(arr.max()) > hi):
        return None
    return col


def extend_plain(batch, objs: list) -> bool:
    """Add `objs` to the batch (an engine.broker.write.batch.MessageBatch) if they are all plain and all pass
    every check; else add nothing, return False."""
    cols = _checked_columns(batch, objs)
    if cols is None:
        return False
    topics, bodies, keys, tags, given, qids, stamps = cols
    missing = given.count(None)
    fresh = iter(batch.uniq_many(missing)) if missing else None
    uniqs = [u or next(fresh) for u in given] if missing else given
    encoded = _properties(keys, tags, uniqs)
    if encoded is None:
        return False
    _append_encoded(batch, topics, bodies, keys, tags, uniqs, qids, stamps, *encoded)
    return True


def _checked_columns(batch, objs: list):
    """(topics, bodies as bytes, keys, tags, given UNIQ_KEYs, queue ids, store times) of plain objects that pass
    every check but the properties' (done on the encoded text), or None."""
    if set(map(type, objs)) != {dict} or not set().union(*objs) <= PLAIN_FIELDS:
        return None
    topics = _column(objs, "topic")
    try:
        names = set(topics)
    except TypeError:
        return None
    for t in names - TOPICS.keys():
        if type(t) is not str:
            return None
        try:
            topic_info(t)
        except (InvalidArgumentError, ValueError):  # add_json will name it
            return None
    bodies = _column(objs, "body")
    btypes = set(map(type, bodies))
    if not btypes <= {_NONE, str}:
        return None
    if _NONE in btypes:
        bodies = [b or "" for b in bodies]
    try:
        bodies = list(map(str.encode, bodies))
    except UnicodeEncodeError:
        return None
    if max(map(len, bodies)) > batch.max_body:
        return None
    cols = (topics, bodies, _texts(_column(objs, "keys"), True), _texts(_column(objs, "tags")),
            _texts(_column(objs, "uniqKey")), _ints(_column(objs, "queueId"), batch.default_queue_id, 0, INT_MAX),
            _ints(_column(objs, "storeTimestamp"), 0, 0, 2**63 - 1))
    return None if any(c is None for c in cols) else cols


def _append_encoded(batch, topics, bodies, keys, tags, uniqs, qids, stamps, praws, plens) -> None:  # noqa: PLR0913
    """Pack the headers and append every part and column (one argument per column)."""
    n = len(topics)
    now = int(time.time() * 1000)
    if 0 in stamps:
        base = len(batch)
        batch.stamped += [(base + i, True, False) for i, s in enumerate(stamps) if not s]
        stamps = [s or now for s in stamps]
    tinfo = {t: TOPICS[t] for t in set(topics)}
    tparts = [tinfo[t][0] for t in topics]
    blens = list(map(len, bodies))
    sizes = [90 + len(tp) + b + p for tp, b, p in zip(tparts, blens, plens)]
    heads = list(map(HEAD44.pack, sizes, [tinfo[t][1] for t in topics],
                     [c & 0x7FFFFFFF for c in map(crc32, bodies)], qids, repeat(0, n), repeat(0, n),
                     repeat(0, n), repeat(0, n), stamps, repeat(LOCALHOST, n), repeat(0, n), stamps,
                     repeat(LOCALHOST, n), repeat(DEFAULT_STORE_PORT, n), repeat(0, n), repeat(0, n), blens))
    block: list = [None] * (5 * n)
    block[0::5], block[1::5], block[2::5], block[3::5], block[4::5] = heads, bodies, tparts, list(map(_H.pack, plens)), praws
    batch.parts += block
    codes = {t: (TAGS[t] if t in TAGS else tags_hash(t)) for t in set(tags) if t is not None}
    codes[None] = 0
    batch.topic += topics
    batch.queue_id += qids
    batch.store_ts += stamps
    batch.in_cq += [True] * n
    batch.tags_code += [codes[t] for t in tags]
    batch.uniq += uniqs
    batch.keys += keys
    batch.rollback += [False] * n
    batch.store_host += [LOCALHOST] * n
    batch.store_port += [DEFAULT_STORE_PORT] * n
    batch.body_len += blens
    batch.size += sizes


def _properties(keys: list, tags: list, uniqs: list) -> tuple[list, list] | None:
    """The properties bytes of each message and their lengths, or None when a value holds a separator, is not
    valid Unicode, or the text is too long (add_json says which)."""
    shapes = {(k is not None, t is not None) for k, t in zip(keys, tags)}
    fmts = {s: (SHAPES.get(s) or shape_info(*s)) for s in shapes}
    if len(shapes) == 1:
        (fmt, per), = fmts.values()
        texts = list(map(fmt, keys, tags, uniqs))
        expect = per * len(texts)
    else:
        texts = [fmts[(k is not None, t is not None)][0](k, t, u) for k, t, u in zip(keys, tags, uniqs)]
        expect = sum(fmts[(k is not None, t is not None)][1] for k, t in zip(keys, tags))
    joined = "".join(texts)
    if joined.count(NAME_VALUE_SEPARATOR) != expect or joined.count(PROPERTY_SEPARATOR) != expect:
        return None
    try:
        praws = list(map(str.encode, texts))
    except UnicodeEncodeError:
        return None
    plens = list(map(len, praws))
    if max(plens) > MAX_PROPERTIES_LEN:
        return None
    return praws, plens
