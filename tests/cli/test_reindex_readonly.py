"""spark-reindex and tiered reindex with --out DIR on a read-only store (a mounted snapshot) (issue 33 item 6): the
job reads the store without the lock and writes only into DIR; into the store's own index/ it is refused as
read-only. Root ignores permission bits, so the read-only file system is the lock's open failing with EROFS, the
path that refused it."""
from __future__ import annotations

import errno
import json
import os
import shutil
import stat

import pytest

from helpers import SEG_GEOM, assert_one_line_error, put, run, sample_messages, snapshot


@pytest.fixture
def ro_store(tmp_path, monkeypatch):
    store = tmp_path / "s"
    put(store, sample_messages(40), tmp_path)
    snap = tmp_path / "snap"
    shutil.copytree(store, snap)
    for p in [snap, *snap.rglob("*")]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    from engine.broker.config import lock

    real_open = os.open

    def ro_open(path, flags, *a, **kw):
        if str(path).startswith(str(snap)) and flags & (os.O_RDWR | os.O_WRONLY | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *a, **kw)
    monkeypatch.setattr(lock.os, "open", ro_open)
    yield store, snap
    for p in [snap, *snap.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)


def test_spark_reindex_out_reads_a_read_only_store(ro_store, tmp_path):
    store, snap = ro_store
    before = snapshot(snap)
    out = tmp_path / "out"
    r = run(["spark-reindex", "-s", snap, *SEG_GEOM, "--out", out, "--master", "inline", "--json"])
    assert r.exit_code == 0, r.output
    j = json.loads(r.stdout)
    assert j["storeReadOnly"] is True and j["indexFiles"] >= 1
    assert snapshot(snap) == before
    # the same index files a writable store's rebuild gives
    ref = tmp_path / "ref"
    r = run(["spark-reindex", "-s", store, *SEG_GEOM, "--out", ref, "--master", "inline", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["storeReadOnly"] is False
    names = sorted(p.name for p in ref.iterdir() if p.name.isdigit())
    assert names and names == sorted(p.name for p in out.iterdir() if p.name.isdigit())
    assert all((ref / n).read_bytes() == (out / n).read_bytes() for n in names)


def test_into_a_read_only_store_is_refused_as_read_only(ro_store):
    _, snap = ro_store
    before = snapshot(snap)
    assert_one_line_error(run(["spark-reindex", "-s", snap, *SEG_GEOM, "--master", "inline"]), 2, "read-only")
    assert snapshot(snap) == before
