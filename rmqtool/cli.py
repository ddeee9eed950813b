"""What every command shares at run time: expected failures become one line on stderr and an exit code
(docs/output-contract.md): engine errors, bad option values (click's usage errors too), a closed pipe."""
from __future__ import annotations

import contextlib
import functools
import sys

import typer
from typer._click.core import Context  # typer's vendored click, as OneLineErrors.main's exceptions
from typer._click.formatting import HelpFormatter
from typer.core import TyperGroup

state = {"debug": False}

#: Exit codes of the output contract (engine.errors.StoreError subclasses carry theirs).
OK, BAD_INPUT, PARTIAL, LOCKED = 0, 2, 3, 4


def fail(message: str, code: int = BAD_INPUT) -> None:
    from rmqtool import render

    render.error_line(f"error: {message}")  # one plain line, never wrapped, whatever --quiet and --json say
    raise typer.Exit(code)


def _expand(value):
    """`~` expanded in every path option of every command (Path values, and lists of them)."""
    from pathlib import Path

    from rmqtool.options import expand_path

    if isinstance(value, Path):
        return expand_path(value)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, Path) for v in value):
        return type(value)(expand_path(v) for v in value)
    return value


def closed_pipe() -> None:
    """The reader of stdout went away (`| head -1`): point stdout at /dev/null, so that the interpreter's final
    flush of what is still buffered cannot fail again (and print "Exception ignored ... BrokenPipeError")."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


class Terminated(BaseException):
    """SIGTERM, raised in the main thread like KeyboardInterrupt is for SIGINT (exit 143)."""


_signals = {"shield": 0, "pending": None}


def _raise_for(signum: int) -> None:
    import signal

    if signum == signal.SIGTERM:
        raise Terminated()
    raise KeyboardInterrupt


def _raise_on_signal(signum, frame) -> None:
    if _signals["shield"]:
        _signals["pending"] = signum  # raised when the shielded step is done
        return
    _raise_for(signum)


@contextlib.contextmanager
def shielded():
    """A step a signal must not cut in half (an acknowledgement line on stdout): SIGINT/SIGTERM arriving inside
    it are raised once it is done."""
    _signals["shield"] += 1
    try:
        yield
    finally:
        _signals["shield"] -= 1
        pending = _signals["pending"]
        if not _signals["shield"] and pending is not None:
            _signals["pending"] = None
            _raise_for(pending)


def _stop_signals():
    """SIGINT and SIGTERM raise in the main thread (KeyboardInterrupt, Terminated) for the whole command, even when
    SIGINT came in ignored (a background job of a script): a writer then stops where it is, its `finally` blocks
    stop its helper processes, and the store is left as a crash would leave it (the abort marker says so; a
    write's files are crash-safe). Returns the handlers to put back (None: not the main thread)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    return {s: signal.signal(s, _raise_on_signal) for s in (signal.SIGINT, signal.SIGTERM)}


def _forget_workers() -> None:
    """After a command: its --workers (engine.workers.use) does not carry over to the next one run in the same
    process (tests, the shell)."""
    workers = sys.modules.get("engine.workers")  # imported only by a command that took --workers
    if workers is not None:
        workers.use(None)


def handles_errors(fn):
    """Wrap a command: engine errors (StoreError and its exit code), OS errors and bad values become
    `error: <one line>` on stderr and a non-zero exit; --debug shows the traceback instead. A command's `quiet`
    parameter (rmqtool.options.QuietOpt) silences its notes, its `json_out` (JsonOpt) prints them as JSON
    objects; a closed pipe ends it quietly with 0."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from engine.errors import StoreError
        from rmqtool import render

        render.forget_consoles()
        render.set_quiet(kwargs.get("quiet") is True)
        render.set_json(kwargs.get("json_out") is True)  # notes and warnings as JSON objects (rmqtool.notes)
        kwargs = {k: _expand(v) for k, v in kwargs.items()}
        handlers = _stop_signals()
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except BrokenPipeError:
            closed_pipe()  # the reader went away (`| head`): the answer it wanted is out
            raise typer.Exit(OK) from None
        except StoreError as e:
            if state["debug"]:
                raise
            fail(str(e), e.exit_code)
        except (OSError, ValueError, OverflowError, MemoryError) as e:
            if state["debug"]:
                raise
            msg = f"{e.strerror}: {e.filename}" if isinstance(e, OSError) and e.filename else str(e)
            fail(msg or type(e).__name__, BAD_INPUT)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except Terminated:
            fail("terminated", 143)
        finally:
            render.set_quiet(False)
            render.set_json(False)
            _forget_workers()
            if handlers:
                import signal

                for sig, h in handlers.items():
                    signal.signal(sig, h)
    return wrapper


def usage_error_line(e) -> str:
    """click's usage error (a bad number, a missing option, a file where a directory is expected, an unknown
    option or command) as the one line every other error is: `error: ... (see rmqtool CMD --help)`."""
    msg = " ".join(e.format_message().split())
    msg = msg[:1].lower() + msg[1:] if msg[:2] != msg[:2].upper() else msg
    ctx = getattr(e, "ctx", None)
    where = f" (see {ctx.command_path} --help)" if ctx is not None and ctx.command_path else ""
    return f"error: {msg.rstrip('.')}{where}"


class _HelpFormatter(HelpFormatter):
    """click's formatter, but on a narrow terminal the options column gives the help text 20 columns at least
    (click keeps it 30 wide and squeezes the text into 10, past the terminal's edge); at 80 columns unchanged."""

    def write_dl(self, rows, col_max: int = 30, col_spacing: int = 2) -> None:
        col_max = max(min(col_max, self.width - self.current_indent - col_spacing - 20), 8)
        super().write_dl(rows, col_max, col_spacing)


class HelpContext(Context):
    formatter_class = _HelpFormatter


def _with_help_context(cmd):
    if cmd is not None:
        cmd.context_class = HelpContext  # this command's own context (and its --help) formats with _HelpFormatter
    return cmd


class HelpGroup(TyperGroup):
    """A command group whose commands' --help fits a narrow terminal (_HelpFormatter)."""

    context_class = HelpContext

    def get_command(self, ctx, cmd_name):
        return _with_help_context(super().get_command(ctx, cmd_name))


def help_width() -> int | None:
    """The width --help wraps to on a terminal narrower than click's floor of 50 (COLUMNS=40: 38); None (click's
    own width) on any wider one."""
    import shutil

    cols = shutil.get_terminal_size().columns
    return max(cols - 2, 18) if cols < 52 else None


class OneLineErrors(HelpGroup):
    """The root group: click's Usage/Try/blank/Error block becomes one `error: ...` line and exit 2, as every
    other error (docs/output-contract.md); the rest is typer's main in non-standalone mode."""

    def make_context(self, info_name, args, parent=None, **extra):
        if parent is None and extra.get("terminal_width") is None and help_width() is not None:
            extra["terminal_width"] = help_width()  # the subcommands' contexts inherit it
        return super().make_context(info_name, args, parent=parent, **extra)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        from typer._click.exceptions import ClickException  # typer's vendored click
        from typer.exceptions import Abort

        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except ClickException as e:
            sys.stderr.write(usage_error_line(e) + "\n")
            sys.stderr.flush()
            sys.exit(BAD_INPUT)
        except Abort:
            sys.stderr.write("error: interrupted\n")
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else OK)
