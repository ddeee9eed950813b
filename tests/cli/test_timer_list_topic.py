"""timer list --topic: a topic that neither the store (consume queues, topics.json) nor any timer message (its
REAL_TOPIC) names is the output contract's unknown topic (exit 2, one line), as in every other read command; a
topic only timer messages name is an answer."""
from __future__ import annotations

import json
import time

from helpers import assert_one_line_error, jlines, make_timer_store, run, said


def test_timer_list_topic_known_and_unknown(tmp_path):
    now = int(time.time() * 1000)
    conf, _ = make_timer_store(tmp_path / "s", 5, fire_base=now + 3_600_000, write_ms=now, read_ms=now,
                               topic="OnlyTimersName")
    r = run(["timer", "list", "-c", conf, "-t", "OnlyTimersName", "--json"])   # named by the timer messages only
    assert r.exit_code == 0, r.output
    rows = jlines(r)
    assert len(rows) == 5 and {m["topic"] for m in rows} == {"OnlyTimersName"}
    r = run(["timer", "list", "-c", conf, "-t", "rmq_sys_wheel_timer", "--json"])   # in the store, no timer for it
    assert r.exit_code == 0 and r.stdout == "" and [n["total"] for n in said(r, "no-message")] == [5]  # 5 for others
    r = run(["timer", "list", "-c", conf, "-t", "NoSuchTopic", "--json"])
    assert_one_line_error(r, code=2, contains="'NoSuchTopic'")
    assert "rmq_sys_wheel_timer" in r.stderr and r.stdout == ""
    r = run(["timer", "list", "-c", conf, "--json"])   # no --topic: every pending message
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 5
    assert all(json.loads(x)["topic"] == "OnlyTimersName" for x in r.stdout.splitlines())
