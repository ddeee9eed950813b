"""rmqtool demo: build a sample store and run the main jobs on it (the README's first command)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.options import StoreOptions, values


def _compare_rebuilt(directory: Path) -> None:
    """The rebuilt index files against the ones `put` wrote incrementally (kept as index.bak-*)."""
    from engine.commands.demo import compare_rebuilt

    compared = compare_rebuilt(directory)
    if compared is None:
        return
    count, same = compared
    render.err.rule("[bold]7. compare the rebuilt index with the one put wrote[/bold]")
    render.out.print(f"{count} rebuilt index file(s), byte-identical to put's: {'yes' if same else 'NO'}",
                     markup=False)
    if not same:
        from engine.errors import InvalidArgumentError

        raise InvalidArgumentError("the rebuilt index differs from the incrementally built one")


def _stepper(root):
    """step(title, args): show the command line, run it in this process; a failed step ends the demo with its
    exit code (click returns it without standalone mode)."""
    def step(title: str, args: list[str]) -> None:
        render.err.rule(f"[bold]{title}[/bold]")
        render.err.print(f"$ rmqtool {' '.join(args)}", markup=False, highlight=False)
        try:
            code = root.main(args, prog_name="rmqtool", standalone_mode=False)
        except typer.Exit as e:
            code = e.exit_code
        except SystemExit as e:
            code = e.code
        if code:
            raise typer.Exit(code)

    return step


@handles_errors
def demo(
    ctx: typer.Context,
    directory: Annotated[Path, typer.Argument(help="Where to create the sample store (replaced if it is a "
                                              "previous sample).", file_okay=False)] = Path("sample-store"),
    messages: Annotated[int, typer.Option("--messages", "-n", help="How many messages to write.",
                                          min=1, max=1_000_000)] = 3000,
    master: Annotated[str, typer.Option("--master", help="Spark master for the reindex step ('inline' skips the "
                                        "JVM; 'none' skips the step).",
                                        autocompletion=values("local[2]", "inline", "none"))] = "local[2]",
) -> None:
    """Create a sample store, write messages with keys, query some, dump the index headers, rebuild the index."""
    from engine.commands.demo import check_master, make_sample

    if master != "none":  # before anything is written: a master the reindex step cannot run on
        check_master(master)
    directory = directory.resolve()
    conf, jsonl, start = make_sample(directory, messages)
    step = _stepper(ctx.find_root().command)  # the rmqtool app itself, without importing it
    c = StoreOptions(broker_conf=conf).args()  # every step names the sample store as the group spells it
    step(f"1. put {messages} messages", ["put", *c, "--from-jsonl", str(jsonl), "--quiet", "--create"])
    step("2. query by key (order-42, and every message of user-7 in one time window)",
         ["query-key", *c, "--topic", "OrderTopic", "--key", "order-42"])
    step("", ["query-key", *c, "--topic", "PaymentTopic", "--key", "user-7", "--begin", str(start),
              "--end", str(start + messages * 125)])
    step("3. index file headers", ["inspect-index", *c])
    step("4. verify every index item against the commit log", ["inspect-index", *c, "--verify"])
    if master != "none":
        step(f"5. rebuild the index from the commit log (Spark master {master})",
             ["spark-reindex", *c, "--master", master])
        step("6. query again on the rebuilt index", ["query-key", *c, "--topic", "OrderTopic", "--key", "order-42"])
        _compare_rebuilt(directory)
    render.note(f"sample store: {directory} (use {' '.join(c)} with any command)")
