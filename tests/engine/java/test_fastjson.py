"""engine.java.fastjson: the broker's config dialect (reader for any config/*.json, PrettyFormat writer)."""
from __future__ import annotations

import pytest

from engine.java.fastjson import FastjsonError, dumps, loads
from tiered_flat_helpers import F1_BAK, F1_META


def test_reader_takes_what_fastjson_takes():
    text = """// consumerOffset.json as a broker writes it, plus the leniency fastjson allows
    {
        "offsetTable":{
            "TopicTest@group_a":{0:100,1:200,},
            'single':{'k':'v\\u0041\\x42\\/'},
            unquoted:-12L,,
            /* comment */ "f":1.5e3,"t":true,"n":null,"arr":[1,,2,]
        }
    }"""
    got = loads(text)
    t = got["offsetTable"]
    assert t["TopicTest@group_a"] == {0: 100, 1: 200}
    assert list(t["TopicTest@group_a"]) == [0, 1] and isinstance(next(iter(t["TopicTest@group_a"])), int)
    assert t["single"] == {"k": "vAB/"} and t["unquoted"] == -12 and t["f"] == 1500.0
    assert t["t"] is True and t["n"] is None and t["arr"] == [1, 2]
    assert loads(b'\xef\xbb\xbf{"a":"\xc3\xa9"}') == {"a": "é"}


@pytest.mark.parametrize("bad", ["", "   ", "{", '{"a":1', '{"a":1} x', "{a:}", "[1 2]", '{"a":"\\q"}', '{"a":01x}',
                                 '{"a":"unterminated}', "{\"a\":1e}", "/* open", "\xff", "{" * 600 + "}" * 600])
def test_reader_refuses_what_fastjson_refuses(bad):
    with pytest.raises(FastjsonError):
        loads(bad)


def test_writer_is_prettyformat_byte_for_byte():
    for p in (F1_META, F1_BAK):
        text = p.read_text()
        assert dumps(loads(text)) == text
    doc = {"b": {"x": 1, "y": "a\"b\\c\n\x01"}, "e": {}, "l": [1, {"k": 2}], "m": {3: {"z": None, "w": False}},
           "s": []}
    assert dumps(doc) == ('{\n\t"b":{\n\t\t"x":1,\n\t\t"y":"a\\"b\\\\c\\n\\u0001"\n\t},\n\t"e":{},\n\t"l":[\n\t\t1,'
                          '\n\t\t{\n\t\t\t"k":2\n\t\t}\n\t],\n\t"m":{3:{\n\t\t\t"w":false\n\t\t}\n\t},\n\t"s":[]\n}')
    assert dumps({"a": [1, 2], 5: "x"}, pretty=False) == '{"a":[1,2],5:"x"}'
    assert loads(dumps(doc)) == {"b": {"x": 1, "y": "a\"b\\c\n\x01"}, "e": {}, "l": [1, {"k": 2}],
                                 "m": {3: {"w": False}}, "s": []}
