"""Timer units resolved many at once (engine.timer.records.resolve_many) give resolve()'s answers, unit for unit,
on the golden timer stores and on faults injected into copies; the scans that use it answer as before whatever
their chunk size."""
from __future__ import annotations

import random

import numpy as np
import pytest

from engine.broker.commitlog.message import NAME_VALUE_SEPARATOR as NV, PROPERTY_SEPARATOR as PS, parse_properties
from engine.broker.config.brokerconf import load_config
from engine.timer import pending as pending_mod
from engine.timer.codec import TOMBSTONE_OFFSET, UNIT_SIZE
from engine.timer.pending import list_pending, scan_pending
from engine.timer.records import resolve, resolve_many
from engine.timer.store import TimerStore
from engine.timer.verify import check_timer_store
from helpers import patch_file, unpack_golden


def _units(ts: TimerStore) -> list[tuple[int, int]]:
    """(offsetPy, sizePy) of every unit of the timer-log files, whatever they hold, and of every
    rmq_sys_wheel_timer/0 unit."""
    out = []
    for seg in ts.log.segments:
        for _, units in ts.log.chunks(seg):
            out += zip(units["offset_py"].tolist(), units["size_py"].tolist())
    cq = ts.timer_queue
    if cq is not None:
        for q in range(cq.min_logic_offset // 20, cq.max_offset_in_queue):
            u = cq.unit(q)
            if u is not None:
                out.append((int(u[0]), int(u[1])))
    return out


def _records(ts: TimerStore) -> list[tuple[int, int]]:
    """(offset, size) of every record of the commit log, timer messages or not."""
    return [(e.offset, e.size) for e in ts.commitlog.scan(check_crc=False) if e.size > 0]


def _around(pairs: list[tuple[int, int]], end: int) -> list[tuple[int, int]]:
    """Each (offset, size) and the ways a unit can be wrong about it: inside the record, short or long by a byte,
    a tombstone, a negative size, past the end of the commit log, far outside it."""
    out = list(pairs)
    for off, size in pairs:
        out += [(off + 1, size), (off - 4, size), (off + 52, size), (off, size + 1), (off, size - 1), (off, 0),
                (off, -size), (TOMBSTONE_OFFSET, size), (end - size + 1, size), (end, size), (2 ** 62, size),
                (-(2 ** 62), size), (2 ** 63 - 8, size), (off, 2 ** 31 - 1)]
    return out


def _same_answers(ts: TimerStore, pairs: list[tuple[int, int]], end: int | None = None) -> int:
    """resolve_many and resolve agree on every pair (the commit log's end of data: `end`, else the store's)."""
    end = ts.commitlog_end if end is None else end
    offs = [o for o, _ in pairs]
    sizes = [s for _, s in pairs]
    for check_crc in (False, True):
        many = resolve_many(ts.commitlog, end, offs, sizes, check_crc)
        one = [resolve(ts.commitlog, end, o, s, check_crc) for o, s in pairs]
        assert len(many) == len(one)
        for (o, s), a, b in zip(pairs, many, one):
            assert a == b, (o, s, check_crc, a, b)
    return len(pairs)


@pytest.mark.parametrize("name", ["timer/t1", "timer/t2"])
def test_many_at_once_answer_as_one_at_a_time_on_the_golden_stores(tmp_path, name):
    store, conf = unpack_golden(name, tmp_path / "s")
    with TimerStore(load_config(conf)) as ts:
        units = _units(ts)
        assert units, "the golden store has timer units"
        good = ts.resolve_many([o for o, _ in units], [s for _, s in units])
        assert sum(r.ok for r in good) > 0
        assert _same_answers(ts, _around(units, ts.commitlog_end) + _around(_records(ts), ts.commitlog_end)) > 0


def test_many_at_once_answer_as_one_at_a_time_on_damaged_records(tmp_path):
    """Timer messages damaged in a copy of t1, one way each: body byte (a CRC mismatch), physical offset
    (misplaced), TOTALSIZE (size mismatch and a record that runs past the buffer), topic length past TOTALSIZE,
    magic code, properties (a __CRC32# property with digits check_message cannot read, a REAL_QID that is not a
    number): every answer is resolve()'s."""
    store, conf = unpack_golden("timer/t1", tmp_path / "s")
    with TimerStore(load_config(conf)) as ts:
        units = [(o, s) for o, s in _units(ts) if ts.resolve(o, s).ok]
        seg = ts.commitlog.segments[0]
        path, start = seg.path, seg.start
        rng = random.Random(7)
        victims = rng.sample(units, min(len(units), 9))
        records = {o: ts.commitlog.check_at(o, check_crc=False).record for o, _ in victims}
        end = ts.commitlog_end  # a damaged record ends the data where the walk of the last segment meets it
    (o0, s0), (o1, _), (o2, s2), (o3, s3), (o4, _), (o5, s5), (o6, s6), (o7, s7), (o8, s8) = victims

    def at(off: int, rel: int, data: bytes) -> None:
        patch_file(path, off - start + rel, data)

    at(o0, s0 - 10 - len(records[o0].properties_raw) - 40, b"\xff")          # inside the body: a CRC mismatch
    at(o1, 28, (o1 + 8).to_bytes(8, "big"))                                   # PHYSICALOFFSET: misplaced
    at(o2, 0, (s2 + 4).to_bytes(4, "big", signed=True))                       # TOTALSIZE: fields do not add up
    at(o3, 0, (10 ** 9).to_bytes(4, "big", signed=True))                      # TOTALSIZE past the segment
    at(o4, 4, b"\x00\x00\x00\x01")                                            # not a magic code
    r5 = records[o5]
    props = r5.properties_raw
    # the topic length byte (v1) or its low byte (v2): past TOTALSIZE
    topic_at = s5 - 2 - len(props) - len(r5.topic.encode())
    at(o5, topic_at - 1, b"\x7f")
    r6, r7 = records[o6], records[o7]
    # ten superscript twos are digits to str.isdigit, not to int(): check_message cannot read the CRC property;
    # the rest of the pair becomes a pair without a separator (dropped)
    for off, size, rec, name, new in ((o6, s6, r6, "UNIQ_KEY", b"__CRC32#\x01" + "\u00b2".encode() * 10 + b"\x02"),
                                      (o7, s7, r7, "REAL_QID", b"REAL_QID\x01x")):
        raw = rec.properties_raw
        i = raw.index(name.encode() + b"\x01")
        j = raw.index(b"\x02", i) if b"\x02" in raw[i:] else len(raw)
        assert len(new) <= j - i
        at(off, size - len(raw) + i, new.ljust(j - i, b"Z"))
    # a properties length that runs past TOTALSIZE
    at(o8, s8 - len(records[o8].properties_raw) - 2, (2 ** 15 - 1).to_bytes(2, "big"))
    with TimerStore(load_config(conf)) as ts:
        answers = {o: resolve(ts.commitlog, end, o, s, check_crc=True).kind for o, s in victims}
        assert {"body-crc", "not-a-record", "not-timer-message"} <= set(answers.values()), answers
        assert _same_answers(ts, _around(_units(ts), end), end) > 0


def test_the_scans_answer_the_same_whatever_their_chunk_size(tmp_path, monkeypatch):
    store, conf = unpack_golden("timer/t2", tmp_path / "s")
    cfg = load_config(conf)

    def answers():
        with list_pending(cfg) as pl:
            listed = [m.as_dict() for m in pl]
        with TimerStore(cfg) as ts:
            seen = []
            scan = scan_pending(ts, check_crc=True, on_unit=lambda u, res: seen.append((u.pos, res.kind, res.why)))
            rep = check_timer_store(ts, now=0, check_crc=True, result=scan)
            found = [f.__dict__ for f in rep.findings]
            return listed, seen, found, scan.rows.tolist(), scan.cancelled.tolist(), scan.unresolved, scan.markers

    base = answers()
    assert base[0] and base[1]
    for chunk, block in ((1, 1), (3, 5), (7, 2)):
        monkeypatch.setattr(pending_mod, "RESOLVE_CHUNK", chunk)
        monkeypatch.setattr(pending_mod, "ROWS_BLOCK", block)
        assert answers() == base


def test_properties_split_as_the_broker_reads_them():
    """parse_properties against the broker's index-based reading (format §2.5) on random texts of names, values
    and separators: only the first 0x01 of a pair splits it, pairs with an empty name or value are dropped, a later
    pair of the same name wins."""
    def broker(text: str) -> dict:
        out, i, n = {}, 0, len(text)
        while i < n:
            j = text.find(PS, i)
            j = n if j < 0 else j
            if j - i >= 3:
                k = text.find(NV, i)
                if i < k < j - 1:
                    out[text[i:k]] = text[k + 1:j]
            i = j + 1
        return out

    rng = random.Random(3)
    for _ in range(20000):
        text = "".join(rng.choice(["a", "b", NV, PS]) for _ in range(rng.randrange(0, 12)))
        want = broker(text)
        got = parse_properties(text)
        assert got == want and list(got) == list(want), repr(text)
    assert parse_properties(f"A{NV}1{PS}A{NV}{PS}{NV}x{PS}B{NV}2{NV}3") == {"A": "1", "B": f"2{NV}3"}
