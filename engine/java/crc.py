"""CRC-32 as java.util.zip.CRC32 computes it (format §2.6: the broker stores it masked to 31 bits), fast.

ISA-L's implementation (isal.isal_zlib.crc32, carry-less multiply folding) gives the same results as zlib's for
the same polynomial and costs about 4x less per 1 KB message body and 9x less over long buffers, which is what
recovery, verify and the put path spend their CRC time on. zlib's is the fallback when isal is not installed.
Bulk paths import `crc32` from here; engine.java.lang.rmq_crc32 (one record at a time, on the start-up path of
every command) keeps zlib's and needs no extension module.
"""
from __future__ import annotations

try:
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is a declared dependency; zlib gives the same answers, slower
    from zlib import crc32

__all__ = ["crc32"]
