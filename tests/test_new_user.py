"""What a new user met (issue 33): writers that refuse a directory that is not a store write nothing into it, a
read-only store is reported as read-only (not locked), and the rough edges of items 10 and 12."""
from __future__ import annotations

import errno
import json
import os

import pytest

from helpers import SMALL, assert_one_line_error, put_jsonl, run, snapshot


@pytest.mark.parametrize("args", [
    ["recover"], ["clean", "--force-now"], ["prune"], ["repair", "consume-queue", "--topic", "T", "--queue-id", "0"],
    ["repair", "config", "topics.json", "--from-bak"], ["repair", "timer"]])
@pytest.mark.parametrize("dry", [False, True])
def test_a_directory_that_is_not_a_store_is_refused_with_nothing_written(tmp_path, args, dry):
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    before = snapshot(home)
    cmd = args[:2] if args[0] == "repair" else args[:1]
    r = run([*cmd, "-s", home, *args[len(cmd):], *(["--dry-run"] if dry else [])])
    assert r.exit_code == 2, r.output
    assert snapshot(home) == before and sorted(os.listdir(home)) == ["notes.txt"]  # no lock file


def test_a_read_only_store_is_refused_as_read_only_not_locked(tmp_path, monkeypatch):
    store = tmp_path / "s"
    put_jsonl(store, [{"topic": "T", "body": "a"}])
    from engine.broker.config import lock

    real_open = os.open

    def ro_open(path, flags, *a, **kw):
        if str(path).endswith("/lock") and flags & (os.O_RDWR | os.O_WRONLY | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *a, **kw)
    monkeypatch.setattr(lock.os, "open", ro_open)
    for args in (["put", "-s", store, *SMALL, "--topic", "T", "--body", "b"], ["recover", "-s", store, *SMALL]):
        r = run(args)
        assert_one_line_error(r, 2, contains="read-only")
