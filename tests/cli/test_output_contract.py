"""One output contract for every command (issue 23 item 6, docs/output-contract.md), checked by walking every
command the application registers: a command added without a sample here fails the first test.

Generic checks, per sample invocation on a small store of everything (helpers.sample_workspace): --json gives
camelCase names, one JSON document for an answer and NDJSON for a stream; the text form fits 80 columns and
prints times in one format; --quiet changes no data and silences every note. Per command: parser errors are one
line and exit 2, every option name takes one type everywhere. Then the rules that need a command of their own:
a topic the store does not have, a stream of one record vs two, a closed pipe.
"""
from __future__ import annotations

from helpers import REPO
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import READ_GEOM, assert_one_line_error, command_paths, run, said, said_kind, sample_workspace

DOC, STREAM = "document", "stream"

#: One or more sample invocations per command path: (arguments after the command, --json shape). Placeholders
#: {store} {tiered} {meta} {tidx} {tfile} {out} {segment} name the workspace's paths.
SAMPLES: dict[str, list[tuple[list[str], str]]] = {
    "put": [(["-s", "{store}", *READ_GEOM, "--commitlog-file-size", "4096", "--cq-file-size", "200", "-t", "TopicA",
              "--keys", "k1", "--body", "x"], STREAM)],
    "query-key": [(["-s", "{store}", "-t", "TopicA", "-k", "common"], STREAM),
                  (["-s", "{store}", "-t", "TopicA", "-k", "common", "--raw"], DOC)],
    "get": [(["-s", "{store}", "-o", "0"], STREAM), (["-s", "{store}", "-o", "0", "-o", "0"], STREAM),
            (["-s", "{store}", "-t", "TopicA", "-q", "0", "-i", "0", "-n", "2"], STREAM)],
    "dump-commitlog": [(["-s", "{store}", "-n", "12"], STREAM)],
    "inspect-index": [(["-s", "{store}"], STREAM), (["-s", "{store}", "--stats", "--verify"], STREAM)],
    "recover": [(["-s", "{store}", "--dry-run"], DOC)],
    "clean": [(["-s", "{store}", "--dry-run"], DOC)],
    "spark-reindex": [(["-s", "{store}", *READ_GEOM, "--master", "inline", "-o", "{out}"], DOC)],
    "print-msg": [(["-s", "{store}", "-t", "TopicB", "-b", "0", "-e", "now"], STREAM)],
    "queues": [(["-s", "{store}"], DOC)],
    "dump-cq": [(["-s", "{store}", "-t", "TopicA", "-q", "0"], STREAM)],
    "verify-cq": [(["-s", "{store}", "-t", "TopicB"], DOC), (["-s", "{rstore}", "--compare"], DOC),
                  (["-s", "{rstore}", "--source", "rocksdb", "-t", "TopicB"], DOC)],
    "consumers": [(["-s", "{store}"], DOC)],
    "delays": [(["-s", "{store}"], DOC)],
    "info": [(["-s", "{store}"], DOC)],
    "prune": [(["-s", "{store}", "--dry-run"], DOC), (["-s", "{store}"], DOC)],
    "tiered queues": [(["-T", "{tiered}", "--metadata", "{meta}"], STREAM)],
    "tiered segments": [(["-T", "{tiered}", "--metadata", "{meta}", "-t", "TopicTest", "-q", "0"], STREAM)],
    "tiered get": [(["-T", "{tiered}", "--metadata", "{meta}", "-t", "TopicTest", "-q", "0", "-i", "0", "-n", "2"],
                    DOC)],
    "tiered offset-by-time": [(["-T", "{tiered}", "--metadata", "{meta}", "-t", "TopicTest", "-q", "0",
                                "--timestamp", "0"], STREAM)],
    "tiered dump-cq": [(["-T", "{tiered}", "--metadata", "{meta}", "-t", "TopicTest", "-q", "0"], STREAM)],
    "tiered verify": [(["-T", "{tiered}", "--metadata", "{meta}"], DOC)],
    "tiered dispatch": [(["-s", "{store}", "-T", "{out}", "--broker-name", "broker-a", "-t", "TopicB", "--master", "inline",
                          "--dry-run"], DOC)],
    "tiered clean": [(["-T", "{tiered}", "--metadata", "{meta}", "--reserved-hours", "1.5", "--dry-run"], DOC)],
    "tiered rebuild-metadata": [(["-T", "{tiered}", "--broker-name", "broker-a", "--from", "{meta}", "-o", "{out}"],
                                 DOC)],
    "tiered query-key": [(["-T", "{f3tier}", "-s", "{f3store}", "-t", "{f3topic}", "-k", "{f3key}"], STREAM),
                         (["-T", "{f3tier}", "-s", "{f3store}", "-t", "{f3topic}", "-k", "{f3key}", "--raw"], STREAM)],
    "tiered inspect-index": [(["{tfile}"], STREAM), (["--tiered-dir", "{tidx}", "--stats", "--verify"], STREAM)],
    "tiered compact-index": [(["{tfile}", "-o", "{out}"], DOC)],
    "tiered reindex": [(["-s", "{store}", "--broker-name", "broker-a", "-o", "{out}", "--master", "inline",
                         "--hash-slots", "16", "--max-index", "64"], DOC)],
    "timer inspect": [(["-c", "{timerconf}"], DOC)],
    "timer list": [(["-c", "{timerconf}"], STREAM)],
    "timer verify": [(["-c", "{timerconf}"], DOC)],
    "doctor": [(["-s", "{store}"], DOC)],
    "repair config": [(["-s", "{store}", "topics.json", "--from-store", "--dry-run"], DOC),
                      (["-s", "{store}", "topics.json", "--from-store"], DOC)],
    "repair consume-queue": [(["-s", "{store}", "--dry-run"], DOC)],
    "repair timer": [(["-c", "{timerconf}", "--dry-run"], DOC)],
}
#: Command paths with no sample, and why.
NO_SAMPLE = {
    "demo": "writes a sample store of its own and runs other commands (tests/cli/test_demo.py)",
    "tiered": "a group: its subcommands have samples",
    "timer": "a group: its subcommands have samples",
    "repair": "a group: its subcommands have samples",
}
#: Commands whose --quiet means something else (docs/output-contract.md says what).
OWN_QUIET = {"put": "--quiet leaves out the acknowledgements (put's data); its summary stays"}
#: JSON fields whose keys are data (property names, file types, histogram buckets), not names of ours.
DATA_MAPS = {"properties", "chainLengthHistogram", "segments", "bytes", "newSegments", "entriesByHow", "sources",
             "problems", "offsetTable", "segmentsDeleted", "byStatus"}
CAMEL = re.compile(r"^[a-z][a-zA-Z0-9]*$")
ISO_T = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> dict[str, Path]:
    return sample_workspace(tmp_path_factory.mktemp("contract"))


def fresh(ws: dict, tmp_path: Path, template: list[str]) -> dict:
    """A copy of the workspace for one run, always at the same path (writers change it; every run starts from
    the same state and names the same paths). What lies outside it is only read, and named where it is. Only the
    parts of the workspace the invocation (template) names are copied: a run is given no other path, and a copy of
    the store alone costs a third of the whole workspace's (the rocksdb twin and the tiered store)."""
    base = ws["store"].parent
    copy = tmp_path / "ws"
    if copy.exists():
        shutil.rmtree(copy)
    copy.mkdir()
    named = " ".join(template)
    for top in sorted({v.relative_to(base).parts[0] for k, v in ws.items()
                       if f"{{{k}}}" in named and isinstance(v, Path) and v.is_relative_to(base)}):
        if (base / top).is_dir():
            shutil.copytree(base / top, copy / top, symlinks=True)
        elif (base / top).exists():
            shutil.copy2(base / top, copy / top)
    return {k: copy / v.relative_to(base) if isinstance(v, Path) and v.is_relative_to(base) else v
            for k, v in ws.items()}


def args_of(path: str, template: list[str], paths: dict[str, Path]) -> list[str]:
    return [*path.split(), *(a.format(**{k: str(v) for k, v in paths.items()}) for a in template)]


def sample_ids():
    return [(p, i) for p, samples in SAMPLES.items() for i in range(len(samples))]


IDS = [f"{p}#{i}" for p, i in sample_ids()]


def test_every_command_has_a_sample_or_says_why_not():
    paths = {p for p, _ in command_paths()}
    assert paths == set(SAMPLES) | set(NO_SAMPLE), (paths ^ (set(SAMPLES) | set(NO_SAMPLE)))


def non_camel_keys(obj, where: str = "") -> list[str]:
    bad = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not CAMEL.match(k):
                bad.append(f"{where}.{k}")
            if k not in DATA_MAPS:
                bad += non_camel_keys(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for v in obj:
            bad += non_camel_keys(v, where + "[]")
    return bad


@pytest.mark.parametrize("path,i", sample_ids(), ids=IDS)
def test_json_is_camel_case_one_document_or_ndjson(ws, tmp_path, path, i):
    template, shape = SAMPLES[path][i]
    r = run([*args_of(path, template, fresh(ws, tmp_path, template)), "--json"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines, "no output"
    docs = [json.loads(line) for line in lines]  # every line is one JSON value: nothing spans lines
    assert all(isinstance(d, dict) for d in docs), lines[:3]
    if shape == DOC:
        assert len(docs) == 1, f"{path} answers with one document, got {len(docs)} lines"
    for d in docs:
        assert non_camel_keys(d) == [], (path, non_camel_keys(d))


#: Commands whose notes and warnings all have a stable kind (the streaming commands: a script reads their stderr).
NAMED_NOTES = {"put", "query-key", "get", "dump-commitlog", "print-msg", "dump-cq"}


def json_lines_said(r) -> list[dict]:
    """Under --json every line of stderr is one JSON object naming its level ("note", "warning" or "error") and
    holding its "message", or the `error: ...` line that ends a command (docs/output-contract.md)."""
    out = []
    for line in r.stderr.splitlines():
        if line.startswith("error: "):
            continue
        d = json.loads(line)
        assert isinstance(d, dict) and isinstance(d.get("message"), str), line
        assert sum(k in d for k in ("note", "warning", "error")) == 1, line
        assert non_camel_keys(d) == [], line
        out.append(d)
    return out


@pytest.mark.parametrize("path,i", sample_ids(), ids=IDS)
def test_under_json_every_stderr_line_is_a_json_object_or_an_error_line(ws, tmp_path, path, i):
    template, _ = SAMPLES[path][i]
    r = run([*args_of(path, template, fresh(ws, tmp_path, template)), "--json"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    lines = json_lines_said(r)
    if path in NAMED_NOTES:
        assert [d for d in lines if said_kind(d) is None] == [], path
    if path not in OWN_QUIET:  # --quiet silences the notes in their JSON form too
        quiet = run([*args_of(path, template, fresh(ws, tmp_path, template)), "--json", "--quiet"], env={"COLUMNS": "80"})
        assert quiet.exit_code == 0 and [d for d in json_lines_said(quiet) if "note" in d] == [], quiet.stderr


def test_a_damaged_stream_says_its_problems_as_json_with_kinds_and_fields(tmp_path):
    """get of an offset outside the log and one inside: the failure is a JSON line with its kind and fields, the
    exit code stays the contract's; without --json the same line is text."""
    from helpers import put_jsonl

    store = tmp_path / "s"
    put_jsonl(store, [{"topic": "T", "body": "x"}])
    r = run(["get", "-s", store, "-o", "0", "-o", str(1 << 40), "--json"])
    assert r.exit_code == 2 and len(r.stdout.splitlines()) == 1
    (miss,) = said(r, "message-not-found")
    assert "error" in miss and miss["asked"] == "offset" and miss["value"] == str(1 << 40)
    (summary,) = said(r, "messages-not-returned")
    assert (summary["failed"], summary["asked"]) == (1, 2) and "warning" in summary
    text = run(["get", "-s", store, "-o", "0", "-o", str(1 << 40)])
    assert text.exit_code == 2 and [line.split(":")[0] for line in text.stderr.splitlines()] == ["error", "1 of 2 message(s) could not be returned"]


#: The streaming commands on a store with one damaged record (not in the last segment): (arguments, exit code).
DAMAGED_STREAMS = [
    (["print-msg", "-t", "T", "-b", "0"], 3),
    (["dump-cq", "-t", "T", "-q", "0", "-n", "60"], 3),
    (["dump-commitlog"], 3),
    (["get", "-t", "T", "-q", "0", "-i", "0", "-n", "30"], 3),
    (["get", "-o", "{victim}", "-o", "0"], 3),
    (["query-key", "-t", "T", "-k", "k", "-n", "100"], 0),
]


@pytest.fixture(scope="module")
def damaged_store(tmp_path_factory):
    from helpers import put_jsonl

    store = tmp_path_factory.mktemp("damaged") / "s"
    acks = put_jsonl(store, [{"topic": "T", "keys": "k", "queueId": i % 2, "body": "x" * 200} for i in range(60)])
    victim = next(a for a in acks if a["commitLogOffset"] >= 4096 and a["queueId"] == 0)
    seg = store / "commitlog" / f"{victim['commitLogOffset'] // 4096 * 4096:020d}"
    data = bytearray(seg.read_bytes())
    pos = victim["commitLogOffset"] % 4096
    data[pos + 4:pos + 8] = b"\0\0\0\1"   # its magic code
    seg.write_bytes(bytes(data))
    return store, victim["commitLogOffset"]


@pytest.mark.parametrize("args,code", DAMAGED_STREAMS, ids=[" ".join(a[:2]) for a, _ in DAMAGED_STREAMS])
def test_a_damaged_stream_names_every_line_it_says_under_json(damaged_store, args, code):
    store, victim = damaged_store
    argv = [args[0], "-s", store, *(a.format(victim=victim) for a in args[1:]), "--json"]
    r = run(argv)
    assert r.exit_code == code, r.output
    lines = json_lines_said(r)
    assert [d for d in lines if said_kind(d) is None] == [], r.stderr
    if code == 3:   # what explains the exit is there under --quiet too, and is not a note
        explained = [d for d in json_lines_said(run([*argv, "--quiet"])) if "note" not in d]
        assert explained and explained == [d for d in lines if "note" not in d]


def fits(line: str, width: int = 80) -> bool:
    """A line fits, or its overflow is one value that cannot be cut (a path or an id alone on its line)."""
    return len(line) <= width or len(line.split()) == 1


@pytest.mark.parametrize("path,i", sample_ids(), ids=IDS)
def test_text_fits_80_columns_with_one_time_format(ws, tmp_path, path, i):
    template, _ = SAMPLES[path][i]
    r = run(args_of(path, template, fresh(ws, tmp_path, template)), env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    wide = [line for line in r.stdout.splitlines() if not fits(line)]
    assert wide == [], f"{path}: {len(wide)} line(s) over 80 columns, e.g. {wide[0]!r}"
    assert not ISO_T.search(r.stdout), f"{path}: an ISO 'T' time in a table (engine.views.times.local_time is the one form)"


def masked(text: str) -> str:
    """Text with its numbers masked: times, durations, rates and offsets of a fresh copy differ run to run, and
    with its white space as one space: a value whose length depends on them (a rate, 355 B/s or 1.2 MiB/s, under
    load) pads its column or wraps its line elsewhere (issue 33 item 11: no test may depend on timing)."""
    return re.sub(r"\d+(?:[,.]\d+)*(?: ?(?:B|KiB|MiB|GiB|TiB|ms|s|min|h|d)\b)?", "0", " ".join(text.split()))


def test_masked_text_does_not_depend_on_the_rates():
    fast = "elapsed     0.21 s\nthroughput  1.2 MiB/s, 12,345 messages/s (scan stage 980.5\n            KiB/s)\n"
    slow = "elapsed     38.07 s\nthroughput  355 B/s, 2 messages/s (scan stage 374 B/s)\n"
    assert masked(fast) == masked(slow)
    assert masked("12 messages") != masked("12 keys")
    assert masked("index.bak-0 59 s 0") == masked("index.bak-0 1 min 0")   # an age read a minute apart


@pytest.mark.parametrize("path,i", sample_ids(), ids=IDS)
def test_quiet_silences_notes_and_keeps_the_data(ws, tmp_path, path, i):
    template, _ = SAMPLES[path][i]
    if path in OWN_QUIET:  # put -Q: no acknowledgement (its data), the summary line only
        r = run([*args_of(path, template, fresh(ws, tmp_path, template)), "--quiet"], env={"COLUMNS": "80"})
        assert r.exit_code == 0 and r.stdout == "" and r.stderr.startswith("stored 1 message(s)"), r.output
        return
    loud = run(args_of(path, template, fresh(ws, tmp_path, template)), env={"COLUMNS": "80"})
    quiet = run([*args_of(path, template, fresh(ws, tmp_path, template)), "--quiet"], env={"COLUMNS": "80"})
    assert loud.exit_code == quiet.exit_code == 0, quiet.output
    assert masked(quiet.stdout) == masked(loud.stdout)
    said = quiet.stderr.splitlines()
    assert said == [], f"{path} --quiet still says: {said}"


COMMANDS = [(p, c) for p, c in command_paths() if not getattr(c, "commands", None)]


ALL = command_paths()


@pytest.mark.parametrize("path,cmd", ALL, ids=[p for p, _ in ALL])
def test_every_command_and_option_has_help(path, cmd):
    assert (cmd.help or "").strip(), f"{path} has no help text"
    for p in cmd.params:
        assert (getattr(p, "help", None) or "").strip(), f"{path} {p.name} has no help text"
    r = run([*path.split(), "--help"])
    assert r.exit_code == 0 and r.stdout.startswith("Usage: rmqtool") and r.stderr == ""


@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[p for p, _ in COMMANDS])
def test_every_command_takes_quiet(path, cmd):
    opts = {o for p in cmd.params for o in p.opts}
    if path not in NO_SAMPLE:
        assert {"--quiet", "-Q", "--json"} <= opts, path


@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[p for p, _ in COMMANDS])
def test_parser_errors_are_one_line(tmp_path, path, cmd):
    assert_one_line_error(run([*path.split(), "--no-such-option"]), 2, "no such option")
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for p in cmd.params:
        if getattr(p, "param_type_name", "") != "option" or not p.opts[0].startswith("--") or p.is_flag:
            continue
        kind = type(p.type).__name__
        if kind in ("IntParamType", "FloatParamType", "IntRange", "FloatRange"):
            r = run([*path.split(), p.opts[0], "twelve"])
            assert_one_line_error(r, 2, p.opts[0])
        if kind == "Path" and p.type.file_okay is False:
            r = run([*path.split(), p.opts[0], a_file])
            assert_one_line_error(r, 2, "is a file")


def option_types() -> dict[str, dict[str, list[str]]]:
    """long option name -> {type name: [command paths]} over every command."""
    out: dict[str, dict[str, list[str]]] = {}
    for path, cmd in COMMANDS:
        for p in cmd.params:
            if getattr(p, "param_type_name", "") != "option":
                continue
            kind = "flag" if p.is_flag else type(p.type).__name__.replace("Range", "").replace("ParamType", "")
            for o in p.opts:
                if o.startswith("--"):
                    out.setdefault(o, {}).setdefault(kind, []).append(path)
    return out


#: Long options whose commands differ in type, and why that is right.
TYPE_EXCEPTIONS: dict[str, str] = {}


def test_an_option_name_takes_one_type_everywhere():
    mixed = {o: kinds for o, kinds in option_types().items() if len(kinds) > 1 and o not in TYPE_EXCEPTIONS}
    assert mixed == {}, mixed


#: Short options that mean different long options in different commands (kept: scripts use them).
SHORT_EXCEPTIONS = {
    "-o": "--offset in get (a commit-log offset, as mqadmin queryMsgByOffset's -o), --out where a command writes",
    "-n": "how many: --count of a stream, --max of a search, --messages of demo",
    "-k": "--key of query-key (the key looked up), --keys of put (the message's keys)",
}


def test_a_short_option_means_one_long_option():
    meaning: dict[str, set[str]] = {}
    for _path, cmd in COMMANDS:
        for p in cmd.params:
            if getattr(p, "param_type_name", "") == "option" and not getattr(p, "hidden", False):
                longs = [o for o in p.opts if o.startswith("--")]
                for o in p.opts:
                    if not o.startswith("--") and longs:
                        meaning.setdefault(o, set()).add(longs[0])
    mixed = {s: sorted(m) for s, m in meaning.items() if len(m) > 1 and s not in SHORT_EXCEPTIONS}
    assert mixed == {}, mixed


def test_the_contract_document_names_every_command_and_its_json_shape():
    text = (REPO / "docs" / "output-contract.md").read_text()
    rows = dict(re.findall(r"^\| `rmqtool ([a-z -]+)` \| \(?([a-z]+)", text, re.M))
    assert {p for p, _ in COMMANDS} <= set(rows), {p for p, _ in COMMANDS} - set(rows)
    for path, samples in SAMPLES.items():
        for args, shape in samples:
            if "--raw" not in args:  # query-key --raw answers with one document (the row says so)
                assert rows[path] == shape, (path, rows[path], shape)
    readme = (REPO / "README.md").read_text()
    assert "docs/output-contract.md" in readme and "| `--quiet`" in readme


# ------------------------------------------------------------------ rules with commands of their own


UNKNOWN_TOPIC = [
    ["query-key", "-s", "{store}", "-t", "TopicC", "-k", "common"],
    ["dump-commitlog", "-s", "{store}", "--topic", "TopicC"],
    ["print-msg", "-s", "{store}", "-t", "TopicC", "-b", "0", "-e", "now"],
    ["queues", "-s", "{store}", "-t", "TopicC"],
    ["dump-cq", "-s", "{store}", "-t", "TopicC", "-q", "0"],
    ["get", "-s", "{store}", "-t", "TopicC", "-q", "0", "-i", "0"],
    ["get", "-s", "{store}", "-t", "TopicC", "-m", "7F0000010DEB487C01A088D9955604E5"],
    ["tiered", "segments", "-T", "{tiered}", "--metadata", "{meta}", "-t", "TopicC", "-q", "0"],
    ["tiered", "get", "-T", "{tiered}", "--metadata", "{meta}", "-t", "TopicC", "-q", "0", "-i", "0"],
    ["tiered", "dump-cq", "-T", "{tiered}", "--metadata", "{meta}", "-t", "TopicC", "-q", "0"],
    ["tiered", "query-key", "-T", "{f3tier}", "-s", "{f3store}", "-t", "TopicC", "-k", "x"],
]
# Not here: `timer list --topic` filters the pending messages by the topic they will be delivered to, which need
# not have a consume queue yet; a topic none of them has is an empty answer (exit 0, said on stderr).


@pytest.mark.parametrize("template", UNKNOWN_TOPIC, ids=[" ".join(t[:2]) for t in UNKNOWN_TOPIC])
def test_a_topic_the_store_does_not_have_is_exit_2_naming_it(ws, template):
    r = run([a.format(**{k: str(v) for k, v in ws.items()}) for a in template])
    assert_one_line_error(r, 2, "'TopicC'")
    assert r.stdout == ""
    assert re.search(r"'Topic[ABT]", r.stderr), r.stderr  # it lists what there is


def test_many_topics_are_listed_as_a_few_and_n_more(tmp_path):
    from helpers import put_jsonl

    store = tmp_path / "s"
    put_jsonl(store, [{"topic": f"Topic{i:02d}", "body": "x"} for i in range(12)])
    r = run(["queues", "-s", store, "-t", "Topic1"])
    assert_one_line_error(r, 2, "and 7 more")
    assert "did you mean" in r.stderr  # close spellings come first


def test_a_search_that_finds_nothing_answers_0_and_says_so(ws):
    r = run(["query-key", "-s", ws["store"], "-t", "TopicA", "-k", "no-such-key", "--json"])
    assert r.exit_code == 0 and r.stdout == ""
    (empty,) = said(r, "no-message")   # an empty answer says so
    assert (empty["key"], empty["topic"], empty["candidates"]) == ("no-such-key", "TopicA", 0)
    q = run(["query-key", "-s", ws["store"], "-t", "TopicA", "-k", "no-such-key", "--json", "--quiet"])
    assert q.exit_code == 0 and q.stdout == "" and q.stderr == ""


def test_one_record_or_two_stream_the_same_shape(ws):
    one = run(["get", "-s", ws["store"], "-o", "0", "--json"])
    two = run(["get", "-s", ws["store"], "-o", "0", "-o", "0", "--json"])
    assert one.exit_code == two.exit_code == 0
    a, (b, c) = [json.loads(x) for x in one.stdout.splitlines()], [json.loads(x) for x in two.stdout.splitlines()]
    assert a == [b] and b == c  # one NDJSON line per message, the same fields whatever the count


def test_quiet_keeps_errors_and_warnings(ws):
    r = run(["query-key", "-s", ws["store"], "-t", "TopicC", "-k", "x", "--quiet"])
    assert_one_line_error(r, 2, "'TopicC'")


@pytest.mark.parametrize("extra", [[], ["--json"]], ids=["table", "json"])
def test_a_closed_pipe_ends_with_0_and_nothing_on_stderr(ws, tmp_path, extra):
    offsets = tmp_path / "offsets"
    offsets.write_text("0\n" * 20_000)  # megabytes of answer: the reader goes away long before the end
    args = ["get", "-s", str(ws["store"]), "-f", str(offsets), *extra]
    line = " ".join(f"'{a}'" for a in [sys.executable, "-m", "rmqtool", *args])
    p = subprocess.run(["bash", "-c", f"set -o pipefail; {line} 2>{tmp_path}/err | head -1"], cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "220"}, capture_output=True,
                       text=True, timeout=120)  # wide: no note of columns left out
    assert len(p.stdout.splitlines()) == 1
    assert (tmp_path / "err").read_text() == ""
    assert p.returncode == 0
