"""Help that teaches (issue 14 item 10): every command's --help ends with real examples whose options exist."""
from __future__ import annotations

import shlex

import pytest

from helpers import run


def leaf_commands():
    """(name, click command) of every listed command and subcommand, as registered by rmqtool.app (the hidden old
    spellings have no examples: tests/cli/test_tiered_index_cli.py runs them)."""
    import typer.main

    from rmqtool.app import app

    out = []

    def walk(cmd, prefix):
        if getattr(cmd, "hidden", False):
            return
        out.append((" ".join(prefix), cmd))
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, prefix + [name])

    root = typer.main.get_command(app)
    for name, cmd in root.commands.items():
        walk(cmd, [name])
    return out


COMMANDS = leaf_commands()


def example_args(line: str) -> list[str]:
    """The arguments of one example after `rmqtool <command...>`, up to a pipe or a redirection."""
    words = shlex.split(line)
    for stop in ("|", ">"):
        if stop in words:
            words = words[:words.index(stop)]
    assert words[0] == "rmqtool", line
    return words[1:]


def test_every_command_has_two_or_three_examples():
    from rmqtool.examples import EXAMPLES

    names = {name for name, _ in COMMANDS}
    assert names == set(EXAMPLES), (names ^ set(EXAMPLES))
    for name in names:
        assert 2 <= len(EXAMPLES[name]) <= 3, name


@pytest.mark.parametrize("name,cmd", COMMANDS, ids=[n for n, _ in COMMANDS])
def test_examples_parse_with_the_commands_own_parser(name, cmd):
    """Each example names this command (or, for a group, one of its subcommands) and only options it has."""
    from rmqtool.examples import EXAMPLES

    for line in EXAMPLES[name]:
        args = example_args(line)
        words = name.split()
        assert args[:len(words)] == words, line
        args, target = args[len(words):], cmd
        if getattr(cmd, "commands", None):  # a group: the example runs one of its subcommands
            target = cmd.commands[args[0]]
            args = args[1:]
        ctx = target.make_context(name, [], resilient_parsing=True)
        parser = target.make_parser(ctx)
        opts, rest, _order = parser.parse_args(args)  # NoSuchOption for an option the command lacks
        known = {p.name for p in target.params}
        assert set(opts) <= known, (line, set(opts) - known)
        positional = [p for p in target.params if getattr(p, "param_type_name", "") == "argument"]
        assert len(rest) <= len(positional), (line, rest)


@pytest.mark.parametrize("name", [n for n, _ in COMMANDS])
def test_help_ends_with_the_examples(name):
    from rmqtool.examples import EXAMPLES, joined

    r = run([*name.split(), "--help"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.rstrip().splitlines()
    tail = lines[lines.index("  Examples:") + 2:]
    assert joined(tail) == EXAMPLES[name]


@pytest.mark.parametrize("name", [n for n, _ in COMMANDS])
def test_every_help_line_fits_80_columns_examples_included(name):
    """docs/output-contract.md: text within 80 columns; a long example is continued with a backslash."""
    r = run([*name.split(), "--help"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert [ln for ln in r.stdout.splitlines() if len(ln) > 80] == []
    assert "Examples:" in r.stdout


def test_a_long_example_is_cut_between_words_never_inside_quotes():
    from rmqtool.examples import example_lines, joined

    line = "rmqtool doctor -c /opt/rocketmq/conf/broker.conf --json | jq -r '.findings[] | select(.severity == 1)'"
    out = example_lines(line, 40)
    assert len(out) > 2 and all(ln.endswith(" \\") for ln in out[:-1]) and not out[-1].endswith("\\")
    assert any(ln.strip() == "'.findings[] | select(.severity == 1)'" for ln in out)   # wider than 40: alone
    assert joined(out) == [line]
    assert shlex.split(" ".join(ln.rstrip(" \\") for ln in out)) == shlex.split(line)


def test_bare_rmqtool_shows_help_and_exits_0():
    r = run([])
    assert r.exit_code == 0, r.output
    assert "Usage: rmqtool" in r.stdout and "query-key" in r.stdout
    r = run(["tiered"])
    assert r.exit_code == 0, r.output
    assert "rebuild-metadata" in r.stdout


def test_examples_run_on_a_store_written_by_put(tmp_path):
    """The read-only examples of the store commands run as written on a store written by put (~/store -> it)."""
    from helpers import SMALL, put_jsonl
    from rmqtool.examples import EXAMPLES

    store = tmp_path / "store"
    put_jsonl(store, [{"topic": "TopicTest", "keys": "order-1 user-7", "tags": "TagA", "body": f"m{i}",
                       "queueId": i % 4} for i in range(8)])
    geometry = ["--hash-slots", "16", "--max-index", "64"]
    runnable = {"query-key": [0, 1], "inspect-index": [0, 2], "queues": [0, 1], "dump-cq": [0],
                "dump-commitlog": [0], "get": [0], "print-msg": [0], "recover": [0], "clean": [0]}
    for name, which in runnable.items():
        for i in which:
            args = [a.replace("~/store", str(store)) for a in example_args(EXAMPLES[name][i])]
            if name in ("query-key", "inspect-index"):
                args += geometry
            elif name in ("recover", "clean"):
                args += SMALL
            r = run(args)
            assert r.exit_code == 0, (args, r.output)
            assert r.stdout.strip(), args
