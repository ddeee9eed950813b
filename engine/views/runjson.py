"""The NDJSON of a whole run of records at once (dump-commitlog --json, get --json): the bytes of
engine.views.recordjson.json_line for every record, without per-record Python code on the common path.

A run is formatted with one bytes %-template per line, in which the fields that are the same for the whole run
(hosts, flags, magic version, ...) are written once; the other fields are columns of the run. Properties that
need no JSON escaping, bodies that are valid UTF-8 with nothing to escape and the property values go in as
stored. Records are grouped by the shape of their properties (the names, in order: one producer's messages share
it); each group's values are found by one regular expression over the group's properties. Anything else (a value
json escapes, invalid UTF-8, a name given twice, __CRC32#, a compressed body, an IPv6 host) takes the one-record
path, json_line, so every line is exactly json.dumps(MessageRecord.to_json()) (tests/engine/views/test_runjson.py).
"""
from __future__ import annotations

import binascii
import re
from dataclasses import replace
from itertools import repeat
from operator import itemgetter

import numpy as np

from engine.broker.commitlog.compression import COMPRESSED_FLAG
from engine.broker.commitlog.message import PROP_CRC32, PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY, TX_TYPE_NAMES
from engine.views.recordjson import (CACHE_LIMIT, CLEAN_PROPS, PROP_RE, body_json, host4, json_line, keys_json,
                                     nullable_json, nullable_json_clean, props_json, quoted_topic)


#: Most property shapes a run is split into; a run with more takes the general path for its properties (_RunProps).
MAX_SHAPES = 64
#: Fewer records than this go one by one: a template costs about 120 us to set up and 2 us a record, json_line
#: 8 us a record (get's lookups scattered over many segments make runs of one or two records).
SMALL_RUN = 24


def run_json_text(run, extra: str = "", body: str = "auto") -> bytes:
    """The NDJSON of every record of a RecordRun, UTF-8 encoded: json_line(buf, pos, extra, body) + "\\n" for each,
    in order (the same bytes, tested). Each group of records (see _plan) is formatted with its own line template;
    the lines of several groups are put back in log order."""
    n = len(run)
    if n < SMALL_RUN:
        return _one_by_one(run, extra, body)
    plan = _plan(run)
    if len(plan) == 1 and plan[0][0] is None:
        return _render(run, plan[0][1], extra, body)
    lines: list[bytes] = []
    for idx, props in plan:
        sub = replace(run, batch=run.batch.select(idx), bodies=[run.bodies[i] for i in idx.tolist()])
        text = _one_by_one(sub, extra, body) if props is None else _render(sub, props, extra, body)
        lines += text.split(b"\n")[:-1]  # JSON escapes every "\n" inside a line
    at = np.argsort(np.concatenate([idx for idx, _ in plan]), kind="stable").tolist()
    return b"\n".join(itemgetter(*at)(lines) if n > 1 else lines) + b"\n"


def run_json_lines(run, extra: str = "", body: str = "auto") -> list[str]:
    """json_line(buf, pos, extra, body) for every record of a RecordRun (run_json_text, as lines)."""
    return run_json_text(run, extra, body).decode("utf-8", "surrogateescape").split("\n")[:-1]  # JSON escapes "\n"


def _render(run, props, extra: str, body: str) -> bytes:
    """The lines of a run whose properties are `props` (_UniformProps or _RunProps), as one template."""
    b, buf, n = run.batch, run.buf, len(run)
    t = _Template(n)
    t.lit('{"topic": ')
    t.col("%s", _quoted_topics_of(run))
    for name, values in (("queueId", b.queue_id), ("queueOffset", b.queue_offset), ("commitLogOffset", b.phy),
                         ("storeSize", b.total), ("storeTimestamp", b.store_ts), ("bornTimestamp", b.born_ts)):
        t.num(f', "{name}": ', values)
    born, store = _host_columns(buf, b.pos, 48), _host_columns(buf, b.pos, 64)
    t.lit(', "bornHost": "')
    t.text(born[0])
    t.lit('", "storeHost": "')
    t.text(store[0])
    t.lit('"')
    for name, values in (("sysFlag", b.sys_flag), ("bodyCRC", b.body_crc), ("flag", _column(buf, b.pos, 16, ">i4")),
                         ("reconsumeTimes", _column(buf, b.pos, 72, ">i4")),
                         ("preparedTransactionOffset", _column(buf, b.pos, 76, ">i8"))):
        t.num(f', "{name}": ', values)
    props.write(t)
    t.lit(', "msgId": "')
    t.text(store[1])
    t.col("%016X", b.phy.tolist())
    t.lit('", "magicVersion": "')
    t.text(np.where(b.v2, b"V2", b"V1"))
    t.lit('", "transactionType": "')
    t.text(_TX_NAMES[b.sys_flag & 0xC])
    t.lit('", "body": ')
    _body_columns(t, run.bodies, body)
    t.lit(extra + "}\n")
    return t.render()


_TX_NAMES = np.array([TX_TYPE_NAMES.get(i, "").encode("ascii") for i in range(16)])


def _one_by_one(run, extra: str, body: str) -> bytes:
    return "".join([json_line(run.buf, p, extra, body) + "\n" for p in run.batch.pos.tolist()]).encode(
        "utf-8", "surrogateescape")


class _Template:
    """One line's bytes %-template and the columns (lists of bytes or ints) that fill it: `render` formats it once
    per record, with no per-record Python code."""

    def __init__(self, n: int):
        self.n, self.parts, self.cols = n, [], []

    def lit(self, text: str) -> None:
        self.parts.append(text.encode("utf-8", "surrogateescape").replace(b"%", b"%%"))

    def col(self, spec: str, values: list) -> None:
        self.parts.append(spec.encode("ascii"))
        self.cols.append(values)

    def num(self, label: str, values: np.ndarray) -> None:
        """A number field: written into the template when the run has one value."""
        self.lit(label)
        if values[0] == values.min() == values.max():
            self.lit(str(int(values[0])))
        else:
            self.col("%d", values.tolist())

    def text(self, values) -> None:
        """Text that needs no escaping: a str for the whole run, a numpy bytes array or a list of str, one per
        record."""
        if isinstance(values, str):
            self.lit(values)
        elif isinstance(values, np.ndarray):
            if (values == values[0]).all():
                self.lit(values[0].decode("ascii"))
            else:
                self.col("%s", values.tolist())
        else:
            self.col("%s", [v.encode("utf-8", "surrogateescape") for v in values])

    def render(self) -> bytes:
        line = b"".join(self.parts)
        if not self.cols:
            return line * self.n
        return b"".join(map(line.__mod__, zip(*self.cols)))


def _column(buf, pos: np.ndarray, rel: int, dtype: str) -> np.ndarray:
    """One fixed-position header field of every record (record starts `pos`), as an int64 array."""
    width = np.dtype(dtype).itemsize
    view = np.ndarray((len(buf) - width + 1,), dtype=dtype, buffer=buf, strides=(1,))
    out = view[pos + rel].astype(np.int64)
    del view  # no export of the mapping may outlive the call: the segment is unmapped after the walk
    return out


def _host_columns(buf, pos: np.ndarray, rel: int) -> tuple:
    """(host:port texts, offsetMsgId prefixes) of the IPv4 address at rel and the port after it: one str each
    when the whole run has one host, else lists."""
    ips, ports = _column(buf, pos, rel, ">u4"), _column(buf, pos, rel + 4, ">i4")
    if (ips == ips[0]).all() and (ports == ports[0]).all():
        return host4(int(ips[0]), int(ports[0]))
    hosts = list(map(host4, ips.tolist(), ports.tolist()))
    return [h[0] for h in hosts], [h[1] for h in hosts]


_topic_json: dict[bytes, bytes] = {}


def _quoted_topics_of(run) -> list[bytes]:
    """The JSON string of every record's topic, UTF-8 (decoded and quoted once per distinct topic)."""
    b, buf = run.batch, run.buf
    raw = list(map(buf.__getitem__, map(slice, b.topic_pos.tolist(), (b.topic_pos + b.topic_len).tolist())))
    quoted = list(map(_topic_json.get, raw))
    if None in quoted:
        if len(_topic_json) > CACHE_LIMIT:
            _topic_json.clear()
        for r in set(raw) - _topic_json.keys():
            _topic_json[r] = quoted_topic(r).encode("utf-8", "surrogateescape")
        quoted = list(map(_topic_json.__getitem__, raw))
    return quoted


#: Bytes a JSON string shows as they are (ensure_ascii=False): all but the controls, '"' and '\\'. Deleting them
#: from a text leaves exactly what json would escape (and the separators of properties and of our joins).
_PLAIN = bytes(c for c in range(256) if c >= 0x20 and c not in b'"\\')


def _body_columns(t: _Template, bodies: list, mode: str) -> None:
    """The "body" value of every record (BODY_MODES; the caller writes `extra` after it)."""
    if mode == "none":
        t.lit("null")
        return
    if mode == "hex":
        t.col('"%s", "bodyEncoding": "hex"', list(map(binascii.hexlify, bodies)))
        return
    if mode == "auto":
        joined = b"\n".join(bodies)
        if joined.translate(None, _PLAIN) == b"\n" * (len(bodies) - 1) and _utf8(joined):
            t.col('"%s"', bodies)  # nothing to escape, valid UTF-8: the bytes as stored
            return
    t.col("%s", [body_json(x, "", mode).encode("utf-8", "surrogateescape") for x in bodies])


def _utf8(joined: bytes) -> bool:
    """Is this valid UTF-8 (what json shows as text)? Parts joined by an ASCII byte: all valid when the whole is."""
    if joined.isascii():
        return True
    try:
        joined.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class _RunProps:
    """The properties of every record of a run, for the JSON view: clean ones (see CLEAN_PROPS) handled as one
    text for the whole run, the others (`dirty`: index -> (text, parsed)) one by one as json_line does."""

    def __init__(self, n: int, text: str, dirty: dict):
        self.n, self.dirty = n, dirty
        lines = text.split("\n")
        counts = np.fromiter(map(str.count, lines, repeat("\x02")), dtype=np.int64, count=n)
        flat = text.replace("\n", "").replace("\x01", "\x02").split("\x02")  # name, value, name, value, ..., ""
        names, values = flat[0:-1:2], np.array(flat[1::2], dtype=object)
        codes = {k: i for i, k in enumerate(set(names))}
        self.crc32 = PROP_CRC32 in codes
        rec = np.repeat(np.arange(n, dtype=np.int64), counts)
        code = np.fromiter(map(codes.__getitem__, names), dtype=np.int64, count=len(names))
        pair = rec * max(len(codes), 1) + code
        self.twice = []
        if len(np.unique(pair)) < len(pair):  # a name given twice: the one-record path (the last value wins)
            s = np.sort(pair)
            self.twice = np.unique(s[1:][s[1:] == s[:-1]] // max(len(codes), 1)).tolist()
        self.columns = {}
        for name in (PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY):
            col = np.full(n, None, dtype=object)
            if name in codes:
                at = code == codes[name]
                col[rec[at]] = values[at]
            self.columns[name] = col.tolist()
        text = ("\x03" + text.replace("\n", "\n\x03") + "\n").replace("\x03\n", "{}\n").replace("\x02\n", '"}\n')
        self.json = text.replace("\x03", '{"').replace("\x01", '": "').replace("\x02", '", "').split("\n")[:-1]

    def write(self, t: _Template) -> None:
        keys, tags, uniq = (self.columns[k] for k in (PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY))
        t.lit(', "properties": ')
        t.col("%s", self._patched(self.json, lambda tx, d: props_json(tx, d, False)))
        t.lit(', "keys": ')
        t.col("%s", self._patched([keys_json(k, True) for k in keys],
                                  lambda tx, d: keys_json(d.get(PROP_KEYS), False)))
        for label, name, col in ((', "tags": ', PROP_TAGS, tags), (', "uniqKey": ', PROP_UNIQ_KEY, uniq)):
            t.lit(label)
            t.col("%s", self._patched([nullable_json_clean(v, True) for v in col], lambda tx, d, name=name: nullable_json(d.get(name))))

    def _patched(self, col: list, one) -> list:
        """The column's texts, the dirty records' replaced by `one` of theirs, as UTF-8."""
        for i, (tx, d) in self.dirty.items():
            col[i] = one(tx, d)
        return [x.encode("utf-8", "surrogateescape") for x in col]


def _plan(run) -> list[tuple]:
    """How to format a run: [(record indexes, or None for all; _UniformProps / _RunProps, or None for the
    one-record path)]. Records the template cannot show (compressed body, IPv6 host, properties json escapes or
    invalid UTF-8) go one by one; the others are grouped by the names of their properties, in order."""
    b, buf, n = run.batch, run.buf, len(run)
    ends = b.props_pos + np.maximum(b.props_len, 0)
    raw = list(map(buf.__getitem__, map(slice, b.props_pos.tolist(), ends.tolist())))
    joined = b"\n".join(raw)
    one = ((b.sys_flag & (COMPRESSED_FLAG | 0x30)) != 0) | (b.phy < 0)
    if not one.any() and _clean_bytes(joined, n, buf, b.props_pos[b.props_len > 0], ends[b.props_len > 0]) \
            and _utf8(joined):
        names = _first_names(joined)
        found = _uniform(joined, n, names) if _CRC32_NAME not in names else None
        if found is not None:
            return [(None, _UniformProps(names, found))]
    else:
        texts = [bytes(x).decode("utf-8", "replace") for x in raw]
        one |= np.fromiter((m is None for m in map(CLEAN_PROPS.fullmatch, texts)), dtype=bool, count=n)
        one |= np.fromiter(map(str.__contains__, texts, repeat("\ufffd")), dtype=bool, count=n)  # invalid UTF-8
        raw = [b"" if o else r for o, r in zip(one.tolist(), raw)]
        joined = b"\n".join(raw)
    rest = np.flatnonzero(~one)
    plan = [(np.flatnonzero(one), None)] if len(rest) < n else []
    if not len(rest):
        return plan
    shapes = _VALUES.sub(b"\x02", joined).split(b"\n")  # each record's names, in order
    codes, inverse = np.unique(np.fromiter(map(hash, shapes), dtype=np.int64, count=n)[rest], return_inverse=True)
    if len(codes) > MAX_SHAPES:
        sub = replace(run, batch=b.select(rest), bodies=[])
        return plan + [(rest, _general(sub))]
    for g in range(len(codes)):
        idx = rest[inverse.reshape(-1) == g]
        names = shapes[idx[0]].split(b"\x02")[:-1]
        found = None
        if _CRC32_NAME not in names and len(idx) >= SMALL_RUN:  # json_line drops __CRC32# as to_json does
            found = _uniform(b"\n".join([raw[i] for i in idx.tolist()]), len(idx), names)
        plan.append((idx, None if found is None else _UniformProps(names, found)))
    return plan


_VALUES = re.compile(b"\x01[^\x02]*\x02")


def _general(run) -> _RunProps | None:
    """The properties of a run's records for the general path; None when one carries __CRC32#."""
    b, buf, n = run.batch, run.buf, len(run)
    ends = b.props_pos + np.maximum(b.props_len, 0)
    texts = [bytes(buf[p:e]).decode("utf-8", "replace") for p, e in zip(b.props_pos.tolist(), ends.tolist())]
    dirty: dict = {}
    for i, m in enumerate(map(CLEAN_PROPS.fullmatch, texts)):
        if m is None:  # parsed as json_line parses it (names given twice are found below)
            dirty[i] = (texts[i], dict(PROP_RE.findall(texts[i])))
            if PROP_CRC32 in dirty[i][1]:
                return None
            texts[i] = ""
    text = "\n".join(texts)
    p = _RunProps(n, text, dirty)
    if p.crc32:
        return None
    if p.twice:
        lines = text.split("\n")
        for i in p.twice:
            dirty[i] = (lines[i], dict(PROP_RE.findall(lines[i])))
            lines[i] = ""
        p = _RunProps(n, "\n".join(lines), dirty)
    return p


class _UniformProps:
    """Clean properties with the same names in the same order in every record of the run (one producer's
    messages): the values are found by one regular expression over the run's text, and the JSON object is written
    by the line template."""

    def __init__(self, names: list[bytes], columns: list):
        self.names, self.columns = [k.decode("utf-8") for k in names], columns

    def write(self, t: _Template) -> None:
        got = dict(zip(self.names, self.columns))
        t.lit(', "properties": {')
        for i, (name, col) in enumerate(zip(self.names, self.columns)):
            t.lit(('"' if i == 0 else ', "') + name + '": "')  # a clean name: nothing to escape
            t.col("%s", col)
            t.lit('"')
        t.lit('}, "keys": ')
        keys = got.get(PROP_KEYS)
        stripped = list(map(bytes.rstrip, keys, repeat(b" "))) if keys is not None else None
        if stripped is None:
            t.lit("[]")
        elif b"" not in stripped:  # Java's split on " " as one replace for the whole run
            t.lit('["')
            t.col("%s", b"\n".join(stripped).replace(b" ", b'", "').split(b"\n"))
            t.lit('"]')
        else:
            t.col("%s", [keys_json(k.decode("utf-8"), True).encode("utf-8") for k in keys])
        for label, name in ((', "tags": ', PROP_TAGS), (', "uniqKey": ', PROP_UNIQ_KEY)):
            t.lit(label)
            if name in got:
                t.lit('"')
                t.col("%s", got[name])
                t.lit('"')
            else:
                t.lit("null")


_CRC32_NAME = PROP_CRC32.encode("ascii")


def _first_names(text: bytes) -> list[bytes]:
    """The property names of the first record of a run's clean properties (joined by "\\n")."""
    first = text.split(b"\n", 1)[0]
    return [e[:e.index(b"\x01")] for e in first.split(b"\x02")[:-1]]


_shapes: dict[tuple, re.Pattern] = {}


def _uniform(text: bytes, n: int, names: list[bytes]) -> list | None:
    """The value columns, one per name, when every record's properties have exactly these names in this order;
    else None."""
    if len(set(names)) != len(names):
        return None
    if not names:
        return [] if text == b"\n" * (n - 1) else None
    pat = _shapes.get(tuple(names))
    if pat is None:
        if len(_shapes) > 256:
            _shapes.clear()
        pat = _shapes[tuple(names)] = re.compile(
            b"^" + b"".join(re.escape(k) + b"\x01([^\x02\n]*)\x02" for k in names) + b"$", re.M)
    found = pat.findall(text)
    if len(found) != n:
        return None
    return list(zip(*found)) if len(names) > 1 else [found]


def _clean_bytes(joined: bytes, n: int, buf, starts: np.ndarray, ends: np.ndarray) -> bool:
    """Is every properties text of the run (joined by "\\n") clean in the sense of CLEAN_PROPS (names given
    twice aside)? Checked on the whole run at once: nothing json escapes, separators alternating \\x01 \\x02 with
    no empty name or value, and each non-empty text ends with \\x02."""
    if joined.translate(None, _PLAIN).replace(b"\x01\x02", b"") != b"\n" * (n - 1):
        return False
    if b"\x01\x02" in joined or b"\x02\x01" in joined or b"\n\x01" in joined or joined.startswith(b"\x01"):
        return False
    if not len(starts):
        return True
    view = np.frombuffer(buf, dtype=np.uint8)
    ok = bool((view[ends - 1] == 2).all())
    del view  # no export of the mapping may outlive the call
    return ok
