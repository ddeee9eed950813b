"""--workers N on `timer verify` and `clean`'s timer survey (issue 32): the wheel's live slots are split into ranges
walked on worker processes (each chain in its own order), their findings merged in the slots' order: the same JSON
and exit code for 1, 2 and 3 workers on the golden timer stores t1 and t2, whole and with damaged chains; a killed
worker fails the command cleanly; a small timer store stays in one process by default."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from helpers import assert_one_line_error, cli, die_first, snapshot, unpack_golden

NOW = "2026-11-27T12:20:00Z"   # after the t1 and t2 brokers' stop: the time rules judged as then
WORKERS = ("1", "2", "3")


@pytest.fixture(params=["timer/t1", "timer/t2"])
def timer_store(request, tmp_path):
    return unpack_golden(request.param, tmp_path / request.param.replace("/", "-"))


def _verify(conf, n: str | None):
    extra = ["--workers", n] if n is not None else []
    return cli("timer", "verify", "-c", str(conf), "--now", NOW, "--json", *extra, code=None)


def _same(conf, code: int) -> dict:
    runs = [_verify(conf, n) for n in WORKERS]
    assert [r.exit_code for r in runs] == [code] * 3, [(r.exit_code, r.stderr) for r in runs]
    docs = [json.loads(r.stdout) for r in runs]
    assert docs[1] == docs[0] and docs[2] == docs[0]
    return docs[0]


def _walked(jobs) -> list[np.ndarray]:
    return [args[1] for name, args in jobs if name == "_walk_job"]


def test_chains_walked_on_workers_same_json(timer_store, jobs):
    v = _same(timer_store.conf, 0)
    assert v["checked"]["pendingMessages"] > 50 and v["checked"]["liveSlots"] > 10
    ranges = _walked(jobs)
    assert len(ranges) > 2   # several slot ranges, on 2 and on 3 workers
    per_run = sum(len(r) for r in ranges) // 2
    assert per_run == v["checked"]["liveSlots"]   # every live slot walked once per run
    # the units still to enqueue (t2 has some): their records read on the workers a chunk at a time
    assert ("_resolve_job" in {name for name, _ in jobs}) == (v["checked"]["queuedUnits"] > 0)


def _pending_positions(conf) -> list[int]:
    rows = [json.loads(line) for line in cli("timer", "list", "-c", str(conf), "--json").stdout.splitlines()]
    return [r["timerLogPosition"] for r in rows if r["timerLogPosition"] is not None]


def _poke_log(store, pos: int, fmt: str, value) -> None:
    """Write a field at a position of the timer log (files named by their first position)."""
    files = {int(p.name): p for p in (store / "timerlog").iterdir()}
    base = max(b for b in files if b <= pos)
    data = bytearray(files[base].read_bytes())
    struct.pack_into(fmt, data, pos - base, value)
    files[base].write_bytes(bytes(data))


def test_damaged_chains_found_the_same_on_every_worker_count(timer_store, jobs):
    store, conf = timer_store
    pos = _pending_positions(conf)
    cycle, past, broken = pos[3], pos[len(pos) // 2], pos[-4]
    _poke_log(store, cycle + 4, ">q", cycle)          # prevPos of a unit: itself (a cycle)
    _poke_log(store, past + 28, ">q", 1 << 40)        # offsetPy: past the commit log
    _poke_log(store, broken + 4, ">q", broken + 7)    # prevPos: no unit boundary
    before = snapshot(store)
    v = _same(conf, 3)
    kinds = {f["kind"] for f in v["findings"]}
    assert {"chain-cycle", "chain-broken", "unit-past-commit-log"} <= kinds
    assert v["counts"]["error"] >= 3
    assert snapshot(store) == before
    assert _walked(jobs)
    plans = []
    for n in WORKERS:
        r = cli("clean", "-c", str(conf), "--dry-run", "--force-now", "--json", "--workers", n, code=None)
        d = json.loads(r.stdout)
        d.pop("now", None)
        plans.append((r.exit_code, d))
    assert plans[1] == plans[0] and plans[2] == plans[0]
    assert plans[0][1]["timer"]["pendingTimerMessages"] == v["checked"]["pendingMessages"]


def test_a_killed_worker_fails_the_walk_cleanly(timer_store, monkeypatch):
    from engine import workers

    real = workers.WorkerPool.submit

    def submit(self, fn, *args):   # the chain walk's jobs kill their worker
        return real(self, die_first if fn.__name__ == "_walk_job" else fn, *((fn, *args) if fn.__name__ == "_walk_job"
                                                                        else args))

    monkeypatch.setattr(workers.WorkerPool, "submit", submit)
    before = snapshot(timer_store.store)
    r = _verify(timer_store.conf, "2")
    assert_one_line_error(r, 1)
    assert r.stdout == "" and snapshot(timer_store.store) == before


def test_a_small_timer_store_stays_in_one_process_by_default(timer_store, jobs):
    assert _verify(timer_store.conf, None).exit_code == 0
    assert jobs == []


def test_slot_ranges_cover_every_slot_in_order():
    from engine.timer.codec import SLOT_DTYPE
    from engine.timer.pending import WALK_JOB_UNITS, slot_ranges

    live = np.zeros(10, SLOT_DTYPE)
    live["num"] = [1, 1, 1, 1, WALK_JOB_UNITS * 3, 1, 1, 0, -5, 1]   # a huge slot, and counts that are no counts
    for workers in (1, 2, 3, 64):
        ranges = slot_ranges(live, workers)
        assert ranges[0][0] == 0 and ranges[-1][1] == len(live)
        assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(ranges, ranges[1:]))
        assert (4, 5) in ranges   # the huge slot is a job of its own


def test_progress_counts_every_slot_walked_on_the_workers(timer_store, jobs):
    from engine import workers
    from engine.broker.config.brokerconf import load_config
    from engine.timer.pending import scan_pending
    from engine.timer.store import TimerStore

    seen: list[tuple[str, int, int]] = []
    workers.use(2)
    try:
        with TimerStore(load_config(timer_store.conf)) as ts:
            res = scan_pending(ts, check_crc=True, parallel=True,
                               progress=lambda phase, done, total: seen.append((phase, done, total)))
    finally:
        workers.use(None)
    assert _walked(jobs)
    assert {p for p, _, _ in seen} == {"timer chains"}
    assert seen[-1][1:] == (len(res.slots), len(res.slots)) and len(seen) > 1
    assert [d for _, d, _ in seen] == sorted(d for _, d, _ in seen)
