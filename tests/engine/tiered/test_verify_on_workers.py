"""--workers N on `tiered verify` and `tiered inspect-index --verify` (issue 32): the segments of one queue are
checked on several workers (a big queue spreads), the tiered index a file per worker; the JSON and the exit code
are the same for 1, 2 and 3 workers on the golden tiers f1 and f3, whole and damaged; a killed worker fails the
command cleanly (one line, exit 1, nothing on stdout, no file changed); a small tier stays in one process by
default."""
from __future__ import annotations

import json
import shutil
import struct

import pytest

from helpers import GOLDEN, assert_one_line_error, cli, snapshot
from tiered_flat_helpers import F1_META, F1_TIER

F3 = GOLDEN / "tiered-flat" / "f3_index" / "store"
WORKERS = ("1", "2", "3")
SLOTS = 128                      # f3's tiered index geometry: 128 slots, so items start at 28 + 8 x 128
ITEMS_AT = 28 + 8 * SLOTS


def _runs(*args: str) -> list:
    return [cli(*args, "--workers", n, code=None) for n in WORKERS]


def _same(runs: list, code: int) -> dict:
    assert [r.exit_code for r in runs] == [code] * len(runs), [(r.exit_code, r.stderr) for r in runs]
    docs = [[json.loads(line) for line in r.stdout.splitlines()] for r in runs]
    assert docs[0] and all(d == docs[0] for d in docs[1:])
    return docs[0][0] if len(docs[0]) == 1 else docs[0]


def _poke(path, pos: int, fmt: str, value) -> None:
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, pos, value)
    path.write_bytes(bytes(data))


def _flip(path, pos: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= 0xFF
    path.write_bytes(bytes(data))


def _segments(d) -> list:
    """A queue directory's segment files, by base offset."""
    return sorted(d.iterdir(), key=lambda p: int(p.name[8:]))


# ---------------------------------------------------------------- flat files: a queue's segments on several workers


def test_a_queue_spreads_over_the_workers_with_the_same_answer(jobs):
    v = _same(_runs("tiered", "verify", "--tiered-store-path", str(F1_TIER), "--metadata", str(F1_META), "--json"), 0)
    assert (v["queues"], v["segments"], v["records"], v["units"]) == (4, 43, 160, 160)
    batches = [args[0] for name, args in jobs if name == "_check_segments"]
    assert len(batches) > 4   # more jobs than queues
    spread = {}
    for k, batch in enumerate(batches):
        for job, _task in batch:
            spread.setdefault((job.topic, job.queue_id), set()).add(k)
    assert any(len(ks) > 1 for ks in spread.values())   # a queue's segments checked in several jobs


def test_damage_in_one_big_queue_found_the_same_on_every_worker_count(tmp_path, jobs):
    tier = tmp_path / "tier"
    shutil.copytree(F1_TIER, tier)
    queue = next(tier.glob("*/broker-a/TopicTest/0"))
    cl = _segments(queue / "COMMIT_LOG")
    _flip(cl[1], 20 + 7)                                  # segment 1's first QUEUEOFFSET: a break at the boundary
    size = struct.unpack_from(">i", cl[4].read_bytes(), 0)[0]
    _poke(cl[4], size + 20, ">q", 999)                    # segment 4's second record: a break inside it
    _flip(cl[2], 4)                                       # segment 2's first magic: no whole record
    _flip(_segments(queue / "CONSUME_QUEUE")[1], 3)       # a unit's commit-log offset
    v = _same(_runs("tiered", "verify", "--tiered-store-path", str(tier), "--metadata", str(F1_META), "--json"), 3)
    found = {(f["kind"], f["file"].rsplit("/", 1)[-1], f["offset"]) for f in v["findings"]}
    assert ("tiered-queue-offset", cl[1].name, 0) in found
    assert ("tiered-queue-offset", cl[4].name, size) in found
    assert ("tiered-record-damaged", cl[2].name, 0) in found
    assert "tiered-cq-unit" in {k for k, _f, _o in found}
    assert v["problemCount"] == len(v["findings"]) - v["noteCount"] >= 5
    assert {"_check_segments"} == {name for name, _ in jobs}


def test_a_killed_worker_fails_tiered_verify_and_changes_nothing(tmp_path, killed):
    tier = tmp_path / "tier"
    shutil.copytree(F1_TIER, tier)
    before = snapshot(tier)
    r = cli("tiered", "verify", "--tiered-store-path", str(tier), "--metadata", str(F1_META), "--json",
            "--workers", "3", code=None)
    assert_one_line_error(r, 1)
    assert r.stdout == "" and snapshot(tier) == before


def test_a_small_tier_stays_in_one_process_by_default(jobs):
    r = cli("tiered", "verify", "--tiered-store-path", str(F1_TIER), "--metadata", str(F1_META), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["records"] == 160
    assert jobs == []


# ---------------------------------------------------------------- the tiered index: a file per worker


def _index_copy(tmp_path):
    root = tmp_path / "f3"
    shutil.copytree(F3, root)
    return root


def _tier_args(root) -> list[str]:
    return ["-T", str(root / "tiered"), "-s", str(root / "broker-a")]


def test_inspect_index_verify_same_on_every_worker_count(jobs):
    docs = _same(_runs("tiered", "inspect-index", *_tier_args(F3), "--verify", "--stats", "--json"), 0)
    verify = [d["verify"] for d in docs if "verify" in d]
    assert len(verify) == 4 and all(v["ok"] and v["findings"] == [] for v in verify)
    assert sum(1 for d in docs if d.get("stats")) == 4
    assert sum(1 for name, _ in jobs if name == "_file_job") == 4 * 2   # every file, on 2 and on 3 workers


def test_tiered_verify_index_part_same_on_every_worker_count(jobs):
    v = _same(_runs("tiered", "verify", *_tier_args(F3), "--json"), 0)
    assert (v["queues"], v["records"], v["segments"]) == (6, 2400, 16)
    assert {"_file_job", "_check_segments"} <= {name for name, _ in jobs}


def test_damaged_index_files_found_the_same_on_every_worker_count(tmp_path, jobs):
    root = _index_copy(tmp_path)
    idx = _segments(next((root / "tiered").glob("*/broker-a/rmq_sys_INDEX/0/INDEX")))
    _flip(idx[0], ITEMS_AT + 28 * 5 + 3)      # an item's hash: it lands in another slot
    _flip(idx[1], ITEMS_AT + 28 * 7 + 10)     # an item's offset: no record there
    _flip(idx[2], 28 + 8 * 3 + 2)             # slot 3's start: ranges out of the item area
    _flip(idx[3], ITEMS_AT + 28 * 9 + 20)     # an item's size
    before = snapshot(root)
    docs = _same(_runs("tiered", "inspect-index", *_tier_args(root), "--verify", "--json"), 3)
    assert [d["verify"]["ok"] for d in docs] == [False, True, False, True]
    v = _same(_runs("tiered", "verify", *_tier_args(root), "--json"), 3)
    kinds = {(f["kind"], f["file"].rsplit("/", 1)[-1]) for f in v["findings"]}
    assert {("tiered-index-file", idx[0].name), ("tiered-index-file", idx[2].name),
            ("tiered-index-item", idx[1].name), ("tiered-index-item", idx[3].name)} <= kinds
    assert snapshot(root) == before
    assert "_file_job" in {name for name, _ in jobs}


def test_a_killed_worker_fails_inspect_index_verify_cleanly(killed):
    for cmd in (("tiered", "inspect-index", *_tier_args(F3), "--verify", "--json"),
                ("tiered", "verify", *_tier_args(F3), "--json")):
        r = cli(*cmd, "--workers", "2", code=None)
        assert r.exit_code == 1 and r.stdout == "" and "Traceback" not in r.output
        said = [line for line in r.stderr.splitlines() if not line.startswith('{"note": ')]   # the geometry's note
        assert len(said) == 1 and said[0].startswith("error: "), said


def test_a_small_index_stays_in_one_process_by_default(jobs):
    r = cli("tiered", "inspect-index", *_tier_args(F3), "--verify", "--json")
    assert r.exit_code == 0 and [json.loads(line)["verify"]["ok"] for line in r.stdout.splitlines()] == [True] * 4
    assert jobs == []


# ---------------------------------------------------------------- progress counts every worker's work


@pytest.fixture
def two_workers():
    from engine import workers

    workers.use(2)
    yield
    workers.use(None)


def test_progress_counts_every_segment_and_file_done_on_the_workers(two_workers, jobs):
    from engine.tiered.flat.store import TierSource, open_tier
    from engine.tiered.index.operations import verify_tier

    seen: list[tuple[str, int, int]] = []
    with open_tier(TierSource(F3 / "tiered", store=F3 / "broker-a")) as st:
        rep = verify_tier(st, None, progress=lambda phase, done, total: seen.append((phase, done, total)))
    assert rep.ok and rep.records == 2400
    for phase, total in (("segments", 12), ("index files", 4)):   # 6 queues of one COMMIT_LOG + one CQ segment
        calls = [(d, t) for p, d, t in seen if p == phase]
        assert calls and calls[-1] == (total, total)
        assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert {"_check_segments", "_file_job"} <= {name for name, _ in jobs}


def _local_dir(tmp_path):
    """f3's uploaded index files as local files of a --tiered-dir (numeric names)."""
    d = tmp_path / "local"
    d.mkdir()
    idx = _segments(next((F3 / "tiered").glob("*/broker-a/rmq_sys_INDEX/0/INDEX")))
    for k, p in enumerate(idx):
        shutil.copy(p, d / str(1_700_000_000_000 + k * 1000))
    return d, sorted(d.iterdir())


def test_local_files_checked_a_file_per_worker_with_the_same_answer(tmp_path, jobs):
    d, files = _local_dir(tmp_path)
    _flip(files[2], ITEMS_AT + 28 * 4 + 3)     # an item's hash: it lands in another slot
    docs = _same(_runs("tiered", "inspect-index", "--tiered-dir", str(d), "--verify", "--stats", "--json"), 3)
    assert [d["verify"]["ok"] for d in docs if "verify" in d] == [True, True, False, True]
    assert sum(1 for name, _ in jobs if name == "_inspect_path") == 4 * 2


def test_an_unreadable_local_file_fails_the_same_on_every_worker_count(tmp_path):
    d, files = _local_dir(tmp_path)
    files[1].write_bytes(b"\x01" * 1000)         # not a tiered index file
    runs = _runs("tiered", "inspect-index", "--tiered-dir", str(d), "--verify", "--json")
    for r in runs:
        assert_one_line_error(r, 2)
    assert [r.stdout for r in runs[1:]] == [runs[0].stdout] * 2
    assert [json.loads(line)["verify"]["file"] for line in runs[0].stdout.splitlines()] == [files[0].name]
