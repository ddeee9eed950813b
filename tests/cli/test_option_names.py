"""One vocabulary (issue 14 item 7): the same flag for the same thing, old spellings gone (CHANGELOG.md), cuts
reported."""
from __future__ import annotations

import json
import re

from helpers import READ_GEOM, assert_one_line_error, put_jsonl, run, said


def test_query_key_max_cut_is_reported_with_the_flag(tmp_path):
    store = tmp_path / "s"
    put_jsonl(store, [{"topic": "T", "keys": "k", "body": f"m{i}"} for i in range(5)])
    r = run(["query-key", "-s", store, "-t", "T", "-k", "k", "--count", "2", "--json", *READ_GEOM])
    assert r.exit_code == 0, r.output
    assert len(r.stdout.splitlines()) == 2
    (cut,) = said(r, "count-cut")
    assert (cut["shown"], cut["limit"]) == (2, "--count")
    whole = run(["query-key", "-s", store, "-t", "T", "-k", "k", "--count", "5", "--json", *READ_GEOM])
    assert len(whole.stdout.splitlines()) == 5 and said(whole) == []
    # the two shown are the newest two, as before (the broker walks newest first)
    newest = sorted(json.loads(x)["commitLogOffset"] for x in whole.stdout.splitlines())[-2:]
    assert sorted(json.loads(x)["commitLogOffset"] for x in r.stdout.splitlines()) == newest


def test_query_key_times_use_the_one_grammar(tmp_path):
    store = tmp_path / "s"
    put_jsonl(store, [{"topic": "T", "keys": "k", "body": "m"}])
    assert_one_line_error(run(["query-key", "-s", store, "-t", "T", "-k", "k", "--begin", "1706659200",
                               *READ_GEOM]), 2, "looks like epoch seconds")
    r = run(["query-key", "-s", store, "-t", "T", "-k", "k", "--begin", "now-1d", "--end", "now+1d", "--json",
             *READ_GEOM])
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 1, r.output


def test_inspect_index_count_and_no_old_spelling(tmp_path):
    store = tmp_path / "s"
    put_jsonl(store, [{"topic": "T", "keys": "k", "body": f"m{i}"} for i in range(6)])
    for flag in ("--limit", "--max"):  # the old spellings are gone (the tool was never released: CHANGELOG.md)
        assert run(["inspect-index", "-s", store, "--walk-key", "T#k", flag, "2", *READ_GEOM]).exit_code == 2
    for flag in ("--count", "-n"):
        r = run(["inspect-index", "-s", store, "--walk-key", "T#k", flag, "2", "--json", *READ_GEOM])
        assert r.exit_code == 0, r.output
        walk = json.loads(r.stdout.splitlines()[0])
        assert len(walk["items"]) == 2 and "(limit)" in walk["stop"]
        assert [(c["shown"], c["limit"]) for c in said(r, "count-cut")] == [(2, "--count")]
    help_text = run(["inspect-index", "--help"]).stdout
    assert "--count" in help_text and "--limit" not in help_text and not re.search(r"--max\b(?!-)", help_text)


def test_dump_cq_count_short_flag_is_n_and_c_stays_broker_conf(tmp_path):
    store = tmp_path / "s"
    put_jsonl(store, [{"topic": "T", "body": f"m{i}"} for i in range(4)])
    r = run(["dump-cq", "-s", store, "-t", "T", "-q", "0", "-n", "2", "--json"])
    assert r.exit_code == 0, r.output
    assert len(r.stdout.splitlines()) == 2


def test_tiered_t_is_topic_and_a_path_given_to_it_is_refused(tmp_path):
    r = run(["tiered", "queues", "-t", str(tmp_path)])
    assert r.exit_code == 2 and "-T/--tiered-store-path" in r.output
    help_text = run(["tiered", "get", "--help"]).stdout
    assert "-t, --topic" in help_text and "-T, --tiered-store-path" in help_text and "-i, --queue-offset" in help_text
    clean_help = run(["tiered", "clean", "--help"]).stdout
    assert "--reserved-hours" in clean_help and "--reserve-hours" not in clean_help


# One long name for a limit (issue 33 item 8): --count everywhere, -n its short form; --max, the old spelling of
# query-key, print-msg, inspect-index and the tiered ones, is gone (the tool was never released: CHANGELOG.md).
LIMITED = [["query-key", "-t", "T", "-k", "k"], ["print-msg", "-t", "T", "--begin", "0"],
           ["inspect-index", "--walk-key", "T#k"], ["dump-cq", "-t", "T", "-q", "0"], ["dump-commitlog"],
           ["get", "-t", "T", "-q", "0", "--queue-offset", "0"]]


def _records(r) -> int:
    if r.stdout.lstrip().startswith("{") and '"items"' in r.stdout.splitlines()[0]:
        return len(json.loads(r.stdout.splitlines()[0])["items"])
    return len(r.stdout.splitlines())


def test_every_limit_is_count_and_the_old_max_is_refused(tmp_path):
    from helpers import command_paths

    store = tmp_path / "s"
    put_jsonl(store, [{"topic": "T", "keys": "k", "body": f"m{i}"} for i in range(6)])
    for cmd in LIMITED:
        args = [cmd[0], "-s", store, *cmd[1:], "--json", *(READ_GEOM if cmd[0] in ("query-key", "inspect-index")
                                                          else [])]
        new = run([*args, "--count", "2"])
        assert new.exit_code == 0, (cmd, new.output)
        assert _records(new) == 2, (cmd, new.stdout)
        if cmd[0] in ("query-key", "print-msg", "inspect-index"):
            assert run([*args, "--max", "2"]).exit_code == 2, cmd
    for path, command in command_paths():
        names = {o for p in getattr(command, "params", []) for o in p.opts}
        assert "--max" not in names, path  # no command takes --max any more


def test_no_command_has_a_hidden_option_or_a_hidden_name():
    """The old spellings are gone, not hidden (CHANGELOG.md): every option and command is in the help."""
    from helpers import command_paths

    for path, command in command_paths():
        assert not getattr(command, "hidden", False), path
        hidden = [p.opts for p in getattr(command, "params", []) if getattr(p, "hidden", False)]
        assert not hidden, (path, hidden)


def test_tiered_limits_are_count_too():
    from helpers import command_paths

    commands = dict(command_paths())
    for path in ("tiered query-key", "tiered inspect-index"):
        params = {o: p for p in commands[path].params for o in p.opts}
        assert "--count" in params and "-n" in params["--count"].opts
        assert "--max" not in params
