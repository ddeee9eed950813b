"""One vocabulary (issue 14 item 7): the same flag for the same thing, old spellings kept hidden, cuts reported."""
from __future__ import annotations

import json

from helpers import READ_GEOM, assert_one_line_error, put_jsonl, run


def test_query_key_max_cut_is_reported_with_the_flag(tmp_path):
    store = tmp_path / "s"
    put_jsonl(store, [{"topic": "T", "keys": "k", "body": f"m{i}"} for i in range(5)])
    r = run(["query-key", "-s", store, "-t", "T", "-k", "k", "--max", "2", "--json", *READ_GEOM])
    assert r.exit_code == 0, r.output
    assert len(r.stdout.splitlines()) == 2
    assert "showing the first 2" in r.stderr and "--max 2" in r.stderr
    whole = run(["query-key", "-s", store, "-t", "T", "-k", "k", "--max", "5", "--json", *READ_GEOM])
    assert len(whole.stdout.splitlines()) == 5 and "showing" not in whole.stderr
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


def test_inspect_index_max_and_its_old_spelling(tmp_path):
    store = tmp_path / "s"
    put_jsonl(store, [{"topic": "T", "keys": "k", "body": f"m{i}"} for i in range(6)])
    for flag in ("--max", "-n", "--limit"):
        r = run(["inspect-index", "-s", store, "--walk-key", "T#k", flag, "2", "--json", *READ_GEOM])
        assert r.exit_code == 0, r.output
        walk = json.loads(r.stdout.splitlines()[0])
        assert len(walk["items"]) == 2 and "(limit)" in walk["stop"]
        assert "showing the first 2" in r.stderr
    help_text = run(["inspect-index", "--help"]).stdout
    assert "--max" in help_text and "--limit" not in help_text


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
