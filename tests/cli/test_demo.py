"""The README's first command: `rmqtool demo` builds a sample store and runs every main step on it."""
from __future__ import annotations

from helpers import REPO
from helpers import assert_one_line_error, run
from engine.broker.layout import list_index_files


def test_demo_inline_runs_every_step(tmp_path):
    d = tmp_path / "sample"
    r = run(["demo", d, "--messages", "1500", "--master", "inline"])
    assert r.exit_code == 0, r.output
    assert "1 message(s) for OrderTopic#order-42" in r.stdout
    assert "byte-identical to put's: yes" in r.stdout
    assert len(list_index_files(d / "index")) >= 2  # small geometry: the index rolled
    # Rerunning replaces a previous sample but never a directory it did not create.
    assert run(["demo", d, "--messages", "10", "--master", "none"]).exit_code == 0
    other = tmp_path / "precious"
    other.mkdir()
    (other / "keep").write_text("x")
    assert_one_line_error(run(["demo", other, "--master", "none"]), contains="not an rmqtool sample store")
    assert (other / "keep").read_text() == "x"


def test_demo_through_the_real_entry_point(tmp_path):
    """As the README runs it: a new process through rmqtool.app.main, which builds only the invoked command
    unless that command runs others (demo does)."""
    import subprocess
    import sys
    from pathlib import Path

    root = REPO
    d = tmp_path / "sample"
    r = subprocess.run([sys.executable, "-m", "rmqtool", "demo", str(d), "--messages", "300", "--master", "inline"],
                       cwd=root, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "byte-identical to put's: yes" in r.stdout and "Error" not in r.stderr
