"""The bulk form of engine.broker.index.keys: the keys of thousands of decoded records at once, as numpy columns.

engine.broker.commitlog.records.decode_segment gives each record's topic and properties as byte ranges of a segment
buffer. This module finds UNIQ_KEY and KEYS in those ranges, splits KEYS, and hashes "topic#key" as Java's
String.hashCode does, for a whole window of records in a few array operations. The answers are those of the
one-record rules (broker_index_keys and tiered_key_set over check_message's properties); tests/ checks both
against them on fuzzed properties.

Bytes stand for text here: 0x01, 0x02, 0x20 and the ASCII property names are single bytes that UTF-8 decoding
(even with replacement characters) never merges into anything else, so searching and splitting the bytes
equals searching and splitting the decoded text (format §2.5). A byte is one UTF-16 unit only when it is ASCII:
ranges holding other bytes are hashed through their decoded text, one by one (rare in practice).
"""
from __future__ import annotations

import numpy as np

from engine.broker.commitlog.message import PROP_KEYS, PROP_UNIQ_KEY
from engine.broker.index.keys import tiered_key_set
from engine.java.lang import java_string_hash

UNIQ_KEY_ENTRY = b"UNIQ_KEY\x01"
KEYS_ENTRY = b"KEYS\x01"
MATRIX_BUDGET = 1 << 24  # bytes per copied (rows x width) matrix: bounds the memory of one step
_ASCII_WHITESPACE = np.zeros(256, dtype=bool)  # Character.isWhitespace below 0x80
_ASCII_WHITESPACE[[0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x1F, 0x20]] = True
_EMPTY = np.empty(0, dtype=np.int64)


# ============================================================================ byte ranges

def pow31(n: int) -> np.ndarray:
    """31^k mod 2^32 for k = 0..n, as uint32."""
    p = np.full(n + 1, 31, dtype=np.uint32)
    p[0] = 1
    return np.cumprod(p, dtype=np.uint32)


def by_length(lengths: np.ndarray) -> np.ndarray:
    """The stable order of ranges by length: a counting (radix) sort of 16-bit lengths where they fit, which is
    linear, instead of a merge sort of 64-bit ones; same order either way."""
    if len(lengths) and 0 <= int(lengths.min()) and int(lengths.max()) < 1 << 16:
        return np.argsort(lengths.astype(np.uint16), kind="stable")
    return np.argsort(lengths, kind="stable")


def gather_rows(b: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """b[start:start+width] for each start (all within b), as a (k, width) copy. The buffer is viewed as
    overlapping items of `width` bytes, so each row is copied as one item: about twice as fast as fancy
    indexing a sliding-window view, which copies byte by byte."""
    n = len(b)
    if width <= 0 or width > n or not b.flags.c_contiguous or b.dtype != np.uint8:
        return np.lib.stride_tricks.sliding_window_view(b, width)[starts]
    rows = np.ndarray((n - width + 1,), dtype=np.dtype((np.void, width)), buffer=b, strides=(1,))
    return rows[starts].view(np.uint8).reshape(len(starts), width)


def hash_ranges(b: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """hashCode of byte ranges read in place (as if each byte were one UTF-16 unit), and whether each is ASCII.

    Ranges are grouped by length; a group is an (m, L) matrix copied out of a sliding-window view of the
    buffer and reduced against the powers of 31 in uint32 (Java int wrap-around).
    """
    m = len(starts)
    h = np.zeros(m, dtype=np.uint32)
    ascii_ = np.ones(m, dtype=bool)
    if m == 0:
        return h, ascii_
    order = by_length(lengths)
    srt = lengths[order]
    cuts = np.flatnonzero(srt[1:] != srt[:-1]) + 1
    for a0, b0 in zip(np.concatenate(([0], cuts)).tolist(), np.concatenate((cuts, [m])).tolist()):
        length = int(srt[a0])
        if length <= 0:
            continue
        sel = order[a0:b0]
        weights = np.array([pow(31, length - 1 - c, 2**32) for c in range(length)], dtype=np.uint32)
        step = max(1, (1 << 22) // length)
        for a in range(0, len(sel), step):
            rows = sel[a:a + step]
            mat = gather_rows(b, starts[rows], length)
            h[rows] = np.einsum("ij,j->i", mat, weights, dtype=np.uint32, casting="unsafe")
            if mat.max() >= 0x80:  # one flat pass first: a reduction along short rows costs far more
                ascii_[rows] = mat.max(axis=1) < 0x80
    return h, ascii_


def row_matrix(b: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """b[start:start+width] for each start, as a (k, width) copy; rows running past the end are zero-padded."""
    n = len(b)
    over = starts + width > n
    if not over.any():
        return gather_rows(b, starts, width)
    out = np.zeros((len(starts), width), dtype=b.dtype)
    ok = ~over
    if ok.any():
        out[ok] = gather_rows(b, starts[ok], width)
    base = int(starts[over].min())
    tail = np.zeros(n - base + width, dtype=b.dtype)
    tail[:n - base] = b[base:]
    out[over] = np.lib.stride_tricks.sliding_window_view(tail, width)[starts[over] - base]
    return out


def length_batches(lengths: np.ndarray, budget: int = MATRIX_BUDGET):
    """Row indices grouped by similar length (sorted), each batch's rows x max length within the budget."""
    order = by_length(lengths)
    srt = lengths[order]
    a, n = 0, len(order)
    while a < n:
        width = int(srt[min(n - 1, a + max(1, budget // max(1, int(srt[a]))) - 1)])
        step = max(1, budget // max(1, width))
        b_ = min(n, a + step)
        yield order[a:b_], max(1, int(srt[b_ - 1]))
        a = b_


def distinct_ranges(buf, b: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
    """Group byte ranges by content: (group number per range, each group's bytes), groups numbered in the
    order of their first range."""
    m = len(starts)
    if m == 0:
        return np.empty(0, dtype=np.int64), []
    h, _ = hash_ranges(b, starts, lengths)
    key = lengths.astype(np.int64) << 32 | h.astype(np.int64)
    uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
    group = np.empty(m, dtype=np.int64)
    values: list[bytes] = []
    by_value: dict[bytes, int] = {}

    def number(v: bytes) -> int:
        if v not in by_value:
            by_value[v] = len(values)
            values.append(v)
        return by_value[v]

    for u in range(len(uniq)):
        members = order[bounds[u]:bounds[u + 1]]
        f = int(first[u])
        rep = bytes(buf[int(starts[f]):int(starts[f] + lengths[f])])
        if len(rep):
            same = (row_matrix(b, starts[members], len(rep)) == np.frombuffer(rep, np.uint8)).all(axis=1)
        else:
            same = np.ones(len(members), dtype=bool)
        group[members[same]] = number(rep)
        for r in members[~same].tolist():  # equal hash and length but other bytes: rare
            group[r] = number(bytes(buf[int(starts[r]):int(starts[r] + lengths[r])]))
    first_at = np.full(len(values), m, dtype=np.int64)
    np.minimum.at(first_at, group, np.arange(m))
    renum = np.empty(len(values), dtype=np.int64)
    by_first = np.argsort(first_at, kind="stable")
    renum[by_first] = np.arange(len(values))
    return renum[group], [values[i] for i in by_first.tolist()]


def _ascending(distinct: np.ndarray, n: int) -> np.ndarray:
    """The order that sorts `distinct` (distinct integers in [0, n)), by one scatter instead of a sort."""
    at = np.full(n, -1, dtype=np.int64)
    at[distinct] = np.arange(len(distinct))
    return at[at >= 0]


def _grouped(owner: np.ndarray, rank: np.ndarray, n: int) -> np.ndarray:
    """The order that sorts items by (owner, rank) when each owner in [0, n) holds ranks 0..count-1 exactly
    once: each item's place is its owner's offset plus its rank (no sort)."""
    count = np.bincount(owner, minlength=n)
    offset = np.cumsum(count) - count
    order = np.empty(len(owner), dtype=np.int64)
    order[offset[owner] + rank] = np.arange(len(owner))
    return order


# ============================================================================ properties

def _last_value(Pf: np.ndarray, words: np.ndarray, width: int, cr, cc, nxt, lead: np.ndarray, name: bytes):
    """For entries starting at row cr, column cc of the flattened (rows, width) matrix Pf (sorted by row, then
    column) whose name is `name` minus its 0x01 and whose value is non-empty: the last one per row, as
    (rows, value start column, value length). words[i] is Pf[i:i+8] as a little-endian uint64; lead is each
    entry's first byte."""
    k = len(name)
    idx = np.flatnonzero((lead == name[0]) & (nxt - 1 - cc > k))  # non-empty value after "NAME\x01"
    base = cr[idx] * width + cc[idx]
    head = name[:8]  # the first 8 bytes in one comparison, the rest byte by byte
    hit = (words[base] & np.uint64((1 << (8 * len(head))) - 1)) == np.uint64(int.from_bytes(head, "little"))
    idx, base = idx[hit], base[hit]
    for j in range(len(head), k):
        hit = Pf[base + j] == name[j]
        idx, base = idx[hit], base[hit]
    if len(idx) == 0:
        return idx, idx, idx
    r = cr[idx]
    last = idx[np.append(r[1:] != r[:-1], True)]
    return cr[last], cc[last] + k, nxt[last] - 1 - cc[last] - k


def _entries(P: np.ndarray, pl: np.ndarray):
    """Entry starts (row, column) of each row's properties P[r, :pl[r]], sorted, and where each entry ends."""
    k, width = P.shape
    sep = np.flatnonzero(P.reshape(-1) == 2)
    sr, sc = np.divmod(sep, width)
    inside = sc < pl[sr]
    sr, sc = sr[inside], sc[inside]
    # Column 0 of every row, then one past each separator, merged without sorting: row r's column 0 comes
    # after the r earlier rows' starts and their separators.
    total = k + len(sr)
    cr = np.empty(total, dtype=np.int64)
    cc = np.empty(total, dtype=np.int64)
    per_row = np.bincount(sr, minlength=k)  # separators before row r: the counts of rows < r (sr ascends)
    vpos = np.arange(k)
    vpos[1:] += np.cumsum(per_row[:-1])
    cr[vpos], cc[vpos] = np.arange(k), 0
    spos = np.arange(len(sr)) + sr + 1
    cr[spos], cc[spos] = sr, sc + 1
    nxt = np.empty_like(cc)  # each entry ends at its separator (the next start - 1) or at the end of the row
    nxt[:-1] = np.where(cr[1:] == cr[:-1], cc[1:], pl[cr[:-1]] + 1)
    nxt[-1] = pl[cr[-1]] + 1
    return cr, cc, nxt


def property_values(b: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                    names: tuple[bytes, ...] = (UNIQ_KEY_ENTRY, KEYS_ENTRY)) -> list[tuple]:
    """The value of each named property in each properties range b[start:start+length], per name as
    (range number, value start in b, value length), ranges ascending.

    As the 4.9.1+/5.x parser reads them (format §2.5): an entry starts at 0 or after 0x02 and ends before the
    next 0x02; its name ends at its first 0x01; empty values are dropped; the last entry with a name wins.
    `names` are given with their 0x01.
    """
    out: list[list] = [[] for _ in names]
    for rows, width in length_batches(lengths):
        P = row_matrix(b, starts[rows], width)
        cr, cc, nxt = _entries(P, lengths[rows])
        Pf = np.zeros(P.size + 8, dtype=np.uint8)  # 8 bytes of padding: a word can be read at every entry
        Pf[:P.size] = P.reshape(-1)
        words = np.ndarray((P.size + 1,), dtype="<u8", buffer=Pf, strides=(1,))
        lead = Pf[cr * width + cc]
        for j, name in enumerate(names):
            r, c, ln = _last_value(Pf, words, width, cr, cc, nxt, lead, name)
            out[j].append((rows[r], starts[rows[r]] + c, ln))
    result = []
    for parts in out:
        if not parts:
            result.append((_EMPTY, _EMPTY, _EMPTY))
            continue
        rec = np.concatenate([p[0] for p in parts]).astype(np.int64)
        order = _ascending(rec, len(starts))
        result.append((rec[order], np.concatenate([p[1] for p in parts]).astype(np.int64)[order],
                       np.concatenate([p[2] for p in parts]).astype(np.int64)[order]))
    return result


def split_values(b: np.ndarray, starts: np.ndarray, lengths: np.ndarray, keep_empty: bool):
    """Tokens of values split on single spaces, as (value number, token number, token start, token length),
    in value order then token order.

    keep_empty=False: empty tokens skipped (the broker IndexService). keep_empty=True: Java's split(" "):
    empty tokens kept, trailing empty tokens dropped (the tiered dispatcher; values are never blank there).
    """
    outs = ([], [], [], [])
    for rows, width in length_batches(lengths):
        K = row_matrix(b, starts[rows], width)
        inside = np.arange(width) < lengths[rows][:, None]
        if keep_empty:
            space = (K == 0x20) & inside
            word_end = np.where(inside & ~space, np.arange(1, width + 1), 0).max(axis=1)  # after the last non-space
            sr, sc = np.divmod(np.flatnonzero(space.reshape(-1)), width)
            # A token starts at column 0 and after every space; it ends at the next space or the value's end.
            tr = np.concatenate((np.arange(len(rows)), sr))
            tc = np.concatenate((np.zeros(len(rows), dtype=np.int64), sc + 1))
            order = np.lexsort((tc, tr))
            tr, tc = tr[order], tc[order]
            ec = np.empty_like(tc)
            ec[:-1] = np.where(tr[1:] == tr[:-1], tc[1:] - 1, lengths[rows][tr[:-1]])
            ec[-1] = lengths[rows][tr[-1]]
            keep = tc < word_end[tr]  # trailing empty tokens start at or after the last non-space
            tr, tc, ec = tr[keep], tc[keep], ec[keep]
        else:
            word = (K != 0x20) & inside
            edge = np.zeros((len(rows), width + 1), dtype=np.int8)  # +1 where a token starts, -1 past its end
            edge[:, :-1] += word
            edge[:, 1:] -= word
            tr, tc = np.divmod(np.flatnonzero(edge.reshape(-1) == 1), width + 1)
            ec = np.flatnonzero(edge.reshape(-1) == -1) % (width + 1)
        new_row = np.ones(len(tr), dtype=bool)  # tokens of a row are consecutive (tr ascends)
        np.not_equal(tr[1:], tr[:-1], out=new_row[1:])
        first = np.flatnonzero(new_row)
        outs[0].append(rows[tr])
        outs[1].append(np.arange(len(tr)) - np.repeat(first, np.diff(np.append(first, len(tr)))))
        outs[2].append(starts[rows[tr]] + tc)
        outs[3].append(ec - tc)
    if not outs[0]:
        return _EMPTY, _EMPTY, _EMPTY, _EMPTY
    owner = np.concatenate(outs[0]).astype(np.int64)
    seq = np.concatenate(outs[1]).astype(np.int64)
    order = _grouped(owner, seq, len(starts))  # a value's tokens are numbered 0.. in every case
    return (owner[order], seq[order], np.concatenate(outs[2]).astype(np.int64)[order],
            np.concatenate(outs[3]).astype(np.int64)[order])


# ============================================================================ hashing "topic#key"

def _text(buf, start: int, length: int) -> str:
    return bytes(buf[start:start + length]).decode("utf-8", "replace")


def topic_prefix_hashes(buf, b: np.ndarray, topic_pos: np.ndarray, topic_len: np.ndarray) -> np.ndarray:
    """hashCode(topic + "#") per record, as uint32, from the topic bytes in place."""
    prefix, ascii_topic = hash_ranges(b, topic_pos, topic_len)
    prefix *= np.uint32(31)
    prefix += np.uint32(ord("#"))
    if not ascii_topic.all():
        cache: dict[bytes, int] = {}
        for r in np.flatnonzero(~ascii_topic).tolist():
            tb = bytes(buf[int(topic_pos[r]):int(topic_pos[r] + topic_len[r])])
            if tb not in cache:
                cache[tb] = java_string_hash(tb.decode("utf-8", "replace") + "#") & 0xFFFFFFFF
            prefix[r] = cache[tb]
    return prefix


def key_hashes(buf, b: np.ndarray, prefix: np.ndarray, starts: np.ndarray, lengths: np.ndarray):
    """hashCode(topic + "#" + key) of each key b[start:start+length], given hashCode(topic + "#") per key,
    and hashCode(key) alone (both uint32): hashCode(p + k) = hashCode(p) * 31^len(k) + hashCode(k)."""
    th, ascii_ = hash_ranges(b, starts, lengths)
    h = prefix.copy()
    if len(h):
        h *= pow31(int(lengths.max()))[lengths]
    h += th
    for e in np.flatnonzero(~ascii_).tolist():  # a key with non-ASCII bytes: hash its UTF-16 units
        key = _text(buf, int(starts[e]), int(lengths[e]))
        n16 = len(key.encode("utf-16-le", "surrogatepass")) // 2
        th[e] = java_string_hash(key) & 0xFFFFFFFF
        h[e] = (int(prefix[e]) * pow(31, n16, 2**32) + int(th[e])) & 0xFFFFFFFF
    return h, th


def broker_keys(buf, b: np.ndarray, topic_pos, topic_len, props_pos, props_len, indexed: np.ndarray):
    """The keys the broker's IndexService puts for each record (format §5.8; engine.broker.index.keys.broker_index_keys):
    UNIQ_KEY, then each non-empty KEYS token, as "topic#key"; records with indexed=False put none.

    Returns (keys per record int32, Java hashCode of each "topic#key" int32, in put order).
    """
    m = len(topic_pos)
    rows = np.flatnonzero((props_len > 0) & indexed)
    (ur, us, ul), (kr, ks, kl) = property_values(b, props_pos[rows], props_len[rows])
    tok_owner, tok_seq, tok_start, tok_len = split_values(b, ks, kl, keep_empty=False)
    rec = np.concatenate((rows[ur], rows[kr[tok_owner]]))
    has_uniq = np.zeros(m, dtype=np.int64)
    has_uniq[rows[ur]] = 1
    # UNIQ_KEY first (rank 0), then the KEYS tokens in order: ranks 0.. per record, placed without a sort.
    rank = np.concatenate((np.zeros(len(ur), dtype=np.int64), tok_seq + has_uniq[rec[len(ur):]]))
    start = np.concatenate((us, tok_start))
    length = np.concatenate((ul, tok_len))
    order = _grouped(rec, rank, m)
    rec, start, length = rec[order], start[order], length[order]
    prefix = topic_prefix_hashes(buf, b, topic_pos, topic_len)
    h, _ = key_hashes(buf, b, prefix[rec], start, length)
    return np.bincount(rec, minlength=m).astype(np.int32), h.view(np.int32)


def tiered_keys(buf, b: np.ndarray, topic_pos, topic_len, props_pos, props_len):
    """The key set the tiered dispatcher indexes for each record (format §9.6; engine.broker.index.keys.tiered_key_set):
    UNIQ_KEY unless blank, then the KEYS tokens unless KEYS is blank (empty tokens kept), de-duplicated, in
    Java HashSet order.

    Returns (set size per record int32, tiered hash of each "topic#key" int32, record by record). Sets of more
    than 8 keys (a bucket could reach its 9th key and resize the table), sets with a repeated key and values
    with non-ASCII bytes (Unicode whitespace can make them blank) go through tiered_key_set itself.
    """
    m = len(topic_pos)
    rows = np.flatnonzero(props_len > 0)
    (ur, us, ul), (kr, ks, kl) = property_values(b, props_pos[rows], props_len[rows])
    ur, kr = rows[ur], rows[kr]
    slow = np.zeros(m, dtype=bool)
    for r, s, ln in ((ur, us, ul), (kr, ks, kl)):
        _, ascii_ = hash_ranges(b, s, ln)
        slow[r[~ascii_]] = True
    ublank = _ascii_blank(b, us, ul)
    kblank = _ascii_blank(b, ks, kl)
    ur, us, ul = ur[~ublank], us[~ublank], ul[~ublank]
    kr, ks, kl = kr[~kblank], ks[~kblank], kl[~kblank]
    tok_owner, tok_seq, tok_start, tok_len = split_values(b, ks, kl, keep_empty=True)
    rec = np.concatenate((ur, kr[tok_owner]))
    seq = np.concatenate((np.zeros(len(ur), dtype=np.int64), tok_seq + 1))
    start = np.concatenate((us, tok_start))
    length = np.concatenate((ul, tok_len))
    order = np.lexsort((seq, rec))
    rec, seq, start, length = rec[order], seq[order], start[order], length[order]
    prefix = topic_prefix_hashes(buf, b, topic_pos, topic_len)
    full, own = key_hashes(buf, b, prefix[rec], start, length)
    count = np.bincount(rec, minlength=m)
    slow |= count > 8
    # A repeated key within a record: equal own hash and length (then the slow path compares the text).
    dup_order = np.lexsort((length, own, rec))
    d_rec, d_own, d_len = rec[dup_order], own[dup_order], length[dup_order]
    same = (d_rec[1:] == d_rec[:-1]) & (d_own[1:] == d_own[:-1]) & (d_len[1:] == d_len[:-1])
    slow[d_rec[1:][same]] = True
    fast = ~slow[rec]
    bucket = (own ^ (own >> np.uint32(16))) & np.uint32(15)  # a HashSet of <= 8 keys keeps its 16 buckets
    f_idx = np.flatnonzero(fast)
    f_idx = f_idx[np.lexsort((seq[f_idx], bucket[f_idx], rec[f_idx]))]  # ties keep insertion order
    f_rank = np.arange(len(f_idx)) - np.searchsorted(rec[f_idx], rec[f_idx], side="left")
    fh = full.view(np.int32)[f_idx]
    s_rec, s_rank, s_hash = _tiered_slow(buf, np.flatnonzero(slow), topic_pos, topic_len, props_pos, props_len)
    all_rec = np.concatenate((rec[f_idx], s_rec))
    all_rank = np.concatenate((f_rank, s_rank))
    all_hash = np.concatenate((fh.astype(np.int64), s_hash))
    order = np.lexsort((all_rank, all_rec))
    hashes = np.where(all_hash[order] < 0, -all_hash[order], all_hash[order])  # tiered: sign flipped
    hashes = np.where(hashes > 2**31 - 1, -(2**31), hashes).astype(np.int32)   # -MIN_VALUE stays MIN_VALUE
    nkeys = np.bincount(all_rec, minlength=m).astype(np.int32)
    return nkeys, hashes


def _ascii_blank(b: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """StringUtils.isBlank of ASCII values (non-ASCII ones are decided by the slow path)."""
    out = np.zeros(len(starts), dtype=bool)
    for rows, width in length_batches(lengths):
        M = row_matrix(b, starts[rows], width)
        inside = np.arange(width) < lengths[rows][:, None]
        out[rows] = (_ASCII_WHITESPACE[M] | ~inside).all(axis=1)
    return out


def _tiered_slow(buf, records: np.ndarray, topic_pos, topic_len, props_pos, props_len):
    """tiered_key_set record by record: (record, rank, signed Java hash of "topic#key") per key."""
    from engine.broker.commitlog.message import parse_properties

    out_rec, out_rank, out_hash = [], [], []
    for r in records.tolist():
        props = parse_properties(_text(buf, int(props_pos[r]), int(props_len[r])))
        topic = _text(buf, int(topic_pos[r]), int(topic_len[r]))
        for i, key in enumerate(tiered_key_set(props.get(PROP_UNIQ_KEY), props.get(PROP_KEYS))):
            out_rec.append(r)
            out_rank.append(i)
            out_hash.append(java_string_hash(f"{topic}#{key}"))
    return (np.array(out_rec, dtype=np.int64), np.array(out_rank, dtype=np.int64),
            np.array(out_hash, dtype=np.int64))



#: Records whose keys batch_key_columns extracts at once: the byte and code-point matrices of their property
#: values (tens of bytes per key, times 8 for the hashing's int64 matrix) stay around 20 MB whatever the window.
KEY_ROWS = 1 << 14


def batch_key_columns(buf, b: np.ndarray, batch, seg_start: int) -> dict:
    """The broker index's key columns of one decoded window (an engine.broker.commitlog.records.RecordBatch): the records
    the dispatcher indexes (LENGTH_MISMATCH records skipped, format §7.7; rollbacks index no key), each with its
    key count, and one Java hashCode per key in put order. Also the counts of what was left out."""
    from engine.broker.commitlog.message import TRANSACTION_ROLLBACK_TYPE

    mismatches = int(len(batch) - np.count_nonzero(batch.length_ok))
    if mismatches:
        batch = batch.select(batch.length_ok)
    rollback = (batch.sys_flag & 0xC) == TRANSACTION_ROLLBACK_TYPE
    parts = [broker_keys(buf, b, batch.topic_pos[a:a + KEY_ROWS], batch.topic_len[a:a + KEY_ROWS],
                         batch.props_pos[a:a + KEY_ROWS], batch.props_len[a:a + KEY_ROWS], ~rollback[a:a + KEY_ROWS])
             for a in range(0, len(batch), KEY_ROWS)]
    nkeys = np.concatenate([n for n, _ in parts]) if parts else np.zeros(0, np.int32)
    key_hash = np.concatenate([h for _, h in parts]) if parts else np.zeros(0, np.int32)
    return {"phy": batch.phy.copy(), "ts": batch.store_ts.copy(), "nkeys": nkeys, "key_hash": key_hash,
            "mismatches": mismatches, "rollbacks": int(np.count_nonzero(rollback)),
            "phy_mismatches": int(np.count_nonzero(batch.phy != seg_start + batch.pos))}
