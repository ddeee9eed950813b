"""rmqtool repair timer: rebuild the timer store from its timer log: timer-log files of the wrong length padded or cut
(misnamed ones moved out), every unit's prevPos relinked as the enqueue links it (cycles and broken chains gone),
the wheel written anew, a missing or torn timercheck rewritten, unloadable timermetrics removed."""
from __future__ import annotations

from rmqtool.cli import handles_errors
from rmqtool.commands.repair import DryRunOpt, show_plan
from rmqtool.options import GEOMETRY, STORE, JsonOpt, QuietOpt, StoreOptions, store_options


@handles_errors
@store_options(STORE, GEOMETRY)
def timer_cmd(
    opts: StoreOptions,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Rebuild the timer store from its timer log: timer-log files of the wrong length padded or cut (misnamed
    ones moved out), every unit's prevPos relinked as the enqueue links it (cycles and broken chains gone), the
    wheel written anew, a missing or torn timercheck rewritten, unloadable timermetrics removed."""
    from engine.commands.repair import timer as repair_timer

    cfg = opts.settle()
    show_plan(repair_timer(cfg, dry_run), dry_run, json_out)
