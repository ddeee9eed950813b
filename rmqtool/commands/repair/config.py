"""rmqtool repair config: repair one config/*.json file the broker loads at start-up: from its .bak, from the store, or
by accepting the empty table. The file replaced or removed is kept in the quarantine."""
from __future__ import annotations

from typing import Annotated

import typer

from rmqtool.cli import handles_errors
from rmqtool.commands.repair import DryRunOpt, show_plan
from rmqtool.options import GEOMETRY, STORE, JsonOpt, QuietOpt, StoreOptions, store_options


@handles_errors
@store_options(STORE, GEOMETRY)
def config_cmd(
    name: Annotated[str, typer.Argument(help="The config file, as named under config/ (topics.json, "
                                        "consumerOffset.json, subscriptionGroup.json, delayOffset.json, ..., and the tiered store's "
                                        "tieredStoreMetadata.json).")],
    opts: StoreOptions = StoreOptions(),
    from_bak: Annotated[bool, typer.Option("--from-bak", help="Write the file as a copy of its readable .bak "
                                           "(what the broker would load).")] = False,
    from_store: Annotated[bool, typer.Option("--from-store", help="Rebuild it from the store: topics.json (the "
                                             "topics readable in it or its .bak, plus one per consume-queue "
                                             "directory), delayOffset.json (each delay level at its first "
                                             "message not yet delivered), subscriptionGroup.json (the groups the "
                                             "store names, with default settings).")] = False,
    empty: Annotated[bool, typer.Option("--empty", help="Move the file and its .bak to the quarantine: the broker "
                                        "starts with an empty table (what it does silently with a torn file and "
                                        "an empty .bak).")] = False,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Repair one config/*.json file the broker loads at start-up: from its .bak, from the store, or by accepting
    the empty table. The file replaced or removed is kept in the quarantine."""
    from engine.commands.repair import config as repair_config, config_source

    source = config_source(from_bak, from_store, empty)
    cfg = opts.settle()
    show_plan(repair_config(cfg, name, source, dry_run), dry_run, json_out)
