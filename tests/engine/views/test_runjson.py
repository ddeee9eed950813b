"""The bulk NDJSON of a run of records (run_json_text: one line template per run, properties of one shape found by
one regex, clean bodies and values as stored) is byte for byte the one-record view, json_line, which is
json.dumps(to_json()). Checked on runs built to take every path: uniform clean properties, mixed shapes, names
given twice, values json escapes (controls, quotes, backslashes), non-ASCII and invalid UTF-8 in bodies, topics
and properties, __CRC32#, compressed bodies, IPv6 hosts, V2 records, constant and varying header fields.
"""
from __future__ import annotations

import json
import random
import zlib

import numpy as np
import pytest

from helpers import put_jsonl, run
from engine.broker.commitlog.logrun import RecordRun
from engine.broker.commitlog.message import MESSAGE_MAGIC_CODE_V2, MessageRecord, check_message, encode_record
from engine.views.recordjson import BODY_MODES, json_line
from engine.views.runjson import run_json_lines, run_json_text
from engine.broker.commitlog.records import RecordBatch, decode_segment

EXTRA = ', "type": "MESSAGE"'
# Properties texts (bytes as stored): clean ones, and every way a text can leave the clean path.
CLEAN_VALUES = ["v", "order-1 user-2", "a  b  ", "   ", " lead", "ünïcode ☃", "😀", "x" * 50, "{}", "%d %s", "\x7f"]
DIRTY_VALUES = ['q"uote', "back\\slash", "tab\there", "nl\nx", "\x00", "\x1f", "\x03", "\u2028"]
NAMES = ["KEYS", "TAGS", "UNIQ_KEY", "a", "%RETRY%", "ж", "p.q", "WAIT", "DELAY"]


def _props(rnd: random.Random, names: list[str], dirty: float) -> bytes:
    pool = CLEAN_VALUES + (DIRTY_VALUES if rnd.random() < dirty else [])
    return "".join(f"{k}\x01{rnd.choice(pool)}\x02" for k in names).encode("utf-8")


#: Texts the clean path must refuse (or that parse_properties reads in its own way).
ODD = [b"KEYS\x01a\x02KEYS\x01b\x02", b"a\x01b", b"\x01x\x02k\x01v\x02", b"k\x01v\x02\x01x\x02", b"k\x01\x02",
       b"k\x01v\x02j\x01\x02", b"a\x01b\x01c\x02", b"ab\x02\x02k\x01v", b"TAGS\x01\xff\xfe\x02",
       b"KEYS\x01\xe2\x82\x02", b"x\x01\x01\x02y\x01z", b"TAGS\x01t\x02junk", b"KEYS\x01k\x02UNIQ_KEY",
       b"__CRC32#\x010123456789\x02", b"", b"KEYS\x01\xc3\xa9\x02", b"k\x01v\x02\n\x02", b"k\x01v\x02\x02",
       b"KEYS\x01a\x02TAGS\x01t\x02UNIQ_KEY\x01u\x02KEYS\x01b\x02", b"k\x01v\x02\nj\x01w\x02", b"\nk\x01v\x02",
       b'k\x01"\x02', b"k\x01\\\x02", b"k\x01\x00\x02"]


def _odd_props(rnd: random.Random) -> bytes:
    return rnd.choice(ODD)


def _record(rnd: random.Random, i: int, props: bytes, varied: bool) -> bytes:
    body = rnd.choice([b"payment %d" % i, "ж€😀 %d" % i, b"", b'"q\\"', b"\xff\xfe", b"a\nb", b"\xe2\x82",
                       b"x" * 300, b"\x00\x01", b"%s%d"])
    body = body.encode("utf-8") if isinstance(body, str) else body
    rec = MessageRecord(topic="T", body=body, queue_id=i % 3, queue_offset=i, physical_offset=0,
                        born_timestamp=1_700_000_000_000 + i, store_timestamp=1_700_000_000_500 + i,
                        properties_raw=props)
    if varied:
        rec.flag = rnd.choice([0, -1, 2**31 - 1])
        rec.sys_flag = rnd.choice([0, 4, 8, 12, 2])
        rec.reconsume_times = rnd.choice([0, 3])
        rec.prepared_transaction_offset = rnd.choice([0, 2**63 - 1])
        rec.born_host, rec.born_port = rnd.choice([(b"\x0a\x00\x00\x01", 1), (b"\x7f\x00\x00\x01", 0)])
        rec.store_host, rec.store_port = rnd.choice([(b"\x0a\x00\x00\x02", 10911), (b"\x7f\x00\x00\x01", 10911)])
        if rnd.random() < 0.05:
            rec.born_host = bytes(range(16))
        if rnd.random() < 0.05:
            rec.sys_flag |= 1
            rec.body = zlib.compress(body)
    rec.magic = MESSAGE_MAGIC_CODE_V2 if varied and rnd.random() < 0.2 else rec.magic
    topic = rnd.choice(["TopicTest", "%RETRY%g", 'q"t', "ж", "T" * 127]) if varied else "TopicTest"
    placeholder = "\x01" * len(topic.encode("utf-8"))
    rec.topic = placeholder
    data = encode_record(rec, v2=rec.magic == MESSAGE_MAGIC_CODE_V2)
    raw_topic = b"\xff\xfe" if varied and rnd.random() < 0.05 else topic.encode("utf-8")
    raw_topic = raw_topic.ljust(len(placeholder), b"x")[:len(placeholder)]
    return data.replace(placeholder.encode("ascii"), raw_topic, 1)


def _log(records: list[bytes]) -> bytearray:
    """Records laid out from offset 0 with their PHYSICALOFFSET set (so msgId is the real one)."""
    buf, pos = bytearray(), 0
    for r in records:
        r = bytearray(r)
        r[28:36] = pos.to_bytes(8, "big", signed=True)
        buf += r
        pos += len(r)
    return bytes(buf + bytes(64))


def _runs(buf, rnd: random.Random) -> list[RecordRun]:
    """The records of buf as runs: whole, and as random subsets (any mix of records can make a run)."""
    batch = next(b for b in decode_segment(buf, 0, len(buf)) if isinstance(b, RecordBatch))
    out = []
    for mask in [np.ones(len(batch), dtype=bool)] + [np.array([rnd.random() < 0.5 for _ in range(len(batch))])
                                                      for _ in range(3)]:
        sub = batch.select(mask)
        ends = sub.body_pos + np.maximum(sub.body_len, 0)
        bodies = [bytes(buf[a:b]) for a, b in zip(sub.body_pos.tolist(), ends.tolist())]
        out.append(RecordRun(0, "00000000000000000000", buf, sub, bodies))
    return out


def _check(run_: RecordRun, modes=BODY_MODES) -> int:
    pos = run_.batch.pos.tolist()
    for mode in modes:
        for extra in ("", EXTRA):
            want = "".join(json_line(run_.buf, p, extra, mode) + "\n" for p in pos).encode("utf-8")
            assert run_json_text(run_, extra, mode) == want, mode
    assert run_json_lines(run_) == [json.dumps(check_message(run_.buf, p, check_crc=False).record.to_json(),
                                               ensure_ascii=False) for p in pos]
    return len(pos)


SCENARIOS = {
    # one producer: the same names in the same order in every record (the one-regex path)
    "uniform": lambda rnd, i: _props(rnd, ["KEYS", "UNIQ_KEY", "TAGS"], 0.0),
    "uniform-no-keys": lambda rnd, i: _props(rnd, ["TAGS", "a"], 0.0),
    "uniform-one-name": lambda rnd, i: _props(rnd, ["UNIQ_KEY"], 0.0),
    "no-properties": lambda rnd, i: b"",
    # a broker that appends __CRC32# to every message: the one-record path (to_json shows the CRC check)
    "all-crc32": lambda rnd, i: _props(rnd, ["KEYS"], 0.0) + b"__CRC32#\x010123456789\x02",
    "uniform-some-dirty": lambda rnd, i: _props(rnd, ["KEYS", "UNIQ_KEY", "TAGS"], 0.1),
    "mixed-shapes": lambda rnd, i: _props(rnd, rnd.sample(NAMES, rnd.randrange(0, 6)), 0.0),
    "mixed-dirty": lambda rnd, i: _props(rnd, rnd.sample(NAMES, rnd.randrange(0, 6)), 0.3),
    "odd": lambda rnd, i: _odd_props(rnd) if rnd.random() < 0.3 else _props(rnd, ["KEYS", "TAGS"], 0.0),
}


@pytest.fixture(params=["template-from-1", "default"])
def small_run(request, monkeypatch):
    """Runs of any size on the template path (SMALL_RUN = 1), and with the default threshold."""
    from engine.views import runjson

    if request.param == "template-from-1":
        monkeypatch.setattr(runjson, "SMALL_RUN", 1)
    return runjson.SMALL_RUN


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("varied", [False, True])
def test_run_json_text_equals_the_one_record_view(scenario, varied, small_run):
    rnd = random.Random(f"{scenario}-{varied}")
    seen = 0
    for _ in range(4):
        records = [_record(rnd, i, SCENARIOS[scenario](rnd, i), varied) for i in range(rnd.randrange(1, 90))]
        buf = _log(records)
        for r in _runs(buf, rnd):
            seen += _check(r)
    assert seen > 0


@pytest.mark.parametrize("odd", ODD)
def test_one_odd_record_among_clean_ones(odd, small_run):
    """Each odd properties text alone in a run of one producer's clean messages (every other record would take
    the one-regex path): the run's text is still exactly the one-record view."""
    rnd = random.Random(odd)
    for at in (0, 5, 39):
        records = [_record(rnd, i, _props(rnd, ["KEYS", "UNIQ_KEY", "TAGS"], 0.0), False) for i in range(40)]
        records[at] = _record(rnd, at, odd, False)
        _check(_runs(_log(records), rnd)[0])


def test_runs_are_formatted_by_shape_groups():
    """The template path is really taken: one producer's messages as one group; several shapes as one group each
    (lines put back in log order); records the template cannot show go one by one. Exact in every case."""
    from engine.views import runjson

    rnd = random.Random(7)
    uniform = [_record(rnd, i, _props(rnd, ["KEYS", "UNIQ_KEY", "TAGS"], 0.0), False) for i in range(200)]
    r = _runs(_log(uniform), rnd)[0]
    plan = runjson._plan(r)
    assert len(plan) == 1 and plan[0][0] is None and isinstance(plan[0][1], runjson._UniformProps)
    _check(r)
    shapes = [["KEYS", "UNIQ_KEY", "TAGS"], ["TAGS"], [], ["a", "KEYS"]]
    mixed = [_record(rnd, i, _props(rnd, shapes[i % 4], 0.0), False) for i in range(4 * runjson.SMALL_RUN + 8)]
    mixed[5] = _record(rnd, 5, b"KEYS\x01a\x02KEYS\x01b\x02", False)  # a name twice: one by one
    mixed[9] = _record(rnd, 9, b'TAGS\x01q"t\x02', False)  # a value json escapes: one by one
    r = _runs(_log(mixed), rnd)[0]
    plan = runjson._plan(r)
    groups = {tuple(idx.tolist()): props for idx, props in plan}
    assert sorted(i for g in groups for i in g) == list(range(len(mixed)))
    assert sorted(i for k, v in groups.items() if v is None for i in k) == [5, 9]
    assert sum(isinstance(v, runjson._UniformProps) for v in groups.values()) == 4
    _check(r)
    many = [_record(rnd, i, _props(rnd, [f"n{i}"], 0.0), False) for i in range(runjson.MAX_SHAPES + 5)]
    many[3] = _record(rnd, 3, b"KEYS\x01a\x02KEYS\x01b\x02", False)  # a name twice, on the general path
    r = _runs(_log(many), rnd)[0]
    general = runjson._plan(r)[-1][1]
    assert isinstance(general, runjson._RunProps) and list(general.dirty) == [3]  # too many shapes
    _check(r)
    few = _runs(_log(uniform[:runjson.SMALL_RUN - 1]), rnd)[0]
    assert run_json_text(few) == runjson._one_by_one(few, "", "auto")  # a small run: the one-record path
    _check(few)


def test_dump_and_get_json_through_the_cli_equal_to_json(tmp_path):
    """The commands write the same NDJSON as json.dumps(to_json()) for messages with odd properties and bodies,
    whether they come from dump-commitlog (with its "type") or get --from-file."""
    store = tmp_path / "s"
    odd = [{"keys": " a  b  ", "tags": "T"}, {"keys": "   ", "tags": 'q"uote'}, {"keys": "x\\y", "tags": "t"},
           {"keys": "k", "properties": {"p": "tab\there", "ü": "ünïcode ☃", "del": "\x7f"}},
           {"keys": "k2 ", "uniqKey": "U1"}, {"properties": {"a": "b"}}, {},
           {"body": "AAEC/w==", "bodyEncoding": "base64"}, {"body": 'quote " and \\ and \n'}]
    put_jsonl(store, [{"topic": "T", "body": f"b{i}", **m} for i, m in enumerate(odd * 5)])
    r = run(["dump-commitlog", "--store", store, "--json", "--commitlog-file-size", "4096"])
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    msgs = [j for j in lines if j["type"] == "MESSAGE"]
    assert len(msgs) == len(odd) * 5
    from engine.broker.config.brokerconf import load_config
    from engine.broker.store import MessageStore

    with MessageStore(load_config(None, storePathRootDir=str(store), mappedFileSizeCommitLog=4096)) as st:
        want = [json.dumps({**st.commitlog.check_at(j["commitLogOffset"]).record.to_json(), "type": "MESSAGE"},
                           ensure_ascii=False) for j in msgs]
    got = [x for x in r.stdout.splitlines() if '"type": "MESSAGE"' in x]
    assert got == want
    offsets = "".join(f"{j['commitLogOffset']}\n" for j in msgs)
    g = run(["get", "--store", store, "--commitlog-file-size", "4096", "--from-file", "-", "--json"], input=offsets)
    assert g.exit_code == 0, g.output
    assert g.stdout.splitlines() == [w[:-len(EXTRA) - 1] + "}" for w in want]


def test_lookups_in_any_order_over_many_segments(tmp_path):
    """lookup_runs checks each segment's lookups at once, in whatever order they come: the answers stay in the
    order asked, each the record's one-record view or the reason check_at gives (offsets inside a record, past
    the end, in no segment, asked twice; offset message ids naming another store host)."""
    from engine.broker.config.brokerconf import load_config
    from engine.broker.commitlog.logrun import lookup_runs
    from engine.broker.store import MessageStore

    store = tmp_path / "s"
    acks = put_jsonl(store, [{"topic": f"T{i % 3}", "keys": f"k{i}", "body": f"body {i} " + "x" * (i % 50)}
                             for i in range(300)])
    offsets = [a["commitLogOffset"] for a in acks]
    rnd = random.Random(3)
    asked = offsets * 2 + [offsets[5] + 1, offsets[-1] + 10**6, 10**15, 7]
    rnd.shuffle(asked)
    hosts = [rnd.choice([None, (b"\x7f\x00\x00\x01", 10911), (b"\x0a\x00\x00\x09", 10911)]) for _ in asked]
    with MessageStore(load_config(None, storePathRootDir=str(store), mappedFileSizeCommitLog=4096)) as st:
        cl = st.commitlog
        assert len(cl.segments) > 10
        for expect in (None, hosts):
            got = []
            for item in lookup_runs(cl, asked, expect):
                got += run_json_lines(item) if isinstance(item, RecordRun) else [item]
            assert len(got) == len(asked)
            for i, (off, g) in enumerate(zip(asked, got)):
                r = cl.check_at(off)
                wrong_host = expect is not None and expect[i] is not None and expect[i][0] != b"\x7f\x00\x00\x01"
                if r.status == "VALID" and not wrong_host:
                    assert g == json.dumps(r.record.to_json(), ensure_ascii=False)
                elif r.status == "VALID":
                    assert g == (i, f"the message there has id {r.record.msg_id}")
                else:
                    assert g == (i, r.reason or r.status.lower())
            assert sum(isinstance(g, tuple) for g in got) >= 4


def test_a_flipped_body_is_reported_with_both_crcs(tmp_path):
    """scan_runs checks every body CRC in bulk (records.body_crc_bad); a record whose body was changed is an
    entry of its own whose reason names the stored and the computed CRC, and the records around it stay runs."""
    from engine.broker.config.brokerconf import load_config
    from engine.broker.commitlog.logrun import scan_runs
    from engine.broker.store import MessageStore
    from engine.java.lang import rmq_crc32

    store = tmp_path / "s"
    acks = put_jsonl(store, [{"topic": "T", "keys": f"k{i}", "body": f"body {i} " + "x" * 40} for i in range(20)])
    victim = acks[7]["commitLogOffset"]
    seg = sorted((store / "commitlog").iterdir())[0]
    data = bytearray(seg.read_bytes())
    rec = check_message(bytes(data), victim, len(data), check_crc=False).record
    body_at = bytes(data).index(rec.body, victim)
    data[body_at] ^= 0x01
    seg.write_bytes(bytes(data))
    with MessageStore(load_config(None, storePathRootDir=str(store))) as st:
        items = list(scan_runs(st.commitlog))
    bad = [e for e in items if not isinstance(e, RecordRun)]
    assert [e.offset for e in bad][:1] == [victim]
    flipped = bytes(data[body_at:body_at + len(rec.body)])
    assert bad[0].reason == f"body CRC mismatch (stored {rec.body_crc}, computed {rmq_crc32(flipped)})"
    assert sum(len(r.batch) for r in items if isinstance(r, RecordRun)) == 19
