"""Java String.hashCode of many strings at once, with numpy (format §0.2): the bulk forms of
engine.java.lang.java_string_hash, for the index builders and the write path."""
from __future__ import annotations

import numpy as np

from engine.java.lang import java_string_hash

def java_string_hashes(keys, chunk: int = 1 << 16) -> np.ndarray:
    """Java String.hashCode() of many strings at once, as an int32 numpy array.

    `keys` may be a list of str, a numpy 'U' array, or any sequence whose slices are either (so a lazily
    sliced sequence of 20M keys never has to exist as 20M Python strings), or an iterable of str.
    numpy 'U' arrays cannot hold trailing NUL characters; such keys must be passed as str.
    """
    if isinstance(keys, np.ndarray):
        if keys.dtype.kind not in "UO":
            raise TypeError(f"keys must be strings, not a numpy {keys.dtype} array")
        keys = keys.reshape(-1)
    elif not hasattr(keys, "__getitem__") or not hasattr(keys, "__len__"):
        import itertools

        it = iter(keys)
        parts = []
        while True:
            part = list(itertools.islice(it, chunk))
            if not part:
                break
            parts.append(_hash_chunk(part))
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int32)
    n = len(keys)
    out = np.empty(n, dtype=np.int32)
    for start in range(0, n, chunk):
        part = keys[start:start + chunk]
        got = _hash_chunk(part)
        if len(got) != min(chunk, n - start):
            raise ValueError(f"keys[{start}:{start + chunk}] returned {len(got)} keys")
        out[start:start + len(got)] = got
    return out

def _hash_chunk(keys) -> np.ndarray:
    """Hashes of one chunk: a numpy 'U' array is hashed in place; a list of str through its UTF-16 units."""
    if isinstance(keys, np.ndarray) and keys.dtype.kind == "U":
        # The UCS-4 matrix times the powers of 31, mod 2^32. Rows are left-aligned and NUL-padded to width W,
        # so the weighted sum over all W columns equals hash * 31^(W - len); 31 is odd, hence invertible
        # mod 2^32, and multiplying by its inverse power undoes the padding exactly. Characters outside the
        # BMP (two UTF-16 units) are rare and hashed one by one.
        arr = np.ascontiguousarray(keys.reshape(-1))
        m = len(arr)
        width = arr.dtype.itemsize // 4
        if m == 0 or width == 0:
            return np.zeros(m, dtype=np.int32)
        mat = arr.view(np.uint32).reshape(m, width)
        weights = np.array([pow(31, width - 1 - c, 2**32) for c in range(width)], dtype=np.uint32)
        h = np.einsum("ij,j->i", mat, weights)  # uint32 arithmetic: wraps mod 2^32 like Java int
        if hasattr(np, "strings"):
            lengths = np.strings.str_len(arr)
        else:  # numpy < 2: length = position after the last non-NUL code point
            nz = mat != 0
            lengths = np.where(nz.any(axis=1), width - np.argmax(nz[:, ::-1], axis=1), 0)
        inv31 = pow(31, -1, 2**32)
        inv_pow = np.array([pow(inv31, k, 2**32) for k in range(width + 1)], dtype=np.uint32)
        h *= inv_pow[width - lengths]
        out = h.view(np.int32)
        if int(mat.max()) > 0xFFFF:
            for i in np.flatnonzero((mat > 0xFFFF).any(axis=1)):
                out[i] = java_string_hash(str(arr[i]))
        return out
    if not isinstance(keys, list):
        keys = list(keys)
    m = len(keys)
    if m == 0:
        return np.empty(0, dtype=np.int32)
    joined = "".join(keys)  # TypeError for non-str items
    units = np.frombuffer(joined.encode("utf-16-le", "surrogatepass"), dtype="<u2")
    if len(units) == len(joined):  # no surrogate pairs: code units == characters
        lengths = np.fromiter(map(len, keys), dtype=np.int64, count=m)
    else:
        lengths = np.fromiter(
            (len(k.encode("utf-16-le", "surrogatepass")) // 2 for k in keys), dtype=np.int64, count=m
        )
    return hash_code_units(units, lengths)

def hash_code_units(units: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Java hashCode of strings given as concatenated UTF-16 code units and per-string lengths.

    `units` may be any unsigned integer array (uint8 works for ASCII bytes). Strings are grouped by
    length; each group is an (m, L) matrix (rows copied out of a sliding-window view, no index matrix)
    reduced against the powers of 31 in uint32, i.e. modulo 2^32 as Java int arithmetic wraps.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    m = len(lengths)
    out = np.zeros(m, dtype=np.uint32)
    if m == 0:
        return out.view(np.int32)
    units = np.asarray(units)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    lo, hi = int(lengths.min()), int(lengths.max())
    if lo == hi:
        groups = [(lo, None)]
    else:
        order = np.argsort(lengths, kind="stable")
        sorted_len = lengths[order]
        cuts = np.flatnonzero(sorted_len[1:] != sorted_len[:-1]) + 1
        groups = [(int(sorted_len[a]), order[a:b])
                  for a, b in zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [m])))]
    for length, rows in groups:
        if length == 0:
            continue
        weights = np.array([pow(31, length - 1 - c, 2**32) for c in range(length)], dtype=np.uint32)
        if rows is None and len(units) == m * length:
            out[:] = np.einsum("ij,j->i", units.reshape(m, length), weights, dtype=np.uint32, casting="unsafe")
            continue
        windows = np.lib.stride_tricks.sliding_window_view(units, length)
        sel = starts if rows is None else starts[rows]
        step = max(1, (1 << 22) // length)  # bound the copied matrix to ~4M units
        for a in range(0, len(sel), step):
            mat = windows[sel[a:a + step]]
            h = np.einsum("ij,j->i", mat, weights, dtype=np.uint32, casting="unsafe")
            if rows is None:
                out[a:a + step] = h
            else:
                out[rows[a:a + step]] = h
    return out.view(np.int32)
