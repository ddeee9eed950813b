"""rmqtool timer ...: the RocketMQ 5 timer store (timerwheel, timerlog/, config/timercheck, config/timermetrics).

Read-only: each command parses its options, calls one engine function (engine.commands.timer) and renders the answer."""
from __future__ import annotations

import typer


app = typer.Typer(name="timer", no_args_is_help=True, rich_markup_mode=None,
                  help="The RocketMQ 5 timer store (RIP-43: timerwheel, timerlog/, config/timercheck, "
                       "config/timermetrics): inspect it, list the pending timer messages, verify it. Read-only.")
