"""What every command shares at run time: expected failures become one line on stderr and an exit code."""
from __future__ import annotations

import functools

import typer

state = {"debug": False}


def fail(message: str, code: int = 2) -> None:
    from rmqtool import render

    render.note(f"error: {message}")  # one plain line, never wrapped
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


def handles_errors(fn):
    """Wrap a command: engine errors (StoreError and its exit code), OS errors and bad values become
    `error: <one line>` on stderr and a non-zero exit; --debug shows the traceback instead."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from engine.errors import StoreError
        from rmqtool import render

        render.forget_consoles()
        render.set_quiet(False)
        kwargs = {k: _expand(v) for k, v in kwargs.items()}
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except BrokenPipeError:
            raise  # the reader went away (`| head`): rmqtool.app.main ends quietly
        except StoreError as e:
            if state["debug"]:
                raise
            fail(str(e), e.exit_code)
        except (OSError, ValueError, OverflowError, MemoryError) as e:
            if state["debug"]:
                raise
            msg = f"{e.strerror}: {e.filename}" if isinstance(e, OSError) and e.filename else str(e)
            fail(msg or type(e).__name__, 2)
        except KeyboardInterrupt:
            fail("interrupted", 130)
    return wrapper


def deprecated(old: str, new: str) -> None:
    """The one-line note an old spelling prints before it runs (kept for one release, hidden from help)."""
    from rmqtool import render

    render.note(f"warning: `rmqtool {old}` is deprecated and goes away in the next release; use `rmqtool {new}`")
