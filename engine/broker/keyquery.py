"""Query by key over the broker index (format §5.7), verified against the commit log.

query_raw answers as the broker does (its maxMsgsNumBatch clamp and decoded-time filter, hashes only);
query walks wider and keeps only the messages whose topic, key and store time really match.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.broker.message import VALID, MessageRecord
from engine.errors import InvalidArgumentError
from engine.java.lang import LONG_MAX, index_hash, java_string_hash


@dataclass
class QueryResult:
    messages: list[MessageRecord] = field(default_factory=list)
    candidates: int = 0              # index entries whose hash matched
    rejected: list[dict] = field(default_factory=list)  # candidates dropped, with the reason
    files_searched: int = 0


def query_raw(store, topic: str, key: str, max_num: int, begin: int, end: int) -> dict:
    """What the broker returns: queryOffset with its clamp and decoded-time filter, unverified."""
    clamped = min(max_num, store.config.maxMsgsNumBatch)
    idx = store.index
    offsets = idx.query_offsets(f"{topic}#{key}", clamped, begin, end)
    newest = idx.files[-1].header if idx.files else None
    return {"phyOffsets": offsets, "maxNum": clamped,
            "indexLastUpdateTimestamp": newest.endTimestamp if newest else 0,
            "indexLastUpdatePhyoffset": newest.endPhyOffset if newest else 0}


def query(store, topic: str, key: str, max_num: int = 64, begin: int = 0, end: int = LONG_MAX,
          unique: bool = False) -> QueryResult:
    """Messages whose topic and key really match, store time exactly within [begin, end].

    The walk is wider than the broker's: decoded index times are floored to whole seconds (and item 1 of a
    rolled file can decode later than real), so inclusion is decided on the message itself (§5.6, §5.7).
    """
    if max_num <= 0:
        raise InvalidArgumentError(f"--max must be positive, got {max_num}")
    if begin > end:
        raise InvalidArgumentError(f"time range is empty: begin {begin} is after end {end}")
    res = QueryResult()
    idx = store.index
    if not idx.files:
        res.rejected.append({"phyOffset": None, "reason": f"the store has no index files in {store.index_dir}"})
    key_string = f"{topic}#{key}"
    kh = index_hash(java_string_hash(key_string))
    seen: set[int] = set()
    walk_begin = begin - 1000
    for f in reversed(idx.files):
        if len(res.messages) >= max_num:
            break
        h = f.header
        # Header times are the real store times of the file's first and last items.
        if f.item_count and h.endTimestamp >= begin and h.beginTimestamp <= end:
            res.files_searched += 1
            for off, t in _chain_candidates(f, kh, walk_begin):
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
        if f.item_count and h.beginTimestamp < begin:
            break  # older files hold only older messages
    res.messages.sort(key=lambda r: r.physical_offset)
    return res


def _chain_candidates(f, kh: int, walk_begin: int):
    """(offset, decoded time) of chain items with hash kh, newest first, stopping once decoded times
    are surely older than the window. Bounded: a corrupt chain cannot loop."""
    hdr = f.header
    for _n, (ih, off, d, _prev) in f.chain(kh % f.hash_slot_num):
        if d < 0:
            return
        t = hdr.beginTimestamp + d * 1000
        if ih == kh:
            yield off, t
        if t < walk_begin:
            return


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


