"""The layering of docs/architecture.md, checked on the source: no upward import, no import cycle.

Layers, lowest first: engine.errors / engine.fsutil, engine.java, engine.broker, engine.tiered, engine.ops and
engine.jobs (side by side), rmqtool. A module may import its own layer and the layers below it, at module level
or inside a function; engine never imports rmqtool. Module-level imports must not form a cycle (an import inside
a function is how a module defers a heavy or optional dependency, and does not count for cycles).
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RANK = {"java": 1, "broker": 2, "tiered": 3, "ops": 4, "jobs": 4}
# Upward imports with a reason; each must still exist (a stale entry fails, so the list cannot rot).
ALLOWED_UP = {
    # The tier-out is a per-queue job: it runs on the jobs framework's runners, imported when a dispatch runs.
    ("engine.tiered.flat.runner", "engine.jobs.runners"),
}


def module_name(p: Path) -> str:
    parts = list(p.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in ("engine", "rmqtool") for p in (ROOT / pkg).rglob("*.py")}


def rank(mod: str) -> int:
    if mod.startswith("rmqtool"):
        return 5
    parts = mod.split(".")
    return RANK.get(parts[1], 0) if len(parts) > 1 else 0


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


def upward(edges) -> set[tuple[str, str]]:
    return {(a, b) for a, b, _ in edges if rank(b) > rank(a) and a.split(".")[:2] != b.split(".")[:2]}


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


def test_no_upward_imports():
    up = upward(imports(modules()))
    assert up - ALLOWED_UP == set(), sorted(up - ALLOWED_UP)
    assert ALLOWED_UP - up == set(), f"stale ALLOWED_UP entries: {sorted(ALLOWED_UP - up)}"


def test_engine_never_imports_rmqtool():
    bad = [(a, b) for a, b, _ in imports(modules()) if a.startswith("engine") and b.startswith("rmqtool")]
    assert bad == []


def test_no_import_cycles_at_module_level():
    assert cycles(imports(modules())) == []


def test_the_checker_sees_an_upward_import_and_a_cycle():
    edges = [("engine.broker.x", "engine.ops.y", True), ("engine.ops.y", "engine.broker.x", True),
             ("engine.ops.y", "engine.java.z", False)]
    assert upward(edges) == {("engine.broker.x", "engine.ops.y")}
    assert cycles(edges) == [["engine.broker.x", "engine.ops.y", "engine.broker.x"]]
    assert cycles([(a, b, False) for a, b, _ in edges]) == []
