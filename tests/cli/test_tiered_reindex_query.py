"""The files `tiered reindex --out DIR` writes are queryable by key (issue 33 item 3): `tiered query-key --tiered-dir
DIR` reads their compacted layout; a file of neither layout in a directory given to a query fails the answer (exit
3, the file named), never a note beside an empty answer with exit 0."""
from __future__ import annotations

import json

import pytest

from helpers import run, tiered_store

GEOM = ["--hash-slots", "16"]


@pytest.fixture
def rebuilt(tmp_path):
    store, tier, conf = tiered_store(tmp_path, "f1_basic")
    msgs = "".join(json.dumps({"topic": "TopicTest", "keys": f"key{i % 3}", "body": f"b{i}"}) + "\n" for i in range(9))
    r = run(["put", "-c", conf, "--from-jsonl", "-", "--json"], input=msgs)
    assert r.exit_code == 0, r.output
    out = tmp_path / "out"
    r = run(["tiered", "reindex", "-c", conf, "--out", out, "--master", "inline", *GEOM, "--max-index", "64", "--json"])
    assert r.exit_code == 0, r.output
    files = json.loads(r.stdout)["files"]
    assert files and all((out / f["name"]).is_file() for f in files)
    return conf, out, files


def ask(conf, out, *extra):
    return run(["tiered", "query-key", "-c", conf, "--tiered-dir", out, "-t", "TopicTest", "-k", "key1", "--raw",
                "--json", *GEOM, *extra])


def test_tiered_query_key_reads_the_compacted_files_tiered_reindex_wrote(rebuilt):
    conf, out, files = rebuilt
    r = ask(conf, out)
    assert r.exit_code == 0, r.output
    items = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(items) == 3 and {i["fileTimestamp"] for i in items} <= {int(f["name"]) for f in files}
    assert len({i["offset"] for i in items}) == 3
    r = run(["tiered", "query-key", "-c", conf, "--tiered-dir", out, "-t", "TopicTest", "-k", "nokey", "--raw",
             "--json", *GEOM])
    assert r.exit_code == 0 and r.stdout == ""


@pytest.mark.parametrize("junk", [b"", b"\x00" * 100, b"not an index file" * 1000])
def test_a_file_of_neither_layout_fails_the_answer_and_is_named(rebuilt, junk):
    conf, out, files = rebuilt
    bad = out / str(int(files[-1]["name"]) + 1)
    bad.write_bytes(junk)
    r = ask(conf, out)
    assert r.exit_code == 3, r.output
    assert str(bad) in r.stderr
    items = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(items) == 3  # what the healthy files hold is still answered
