"""The store options declared once (issue 31 item 4): one option group (rmqtool.options.GROUP) that every command
takes through @store_options, as one StoreOptions value; no command declares --store, --broker-conf, the geometry
or the tier's options itself."""
from __future__ import annotations

import ast
import inspect
import json
import typing
from pathlib import Path

import pytest

from helpers import REPO, command_paths, put_jsonl, run
from rmqtool import options
from rmqtool.options import GEOMETRY, GROUP, STORE, TIERED_GEOMETRY, StoreOptions, store_options

DECLARATIONS = {name for name, value in vars(options).items() if any(value is g for g in GROUP.values())}
FLAGS = {f: [n for n in GROUP if f in options.option_flags(GROUP[n])]
         for n in GROUP for f in options.option_flags(GROUP[n])}  # flag -> the group's names that take it


def _innermost(fn):
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


def _commands():
    return [(path, cmd) for path, cmd in command_paths() if not getattr(cmd, "commands", None)]


def test_no_command_module_imports_a_declaration_of_the_group():
    assert DECLARATIONS >= {"StoreOpt", "BrokerConfOpt", "HashSlotsOpt", "TieredPathOpt", "TieredSlotsOpt"}
    offenders = []
    for path in sorted((REPO / "rmqtool" / "commands").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "rmqtool.options":
                offenders += [(path.name, a.name) for a in node.names if a.name in DECLARATIONS]
    assert not offenders


def test_every_command_function_takes_the_group_whole_not_its_options():
    without = []
    for path, cmd in _commands():
        fn = _innermost(cmd.callback)
        hints = typing.get_type_hints(fn, include_extras=True)
        assert not [n for n, h in hints.items() if any(h is g for g in GROUP.values())], path
        grouped = [o for p in cmd.params for o in p.opts if o in FLAGS]
        holders = [n for n, h in hints.items() if h is StoreOptions]
        assert len(holders) == (1 if grouped else 0), (path, holders, grouped)
        if not grouped:
            without.append(path)
    assert without == ["demo"]  # it makes its own sample store (and names it with StoreOptions.args)


def test_every_grouped_option_is_the_groups_declaration():
    """Same flags, help, type and default wherever an option of the group appears; its parameter is named for the
    StoreOptions field it fills (tiered_hash_slots for the tier's --hash-slots)."""
    seen: dict[str, set] = {}
    for path, cmd in _commands():
        for p in cmd.params:
            names = {n for o in p.opts for n in FLAGS.get(o, [])}
            if not names:
                continue
            assert p.name in names, (path, p.opts, p.name)
            info = GROUP[p.name].__metadata__[0]
            assert set(p.opts) == set(options.option_flags(GROUP[p.name])), (path, p.opts)
            assert p.help == info.help and p.default is None, (path, p.name)
            t = p.type
            seen.setdefault(p.name, set()).add((type(t).__name__, getattr(t, "file_okay", None),
                                                getattr(t, "dir_okay", None)))
    assert set(seen) == set(GROUP)  # every option of the group is taken by some command
    assert all(len(v) == 1 for v in seen.values()), seen


def test_geometry_follows_quiet_and_the_store_stands_where_the_placeholder_does():
    commands = dict(_commands())

    def order(path):
        return [p.name for p in commands[path].params]

    rec = order("recover")
    assert rec[:2] == ["store", "broker_conf"]
    assert rec[rec.index("quiet") + 1:rec.index("quiet") + 5] == list(GEOMETRY)
    assert order("tiered queues")[:6] == list(options.TIER)
    ci = order("tiered compact-index")  # the tier's geometry after --quiet, then --broker-conf where opts stands
    assert ci[ci.index("quiet") + 1:ci.index("quiet") + 4] == [*TIERED_GEOMETRY, "broker_conf"]
    assert "hash_slots" not in order("queues") and "metadata" not in order("recover")  # only the parts it takes


def test_the_command_gets_one_store_options_with_what_it_does_not_take_as_none():
    got = []

    @store_options(STORE, ("hash_slots",), after=None)
    def cmd(flag: bool = False, opts: StoreOptions = StoreOptions(), quiet: bool = False) -> None:
        got.append((flag, opts, quiet))

    assert list(inspect.signature(cmd).parameters) == ["flag", "store", "broker_conf", "hash_slots", "quiet"]
    hints = typing.get_type_hints(cmd, include_extras=True)
    assert hints["store"] is GROUP["store"] and hints["hash_slots"] is GROUP["hash_slots"]
    cmd(flag=True, store=Path("/s"), broker_conf=None, hash_slots=16, quiet=True)
    assert got == [(True, StoreOptions(store=Path("/s"), hash_slots=16), True)]


def test_a_group_used_wrongly_is_refused_when_the_command_is_defined():
    with pytest.raises(TypeError):
        store_options(STORE, GEOMETRY + TIERED_GEOMETRY)  # --hash-slots twice
    with pytest.raises(TypeError):
        store_options(("no_such_option",))
    with pytest.raises(TypeError):
        @store_options()
        def no_placeholder(quiet: bool = False) -> None:
            pass


def test_handles_errors_expands_home_in_the_grouped_paths(monkeypatch, tmp_path):
    from rmqtool.cli import handles_errors

    monkeypatch.setenv("HOME", str(tmp_path))
    got = []

    @handles_errors
    @store_options(options.TIER)
    def cmd(opts: StoreOptions, quiet: bool = False) -> None:
        got.append(opts)

    cmd(tiered_store_path=Path("~/tier"), metadata=Path("~/m.json"), store=Path("~/s"), broker_conf=Path("~/b.conf"),
        cluster_name="~c", broker_name=None, quiet=False)
    o = got[0]
    assert (o.tiered_store_path, o.metadata, o.store, o.broker_conf) == (
        tmp_path / "tier", tmp_path / "m.json", tmp_path / "s", tmp_path / "b.conf")
    assert o.cluster_name == "~c"  # a name, not a path
    assert o.tier().metadata == tmp_path / "m.json"


def test_a_store_given_with_a_tilde_is_read_through_the_cli(tmp_path):
    store = tmp_path / "s"
    put_jsonl(store, [{"topic": "T", "keys": "k", "body": "m"}])
    r = run(["info", "--store=~/s", "--json"], env={"HOME": str(tmp_path)})
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["store"] == str(store)
