"""Import cycles: the imports of engine/ and rmqtool/ must not form a cycle, and no module imports another
module's private (_underscored) names.

Every import counts: one inside a function (how a module defers a heavy or optional dependency) or under
`if TYPE_CHECKING:` is a dependency all the same. The layer order itself (no upward import, engine never imports
rmqtool) is checked by tests/project/test_project.py.
"""
from __future__ import annotations

from helpers import REPO, import_nodes
import ast
from pathlib import Path

ROOT = REPO


def module_name(p: Path) -> str:
    parts = list(p.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in ("engine", "rmqtool") for p in (ROOT / pkg).rglob("*.py")}


def imports(mods: dict[str, Path]) -> list[tuple[str, str]]:
    """(importer, imported) for every import of a project module, wherever it stands in the file."""
    out = []
    for mod, path in mods.items():
        for node in import_nodes(path):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            out += [(mod, n) for n in names if n in mods and n != mod]
    return out


def private_imports(mods: dict[str, Path]) -> list[str]:
    """`from module import _name` of another project module's private name (dunders aside)."""
    out = []
    for mod, path in mods.items():
        for node in import_nodes(path):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module in mods and node.module != mod:
                out += [f"{mod} imports {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def cycles(edges) -> list[list[str]]:
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        if not b.startswith(a + "."):  # a package importing its own submodules is not a cycle
            graph.setdefault(a, set()).add(b)
    found, state = [], {}

    def visit(n: str, stack: list[str]) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                found.append(stack[stack.index(m):] + [m])
            elif m not in state:
                visit(m, stack)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [])
    return found


def test_no_import_cycles():
    edges = imports(modules())
    assert len(edges) > 200  # the walk saw the real code
    assert cycles(edges) == []


def test_no_module_imports_another_modules_private_names():
    assert private_imports(modules()) == []


def test_the_checker_sees_a_cycle():
    edges = [("engine.broker.x", "engine.ops.y"), ("engine.ops.y", "engine.broker.x"),
             ("engine.ops.y", "engine.java.z")]
    assert cycles(edges) == [["engine.broker.x", "engine.ops.y", "engine.broker.x"]]
    assert cycles(edges[1:]) == []
    assert cycles([("engine.broker", "engine.broker.x"), ("engine.broker.x", "engine.java.z")]) == []


def test_the_checker_sees_imports_inside_functions_and_private_names(tmp_path):
    pkg = tmp_path / "engine"
    pkg.mkdir()
    (pkg / "a.py").write_text("def f():\n    from engine.b import g\n")
    (pkg / "b.py").write_text("from engine.a import _hidden\n")
    mods = {"engine.a": pkg / "a.py", "engine.b": pkg / "b.py"}
    assert sorted(imports(mods)) == [("engine.a", "engine.b"), ("engine.b", "engine.a")]
    assert cycles(imports(mods)) == [["engine.a", "engine.b", "engine.a"]]
    assert private_imports(mods) == ["engine.b imports engine.a._hidden"]


def test_tests_import_no_private_names():
    """The tests use the engine's and the CLI's public names only (issue 31 item 7): what a test needs is API."""
    tests = {".".join(p.relative_to(ROOT).with_suffix("").parts): p for p in (ROOT / "tests").rglob("*.py")}
    found = [line for line in private_imports({**modules(), **tests}) if line.startswith("tests.")]
    assert found == []


def test_no_test_file_imports_another():
    """What tests share lives in tests/helpers.py (and the *_helpers modules beside it), never in a test file:
    a test file imported by another breaks when its folder runs alone (tests/engine without tests/cli)."""
    import ast

    found = []
    for p in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in import_nodes(p):  # every import statement, parsed once per run
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{p.relative_to(ROOT)} imports {n}" for n in names if n.split(".")[-1].startswith("test_")]
    assert found == []
