"""rmqtool demo: build a sample store and run the main jobs on it (the README's first command)."""
from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path
from typing import Annotated

import typer

from rmqtool import render
from rmqtool.cli import handles_errors
from rmqtool.options import values

SAMPLE_CONF = """# rmqtool sample store: small geometry so index files roll
storePathRootDir={root}
mappedFileSizeCommitLog=1048576
mappedFileSizeConsumeQueue=6000
maxHashSlotNum=1000
maxIndexNum=4000
"""


def sample_messages(n: int, start_ms: int, seed: int = 7):
    rnd = random.Random(seed)
    topics = ["OrderTopic", "PaymentTopic", "%RETRY%audit-group"]  # a retry topic too: the broker writes those
    for i in range(n):
        topic = topics[i % len(topics)]
        user = rnd.randrange(200)
        yield {
            "topic": topic,
            "queueId": i % 4,
            "tags": rnd.choice(["TagA", "TagB", "TagC"]),
            "keys": [f"order-{i}", f"user-{user}"],
            "body": json.dumps({"order": i, "user": user, "amount": rnd.randrange(1, 10_000)}),
            "storeTimestamp": start_ms + i * 250,
            "bornTimestamp": start_ms + i * 250 - 3,
        }


def _compare_rebuilt(directory: Path) -> None:
    """The rebuilt index files against the ones `put` wrote incrementally (kept as index.bak-*)."""
    from engine.broker.layout import list_index_files

    backups = sorted(directory.glob("index.bak-*"))
    if not backups:
        return
    old = [p.read_bytes() for p in list_index_files(backups[-1])]
    new = [p.read_bytes() for p in list_index_files(directory / "index")]
    same = old == new
    render.err.rule("[bold]7. compare the rebuilt index with the one put wrote[/bold]")
    render.out.print(f"{len(new)} rebuilt index file(s), byte-identical to put's: {'yes' if same else 'NO'}",
                     markup=False)
    if not same:
        from engine.errors import InvalidArgumentError

        raise InvalidArgumentError("the rebuilt index differs from the incrementally built one")


def _sample(directory: Path, messages: int) -> tuple[Path, Path, int]:
    """A fresh sample folder (replacing only a previous sample): its broker.conf, a JSONL file of `messages`
    messages and their first store time."""
    from engine.errors import InvalidArgumentError

    marker = directory / ".rmqtool-sample"
    if directory.exists():
        if not marker.exists():
            raise InvalidArgumentError(f"{directory} exists and is not an rmqtool sample store; pick another path")
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    marker.write_text("created by rmqtool demo\n")
    conf = directory / "broker.conf"
    conf.write_text(SAMPLE_CONF.format(root=directory))
    jsonl = directory / "sample-messages.jsonl"
    start = int(time.time() * 1000) - messages * 250
    with open(jsonl, "w", encoding="utf-8") as f:
        for m in sample_messages(messages, start):
            f.write(json.dumps(m, ensure_ascii=False) + "\n")
    return conf, jsonl, start


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


def _check_master(master: str) -> None:
    import importlib.util

    from engine.errors import InvalidArgumentError
    from engine.exec.runners import INLINE, master_problem

    why = master_problem(master)
    if why:
        raise InvalidArgumentError(why)
    if master != INLINE and importlib.util.find_spec("pyspark") is None:
        raise InvalidArgumentError(f"--master {master} needs pyspark, which is not installed: use --master inline "
                                   "(no JVM) or --master none (no reindex step)")


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
    if master != "none":  # before anything is written: a master the reindex step cannot run on
        _check_master(master)
    directory = directory.resolve()
    conf, jsonl, start = _sample(directory, messages)
    step = _stepper(ctx.find_root().command)  # the rmqtool app itself, without importing it
    c = ["--broker-conf", str(conf)]
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
    render.note(f"sample store: {directory} (use --broker-conf {conf} with any command)")
