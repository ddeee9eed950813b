"""print-msg when a queue's store times go back (a broker's clock stepped back, issue 23 item 5): every message
stored in the range is printed, whatever the binary search over the queue assumes, and a note names the queue.
Stores are written through the CLI with explicit store timestamps (put --from-jsonl storeTimestamp)."""
from __future__ import annotations

import json

from helpers import jlines, put_jsonl, run

T0 = 1_700_000_000_000
# queue 0: the clock steps back by 9 s after the third message, then catches up; queue 1: times only grow
TIMES = {0: [10_000, 11_000, 12_000, 3_000, 4_000, 5_000, 13_000, 14_000], 1: [1_000, 2_000, 4_500, 15_000]}


def clock_store(tmp_path):
    store = tmp_path / "store"
    msgs = [{"topic": "T", "queueId": q, "body": f"q{q}-{i}", "storeTimestamp": T0 + t}
            for q, ts in TIMES.items() for i, t in enumerate(ts)]
    put_jsonl(store, msgs)
    return store


def expected(lo: int, hi: int) -> set[tuple[int, int]]:
    return {(q, i) for q, ts in TIMES.items() for i, t in enumerate(ts) if lo <= t <= hi}


def print_msg(store, lo: int, hi: int, *extra):
    return run(["print-msg", "-s", store, "-t", "T", "-b", str(T0 + lo), "-e", str(T0 + hi), "--json", *extra])


def test_every_message_in_the_range_is_found_when_the_clock_stepped_back(tmp_path):
    store = clock_store(tmp_path)
    for lo, hi in [(3_000, 5_000), (2_500, 4_600), (4_000, 11_500), (0, 20_000), (12_500, 13_500), (10_500, 11_500)]:
        r = print_msg(store, lo, hi)
        assert r.exit_code == 0, r.output
        got = [(m["queueId"], m["queueOffset"]) for m in jlines(r)]
        assert set(got) == expected(lo, hi), (lo, hi)
        assert got == sorted(got)                       # queue by queue, in queue-offset order
        assert all(T0 + lo <= m["storeTimestamp"] <= T0 + hi for m in jlines(r))
    # 11 s lies where a binary search over queue 0 cannot find it (it lands after the step back)
    r = print_msg(store, 10_500, 11_500)
    assert [(m["queueId"], m["queueOffset"]) for m in jlines(r)] == [(0, 1)]
    notes = [line for line in r.stderr.splitlines() if "store times go back" in line]
    assert len(notes) == 1 and notes[0].startswith("note: T/0: ") and "at 1 place(s)" in notes[0]
    assert "1 message(s) stored in the range lie outside" in notes[0] and "T/1" not in r.stderr
    quiet = print_msg(store, 10_500, 11_500, "-Q")
    assert quiet.exit_code == 0 and quiet.stderr == "" and quiet.stdout == r.stdout


def test_monotonic_queues_say_nothing(tmp_path):
    store = tmp_path / "store"
    put_jsonl(store, [{"topic": "T", "queueId": 0, "body": str(i), "storeTimestamp": T0 + 1000 * i}
                      for i in range(10)])
    r = print_msg(store, 2_000, 4_000)
    assert r.exit_code == 0 and "go back" not in r.stderr
    assert [json.loads(x)["queueOffset"] for x in r.stdout.splitlines()] == [2, 3, 4]
