"""Tables that read at 80 columns (issue 14 item 8), through the CLI: at COLUMNS=80 no line is wider (but for a
path, which is never cut), every number and id of the answer appears whole, and --json is the same at any width."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from helpers import READ_GEOM, SMALL, put_jsonl

ID_FIELDS = ("commitLogOffset", "queueOffset", "msgId", "uniqKey", "storeSize", "bodyCRC", "phyOffset",
             "beginPhyOffset", "endPhyOffset", "indexCount", "maxOffset", "minOffset")


def run_at(width: int, args: list) -> object:
    from rmqtool.app import app

    return CliRunner(env={"COLUMNS": str(width)}).invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("tables") / "store"
    put_jsonl(root, [{"topic": "TopicWithALongishName", "keys": f"order-{i} user-{i % 3} a-rather-long-key-{i}",
                      "tags": "TagA" if i % 2 else "TagB", "body": "payload " * (i % 5 + 1),
                      "queueId": i % 3} for i in range(30)])
    return root


def cases(root):
    s = ["-s", root]
    t = "TopicWithALongishName"
    return {
        "query-key": (["query-key", *s, "-t", t, "-k", "user-1", *READ_GEOM], True),
        "inspect-index": (["inspect-index", *s, *READ_GEOM], True),
        "inspect-index --walk-key": (["inspect-index", *s, "--walk-key", f"{t}#user-1", *READ_GEOM], True),
        "get": (["get", *s, "--offset", "0"], True),
        "get --count": (["get", *s, "-t", t, "-q", "1", "--queue-offset", "0", "--count", "5"], True),
        "dump-commitlog": (["dump-commitlog", *s], True),
        "queues": (["queues", *s], True),
        "dump-cq": (["dump-cq", *s, "-t", t, "-q", "1", "--count", "20"], True),
        "print-msg": (["print-msg", *s, "-t", t, "--begin", "2000-01-01", "--end", "now"], True),
        "recover --dry-run": (["recover", *s, "--dry-run", *SMALL], True),
        "clean --dry-run": (["clean", *s, "--dry-run", "--force-now", *SMALL], True),
    }


def _values(obj, out: set[str]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in ID_FIELDS and isinstance(v, (int, str)) and not isinstance(v, bool) and str(v) not in ("", "0"):
                out.add(str(v))
            _values(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _values(v, out)


@pytest.mark.parametrize("name", list(cases("S")))
def test_tables_at_80_and_200_columns(store, name):
    args, has_json = cases(store)[name]
    narrow, wide = run_at(80, args), run_at(200, args)
    assert narrow.exit_code == wide.exit_code == 0, (narrow.output, wide.output)
    for line in narrow.stdout.splitlines():
        assert len(line) <= 80 or str(store) in line, line
    for line in wide.stdout.splitlines():
        assert len(line) <= 200 or str(store) in line, line
    if not has_json:
        return
    j80, j200 = run_at(80, args + ["--json"]), run_at(200, args + ["--json"])
    assert j80.exit_code == 0, j80.output
    if name.startswith("clean"):  # its plan names the clock's now: compare the shape
        assert [sorted(json.loads(x)) for x in j80.stdout.splitlines()] == \
            [sorted(json.loads(x)) for x in j200.stdout.splitlines()]
    else:
        assert j80.stdout == j200.stdout  # --json never depends on the width
    ids: set[str] = set()
    for line in j80.stdout.splitlines():
        _values(json.loads(line), ids)
    tokens = set(narrow.stdout.split())
    missing = sorted(v for v in ids if v not in tokens and not any(v in t for t in tokens if "/" in t))
    # every number and id shown is whole (the table may leave out a column: it says so on stderr)
    shown_somewhere = [v for v in missing if len(v) >= 6 and v in narrow.stdout]
    assert not shown_somewhere, f"folded values in {name}: {shown_somewhere}\n{narrow.stdout}"
