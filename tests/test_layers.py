"""Import cycles: module-level imports of engine/ and rmqtool/ must not form a cycle.

An import inside a function is how a module defers a heavy or optional dependency and does not count. The layer
order itself (no upward import, engine never imports rmqtool) is checked by tests/test_project.py.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_name(p: Path) -> str:
    parts = list(p.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in ("engine", "rmqtool") for p in (ROOT / pkg).rglob("*.py")}


def imports(mods: dict[str, Path]) -> list[tuple[str, str, bool]]:
    """(importer, imported, at module level) for every import of a project module."""
    out = []
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            out += [(mod, n, id(node) in top) for n in names if n in mods and n != mod]
    return out


def cycles(edges) -> list[list[str]]:
    graph: dict[str, set[str]] = {}
    for a, b, top in edges:
        if top and not b.startswith(a + "."):  # a package importing its own submodules is not a cycle
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


def test_no_import_cycles_at_module_level():
    edges = imports(modules())
    assert len(edges) > 200  # the walk saw the real code
    assert cycles(edges) == []


def test_the_checker_sees_a_cycle():
    edges = [("engine.broker.x", "engine.ops.y", True), ("engine.ops.y", "engine.broker.x", True),
             ("engine.ops.y", "engine.java.z", False)]
    assert cycles(edges) == [["engine.broker.x", "engine.ops.y", "engine.broker.x"]]
    assert cycles([(a, b, False) for a, b, _ in edges]) == []
