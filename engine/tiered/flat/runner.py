"""The one place the tier-out touches a job runner: run the per-queue dispatch function on every queue, in this
process or on Spark (one partition per queue). Everything else in engine.tiered.flat is runner-free.

Uses engine.exec.runners through its public API only: `open_runner(master)`, `runner.master_used`,
`runner.scan(items, progress, scan_fn=...)` (items carry `.index`; scan_fn returns an object with `.index` and
`.summary()`, and scan returns the summaries), and `runner.close(failed=...)`.
"""
from __future__ import annotations

from engine.progress import Progress
from engine.tiered.flat.queue_dispatch import QueueTask, dispatch_queue


def run_queue_tasks(master: str, tasks: list[QueueTask], progress: Progress
                    ) -> tuple[list[dict], str]:
    """QueueResult summaries (in task order) and the master actually used."""
    from engine.exec.runners import open_runner

    if not tasks:
        return [], master
    runner = open_runner(master)
    used = runner.master_used
    try:
        summaries = runner.scan(tasks, lambda phase, done, total: progress("dispatch", done, total),
                                scan_fn=dispatch_queue)
    except BaseException:
        runner.close(failed=True)
        raise
    runner.close()
    return sorted(summaries, key=lambda s: s["index"]), used
