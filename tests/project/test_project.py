"""Project hygiene: help text everywhere, docs and completions not stale, imports light and cycle-free."""
from __future__ import annotations

from helpers import REPO
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import import_nodes, run

ROOT = REPO


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


def test_readme_reference_and_completions_are_current(monkeypatch, capsys):
    """scripts/regen.py --check, run in this process (as its __main__ does): its --help texts come from typer's
    command built once per session (tests/conftest.py), not rebuilt for each command in a fresh interpreter."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("regen_script", ROOT / "scripts" / "regen.py")
    regen = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(sys, "path", list(sys.path))   # the script puts the repository first on sys.path
    spec.loader.exec_module(regen)
    monkeypatch.setenv("COLUMNS", os.environ.get("COLUMNS", regen.HELP_WIDTH))
    monkeypatch.setattr(sys, "argv", [str(ROOT / "scripts" / "regen.py"), "--check"])
    code = regen.main()
    out = capsys.readouterr()
    assert code == 0, out.out + out.err


def test_completions_cover_every_command():
    _, cmds = all_commands()
    assert cmds and not [n for n, c in cmds if c.hidden]   # no hidden old spelling (CHANGELOG.md)
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


# One interpreter that has imported nothing of the project forks a child per module: the child imports the module
# as a fresh interpreter would (nothing of engine/ or rmqtool/ is loaded before it), for a fork's cost instead of an
# interpreter start-up. numpy is loaded before the forks (it is not one of the heavy imports checked), and typer and
# rich too for the rmqtool modules (only pyspark is checked for them); so are the standard library's modules that
# the project's modules import (a first child imports them all and names them): a child then imports the project's
# modules only, which is what the check is about.
IMPORT_SERVER = r"""
import json, os, sys, traceback
import numpy
if sys.argv[1] == "cli":
    import rich, typer


def in_child(work):
    # work() run in a forked child; what it returns (bytes) read back here
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, work())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return data


def stdlib_of_project():
    for name in sys.argv[2:]:
        try:
            __import__(name)
        except BaseException:
            pass
    return json.dumps(sorted(m for m in sys.modules if m.partition(".")[0] in sys.stdlib_module_names)).encode()


for name in json.loads(in_child(stdlib_of_project) or b"[]"):
    try:
        __import__(name)
    except BaseException:
        pass


def import_one(name):
    def work():
        try:
            __import__(name)
            out = {"heavy": sorted(m for m in ("pyspark", "typer", "rich") if m in sys.modules)}
        except BaseException:
            out = {"error": traceback.format_exc()}
        return json.dumps(out).encode()
    return work


for line in sys.stdin:
    data = in_child(import_one(line.strip()))
    print(data.decode() or json.dumps({"error": "the child died"}), flush=True)
"""


@pytest.fixture(scope="module")
def import_servers():
    mods = module_names()
    servers = {kind: subprocess.Popen([sys.executable, "-c", IMPORT_SERVER, kind,
                                       *[m for m in mods if m.startswith("engine") == (kind == "engine")]],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
               for kind in ("engine", "cli")}
    yield servers
    for p in servers.values():
        p.stdin.close()
        p.wait(timeout=60)


@pytest.mark.parametrize("mod", module_names())
def test_each_module_imports_in_a_fresh_interpreter(import_servers, mod):
    import json

    server = import_servers["engine" if mod.startswith("engine") else "cli"]
    server.stdin.write(mod + "\n")
    server.stdin.flush()
    answer = json.loads(server.stdout.readline())
    assert "error" not in answer, answer.get("error")
    heavy = answer["heavy"]
    assert "pyspark" not in heavy, f"{mod} imports pyspark at start-up"
    if mod.startswith("engine"):
        assert heavy == [], f"engine module {mod} imports {heavy}"


# The engine's floors, lowest first (docs/architecture.md): a module imports only its own floor and the ones below
# it, and never rmqtool. Imports inside functions count too. Packages named together in BESIDE share a floor but
# know nothing of each other: neither imports the other.
LAYERS = (("engine.clock", "engine.errors", "engine.findings", "engine.fsutil", "engine.progress", "engine.workers"),
          ("engine.java",), ("engine.broker",), ("engine.timer",), ("engine.views", "engine.exec"),
          ("engine.ops", "engine.tiered"), ("engine.survey",), ("engine.jobs",), ("engine.commands",))
BESIDE = (("engine.views", "engine.exec"), ("engine.ops", "engine.tiered"))


def _in(name: str, pkg: str) -> bool:
    return name == pkg or name.startswith(pkg + ".")


def _layer(name: str) -> int | None:
    for i, group in enumerate(LAYERS):
        if any(_in(name, g) for g in group):
            return i
    return None


def engine_imports():
    import ast

    for p in sorted((ROOT / "engine").rglob("*.py")):
        mod = ".".join(p.relative_to(ROOT).with_suffix("").parts).replace(".__init__", "")
        for node in import_nodes(p):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                yield mod, node.module
            elif isinstance(node, ast.Import):
                for a in node.names:
                    yield mod, a.name


def layer_problems(edges) -> list[str]:
    """What is wrong with these (importer, imported) pairs: rmqtool imported, a module in no floor, an import of a
    higher floor, an import across packages that stand beside each other."""
    bad = []
    for mod, target in edges:
        if target.split(".")[0] == "rmqtool":
            bad.append(f"{mod} imports {target}")
        if not target.startswith("engine"):
            continue
        lm, lt = _layer(mod), _layer(target)
        if lm is None and mod != "engine":
            bad.append(f"{mod} is in no layer (add it to LAYERS and docs/architecture.md)")
        elif lt is not None and lm is not None and lt > lm:
            bad.append(f"{mod} imports {target}, a higher layer")
        elif any(_in(mod, a) and _in(target, b) or _in(mod, b) and _in(target, a) for a, b in BESIDE):
            bad.append(f"{mod} imports {target}, a package beside its own")
    return bad


def test_engine_imports_go_down_the_layers_only():
    edges = list(engine_imports())
    assert sum(t.startswith("engine") for _, t in edges) > 100  # the walk saw the real engine
    bad = layer_problems(edges)
    assert not bad, bad


def test_the_layer_check_catches_an_upward_import():
    assert _layer("engine.jobs.framework") > _layer("engine.tiered.flat.reader") > _layer("engine.broker.store")
    assert _layer("engine.exec.runners") < _layer("engine.tiered.flat.runner") < _layer("engine.jobs.framework")
    assert _layer("engine.fsutil") < _layer("engine.java.lang")
    assert layer_problems([("engine.broker.store", "engine.ops.clean")]) == [
        "engine.broker.store imports engine.ops.clean, a higher layer"]
    assert layer_problems([("engine.tiered.flat.reader", "engine.ops.clean"),
                           ("engine.ops.read", "engine.tiered.flat.store")]) == [
        "engine.tiered.flat.reader imports engine.ops.clean, a package beside its own",
        "engine.ops.read imports engine.tiered.flat.store, a package beside its own"]
    assert layer_problems([("engine.jobs.framework", "engine.ops.clean"), ("engine.ops.x", "engine.ops.y"),
                           ("engine.views.runjson", "engine.broker.commitlog.records")]) == []
    assert layer_problems([("engine.broker.store", "rmqtool.render")]) == ["engine.broker.store imports rmqtool.render"]
    assert _layer("engine.broker.store") < _layer("engine.timer.store") < _layer("engine.ops.clean")
    assert _layer("engine.ops.repair") == _layer("engine.tiered.flat.verify") < _layer("engine.survey.doctor")
    assert layer_problems([("engine.survey.info", "engine.tiered.flat.store"), ("engine.ops.repair",
                                                                                 "engine.survey.doctor")]) == [
        "engine.ops.repair imports engine.survey.doctor, a higher layer"]
