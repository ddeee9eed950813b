"""The batch write path and the fast read views are byte-identical to the one-record codec.

MessageBatch encodes as it adds (encode_record's bytes, offsets filled at put), index_hashes gives the
hashCodes of broker_index_keys, json_line gives json.dumps(to_json()), quick_valid_size agrees with
check_message: each is checked against the reference on many generated records.
"""
from __future__ import annotations

import json
import random
import struct

import numpy as np
import pytest

from helpers import GOLDEN
from engine.broker.commitlog.log import CommitLog, quick_valid_size
from engine.broker.config.brokerconf import load_config
from engine.broker.index.keys import broker_index_keys
from engine.broker.commitlog.message import (VALID, MessageRecord, check_message, encode_record, parse_properties,
                                             split_keys)
from engine.broker.write.batch import MessageBatch
from engine.broker.write.writer import index_hashes
from engine.views.recordjson import json_line, parse_props, split_keys_fast
from engine.broker.store import MessageStore, message_from_json
from engine.java.lang import java_string_hash

# Names that share Java hash buckets ("Aa"/"BB" collide), so HashMap order depends on insertion order and resizes.
NAMES = ["Aa", "BB", "AaAa", "BBBB", "AaBB", "BBAa", "KEYS", "TAGS", "UNIQ_KEY", "DELAY", "WAIT", "p", "q{}", "ж",
         "x" * 40, "TRAN_MSG", "REAL_TOPIC", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9"]
TOPICS = ["T", "TopicTest", "%RETRY%grp", "%DLQ%g-1", "SCHEDULE_TOPIC_XXXX", "rmq_sys_TRACE", "t" * 127,
          "%RETRY%" + "g" * 200]


def random_message(rnd: random.Random, i: int) -> dict:
    m = {"topic": rnd.choice(TOPICS), "storeTimestamp": 1_700_000_000_000 + i, "uniqKey": f"U{i:030d}"}
    if rnd.random() < 0.8:
        m["body"] = "".join(rnd.choice("ab ж€😀\n\"\\") for _ in range(rnd.randrange(0, 60)))
    if rnd.random() < 0.2:
        m["body"], m["bodyEncoding"] = "AAEC/w==", "base64"
    if rnd.random() < 0.7:
        m["keys"] = rnd.choice([["k1", "k2"], "a  b ", " lead", "x", ["😀", "ж"], "p q r s"])
    if rnd.random() < 0.6:
        m["tags"] = rnd.choice(["TagA", "", "ж", "t" * 30])
    if rnd.random() < 0.5:
        m["properties"] = {n: rnd.choice(["v", "{}", "1", "ж😀"]) for n in rnd.sample(NAMES, rnd.randrange(0, 20))}
        m["properties"].pop("UNIQ_KEY", None)
    if rnd.random() < 0.3:
        m["queueId"] = rnd.randrange(0, 2**31)
    if rnd.random() < 0.3:
        m.update(flag=rnd.randrange(-2**31, 2**31), sysFlag=rnd.choice([0, 4, 8, 12, 1, 0x30]),
                 reconsumeTimes=rnd.randrange(0, 16), preparedTransactionOffset=rnd.randrange(0, 2**63),
                 bornTimestamp=rnd.randrange(1, 2**63), bornHost=rnd.choice(["10.0.0.1:1", "[::1]:5", "1.2.3.4"]),
                 storeHost=rnd.choice(["10.0.0.2:10911", "[2001:db8::1]:10911"]))
    return m


def reference_bytes(m: dict, phy: int, qoff: int) -> bytes:
    rec = message_from_json(m)
    rec.physical_offset, rec.queue_offset = phy, qoff
    rec.born_timestamp = rec.born_timestamp or rec.store_timestamp
    return encode_record(rec)


def test_batch_records_equal_encode_record_byte_for_byte():
    rnd = random.Random(7)
    msgs = [random_message(rnd, i) for i in range(600)]
    batch = MessageBatch()
    for m in msgs:
        batch.add_json(m)
    for m, data in zip(msgs, batch.records):
        assert data == reference_bytes(m, 0, 0), m


def plain_message(rnd: random.Random, i: int) -> dict:
    m = {"topic": rnd.choice(TOPICS[:5])}
    for name, values in (("body", ["", "x" * 50, "ж😀", None]), ("keys", [["a", "b"], [], [""], "k  l", "", None]),
                         ("tags", ["TagA", "", None]), ("uniqKey", [f"U{i}", "", None]),
                         ("queueId", [0, 7, 2**31 - 1, None]), ("storeTimestamp", [1_700_000_000_000 + i, None])):
        if rnd.random() < 0.8:
            m[name] = rnd.choice(values)
    return m


def test_extend_json_equals_add_json_one_by_one():
    rnd = random.Random(4)
    for trial in range(30):
        objs = [plain_message(rnd, i) for i in range(rnd.randrange(1, 80))]
        for o in objs:  # deterministic UNIQ_KEYs and store times, so both batches must be equal
            o["uniqKey"], o["storeTimestamp"] = o.get("uniqKey") or f"G{id(o)}", o.get("storeTimestamp") or 5
        if trial % 3 == 0:
            objs.insert(rnd.randrange(len(objs)), random_message(rnd, 99))  # not plain: the per-message path
        fast, slow = MessageBatch(3), MessageBatch(3)
        fast.extend_json(objs)
        for o in objs:
            slow.add_json(o)
        assert fast.parts == slow.parts
        for col in ("topic", "queue_id", "store_ts", "in_cq", "tags_code", "uniq", "keys", "rollback", "store_host",
                    "store_port", "body_len", "size"):
            assert getattr(fast, col) == getattr(slow, col), col


def test_generated_uniq_keys_are_distinct_and_in_the_producer_format():
    b = MessageBatch()
    b.extend_json([{"topic": "T"}] * 700)
    for i in range(300):
        b.add_json({"topic": "T"})
    assert len(set(b.uniq)) == 1000 and all(len(u) == 32 and int(u, 16) >= 0 for u in b.uniq)
    b._uniq_base, b._uniq_next, b._uniq_left = "X", 0xFFFE, 3
    assert b.uniq_many(5)[:3] == ["XFFFE", "XFFFF", "X0000"]  # the counter wraps; then a new block is taken


def test_put_batch_stores_encode_record_bytes_at_their_offsets(tmp_path):
    rnd = random.Random(11)
    msgs = [random_message(rnd, i) for i in range(300)]
    cfg = load_config(None, storePathRootDir=str(tmp_path / "s"), mappedFileSizeCommitLog=1 << 16,
                      maxHashSlotNum=64, maxIndexNum=256, mappedFileSizeConsumeQueue=400)
    with MessageStore(cfg, writable=True, create=True) as st:
        for a in range(0, len(msgs), 70):  # several batches, several segment rolls
            b = MessageBatch()
            for m in msgs[a:a + 70]:
                b.add_json(m)
            res = st.put_batch(b)
            assert res.error is None and len(res) == len(b)
            for j, m in enumerate(msgs[a:a + 70]):
                got = st.commitlog.check_at(res.phy[j]).record
                assert encode_record(got) == reference_bytes(m, res.phy[j], res.queue_offset[j])
                assert got.tags_code() == message_from_json(m).tags_code()
    with MessageStore(cfg) as st:
        entries = list(st.walk())
        assert [e.kind for e in entries if e.kind not in ("VALID", "BLANK")] == []
        assert sum(e.kind == "VALID" for e in entries) == len(msgs)


def test_put_record_api_fills_the_record_like_before(tmp_path):
    cfg = load_config(None, storePathRootDir=str(tmp_path / "s"), mappedFileSizeCommitLog=4096,
                      maxHashSlotNum=16, maxIndexNum=64)
    rec = MessageRecord(topic="T", body=b"x", properties={"KEYS": "a b", "NONE": None})
    with MessageStore(cfg, writable=True, create=True) as st:
        r = st.put(rec, sync_flush=True)
        assert rec.physical_offset == r.commitLogOffset == 0 and rec.uniq_key == r.uniqKey
        stored = st.get(0)
    assert "NONE" not in stored.properties and stored.keys == ["a", "b"]
    expect = MessageRecord(topic="T", body=b"x", properties={"KEYS": "a b", "NONE": None, "UNIQ_KEY": r.uniqKey},
                           store_timestamp=r.storeTimestamp, born_timestamp=r.storeTimestamp)
    assert encode_record(stored) == encode_record(expect)


def test_index_hashes_equal_broker_index_keys(monkeypatch):
    import engine.broker.write.writer as pw

    rnd = random.Random(3)
    words = ["k", "", "ж", "😀x", "a b", "Aa", "BB", "long" * 9, "x" * 300]

    def case(n, rollbacks, odd_uniqs, non_bmp):
        rows = []
        for i in range(n):
            u = rnd.choice([f"U{i}", "", None]) if odd_uniqs and i % 7 == 0 else f"U{i}{'ж' * (i % 3)}"
            k = rnd.choice([None, " ".join(rnd.choice(words) for _ in range(rnd.randrange(0, 5)))])
            if k and not non_bmp:
                k = k.replace("😀", "")
            rows.append((rnd.choice(TOPICS[:4]), u, k, rollbacks and i % 13 == 0))
        return rows

    for rows, fast in ((case(3000, False, False, False), True), (case(500, True, True, True), False),
                       (case(1, False, False, False), True)):
        t, u, k, r = map(list, zip(*rows))
        if fast:  # the vectorised path must take these by itself
            monkeypatch.setattr(pw, "_index_hashes_slow", None)
        counts, hashes = index_hashes(t, u, k, r)
        monkeypatch.undo()
        expect = [broker_index_keys(*row) for row in rows]
        assert counts.tolist() == [len(e) for e in expect]
        assert hashes.tolist() == [java_string_hash(s) for e in expect for s in e]


def test_quick_valid_size_agrees_with_check_message():
    rnd = random.Random(5)
    for i in range(3000):
        m = random_message(rnd, i)
        data = bytearray(reference_bytes(m, 0, 0)) + bytes(rnd.randrange(0, 20))
        for _ in range(rnd.randrange(0, 3)):
            data[rnd.randrange(len(data))] = rnd.randrange(256)
        r = check_message(bytes(data), 0, len(data))
        q = quick_valid_size(bytes(data), 0, len(data), True)
        assert (q > 0) == (r.status == VALID) and (q < 0 or q == r.size), (r.status, r.reason)


def test_json_line_equals_json_dumps_of_to_json(tmp_path):
    rnd = random.Random(9)
    blobs = [reference_bytes(random_message(rnd, i), 0, 0) for i in range(400)]
    zipped = MessageRecord(topic="Z", body=__import__("zlib").compress(b"hello"), sys_flag=1)
    crc = MessageRecord(topic="C", body=b"b", properties={"a": "b"})
    blobs += [encode_record(zipped), encode_record(crc, append_prop_crc=True)]
    seg = (GOLDEN / "commitlog" / ("0" * 20)).read_bytes()
    for data in blobs:
        rec = check_message(data).record
        assert json_line(data, 0) == json.dumps(rec.to_json(), ensure_ascii=False)
        assert json_line(data, 0, ', "x": 1') == json.dumps({**rec.to_json(), "x": 1}, ensure_ascii=False)
    pos = 0
    while True:
        r = check_message(seg, pos)
        if r.status != VALID:
            break
        assert json_line(seg, pos) == json.dumps(r.record.to_json(), ensure_ascii=False)
        pos += r.size


def test_fast_helpers_equal_their_references():
    for text in ["a\x01b\x02c\x01d", "a\x01b\x01c\x02", "\x01x\x02k\x01\x02kk\x01v\x02", "", "x", "ab\x02\x02"]:
        assert parse_props(text) == parse_properties(text)
    for k in [None, "", " ", "a  b ", " a", "a", "a b  ", "  "]:
        assert split_keys_fast(k) == split_keys(k)


@pytest.mark.parametrize("bad", [{"topic": "T", "queueId": 2**31}, {"topic": "T", "queueId": -1},
                                 {"topic": "T", "flag": 2**31}, {"topic": "T", "sysFlag": -2**31 - 1},
                                 {"topic": "T", "storeTimestamp": 2**63}, {"topic": "T", "bornTimestamp": -2**63 - 1},
                                 {"topic": "T", "preparedTransactionOffset": 2**64},
                                 {"topic": "T", "reconsumeTimes": "3"}, {"topic": "a/b"}, {"topic": "x\u0000"},
                                 {"topic": "../../escape"}, {"topic": "t" * 128}, {"topic": "T", "keys": ["a\u0001"]},
                                 {"topic": "T", "tags": "t\u0002"}, {"topic": "T", "uniqKey": "u\u0001"},
                                 {"topic": "T", "properties": {"a\u0002": "v"}},
                                 {"topic": "T", "properties": {"a": "v\u0001w"}},
                                 {"topic": "T", "properties": {"a": 1}}, {"topic": "T", "body": "\ud800"},
                                 {"topic": "T", "bornHost": "1.2.3.4:99999999999"}])
def test_batch_refuses_what_a_broker_cannot_store(bad):
    from engine.errors import InvalidArgumentError

    b = MessageBatch()
    with pytest.raises(InvalidArgumentError):
        b.add_json(bad)
    assert len(b) == 0 and b.parts == [] and b.size == []
    with pytest.raises(InvalidArgumentError):
        b.extend_json([{"topic": "T", "uniqKey": "u1"}, {"topic": "T", "uniqKey": "u2"}, bad, {"topic": "T"}])
    assert b.uniq == ["u1", "u2"]  # the ones before the bad one are in


def test_system_topics_are_accepted():
    b = MessageBatch()
    for t in ["SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_TRACE_DATA", "%RETRY%g", "%DLQ%g",
              "%RETRY%" + "g" * 248]:
        b.add_json({"topic": t, "body": "x"})
    assert len(b) == 6
    assert struct.unpack(">i", b.records[-1][4:8])[0] == -626843477  # a 255-char topic needs the v2 magic


def test_layout_vectorised_equals_the_roll_loop(tmp_path):
    cl = CommitLog([tmp_path / "commitlog"], 4096, writable=True)
    cl.open_for_append(0)
    rnd = random.Random(2)
    sizes = [rnd.choice([91, 500, 1000, 1090, 4000, 4088]) for _ in range(60)]
    phys, pieces = cl.layout(np.array(sizes, dtype=np.int64))
    seg, pos, expect, blanks = 0, 0, [], []  # DefaultAppendMessageCallback: roll when size + 8 > space left
    for s in sizes:
        if s + 8 > 4096 - pos:
            blanks.append((seg, pos, 4096 - pos))
            seg, pos = seg + 4096, 0
        expect.append(seg + pos)
        pos += s
    assert phys.tolist() == expect
    assert [p.blank for p in pieces[1:]] == blanks and pieces[0].blank is None
    assert [p.first for p in pieces] == [0] + [i for i in range(1, 60) if expect[i] % 4096 == 0 and
                                               expect[i] != expect[i - 1] + sizes[i - 1]]
    small, one = cl.layout(np.array([10, 20]))
    assert small.tolist() == [0, 10] and len(one) == 1
    cl.close()


def test_acknowledgement_lines_equal_the_put_results(tmp_path):
    from rmqtool.commands.put import Acks

    cfg = load_config(None, storePathRootDir=str(tmp_path / "s"), mappedFileSizeCommitLog=1 << 16,
                      maxHashSlotNum=64, maxIndexNum=256)
    cases = [[{"topic": "T", "body": "x"}] * 5,                                    # generated UNIQ_KEYs
             [{"topic": "T", "uniqKey": 'q"\\\tж'}, {"topic": "T"}],              # one needs escaping
             [{"topic": "T", "storeHost": "10.0.0.9:1"}, {"topic": "T"}]]          # two store hosts
    with MessageStore(cfg, writable=True, create=True) as st:
        for objs in cases:
            b = MessageBatch()
            b.extend_json(objs)
            res = st.put_batch(b)
            results = res.results()
            lines = Acks(True, False).lines(res).splitlines()
            assert lines == [json.dumps(r.as_dict(), ensure_ascii=False) for r in results]
            tsv = Acks(False, False).lines(res).splitlines()
            assert tsv == [f"{r.commitLogOffset}\t{r.queueOffset}\t{r.msgId}\t{r.uniqKey}" for r in results]


def _damaged_store(tmp_path):
    """A store with every kind of damage a walk reports: a bad body CRC, a length mismatch, a misplaced
    segment, a gap, a short segment."""
    rnd = random.Random(12)
    cfg = load_config(None, storePathRootDir=str(tmp_path / "s"), mappedFileSizeCommitLog=8192,
                      maxHashSlotNum=64, maxIndexNum=256)
    with MessageStore(cfg, writable=True, create=True) as st:
        b = MessageBatch()
        for i in range(400):
            b.add_json({**random_message(rnd, i), "body": "body %d" % i, "bodyEncoding": None})
        res = st.put_batch(b)
    d = tmp_path / "s" / "commitlog"
    segs = sorted(d.iterdir())
    assert len(segs) >= 8
    seg0 = bytearray(segs[0].read_bytes())
    p3, p5 = res.phy[3], res.phy[5]
    flags = struct.unpack_from(">i", seg0, p3 + 36)[0]
    seg0[p3 + 84 + (12 if flags & 0x10 else 0) + (12 if flags & 0x20 else 0) + 4] ^= 0xFF  # a body byte: bad CRC
    rec5 = check_message(bytes(seg0), p5).record
    plen_at = p5 + res.size[5] - len(rec5.properties_raw) - 2
    struct.pack_into(">h", seg0, plen_at, len(rec5.properties_raw) - 1)  # the fields no longer add up
    segs[0].write_bytes(bytes(seg0))
    segs[2].rename(d / "moved")
    segs[3].rename(segs[2])
    (d / "moved").rename(segs[3])
    segs[5].unlink()
    segs[6].write_bytes(segs[6].read_bytes()[:3000])
    return cfg, res, segs


def test_run_views_equal_the_one_record_views(tmp_path):
    from engine.broker.commitlog.logrun import RecordRun, lookup_runs, scan_runs
    from engine.views.recordjson import PROP_RE, run_table_rows, table_cells
    from engine.views.runjson import run_json_lines

    cfg, res, segs = _damaged_store(tmp_path)
    p5 = res.phy[5]
    with MessageStore(cfg) as st:
        flat = []
        for e in scan_runs(st.commitlog):  # a run's buffer is only valid until the walk leaves its segment
            if isinstance(e, RecordRun):
                assert run_json_lines(e) == [json_line(e.buf, p) for p in e.batch.pos.tolist()]
                cells = [table_cells(e.buf, p) for p in e.batch.pos.tolist()]
                assert run_table_rows(e) == [(e.seg_start + p, c[0], c[1], c[2], c[3], c[4], c[6], c[5])
                                             for p, c in zip(e.batch.pos.tolist(), cells)]
            flat += ([("VALID", e.seg_start + p) for p in e.batch.pos.tolist()] if isinstance(e, RecordRun)
                     else [(e.kind, e.offset)])
        walk = [(e.kind, e.offset) for e in st.commitlog.scan()]
        # The one-record walk gives up on the rest of a segment at a bad body CRC; scan_runs goes on after it.
        cut = walk.index(("CORRUPT", res.phy[3]))
        assert flat[:cut + 1] == walk[:cut + 1]
        assert set(walk) <= set(flat) and len(flat) > len(walk)
        assert {"MISPLACED", "GAP", "CORRUPT", "BLANK", "VALID", "LENGTH_MISMATCH"} <= {k for k, _ in flat}
        assert ("LENGTH_MISMATCH", p5) in flat and ("LENGTH_MISMATCH", p5) not in walk
        asked = [res.phy[7], res.phy[3], res.phy[0], 2 * 8192, 5, -1]
        out = []
        for item in lookup_runs(st.commitlog, asked):
            out += run_json_lines(item) if isinstance(item, RecordRun) else [item]
        assert [i for i, o in enumerate(out) if isinstance(o, tuple)] == [1, 3, 4, 5]
        for i in (0, 2):
            assert out[i] == json_line(*st.commitlog.valid_at(asked[i]))
        assert "misplaced" in out[3][1] and "CRC" in out[1][1]
    for text in ["a\x01b\x02c\x01d", "a\x01b\x01c\x02", "\x01x\x02k\x01\x02kk\x01v\x02", "", "ab\x02\x02k\x01v",
                 "x\x01\x01\x02y\x01z"]:
        assert dict(PROP_RE.findall(text)) == parse_properties(text)


def test_run_json_lines_fast_properties_path_equals_the_one_record_view(tmp_path):
    """Clean properties are turned into JSON by replacing the separators; anything json escapes, or a name given
    twice, takes the per-entry path. Both must give json_line's text."""
    from engine.broker.commitlog.logrun import RecordRun, scan_runs
    from engine.views.recordjson import CLEAN_PROPS, PROP_RE
    from engine.views.runjson import run_json_lines

    cfg = load_config(None, storePathRootDir=str(tmp_path / "s"))
    odd = [{"keys": " a  b  ", "tags": "T"}, {"keys": "   ", "tags": 'q"uote'}, {"keys": "x\\y", "tags": "t"},
           {"keys": "k", "properties": {"p": "tab\there", "ü": "ünïcode ☃", "del": "\x7f"}},
           {"keys": "k2 ", "uniqKey": "U1"}, {"properties": {"a": "b"}}, {}]
    with MessageStore(cfg, writable=True, create=True) as st:
        b = MessageBatch()
        for i, extra in enumerate(odd * 3):
            b.add_json({"topic": "T", "body": f"b{i}", **extra})
        st.put_batch(b)
    with MessageStore(cfg) as st:
        seen = 0
        for e in scan_runs(st.commitlog):  # a run's buffer is valid only while the walk is in its segment
            if isinstance(e, RecordRun):
                assert run_json_lines(e) == [json_line(e.buf, p) for p in e.batch.pos.tolist()]
                seen += len(e.batch.pos)
        assert seen == 3 * len(odd)
    # clean: CLEAN_PROPS matches and no name is given twice (PROP_RE finds one entry per \x02)
    dup = "a\x01b\x02a\x01c\x02"
    assert CLEAN_PROPS.fullmatch(dup) and len(dict(PROP_RE.findall(dup))) < dup.count("\x02")
    assert CLEAN_PROPS.fullmatch("a\x01b\x02c\x01d\x02") and CLEAN_PROPS.fullmatch("")
    assert not CLEAN_PROPS.fullmatch('a\x01"\x02') and not CLEAN_PROPS.fullmatch("a\x01b\x01c\x02")
