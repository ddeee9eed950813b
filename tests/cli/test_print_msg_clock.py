"""print-msg when a queue's store times go back (a broker's clock stepped back, issue 23 item 5): every message
stored in the range is printed, whatever the binary search over the queue assumes, and a note names the queue.
Stores are written through the CLI with explicit store timestamps (put --from-jsonl storeTimestamp)."""
from __future__ import annotations

import json

import shutil
import struct

import pytest

from engine.broker.store import MessageStore
from engine.broker.consumequeue.timerange import scan_time_range
from helpers import cfg_for, jlines, put_jsonl, run, said, said_kinds

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
    notes = said(r, "store-times-go-back")
    assert [(n["topic"], n["queueId"], n["stepsBack"]) for n in notes] == [("T", 0, 1)]   # not queue 1
    quiet = print_msg(store, 10_500, 11_500, "-Q")
    assert quiet.exit_code == 0 and quiet.stderr == "" and quiet.stdout == r.stdout


def test_monotonic_queues_say_nothing(tmp_path):
    store = tmp_path / "store"
    put_jsonl(store, [{"topic": "T", "queueId": 0, "body": str(i), "storeTimestamp": T0 + 1000 * i}
                      for i in range(10)])
    r = print_msg(store, 2_000, 4_000)
    assert r.exit_code == 0 and said(r, "store-times-go-back") == [] and said_kinds(r) == ["searched"]
    assert [json.loads(x)["queueOffset"] for x in r.stdout.splitlines()] == [2, 3, 4]


def searched(store, lo: int, hi: int, **kw):
    """The engine's plan and answer: (queue offsets found, Searched.as_dict())."""
    with MessageStore(cfg_for(store)) as st:
        scan = scan_time_range(st, "T", T0 + lo, T0 + hi, **kw)
        got = [(f.queue_id, f.queue_offset) for f in scan]
        return got, scan.searched.as_dict()


RANGES = [(3_000, 5_000), (2_500, 4_600), (4_000, 11_500), (0, 20_000), (12_500, 13_500), (10_500, 11_500),
          (11_999, 12_000), (5_000, 5_000)]


def test_the_index_search_and_the_log_scan_give_the_same_answer(tmp_path):
    store = clock_store(tmp_path)
    for lo, hi in RANGES:
        fast, how = searched(store, lo, hi)
        full, how_full = searched(store, lo, hi, scan_log=True)
        assert set(fast) == set(full) == expected(lo, hi), (lo, hi)
        assert how["indexCovered"] == how["units"] == 12 and how["indexDisagrees"] == 0
        assert how_full["scanLog"] and how_full["headsRead"] == 12 and how_full["indexCovered"] == 0
        assert how["clockSteps"] == how_full["clockSteps"] == 1
        cli = print_msg(store, lo, hi, "--scan-log")
        assert cli.exit_code == 0 and cli.stdout == print_msg(store, lo, hi).stdout
    r = print_msg(store, 0, 20_000)
    (line,) = said(r, "searched")
    assert (line["queues"], line["units"]) == (2, 12)


def _no_index(store):
    shutil.rmtree(store / "index")
    (store / "index").mkdir()


def test_without_index_files_every_store_time_is_read_from_the_log_and_said(tmp_path):
    store = clock_store(tmp_path)
    _no_index(store)
    for lo, hi in RANGES:
        got, how = searched(store, lo, hi)
        assert set(got) == expected(lo, hi)
        assert how["indexCovered"] == 0 and how["headsRead"] == how["units"] == 12
    r = print_msg(store, 10_500, 11_500)
    assert r.exit_code == 0 and [(m["queueId"], m["queueOffset"]) for m in jlines(r)] == [(0, 1)]
    assert [n["units"] for n in said(r, "units-without-index-item")] == [12]


def test_an_index_that_lies_about_a_time_is_caught_and_the_log_decides(tmp_path):
    """An index item's timeDiff moved 100 s on: the sampled heads disagree, the queue is read from the log."""
    store = clock_store(tmp_path)
    (f,) = sorted((store / "index").iterdir())
    data = bytearray(f.read_bytes())
    with MessageStore(cfg_for(store)) as st:
        base = st.index.files[0].items_base
        count = st.index.files[0].item_count
    assert count >= 12
    for n in range(1, count + 1):   # every item: whichever ones the sample picks
        pos = base + 20 * n + 12
        struct.pack_into(">i", data, pos, struct.unpack_from(">i", data, pos)[0] + 100)
    f.write_bytes(bytes(data))
    for lo, hi in RANGES:
        got, how = searched(store, lo, hi)
        assert set(got) == expected(lo, hi), (lo, hi)
        assert how["indexDisagrees"] > 0
    r = print_msg(store, 3_000, 5_000)
    assert [n["times"] > 0 for n in said(r, "index-disagrees")] == [True]


@pytest.fixture(scope="module")
def steady_store(tmp_path_factory):
    """4 queues, 1,600 messages of 2 KiB stored a second apart, times only grow (some 3.3 MiB of log). A second
    apart: the tests' index files hold 63 items, and an item's time is known to the second only after its file's
    first second (an earlier time clamps to timeDiff 0, format 5.6)."""
    store = tmp_path_factory.mktemp("steady") / "store"
    put_jsonl(store, [{"topic": "T", "queueId": i % 4, "body": "x" * 2048, "storeTimestamp": T0 + 1000 * i}
                      for i in range(1600)])
    return store


def test_a_store_without_clock_steps_reads_a_small_fraction_of_the_log(steady_store):
    got, how = searched(steady_store, 500_000, 599_000)     # 100 of 1,600 messages
    assert len(got) == 100 and how["clockSteps"] == 0 and how["indexCovered"] == how["units"] == 1600
    print(how)
    assert how["logBytesRead"] < 0.12 * how["logBytes"], how
    full, how_full = searched(steady_store, 500_000, 599_000, scan_log=True)
    assert full == got and how_full["logBytesRead"] > 0.9 * how_full["logBytes"], how_full
