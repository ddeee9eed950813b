"""What the commands that run a whole-store job share (spark-reindex, tiered reindex): Spark --conf pairs, the run
with a progress bar per phase on stderr, then the job's repairs and warnings on stderr and its result on stdout."""
from __future__ import annotations

from rmqtool import render


def spark_conf_pairs(pairs) -> dict:
    out = {}
    for p in pairs or []:
        key, sep, value = p.partition("=")
        if not sep or not key.strip():
            from engine.errors import InvalidArgumentError

            raise InvalidArgumentError(f"--conf {p!r}: expected KEY=VALUE, e.g. spark.executor.memory=4g")
        out[key.strip()] = value
    return out


def run_job(job, labels: dict[str, str], json_out: bool, render_fn, title: str = "spark-reindex",
            as_json=None) -> None:
    """Run a job with a progress bar per phase on stderr, then warnings on stderr and the result on stdout
    (`as_json(result)` with --json, default its as_dict())."""
    with render.progress(None, title) as bar:
        tasks: dict[str, int] = {}

        def progress(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(labels.get(phase, phase), total=total)
            bar.update(tasks[phase], completed=done, total=total)

        result = job(progress)
    for r in result.repairs:  # it changed the store: said whatever --quiet says
        render.problem(f"repaired: {r}")
    for a in result.anomalies:
        render.problem(f"warning: {a}")
    if json_out:
        render.emit_json(as_json(result) if as_json else result.as_dict())
    else:
        render_fn(result)
