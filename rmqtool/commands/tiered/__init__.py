"""rmqtool tiered ...: the RocketMQ 5 tiered flat store (PosixFileSegment + DefaultMetadataStore), offline.

Each command parses its options, calls one engine function (engine.commands.tiered) and renders the answer. Typer
command functions take one parameter per option; the tier's and the store's options come as one StoreOptions
(rmqtool.options.store_options)."""
from __future__ import annotations

import contextlib
from typing import Annotated, Optional

import typer

from engine.views.times import local_time
from rmqtool import render, times


app = typer.Typer(name="tiered", no_args_is_help=True, rich_markup_mode=None, help="The RocketMQ 5 tiered flat store (tieredStoreFilePath "
                  "and tieredStoreMetadata.json) and its index: inspect, read, query by key, verify, tier out, "
                  "retention, metadata repair, index rebuild.")


def topic_not_path(value):
    """-t is --topic in every command; it used to be --tiered-store-path here: a directory given to it is refused,
    so an old script fails loudly instead of filtering on a topic that does not exist."""
    import os

    for v in (value if isinstance(value, list) else [value]):
        if v is not None and "/" in v and os.path.isdir(v):
            from rmqtool.cli import fail

            fail(f"-t {v}: -t means --topic in every command; give the tiered store path with "
                 "-T/--tiered-store-path")
    return value


TopicOpt = Annotated[str, typer.Option("--topic", "-t", help="Topic.", callback=topic_not_path)]
TopicFilterOpt = Annotated[Optional[str], typer.Option("--topic", "-t", help="Only this topic.",
                                                       callback=topic_not_path)]
QueueIdOpt = Annotated[int, typer.Option("--queue-id", "-q", help="Queue id.")]


@contextlib.contextmanager
def opened(opts, **overrides):
    """The tier the command's options (rmqtool.options.StoreOptions) name, opened read-only; its warnings after."""
    from engine.commands.tiered import open_tier

    st = open_tier(opts.tier(), **overrides)
    try:
        yield st
    finally:
        st.close()
        for w in dict.fromkeys(st.warnings):
            render.problem(f"warning: {w}")


def note(msg: str) -> None:
    """A message on stderr, one line whatever the terminal width."""
    render.note(msg)


def emit_rows(json_out: bool, title: str, rows: list[dict], columns: list[str], fmt=None) -> None:
    if json_out:
        for r in rows:
            render.emit_json(r)
        return
    fmt = fmt or (lambda r, c: r.get(c))
    render.table(title, columns, [[fmt(r, c) for c in columns] for r in rows])


def time_text(v) -> str:
    return "" if v is None else ("empty" if v == 2**63 - 1 else local_time(v))


def java_time(text: str, option: str) -> int:
    """A time the broker's API takes as a Java long: any integer as it is (flat stores written by tests and tools
    carry synthetic store times), else the one time grammar (rmqtool.times)."""
    t = text.strip()
    if t.lstrip("+-").isdigit():
        v = int(t)
        if not -(2**63) <= v < 2**63:
            from engine.errors import InvalidArgumentError

            raise InvalidArgumentError(f"{option} {text} is not a Java long")
        return v
    return times.parse_time(t, option)


def required(option: str, value):
    """The value of an option the command needs (typer's own `required` would be a usage error, not this line)."""
    from engine.errors import InvalidArgumentError

    if value is None:
        raise InvalidArgumentError(f"missing option {option}")
    return value


LONG_MAX = 2**63 - 1

NewTieredGeometryOpt = Annotated[bool, typer.Option(
    "--new-geometry", help="Write the geometry --hash-slots and --max-index (or broker.conf) give even though the "
    "store's tiered index files have another one. Without it a configured geometry those files do not have is "
    "refused.")]


def print_notes(notes: list[str]) -> None:
    for n in dict.fromkeys(notes):
        render.note(f"note: {n}", getattr(n, "kind", None), **getattr(n, "fields", {}))  # a Note keeps its kind
