"""Query by key over the broker index (format §5.7), verified against the commit log.

query_raw answers as the broker does (its maxMsgsNumBatch clamp and decoded-time filter, hashes only);
query walks wider and keeps only the messages whose topic, key and store time really match.

Both answer from the healthy index files and list the others in `damaged` (a file that could not be opened as
an index file, one whose header cannot be the broker's, one whose chain for the key is broken): the answer is
then partial, and the CLI says so and exits 3. engine.broker.store.query_store is the entry point the CLI calls.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from engine.broker.index.file import chain_damage
from engine.broker.index.service import DamagedIndexFile
from engine.broker.commitlog.message import VALID, MessageRecord
from engine.errors import InvalidArgumentError
from engine.java.lang import LONG_MAX, key_index_hash

MAX_LIMIT = 10_000_000  # --max: far beyond any real answer, small enough to refuse a typo


@dataclass
class QueryResult:
    messages: list[MessageRecord] = field(default_factory=list)
    candidates: int = 0              # index entries whose hash matched
    rejected: list[dict] = field(default_factory=list)  # candidates dropped, with the reason
    files_searched: int = 0
    damaged: list[DamagedIndexFile] = field(default_factory=list)  # files not used, or not used whole
    more: bool = False               # max_num cut the answer: at least one more message matches

    @property
    def partial(self) -> bool:
        return bool(self.damaged)


@dataclass
class RawAnswer:
    """The broker's QueryOffsetResult, plus the files it could not be computed from."""
    phy_offsets: list[int]
    max_num: int
    index_last_update_timestamp: int
    index_last_update_phy_offset: int
    damaged: list[DamagedIndexFile] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        return bool(self.damaged)

    def as_dict(self) -> dict:
        return {"phyOffsets": self.phy_offsets, "maxNum": self.max_num,
                "indexLastUpdateTimestamp": self.index_last_update_timestamp,
                "indexLastUpdatePhyoffset": self.index_last_update_phy_offset,
                "damagedFiles": [d.as_dict() for d in self.damaged]}


def check_query_args(max_num: int, begin: int, end: int) -> None:
    if not 0 < max_num <= MAX_LIMIT:
        raise InvalidArgumentError(f"--max {max_num} is out of range 1..{MAX_LIMIT}")
    if begin > end:
        raise InvalidArgumentError(f"time range is empty: begin {begin} is after end {end}")


def query_raw(store, topic: str, key: str, max_num: int, begin: int, end: int) -> RawAnswer:
    """What the broker returns: queryOffset with its clamp and decoded-time filter, unverified."""
    clamped = min(max_num, store.config.maxMsgsNumBatch)
    idx = store.index
    damaged = list(idx.damaged)
    offsets = idx.query_offsets(f"{topic}#{key}", clamped, begin, end, damaged)
    newest = idx.files[-1].header if idx.files else None
    return RawAnswer(offsets, clamped, newest.endTimestamp if newest else 0, newest.endPhyOffset if newest else 0,
                     damaged)


def query(store, topic: str, key: str, max_num: int = 64, begin: int = 0, end: int = LONG_MAX,
          unique: bool = False) -> QueryResult:
    """Messages whose topic and key really match, store time exactly within [begin, end].

    The walk is wider than the broker's: decoded index times are floored to whole seconds (and item 1 of a
    rolled file can decode later than real), so inclusion is decided on the message itself (format §5.6, §5.7).
    """
    if max_num <= 0:
        raise InvalidArgumentError(f"--max must be positive, got {max_num}")
    if begin > end:
        raise InvalidArgumentError(f"time range is empty: begin {begin} is after end {end}")
    idx = store.index
    res = QueryResult(damaged=list(idx.damaged))
    if not idx.files and not idx.damaged:
        res.rejected.append({"phyOffset": None, "reason": f"the store has no index files in {store.index_dir}"})
    kh = key_index_hash(f"{topic}#{key}")
    seen: set[int] = set()
    walk_max = max_num + 1  # one more than asked: whether max_num cut the answer (res.more)
    for f in reversed(idx.files):
        if len(res.messages) >= walk_max:
            break
        h = f.header
        # Header times are the real store times of the file's first and last items.
        if f.item_count and h.endTimestamp >= begin and h.beginTimestamp <= end:
            res.files_searched += 1
            _search_file(store, f, kh, (topic, key, unique, begin, end), walk_max, res, seen)
        if f.item_count and h.beginTimestamp < begin:
            break  # older files hold only older messages
    if len(res.messages) > max_num:
        del res.messages[max_num:]  # in walk order: the one past max_num is the oldest found
        res.more = True
    res.messages.sort(key=lambda r: r.physical_offset)
    return res


def _search_file(store, f, kh: int, want: tuple, max_num: int, res: QueryResult, seen: set) -> None:
    """Verify the file's candidates for the key until max_num messages are found; note a broken chain."""
    candidates = _verify_chain(store, f, kh, want, max_num, res, seen)
    if candidates.damage is not None and len(res.messages) < max_num and f.refresh_header(wait=True):
        candidates = _verify_chain(store, f, kh, want, max_num, res, seen)  # a writer appended meanwhile
    if candidates.damage is not None:
        res.damaged.append(DamagedIndexFile(f.path, f"slot {kh % f.hash_slot_num}: {candidates.damage}"))


def _verify_chain(store, f, kh: int, want: tuple, max_num: int, res: QueryResult, seen: set) -> "_ChainCandidates":
    topic, key, unique, begin, end = want
    candidates = _ChainCandidates(f, kh, begin - 1000)
    for off in candidates:
        res.candidates += 1
        if off in seen:
            continue  # the same message indexed twice (pitfall 23)
        seen.add(off)
        ok, why, rec = _verify_candidate(store, off, topic, key, unique, begin, end)
        if ok:
            res.messages.append(rec)
            if len(res.messages) >= max_num:
                break
        else:
            res.rejected.append({"phyOffset": off, "reason": why})
    return candidates


class _ChainCandidates:
    """Offsets of the chain items with hash kh, newest first, until decoded times are surely older than the
    window (walk_begin). Bounded whatever the bytes say (ChainWalk); `damage` says what broke the chain: an item
    of another slot, a negative timeDiff, a link to a newer item, a pointer out of range, a loop."""

    def __init__(self, f, kh: int, walk_begin: int):
        self.f, self.kh, self.walk_begin = f, kh, walk_begin
        self.damage: Optional[str] = None

    def __iter__(self):
        f, kh = self.f, self.kh
        slot = kh % f.hash_slot_num
        begin_ts = f.header.beginTimestamp
        walk = f.chain(slot)
        for n, (ih, off, d, _prev) in walk:
            if d < 0:
                self.damage = f"item {n} has a negative timeDiff {d}"
                return
            if ih < 0 or ih % f.hash_slot_num != slot:
                self.damage = f"item {n} (hash {ih}) does not belong to this slot's chain"
                return
            t = begin_ts + d * 1000
            if ih == kh:
                yield off
            if t < self.walk_begin:
                return
        self.damage = chain_damage(walk)


def _verify_candidate(store, off: int, topic: str, key: str, unique: bool, begin: int, end: int):
    r = store.commitlog.check_at(off, check_crc=False)
    if r.status != VALID:
        return False, f"no valid message at offset ({r.reason or r.status})", None
    rec = r.record
    if rec.physical_offset != off:
        return False, f"record at {off} says it is at {rec.physical_offset}", None
    if rec.topic != topic:
        return False, f"hash collision: topic is {rec.topic!r}", None
    if unique:
        if rec.uniq_key != key:
            return False, "hash collision: different UNIQ_KEY", None
    elif key not in rec.keys:
        return False, "hash collision: key not among the message's KEYS", None
    if not begin <= rec.store_timestamp <= end:
        return False, "store time outside the window", None
    return True, "", rec
