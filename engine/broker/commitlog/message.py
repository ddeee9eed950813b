"""CommitLog message record codec (format §2).

decode: bytes at a record start -> CheckResult (VALID / BLANK / CORRUPT / LENGTH_MISMATCH), as the
broker's checkMessageAndReturnSize classifies them (format §2.7). encode: MessageRecord -> bytes, as
MessageExtEncoder writes them (format §2.2, §2.6).
"""
from __future__ import annotations

import base64
import ipaddress
import os
import random
import struct
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime

from engine.broker.commitlog.compression import Body, codec_of, decode_body
from engine.broker.index.keys import broker_index_keys, split_keys
from engine.errors import InvalidArgumentError
from engine.java.collections import hashset_order
from engine.java.lang import java_string_hash, rmq_crc32

MESSAGE_MAGIC_CODE = -626843481      # 0xDAA320A7, v1: 1-byte topic length
MESSAGE_MAGIC_CODE_V2 = -626843477   # 0xDAA320AB, v2: 2-byte topic length (5.1.0+)
BLANK_MAGIC_CODE = -875286124        # 0xCBD43194, end-of-segment filler
END_FILE_MIN_BLANK_LENGTH = 8

# SYSFLAG bits (format §2.3); COMPRESSED_FLAG and the codec bits live with the body codecs (compression.py)
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
TX_TYPE_NAMES = {0x0: "NOT_TYPE", 0x4: "PREPARED", 0x8: "COMMIT", 0xC: "ROLLBACK"}

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
PROP_KEYS = "KEYS"
PROP_TAGS = "TAGS"
PROP_UNIQ_KEY = "UNIQ_KEY"
PROP_DELAY = "DELAY"
#: The real topic and queue of a message parked in a system topic (delay level, timer, transaction half).
PROP_REAL_TOPIC = "REAL_TOPIC"
PROP_REAL_QID = "REAL_QID"
PROP_CRC32 = "__CRC32#"
CRC32_RESERVED_LEN = len(PROP_CRC32) + 1 + 10 + 1  # 20
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC: the half message of a transaction waits here until committed.
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

MAX_PROPERTIES_LEN = 32767

VALID, BLANK, CORRUPT, LENGTH_MISMATCH = "VALID", "BLANK", "CORRUPT", "LENGTH_MISMATCH"

_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">iiiiiqqiq")  # totalSize..bornTimestamp: 4+4+4+4+4+8+8+4+8 = 48 bytes


class MessageEncodeError(ValueError):
    """A message that the broker would refuse to store."""


def host_len(sys_flag: int, v6_flag: int) -> int:
    return 20 if sys_flag & v6_flag else 8


def cal_msg_length(v2: bool, sys_flag: int, body_len: int, topic_len: int, props_len: int) -> int:
    """calMsgLength (format §2.2)."""
    b = host_len(sys_flag, BORNHOST_V6_FLAG)
    s = host_len(sys_flag, STOREHOSTADDRESS_V6_FLAG)
    return 72 + b + s + max(body_len, 0) + (2 if v2 else 1) + topic_len + 2 + max(props_len, 0)


# ---------------------------------------------------------------- hosts

def format_host(addr: bytes, port: int) -> str:
    """Java-style host:port; IPv6 groups uncompressed as Inet6Address.getHostAddress prints them."""
    if len(addr) == 4:
        return f"{addr[0]}.{addr[1]}.{addr[2]}.{addr[3]}:{port}"
    groups = ":".join(format(int.from_bytes(addr[i:i + 2], "big"), "x") for i in range(0, 16, 2))
    return f"[{groups}]:{port}"


def parse_host(text: str) -> tuple[bytes, int]:
    """'1.2.3.4:5', '[::1]:5' or a bare address (port 0) -> (address bytes, port)."""
    text = text.strip()
    port = 0
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"bad host {text!r}: missing ']'")
        addr_s, rest = text[1:end], text[end + 1:]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"bad host {text!r}")
            port = int(rest[1:])
    elif text.count(":") == 1:
        addr_s, port_s = text.split(":")
        port = int(port_s)
    else:
        addr_s = text
    try:
        addr = ipaddress.ip_address(addr_s).packed
    except ValueError:
        raise ValueError(f"bad host {text!r}: not an IP address") from None
    if not 0 <= port <= 0x7FFFFFFF:
        raise ValueError(f"bad host {text!r}: port out of range")
    return addr, port


# ---------------------------------------------------------------- properties

def parse_properties(text: str) -> dict[str, str]:
    """Index-based parser of 4.9.1+/5.x (format §2.5): only the first 0x01 splits; empty names/values dropped."""
    out: dict[str, str] = {}
    for pair in text.split(PROPERTY_SEPARATOR):
        # partition splits at the first 0x01 of the pair, as the broker's indexOf does; a pair without one has
        # an empty value and is dropped with the empty ones
        name, _, value = pair.partition(NAME_VALUE_SEPARATOR)
        if name and value:
            out[name] = value
    return out


def serialize_properties(props: dict[str, str], trailing_separator: bool = True) -> str:
    """messageProperties2String: Java HashMap order, entries with a None value skipped.

    A HEAD (5.2.0+) broker ends the text with 0x02; 4.9.1-5.1.x brokers do not (format §2.5).
    """
    parts = []
    for name in hashset_order(list(props)):
        value = props[name]
        if value is None:
            continue
        parts.append(f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}")
    text = "".join(parts)
    if not trailing_separator and text.endswith(PROPERTY_SEPARATOR):
        text = text[:-1]
    return text


_DELAY_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(spec: str = DEFAULT_DELAY_LEVELS) -> list[int]:
    """ScheduleMessageService.parseDelayLevel: levels split on single spaces, each a number and a unit s/m/h/d.
    Anything it would fail on (the broker then does not start) is an InvalidArgumentError."""
    levels = []
    parts = spec.split(" ")
    while parts and parts[-1] == "":
        parts.pop()  # Java's split drops trailing empty strings
    for i, tok in enumerate(parts, 1):
        unit = _DELAY_UNITS_MS.get(tok[-1:])
        num = tok[:-1]
        if unit is None or not num.lstrip("+-").isdigit():
            raise InvalidArgumentError(f"messageDelayLevel {spec!r}: level {i} is {tok!r}, not a number followed by "
                                       "s, m, h or d (the broker would not start)")
        levels.append(int(num) * unit)
    if not levels:
        raise InvalidArgumentError(f"messageDelayLevel {spec!r} names no level")
    return levels


_DELAY_MS = parse_delay_levels()


def tags_code(topic: str, tags: str | None, props: dict[str, str], store_timestamp: int) -> int:
    """The consume-queue tagsCode (format §2.7 step 7)."""
    if topic == SCHEDULE_TOPIC and PROP_DELAY in props:
        try:
            level = int(props[PROP_DELAY])
        except ValueError:
            level = 0
        level = min(level, len(_DELAY_MS))
        if level > 0:
            return store_timestamp + _DELAY_MS[level - 1]
    if tags:
        return java_string_hash(tags)
    return 0


# ---------------------------------------------------------------- ids

def offset_msg_id(store_host: bytes, store_port: int, phy_offset: int) -> str:
    """offsetMsgId (format §2.10): store address + port + physical offset, uppercase hex."""
    return (store_host + struct.pack(">iq", store_port, phy_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[bytes, int, int]:
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ValueError(f"bad message id {msg_id!r}: not hex") from None
    if len(raw) not in (16, 28):
        raise ValueError(f"bad message id {msg_id!r}: expected 32 (IPv4) or 56 (IPv6) hex digits")
    addr_len = len(raw) - 12
    port, offset = struct.unpack(">iq", raw[addr_len:])
    return raw[:addr_len], port, offset


class UniqKeyGenerator:
    """MessageClientIDSetter's format: IP(4) + pid(2) + classloader hash(4) + ms since month start(4) + counter(2)."""

    def __init__(self, ip: bytes = b"\x7f\x00\x00\x01"):
        self._lock = threading.Lock()
        self._prefix = (ip[-4:] + struct.pack(">H", os.getpid() & 0xFFFF)
                        + struct.pack(">i", random.getrandbits(31))).hex().upper()
        self._counter = random.getrandbits(16)
        now = datetime.now()
        self._month_start = int(datetime(now.year, now.month, 1).timestamp() * 1000)

    def next(self) -> str:
        with self._lock:
            self._counter = (self._counter + 1) & 0xFFFF
            delta = (int(time.time() * 1000) - self._month_start) & 0xFFFFFFFF
            return self._prefix + struct.pack(">IH", delta, self._counter).hex().upper()

    def next_block(self, n: int) -> tuple[str, int]:
        """Reserve n ids at once: (prefix with the current time, first counter); id j of the block is
        f"{prefix}{(first + j) & 0xFFFF:04X}" (the batch write path formats them itself)."""
        with self._lock:
            first = (self._counter + 1) & 0xFFFF
            self._counter = (self._counter + n) & 0xFFFF
            delta = (int(time.time() * 1000) - self._month_start) & 0xFFFFFFFF
            return self._prefix + f"{delta:08X}", first


# ---------------------------------------------------------------- record

@dataclass
class MessageRecord:
    topic: str
    body: bytes = b""
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    physical_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = b"\x7f\x00\x00\x01"
    born_port: int = 0
    store_timestamp: int = 0
    store_host: bytes = b"\x7f\x00\x00\x01"
    store_port: int = 10911
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    properties: dict = field(default_factory=dict)
    # Filled by decode; encode recomputes them.
    total_size: int = 0
    body_crc: int = 0
    magic: int = MESSAGE_MAGIC_CODE
    properties_raw: bytes | None = None  # exact stored bytes, so decode -> encode is the identity
    prop_crc_valid: bool | None = None   # decode: does the optional __CRC32# property match the record?

    # -- derived views, in RocketMQ vocabulary
    @property
    def tags(self) -> str | None:
        return self.properties.get(PROP_TAGS)

    @property
    def keys(self) -> list[str]:
        return split_keys(self.properties.get(PROP_KEYS))

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROP_UNIQ_KEY)

    @property
    def tx_type(self) -> int:
        return self.sys_flag & 0xC

    @property
    def is_v2(self) -> bool:
        return self.magic == MESSAGE_MAGIC_CODE_V2

    @property
    def msg_id(self) -> str:
        return offset_msg_id(self.store_host, self.store_port, self.physical_offset)

    @property
    def born_host_str(self) -> str:
        return format_host(self.born_host, self.born_port)

    @property
    def store_host_str(self) -> str:
        return format_host(self.store_host, self.store_port)

    def index_keys(self) -> list[str]:
        """The `topic#key` strings the broker's IndexService puts for this record (format §5.8)."""
        return broker_index_keys(self.topic, self.uniq_key, self.properties.get(PROP_KEYS),
                                 self.tx_type == TRANSACTION_ROLLBACK_TYPE)

    def tags_code(self) -> int:
        return tags_code(self.topic, self.tags, self.properties, self.store_timestamp)

    def compression(self) -> str | None:
        """The codec SYSFLAG names (format §2.3), None for a body stored as it was sent."""
        return codec_of(self.sys_flag)

    def decoded_body(self) -> Body:
        """The body as the consumer receives it (engine.broker.commitlog.compression.decode_body)."""
        return decode_body(self.body, self.sys_flag)

    def prop_crc(self) -> int | None:
        """The value of the optional __CRC32# property (digits stored least significant first, format §2.6)."""
        v = self.properties.get(PROP_CRC32)
        if v is None or len(v) != 10 or not v.isdigit():
            return None
        return int(v[::-1])

    def to_json(self) -> dict:
        """MessageExt field names (issue 2)."""
        out = {
            "topic": self.topic,
            "queueId": self.queue_id,
            "queueOffset": self.queue_offset,
            "commitLogOffset": self.physical_offset,
            "storeSize": self.total_size,
            "storeTimestamp": self.store_timestamp,
            "bornTimestamp": self.born_timestamp,
            "bornHost": self.born_host_str,
            "storeHost": self.store_host_str,
            "sysFlag": self.sys_flag,
            "bodyCRC": self.body_crc,
            "flag": self.flag,
            "reconsumeTimes": self.reconsume_times,
            "preparedTransactionOffset": self.prepared_transaction_offset,
            "properties": dict(self.properties),
            "keys": self.keys,
            "tags": self.tags,
            "uniqKey": self.uniq_key,
            "msgId": self.msg_id,
            "magicVersion": "V2" if self.is_v2 else "V1",
            "transactionType": TX_TYPE_NAMES[self.tx_type],
        }
        if self.prop_crc_valid is not None:
            out["propertiesCRC"] = {"stored": self.prop_crc(), "valid": self.prop_crc_valid}
        dec = self.decoded_body()
        if dec.codec:
            out["compression"] = dec.codec
        if not dec.ok:
            # Never shown as the message: no body, the reason, and the bytes as stored (base64).
            out["compressionError"] = dec.error
            out["body"] = None
            out["storedBody"] = base64.b64encode(self.body).decode("ascii")
            return out
        try:
            out["body"] = dec.data.decode("utf-8")
        except UnicodeDecodeError:
            out["body"] = base64.b64encode(dec.data).decode("ascii")
            out["bodyEncoding"] = "base64"
        return out


@dataclass
class CheckResult:
    status: str           # VALID, BLANK, CORRUPT, LENGTH_MISMATCH
    size: int             # record size (VALID/LENGTH_MISMATCH), blank TOTALSIZE (BLANK), -1 (CORRUPT)
    record: MessageRecord | None = None
    reason: str = ""


def check_message(buf, pos: int = 0, end: int | None = None, check_crc: bool = True,
                  read_body: bool = True, force_verify_prop_crc: bool = False) -> CheckResult:
    """checkMessageAndReturnSize (format §2.7) over buf[pos:end]. Never raises on bad bytes."""
    if end is None:
        end = len(buf)
    remaining = end - pos
    if remaining <= 4:
        return CheckResult(CORRUPT, -1, reason="fewer than 5 bytes left")
    total = _I32.unpack_from(buf, pos)[0]
    if remaining < 8:
        return CheckResult(CORRUPT, -1, reason="fewer than 8 bytes left")
    magic = _I32.unpack_from(buf, pos + 4)[0]
    if magic == BLANK_MAGIC_CODE:
        return CheckResult(BLANK, total, reason="end-of-segment blank")
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        if total == 0 and magic == 0:
            return CheckResult(CORRUPT, -1, reason="zero bytes (end of data)")
        return CheckResult(CORRUPT, -1, reason=f"bad magic code 0x{magic & 0xFFFFFFFF:08X}")
    if total < 4 or total - 4 > remaining - 4:
        return CheckResult(CORRUPT, -1, reason=f"TOTALSIZE {total} runs past the end of data ({remaining} bytes left)")
    rend = pos + total
    try:
        return _decode_fields(buf, pos, rend, total, magic, check_crc, read_body, force_verify_prop_crc)
    except (struct.error, IndexError, ValueError) as e:
        return CheckResult(CORRUPT, -1, reason=f"undecodable record: {e}")


def _decode_fields(buf, pos, rend, total, magic, check_crc, read_body, force_verify_prop_crc) -> CheckResult:
    (_, _, body_crc, queue_id, flag, queue_offset, phy_offset, sys_flag, born_ts) = _HEAD.unpack_from(buf, pos)
    p = pos + 48
    bl = 16 if sys_flag & BORNHOST_V6_FLAG else 4
    sl = 16 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 4
    _need(p + bl + 4 + 8 + sl + 4 + 4 + 8 + 4, rend)
    born_host = bytes(buf[p:p + bl]); p += bl
    born_port = _I32.unpack_from(buf, p)[0]; p += 4
    store_ts = struct.unpack_from(">q", buf, p)[0]; p += 8
    store_host = bytes(buf[p:p + sl]); p += sl
    store_port, reconsume = struct.unpack_from(">ii", buf, p); p += 8
    prepared = struct.unpack_from(">q", buf, p)[0]; p += 8
    body_len = _I32.unpack_from(buf, p)[0]; p += 4
    body = b""
    if body_len > 0:
        _need(p + body_len, rend)
        if read_body:
            body = bytes(buf[p:p + body_len])
            if check_crc and not force_verify_prop_crc and rmq_crc32(body) != body_crc:
                return CheckResult(CORRUPT, -1, reason=f"body CRC mismatch (stored {body_crc}, computed {rmq_crc32(body)})")
        p += body_len
    v2 = magic == MESSAGE_MAGIC_CODE_V2
    if v2:
        _need(p + 2, rend)
        topic_len = struct.unpack_from(">h", buf, p)[0]; p += 2
    else:
        _need(p + 1, rend)
        topic_len = struct.unpack_from(">b", buf, p)[0]; p += 1
    if topic_len < 0:
        return CheckResult(CORRUPT, -1, reason=f"negative topic length {topic_len}")
    _need(p + topic_len + 2, rend)
    topic = bytes(buf[p:p + topic_len]).decode("utf-8", "replace"); p += topic_len
    props_len = struct.unpack_from(">h", buf, p)[0]; p += 2
    props_raw = b""
    props: dict[str, str] = {}
    if props_len > 0:
        _need(p + props_len, rend)
        props_raw = bytes(buf[p:p + props_len])
        props = parse_properties(props_raw.decode("utf-8", "replace"))
    rec = MessageRecord(
        topic=topic, body=body, queue_id=queue_id, flag=flag, queue_offset=queue_offset,
        physical_offset=phy_offset, sys_flag=sys_flag, born_timestamp=born_ts, born_host=born_host,
        born_port=born_port, store_timestamp=store_ts, store_host=store_host, store_port=store_port,
        reconsume_times=reconsume, prepared_transaction_offset=prepared, properties=props,
        total_size=total, body_crc=body_crc, magic=magic, properties_raw=props_raw,
    )
    if PROP_CRC32 in props:
        stored = rec.prop_crc()
        rec.prop_crc_valid = stored is not None and stored == rmq_crc32(
            bytes(buf[rend - total:rend - CRC32_RESERVED_LEN]))
    if check_crc and force_verify_prop_crc and not rec.prop_crc_valid:
        return CheckResult(CORRUPT, -1, rec, reason="whole-record __CRC32# property missing or wrong")
    expected = cal_msg_length(v2, sys_flag, body_len, topic_len, props_len)
    if expected != total:
        return CheckResult(LENGTH_MISMATCH, total, rec, reason=f"TOTALSIZE {total} but fields add up to {expected}")
    return CheckResult(VALID, total, rec)


def _need(upto: int, rend: int) -> None:
    if upto > rend:
        raise ValueError("field runs past TOTALSIZE")


def encode_record(rec: MessageRecord, trailing_separator: bool = True, append_prop_crc: bool = False,
                  v2: bool | None = None) -> bytes:
    """MessageExtEncoder.encode: the stored bytes of `rec` (its physical/queue offsets as set).

    Uses rec.properties_raw when present (exact round trip), else serialises rec.properties.
    v2 defaults to the broker's rule: Java String.length() of the topic > 127 (format §2.4).
    """
    if append_prop_crc:
        props = {k: v for k, v in rec.properties.items() if k != PROP_CRC32}
        text = serialize_properties(props, True)
        if text and not text.endswith(PROPERTY_SEPARATOR):
            text += PROPERTY_SEPARATOR
        props_raw = text.encode("utf-8")
        props_len = len(props_raw) + CRC32_RESERVED_LEN
    else:
        if rec.properties_raw is not None:
            props_raw = rec.properties_raw
        else:
            props_raw = serialize_properties(rec.properties, trailing_separator).encode("utf-8")
        props_len = len(props_raw)
    if props_len > MAX_PROPERTIES_LEN:
        raise MessageEncodeError(f"properties are {props_len} bytes; the broker's limit is {MAX_PROPERTIES_LEN}")
    topic_raw = rec.topic.encode("utf-8")
    if v2 is None:
        v2 = rec.magic == MESSAGE_MAGIC_CODE_V2 if rec.properties_raw is not None else \
            len(rec.topic.encode("utf-16-le", "surrogatepass")) // 2 > 127
    if len(topic_raw) > (32767 if v2 else 127):
        raise MessageEncodeError(f"topic is {len(topic_raw)} bytes; too long for a {'v2' if v2 else 'v1'} record")
    sys_flag = rec.sys_flag
    born_host, store_host = rec.born_host, rec.store_host
    # The broker sets the v6 bits from the socket addresses (format §2.3).
    sys_flag = (sys_flag | BORNHOST_V6_FLAG) if len(born_host) == 16 else (sys_flag & ~BORNHOST_V6_FLAG)
    sys_flag = (sys_flag | STOREHOSTADDRESS_V6_FLAG) if len(store_host) == 16 else (sys_flag & ~STOREHOSTADDRESS_V6_FLAG)
    body = rec.body or b""
    total = cal_msg_length(v2, sys_flag, len(body), len(topic_raw), props_len)
    parts = [
        struct.pack(">iiiiiqqiq", total, MESSAGE_MAGIC_CODE_V2 if v2 else MESSAGE_MAGIC_CODE,
                    rmq_crc32(body) if body else 0, rec.queue_id, rec.flag, rec.queue_offset,
                    rec.physical_offset, sys_flag, rec.born_timestamp),
        born_host, struct.pack(">iq", rec.born_port, rec.store_timestamp),
        store_host, struct.pack(">iiqi", rec.store_port, rec.reconsume_times,
                                rec.prepared_transaction_offset, len(body)),
        body,
        struct.pack(">h", len(topic_raw)) if v2 else struct.pack(">b", len(topic_raw)),
        topic_raw, struct.pack(">h", props_len), props_raw,
    ]
    data = b"".join(parts)
    if append_prop_crc:
        c = rmq_crc32(data)
        digits = "".join(str((c // 10 ** k) % 10) for k in range(10))
        data += f"{PROP_CRC32}{NAME_VALUE_SEPARATOR}{digits}{PROPERTY_SEPARATOR}".encode("ascii")
    assert len(data) == total
    return data


def blank_record(remaining: int) -> bytes:
    """The 8 bytes written at the end of a full segment (format §3.1)."""
    return struct.pack(">ii", remaining, BLANK_MAGIC_CODE)


_FIELD_HEADS = {(bl, sl): struct.Struct(f">iiiiiqqiq{bl}siq{sl}siiqi") for bl in (4, 16) for sl in (4, 16)}
_I16 = struct.Struct(">h")


class Fields:
    """The decoded header fields, body, topic and properties text of one well-formed record, without building a
    MessageRecord (the text views of engine.views.recordjson read these)."""
    __slots__ = ("total", "magic", "body_crc", "queue_id", "flag", "queue_offset", "phy", "sys_flag", "born_ts",
                 "born_host", "born_port", "store_ts", "store_host", "store_port", "reconsume", "prepared", "body",
                 "topic_raw", "props_text")


def decode_fields(buf, pos: int) -> Fields:
    """The fields of the VALID record at buf[pos:] (the caller has checked it)."""
    sys_flag = struct.unpack_from(">i", buf, pos + 36)[0]
    st = _FIELD_HEADS[(16 if sys_flag & 0x10 else 4, 16 if sys_flag & 0x20 else 4)]
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
        tl = _I16.unpack_from(buf, p)[0]
        p += 2
    else:
        tl = buf[p]
        p += 1
    f.topic_raw = bytes(buf[p:p + tl])
    p += tl
    pl = _I16.unpack_from(buf, p)[0]
    p += 2
    f.props_text = bytes(buf[p:p + pl]).decode("utf-8", "replace") if pl > 0 else ""
    return f
