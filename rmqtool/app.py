"""The typer application: global options and the explicit list of commands.

Start-up is part of the interface (issue 13 item 3): main() imports typer and the module of the one command it
runs, nothing else (`rmqtool --version` not even typer); command modules import nothing heavy at module level (no
numpy, rich tables, pyspark or engine modules that use them) and each command imports what it needs when it runs.
The full application (`app`, every command) is built when asked for: `rmqtool --help`, completions, the tests.
tests/project/test_startup.py keeps it so.
"""
from __future__ import annotations

import sys
from collections.abc import Mapping
from importlib import import_module
from typing import TYPE_CHECKING, Annotated, Optional

from rmqtool import __version__

if TYPE_CHECKING:
    import typer

HELP = ("Offline toolkit for Apache RocketMQ broker stores: put, query by key, inspect and verify index files, "
        "dump the commit log, recover, clean and rebuild indexes, byte-compatible with the broker.")

# Every command, by name: (module under rmqtool.commands, function). Each module is a thin layer over one engine
# entry point; it is imported only when its command is built. The examples at the end of each command's --help
# come from rmqtool/examples.py (one place for all of them).
COMMAND_TABLE = {
    "put": ("put", "put"),
    "query-key": ("query_key", "query_key"),
    "get": ("get", "get"),
    "dump-commitlog": ("dump_commitlog", "dump_commitlog"),
    "inspect-index": ("inspect_index", "inspect_index"),
    "recover": ("recover", "recover"),
    "clean": ("clean", "clean"),
    "spark-reindex": ("spark_reindex", "spark_reindex"),
    "demo": ("demo", "demo"),
    "print-msg": ("print_msg", "print_msg"),
    "queues": ("queues", "queues"),
    "dump-cq": ("dump_cq", "dump_cq"),
    "verify-cq": ("verify_cq", "verify_cq"),
    "consumers": ("consumers", "consumers"),
    "delays": ("delays", "delays"),
    "info": ("info", "info"),
    "prune": ("prune", "prune"),
    "doctor": ("doctor", "doctor"),
}
GROUP_TABLE = {"tiered": "tiered", "timer": "timer", "repair": "repair"}  # command groups: the package whose `app` is the group
# Each group's subcommands, in the order the help lists them: (module under rmqtool.commands, function); a group is a
# package with one module per subcommand, named for it.
GROUP_COMMANDS = {
    "tiered": {
        "queues": ("tiered.queues", "queues"),
        "segments": ("tiered.segments", "segments"),
        "get": ("tiered.get", "get"),
        "offset-by-time": ("tiered.offset_by_time", "offset_by_time"),
        "dump-cq": ("tiered.dump_cq", "dump_cq"),
        "verify": ("tiered.verify", "verify"),
        "dispatch": ("tiered.dispatch", "dispatch"),
        "clean": ("tiered.clean", "clean"),
        "rebuild-metadata": ("tiered.rebuild_metadata", "rebuild_metadata"),
        "query-key": ("tiered.query_key", "query_key"),
        "inspect-index": ("tiered.inspect_index", "inspect_index"),
        "compact-index": ("tiered.compact_index", "compact_index"),
        "reindex": ("tiered.reindex", "reindex"),
    },
    "timer": {
        "inspect": ("timer.inspect", "inspect_cmd"),
        "list": ("timer.list", "list_cmd"),
        "verify": ("timer.verify", "verify_cmd"),
    },
    "repair": {
        "config": ("repair.config", "config_cmd"),
        "consume-queue": ("repair.consume_queue", "consume_queue_cmd"),
        "timer": ("repair.timer", "timer_cmd"),
    },
}


class _Lazy(Mapping):
    """name -> command function (or group app), imported on first use; iterating gives the names."""

    def __init__(self, table: dict, load):
        self._table, self._load, self._loaded = table, load, {}

    def __getitem__(self, name: str):
        if name not in self._loaded:
            self._loaded[name] = self._load(self._table[name])
        return self._loaded[name]

    def __contains__(self, name) -> bool:  # a name is known without importing its module
        return name in self._table

    def __iter__(self):
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)


def _command(where: tuple[str, str]):
    module, function = where
    return getattr(import_module(f"rmqtool.commands.{module}"), function)


def _group(module: str):
    from rmqtool import examples

    _typer()  # the callback's signature names typer
    group = import_module(f"rmqtool.commands.{module}").app  # loaded once: GROUPS keeps it
    for name, where in GROUP_COMMANDS.get(group.info.name, {}).items():
        group.command(name)(_command(where))
    for info in group.registered_commands:
        info.epilog = examples.epilog(f"{group.info.name} {info.name}")
    group.info.no_args_is_help = False
    group.callback(invoke_without_command=True)(_help_when_bare)
    return group


COMMANDS = _Lazy(COMMAND_TABLE, _command)
GROUPS = _Lazy(GROUP_TABLE, _group)


def _print_version() -> None:
    print(f"rmqtool {__version__}")


def _version(value: bool) -> None:
    if value:
        _print_version()
        raise typer.Exit()


def _typer():
    """typer, imported when the first application is built (and bound here: the signatures below name it)."""
    global typer
    import typer

    return typer


def _main(
    ctx: typer.Context,
    version: Annotated[Optional[bool], typer.Option("--version", "-V", callback=_version, is_eager=True,
                                                    help="Print the version and exit.")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
) -> None:
    from rmqtool import cli

    cli.state["debug"] = debug
    _help_when_bare(ctx)


def _help_when_bare(ctx: typer.Context) -> None:
    """`rmqtool` (or `rmqtool tiered`) alone: print the help and exit 0."""
    if ctx.invoked_subcommand is None and not ctx.resilient_parsing:
        print(ctx.get_help())
        raise typer.Exit(0)


def _listed(name: str):
    """A command (or group) as the top-level help lists it: its help text, without its options (typer turns
    a signature into click options for ~3 ms a command; the list needs only the names and helps)."""
    import inspect

    if name in GROUPS:
        group = GROUPS[name]
        return typer.Typer(name=name, help=group.info.help, context_settings=group.info.context_settings)
    real = COMMANDS[name]

    def listed() -> None:
        pass

    listed.__doc__ = inspect.getdoc(real)
    return listed


def build(names=None, listing: bool = False) -> typer.Typer:
    """The application with the commands `names` (default: all). main() builds only the command it runs: typer
    turns every command's signature into click options when the app is called, ~3 ms per command. listing:
    every command as the top-level help lists it, and nothing more (`rmqtool --help`, bare `rmqtool`)."""
    from rmqtool import examples

    from rmqtool.cli import HelpGroup, OneLineErrors

    typer = _typer()
    names = list(COMMANDS) + list(GROUPS) if names is None else names
    a = typer.Typer(
        name="rmqtool", help=HELP, cls=OneLineErrors,  # usage errors: one line, exit 2 (docs/output-contract.md)
        no_args_is_help=False,  # no arguments: the help and exit 0 (_help_when_bare), not a usage error (exit 2)
        invoke_without_command=True,
        add_completion=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,  # plain click help: typer's rich help imports rich and markdown-it (~150 ms)
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    a.callback()(_main)
    for name in names:
        if name in COMMANDS:
            a.command(name, epilog=examples.epilog(name))(_listed(name) if listing else COMMANDS[name])
        else:
            a.add_typer(_listed(name) if listing else GROUPS[name], name=name, epilog=examples.epilog(name),
                        cls=HelpGroup)
    return a


def __getattr__(name: str):
    """`app`, the full application, built on first use (PEP 562)."""
    if name == "app":
        globals()["app"] = full = build()
        return full
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Commands that run other commands through the application they were invoked from: they need all of it built.
NEEDS_ALL_COMMANDS = {"demo"}


def _command_named(argv: list[str]):
    """The command an argument list runs (the first word after the global options), when it is one we know."""
    for arg in argv:
        if arg in ("--debug",):
            continue
        return arg if arg in COMMANDS or arg in GROUPS else None
    return None


def main() -> None:
    import os

    args = sys.argv[1:]
    completing = any(k.endswith("_COMPLETE") for k in os.environ)
    if args[:1] in (["--version"], ["-V"]) and not completing:
        _print_version()  # what the eager --version option prints, without building the CLI
        return
    name = None if completing else _command_named(args)
    if name in NEEDS_ALL_COMMANDS:
        name = None
    listing = not completing and name is None and all(a in ("-h", "--help", "--debug") for a in args)
    try:
        (build([name]) if name else build(listing=listing))(prog_name="rmqtool")
    except BrokenPipeError:
        _closed_pipe()


def _closed_pipe() -> None:
    """The reader of stdout went away (`| head -1`) outside a command: end quietly with 0, as a command does
    (rmqtool.cli.handles_errors; docs/output-contract.md)."""
    from rmqtool.cli import closed_pipe

    closed_pipe()
    sys.exit(0)
