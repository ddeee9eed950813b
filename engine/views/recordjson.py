"""Fast text views of stored records for the read commands (dump-commitlog, get): one NDJSON line or one table
row per record, straight from the record's bytes, without building a MessageRecord.

`json_line` returns exactly `json.dumps(record.to_json(), ensure_ascii=False)` (tested byte for byte); records
it does not cover (compressed bodies, the __CRC32# property) go through MessageRecord.to_json. What depends only
on a topic, a host or a second of store time is formatted once and cached.
"""
from __future__ import annotations

import base64
import json
import re
import struct
from itertools import repeat
from json.encoder import encode_basestring as _q

import numpy as np

from engine.broker.commitlog.compression import COMPRESSED_FLAG
from engine.broker.commitlog.message import (MESSAGE_MAGIC_CODE_V2, PROP_CRC32, PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY,
                                             TX_TYPE_NAMES, check_message, decode_fields, format_host)
from engine.broker.commitlog.records import gather
from engine.views.times import local_time

CACHE_LIMIT = 1 << 14
_topics: dict[bytes, str] = {}
_hosts: dict[tuple[bytes, int], str] = {}
_id_prefix: dict[tuple[bytes, int], str] = {}


def parse_props(text: str) -> dict[str, str]:
    """engine.broker.commitlog.message.parse_properties (the 4.9.1+/5.x index-based parser), split-based for speed."""
    out: dict[str, str] = {}
    for ent in text.split("\x02"):
        if len(ent) >= 3:
            k = ent.find("\x01")
            if 0 < k < len(ent) - 1:
                out[ent[:k]] = ent[k + 1:]
    return out


def _topic(raw: bytes) -> str:
    t = _topics.get(raw)
    if t is None:
        if len(_topics) > CACHE_LIMIT:
            _topics.clear()
        t = _topics[raw] = raw.decode("utf-8", "replace")
    return t


def _host(addr: bytes, port: int) -> str:
    h = _hosts.get((addr, port))
    if h is None:
        if len(_hosts) > CACHE_LIMIT:
            _hosts.clear()
        h = _hosts[(addr, port)] = format_host(addr, port)
    return h


def msg_id(store_host: bytes, store_port: int, phy: int) -> str:
    """offsetMsgId (format §2.10)."""
    p = _id_prefix.get((store_host, store_port))
    if p is None:
        if len(_id_prefix) > CACHE_LIMIT:
            _id_prefix.clear()
        p = _id_prefix[(store_host, store_port)] = (store_host + struct.pack(">i", store_port)).hex().upper()
    return f"{p}{phy:016X}" if phy >= 0 else p + struct.pack(">q", phy).hex().upper()


def split_keys_fast(k: str | None) -> list[str]:
    """engine.broker.index.keys.split_keys: Java's split on " " (trailing empty tokens dropped)."""
    if not k:
        return []
    parts = k.split(" ")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def json_line(buf, pos: int, extra: str = "", body: str = "auto") -> str:
    """json.dumps(MessageRecord.to_json() | extra, ensure_ascii=False) for the VALID record at buf[pos:];
    `extra` is already-encoded `, "name": value` text appended before the closing brace; `body` is a BODY_MODES
    name (auto: as to_json)."""
    f = decode_fields(buf, pos)
    props = parse_props(f.props_text)
    if f.sys_flag & COMPRESSED_FLAG or PROP_CRC32 in props:
        rec = check_message(buf, pos, check_crc=False).record
        j = rec.to_json()
        if body != "auto" and "compressionError" not in j:  # a body that does not decode stays null
            j.pop("bodyEncoding", None)
            del j["body"]
            raw = rec.decoded_body().data
            return json.dumps(j, ensure_ascii=False)[:-1] + ', "body": ' + body_json(raw, extra, body) + "}"
        return json.dumps(j, ensure_ascii=False)[:-1] + extra + "}"
    prop_json = ", ".join([f"{_q(k)}: {_q(v)}" for k, v in props.items()])
    keys = split_keys_fast(props.get(PROP_KEYS))
    tags, uniq = props.get(PROP_TAGS), props.get(PROP_UNIQ_KEY)
    return (f'{{"topic": {_q(_topic(f.topic_raw))}, "queueId": {f.queue_id}, "queueOffset": {f.queue_offset}, '
            f'"commitLogOffset": {f.phy}, "storeSize": {f.total}, "storeTimestamp": {f.store_ts}, '
            f'"bornTimestamp": {f.born_ts}, "bornHost": "{_host(f.born_host, f.born_port)}", '
            f'"storeHost": "{_host(f.store_host, f.store_port)}", "sysFlag": {f.sys_flag}, "bodyCRC": {f.body_crc}, '
            f'"flag": {f.flag}, "reconsumeTimes": {f.reconsume}, "preparedTransactionOffset": {f.prepared}, '
            f'"properties": {{{prop_json}}}, "keys": [{", ".join(map(_q, keys))}], '
            f'"tags": {"null" if tags is None else _q(tags)}, "uniqKey": {"null" if uniq is None else _q(uniq)}, '
            f'"msgId": "{msg_id(f.store_host, f.store_port, f.phy)}", '
            f'"magicVersion": "{"V2" if f.magic == MESSAGE_MAGIC_CODE_V2 else "V1"}", '
            f'"transactionType": "{TX_TYPE_NAMES[f.sys_flag & 0xC]}", "body": {body_json(f.body, extra, body)}}}')


def table_cells(buf, pos: int) -> tuple:
    """(size, storeTime, topic, queueId, queueOffset, keys, msgId) of the VALID record at buf[pos:]."""
    f = decode_fields(buf, pos)
    props = parse_props(f.props_text)
    return (f.total, local_time(f.store_ts), _topic(f.topic_raw), f.queue_id, f.queue_offset,
            " ".join(split_keys_fast(props.get(PROP_KEYS))), msg_id(f.store_host, f.store_port, f.phy))


# ------------------------------------------------------------------------------------------ many at once

#: parse_properties as a regular expression: a name (no separator) and, after the first \u0001, a value up to
#: the next \u0002; entries with an empty name or value, or without \u0001, match nothing (format §2.5).
PROP_RE = re.compile("([^\x01\x02]+)\x01([^\x02]+)")

_hosts4: dict[tuple[int, int], tuple[str, str]] = {}


def host4(ip: int, port: int) -> tuple[str, str]:
    """(host:port text, offsetMsgId prefix) of an IPv4 address given as an unsigned int."""
    h = _hosts4.get((ip, port))
    if h is None:
        if len(_hosts4) > CACHE_LIMIT:
            _hosts4.clear()
        addr = ip.to_bytes(4, "big")
        h = _hosts4[(ip, port)] = (format_host(addr, port), (addr + struct.pack(">i", port)).hex().upper())
    return h


def _run_fields(run):
    """Columns every view needs, or None when a record of the run needs the one-record path (IPv6 hosts, a
    compressed body, the __CRC32# property)."""
    b, buf = run.batch, run.buf
    if (b.sys_flag & (COMPRESSED_FLAG | 0x30)).any():
        return None
    ends = (b.props_pos + np.maximum(b.props_len, 0)).tolist()
    raw_props = list(map(buf.__getitem__, map(slice, b.props_pos.tolist(), ends)))
    texts = list(map(bytes.decode, raw_props, repeat("utf-8"), repeat("replace")))
    props = list(map(dict, map(PROP_RE.findall, texts)))
    if any(PROP_CRC32 in d for d in props):
        return None
    raw_topics = list(map(buf.__getitem__, map(slice, b.topic_pos.tolist(), (b.topic_pos + b.topic_len).tolist())))
    store = _hosts_of(buf, b.pos, 64)
    return props, raw_topics, store, texts


# Properties text that JSON shows as it is: every entry "name\x01value\x02" with a non-empty name and value and no
# character json escapes (", \\, controls). Such a text (with no name twice) is turned into its JSON object by
# replacing the separators, which is what the per-entry encoding gives for it.
CLEAN_PROPS = re.compile('(?:[^\x00-\x1f"\\\\]+\x01[^\x00-\x1f"\\\\]+\x02)*')


def props_json(text: str, d: dict, clean: bool) -> str:
    if clean:
        return '{"' + text[:-1].replace("\x01", '": "').replace("\x02", '", "') + '"}' if d else "{}"
    return "{" + ", ".join([f"{_q(k)}: {_q(v)}" for k, v in d.items()]) + "}"


def keys_json(keys: str | None, clean: bool) -> str:
    """The "keys" array: Java's split on " " (trailing empty tokens dropped), as split_keys_fast."""
    if not keys:
        return "[]"
    if clean:
        k = keys.rstrip(" ")
        return '["' + k.replace(" ", '", "') + '"]' if k else "[]"
    return "[" + ", ".join(map(_q, split_keys_fast(keys))) + "]"


def quoted_topic(raw: bytes) -> str:
    q = _quoted_topics.get(raw)
    if q is None:
        if len(_quoted_topics) > CACHE_LIMIT:
            _quoted_topics.clear()
        q = _quoted_topics[raw] = _q(_topic(raw))
    return q


_quoted_topics: dict[bytes, str] = {}


def _hosts_of(buf, pos: np.ndarray, rel: int) -> list[tuple[str, str]]:
    """host4 of the IPv4 address at rel and the port after it, for every record (one lookup when all agree)."""
    ips, ports = gather(buf, pos, rel, ">u4"), gather(buf, pos, rel + 4, ">i4")
    if ips.count(ips[0]) == len(ips) and ports.count(ports[0]) == len(ports):
        return [host4(ips[0], ports[0])] * len(ips)
    return list(map(host4, ips, ports))


def run_table_rows(run) -> list[tuple]:
    """(offset, size, storeTime, topic, queueId, queueOffset, msgId, keys) for every record of a RecordRun
    (the cells of table_cells)."""
    b, buf = run.batch, run.buf
    offsets = (run.seg_start + b.pos).tolist()
    f = _run_fields(run)
    if f is None:
        return [(o, *(c[i] for i in (0, 1, 2, 3, 4, 6, 5))) for o, c in
                zip(offsets, (table_cells(buf, p) for p in b.pos.tolist()))]
    props, raw_topics, store, _ = f
    ids = [f"{h[1]}{p:016X}" for h, p in zip(store, b.phy.tolist())]
    keys = [" ".join(split_keys_fast(d.get(PROP_KEYS))) for d in props]
    return list(zip(offsets, b.total.tolist(), map(local_time, b.store_ts.tolist()), map(_topic, raw_topics),
                    b.queue_id.tolist(), b.queue_offset.tolist(), ids, keys))


def nullable_json(v: str | None) -> str:
    return "null" if v is None else _q(v)


def nullable_json_clean(v: str | None, clean: bool) -> str:
    if v is None:
        return "null"
    return '"' + v + '"' if clean else _q(v)


#: How a JSON line shows the body: auto (UTF-8 text, else base64 with "bodyEncoding"), utf8 (text, undecodable
#: bytes replaced by U+FFFD), hex, base64 (both with "bodyEncoding"), none (null).
BODY_MODES = ("auto", "utf8", "hex", "base64", "none")


def body_json(body: bytes, extra: str, mode: str = "auto") -> str:
    if mode == "auto":
        try:
            return _q(body.decode("utf-8")) + extra
        except UnicodeDecodeError:
            return '"' + base64.b64encode(body).decode("ascii") + '", "bodyEncoding": "base64"' + extra
    if mode == "utf8":
        return _q(body.decode("utf-8", "replace")) + extra
    if mode == "hex":
        return '"' + body.hex() + '", "bodyEncoding": "hex"' + extra
    if mode == "base64":
        return '"' + base64.b64encode(body).decode("ascii") + '", "bodyEncoding": "base64"' + extra
    if mode == "none":
        return "null" + extra
    raise ValueError(f"body mode {mode!r} is not one of {', '.join(BODY_MODES)}")
