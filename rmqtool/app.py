"""The typer application: global options, error handling, command registration."""
from __future__ import annotations

import functools
import sys
from typing import Annotated, Optional

import typer

from engine.errors import StoreError
from rmqtool import __version__, render

app = typer.Typer(
    name="rmqtool",
    help="Offline toolkit for Apache RocketMQ broker stores: put, query by key, inspect and verify index files, "
         "dump the commit log, recover, clean and rebuild indexes, byte-compatible with the broker.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_state = {"debug": False}


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
    _state["debug"] = debug
    render.reset_consoles()


def fail(message: str, code: int = 2) -> None:
    render.reset_consoles()
    render.err.print(f"error: {message}", markup=False, soft_wrap=True)
    raise typer.Exit(code)


def command(name: str, **kw):
    """Register a command whose expected failures become one line on stderr and a non-zero exit."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            render.reset_consoles()
            try:
                return fn(*args, **kwargs)
            except typer.Exit:
                raise
            except StoreError as e:
                if _state["debug"]:
                    raise
                fail(str(e), e.exit_code)
            except (OSError, ValueError, OverflowError, MemoryError) as e:
                if _state["debug"]:
                    raise
                msg = f"{e.strerror}: {e.filename}" if isinstance(e, OSError) and e.filename else str(e)
                fail(msg or type(e).__name__, 2)
            except KeyboardInterrupt:
                fail("interrupted", 130)
        return app.command(name, **kw)(wrapper)
    return deco


def _register() -> None:
    # Each module in rmqtool/commands registers its commands with @command on import.
    import importlib
    import pkgutil

    import rmqtool.commands as pkg

    for m in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        importlib.import_module(f"rmqtool.commands.{m.name}")


_register()


def main() -> None:
    try:
        app(prog_name="rmqtool")
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(1)
