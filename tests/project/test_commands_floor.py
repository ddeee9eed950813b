"""The command floor (issue 31 item 2): a module of rmqtool/commands imports of the engine only engine.commands (one
function per command), the views, the errors and the progress types; nothing else. The commands that do not
stand on the floor yet are listed, and the list can only shrink."""
from __future__ import annotations

from helpers import REPO, import_nodes
import ast
from pathlib import Path

ROOT = REPO
COMMANDS = ROOT / "rmqtool" / "commands"
#: What a command module may import of the engine.
ALLOWED = ("engine.commands", "engine.views", "engine.errors", "engine.progress")
#: Command modules that still reach into the engine below the floor (to move onto it, one at a time).
NOT_YET: set[str] = set()


def engine_imports(path: Path) -> set[str]:
    """Every engine module a file imports, at module level or inside a function."""
    out = set()
    for node in import_nodes(path):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m == "engine" or m.startswith("engine.")}


def below_the_floor() -> dict[str, set[str]]:
    """{command module (dotted, under rmqtool.commands): the engine modules it imports that are not allowed}."""
    found = {}
    for p in sorted(COMMANDS.rglob("*.py")):
        name = ".".join(p.relative_to(COMMANDS).with_suffix("").parts).removesuffix(".__init__")
        if name == "__init__":
            continue
        bad = {m for m in engine_imports(p) if not any(m == a or m.startswith(a + ".") for a in ALLOWED)}
        if bad:
            found[name] = bad
    return found


def test_commands_import_only_the_floor_views_errors_and_progress():
    found = below_the_floor()
    new = {k: v for k, v in found.items() if k not in NOT_YET}
    assert not new, f"command modules importing the engine below engine.commands: {new}"


def test_the_list_of_commands_not_yet_on_the_floor_is_exact():
    """A command that moved onto the floor leaves NOT_YET (the list shrinks, never hides a module on the floor)."""
    assert sorted(NOT_YET - set(below_the_floor())) == []


#: Each command module and the module of the floor it calls (a group's subcommands: the group's module).
FLOOR = {name: name for name in ("get", "queues", "consumers", "delays", "info", "prune", "doctor", "clean",
                                 "verify_cq", "recover", "put", "query_key", "dump_commitlog", "dump_cq", "print_msg",
                                 "inspect_index", "spark_reindex", "demo")}
FLOOR |= {f"timer/{n}": "timer" for n in ("inspect", "list", "verify")}
FLOOR |= {f"repair/{n}": "repair" for n in ("config", "consume_queue", "timer")}
FLOOR |= {f"tiered/{n}": "tiered" for n in ("__init__", "clean", "compact_index", "dispatch", "dump_cq", "get",
                                            "inspect_index", "offset_by_time", "query_key", "queues",
                                            "rebuild_metadata", "reindex", "segments", "verify")}


def test_the_commands_on_the_floor_call_it():
    """Each command on the floor calls its own function there (engine/commands/<command>.py)."""
    for name, floor in FLOOR.items():
        imported = engine_imports(COMMANDS / f"{name}.py")
        assert f"engine.commands.{floor}" in imported, name
        assert all(m.startswith(ALLOWED) for m in imported), (name, imported)


def test_every_command_module_is_on_the_floor():
    """Every module of rmqtool/commands that defines a command is in FLOOR (a new command cannot skip the floor)."""
    modules = {str(p.relative_to(COMMANDS).with_suffix("")) for p in COMMANDS.rglob("*.py")
               if "@handles_errors" in p.read_text(encoding="utf-8")}
    assert sorted(modules - set(FLOOR)) == []


def test_a_disallowed_import_is_seen(tmp_path):
    """The check sees an import inside a function, not only at the top of a module."""
    p = tmp_path / "x.py"
    p.write_text("def f():\n    from engine.broker.store import MessageStore\n    import engine.views.times\n")
    assert engine_imports(p) == {"engine.broker.store", "engine.views.times"}
