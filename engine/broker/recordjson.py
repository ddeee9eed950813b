"""Fast text views of stored records for the read commands (dump-commitlog, get): one NDJSON line or one table
row per record, straight from the record's bytes, without building a MessageRecord.

`json_line` returns exactly `json.dumps(record.to_json(), ensure_ascii=False)` (tested byte for byte); records
it does not cover (compressed bodies, the __CRC32# property) go through MessageRecord.to_json. What depends only
on a topic, a host or a second of store time is formatted once and cached.
"""
from __future__ import annotations

import base64
import json
import struct
from datetime import datetime
from json.encoder import encode_basestring as _q

from engine.broker.message import (COMPRESSED_FLAG, MESSAGE_MAGIC_CODE_V2, PROP_CRC32, PROP_KEYS, PROP_TAGS,
                                   PROP_UNIQ_KEY, TX_TYPE_NAMES, check_message, format_host)

_HEADS = {(bl, sl): struct.Struct(f">iiiiiqqiq{bl}siq{sl}siiqi") for bl in (4, 16) for sl in (4, 16)}
_H = struct.Struct(">h")
_CACHE_LIMIT = 1 << 14
_topics: dict[bytes, str] = {}
_hosts: dict[tuple[bytes, int], str] = {}
_id_prefix: dict[tuple[bytes, int], str] = {}
_seconds: dict[int, str] = {}


class Fields:
    """The decoded header and byte ranges of one well-formed record (what both views need)."""
    __slots__ = ("total", "magic", "body_crc", "queue_id", "flag", "queue_offset", "phy", "sys_flag", "born_ts",
                 "born_host", "born_port", "store_ts", "store_host", "store_port", "reconsume", "prepared", "body",
                 "topic_raw", "props_text")


def decode_fields(buf, pos: int) -> Fields:
    """The fields of the VALID record at buf[pos:] (the caller has checked it)."""
    sys_flag = struct.unpack_from(">i", buf, pos + 36)[0]
    st = _HEADS[(16 if sys_flag & 0x10 else 4, 16 if sys_flag & 0x20 else 4)]
    f = Fields()
    (f.total, f.magic, f.body_crc, f.queue_id, f.flag, f.queue_offset, f.phy, f.sys_flag, f.born_ts, f.born_host,
     f.born_port, f.store_ts, f.store_host, f.store_port, f.reconsume, f.prepared, blen) = st.unpack_from(buf, pos)
    p = pos + st.size
    if blen > 0:
        f.body = bytes(buf[p:p + blen])
        p += blen
    else:
        f.body = b""
    if f.magic == MESSAGE_MAGIC_CODE_V2:
        tl = _H.unpack_from(buf, p)[0]
        p += 2
    else:
        tl = buf[p]
        p += 1
    f.topic_raw = bytes(buf[p:p + tl])
    p += tl
    pl = _H.unpack_from(buf, p)[0]
    p += 2
    f.props_text = bytes(buf[p:p + pl]).decode("utf-8", "replace") if pl > 0 else ""
    return f


def parse_props(text: str) -> dict[str, str]:
    """engine.broker.message.parse_properties (the 4.9.1+/5.x index-based parser), split-based for speed."""
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
        if len(_topics) > _CACHE_LIMIT:
            _topics.clear()
        t = _topics[raw] = raw.decode("utf-8", "replace")
    return t


def _host(addr: bytes, port: int) -> str:
    h = _hosts.get((addr, port))
    if h is None:
        if len(_hosts) > _CACHE_LIMIT:
            _hosts.clear()
        h = _hosts[(addr, port)] = format_host(addr, port)
    return h


def msg_id(store_host: bytes, store_port: int, phy: int) -> str:
    """offsetMsgId (format §2.10)."""
    p = _id_prefix.get((store_host, store_port))
    if p is None:
        if len(_id_prefix) > _CACHE_LIMIT:
            _id_prefix.clear()
        p = _id_prefix[(store_host, store_port)] = (store_host + struct.pack(">i", store_port)).hex().upper()
    return f"{p}{phy:016X}" if phy >= 0 else p + struct.pack(">q", phy).hex().upper()


def split_keys_fast(k: str | None) -> list[str]:
    """engine.broker.keys.split_keys: Java's split on " " (trailing empty tokens dropped)."""
    if not k:
        return []
    parts = k.split(" ")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def json_line(buf, pos: int, extra: str = "") -> str:
    """json.dumps(MessageRecord.to_json() | extra, ensure_ascii=False) for the VALID record at buf[pos:];
    `extra` is already-encoded `, "name": value` text appended before the closing brace."""
    f = decode_fields(buf, pos)
    props = parse_props(f.props_text)
    if f.sys_flag & COMPRESSED_FLAG or PROP_CRC32 in props:
        j = check_message(buf, pos, check_crc=False).record.to_json()
        return json.dumps(j, ensure_ascii=False)[:-1] + extra + "}"
    prop_json = ", ".join([f"{_q(k)}: {_q(v)}" for k, v in props.items()])
    keys = split_keys_fast(props.get(PROP_KEYS))
    tags, uniq = props.get(PROP_TAGS), props.get(PROP_UNIQ_KEY)
    try:
        body = _q(f.body.decode("utf-8"))
        enc = ""
    except UnicodeDecodeError:
        body = '"' + base64.b64encode(f.body).decode("ascii") + '"'
        enc = ', "bodyEncoding": "base64"'
    return (f'{{"topic": {_q(_topic(f.topic_raw))}, "queueId": {f.queue_id}, "queueOffset": {f.queue_offset}, '
            f'"commitLogOffset": {f.phy}, "storeSize": {f.total}, "storeTimestamp": {f.store_ts}, '
            f'"bornTimestamp": {f.born_ts}, "bornHost": "{_host(f.born_host, f.born_port)}", '
            f'"storeHost": "{_host(f.store_host, f.store_port)}", "sysFlag": {f.sys_flag}, "bodyCRC": {f.body_crc}, '
            f'"flag": {f.flag}, "reconsumeTimes": {f.reconsume}, "preparedTransactionOffset": {f.prepared}, '
            f'"properties": {{{prop_json}}}, "keys": [{", ".join(map(_q, keys))}], '
            f'"tags": {"null" if tags is None else _q(tags)}, "uniqKey": {"null" if uniq is None else _q(uniq)}, '
            f'"msgId": "{msg_id(f.store_host, f.store_port, f.phy)}", '
            f'"magicVersion": "{"V2" if f.magic == MESSAGE_MAGIC_CODE_V2 else "V1"}", '
            f'"transactionType": "{TX_TYPE_NAMES[f.sys_flag & 0xC]}", "body": {body}{enc}{extra}}}')


def fmt_time(ms: int) -> str:
    """Epoch ms -> local ISO-8601 with milliseconds (as rmqtool.render.fmt_time), cached per second."""
    if ms <= 0:
        return str(ms)
    sec, milli = divmod(ms, 1000)
    s = _seconds.get(sec)
    if s is None:
        try:
            iso = datetime.fromtimestamp(sec).astimezone().isoformat(timespec="milliseconds")
        except (OverflowError, OSError, ValueError):
            return str(ms)
        if len(_seconds) > _CACHE_LIMIT:
            _seconds.clear()
        s = _seconds[sec] = iso  # "...T12:00:00.000+01:00": the milliseconds are put in below
    return f"{s[:20]}{milli:03d}{s[23:]}"


def table_cells(buf, pos: int) -> tuple:
    """(size, storeTime, topic, queueId, queueOffset, keys, msgId) of the VALID record at buf[pos:]."""
    f = decode_fields(buf, pos)
    props = parse_props(f.props_text)
    return (f.total, fmt_time(f.store_ts), _topic(f.topic_raw), f.queue_id, f.queue_offset,
            " ".join(split_keys_fast(props.get(PROP_KEYS))), msg_id(f.store_host, f.store_port, f.phy))
