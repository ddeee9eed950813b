"""The typer application: global options and the explicit list of commands.

Start-up is part of the interface (issue 13 item 3): importing this module builds the CLI from typer and the
command modules, which import nothing heavy at module level (no numpy, rich tables, pyspark or engine modules
that use them); each command imports what it needs when it runs. tests/test_startup.py keeps it so.
"""
from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from rmqtool import __version__, cli, examples
from rmqtool.commands import clean, demo, dump, inspect, put, query, recover, reindex, tiered, tiered_index
from rmqtool.commands import consumers, print_msg, queues

HELP = ("Offline toolkit for Apache RocketMQ broker stores: put, query by key, inspect and verify index files, "
        "dump the commit log, recover, clean and rebuild indexes, byte-compatible with the broker.")

# Every command, by name; each module is a thin layer over one engine entry point. The examples at the end of each
# command's --help come from rmqtool/examples.py (one place for all of them).
COMMANDS = {
    "put": put.put,
    "query-key": query.query_key,
    "get": dump.get,
    "dump-commitlog": dump.dump_commitlog,
    "inspect-index": inspect.inspect_index,
    "compact-index": tiered_index.compact_index,
    "recover": recover.recover,
    "clean": clean.clean,
    "spark-reindex": reindex.spark_reindex_cmd,
    "demo": demo.demo,
    "print-msg": print_msg.print_msg,
    "queues": queues.queues,
    "dump-cq": queues.dump_cq,
    "consumers": consumers.consumers,
    "delays": consumers.delays,
}
GROUPS = {"tiered": tiered.app}


def _version(value: bool) -> None:
    if value:
        print(f"rmqtool {__version__}")
        raise typer.Exit()


def _main(
    ctx: typer.Context,
    version: Annotated[Optional[bool], typer.Option("--version", "-V", callback=_version, is_eager=True,
                                                    help="Print the version and exit.")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
) -> None:
    cli.state["debug"] = debug
    _help_when_bare(ctx)


def _help_when_bare(ctx: typer.Context) -> None:
    """`rmqtool` (or `rmqtool tiered`) alone: print the help and exit 0."""
    if ctx.invoked_subcommand is None and not ctx.resilient_parsing:
        print(ctx.get_help())
        raise typer.Exit(0)


def build(names=None) -> typer.Typer:
    """The application with the commands `names` (default: all). main() builds only the command it runs: typer
    turns every command's signature into click options when the app is called, ~3 ms per command."""
    names = list(COMMANDS) + list(GROUPS) if names is None else names
    a = typer.Typer(
        name="rmqtool", help=HELP,
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
            a.command(name, epilog=examples.epilog(name))(COMMANDS[name])
        else:
            a.add_typer(GROUPS[name], name=name, epilog=examples.epilog(name))
    return a


for _info in tiered.app.registered_commands:
    _info.epilog = examples.epilog(f"tiered {_info.name}")
tiered.app.info.no_args_is_help = False
tiered.app.callback(invoke_without_command=True)(_help_when_bare)

app = build()


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

    name = None if any(k.endswith("_COMPLETE") for k in os.environ) else _command_named(sys.argv[1:])
    if name in NEEDS_ALL_COMMANDS:
        name = None
    try:
        (build([name]) if name else app)(prog_name="rmqtool")
    except BrokenPipeError:
        _closed_pipe()


def _closed_pipe() -> None:
    """The reader of stdout went away (`| head -1`): end quietly with status 1 (as click does when it meets the closed pipe first).

    stdout is pointed at /dev/null first, so the interpreter's final flush of what is still buffered cannot
    fail again and print "Exception ignored ... BrokenPipeError" on stderr.
    """
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.exit(1)
