"""The one commit-log walk (issue 31 item 1): every reader of the log goes over the segment files through
CommitLog.walk_segments, and the readers built on it agree on the records of a broker's own store."""
from __future__ import annotations

import json

import pytest

from engine.broker.commitlog.log import CommitLog, open_commitlog
from engine.broker.commitlog.logrun import RecordRun, scan_runs
from engine.broker.commitlog.message import VALID
from engine.broker.commitlog.walk import Window, walk
from engine.broker.config.brokerconf import load_config
from helpers import run, spy


@pytest.mark.parametrize("args", [["dump-commitlog", "--json"], ["inspect-index", "--verify", "--json"],
                                  ["recover", "--full-scan", "--dry-run", "--json"]])
def test_each_reader_of_the_log_goes_through_the_one_segment_walk(r1_store, monkeypatch, args):
    walks = spy(monkeypatch, CommitLog, "walk_segments", lambda self, got: 1)
    r = run([args[0], "-s", r1_store, *args[1:]])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() and json.loads(r.stdout.splitlines()[0])  # an answer, in JSON
    assert walks, f"{args[0]} read the commit log without CommitLog.walk_segments"


def test_record_scan_runs_and_checking_walk_see_the_same_records(r1_store):
    cl = open_commitlog(load_config(None, storePathRootDir=str(r1_store)))
    try:
        scanned = [e.offset for e in cl.scan() if e.kind == VALID]
        runs = [int(x) for item in scan_runs(cl) if isinstance(item, RecordRun)
                for x in (item.seg_start + item.batch.pos).tolist()]
        checked = [int(x) for ev in walk(cl) if isinstance(ev, Window) for x in ev.offsets.tolist()]
        assert scanned and scanned == runs == checked
        # from a record in the middle, the checking walk starts there (as the segment walk's start check says)
        mid = scanned[len(scanned) // 2]
        assert [int(x) for ev in walk(cl, mid) if isinstance(ev, Window) for x in ev.offsets.tolist()] == \
            scanned[len(scanned) // 2:]
        assert list(walk(cl, cl.max_file_offset() + 1)) == []  # outside the log: nothing, no error
    finally:
        cl.close()
