"""Start-up (issue 13 item 3): importing the CLI imports nothing heavy; bare `rmqtool` is help with exit 0.

The timing target itself is measured by bench/bench_startup.py (ratios to `python -c pass`), not here.
"""
from __future__ import annotations

from helpers import REPO
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = REPO
HEAVY = ("numpy", "rich.table", "rich.console", "pyspark", "pydantic", "engine.broker.store", "engine.java.lang")


def _modules_after(code: str) -> set[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_importing_the_app_imports_no_heavy_module():
    mods = _modules_after("import rmqtool.app")
    assert not [m for m in HEAVY if m in mods], [m for m in HEAVY if m in mods]
    # no command pulls in another command's engine module, nor Spark's
    assert not [m for m in mods if m.startswith(("engine.ops", "engine.jobs", "engine.tiered", "pyspark"))]


def test_version_runs_without_heavy_modules():
    mods = _modules_after("import sys\nsys.argv = ['rmqtool', '--version']\nfrom rmqtool.app import main\n"
                          "try:\n    main()\nexcept SystemExit:\n    pass")
    assert not [m for m in HEAVY if m in mods]


def test_bare_rmqtool_in_a_fresh_interpreter_is_help_with_exit_0():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "rmqtool"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Usage: rmqtool") and "Commands:" in r.stdout


def test_one_command_is_built_alone_and_behaves_like_the_full_app():
    """main() builds only the command it runs: its help is the same as in the full application."""
    from typer.testing import CliRunner

    from rmqtool.app import app, build

    full = CliRunner().invoke(app, ["query-key", "--help"], prog_name="rmqtool")
    alone = CliRunner().invoke(build(["query-key"]), ["query-key", "--help"], prog_name="rmqtool")
    assert full.exit_code == alone.exit_code == 0
    assert full.stdout == alone.stdout


def test_reindex_default_master_matches_the_engine():
    from engine.jobs.framework import DEFAULT_MASTER
    from rmqtool.commands import spark_reindex

    assert spark_reindex.DEFAULT_MASTER == DEFAULT_MASTER


def test_query_key_reads_a_store_without_numpy_or_pydantic(tmp_path):
    """A key query on a store (index lookup, message check, table) needs neither numpy nor typer's pydantic."""
    from helpers import cli

    store = tmp_path / "s"
    cli("put", "--store", str(store), "--topic", "T", "--keys", "k1", "--body", "x")  # the store: made in-process
    mods = _modules_after(f"import sys\nsys.argv = ['rmqtool', 'query-key', '--store', {str(store)!r}, '--topic', 'T',"
                          " '--key', 'k1']\nfrom rmqtool.app import main\ntry:\n    main()\nexcept SystemExit as e:\n"
                          "    assert not e.code, e.code")
    assert "engine.broker.index.keyquery" in mods  # the query really ran
    assert not [m for m in ("numpy", "pydantic", "pyspark") if m in mods], [m for m in ("numpy", "pydantic") if m in mods]


@pytest.mark.slow
def test_every_command_runs_through_the_real_entry_point():
    """main() builds only the invoked command: each one's --help through a new process equals the full app's."""
    from typer.testing import CliRunner

    from rmqtool.app import COMMANDS, GROUPS, app

    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="100")
    for name in sorted(COMMANDS) + sorted(GROUPS):
        r = subprocess.run([sys.executable, "-m", "rmqtool", name, "--help"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, (name, r.stderr)
        if name in GROUPS:  # a group lists its commands with short helps cut to the width: compare the names
            assert all(c.name in r.stdout for c in GROUPS[name].registered_commands), name
            continue
        full = CliRunner().invoke(app, [name, "--help"], prog_name="rmqtool", env={"COLUMNS": "100"})
        assert "".join(r.stdout.split()) == "".join(full.stdout.split()), name  # the same help, wrapping aside


@pytest.mark.slow
def test_top_level_help_and_version_through_the_entry_point_equal_the_full_app():
    """main() answers --version before building the CLI and lists the commands without building their options:
    the same text as the full application gives (wrapping aside)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="100")
    full_app = "import sys\nfrom rmqtool.app import app\nsys.argv[0] = 'rmqtool'\napp(prog_name='rmqtool')"
    for args in (["--help"], ["-h"], [], ["--debug"], ["--version"], ["-V"]):
        r = subprocess.run([sys.executable, "-m", "rmqtool", *args], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=60)
        full = subprocess.run([sys.executable, "-c", full_app, *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=60)
        assert r.returncode == full.returncode == 0, (args, r.stderr, full.stderr)
        assert r.stdout == full.stdout and r.stdout.strip(), args
    mods = _modules_after("import sys\nsys.argv = ['rmqtool', '--help']\nfrom rmqtool.app import main\n"
                          "try:\n    main()\nexcept SystemExit:\n    pass")
    assert "rmqtool.commands.query_key" in mods  # the listing reads each command's help from its module


def test_progress_on_a_piped_stderr_draws_nothing_and_imports_no_rich():
    """render.progress: with stderr not a terminal the bar is a no-op with the same calls (rich's ~30 ms of
    imports are not paid by a piped or redirected command); FORCE_COLOR makes it a real rich bar again."""
    code = ("from rmqtool import render\nwith render.progress(None, 'x') as bar:\n"
            "    t = bar.add_task('x', total=3)\n    bar.update(t, completed=1, total=3, description='y')\n"
            "    bar.advance(t, 2)\nprint(type(bar).__name__)")
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_INTERACTIVE", "TTY_COMPATIBLE")}
    env["PYTHONPATH"] = str(ROOT)
    full = code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"
    r = subprocess.run([sys.executable, "-c", full], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    name, mods = r.stdout.splitlines()[0], set(json.loads(r.stdout.splitlines()[-1]))
    assert name == "_NoProgress" and "rich.progress" not in mods and r.stderr == ""
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(env, FORCE_COLOR="1"), capture_output=True,
                       text=True, check=True)
    assert r.stdout.strip() == "Progress"
