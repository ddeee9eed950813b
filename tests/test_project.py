"""Project hygiene: help text everywhere, docs and completions not stale, imports light and cycle-free."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import run

ROOT = Path(__file__).resolve().parent.parent


def all_commands():
    import typer.main

    from rmqtool.app import app
    root = typer.main.get_command(app)
    return root, sorted(root.commands.items())


def test_every_command_and_option_has_help():
    root, cmds = all_commands()
    assert {"put", "query-key", "inspect-index", "get", "dump-commitlog", "demo"} <= {n for n, _ in cmds}
    for name, cmd in cmds:
        assert (cmd.help or "").strip(), f"{name} has no help text"
        for p in cmd.params:
            assert (getattr(p, "help", None) or "").strip(), f"{name} {p.name} has no help text"
        r = run([name, "--help"])
        assert r.exit_code == 0 and "Usage" in r.stdout


def test_version():
    from rmqtool import __version__
    r = run(["--version"])
    assert r.exit_code == 0 and r.stdout.strip() == f"rmqtool {__version__}"


def test_readme_reference_and_completions_are_current():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "regen.py"), "--check"], capture_output=True,
                       text=True, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr


def test_completions_cover_every_command():
    _, cmds = all_commands()
    texts = {n: (ROOT / "completions" / n).read_text() for n in ("rmqtool.bash", "_rmqtool", "rmqtool.fish")}
    for name, cmd in cmds:
        for t in texts.values():
            assert name in t
    p = subprocess.run(["bash", "-n", str(ROOT / "completions" / "rmqtool.bash")], capture_output=True)
    assert p.returncode == 0, p.stderr


def test_readme_has_exactly_two_setup_commands():
    text = (ROOT / "README.md").read_text()
    setup = text.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("```", 1)[0].strip() for b in setup.split("```sh")[1:]]
    assert blocks == ["pip install -e . && rmqtool demo sample-store", "pip install -e '.[test]' && python -m pytest -q"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert blocks[1] in ci


def module_names():
    names = []
    for pkg in ("engine", "rmqtool"):
        for p in sorted((ROOT / pkg).rglob("*.py")):
            if p.name != "__main__.py":
                names.append(".".join(p.relative_to(ROOT).with_suffix("").parts).replace(".__init__", ""))
    return names


@pytest.mark.parametrize("mod", module_names())
def test_each_module_imports_in_a_fresh_interpreter(mod):
    code = f"import sys, {mod}; heavy = sorted(m for m in ('pyspark', 'typer', 'rich') if m in sys.modules); print(heavy)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 0, p.stderr
    heavy = eval(p.stdout.strip())
    assert "pyspark" not in heavy, f"{mod} imports pyspark at start-up"
    if mod.startswith("engine"):
        assert heavy == [], f"engine module {mod} imports {heavy}"
