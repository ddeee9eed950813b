"""Tables that read at 80 columns (issue 14 item 8): rmqtool.tables, and the commands that use it under
COLUMNS=80 and a wide terminal (CliRunner env), with --json the same at every width."""
from __future__ import annotations

import io
import json
import re

import pytest
from typer.testing import CliRunner

from helpers import put_jsonl
from rmqtool import tables
from rmqtool.tables import FIXED, NUM, TEXT, Column

COLS = [
    Column("topic", "topic", TEXT, min_width=8),
    Column("queueId", "queueId", NUM),
    Column("offset", "maxOffset", NUM),
    Column("time", "lastStoreTime", FIXED, drop=2),
    Column("first", "firstStoreTime", FIXED, drop=3),
    Column("bytes", "bytes", NUM, drop=1),
]
ROWS = [{"topic": "Topic-with-a-rather-long-name-" + "x" * 20, "queueId": 7, "offset": 123456789012345,
         "time": "2024-01-31 10:00:00.000", "first": "2024-01-31 09:00:00.000", "bytes": 98765432109876},
        {"topic": "T", "queueId": 1234, "offset": 0, "time": "", "first": "", "bytes": 5}]
NUMBERS = ["123456789012345", "98765432109876", "1234", "7"]


def render(width, rows=ROWS, cols=COLS, capsys=None):
    out = io.StringIO()
    tables.table(rows, cols, width=width, out=out)
    return out.getvalue()


@pytest.mark.parametrize("width", [200, 120, 80, 60, 40, 30, 20])
def test_numbers_never_fold_and_lines_fit(width, capsys):
    text = render(width)
    for n in NUMBERS:
        if n in "".join(text.split()):
            assert re.search(rf"(?<!\d){n}(?!\d)", text), (n, text)   # whole, on one line
    whole = {str(v) for r in ROWS for v in r.values() if not isinstance(v, str) or v[:4] == "2024"}
    for line in text.splitlines():
        # only a value that can never fold (a number, a time), alone on its line, may be wider than the terminal
        assert len(line) <= width or (line.startswith("  ") and line.strip() in whole), (width, line)


def test_wide_is_one_row_per_record(capsys):
    text = render(200)
    lines = text.splitlines()
    assert len(lines) == 4 and "firstStoreTime" in lines[0]
    assert capsys.readouterr().err == ""


def test_narrow_drops_low_value_columns_with_a_note(capsys):
    text = render(80)
    err = capsys.readouterr().err
    assert "firstStoreTime" not in text and "maxOffset" in text and "bytes" in text
    assert err.startswith("note: firstStoreTime left out to fit 80 columns")
    text = render(60)
    err = capsys.readouterr().err
    assert "lastStoreTime" not in text and "firstStoreTime, lastStoreTime left out" in err
    # the long topic wraps (text may wrap), the numbers stay whole
    assert "123456789012345" in text and text.count("\n") > 4


def test_too_narrow_switches_to_vertical_with_every_field(capsys):
    text = render(30)
    err = capsys.readouterr().err
    assert "one block per record" in err
    assert text.count("-[ ") == 2
    for header in ("topic", "queueId", "maxOffset", "lastStoreTime", "firstStoreTime", "bytes"):
        assert re.search(rf"^{header}\s", text, re.M), header
    assert re.search(r"^bytes\s+98765432109876$", text, re.M)
    assert re.search(r"^firstStoreTime\n  2024-01-31 09:00:00.000$", text, re.M)   # below its name, whole


def test_stream_widens_a_number_rather_than_fold():
    out = io.StringIO()
    s = tables.Stream([Column("q", "queueOffset"), Column("t", "tags", TEXT, min_width=4)], {"q": 3, "t": 4},
                      width=30, out=out)
    s.row({"q": 12, "t": "a b c d e f g h"})
    s.row({"q": 123456789012345678, "t": "x"})
    s.finish()
    text = out.getvalue()
    assert "123456789012345678" in text
    assert s.count == 2 and s.shows("t")


ROW_COLS = [Column("off", "offset", NUM), Column("kind", "type", FIXED), Column("size", "size", NUM, drop=2),
            Column("topic", "topic", FIXED, drop=1), Column("note", "note", FIXED)]


def test_row_stream_formats_rows_as_the_stream_plans_them(capsys):
    """RowStream: the header and widths of Stream's plan, rows by one template (a fixed column written once), wider
    values pushing their row on; at a narrow width the dropped columns are named on stderr."""
    lines = tables.LineWriter()
    rs = tables.RowStream(ROW_COLS, {"off": 6, "kind": 7, "size": 4, "topic": 8, "note": 10}, lines, width=200)
    rs.rows([(5, 12, "TopicA", "id-1"), (123456789012, 3, "T" * 12, "x")], {"kind": "MESSAGE"})
    rs.values({"off": 7, "kind": "CORRUPT", "note": "bad CRC"})
    lines.flush()
    out = capsys.readouterr().out.splitlines()
    assert out == ["offset  type     size  topic     note", "------  -------  ----  --------  ----------",
                   "     5  MESSAGE    12  TopicA    id-1",
                   "123456789012  MESSAGE     3  TTTTTTTTTTTT  x",
                   "     7  CORRUPT" + " " * 18 + "bad CRC"]
    assert rs.count == 3
    narrow = tables.RowStream(ROW_COLS, {"off": 6, "kind": 7, "size": 4, "topic": 8, "note": 10}, lines, width=30)
    narrow.rows([(5, 12, "TopicA", "id-1")], {"kind": "MESSAGE"})
    lines.flush()
    got = capsys.readouterr()
    assert got.out.splitlines() == ["offset  type     note", "------  -------  ----------", "     5  MESSAGE  id-1"]
    assert got.err == "note: size, topic left out to fit 30 columns (a wider terminal, COLUMNS=..., or --json shows " \
                      "every field)\n"
    vertical = tables.RowStream(ROW_COLS, {"off": 6, "kind": 7, "size": 4, "topic": 8, "note": 10}, lines, width=20)
    vertical.rows([(5, 12, "TopicA", "id-1")], {"kind": "MESSAGE"})
    lines.flush()
    assert "MESSAGE" in capsys.readouterr().out and vertical.vertical


def test_empty_table_and_cut_note(capsys):
    out = io.StringIO()
    tables.table([], COLS, width=200, out=out, empty="(nothing)", title="a title")
    assert out.getvalue() == ""  # no title, no header without rows (issue 33 item 12): the note says it
    assert capsys.readouterr().err.splitlines() == ["note: nothing"]
    tables.cut_note(10, "--max", "messages", total=25)
    tables.cut_note(10, "--max", "messages", at_least=25)
    tables.cut_note(10, "--max", "messages")
    err = capsys.readouterr().err.splitlines()
    assert err == ["note: showing the first 10 of 25 messages (--max 10)",
                   "note: showing the first 10 messages (--max 10); up to 25 in all (the exact total is not known "
                   "without reading them all)",
                   "note: showing the first 10 messages (--max 10); more may follow"]
    from rmqtool import notes

    notes.set_json(True)   # as under --json: the same notes as JSON objects, their numbers as fields
    try:
        tables.cut_note(10, "--max", "messages", total=25)
        tables.cut_note(10, "--max", "messages", at_least=25)
    finally:
        notes.set_json(False)
    got = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(d["note"], d["shown"], d["limit"], d.get("total"), d.get("atLeast")) for d in got] == [
        ("count-cut", 10, "--max", 25, None), ("count-cut", 10, "--max", None, 25)]
    assert got[0]["message"] == err[0][len("note: "):]


def test_terminal_width_from_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert tables.terminal_width() == 80
    monkeypatch.setenv("COLUMNS", "5")
    assert tables.terminal_width() == tables.NARROWEST
    monkeypatch.delenv("COLUMNS")
    assert tables.terminal_width() == tables.WIDE      # pytest's stdout is not a terminal: piped


# ------------------------------------------------------------------------------------------- commands


T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("tables") / "store"
    put_jsonl(root, [{"topic": "TopicWithAQuiteLongNameForTables", "queueId": i % 2, "storeTimestamp": T0 + i,
                      "tags": "TagA", "keys": f"order-{i} user-{i}", "body": "payload " * 20}
                     for i in range(6)])
    return root


def invoke(args, columns):
    from rmqtool.app import app
    return CliRunner(env={"COLUMNS": str(columns)}).invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("args", [
    ["queues"],
    ["print-msg", "-t", "TopicWithAQuiteLongNameForTables", "--begin", T0, "--end", "now"],
    ["dump-cq", "-t", "TopicWithAQuiteLongNameForTables", "-q", "1"],
])
def test_commands_read_at_80_columns_and_json_does_not_depend_on_width(store, args):
    narrow = invoke([args[0], "-s", store, *args[1:]], 80)
    wide = invoke([args[0], "-s", store, *args[1:]], 250)
    assert narrow.exit_code == 0 and wide.exit_code == 0, narrow.output + wide.output
    for line in narrow.stdout.splitlines():
        assert len(line) <= 80, line
    assert max(len(line) for line in wide.stdout.splitlines()) > 80     # the wide terminal gets every column
    assert "left out to fit 80 columns" in narrow.stderr or "one block per record" in narrow.stderr
    jn = invoke([args[0], "-s", store, *args[1:], "--json"], 80)
    jw = invoke([args[0], "-s", store, *args[1:], "--json"], 250)
    assert jn.stdout == jw.stdout and jn.stdout.strip()
    for line in jn.stdout.splitlines():
        json.loads(line)


def test_commit_log_offsets_are_whole_in_narrow_tables(store):
    wide = invoke(["dump-cq", "-s", store, "-t", "TopicWithAQuiteLongNameForTables", "-q", "1", "--json"], 250)
    offsets = [str(json.loads(line)["commitLogOffset"]) for line in wide.stdout.splitlines()]
    narrow = invoke(["dump-cq", "-s", store, "-t", "TopicWithAQuiteLongNameForTables", "-q", "1"], 80)
    for off in offsets:
        assert re.search(rf"(?<!\d){off}(?!\d)", narrow.stdout), off
