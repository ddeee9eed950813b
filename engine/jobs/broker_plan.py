"""The broker-index job's plan (driver side): which keys the index service would put, and into which files.

From the scan summaries of the segment ranges, in commit-log order:

1. the "already indexed" state entering each range (buildIndex skips a record whose offset is below the
   current file's endPhyOffset, format §5.8 step 2; pitfall 23),
2. the prefix sum of accepted key counts and the cut into files of indexNum-1 entries,
3. each file's seed (the previous file's last entry, as IndexService rolls) and name (the store time of its
   first entry), probed from the few ranges that hold those entries, and the empty file the broker creates
   when a full file is followed by any dispatched record.

The runner answers the questions that need the columns (accepted_count, probe_range) where the scans live.

PlanStream gives the same plan range by range, in commit-log order, from each range's exact scan as it comes
(the inline runner): every step above depends only on the ranges before, but for the last file's trailing empty
file, settled at the end; so each range's entries go to their file as soon as the range is scanned, and the build
overlaps the scan of the ranges after it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional

import numpy as np

from engine.broker.layout import INDEX_NAME, index_file_name
from engine.jobs.framework import ReindexError

_INT64_MIN = np.iinfo(np.int64).min


@dataclass
class FilePlan:
    number: int              # position in the output, 0 = oldest
    first_entry: int         # global entry number of its item 1
    entries: int
    seed_phy: int = 0        # previous file's endPhyOffset / endTimestamp (0 = not seeded)
    seed_ts: int = 0
    name_ts: Optional[int] = None  # store time of its first entry (of the record that created it, if empty)
    name: str = ""


@dataclass
class Plan:
    hash_slot_num: int
    index_num: int
    ranges: list[dict]               # scan summaries of the segment ranges, in commit-log order
    e_in: list[int]                  # endPhyOffset of the current file when each range begins (format §5.8, step 2)
    filtered: list[bool]             # False: every keyed record of the range is indexed
    entry_start: list[int] = field(default_factory=list)
    entries: list[int] = field(default_factory=list)
    total_entries: int = 0
    files: list[FilePlan] = field(default_factory=list)
    trailing_probe: Optional[tuple[int, int]] = None  # (range, local entry) of the last entry, when T % cap == 0

    @property
    def cap(self) -> int:
        return self.index_num - 1

    def position(self, range_index: int) -> int:
        for i, d in enumerate(self.ranges):
            if d["index"] == range_index:
                return i
        raise KeyError(range_index)

    def state(self, range_index: int) -> tuple[int, bool]:
        """(endPhyOffset entering the range, whether its records need the already-indexed filter)."""
        i = self.position(range_index)
        return self.e_in[i], self.filtered[i]


def accepted_records(scan, e_in: int, needs_filter: bool = True) -> np.ndarray:
    """Records whose keys the index service puts: keyed, and not "already indexed".

    buildIndex skips a record whose offset is below the current file's endPhyOffset. That value is the offset
    of the last record whose keys were put (seeding a rolled file copies it), and a record is put only if its
    offset is >= it, so it equals the running maximum of the offsets of all earlier keyed records (floor 0).
    """
    keyed = scan.rec_nkeys > 0
    if not needs_filter or not keyed.any():
        return keyed
    kp = np.where(keyed, scan.rec_phy, _INT64_MIN)
    bound = np.empty_like(kp)
    bound[0] = e_in
    if len(kp) > 1:
        np.maximum.accumulate(kp[:-1], out=bound[1:])
        np.maximum(bound[1:], e_in, out=bound[1:])
    return keyed & (scan.rec_phy >= bound)


def accepted_count(scan, state: tuple[int, bool]) -> int:
    """Keys of the range's accepted records (a runner question: state = (e_in, needs_filter))."""
    return int(scan.rec_nkeys[accepted_records(scan, *state)].sum())


def plan_ranges(summaries: list[dict], hash_slot_num: int, index_num: int) -> Plan:
    """Step 1: the already-indexed state entering each range."""
    summaries = sorted(summaries, key=lambda d: d["index"])
    e = 0
    e_in, filt = [], []
    for d in summaries:
        e_in.append(e)
        if d["keyed_max"] is None:
            filt.append(False)
            continue
        filt.append(not (d["keyed_monotone"] and d["keyed_min"] >= e))
        e = max(e, d["keyed_max"])
    return Plan(hash_slot_num, index_num, summaries, e_in, filt)


def place_entries(plan: Plan, counts: Optional[dict[int, int]] = None) -> None:
    """Step 2: the prefix sum of accepted key counts, the files, and which entries must be probed."""
    starts, ents = [], []
    g = 0
    for d, f in zip(plan.ranges, plan.filtered):
        c = d["keys"] if not f else counts[d["index"]]
        starts.append(g)
        ents.append(c)
        g += c
    plan.entry_start, plan.entries, plan.total_entries = starts, ents, g
    cap = plan.cap
    plan.files = []
    if g == 0:
        if any(d["records"] for d in plan.ranges):  # the first dispatched record creates a file anyway
            first = next(d for d in plan.ranges if d["records"])
            plan.files.append(FilePlan(0, 0, 0, name_ts=first["first_rec_ts"]))
        return
    for k in range(-(-g // cap)):
        a = k * cap
        plan.files.append(FilePlan(k, a, min(cap, g - a)))
    if g % cap == 0:
        plan.trailing_probe = locate_entry(plan, g - 1)


def locate_entry(plan: Plan, g: int) -> tuple[int, int]:
    """(range index, entry number within the range's accepted entries) of global entry g."""
    i = int(np.searchsorted(np.array(plan.entry_start), g, side="right")) - 1
    while plan.entries[i] == 0 or g >= plan.entry_start[i] + plan.entries[i]:
        i -= 1  # several ranges can start at the same entry number; g lives in the one with entries
    return plan.ranges[i]["index"], g - plan.entry_start[i]


def probe_requests(plan: Plan) -> dict[int, tuple]:
    """Per range: (state, local entries whose values the driver needs, whether the trailing probe is there).

    Each file's first entry (its name) and the previous file's last (its seed); the trailing probe also
    asks for the store time of the record after the last entry."""
    want: dict[int, list[int]] = {}
    for fp in plan.files:
        if fp.entries == 0:
            continue
        for g in ([fp.first_entry - 1] if fp.first_entry else []) + [fp.first_entry]:
            rng, local = locate_entry(plan, g)
            want.setdefault(rng, []).append(local)
    if plan.trailing_probe:
        rng, local = plan.trailing_probe
        want.setdefault(rng, []).append(local)
    tp = plan.trailing_probe
    return {r: (plan.state(r), locs, tp[1] if tp and tp[0] == r else None) for r, locs in want.items()}


def entry_columns(scan, state: tuple[int, bool]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The range's accepted entries: (hash, phy, ts) per key, in put order (a record's keys share its offset and
    time: np.repeat, no index array). The hashes are the scan's own array when no record is filtered out."""
    return _entries(scan, accepted_records(scan, *state), state[1])


def _entries(scan, acc: np.ndarray, filtered: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    nk = scan.rec_nkeys
    hashes = scan.key_hash[np.repeat(acc, nk)] if filtered else scan.key_hash
    put = np.where(acc, nk, 0)
    return hashes, np.repeat(scan.rec_phy, put), np.repeat(scan.rec_ts, put)


def entry_records(scan, state: tuple[int, bool]) -> np.ndarray:
    """The record number of each accepted entry (entry_columns' order)."""
    acc = accepted_records(scan, *state)
    return np.repeat(np.arange(len(acc), dtype=np.int64), np.where(acc, scan.rec_nkeys, 0))


def probe_range(scan, request: tuple) -> dict:
    """Values of the requested local entries, and the store time of the record after the trailing one."""
    state, locals_, trailing = request
    hashes, phy, ts = entry_columns(scan, state)
    out = {"index": scan.index, "entries": {e: (int(phy[e]), int(ts[e])) for e in locals_}, "next_ts": None}
    if trailing is not None:
        r = int(entry_records(scan, state)[trailing])
        if r + 1 < scan.records:
            out["next_ts"] = int(scan.rec_ts[r + 1])
    return out


def finish_plan(plan: Plan, probes: list[dict]) -> None:
    """Step 3: seeds, names and the trailing empty file, from the probed values."""
    vals: dict[int, dict[int, tuple[int, int]]] = {p["index"]: p["entries"] for p in probes}

    def value(g):
        rng, local = locate_entry(plan, g)
        return vals[rng][local]

    for fp in plan.files:
        if fp.entries and fp.first_entry:
            fp.seed_phy, fp.seed_ts = value(fp.first_entry - 1)
        if fp.entries:
            fp.name_ts = value(fp.first_entry)[1]
    if plan.trailing_probe:
        # The last file is exactly full: the broker creates the next (empty, seeded) file when the next
        # record is dispatched, whatever that record is. Is there one?
        rng, _ = plan.trailing_probe
        nxt = next((p["next_ts"] for p in probes if p["index"] == rng), None)
        if nxt is None:
            later = [d for d in plan.ranges[plan.position(rng) + 1:] if d["records"]]
            nxt = later[0]["first_rec_ts"] if later else None
        if nxt is not None:
            phy, ts = value(plan.total_entries - 1)
            plan.files.append(FilePlan(len(plan.files), plan.total_entries, 0, phy, ts, nxt))
    for fp in plan.files:  # the seed only counts when positive (IndexFile constructor)
        fp.seed_phy = fp.seed_phy if fp.seed_phy > 0 else 0
        fp.seed_ts = fp.seed_ts if fp.seed_ts > 0 else 0
    prev = None
    for fp in plan.files:
        fp.name = prev = _file_name(fp.name_ts, prev)


def _file_name(name_ts: Optional[int], prev: Optional[str]) -> str:
    """The name of a file whose first entry was stored at name_ts, after the file named prev."""
    name = _safe_index_name(name_ts)
    if prev is not None and (len(name), name) <= (len(prev), prev):
        name = str(int(prev) + 1)  # equal or backwards times: keep names unique and in put order
    return name


def _safe_index_name(ts: Optional[int]) -> str:
    try:
        name = index_file_name(ts if ts is not None else 0)
        if INDEX_NAME.match(name):
            return name
    except (OverflowError, OSError, ValueError):
        pass
    return "0" * 17


def make_plan(runner, summaries: list[dict], hash_slot_num: int, index_num: int) -> Plan:
    """Plan from scan summaries; the runner answers the few questions that need the columns."""
    plan = plan_ranges(summaries, hash_slot_num, index_num)
    need = {d["index"]: plan.state(d["index"]) for d, f in zip(plan.ranges, plan.filtered) if f}
    place_entries(plan, runner.ask(accepted_count, need) if need else {})
    want = probe_requests(plan)
    finish_plan(plan, list(runner.ask(probe_range, want).values()) if want else [])
    return plan


class PlanStream:
    """make_plan's plan, range by range (see the module docstring). add(summary, scan) for every range of the
    exact walk in commit-log order returns the pieces of index files its entries make: (FilePlan, hashes, phy,
    ts) in put order (views of the scan's columns), the FilePlan final but for its entries, which grow with the
    pieces (a file is complete when it holds `cap` of them); finish() settles the last file and any empty file
    after it, and returns the Plan, equal to make_plan's over the same scans."""

    def __init__(self, hash_slot_num: int, index_num: int):
        self.plan = Plan(hash_slot_num, index_num, [], [], [])
        self._e = 0                        # endPhyOffset of the current file entering the next range
        self._last: Optional[tuple[int, int]] = None   # (phy, ts) of the last entry placed
        self._next_ts: Optional[int] = None  # store time of the first record after that entry's record
        self._first_ts: Optional[int] = None  # store time of the log's first dispatched record

    def add(self, summary: dict, scan) -> list[tuple[FilePlan, np.ndarray, np.ndarray, np.ndarray]]:
        p, d = self.plan, summary
        e_in = self._e  # step 1, as plan_ranges
        filt = False
        if d["keyed_max"] is not None:
            filt = not (d["keyed_monotone"] and d["keyed_min"] >= e_in)
            self._e = max(e_in, d["keyed_max"])
        p.ranges.append(d)
        p.e_in.append(e_in)
        p.filtered.append(filt)
        if self._first_ts is None and d["records"]:
            self._first_ts = d["first_rec_ts"]
        g0 = p.total_entries  # step 2, as place_entries
        if not d["keys"]:
            p.entry_start.append(g0)
            p.entries.append(0)
            if self._next_ts is None and d["records"]:
                self._next_ts = d["first_rec_ts"]
            return []
        acc = accepted_records(scan, e_in, filt)
        hashes, phy, ts = _entries(scan, acc, filt)
        cnt = len(hashes)
        p.entry_start.append(g0)
        p.entries.append(cnt)
        p.total_entries = g0 + cnt
        if cnt == 0:
            if self._next_ts is None and d["records"]:
                self._next_ts = d["first_rec_ts"]
            return []
        r = int(np.flatnonzero(acc)[-1])  # the record of the range's last entry
        self._next_ts = int(scan.rec_ts[r + 1]) if r + 1 < scan.records else None
        out, cap, a = [], p.cap, 0
        while a < cnt:
            k = (g0 + a) // cap
            if k == len(p.files):  # step 3: a file begins at this entry, seeded with the entry before
                seed = self._last if a == 0 else (int(phy[a - 1]), int(ts[a - 1]))
                self._open(FilePlan(k, g0 + a, 0), seed, int(ts[a]))
            b = min(cnt, (k + 1) * cap - g0)
            fp = p.files[k]
            fp.entries += b - a
            out.append((fp, hashes[a:b], phy[a:b], ts[a:b]))
            a = b
        self._last = (int(phy[-1]), int(ts[-1]))
        return out

    def _open(self, fp: FilePlan, seed: Optional[tuple[int, int]], name_ts: Optional[int]) -> FilePlan:
        files = self.plan.files
        if seed is not None:  # the seed only counts when positive (IndexFile constructor)
            fp.seed_phy, fp.seed_ts = max(seed[0], 0), max(seed[1], 0)
        fp.name_ts = name_ts
        fp.name = _file_name(name_ts, files[-1].name if files else None)
        files.append(fp)
        return fp

    def finish(self) -> Plan:
        """The plan, with the empty file a log without keys, or a last file exactly full followed by a record,
        makes the broker create."""
        p = self.plan
        g = p.total_entries
        if g == 0:
            if self._first_ts is not None:  # the first dispatched record creates a file anyway
                self._open(FilePlan(0, 0, 0), None, self._first_ts)
        elif g % p.cap == 0:
            p.trailing_probe = locate_entry(p, g - 1)
            if self._next_ts is not None:
                self._open(FilePlan(len(p.files), g, 0), self._last, self._next_ts)
        return p


def file_ranges(plan: Plan, k: int) -> list[int]:
    """The ranges whose entries go into index file k."""
    fp = plan.files[k]
    a, b = fp.first_entry, fp.first_entry + fp.entries
    return [d["index"] for d, s, n in zip(plan.ranges, plan.entry_start, plan.entries) if n and s < b and s + n > a]


def file_pieces(scan, plan: Plan) -> Iterator[tuple[int, tuple]]:
    """(file number, (range, hashes, phy, ts)) for every file this range's entries fall into."""
    i = plan.position(scan.index)
    cnt = plan.entries[i]
    if cnt == 0:
        return
    hashes, phy, ts = entry_columns(scan, (plan.e_in[i], plan.filtered[i]))
    if len(hashes) != cnt:
        raise ReindexError(f"range {scan.index}: {len(hashes)} entries, planned {cnt} (the data changed?)")
    g0 = plan.entry_start[i]
    cap = plan.cap
    a = 0
    while a < cnt:
        k = (g0 + a) // cap
        b = min(cnt, (k + 1) * cap - g0)
        if a == 0 and b == cnt:  # the whole range in one file: the columns as they are (the build only reads)
            yield k, (scan.index, hashes, phy, ts)
        else:  # a piece of a range cut between files: its own copy, not a view keeping the whole range alive
            yield k, (scan.index, hashes[a:b].copy(), phy[a:b].copy(), ts[a:b].copy())
        a = b
