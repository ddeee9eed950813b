"""Messages to put, checked and encoded as they are added: the write path's codec (format §2.2, §2.5, §2.6).

A MessageBatch holds messages that have passed every check a broker (or the JVM's int/long fields) would
apply, each already encoded into the exact bytes `encode_record` writes (tested byte for byte) except its
PHYSICALOFFSET and QUEUEOFFSET, which the put fills in once it knows where the record lands. The work that
depends only on a topic, a property-name set or a TAGS value is done once per process, not once per message.
"""
from __future__ import annotations

import base64
import operator
import struct
import time

from engine.broker.commitlog.compression import COMPRESSED_FLAG, BodyDecodeError, codec_of, encode_body
from engine.broker.commitlog.message import (MAX_PROPERTIES_LEN, NAME_VALUE_SEPARATOR, PROP_DELAY, PROP_KEYS,
                                             PROP_TAGS, PROP_UNIQ_KEY, PROPERTY_SEPARATOR, MessageEncodeError,
                                             MessageRecord, UniqKeyGenerator, parse_host, serialize_properties,
                                             tags_code)
from engine.broker.consumequeue.lmq import PROP_INNER_MULTI_DISPATCH
from engine.broker.layout import validate_queue_id
from engine.broker.write.encoding import (CACHE_LIMIT, DEFAULT_STORE_PORT, HEAD44, HEADS, LOCALHOST, SHAPES, TAGS,
                                          TOPICS, shape_info, tags_hash, topic_info)
from engine.errors import InvalidArgumentError
from engine.java.collections import hashset_order
from engine.java.crc import crc32
from engine.java.lang import INT_MAX, INT_MIN, LONG_MAX, LONG_MIN

DEFAULT_MAX_BODY = 4 * 1024 * 1024
#: QUEUEOFFSET (8 bytes) then PHYSICALOFFSET (8 bytes) start at this position of every record (format §2.1).
QUEUE_OFFSET_POS = 20
_LONG = struct.Struct(">q")


_INT_FIELDS = {"flag": "flag", "sysFlag": "sys_flag", "reconsumeTimes": "reconsume_times"}
_LONG_FIELDS = {"preparedTransactionOffset": "prepared_transaction_offset", "bornTimestamp": "born_timestamp",
                "storeTimestamp": "store_timestamp"}


def _java_integer(what: str, v, lo: int, hi: int, kind: str) -> int:
    if type(v) is not int:
        raise InvalidArgumentError(f"{what} must be an integer, not {v!r}")
    if not lo <= v <= hi:
        raise InvalidArgumentError(f"{what} {v} is out of range: it must fit a Java {kind} ({lo}..{hi})")
    return v


def java_int(what: str, v) -> int:
    """`v` as a Java int field, or a one-line InvalidArgumentError."""
    return _java_integer(what, v, INT_MIN, INT_MAX, "int")


def java_long(what: str, v) -> int:
    """`v` as a Java long field, or a one-line InvalidArgumentError."""
    return _java_integer(what, v, LONG_MIN, LONG_MAX, "long")


def check_store_timestamp(what: str, v) -> int:
    """A store time to put: a Java long of epoch milliseconds, 0 (now) or after; a negative one (before 1970) is
    refused: no broker's clock gives one, and the index files and time searches take store times as unsigned."""
    java_long(what, v)
    if v < 0:
        raise InvalidArgumentError(f"{what} {v} is negative: a store time is epoch milliseconds (0: now)")
    return v


def check_property_text(what: str, text) -> str:
    """Property names and values (KEYS and TAGS included) must not hold the separators of the properties
    text (format §2.5): a \\u0001 or \\u0002 inside would silently split or merge properties."""
    if type(text) is not str:
        raise InvalidArgumentError(f"{what} must be a string, not {text!r}")
    if NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text:
        raise InvalidArgumentError(f"{what} {text[:40]!r} contains a property separator (\\u0001 or \\u0002)")
    return text


def _host(what: str, text) -> tuple[bytes, int]:
    try:
        return parse_host(str(text))
    except ValueError as e:
        raise InvalidArgumentError(f"{what}: {e}") from None


_COMMON = frozenset(("topic", "body", "keys", "tags", "queueId", "storeTimestamp", "uniqKey", "properties"))
#: The fields a message object may have: what a put takes (README "Putting messages") ...
INPUT_FIELDS = _COMMON | {"bodyEncoding", "bornTimestamp", "flag", "sysFlag", "reconsumeTimes",
                          "preparedTransactionOffset", "bornHost", "storeHost"}
#: ... and what the JSON output of the read commands adds, which the store assigns or derives (a dump's lines can be
#: put again): any other field is probably a typo ("bodyy") and is refused.
OUTPUT_FIELDS = frozenset(("queueOffset", "commitLogOffset", "storeSize", "bodyCRC", "msgId", "magicVersion",
                           "transactionType", "propertiesCRC", "compression", "compressionError", "storedBody",
                           "type"))
MESSAGE_FIELDS = INPUT_FIELDS | OUTPUT_FIELDS

_PROPS: dict[tuple, tuple] = {}
_UNIQ: list = []  # [UniqKeyGenerator], made on first use (one per process, as MessageClientIDSetter is static)


def new_uniq_generator() -> None:
    """Make this process's UNIQ_KEYs with a generator of its own (its pid and random bits, as a second producer
    would): a forked process that encodes messages too would otherwise repeat its parent's ids."""
    _UNIQ[:] = [UniqKeyGenerator()]


def _props_info(names: tuple) -> tuple:
    """(format function, value getter, count) writing properties with these names in Java HashMap order, as
    serialize_properties does (trailing separator included, format §2.5)."""
    for n in names:
        check_property_text("property name", n)
        if not n:
            raise InvalidArgumentError("a property name is empty")
    order = hashset_order(list(names))
    tmpl = "".join(f"{n.replace('{', '{{').replace('}', '}}')}{NAME_VALUE_SEPARATOR}{{}}{PROPERTY_SEPARATOR}"
                   for n in order)
    if len(order) == 1:
        only = order[0]
        getter = lambda d: (d[only],)  # noqa: E731 - itemgetter of one name returns no tuple
    else:
        getter = operator.itemgetter(*order)
    if len(_PROPS) >= CACHE_LIMIT:
        _PROPS.clear()
    info = _PROPS[names] = (tmpl.format, getter, len(order))
    return info


_HEX4: list[str] = []


def _hex4() -> list[str]:
    """"0000" .. "FFFF": the counter part of every UNIQ_KEY, formatted once."""
    if not _HEX4:
        _HEX4.extend(f"{i:04X}" for i in range(1 << 16))
    return _HEX4


def _separator_error(props: dict) -> InvalidArgumentError:
    for k, v in props.items():
        if type(v) is not str:
            return InvalidArgumentError(f"property {k} must be a string, not {v!r}")
        if NAME_VALUE_SEPARATOR in v or PROPERTY_SEPARATOR in v:
            what = {PROP_KEYS: "keys", PROP_TAGS: "tags", PROP_UNIQ_KEY: "uniqKey"}.get(k, f"property {k}")
            return InvalidArgumentError(f"{what} {v[:40]!r} contains a property separator (\\u0001 or \\u0002)")
    return InvalidArgumentError("a property value contains a property separator (\\u0001 or \\u0002)")


#: The columns a MessageBatch keeps per message, besides its encoded parts.
COLUMNS = ("topic", "queue_id", "store_ts", "in_cq", "tags_code", "uniq", "keys", "rollback", "store_host",
           "store_port", "body_len", "size")
PARTS = 5  # per message: fixed header, body, topic length + topic, properties length, properties


def _properties_bytes(text: str) -> bytes:
    """The PROPERTIES field of a record: the text as UTF-8, within the broker's length limit."""
    try:
        praw = text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError("a property is not valid Unicode text (a lone surrogate)") from None
    if len(praw) > MAX_PROPERTIES_LEN:
        raise MessageEncodeError(f"properties are {len(praw)} bytes; the broker's limit is {MAX_PROPERTIES_LEN}")
    return praw


class MessageBatch:
    """Messages checked and encoded for putting, in order.

    `parts` holds PARTS byte strings per message that, joined, are its stored record (PHYSICALOFFSET and
    QUEUEOFFSET still zero); the COLUMNS lists hold what the consume queue, the index and the acknowledgement
    need: topic, queue_id, store_ts, in_cq (gets a consume-queue unit), tags_code, uniq (UNIQ_KEY), keys (the
    KEYS property), rollback, store_host, store_port, body_len, size (TOTALSIZE). Build with extend_json (many
    JSON objects at once, the fast path) or add_json / add_record / add; put with MessageStore.put_batch. Every
    add raises a one-line InvalidArgumentError (or MessageEncodeError) for a message that cannot be stored, and
    adds nothing for it."""

    def __init__(self, default_queue_id: int = 0, max_body: int = DEFAULT_MAX_BODY):
        self.default_queue_id = validate_queue_id(default_queue_id)
        self.max_body = max_body
        self.parts: list[bytes] = []
        for c in COLUMNS:
            setattr(self, c, [])
        #: (message index, BORNTIMESTAMP follows it, the tagsCode follows it) of each message whose store time
        #: this batch took from the clock (the input gave none): see not_before.
        self.stamped: list[tuple[int, bool, bool]] = []
        self._uniq_base = ""
        self._uniq_next = 0
        self._uniq_left = 0
        #: batch position -> properties of the messages that carry INNER_MULTI_DISPATCH: the put re-encodes their
        #: properties once it knows their LMQ queue offsets (engine.broker.write.lmq)
        self.multi: dict[int, dict] = {}

    def __len__(self) -> int:
        return len(self.size)

    @property
    def records(self) -> list[bytes]:
        """Each message's stored bytes (offsets zero)."""
        p = self.parts
        return [b"".join(p[i:i + PARTS]) for i in range(0, len(p), PARTS)]

    def truncate(self, n: int) -> None:
        del self.parts[n * PARTS:]
        for c in COLUMNS:
            del getattr(self, c)[n:]
        for i in [i for i in self.multi if i >= n]:
            del self.multi[i]
        self.stamped = [s for s in self.stamped if s[0] < n]

    def not_before(self, floor: int) -> int:
        """Raise each store time this batch took from the clock to `floor` where it is below it (the header's
        STORETIMESTAMP, BORNTIMESTAMP when it was defaulted to it, a delay level's tagsCode), so that the store
        times a run takes itself never go back: a batch may be encoded ahead of the one written before it (the
        parse helper of a large input, engine.broker.write.jsonl). Times the input gave are kept as they are.
        Returns the new floor: the latest store time taken so far."""
        ts = self.store_ts
        for i, born, tc in self.stamped:
            old = ts[i]
            if old >= floor:
                floor = old
                continue
            k = i * PARTS
            head = bytearray(self.parts[k])
            born_host = 16 if head[39] & 0x10 else 4  # SYSFLAG's low byte: BORNHOST_V6_FLAG (format §2.3)
            _LONG.pack_into(head, 48 + born_host + 4, floor)
            if born:
                _LONG.pack_into(head, 40, floor)
            self.parts[k] = bytes(head)
            if tc:
                self.tags_code[i] += floor - old
            ts[i] = floor
        return floor

    def _append(self, parts: tuple, row: tuple) -> None:
        """One encoded message: its PARTS byte strings, and its value in each column (the order of COLUMNS)."""
        topic, qid, store_ts, in_cq, tc, uniq, keys, rollback, sh, sp, blen, size = row
        self.parts += parts
        self.topic.append(topic)
        self.queue_id.append(qid)
        self.store_ts.append(store_ts)
        self.in_cq.append(in_cq)
        self.tags_code.append(tc)
        self.uniq.append(uniq)
        self.keys.append(keys)
        self.rollback.append(rollback)
        self.store_host.append(sh)
        self.store_port.append(sp)
        self.body_len.append(blen)
        self.size.append(size)

    def extend_json(self, objs: list) -> None:
        """Many message objects (add_json for each, in order): plain messages are checked and encoded as a whole
        list at once (engine.broker.write.jsonbatch); anything else, or any bad one, goes through add_json one by one,
        so a bad object raises with the ones before it added."""
        from engine.broker.write.jsonbatch import extend_plain

        if objs and not extend_plain(self, objs):
            for o in objs:
                self.add_json(o)

    def add(self, topic: str, body: bytes = b"", properties: dict | None = None, queue_id: int | None = None,
            store_timestamp: int = 0) -> None:
        """One plain message (what `rmqtool put --topic` writes)."""
        rec = MessageRecord(topic=topic, body=body, properties=dict(properties or {}),
                            queue_id=self.default_queue_id if queue_id is None else queue_id,
                            store_timestamp=store_timestamp)
        self.add_record(rec)

    def add_record(self, rec: MessageRecord) -> None:
        """A MessageRecord, checked as JSON input is. Its offsets are assigned by the put; its own properties
        dict is not changed (the UNIQ_KEY a put adds is in the batch's copy)."""
        tinfo = TOPICS.get(rec.topic) if type(rec.topic) is str else None
        if tinfo is None:
            tinfo = topic_info(rec.topic)
        validate_queue_id(rec.queue_id)
        if not isinstance(rec.body, (bytes, bytearray)):
            raise InvalidArgumentError("body must be bytes")
        for name, attr in _INT_FIELDS.items():
            java_int(name, getattr(rec, attr))
        for name, attr in _LONG_FIELDS.items():
            java_long(name, getattr(rec, attr))
        check_store_timestamp("storeTimestamp", rec.store_timestamp)
        for name in ("born", "store"):
            if len(getattr(rec, f"{name}_host")) not in (4, 16):
                raise InvalidArgumentError(f"{name}Host must be 4 (IPv4) or 16 (IPv6) address bytes")
            java_int(f"{name}Host port", getattr(rec, f"{name}_port"))
        props = dict(rec.properties)
        text = None
        if None in props.values():  # skipped when written, but they still shape the HashMap order (format §2.5)
            if PROP_UNIQ_KEY not in props:
                props[PROP_UNIQ_KEY] = self._uniq()
            _check_none_props(props)
            text = serialize_properties(props)
        self._encode(rec.topic, tinfo, rec.queue_id, bytes(rec.body), props, rec.store_timestamp,
                     (rec.flag, rec.sys_flag, rec.born_timestamp, bytes(rec.born_host), rec.born_port,
                      bytes(rec.store_host), rec.store_port, rec.reconsume_times, rec.prepared_transaction_offset),
                     text)

    def add_json(self, obj) -> None:
        """A message object in the CLI's JSON shape (MessageExt field names, MESSAGE_FIELDS; any other field is
        refused: it is probably a typo)."""
        if type(obj) is not dict:
            raise InvalidArgumentError("each message must be a JSON object")
        if not _COMMON.issuperset(obj) and not MESSAGE_FIELDS.issuperset(obj):
            raise unknown_field_error(obj)
        get = obj.get
        topic = get("topic")
        tinfo = TOPICS.get(topic) if type(topic) is str else None
        if tinfo is None:
            tinfo = topic_info(topic)
        body_b = json_body(get("body"), get("bodyEncoding"))
        keys = get("keys")
        if keys:
            if type(keys) is list:
                try:
                    keys = " ".join(keys)
                except TypeError:
                    keys = " ".join(k if type(k) is str else str(k) for k in keys)
            elif type(keys) is not str:
                keys = str(keys)
        else:
            keys = None
        tags = get("tags")
        tags = (tags if type(tags) is str else str(tags)) if tags else None
        uniq = get("uniqKey")
        uniq = (uniq if type(uniq) is str else str(uniq)) if uniq else None
        qid = get("queueId")
        if qid is None:
            qid = self.default_queue_id
        elif type(qid) is not int or not 0 <= qid <= INT_MAX:
            validate_queue_id(qid)
        store_ts = get("storeTimestamp")
        if store_ts is None:
            store_ts = 0
        elif type(store_ts) is not int or not 0 <= store_ts <= LONG_MAX:
            check_store_timestamp("storeTimestamp", store_ts)
        if get("properties") or not _COMMON.issuperset(obj):
            self._add_general(obj, topic, tinfo, body_b, keys, tags, uniq, qid, store_ts)
        else:
            self._add_plain(topic, tinfo, body_b, keys, tags, uniq, qid, store_ts)

    def _add_plain(self, topic, tinfo, body_b, keys, tags, uniq, qid, store_ts) -> None:
        """The common shape (no other properties, default hosts and flags), encoded directly: the bytes are those
        of _encode (tested), which is what encode_record writes."""
        if uniq is None:
            uniq = self._uniq()
        shape = SHAPES.get((keys is not None, tags is not None)) or shape_info(keys is not None, tags is not None)
        text = shape[0](keys, tags, uniq)
        n_props = shape[1]
        if text.count(NAME_VALUE_SEPARATOR) != n_props or text.count(PROPERTY_SEPARATOR) != n_props:
            raise _separator_error({PROP_KEYS: keys or "", PROP_TAGS: tags or "", PROP_UNIQ_KEY: uniq})
        praw = _properties_bytes(text)
        plen = len(praw)
        blen = len(body_b)
        if blen > self.max_body:
            raise MessageEncodeError(f"message body is {blen} bytes; maxMessageSize is {self.max_body}")
        if not store_ts:
            store_ts = int(time.time() * 1000)
            self.stamped.append((len(self.size), True, False))
        tpart, magic = tinfo
        size = 90 + len(tpart) + blen + plen
        tc = 0 if tags is None else (TAGS[tags] if tags in TAGS else tags_hash(tags))
        self._append((HEAD44.pack(size, magic, crc32(body_b) & 0x7FFFFFFF, qid, 0, 0, 0, 0, store_ts, LOCALHOST,
                                   0, store_ts, LOCALHOST, DEFAULT_STORE_PORT, 0, 0, blen),
                      body_b, tpart, plen.to_bytes(2, "big"), praw),
                     (topic, qid, store_ts, True, tc, uniq, keys, False, LOCALHOST, DEFAULT_STORE_PORT, blen, size))

    def _add_general(self, obj: dict, topic, tinfo, body_b, keys, tags, uniq, qid, store_ts) -> None:
        """add_json for every other shape: user properties, hosts, flags, transactions, timestamps."""
        get = obj.get
        p = get("properties")
        if p:
            if type(p) is not dict or not all(type(v) is str for v in p.values()):
                raise InvalidArgumentError("properties must map strings to strings")
            props = dict(p)
        else:
            props = {}
        if keys is not None:
            props[PROP_KEYS] = keys
        if tags is not None:
            props[PROP_TAGS] = tags
        if uniq is not None:
            props[PROP_UNIQ_KEY] = uniq
        vals = {}
        for js in ("flag", "sysFlag", "reconsumeTimes"):
            vals[js] = 0 if get(js) is None else java_int(js, get(js))
        for js in ("preparedTransactionOffset", "bornTimestamp"):
            vals[js] = 0 if get(js) is None else java_long(js, get(js))
        if vals["sysFlag"] & COMPRESSED_FLAG:
            body_b = _stored_body(obj, body_b, vals["sysFlag"])
        bh, bp = _host("bornHost", get("bornHost")) if get("bornHost") else (LOCALHOST, 0)
        sh, sp = _host("storeHost", get("storeHost")) if get("storeHost") else (LOCALHOST, DEFAULT_STORE_PORT)
        self._encode(topic, tinfo, qid, body_b, props, store_ts,
                     (vals["flag"], vals["sysFlag"], vals["bornTimestamp"], bh, bp, sh, sp, vals["reconsumeTimes"],
                      vals["preparedTransactionOffset"]), None)

    def _uniq(self) -> str:
        """The next UNIQ_KEY (MessageClientIDSetter's format), taken from blocks of 256 reserved at once."""
        if not self._uniq_left:
            if not _UNIQ:
                _UNIQ.append(UniqKeyGenerator())
            self._uniq_base, self._uniq_next = _UNIQ[0].next_block(256)
            self._uniq_left = 256
        c = self._uniq_next
        self._uniq_next = (c + 1) & 0xFFFF
        self._uniq_left -= 1
        return f"{self._uniq_base}{c:04X}"

    def uniq_many(self, m: int) -> list[str]:
        """m successive UNIQ_KEYs (the next m a message-by-message add would take)."""
        out: list[str] = []
        while len(out) < m:
            if not self._uniq_left:
                out.append(self._uniq())
                continue
            k = min(self._uniq_left, m - len(out))
            c = self._uniq_next
            suffixes = _hex4()[c:c + k]
            if len(suffixes) < k:  # the counter wraps at 0xFFFF
                suffixes = suffixes + _hex4()[:k - len(suffixes)]
            out += map(self._uniq_base.__add__, suffixes)
            self._uniq_next = (c + k) & 0xFFFF
            self._uniq_left -= k
        return out

    def _encode(self, topic, tinfo, qid, body, props, store_ts, fields: tuple, text) -> None:
        """Encode one checked message (MessageExtEncoder.encode) and append it; raises before appending.
        `fields`: (flag, sysFlag, bornTimestamp, bornHost, bornPort, storeHost, storePort, reconsumeTimes,
        preparedTransactionOffset), a plain tuple (this runs once per message)."""
        flag, sys_flag, born_ts, bh, bp, sh, sp, recon, prep = fields
        blen = len(body)
        if blen > self.max_body:
            raise MessageEncodeError(f"message body is {blen} bytes; maxMessageSize is {self.max_body}")
        if text is None:
            uniq = props.get(PROP_UNIQ_KEY)
            if uniq is None:
                uniq = props[PROP_UNIQ_KEY] = self._uniq()
            names = tuple(props)
            fmt, getter, k = _PROPS.get(names) or _props_info(names)
            try:
                text = fmt(*getter(props))
            except (TypeError, ValueError):
                raise _separator_error(props) from None
            if text.count(NAME_VALUE_SEPARATOR) != k or text.count(PROPERTY_SEPARATOR) != k:
                raise _separator_error(props)
        else:
            uniq = props.get(PROP_UNIQ_KEY)
        praw = _properties_bytes(text)
        plen = len(praw)
        stamped = not store_ts
        if stamped:
            store_ts = int(time.time() * 1000)
        born_follows = not born_ts
        if born_follows:
            born_ts = store_ts
        if len(bh) == 4 and len(sh) == 4:
            st = HEAD44
            sys_flag &= ~0x30
        else:  # the broker sets the v6 bits from the socket addresses (format §2.3)
            st = HEADS[(len(bh), len(sh))]
            sys_flag = (sys_flag | 0x10) if len(bh) == 16 else (sys_flag & ~0x10)
            sys_flag = (sys_flag | 0x20) if len(sh) == 16 else (sys_flag & ~0x20)
        tpart, magic = tinfo
        size = st.size + blen + len(tpart) + 2 + plen
        if size > INT_MAX:
            raise MessageEncodeError(f"message record would be {size} bytes")
        head = st.pack(size, magic, crc32(body) & 0x7FFFFFFF, qid, flag, 0, 0, sys_flag, born_ts, bh, bp,
                       store_ts, sh, sp, recon, prep, blen)
        tags = props.get(PROP_TAGS)
        if tags is None or not tags:
            tc = 0
        else:
            tc = TAGS.get(tags)
            if tc is None:
                tc = tags_hash(tags)
        tc_follows = False
        if PROP_DELAY in props:
            tc = tags_code(topic, tags, props, store_ts)
            tc_follows = tc != tags_code(topic, tags, props, store_ts + 1)  # a delay level: delivery time
        if stamped:
            self.stamped.append((len(self.size), born_follows, tc_follows))
        tx = sys_flag & 0xC
        if PROP_INNER_MULTI_DISPATCH in props:
            self.multi[len(self.size)] = props
        self._append((head, body, tpart, plen.to_bytes(2, "big"), praw),
                     (topic, qid, store_ts, tx == 0 or tx == 8, tc, uniq, props.get(PROP_KEYS), tx == 0xC, sh, sp, blen,
                      size))


def _stored_body(obj: dict, body: bytes, sys_flag: int) -> bytes:
    """The bytes to store for a message whose SYSFLAG says its body is compressed (format §2.3).

    A read command's JSON line shows the body as the consumer receives it (decoded) and names the codec in
    "compression": that body is compressed again with the codec SYSFLAG names, as the producer did, so the
    consumer (MessageDecoder, which inflates when the flag is set) reads back the same body. A line whose body did
    not decode ("compressionError") has no body but the stored bytes ("storedBody", base64): they are stored as
    they were. Without "compression" the body is taken as the bytes the producer sent, already compressed."""
    if obj.get("compressionError") is not None:
        raw = obj.get("storedBody")
        if type(raw) is not str:
            raise InvalidArgumentError("a message with compressionError needs its storedBody (base64): its body "
                                       "did not decode, so only the stored bytes can be put again")
        return _b64(raw)
    named = obj.get("compression")
    if named is None:
        return body
    codec = codec_of(sys_flag)
    if named != codec:
        raise InvalidArgumentError(f"compression {named!r} does not match the codec sysFlag {sys_flag} names "
                                   f"({codec})")
    try:
        return encode_body(body, sys_flag)
    except BodyDecodeError as e:
        raise InvalidArgumentError(f"sysFlag {sys_flag}: {e}") from None


def _check_none_props(props: dict) -> None:
    for k, v in props.items():
        check_property_text("property name", k)
        if v is not None:
            check_property_text(f"property {k}", v)


def unknown_field_error(obj: dict) -> InvalidArgumentError:
    bad = sorted(k for k in obj if k not in MESSAGE_FIELDS)
    return InvalidArgumentError(f"unknown field{'s' if len(bad) > 1 else ''} {', '.join(map(repr, bad))}: a message "
                                f"takes {', '.join(sorted(INPUT_FIELDS))} (and the read commands' output fields, "
                                "which it ignores)")


def json_body(body, encoding) -> bytes:
    """A JSON message's body as bytes: text (UTF-8), or with "bodyEncoding" base64 or hex (the dump's encodings)."""
    if encoding is not None and encoding not in ("base64", "hex", "utf8"):
        raise InvalidArgumentError(f"bodyEncoding {encoding!r} is not one of base64, hex, utf8")
    if type(body) is str:
        if encoding == "base64":
            return _b64(body)
        if encoding == "hex":
            try:
                return bytes.fromhex(body)
            except ValueError:
                raise InvalidArgumentError("body is not valid hex") from None
        try:
            return body.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgumentError("body is not valid Unicode text (a lone surrogate)") from None
    if body is None:
        return b""
    raise InvalidArgumentError("body must be a string")


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise InvalidArgumentError("body is not valid base64") from None
