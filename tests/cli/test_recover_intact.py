"""recover on damaged stores (issue 34): every message that was intact stays reachable by key, by message id and by
queue offset afterwards, and doctor says healthy. Each test injects one fault into a small store put through the
CLI and checks through the CLI."""
from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from helpers import cli, patch_file, sample_messages

#: Segments large enough that the whole log is one segment (as a default 1 GiB segment holds 200k messages).
BIG = ["--commitlog-file-size", str(1 << 20), "--hash-slots", "64", "--max-index", "4096"]
#: Small segments and queue files: the log spans several segments, the queues several files.
SMALL_SEGS = ["--commitlog-file-size", "16384", "--hash-slots", "16", "--max-index", "64", "--cq-file-size", "400"]


def put(store: Path, msgs: list[dict], tmp: Path, geom: list[str]) -> list[dict]:
    inp = tmp / f"in-{time.monotonic_ns()}.jsonl"
    inp.write_text("".join(json.dumps(m) + "\n" for m in msgs))
    r = cli("put", "--store", str(store), "--json", "--from-jsonl", str(inp), *geom)
    return [json.loads(line) for line in r.stdout.splitlines()]


def seg_path(store: Path, offset: int, seg: int) -> tuple[Path, int]:
    return store / "commitlog" / f"{offset - offset % seg:020d}", offset % seg


def flip_body(store: Path, ack: dict, sent: dict, seg: int) -> None:
    """Flip two body bytes of a record in place (its length chain intact, its body CRC wrong)."""
    p, pos = seg_path(store, ack["commitLogOffset"], seg)
    rec = p.read_bytes()[pos:pos + ack["storeSize"]]
    at = pos + rec.index(sent["body"].encode()) + 2
    two = p.read_bytes()[at:at + 2]
    patch_file(p, at, bytes(b ^ 0xFF for b in two))


def recover(store: Path, geom: list[str], *extra: str, code: int = 0) -> dict:
    return json.loads(cli("recover", "--store", str(store), "--json", *extra, *geom, code=code).stdout)


def assert_reachable(store: Path, acks: list[dict], sent: list[dict], geom: list[str], tmp: Path) -> None:
    """Every acknowledged message: by each key and its UNIQ_KEY (the index), by its offset message id, by its
    queue offset (the consume queue), each answer naming its own commit-log offset."""
    from engine.broker.config.brokerconf import load_config
    from engine.broker.store import MessageStore

    opts = dict(zip(geom[::2], geom[1::2]))
    cfg = load_config(None, storePathRootDir=str(store), mappedFileSizeCommitLog=int(opts["--commitlog-file-size"]),
                      maxHashSlotNum=int(opts["--hash-slots"]), maxIndexNum=int(opts["--max-index"]))
    with MessageStore(cfg) as st:
        for a, m in zip(acks, sent):
            for k in m["keys"]:
                assert a["commitLogOffset"] in [r.physical_offset for r in st.query(m["topic"], k).messages], k
            got = st.query(m["topic"], m["uniqKey"], unique=True).messages
            assert a["commitLogOffset"] in [r.physical_offset for r in got], m["uniqKey"]
    ids = tmp / f"ids-{time.monotonic_ns()}.txt"
    ids.write_text("".join(a["msgId"] + "\n" for a in acks))
    r = cli("get", "--store", str(store), "--from-file", str(ids), "--json", *geom[:2], code=None)
    by_id = {json.loads(line)["msgId"]: json.loads(line)["commitLogOffset"] for line in r.stdout.splitlines()}
    assert {a["msgId"]: a["commitLogOffset"] for a in acks}.items() <= by_id.items()
    queues: dict[tuple[str, int], list[dict]] = {}
    for a in acks:
        queues.setdefault((a["topic"], a["queueId"]), []).append(a)
    for (topic, qid), qa in queues.items():
        top = max(a["queueOffset"] for a in qa) + 1
        r = cli("get", "--store", str(store), "-t", topic, "-q", str(qid), "-i", "0", "-n", str(top), "--json",
                *geom[:2], code=None)
        units = {}
        for line in r.stdout.splitlines():
            d = json.loads(line)
            if d.get("topic") == topic:
                units[d["queueOffset"]] = d["commitLogOffset"]
        missing = [a["queueOffset"] for a in qa if units.get(a["queueOffset"]) != a["commitLogOffset"]]
        assert not missing, f"{topic}/{qid}: queue offsets {missing[:10]} do not lead to their message"


def assert_healthy(store: Path, geom: list[str], deep: bool = True) -> None:
    r = cli("doctor", "--store", str(store), "--json", *(["--deep"] if deep else []), *geom[:2], code=None)
    d = json.loads(r.stdout)
    assert d["healthy"], r.stdout
    again = recover(store, geom)
    assert again["consistent"] and not again["changed"], again["actions"]


# ------------------------------------------------------------------------------------------- issue 34 item 15

def jittered(n: int, seed: int = 5) -> list[dict]:
    """Messages whose store times are not in log order (as put's parse helper stamps a large file's blocks)."""
    rnd = random.Random(seed)
    msgs = sample_messages(n)
    for m in msgs:
        m["storeTimestamp"] += rnd.randrange(-5000, 5000)
    return msgs


def test_every_intact_record_survives_many_damaged_ones(tmp_path):
    """Item 15: two body bytes flipped in every 20th record of a log whose store times are not monotone: recover
    steps over every damaged record (one placeholder each) and keeps every valid record, however many damaged
    ones lie between them; the broker's and rmqtool's readers find each by key, id and queue offset."""
    store = tmp_path / "s"
    sent = jittered(600)
    acks = put(store, sent, tmp_path, BIG)
    bad = set(range(7, 600, 20))
    for i in bad:
        flip_body(store, acks[i], sent[i], 1 << 20)
    (store / "abort").write_text("")
    plan = recover(store, BIG, "--dry-run")
    assert plan["truncatedRecords"] == 0 and plan["stopReason"] == "end of data"
    assert plan["skippedRanges"] == len(bad) and plan["recordsScanned"] == 600 - len(bad)
    done = recover(store, BIG)
    assert done["truncatedRecords"] == 0 and done["skippedRanges"] == len(bad)
    assert done["recordsScanned"] == 600 - len(bad) and done["maxOffsetAfter"] == done["maxOffsetBefore"]
    origins = sorted((p["placeholderFor"]["topic"], p["placeholderFor"]["queueOffset"])
                     for p in done["skipped"] if p["placeholderFor"])
    assert origins == sorted((acks[i]["topic"], acks[i]["queueOffset"]) for i in bad)
    keep = [i for i in range(600) if i not in bad]
    assert_reachable(store, [acks[i] for i in keep], [sent[i] for i in keep], BIG, tmp_path)
    assert_healthy(store, BIG)


def test_stale_records_after_damage_end_the_log_and_say_why(tmp_path):
    """Item 15: a record older than the one before the damage that no consume queue points at is still taken as
    stale data of an earlier truncation: the log ends there, and the stop reason says so."""
    store = tmp_path / "s"
    sent = sample_messages(40)
    acks = put(store, sent, tmp_path, BIG)
    # The last 10 records are stale: their units are gone (as after a broker's truncation and re-dispatch)...
    stale = [dict(m, storeTimestamp=m["storeTimestamp"] - 10**7) for m in sample_messages(10, 100)]
    acks_stale = put(store, stale, tmp_path, BIG)
    from engine.broker.consumequeue.queue import list_queues  # noqa: F401 -- the queues below are the store's

    for a in acks_stale:
        q = store / "consumequeue" / a["topic"] / str(a["queueId"])
        f = sorted(q.iterdir())[0]
        patch_file(f, a["queueOffset"] * 20, bytes(20))
    first = acks_stale[0]
    p, pos = seg_path(store, first["commitLogOffset"], 1 << 20)
    patch_file(p, pos + 4, bytes(8))  # the first stale record's header: a gap before the others
    (store / "abort").write_text("")
    plan = recover(store, BIG, "--dry-run")
    assert plan["maxOffsetAfter"] == first["commitLogOffset"]
    assert "stale" in plan["stopReason"] and str(acks_stale[1]["commitLogOffset"]) in plan["stopReason"]
    assert plan["truncatedRecords"] >= 9


def test_dry_run_reports_progress_while_it_scans(tmp_path):
    """Item 15: the dry run's scan reports progress (the CLI draws it on stderr) as it walks past damage."""
    from engine.broker.config.brokerconf import load_config
    from engine.ops.recovery import plan_recovery

    store = tmp_path / "s"
    sent = sample_messages(300)
    acks = put(store, sent, tmp_path, BIG)
    for i in range(5, 300, 30):
        flip_body(store, acks[i], sent[i], 1 << 20)
    (store / "abort").write_text("")
    calls = []
    cfg = load_config(None, storePathRootDir=str(store), mappedFileSizeCommitLog=1 << 20, maxHashSlotNum=64,
                      maxIndexNum=4096)
    plan_recovery(cfg, progress=lambda phase, done, total: calls.append((phase, done, total)))
    scans = [c for c in calls if c[0] == "scan"]
    assert len(scans) >= 10 and scans[-1][1] > scans[0][1]


# ------------------------------------------------------------------------------------------- issue 34 item 4

def test_damage_across_several_records_gets_a_placeholder_per_message(tmp_path):
    """Item 4: zeros from the middle of one record to the middle of the third after it: every message whose unit
    points into the range gets its own placeholder at its own offset (for its own queue), none points at zeros."""
    store = tmp_path / "s"
    sent = sample_messages(120)
    acks = put(store, sent, tmp_path, BIG)
    i = 50
    a = acks[i]["commitLogOffset"] + 40
    b = acks[i + 3]["commitLogOffset"] + 30
    p, pos = seg_path(store, a, 1 << 20)
    patch_file(p, pos, bytes(b - a))
    (store / "abort").write_text("")
    done = recover(store, BIG)
    assert done["truncatedRecords"] == 0
    got = {(x["placeholderFor"]["topic"], x["placeholderFor"]["queueId"], x["placeholderFor"]["queueOffset"]):
           x["offset"] for x in done["skipped"] if x["placeholderFor"]}
    want = {(acks[k]["topic"], acks[k]["queueId"], acks[k]["queueOffset"]): acks[k]["commitLogOffset"]
            for k in range(i, i + 4)}
    assert got == want
    keep = [k for k in range(120) if not i <= k < i + 4]
    assert_reachable(store, [acks[k] for k in keep], [sent[k] for k in keep], BIG, tmp_path)
    for k in range(i, i + 4):  # each lost message's unit leads to its placeholder, in its own queue offset
        r = cli("get", "--store", str(store), "-o", str(acks[k]["commitLogOffset"]), "--json", *BIG[:2], code=None)
        d = json.loads(r.stdout.splitlines()[0])
        assert d["topic"] == "rmq_sys_rmqtool_quarantine" and d["queueOffset"] == acks[k]["queueOffset"]
    assert_healthy(store, BIG)


def test_a_truncated_middle_segment_reports_every_message_it_lost(tmp_path):
    """Item 4: a middle segment cut to half its size: each message in the lost half is reported as a placeholder
    standing for its queue offset, the log goes on in the next segment, the rest stays reachable."""
    store = tmp_path / "s"
    sent = sample_messages(300)
    acks = put(store, sent, tmp_path, SMALL_SEGS)
    seg = 16384
    segs = sorted((store / "commitlog").iterdir())
    assert len(segs) >= 4
    victim = segs[1]
    start = int(victim.name)
    with open(victim, "r+b") as f:
        f.truncate(seg // 2)
    lost = [k for k, x in enumerate(acks) if start + seg // 2 <= x["commitLogOffset"] + x["storeSize"]
            and x["commitLogOffset"] < start + seg]
    assert lost
    (store / "abort").write_text("")
    done = recover(store, SMALL_SEGS, "--full-scan")
    assert done["truncatedRecords"] == 0
    got = {(x["placeholderFor"]["topic"], x["placeholderFor"]["queueId"], x["placeholderFor"]["queueOffset"])
           for x in done["skipped"] if x["placeholderFor"]}
    assert got == {(acks[k]["topic"], acks[k]["queueId"], acks[k]["queueOffset"]) for k in lost}
    keep = [k for k in range(300) if k not in lost]
    assert_reachable(store, [acks[k] for k in keep], [sent[k] for k in keep], SMALL_SEGS, tmp_path)
    assert_healthy(store, SMALL_SEGS)


# ------------------------------------------------------------------------------------------- issue 34 item 2

@pytest.mark.parametrize("where", [4, -15], ids=["early-file", "recent-file"])
def test_a_damaged_consume_queue_unit_is_rebuilt_at_its_queue_offset(tmp_path, where):
    """Item 2: one unit of a consume queue zeroed, its record far before the broker's start segment, in a file the
    broker's start-up re-reads (recent) or takes on trust (early): recover rebuilds the queue from that unit on,
    each unit at the QUEUEOFFSET its record holds, so every message stays reachable by its queue offset (and the
    queue's max offset is what it was)."""
    store = tmp_path / "s"
    sent = sample_messages(600)
    acks = put(store, sent, tmp_path, SMALL_SEGS)
    qa = [a for a in acks if (a["topic"], a["queueId"]) == ("TopicB", 1)]
    victim = qa[where] if where < 0 else qa[len(qa) // where]
    qdir = store / "consumequeue" / "TopicB" / "1"
    files = sorted(qdir.iterdir())
    per_file = 400 // 20
    f = files[victim["queueOffset"] // per_file]
    patch_file(f, victim["queueOffset"] % per_file * 20, bytes(20))
    (store / "abort").write_text("")
    done = recover(store, SMALL_SEGS)
    q = next(x for x in done["consumeQueues"]["queues"] if (x["topic"], x["queueId"]) == ("TopicB", 1))
    assert q["maxOffsetAfter"] == len(qa)
    assert_reachable(store, acks, sent, SMALL_SEGS, tmp_path)
    assert_healthy(store, SMALL_SEGS)


# ------------------------------------------------------------------------------------------- issue 34 item 12

def _cq_sizes(store: Path) -> set[int]:
    return {p.stat().st_size for p in (store / "consumequeue").glob("*/*/*") if p.stat().st_size}


def test_put_and_recover_write_queue_files_of_the_stores_size(r1_store, tmp_path):
    """Item 12: the golden r1 store has 6,000-byte queue files (broker.conf not given): put -s to a new queue and
    recover -s re-dispatching a queue whose files are gone write 6,000-byte files, not 6,000,000."""
    store = r1_store
    assert _cq_sizes(store) == {6000}
    cli("put", "-s", str(store), "-t", "BrandNewTopic", "-q", "3", "--body", "x", "--keys", "nk1")
    assert _cq_sizes(store) == {6000}
    assert (store / "consumequeue" / "BrandNewTopic" / "3").is_dir()
    # a queue's files lost: recover re-dispatches it into files of the store's size
    import shutil

    victim = next(p for p in sorted((store / "consumequeue").glob("*/*")) if p.parent.name != "BrandNewTopic")
    n_before = sum(1 for _ in victim.iterdir())
    shutil.rmtree(victim)
    (store / "abort").write_text("")
    done = recover(store, [], "--full-scan")
    assert done["consumeQueues"]["unitsAdded"] > 0 and victim.is_dir()
    assert sum(1 for _ in victim.iterdir()) == n_before
    assert _cq_sizes(store) == {6000}


def test_writers_refuse_queue_files_that_disagree_on_their_size(r1_store):
    """Item 12: one queue file of another size: put and recover refuse (exit 2, nothing changed); an option that
    contradicts every file is refused too."""
    from helpers import snapshot

    store = r1_store
    f = next(p for p in sorted((store / "consumequeue").glob("*/*/*")))
    with open(f, "r+b") as fh:
        fh.truncate(3000)
    before = snapshot(store)
    r = cli("put", "-s", str(store), "-t", "T", "--body", "x", code=2)
    assert "consume-queue" in r.stderr
    cli("recover", "-s", str(store), code=2)
    assert snapshot(store) == before
    with open(f, "r+b") as fh:
        fh.truncate(6000)
    cli("put", "-s", str(store), "-t", "T", "--body", "x", "--cq-file-size", "6000000", code=2)


# ------------------------------------------------------------------------------------------- issue 34 item 1

def _timer_pending(conf: Path) -> int:
    """Pending timer messages: `timer list` rows by record (a message in the wheel and still to enqueue is listed
    in both places, one message)."""
    r = cli("timer", "list", "-c", str(conf), "--json", code=None)
    return len({json.loads(line)["commitLogOffset"] for line in r.stdout.splitlines() if line.strip()})


def test_a_torn_pending_timer_record_does_not_stop_the_timer(tmp_path):
    """Item 1: on the real broker's timer set t1 with units of rmq_sys_wheel_timer/0 still to enqueue, a pending
    timer record torn: its placeholder carries what the broker's timer enqueue and dequeue parse (TIMER_OUT_MS,
    REAL_TOPIC/REAL_QID of the quarantine topic), so the broker passes over it; recover's count of lost timer
    messages is what `timer list` loses; afterwards timer verify, doctor, recover and repair timer agree that
    nothing is left to fix."""
    import struct

    from helpers import GOLDEN, unpack_golden

    store, conf = unpack_golden("timer/t1", tmp_path / "t1")
    patch_file(store / "config" / "timercheck", 16, struct.pack(">qq", 130, 130))  # 95 units still to enqueue
    before = _timer_pending(conf)
    pend = [json.loads(line) for line in (GOLDEN / "timer/t1/answers/pending.jsonl").read_text().splitlines()]
    victim = next(p for p in pend if p["storedQueueOffset"] >= 130)
    patch_file(store / "commitlog" / "00000000000000000000", victim["commitLogOffset"] + 4, bytes(64))
    (store / "abort").write_text("")
    done = json.loads(cli("recover", "-c", str(conf), "--json").stdout)
    assert done["truncatedRecords"] == 0 and done["timer"]["cut"] is None
    lost = done["timer"]["pendingLost"]
    # one message, in the wheel and still to enqueue: counted once (item 4 of the leftovers), with both places
    assert lost == 1 and _timer_pending(conf) == before - lost
    (x,) = done["timer"]["lost"]
    assert x["commitLogOffset"] == victim["commitLogOffset"] and x["timerLogPosition"] is not None
    (ph,) = [x for x in done["skipped"] if x["placeholderFor"]]
    assert ph["placeholderFor"] == {"topic": "rmq_sys_wheel_timer", "queueId": 0,
                                    "queueOffset": victim["storedQueueOffset"]}
    rec = json.loads(cli("get", "-c", str(conf), "-o", str(victim["commitLogOffset"]), "--json",
                         code=None).stdout.splitlines()[0])
    props = rec["properties"]
    assert rec["topic"] == "rmq_sys_rmqtool_quarantine" and rec["transactionType"] == "ROLLBACK"
    assert int(props["TIMER_OUT_MS"]) > 0 and props["REAL_TOPIC"] == rec["topic"] and int(props["REAL_QID"]) == 0
    v = json.loads(cli("timer", "verify", "-c", str(conf), "--json", code=None).stdout)
    assert v["ok"], [f for f in v["findings"] if f["severity"] != "info"]
    assert any(f["kind"] == "unit-stand-in" for f in v["findings"])
    d = json.loads(cli("doctor", "-c", str(conf), "--json", code=None).stdout)
    assert d["healthy"]
    again = json.loads(cli("recover", "-c", str(conf), "--json").stdout)
    assert again["consistent"] and not again["changed"]
    r = cli("repair", "timer", "-c", str(conf), "--json", code=None)
    assert r.exit_code == 0


def test_placeholders_of_schedule_and_half_queues_carry_what_their_readers_parse():
    """Item 1: the reader properties of a placeholder by the queue it stands in (decided from the broker's code:
    engine.ops.recovery.placeholder.reader_properties)."""
    from engine.ops.recovery.placeholder import Origin, placeholder_record
    from engine.broker.commitlog.message import VALID, check_message

    for topic, want in (("SCHEDULE_TOPIC_XXXX", {"REAL_TOPIC", "REAL_QID"}),
                        ("RMQ_SYS_TRANS_HALF_TOPIC", {"REAL_TOPIC", "REAL_QID", "TRANSACTION_CHECK_TIMES"}),
                        ("rmq_sys_wheel_timer", {"REAL_TOPIC", "REAL_QID", "TIMER_OUT_MS"}),
                        ("TopicA", set())):
        data = placeholder_record(1000, 400, 1_700_000_000_000, "quarantine/x/manifest.json", Origin(topic, 2, 7))
        r = check_message(data, 0, len(data))
        assert r.status == VALID and r.size == 400
        props = r.record.properties
        assert want <= set(props) and not ({"REAL_TOPIC", "TIMER_OUT_MS", "TRANSACTION_CHECK_TIMES"} - want) & set(props)
        if "TRANSACTION_CHECK_TIMES" in want:
            assert int(props["TRANSACTION_CHECK_TIMES"]) >= 15  # transactionCheckMax's default
