"""The JSON dialect of fastjson 1.2.x, which the broker uses for every config/*.json file (tieredStoreMetadata.json,
consumerOffset.json, topics.json, ...). It is not strict JSON (flat-store pitfall 9):

* reading (fastjson's default parser features): map keys may be unquoted (`{0:{`, `{name:1}`) or single-quoted,
  strings may be single-quoted, commas may repeat or trail, `//` and `/* */` comments are skipped, numbers may
  carry a Java type suffix (`1L`). An unquoted numeric key comes back as a Python int, every other key as str.
  Anything after the root value but whitespace and comments is an error, as in fastjson.
* writing: `JSON.toJSONString(obj, DisableCircularReferenceDetect, PrettyFormat)` byte for byte: one tab per
  level, no spaces, a newline before every string key (map or bean), none before a numeric map key, `{}` for an
  empty map, no trailing newline; dict entries are written in the order given (the caller supplies Java's
  iteration order), None values are skipped (WriteMapNullValue is off).
"""
from __future__ import annotations

import math

MAX_DEPTH = 512


class FastjsonError(ValueError):
    """Text fastjson would not parse."""


# ============================================================================ reading

_WS = " \t\r\n\f\b\v\ufeff"
_ESCAPES = {'"': '"', "'": "'", "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
            "0": "\0", "1": "\1", "2": "\2", "3": "\3", "4": "\4", "5": "\5", "6": "\6", "7": "\7",
            "F": "\f", "v": "\v"}
_NUMBER_SUFFIXES = "LSBFD"
_IDENT_END = set(_WS) | set(":,{}[]/\"'")


class _Parser:
    def __init__(self, text: str):
        self.s = text
        self.i = 0
        self.n = len(text)

    def fail(self, what: str):
        line = self.s.count("\n", 0, self.i) + 1
        raise FastjsonError(f"{what} at line {line}, character {self.i}")

    def skip(self) -> None:
        """Whitespace and comments."""
        s, n = self.s, self.n
        while self.i < n:
            c = s[self.i]
            if c in _WS:
                self.i += 1
            elif c == "/" and s.startswith("//", self.i):
                j = s.find("\n", self.i)
                self.i = n if j < 0 else j + 1
            elif c == "/" and s.startswith("/*", self.i):
                j = s.find("*/", self.i + 2)
                if j < 0:
                    self.fail("unterminated comment")
                self.i = j + 2
            else:
                return

    def value(self, depth: int):
        if depth > MAX_DEPTH:
            self.fail("nesting too deep")
        self.skip()
        if self.i >= self.n:
            self.fail("unexpected end of text")
        c = self.s[self.i]
        if c == "{":
            return self.obj(depth)
        if c == "[":
            return self.array(depth)
        if c in "\"'":
            return self.string(c)
        if c == "-" or c.isdigit():
            return self.number()
        word = self.ident()
        if word == "true":
            return True
        if word == "false":
            return False
        if word in ("null", "undefined"):
            return None
        self.fail(f"unexpected {word[:20] or c!r}")

    def obj(self, depth: int) -> dict:
        self.i += 1
        out: dict = {}
        while True:
            self.skip()
            if self.i >= self.n:
                self.fail("unterminated object")
            c = self.s[self.i]
            if c == ",":          # AllowArbitraryCommas
                self.i += 1
                continue
            if c == "}":
                self.i += 1
                return out
            if c in "\"'":
                key = self.string(c)
            elif c == "-" or c.isdigit():
                key = self.number()
            else:
                key = self.ident()
                if not key:
                    self.fail(f"expected a key, found {c!r}")
            self.skip()
            if self.i >= self.n or self.s[self.i] != ":":
                self.fail("expected ':'")
            self.i += 1
            out[key] = self.value(depth + 1)
            self.skip()
            if self.i < self.n and self.s[self.i] not in ",}":
                self.fail(f"expected ',' or '}}', found {self.s[self.i]!r}")

    def array(self, depth: int) -> list:
        self.i += 1
        out: list = []
        while True:
            self.skip()
            if self.i >= self.n:
                self.fail("unterminated array")
            c = self.s[self.i]
            if c == ",":
                self.i += 1
                continue
            if c == "]":
                self.i += 1
                return out
            out.append(self.value(depth + 1))
            self.skip()
            if self.i < self.n and self.s[self.i] not in ",]":
                self.fail(f"expected ',' or ']', found {self.s[self.i]!r}")

    def string(self, quote: str) -> str:
        s, n = self.s, self.n
        i = self.i + 1
        parts = []
        start = i
        while True:
            j = s.find(quote, i)
            k = s.find("\\", i, j if j >= 0 else n)
            if j < 0 and k < 0:
                self.i = n
                self.fail("unterminated string")
            if k < 0:
                parts.append(s[start:j])
                self.i = j + 1
                return "".join(parts)
            parts.append(s[start:k])
            if k + 1 >= n:
                self.i = n
                self.fail("unterminated string")
            e = s[k + 1]
            if e == "u":
                hexd = s[k + 2:k + 6]
                if len(hexd) != 4 or any(ch not in "0123456789abcdefABCDEF" for ch in hexd):
                    self.i = k
                    self.fail("bad \\u escape")
                parts.append(chr(int(hexd, 16)))
                i = k + 6
            elif e == "x":
                hexd = s[k + 2:k + 4]
                if len(hexd) != 2 or any(ch not in "0123456789abcdefABCDEF" for ch in hexd):
                    self.i = k
                    self.fail("bad \\x escape")
                parts.append(chr(int(hexd, 16)))
                i = k + 4
            elif e in _ESCAPES:
                parts.append(_ESCAPES[e])
                i = k + 2
            else:
                self.i = k
                self.fail(f"bad escape \\{e}")
            start = i
        # unreachable

    def number(self):
        s, n = self.s, self.n
        j = self.i
        if j < n and s[j] == "-":
            j += 1
        d0 = j
        while j < n and s[j].isdigit():
            j += 1
        if j == d0:
            self.fail("bad number")
        is_float = False
        if j < n and s[j] == ".":
            is_float = True
            j += 1
            d1 = j
            while j < n and s[j].isdigit():
                j += 1
            if j == d1:
                self.fail("bad number")
        if j < n and s[j] in "eE":
            is_float = True
            j += 1
            if j < n and s[j] in "+-":
                j += 1
            d2 = j
            while j < n and s[j].isdigit():
                j += 1
            if j == d2:
                self.fail("bad number")
        text = s[self.i:j]
        if j < n and s[j] in _NUMBER_SUFFIXES:
            j += 1
        if j < n and s[j] not in _IDENT_END:
            self.i = j
            self.fail("bad number")
        self.i = j
        if is_float:
            v = float(text)
            if not math.isfinite(v):
                self.fail("number out of range")
            return v
        return int(text)

    def ident(self) -> str:
        s, n = self.s, self.n
        j = self.i
        while j < n and s[j] not in _IDENT_END:
            j += 1
        word = s[self.i:j]
        self.i = j
        return word


def loads(text: str | bytes):
    """Parse fastjson text into Python values (dict keeps the file's order). Raises FastjsonError."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise FastjsonError(f"not UTF-8 text: {e.reason} at byte {e.start}") from None
    p = _Parser(text)
    p.skip()
    if p.i >= p.n:
        raise FastjsonError("empty text")
    v = p.value(0)
    p.skip()
    if p.i < p.n:
        p.fail("text after the end of the value (fastjson: not close json text)")
    return v


# ============================================================================ writing

_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def quote(s: str) -> str:
    """A string as fastjson writes it with double quotes (non-ASCII raw, control characters escaped)."""
    out = []
    for ch in s:
        if ch in _SHORT:
            out.append(_SHORT[ch])
        elif ch < " " or ch == "\x7f":
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _scalar(v) -> str:
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return "null"
        return repr(v)
    if isinstance(v, str):
        return quote(v)
    raise TypeError(f"fastjson writer: unsupported value {type(v).__name__}")


def _write(v, level: int, pretty: bool, out: list) -> None:
    nl = ("\n" + "\t" * level) if pretty else ""
    if isinstance(v, dict):
        items = [(k, x) for k, x in v.items() if x is not None]
        if not items:
            out.append("{}")
            return
        out.append("{")
        inner = ("\n" + "\t" * (level + 1)) if pretty else ""
        for i, (k, x) in enumerate(items):
            if i:
                out.append(",")
            if isinstance(k, str):
                out.append(inner + quote(k) + ":")
            elif isinstance(k, int) and not isinstance(k, bool):
                out.append(f"{k}:")
            else:
                raise TypeError(f"fastjson writer: unsupported key {type(k).__name__}")
            _write(x, level + 1, pretty, out)
        out.append(nl + "}")
    elif isinstance(v, (list, tuple)):
        if not v:
            out.append("[]")
            return
        out.append("[")
        inner = ("\n" + "\t" * (level + 1)) if pretty else ""
        for i, x in enumerate(v):
            if i:
                out.append(",")
            out.append(inner)
            _write(x, level + 1, pretty, out)
        out.append(nl + "]")
    elif v is None:
        out.append("null")
    else:
        out.append(_scalar(v))


def dumps(value, pretty: bool = True) -> str:
    """fastjson text of `value`: PrettyFormat by default, compact with pretty=False."""
    out: list[str] = []
    _write(value, 0, pretty, out)
    return "".join(out)
