"""What recovery re-dispatches: consume-queue units (format §4.3) and index keys (format §5.8), emulated over
the walk's windows exactly as the broker's dispatchers would write them, with their de-duplication rules.

Both run twice with the same input: while planning (counting, and comparing index files with what is on
disk, so that a file that would come out byte-identical is kept) and while applying (writing). Memory: per
queue a few numbers; for the index one file's slot heads (engine.broker.index.write) and one window of keys.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.broker.config.brokerconf import CQ_STORE_UNIT_SIZE, BrokerConfig
from engine.broker.consumequeue.queue import ConsumeQueue
from engine.broker.commitlog.message import VALID, check_message
from engine.broker.mode import detect_mode
from engine.errors import InvalidArgumentError
from engine.broker.index.write import IndexFileBuilder
from engine.broker.commitlog.walk import TopicGroups, Window, key_columns
from engine.ops.recovery.scan import ScanHooks, multi_dispatch_units

KEEP, REBUILD, CREATE = "keep", "rebuild", "create"


# ==================================================================== consume queues

@dataclass
class QueueFeed:
    """A queue's dispatch state (ConsumeQueue after the cut) and what the replay put into it."""
    max_phys: int
    end: int | None                 # logical end; None: no file left, the first unit decides where it starts
    added: int = 0
    max_offset_after: int = 0
    writer: ConsumeQueue | None = None


class QueueDispatch(ScanHooks):
    """putMessagePositionInfo (format §4.3) for every record of the walk from `start` on, per queue.

    write=False only counts; write=True appends through engine.broker.consumequeue.queue.ConsumeQueue.
    """

    def __init__(self, cfg: BrokerConfig, states: dict[tuple[str, int], QueueFeed], start: int,
                 write: bool = False, placeholders: dict | None = None):
        self.cfg, self.states, self.start, self.write = cfg, states, start, write
        self.groups = TopicGroups()
        mode = detect_mode(cfg)
        #: (enableLmq, enableMultiDispatch) when the broker multi-dispatches (ConsumeQueue.multiDispatchLmqQueue)
        self.multi = (mode.lmq, True) if mode.multi_dispatch else None
        self.multi_problems: list[str] = []
        # (topic, queueId) -> {queue offset: (offset, size)}: a damaged record's placeholder is not dispatched
        # (it is a ROLLBACK record); its unit is written here, so the queue offsets after it stay the broker's.
        self.placeholders = placeholders or {}

    def window(self, w: Window) -> None:
        b = w.batch
        offs = w.offsets
        inv, keys = self.groups(w)
        tx = b.sys_flag & 0xC
        in_cq = (tx == 0x0) | (tx == 0x8)
        limit = np.array([self._state(k).max_phys for k in keys], dtype=np.int64)
        need = np.flatnonzero(in_cq & (offs >= self.start) & (offs + b.total > limit[inv]))
        if self.multi is None:
            for i in need.tolist():
                self._put(w, i, keys[inv[i]], int(b.queue_offset[i]))
            return
        # record by record, its own queue's unit then its multi-dispatch units (putMessagePositionInfoWrapper)
        extra = multi_dispatch_units(w, np.flatnonzero(in_cq & (offs >= self.start)), inv, keys, self.multi,
                                     self.multi_problems)
        todo = sorted([(i, 0, keys[inv[i]], int(b.queue_offset[i])) for i in need.tolist()]
                      + [(i, 1 + j, key, q) for j, (i, key, q) in enumerate(extra)], key=lambda t: (t[0], t[1]))
        for i, _, key, q in todo:
            self._put(w, i, key, q)

    def _state(self, key) -> QueueFeed:
        st = self.states.get(key)
        if st is None:
            st = self.states[key] = QueueFeed(-1, None)
        return st

    def _put(self, w: Window, i: int, key, qoff: int) -> None:
        b = w.batch
        st = self._state(key)
        phy, size = int(w.seg.start + b.pos[i]), int(b.total[i])
        if phy + size <= st.max_phys:
            return
        expected = qoff * CQ_STORE_UNIT_SIZE
        if st.end is None:
            st.end = expected
        elif qoff != 0 and expected < st.end:
            return  # a duplicate: the queue already has this offset
        stand_in = self.placeholders.get(key)
        while stand_in and st.end < expected and st.end // CQ_STORE_UNIT_SIZE in stand_in:
            p_off, p_size = stand_in[st.end // CQ_STORE_UNIT_SIZE]
            if p_off + p_size > phy or p_off < st.max_phys:
                break
            if self.write:
                self._write_unit(key, st, p_off, p_size, 0, st.end // CQ_STORE_UNIT_SIZE)
            self._advance(st, p_off + p_size)
        if self.write:
            self._write(w, i, key, st, phy, size, qoff)
        self._advance(st, phy + size)

    @staticmethod
    def _advance(st: QueueFeed, max_phys: int) -> None:
        st.end += CQ_STORE_UNIT_SIZE
        st.max_phys = max_phys
        st.added += 1
        st.max_offset_after = st.end // CQ_STORE_UNIT_SIZE

    def _write(self, w: Window, i: int, key, st: QueueFeed, phy: int, size: int, qoff: int) -> None:
        r = check_message(w.buf, int(w.batch.pos[i]), len(w.buf), check_crc=False, read_body=False)
        if r.status != VALID:
            raise InvalidArgumentError(f"the record at {phy} changed while recovering; run recover again")
        self._write_unit(key, st, phy, size, r.record.tags_code(), qoff)

    def _write_unit(self, key, st: QueueFeed, phy: int, size: int, tags_code: int, qoff: int) -> None:
        if st.writer is None:
            st.writer = ConsumeQueue(self.cfg.root, key[0], key[1], self.cfg.cq_file_size, writable=True)
        if not st.writer.put(phy, size, tags_code, qoff):
            raise InvalidArgumentError(f"consume queue {key[0]}/{key[1]} refused the unit for offset {phy}; "
                                       "run recover again")

    def close(self, sync: bool = True) -> list[Path]:
        """Force what was written; returns the queue directories touched (for their directory fsync)."""
        dirs = []
        for st in self.states.values():
            if st.writer is not None:
                if sync:
                    st.writer.sync()
                dirs.append(st.writer.dir)
                st.writer.close()
                st.writer = None
        return dirs


# ==================================================================== index

@dataclass
class FileOut:
    """One index file the replay produced (or will produce)."""
    position: int
    name: str = ""
    action: str = CREATE
    count: int = 0
    kept_items: int = 0             # items taken over from the existing file (a verified prefix)
    seed_phy: int = 0
    seed_ts: int = 0
    end_phy: int = 0
    end_ts: int = 0

    @property
    def added(self) -> int:
        return self.count - self.kept_items


@dataclass
class ReplayStart:
    position: int                   # index of the file the replay continues (or creates)
    offset: int | None              # commit-log offset of the first record fed (None: from the first record)
    skip: int = 0                   # keys of that record already in the file before it
    seed_phy: int = 0
    seed_ts: int = 0
    resume_from: Path | None = None  # an existing file whose first `resume_items` items are kept
    resume_items: int = 0
    resume_end_ts: int = 0


@dataclass
class IndexReplay(ScanHooks):
    """IndexService.buildIndex (format §5.8) from a start point, file by file.

    existing: the store's index files by position; mode "plan" compares every produced file with the existing
    file at its position (or only counts past them), mode "apply" writes the files whose planned action is not
    keep to `out(position)` and runs the rest in counting mode so the roll points stay the same.
    """
    cfg: BrokerConfig
    start: ReplayStart
    existing: list[Path]
    mode: str = "plan"
    planned: list[FileOut] | None = None
    out_path: object = None         # callable(position) -> Path, apply mode
    files: list[FileOut] = field(default_factory=list)
    builder: IndexFileBuilder | None = None
    keys_fed: int = 0

    def __post_init__(self):
        st = self.start
        self._skip = st.skip
        self._open(st.position, st.seed_phy, st.seed_ts)
        if st.resume_from is not None and st.resume_items:
            self.builder.resume(st.resume_from, st.resume_items, st.resume_end_ts,
                                same_file=self.builder.comparing and Path(st.resume_from) == self.builder.path)
            self.files[-1].count = st.resume_items
            self.files[-1].kept_items = st.resume_items

    def _open(self, position: int, seed_phy: int, seed_ts: int) -> None:
        fo = FileOut(position, seed_phy=seed_phy, seed_ts=seed_ts)
        kw = {}
        if self.mode == "plan":
            if position < len(self.existing):
                kw["compare"] = self.existing[position]
        else:
            plan = self.planned[position - self.start.position] if self.planned else None
            if plan is None or plan.action != KEEP:
                kw["path"] = self.out_path(position)
        self.builder = IndexFileBuilder(self.cfg.maxHashSlotNum, self.cfg.maxIndexNum, seed_phy, seed_ts, **kw)
        self.files.append(fo)

    def window(self, w: Window) -> None:
        st = self.start
        offs = w.offsets
        rows = None
        if st.offset is not None:
            if offs[-1] < st.offset:
                return
            if offs[0] < st.offset:
                rows = np.flatnonzero(offs >= st.offset)
        cols = key_columns(w, rows)
        nk = cols["nkeys"].astype(np.int64)
        hashes = cols["key_hash"]
        phy = np.repeat(cols["phy"].astype(np.int64), nk)
        ts = np.repeat(cols["ts"].astype(np.int64), nk)
        if self._skip and len(nk) and int(cols["phy"][0]) == st.offset:
            # Keys of the record at the start point that the file before already holds.
            drop = min(self._skip, int(nk[0]))
            hashes, phy, ts = hashes[drop:], phy[drop:], ts[drop:]
        self._skip = 0
        self._feed(hashes, phy, ts)

    def _feed(self, hashes, phy, ts) -> None:
        while len(hashes):
            took = self.builder.add(hashes, phy, ts)
            self.keys_fed += took
            hashes, phy, ts = hashes[took:], phy[took:], ts[took:]
            if len(hashes):  # full: roll to a file seeded from this one (getAndCreateLastIndexFile)
                b = self._close_current()
                self._open(self.files[-1].position + 1, b.end_phy, b.end_ts)

    def _close_current(self) -> IndexFileBuilder:
        b, fo = self.builder, self.files[-1]
        equal = b.finish()
        fo.count, fo.end_phy, fo.end_ts = b.count, b.end_phy, b.end_ts
        if self.mode == "plan":
            fo.action = (KEEP if equal else REBUILD) if fo.position < len(self.existing) else CREATE
        else:
            fo.action = self.planned[fo.position - self.start.position].action if self.planned else CREATE
        b.close()
        return b

    def finish(self) -> list[FileOut]:
        if self.builder is not None:
            if self.builder.count or self.files[-1].position < len(self.existing) or self.start.resume_items:
                self._close_current()
            else:
                self.builder.close()
                self.files.pop()  # IndexService creates a file only when it puts a key
            self.builder = None
        return self.files

    def abort(self) -> None:
        if self.builder is not None:
            self.builder.close()
            self.builder = None
