"""Text within the terminal's width (issue 33 item 9): --help of every command and doctor's report at COLUMNS=40;
tables at 80 (the recover and info tables are covered by tests/cli/test_tables_cli.py and tests/cli/test_info_width.py)."""
from __future__ import annotations

import pytest

from helpers import command_paths, run, unpack_golden

ALL = command_paths()


def overflow(text: str, width: int) -> list[str]:
    """Lines wider than `width`, but for one value that cannot be cut alone on its line and the examples (command
    lines to copy, cut for 80 columns: tests/cli/test_help_examples.py)."""
    lines = text.splitlines()
    if "  Examples:" in lines:
        lines = lines[:lines.index("  Examples:")]
    return [ln for ln in lines if len(ln) > width and len(ln.split()) > 1]


@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=[p for p, _ in ALL])
def test_help_fits_40_columns(path):
    r = run([*path.split(), "--help"], env={"COLUMNS": "40"})
    assert r.exit_code == 0, r.output
    assert overflow(r.stdout, 40) == []


def test_help_at_80_columns_is_what_it_was():
    r = run(["put", "--help"], env={"COLUMNS": "80"})
    wide = run(["put", "--help"], env={"COLUMNS": "200"})
    assert r.stdout == wide.stdout  # click's own width (at most 78) from 52 columns on
    assert overflow(r.stdout, 80) == []


def test_doctor_fits_40_columns(tmp_path):
    store, conf = unpack_golden("timer/t1", tmp_path / "t1")
    r = run(["doctor", "-c", conf], env={"COLUMNS": "40"})
    assert r.exit_code in (0, 3), r.output
    assert r.stdout and overflow(r.stdout, 40) == []
    wide = run(["doctor", "-c", conf], env={"COLUMNS": "80"})
    assert max(map(len, wide.stdout.splitlines())) > 40 and overflow(wide.stdout, 80) == []


def test_recover_with_timer_messages_lost_fits_80_and_40_columns(tmp_path):
    """recover's plan on a timer store whose commit log lost its tail: the "timer messages lost" table (once
    101 columns) and every field line fit 80 columns, and 40 but for a value that cannot be cut."""
    from engine.broker.commitlog.log import open_commitlog
    from engine.broker.config.brokerconf import load_config
    from helpers import patch_file

    store, conf = unpack_golden("timer/t1", tmp_path / "t1")
    cl = open_commitlog(load_config(conf))
    try:
        cut = next(e.offset for e in cl.scan(0, check_crc=False) if e.offset >= 120_000)
        end = cl.find_end()
    finally:
        cl.close()
    patch_file(store / "commitlog" / "00000000000000000000", cut, bytes(end - cut))
    r80 = run(["recover", "-c", conf, "--dry-run"], env={"COLUMNS": "80"})
    assert r80.exit_code == 0, r80.output
    assert "timer messages lost" in r80.stdout
    assert [ln for ln in r80.stdout.splitlines() if len(ln) > 80] == []
    r40 = run(["recover", "-c", conf, "--dry-run"], env={"COLUMNS": "40"})
    assert r40.exit_code == 0 and overflow(r40.stdout, 40) == []
