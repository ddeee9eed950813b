"""The typer application: global options and the explicit list of commands."""
from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from rmqtool import __version__, cli
from rmqtool.commands import clean, demo, dump, inspect, put, query, recover, reindex, tiered, tiered_index
from rmqtool.commands import consumers, print_msg, queues

app = typer.Typer(
    name="rmqtool",
    help="Offline toolkit for Apache RocketMQ broker stores: put, query by key, inspect and verify index files, "
         "dump the commit log, recover, clean and rebuild indexes, byte-compatible with the broker.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"rmqtool {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[Optional[bool], typer.Option("--version", "-V", callback=_version, is_eager=True,
                                                    help="Print the version and exit.")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
) -> None:
    cli.state["debug"] = debug


# Every command, by name; each module is a thin layer over one engine entry point.
app.command("put")(put.put)
app.command("query-key")(query.query_key)
app.command("get")(dump.get)
app.command("dump-commitlog")(dump.dump_commitlog)
app.command("inspect-index")(inspect.inspect_index)
app.command("compact-index")(tiered_index.compact_index)
app.command("recover")(recover.recover)
app.command("clean")(clean.clean)
app.command("spark-reindex")(reindex.spark_reindex_cmd)
app.command("demo")(demo.demo)
app.command("print-msg", epilog=print_msg.EXAMPLES)(print_msg.print_msg)
app.command("queues", epilog=queues.QUEUES_EXAMPLES)(queues.queues)
app.command("dump-cq", epilog=queues.DUMP_CQ_EXAMPLES)(queues.dump_cq)
app.command("consumers", epilog=consumers.CONSUMERS_EXAMPLES)(consumers.consumers)
app.command("delays", epilog=consumers.DELAYS_EXAMPLES)(consumers.delays)
app.add_typer(tiered.app, name="tiered")


def main() -> None:
    try:
        app(prog_name="rmqtool")
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
