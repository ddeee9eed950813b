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
from engine.broker.commitlog.log import MISPLACED
from engine.broker.commitlog.message import VALID, MessageRecord
from engine.errors import InvalidArgumentError
from engine.java.lang import INT_MAX, LONG_MAX, key_index_hash

MAX_LIMIT = 10_000_000  # --count: far beyond any real answer, small enough to refuse a typo


@dataclass
class QueryResult:
    messages: list[MessageRecord] = field(default_factory=list)
    candidates: int = 0              # index entries whose hash matched
    rejected: list[dict] = field(default_factory=list)  # candidates dropped, with the reason
    files_searched: int = 0
    damaged: list[DamagedIndexFile] = field(default_factory=list)  # files not used, or not used whole
    more: bool = False               # max_num cut the answer: at least one more message matches
    # commit-log damage under candidates: a segment file holding other data than its name says (misplaced)
    log_damage: list[str] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        return bool(self.damaged or self.log_damage)


@dataclass
class RawAnswer:
    """The broker's QueryOffsetResult, plus the files it could not be computed from."""
    phy_offsets: list[int]
    max_num: int
    index_last_update_timestamp: int
    index_last_update_phy_offset: int
    damaged: list[DamagedIndexFile] = field(default_factory=list)
    #: files the broker's walk left out by their header times although those do not bound their messages' times
    skipped_by_header: list[DamagedIndexFile] = field(default_factory=list)

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
        raise InvalidArgumentError(f"--count {max_num} is out of range 1..{MAX_LIMIT}")
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
                     damaged, header_skips(idx.files, begin, end))


def header_skips(files: list, begin: int, end: int) -> list[DamagedIndexFile]:
    """The files IndexService.queryOffset leaves out by their header times (not time-matched, or past the file
    whose begin time ends the walk) although those times do not bound their messages': a header that ends before
    it begins, or a file that ends after a newer file begins (the store time went back while it, or at the roll
    after it, was written; format §5.7)."""
    walked = set()
    for i in range(len(files) - 1, -1, -1):
        f = files[i]
        if f.is_time_matched(begin, end):
            walked.add(i)
        if f.header.beginTimestamp < begin:
            break
    out = []
    for i, f in enumerate(files):
        h = f.header
        if i in walked or not f.item_count:
            continue
        newer = files[i + 1].header if i + 1 < len(files) and files[i + 1].item_count else None
        if h.endTimestamp < h.beginTimestamp:
            why = (f"its header ends ({h.endTimestamp}) before it begins ({h.beginTimestamp}): store times went "
                   "back while it was written")
        elif newer is not None and h.endTimestamp > newer.beginTimestamp:
            why = (f"it ends ({h.endTimestamp}) after the next index file begins ({newer.beginTimestamp}): store "
                   "times went back")
        else:
            continue
        out.append(DamagedIndexFile(f.path, why))
    return out


def query(store, topic: str, key: str, max_num: int = 64, begin: int = 0, end: int = LONG_MAX,
          unique: bool = False) -> QueryResult:
    """Messages whose topic and key really match, store time exactly within [begin, end].

    The walk is wider than the broker's: decoded index times are floored to whole seconds (and item 1 of a
    rolled file can decode later than real), so inclusion is decided on the message itself (format §5.6, §5.7).
    It does not depend on the store times going forward either (a clock can step back): every file is searched
    whatever its header says, every chain is walked to its end, and an item is checked against the commit log
    unless its decoded time proves its message is outside the range (_ChainCandidates).
    """
    if max_num <= 0:
        raise InvalidArgumentError(f"--count must be positive, got {max_num}")
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
        # No file is left out by its header times: they bound its messages only while store times go forward.
        if f.item_count:
            res.files_searched += 1
            _search_file(store, f, kh, (topic, key, unique, begin, end), walk_max, res, seen)
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
    candidates = _ChainCandidates(f, kh, begin, end)
    for off in candidates:
        res.candidates += 1
        if off in seen:
            continue  # the same message indexed twice (pitfall 23)
        seen.add(off)
        ok, why, rec = _verify_candidate(store, off, topic, key, unique, begin, end, res)
        if ok:
            res.messages.append(rec)
            if len(res.messages) >= max_num:
                break
        else:
            res.rejected.append({"phyOffset": off, "reason": why})
    return candidates


class _ChainCandidates:
    """Offsets of the chain items with hash kh, newest first, whose message may lie in [begin, end], to the end of
    the chain: a walk that stops at the first decoded time before the range misses older items stored later when
    the store time went back. An item is left out only when its decoded time proves its message is outside the
    range (format §5.6): item 1 carries the header's begin time exactly; an item with timeDiff d > 0 was stored in
    [begin + d*1000, begin + d*1000 + 999] (d = INT_MAX: at or after its start); d = 0 means before begin + 1000,
    maybe long before (a negative difference is clamped to 0). Bounded whatever the bytes say (ChainWalk);
    `damage` says what broke the chain: an item of another slot, a negative timeDiff, a link to a newer item, a
    pointer out of range, a loop."""

    def __init__(self, f, kh: int, begin: int, end: int):
        self.f, self.kh, self.begin, self.end = f, kh, begin, end
        self.damage: Optional[str] = None

    def __iter__(self):
        f, kh, begin, end = self.f, self.kh, self.begin, self.end
        slot = kh % f.hash_slot_num
        fb = f.header.beginTimestamp
        walk = f.chain(slot)
        for n, (ih, off, d, _prev) in walk:
            if d < 0:
                self.damage = f"item {n} has a negative timeDiff {d}"
                return
            if ih < 0 or ih % f.hash_slot_num != slot:
                self.damage = f"item {n} (hash {ih}) does not belong to this slot's chain"
                return
            if ih == kh and _may_be_in_range(n, d, fb, begin, end):
                yield off
        self.damage = chain_damage(walk)


def _may_be_in_range(n: int, d: int, fb: int, begin: int, end: int) -> bool:
    """Whether item n (timeDiff d, in a file whose header begins at fb) can point at a message stored in [begin,
    end] (see _ChainCandidates)."""
    if fb <= 0:
        return True  # no begin time: timeDiffs are all 0 and say nothing
    if n == 1:
        return begin <= fb <= end
    lo = fb + d * 1000
    if d == 0:
        return begin < lo + 1000
    if d >= INT_MAX:
        return end >= lo
    return lo <= end and lo + 999 >= begin


def _misplaced_segment(store, off: int) -> Optional[str]:
    """Why the commit-log segment holding `off` holds other data than its name says (its first record states
    another offset: segments swapped or renamed), or None."""
    cl = store.commitlog
    seg = cl.queue.find(off)
    if seg is None or off == seg.start:
        return None
    r = cl.check_at(seg.start, check_crc=False)
    return r.reason if r.status == MISPLACED else None


def _verify_candidate(store, off: int, topic: str, key: str, unique: bool, begin: int, end: int,
                      res: Optional[QueryResult] = None):
    r = store.commitlog.check_at(off, check_crc=False)
    if r.status != VALID:
        why = r.reason if r.status == MISPLACED else _misplaced_segment(store, off)
        if why and res is not None and why not in res.log_damage:
            res.log_damage.append(why)  # the index may be right: the message is not where the log's files say
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
