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


# The engine's layers, lowest first (docs/architecture.md): a module imports only its own subpackage and the ones
# below it, and never rmqtool. Imports inside functions count too.
LAYERS = (("engine.errors", "engine.fsutil"), ("engine.java",), ("engine.broker",), ("engine.timer",), ("engine.ops",),
          ("engine.tiered",), ("engine.jobs",))
# The one import against the arrows, written down in docs/architecture.md: the tier-out runs on the jobs' runners.
UPWARD_ALLOWED = {("engine.tiered.flat.runner", "engine.jobs.runners")}


def _layer(name: str) -> int | None:
    for i, group in enumerate(LAYERS):
        if any(name == g or name.startswith(g + ".") for g in group):
            return i
    return None


def engine_imports():
    import ast

    for p in sorted((ROOT / "engine").rglob("*.py")):
        mod = ".".join(p.relative_to(ROOT).with_suffix("").parts).replace(".__init__", "")
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                yield mod, node.module
            elif isinstance(node, ast.Import):
                for a in node.names:
                    yield mod, a.name


def test_engine_imports_go_down_the_layers_only():
    bad = []
    seen = 0
    for mod, target in engine_imports():
        if target.split(".")[0] == "rmqtool":
            bad.append(f"{mod} imports {target}")
        if not target.startswith("engine"):
            continue
        seen += 1
        lm, lt = _layer(mod), _layer(target)
        if lm is None and mod != "engine":
            bad.append(f"{mod} is in no layer (add it to LAYERS and docs/architecture.md)")
        elif lt is not None and lm is not None and lt > lm and (mod, target) not in UPWARD_ALLOWED:
            bad.append(f"{mod} imports {target}, a higher layer")
    assert seen > 100  # the walk saw the real engine
    assert not bad, bad


def test_the_layer_check_catches_an_upward_import():
    assert _layer("engine.tiered.flat.reader") > _layer("engine.ops.queues") > _layer("engine.broker.store")
    assert _layer("engine.jobs.runners") > _layer("engine.tiered.flat.runner")
    assert _layer("engine.fsutil") < _layer("engine.java.lang")
    assert _layer("engine.broker.store") < _layer("engine.timer.store") < _layer("engine.ops.clean")
