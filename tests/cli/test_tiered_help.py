"""The `tiered` command group: help everywhere (scripts/regen.py documents the group, not its subcommands)."""
from __future__ import annotations

import typer.main

from helpers import run

SUBCOMMANDS = {"queues", "segments", "get", "offset-by-time", "dump-cq", "verify", "dispatch", "clean",
               "rebuild-metadata", "query-key", "inspect-index", "compact-index", "reindex"}
TIER_OPTIONS = {"--tiered-store-path", "--metadata", "--cluster-name", "--broker-name"}
# Commands that do not read a tier: the options of it they take (defined once in rmqtool.options).
OWN_OPTIONS = {"rebuild-metadata": {"--tiered-store-path", "--cluster-name", "--broker-name"},
               "compact-index": {"--hash-slots", "--max-index"},
               "reindex": {"--metadata", "--cluster-name", "--broker-name", "--hash-slots", "--max-index"}}


def test_every_tiered_command_and_option_has_help():
    from rmqtool.app import app
    group = typer.main.get_command(app).commands["tiered"]
    assert set(group.commands) == SUBCOMMANDS
    for name, cmd in group.commands.items():
        assert (cmd.help or "").strip(), name
        for p in cmd.params:
            assert (getattr(p, "help", None) or "").strip(), f"tiered {name} {p.name} has no help text"
        r = run(["tiered", name, "--help"])
        assert r.exit_code == 0 and "Usage" in r.stdout
        opts = {o for p in cmd.params for o in p.opts}
        assert OWN_OPTIONS.get(name, TIER_OPTIONS) <= opts, name
        assert "--json" in opts
    bare = run(["tiered"])  # no subcommand: the group's help, as bare `rmqtool` gives its own
    assert bare.exit_code == 0 and bare.stdout.startswith("Usage: rmqtool tiered") and "queues" in bare.stdout
