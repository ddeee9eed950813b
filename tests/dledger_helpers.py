"""DLedger stores for the tests, written as DLedger 0.3.1.2 and RocketMQ's DLedgerCommitLog write them.

dledger_copy(file_store, dest) takes a file store (put through the CLI) and writes the same messages, in the same
order, as a DLedger store: each record's bytes as the file store holds them, with PHYSICALOFFSET = entry pos + 48
written into them as DLedgerCommitLog's append hook does; entries laid out by MmapFileList.preAppend (padding entry
when an entry + 8 bytes does not fit the rest of the file); one index unit per entry; the consume queues and the
index rebuilt with the new offsets by the engine's own writers; config/ and checkpoint copied.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from engine.broker.commitlog.message import VALID, blank_record
from engine.broker.config.brokerconf import load_config
from engine.broker.consumequeue.queue import ConsumeQueue
from engine.broker.dledger.entry import (BODY_OFFSET, INDEX_UNIT_SIZE, MIN_BLANK_LEN, encode_entry,
                                         encode_index_unit, padding)
from engine.broker.index.service import IndexService
from engine.broker.store import MessageStore

SELF_ID = "n0"


def records_of(cfg) -> list[tuple[int, bytes, object]]:
    """(offset, record bytes, decoded record) of every valid record of a file store, in log order."""
    out = []
    with MessageStore(cfg) as st:
        for e in st.walk():
            if e.kind == "BLANK":
                continue
            assert e.kind == VALID, e
            seg = st.commitlog.queue.find(e.offset)
            buf = st.commitlog.queue.buffer(seg)
            pos = e.offset - seg.start
            out.append((e.offset, bytes(buf[pos:pos + e.size]), e.record))
    return out


def write_entries(data_dir: Path, index_dir: Path, records: list[bytes], file_size: int, start: int = 0,
                  term: int = 1, index_file_size: int = INDEX_UNIT_SIZE * 64, first_index: int = 0) -> list[int]:
    """Entries holding `records` (PHYSICALOFFSET rewritten) from log offset `start`; their message offsets."""
    data_dir.mkdir(parents=True, exist_ok=True)
    index_dir.mkdir(parents=True, exist_ok=True)
    files: dict[int, bytearray] = {}
    units = bytearray()
    fstart, pos, offs = start, 0, []
    files[fstart] = bytearray(file_size)
    for i, rec in enumerate(records):
        size = BODY_OFFSET + len(rec)
        if size + MIN_BLANK_LEN > file_size - pos:
            files[fstart][pos:] = padding(file_size - pos)
            fstart, pos = fstart + file_size, 0
            files[fstart] = bytearray(file_size)
        at = fstart + pos
        body = bytearray(rec)
        body[28:36] = (at + BODY_OFFSET).to_bytes(8, "big", signed=True)  # the append hook's PHYSICALOFFSET
        entry = encode_entry(bytes(body), first_index + i, term, at)
        files[fstart][pos:pos + size] = entry
        units += encode_index_unit(at, size, first_index + i, term)
        offs.append(at + BODY_OFFSET)
        pos += size
    for s, buf in files.items():
        (data_dir / f"{s:020d}").write_bytes(bytes(buf))
    # index units at entry index * 32, in fixed-size files named by their start offset
    base = first_index * INDEX_UNIT_SIZE
    lo = base - base % index_file_size
    data = bytes(base - lo) + bytes(units)
    for k in range(0, max(len(data), 1), index_file_size):
        chunk = data[k:k + index_file_size]
        (index_dir / f"{lo + k:020d}").write_bytes(chunk + bytes(index_file_size - len(chunk)))
    return offs


def dledger_copy(file_store: Path, dest: Path, file_size: int = 4096, old_count: int = 0, term: int = 1,
                 hash_slots: int = 16, max_index: int = 64, checkpoint_committed: bool = True) -> dict[int, int]:
    """A DLedger store at dest/store (broker.conf at dest/broker.conf) with the messages of `file_store`; returns
    {file-store offset: DLedger-store offset}. old_count: that many first messages stay in a file commit log
    (commitlog/) that the broker switched from (its last file ended by setRecoverPosition's BLANK filler)."""
    src = load_config(None, storePathRootDir=str(file_store), mappedFileSizeCommitLog=file_size,
                      maxHashSlotNum=hash_slots, maxIndexNum=max_index)
    recs = records_of(src)
    root = dest / "store"
    root.mkdir(parents=True)
    mapping: dict[int, int] = {}
    dstart = 0
    if old_count:
        cl = root / "commitlog"
        cl.mkdir()
        old = recs[:old_count]
        last_end = old[-1][0] + len(old[-1][1])
        seg_of = {}
        for off, data, _ in old:
            s = off - off % file_size
            buf = seg_of.setdefault(s, bytearray(file_size))
            buf[off - s:off - s + len(data)] = data
            mapping[off] = off
        last = max(seg_of)
        wrote = last_end - last
        seg_of[last][wrote:wrote + 8] = blank_record(file_size - wrote)  # DLedgerCommitLog.setRecoverPosition
        for s, buf in seg_of.items():
            (cl / f"{s:020d}").write_bytes(bytes(buf))
        dstart = last + file_size  # dividedCommitlogOffset
    ddir = root / f"dledger-{SELF_ID}"
    rest = recs[old_count:]
    offs = write_entries(ddir / "data", ddir / "index", [r[1] for r in rest], file_size, dstart, term)
    for (off, _, _), new in zip(rest, offs):
        mapping[off] = new
    n = len(recs)
    if checkpoint_committed:
        (ddir / "checkpoint").write_text(f"endIndex={n - old_count - 1}\ncommittedIndex={n - old_count - 1}\n")
    for name in ("config", "checkpoint"):
        p = file_store / name
        if p.is_dir():
            shutil.copytree(p, root / name)
        elif p.exists():
            shutil.copy(p, root / name)
    # consume queues: the file store's units with the new offsets
    cq_src = file_store / "consumequeue"
    if cq_src.is_dir():
        for t in sorted(cq_src.iterdir()):
            for q in sorted(t.iterdir()):
                old_q = ConsumeQueue(file_store, t.name, int(q.name), src.cq_file_size)
                units = old_q.all_units()
                old_q.close()
                new_q = ConsumeQueue(root, t.name, int(q.name), src.cq_file_size, writable=True)
                for k, u in enumerate(units.tolist()):
                    new_q.put(mapping[u[0]], u[1], u[2], k)
                new_q.sync()
                new_q.close()
    idx = IndexService(root / "index", hash_slots, max_index, writable=True, clock=lambda: 1_700_000_000_000)
    for off, _, rec in recs:
        rec.physical_offset = mapping[off]
        idx.build_index(rec)
    idx.flush_all()
    idx.close()
    conf = dest / "broker.conf"
    conf.write_text(f"storePathRootDir={root}\nenableDLegerCommitLog=true\ndLegerGroup=g\ndLegerSelfId={SELF_ID}\n"
                    f"dLegerPeers={SELF_ID}-127.0.0.1:40911\nmappedFileSizeCommitLog={file_size}\n"
                    f"mappedFileSizeConsumeQueue={src.mappedFileSizeConsumeQueue}\nmaxHashSlotNum={hash_slots}\n"
                    f"maxIndexNum={max_index}\n")
    return mapping


def make_dledger_in_place(store: Path, tmp: Path, file_size: int = 4096, old_count: int = 0) -> dict[int, int]:
    """Turn a file store (put through the CLI) into the DLedger store holding the same messages (dledger_copy),
    at the same path; returns the offset mapping."""
    work = tmp / f"to-dledger-{old_count}"
    mapping = dledger_copy(store, work, file_size, old_count=old_count)
    shutil.rmtree(store)
    shutil.move(str(work / "store"), str(store))
    shutil.rmtree(work)
    return mapping
