"""Notes and warnings under --json (docs/output-contract.md, "Notes and warnings"): each line of stderr one JSON
object naming its level and kind, with the text and its numbers; --quiet silences the notes in that form too; the
error that ends a command stays one text line."""
from __future__ import annotations

import json
import pickle

from engine.findings import Note
from helpers import assert_one_line_error, put_jsonl, run, said, said_kinds


def test_a_note_is_its_text_with_a_kind_and_fields_and_pickles_with_them():
    n = Note("count-cut", "showing the first 2", shown=2)
    assert n == "showing the first 2" and isinstance(n, str)
    back = pickle.loads(pickle.dumps(n))   # worker processes hand notes back
    assert (back.kind, back.fields, str(back)) == ("count-cut", {"shown": 2}, "showing the first 2")
    assert json.dumps({"note": n}) == '{"note": "showing the first 2"}'   # in a document it is its text


def test_the_level_is_the_label_and_the_message_drops_it():
    from rmqtool.notes import as_json

    assert as_json("warning: x", "note", "k") == {"warning": "k", "message": "x"}
    assert as_json("problem: x", "note") == {"warning": None, "message": "x"}
    assert as_json("error: x", "warning", None, {"n": 1}) == {"error": None, "message": "x", "n": 1}
    assert as_json("note: x", "warning") == {"warning": None, "message": "x"}   # printed under --quiet: a warning
    assert as_json("note: x", "note") == {"note": None, "message": "x"}
    assert as_json(Note("k", "plain", a=1), "warning") == {"warning": "k", "message": "plain", "a": 1}


def test_quiet_silences_json_notes_keeps_warnings_and_the_ending_error_stays_text(tmp_path):
    store = tmp_path / "s"
    put_jsonl(store, [{"topic": "T", "keys": "k", "body": f"m{i}"} for i in range(3)])
    args = ["get", "-s", store, "-o", "0", "-o", str(1 << 40), "--json"]
    loud, quiet = run(args), run([*args, "--quiet"])
    assert loud.exit_code == quiet.exit_code == 2 and loud.stdout == quiet.stdout
    assert said_kinds(loud) == said_kinds(quiet) == ["message-not-found", "messages-not-returned"]  # problems stay
    cut = ["query-key", "-s", store, "-t", "T", "-k", "k", "--count", "1", "--json"]
    assert said_kinds(run(cut)) == ["count-cut"] and run([*cut, "-Q"]).stderr == ""
    one = run(["get", "-s", store, "-o", str(1 << 40), "--json"])   # one address: the error ends the command
    assert_one_line_error(one, 2)
    assert said(one) == []


def test_without_json_stderr_is_text(tmp_path):
    store = tmp_path / "s"
    put_jsonl(store, [{"topic": "T", "keys": "k", "body": f"m{i}"} for i in range(3)])
    r = run(["query-key", "-s", store, "-t", "T", "-k", "k", "--count", "1"])
    assert r.exit_code == 0 and [line.split(":")[0] for line in r.stderr.splitlines()] == ["note"]   # a labelled line
