"""spark-reindex must never be the thing that destroys a store (issue 10 item 3): refused output paths,
--replace only over an index directory rmqtool built, and a kill at every file-system change of a run leaves
the old or the new index in place (or a state the next run repairs and reports), never an empty answer."""
from __future__ import annotations

from helpers import REPO
import json
import shutil
import sys
from pathlib import Path

import pytest

from helpers import assert_one_line_error, put_jsonl, run, said, snapshot
from engine.broker.layout import list_index_files
from engine.jobs import publish

sys.path.insert(0, str(REPO / "bench"))
from killpoints import kill_loop  # noqa: E402

from helpers import READ_GEOM, index_bytes, multikey_messages  # noqa: E402

QUERIES = [("TopicA", "c1"), ("TopicB", "k5"), ("%RETRY%grp-1", "c2"), ("TopicA", "ключ1")]


@pytest.fixture(scope="module")
def put_store(tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("safety") / "store"
    put_jsonl(store, multikey_messages(40))
    assert len(list_index_files(store / "index")) >= 2
    return store


@pytest.fixture
def store(put_store, tmp_path) -> Path:
    s = tmp_path / "store"
    shutil.copytree(put_store, s)
    return s


def answers(store: Path) -> list[list[int]]:
    """query-key's answer (commit-log offsets) for a few keys; each must be non-empty on a good store."""
    out = []
    for topic, key in QUERIES:
        q = run(["query-key", "--store", store, *READ_GEOM, "--topic", topic, "--key", key, "--json"])
        assert q.exit_code == 0, q.output
        out.append(sorted(json.loads(x)["commitLogOffset"] for x in q.stdout.splitlines()))
    return out


def reindex(store, *extra):
    return run(["spark-reindex", "--store", store, *READ_GEOM, "--master", "inline", *extra])


def leftovers(store: Path) -> list[str]:
    """What an interrupted run leaves for the next one: staging and old directories beside index/, and a marker
    inside index/ (where the broker would meet it) that was not moved out yet."""
    inside = ["index/" + publish.MANIFEST] if (store / "index" / publish.MANIFEST).exists() else []
    return sorted(p.name for p in store.iterdir() if p.name.startswith(".index")) + inside


# ============================================================================ refused outputs

@pytest.mark.parametrize("where", ["commitlog", "commitlog/sub", "consumequeue", "consumequeue/TopicA", "config",
                                   "checkpoint", ".", "..", "index/sub", "tiered_index_file"])
def test_outputs_over_store_data_are_refused_and_nothing_is_written(store, where):
    (store / "config").mkdir(exist_ok=True)
    (store / "config" / "topics.json").write_text("{}")
    before = snapshot(store)
    target = (store / where)
    for extra in ([], ["--replace"]):
        r = reindex(store, "--out", target, *extra)
        assert_one_line_error(r, code=2, contains="--out")
    r = run(["tiered", "reindex", "--store", store, "--broker-name", "b", "--master", "inline", "--out", target])
    assert_one_line_error(r, code=2, contains="--out")
    assert snapshot(store) == before                      # no lock file, no abort marker, nothing
    assert not (store / "abort").exists()


def test_symlink_to_the_commit_log_is_refused(store, tmp_path):
    link = tmp_path / "sneaky"
    link.symlink_to(store / "commitlog")
    before = snapshot(store)
    assert_one_line_error(reindex(store, "--out", link, "--replace"), contains="commitlog")
    assert snapshot(store) == before


def test_rejected_inputs_leave_no_abort_marker_and_no_lock(store, tmp_path):
    (store / "lock").unlink()
    before = snapshot(store)
    (tmp_path / "plain").write_text("x")
    for args in (["--out", tmp_path / "plain"], ["--hash-slots", "0"], ["--master", " "],
                 ["--out", store / "commitlog"], ["--format", "tiered"], ["--conf", "novalue"]):
        r = reindex(store, *args)
        assert r.exit_code == 2, r.output
    assert snapshot(store) == before and not (store / "abort").exists() and not (store / "lock").exists()


# ============================================================================ --replace

def test_replace_needs_an_index_directory_rmqtool_built(store, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "20240101000000000").write_bytes(b"someone else's file")
    assert_one_line_error(reindex(store, "--out", out), contains="--replace")
    assert_one_line_error(reindex(store, "--out", out, "--replace"), contains="rmqtool did not write")
    assert (out / "20240101000000000").read_bytes() == b"someone else's file"
    # A directory rmqtool built carries the marker, and may be replaced.
    built = tmp_path / "built"
    assert reindex(store, "--out", built).exit_code == 0
    info = publish.read_manifest(built)
    assert info["state"] == "complete" and info["format"] == "broker"
    assert [f["name"] for f in info["files"]] == [p.name for p in list_index_files(built)]
    r = reindex(store, "--out", built, "--replace", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["replaced"] and index_bytes(built) == index_bytes(store / "index")


def test_replace_in_the_store_refuses_an_index_dir_holding_other_files(store):
    (store / "index" / "notes.txt").write_text("mine")
    before = snapshot(store)
    assert_one_line_error(reindex(store, "--replace"), contains="notes.txt")
    assert snapshot(store) == before
    # Without --replace the old directory (notes included) is kept whole as the backup.
    r = reindex(store, "--json")
    assert r.exit_code == 0, r.output
    backup = Path(json.loads(r.stdout)["backupDir"])
    assert (backup / "notes.txt").read_text() == "mine"
    # The new index/ is rmqtool's (its marker, at the store root), so a later --replace may remove it, unless
    # someone put a file there.
    assert publish.read_store_index_marker(store / "index")["run_id"]
    assert publish.read_manifest(store / "index") is None
    (store / "index" / "notes.txt").write_text("mine again")
    assert_one_line_error(reindex(store, "--replace"), contains="notes.txt")
    (store / "index" / "notes.txt").unlink()
    assert reindex(store, "--replace").exit_code == 0


def test_replace_in_the_store_refuses_index_files_of_another_geometry(store):
    # The broker-built index of 16 x 64; asked to replace it with 32 x 64 files: the old files' size differs.
    r = run(["spark-reindex", "--store", store, "--hash-slots", "32", "--max-index", "64", "--master", "inline",
             "--replace"])
    assert_one_line_error(r, contains="bytes")


# ============================================================================ interrupted runs

def test_leftover_staging_is_removed_by_the_next_run_and_reported(store, tmp_path):
    stale = store / ".index.reindex-0123456789ab"
    publish.create_staging(stale, "0123456789ab", "broker")
    (stale / ".000000.0123456789ab.a0.tmp").write_bytes(b"half")
    out = tmp_path / "out"
    assert reindex(store, "--out", out).exit_code == 0
    (out / ".reindex-0123456789ab").mkdir()
    (out / ".reindex-0123456789ab" / "20240101000000000").write_bytes(b"x")
    r = reindex(store, "--json")
    assert r.exit_code == 0, r.output
    (fixed,) = json.loads(r.stdout)["repairs"]
    assert fixed.split()[:2] == ["removed", ".index.reindex-0123456789ab/,"] and not stale.exists()
    assert said(r)[-1]["message"] == f"repaired: {fixed}"    # a repair is said on stderr too (--json: an object)
    r = reindex(store, "--out", out, "--replace", "--json")
    assert r.exit_code == 0 and len(json.loads(r.stdout)["repairs"]) == 1
    assert not (out / ".reindex-0123456789ab").exists()


FLOWS = {
    "swap, old kept": ([], False),
    "swap, --replace": (["--replace"], False),
    "two renames (no RENAME_EXCHANGE)": ([], True),
    "two renames, --replace": (["--replace"], True),
}


@pytest.mark.slow
@pytest.mark.parametrize("flow", FLOWS)
def test_a_kill_at_every_rename_leaves_the_old_or_the_new_index(put_store, tmp_path, flow):
    extra, no_exchange = FLOWS[flow]
    want_files = index_bytes(put_store / "index")
    want = answers(put_store)
    assert all(want)
    s = tmp_path / "store"

    def prepare(k):
        shutil.rmtree(s, ignore_errors=True)
        shutil.copytree(put_store, s)

    points = []
    for kr in kill_loop(["spark-reindex", "--store", s, *READ_GEOM, "--master", "inline", *extra], prepare,
                        no_exchange=no_exchange, fork=True):
        assert kr.returncode in (0, 86), kr.stderr
        assert "Traceback" not in kr.stderr
        assert not (s / "abort").exists()
        points.append(kr.kill_point)
        note = publish.missing_index_note(s / "index")
        if note is None:
            assert answers(s) == want, (flow, kr.kill_point)          # the old or the new index answers
        else:
            assert not no_exchange or "interrupted spark-reindex" in note
            assert no_exchange, f"index/ missing with an atomic swap available ({kr.kill_point})"
        had = leftovers(s)
        r = reindex(s, *extra)                                        # the next run repairs and says so
        assert r.exit_code == 0, (kr.kill_point, r.output)
        assert ("repaired:" in r.stderr) == bool(had), (kr.kill_point, had, r.stderr)
        assert leftovers(s) == [] and answers(s) == want and index_bytes(s / "index") == want_files
    assert len(points) >= 6 and any("exchange" in p or "rename" in p for p in points)



@pytest.mark.slow
def test_a_kill_while_publishing_into_out_is_repaired_by_the_next_run(put_store, tmp_path):
    # --out DIR is published file by file; whatever a kill leaves there, the next --replace run (allowed: the
    # marker is written before the first file moves in) removes the staging and writes the full set.
    s, out = tmp_path / "store", tmp_path / "out"
    shutil.copytree(put_store, s)
    want = index_bytes(put_store / "index")

    def prepare(k):
        shutil.rmtree(out, ignore_errors=True)

    kills = 0
    for kr in kill_loop(["spark-reindex", "--store", s, *READ_GEOM, "--master", "inline", "--out", out], prepare,
                        fork=True):
        kills += kr.killed
        r = reindex(s, "--out", out, "--replace")
        assert r.exit_code == 0, (kr.kill_point, r.output)
        assert index_bytes(out) == want and not [p for p in out.iterdir() if p.name.startswith(".reindex-")]
        assert publish.read_manifest(out)["state"] == "complete"
    assert kills >= 5


def test_missing_index_note_names_the_unpublished_index(store):
    stale = publish.create_staging(store / ".index.reindex-0123456789ab", "0123456789ab", "broker")
    publish.write_manifest(stale, publish.new_manifest("0123456789ab", "broker", "complete"))
    assert publish.missing_index_note(store / "index") is None  # index/ is there: nothing to say
    shutil.rmtree(store / "index")
    note = publish.missing_index_note(store / "index")
    assert ".index.reindex-0123456789ab" in note and "spark-reindex" in note


# ============================================================================ the marker of the store's index/

def test_the_store_index_marker_lives_beside_index_not_in_it(store):
    """The broker parses every name in index/ as a number (format §5.8): the marker of the store's index/ lives at
    the store root, naming the directory it describes, and --replace still knows the index as rmqtool's."""
    assert reindex(store).exit_code == 0
    assert all(p.name.isdigit() for p in (store / "index").iterdir())
    info = publish.read_store_index_marker(store / "index")
    assert info["state"] == "complete" and (store / publish.MANIFEST).is_file()
    assert info["directory"] == [(store / "index").stat().st_dev, (store / "index").stat().st_ino]
    r = reindex(store, "--replace", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["replaced"], r.output
    assert all(p.name.isdigit() for p in (store / "index").iterdir())
    # Another directory put in index/'s place is not taken for the one the marker describes.
    shutil.copytree(store / "index", store / "index.copy")
    shutil.rmtree(store / "index")
    (store / "index.copy").rename(store / "index")
    assert publish.read_store_index_marker(store / "index") is None


def test_a_marker_left_inside_index_is_read_and_moved_out(store, tmp_path):
    """Earlier versions wrote the marker into index/: it still counts for --replace (here: index files of another
    geometry, which --replace deletes only from a directory rmqtool built), and the next run moves it out."""
    assert reindex(store).exit_code == 0
    os_marker = store / publish.MANIFEST
    legacy = json.loads(os_marker.read_text())
    del legacy["directory"]
    os_marker.unlink()
    (store / "index" / publish.MANIFEST).write_text(json.dumps(legacy))
    assert publish.read_store_index_marker(store / "index")["run_id"] == legacy["run_id"]
    r = run(["spark-reindex", "--store", store, "--hash-slots", "32", "--max-index", "64", "--master", "inline",
             "--replace", "--new-geometry", "--json"])  # another geometry than the files': asked for (issue 23)
    assert r.exit_code == 0, r.output
    assert [x.split()[:2] for x in json.loads(r.stdout)["repairs"]] == [["moved", f"index/{publish.MANIFEST}"]]
    assert all(p.name.isdigit() for p in (store / "index").iterdir())
    assert publish.read_store_index_marker(store / "index")["run_id"] != legacy["run_id"]
