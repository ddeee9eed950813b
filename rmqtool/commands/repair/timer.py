"""rmqtool repair timer: rebuild the timer store from its timer log: timer-log files of the wrong length padded or cut
(misnamed ones moved out), every unit's prevPos relinked as the enqueue links it (cycles and broken chains gone),
the wheel written anew, a missing or torn timercheck rewritten, unloadable timermetrics removed."""
from __future__ import annotations

from rmqtool.cli import handles_errors
from rmqtool.commands.repair import DryRunOpt, show_plan
from rmqtool.options import (BrokerConfOpt, CommitLogSizeOpt, CqSizeOpt, HashSlotsOpt, JsonOpt, MaxIndexOpt, QuietOpt,
                             StoreOpt, build_config)


@handles_errors
def timer_cmd(
    store: StoreOpt = None,
    broker_conf: BrokerConfOpt = None,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    hash_slots: HashSlotsOpt = None,
    max_index: MaxIndexOpt = None,
    commitlog_file_size: CommitLogSizeOpt = None,
    cq_file_size: CqSizeOpt = None,
) -> None:
    """Rebuild the timer store from its timer log: timer-log files of the wrong length padded or cut (misnamed
    ones moved out), every unit's prevPos relinked as the enqueue links it (cycles and broken chains gone), the
    wheel written anew, a missing or torn timercheck rewritten, unloadable timermetrics removed."""
    from engine.commands.repair import timer as repair_timer

    cfg = build_config(store, broker_conf, hash_slots, max_index, commitlog_file_size, cq_file_size)
    show_plan(repair_timer(cfg, dry_run), dry_run, json_out)
