"""The tiered-index job's plan (driver side): topic ids, queue base offsets, and the files the tiered
IndexStoreService would fill, from the scan summaries of the segment ranges in commit-log order.

* topic ids: from tieredStoreMetadata.json when the topic is there, else new ones after the metadata's
  topicSerialNumber / largest id (from 0 without metadata), in first-seen commit-log order;
* queue base offsets: the running sum of the sizes of each queue's copied records (tiered commit log from 0);
* files: IndexStoreService.putKey's loop over key counts only (_Planner): a key set that does not fit
  (FILE_FULL) goes whole to a new file, a put that fails (a key hashing to Integer.MIN_VALUE whose slot lies
  before the header, format §9.5) is retried twice, three attempts at most; each file named after the store
  time of its first message (probed from the range that holds it), kept increasing.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from engine.java.lang import INT_MIN, java_rem
from engine.jobs.framework import ReindexError
from engine.tiered.flat.metadata import TieredMetadata


@dataclass
class TieredFilePlan:
    number: int
    events: list            # (g0, g1, p): keyed messages g0..g1-1 put whole (p = -1), or the first p keys of g0
    entries: int            # items (indexItemCount)
    begin: int = 0          # begin timestamp = file name
    name: str = ""
    first: int = 0          # global keyed-message number of its first put


@dataclass
class TieredPlan:
    hash_slot_num: int
    index_num: int
    range_keyed_start: dict[int, int] = field(default_factory=dict)   # global number of a range's first keyed message
    range_keyed: dict[int, int] = field(default_factory=dict)
    range_topic_ids: dict[int, list[int]] = field(default_factory=dict)
    range_queue_base: dict[int, dict[tuple[int, int], int]] = field(default_factory=dict)
    files: list[TieredFilePlan] = field(default_factory=list)
    topic_ids: dict[str, int] = field(default_factory=dict)
    new_topics: list[str] = field(default_factory=list)
    total_entries: int = 0
    oversize_sets: int = 0      # key sets larger than a whole file: FILE_FULL everywhere, not indexed
    failed_sets: int = 0        # puts that ended in UNKNOWN_ERROR (a MIN_VALUE key before the header)


def metadata_topic_ids(meta: Optional[TieredMetadata]) -> tuple[dict[str, int], int]:
    """topic -> topicId from the tiered metadata, and the next id the broker would assign."""
    if meta is None:
        return {}, 0
    return meta.topic_ids(), meta.next_topic_id()


class _Planner:
    """The service's putKey loop over key counts only (IndexStoreService.putKey + IndexStoreFile.putKey)."""

    def __init__(self, index_num: int):
        self.m = index_num
        self.files: list[tuple[list, int]] = []
        self.events: list = []
        self.c = 0

    def roll(self):
        self.files.append((self.events, self.c))
        self.events, self.c = [], 0

    def add(self, g0: int, g1: int, p: int, n: int):
        ev = self.events
        if p < 0 and ev and ev[-1][2] < 0 and ev[-1][1] == g0:
            ev[-1] = (ev[-1][0], g1, -1)
        else:
            ev.append((g0, g1, p))
        self.c += n

    def run(self, g_base: int, nk: np.ndarray, cum: np.ndarray, j: int, stop: int):
        """Regular messages j..stop-1 (key set fits an empty file, no failing key): greedy FILE_FULL cuts."""
        m = self.m
        while j < stop:
            base = int(cum[j] - nk[j])
            e = min(int(np.searchsorted(cum, m - 1 - self.c + base, side="right")), stop)
            if e > j:
                self.add(g_base + j, g_base + e, -1, int(cum[e - 1]) - base)
                j = e
            if j < stop:  # message j does not fit: FILE_FULL, sealed; the retry goes to a new file
                self.roll()

    def irregular(self, g: int, k: int, p: Optional[int]) -> str:
        """At most three attempts, as the service does; p = keys written before the failing one."""
        for _ in range(3):
            if self.c + k >= self.m:
                self.roll()  # FILE_FULL (status SEALED): createNewIndexFile, then retry
                continue
            if p is None:
                self.add(g, g + 1, -1, k)
                return "ok"
            if p > 0:
                self.add(g, g + 1, p, p)
        return "full" if k >= self.m else "failed"

    def finish(self) -> list[tuple[list, int]]:
        self.roll()
        return [(ev, c) for ev, c in self.files if c > 0]


def plan_tiered(summaries: list[dict], hash_slot_num: int, index_num: int, topic_ids: dict[str, int],
                next_id: int) -> TieredPlan:
    """Topic ids, queue base offsets and the files, from the scan summaries."""
    summaries = sorted(summaries, key=lambda d: d["index"])
    plan = TieredPlan(hash_slot_num, index_num)
    _ids_and_bases(plan, summaries, topic_ids, next_id)
    bad_slot = java_rem(INT_MIN, hash_slot_num) <= -4  # a MIN_VALUE key makes the put fail (format §9.5)
    pl = _Planner(index_num)
    for d in summaries:
        g_base = plan.range_keyed_start[d["index"]]
        nk = np.frombuffer(zlib.decompress(d["nkeys_z"]), dtype="<u4").astype(np.int64)
        if len(nk) != d["keyed"]:
            raise ReindexError(f"range {d['index']}: key counts do not match the scan")
        if not len(nk):
            continue
        cum = np.cumsum(nk)
        irregular: dict[int, Optional[int]] = {}
        if bad_slot:
            for j, positions in d["min_hash"].items():
                irregular[int(j)] = min(positions)
        for j in np.flatnonzero(nk >= index_num).tolist():
            irregular.setdefault(j, None)
        j = 0
        for stop in sorted(irregular) + [len(nk)]:
            pl.run(g_base, nk, cum, j, stop)
            if stop < len(nk):
                outcome = pl.irregular(g_base + stop, int(nk[stop]), irregular[stop])
                plan.oversize_sets += outcome == "full"
                plan.failed_sets += outcome == "failed"
                j = stop + 1
    for n_, (events, c) in enumerate(pl.finish()):
        plan.files.append(TieredFilePlan(n_, events, c, first=events[0][0]))
    plan.total_entries = sum(fp.entries for fp in plan.files)
    return plan


def _ids_and_bases(plan: TieredPlan, summaries: list[dict], topic_ids: dict[str, int], next_id: int) -> None:
    """Topic ids in first-seen order, each queue's base offset entering each range, keyed-message numbers."""
    ids = dict(topic_ids)
    running: dict[tuple[str, int], int] = {}
    g = 0
    for d in summaries:
        i = d["index"]
        local_ids = []
        for t in d["topics"]:
            if t not in ids:
                ids[t] = next_id
                next_id += 1
                plan.new_topics.append(t)
            local_ids.append(ids[t])
        plan.range_topic_ids[i] = local_ids
        base = {}
        for t, q, size, _count in d["queues"]:
            key = (d["topics"][t], q)
            base[(t, q)] = running.get(key, 0)
            running[key] = running.get(key, 0) + size
        plan.range_queue_base[i] = base
        plan.range_keyed_start[i] = g
        plan.range_keyed[i] = d["keyed"]
        g += d["keyed"]
    seen = dict.fromkeys(t for d in summaries for t in d["topics"])
    plan.topic_ids = {t: ids[t] for t in seen}


def locate_keyed(plan: TieredPlan, g: int) -> tuple[int, int]:
    """(range index, local keyed-message number) of global keyed message g."""
    for i, s in plan.range_keyed_start.items():
        if s <= g < s + plan.range_keyed[i]:
            return i, g - s
    raise KeyError(g)


def probe_first_ts(scan, locals_: list[int]) -> dict:
    """Store times of the requested keyed messages of a range (a runner question)."""
    keyed = np.flatnonzero(scan.rec_nkeys > 0)
    return {"index": scan.index, "ts": {j: int(scan.rec_ts[keyed[j]]) for j in locals_}}


def name_files(plan: TieredPlan, probes: list[dict]) -> None:
    """Begin timestamp = store time of the file's first message, kept increasing and non-negative."""
    ts = {p["index"]: p["ts"] for p in probes}
    prev = None
    for fp in plan.files:
        rng, local = locate_keyed(plan, fp.first)
        b = max(0, ts[rng][local])
        if prev is not None and b <= prev:
            b = prev + 1
        fp.begin, fp.name = b, str(b)
        prev = b


def make_tiered_plan(runner, summaries: list[dict], hash_slot_num: int, index_num: int,
                     topic_ids: dict[str, int], next_id: int) -> TieredPlan:
    plan = plan_tiered(summaries, hash_slot_num, index_num, topic_ids, next_id)
    want: dict[int, list[int]] = {}
    for fp in plan.files:
        rng, local = locate_keyed(plan, fp.first)
        want.setdefault(rng, []).append(local)
    name_files(plan, list(runner.ask(probe_first_ts, want).values()) if want else [])
    return plan


def file_ranges(plan: TieredPlan, k: int) -> list[int]:
    """The ranges whose keyed messages are put into tiered file k."""
    events = plan.files[k].events
    lo, hi = min(e[0] for e in events), max(e[1] for e in events)
    return [i for i, s in plan.range_keyed_start.items() if plan.range_keyed[i] and s < hi and s + plan.range_keyed[i] > lo]
