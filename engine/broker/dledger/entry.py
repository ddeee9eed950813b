"""The DLedger entry (format §11.3; DLedger 0.3.1.2: DLedgerEntry, DLedgerEntryCoder, DLedgerMmapFileStore, MmapFileList).

A data file of DLedger's entry log holds entries back to back from position 0:

    magic int (1) | size int (whole entry) | index long | term long | pos long (the entry's own log offset) |
    channel int | chainCrc int | bodyCrc int | bodySize int | body (bodySize bytes)

48 bytes of header (DLedgerEntry.BODY_OFFSET), size = 48 + bodySize. A RocketMQ broker's body is one message
record exactly as in a file commit log, whose PHYSICALOFFSET is pos + 48 (DLedgerCommitLog's append hook), so a
message's physical offset is the position of its record in the data file. When an entry does not fit the rest of
a file with 8 bytes to spare (MmapFileList.preAppend, MIN_BLANK_LEN), the rest is a padding entry: magic -1
(BLANK_MAGIC_CODE) and the padding's size, then the next file. An entry whose size is 0 is the end of data
(DLedgerMmapFileStore.recover).

DLedger never computes chainCrc or bodyCrc (no release sets them): both are 0 as written. A non-zero one is read as
a damaged header unless it is the body's CRC-32 (a writer that does fill it in).

The index files (dledger-<id>/index) hold one 32-byte unit per entry at entry index * 32 (INDEX_UNIT_SIZE):
magic int | pos long | size int | index long | term long (DLedgerEntryCoder.encodeIndex).
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

#: DLedgerEntry.BODY_OFFSET: the header's size; a message's physical offset is its entry's pos + this.
BODY_OFFSET = 48
#: DLedgerEntry.HEADER_SIZE: an entry's size must be above it (recover's check).
HEADER_SIZE = 44
#: DLedgerEntry.POS_OFFSET: where pos is in the header.
POS_OFFSET = 24
#: DLedgerMmapFileStore.MAGIC_1 = CURRENT_MAGIC: the only entry magic.
ENTRY_MAGIC = 1
#: MmapFileList.BLANK_MAGIC_CODE: the padding entry at a file's end.
PADDING_MAGIC = -1
#: MmapFileList.MIN_BLANK_LEN: an entry is appended only with this many bytes to spare after it.
MIN_BLANK_LEN = 8
#: DLedgerMmapFileStore.INDEX_UNIT_SIZE.
INDEX_UNIT_SIZE = 32
#: DLedgerConfig.mappedFileSizeForEntryIndex (RocketMQ does not change it): 5 Mi units.
DEFAULT_INDEX_FILE_SIZE = INDEX_UNIT_SIZE * 5 * 1024 * 1024

HEADER = struct.Struct(">iiqqqiiii")
INDEX_UNIT = struct.Struct(">iqiqq")
assert HEADER.size == BODY_OFFSET and INDEX_UNIT.size == INDEX_UNIT_SIZE

# What is at a position of a data file.
ENTRY = "entry"
PADDING = "padding"
END = "end"          # size 0 or zeros: the end of data (recover stops there)
BAD = "bad"


@dataclass
class EntryHeader:
    magic: int
    size: int
    index: int
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body_size: int

    def as_dict(self) -> dict:
        return {"magic": self.magic, "size": self.size, "index": self.index, "term": self.term, "pos": self.pos,
                "channel": self.channel, "chainCrc": self.chain_crc, "bodyCrc": self.body_crc,
                "bodySize": self.body_size}


@dataclass
class EntryCheck:
    """What is at one position of a data file: ENTRY (header checked), PADDING, END, or BAD with a reason. A BAD
    entry with a size is sound but for its chainCrc/bodyCrc: a walk may go on after it."""
    kind: str
    size: int = 0                    # the entry's or the padding's size (BAD: the size when it can be trusted)
    header: EntryHeader | None = None
    reason: str = ""


def body_crc_ok(stored: int, buf, body_at: int, body_size: int) -> bool:
    """DLedger leaves bodyCrc 0; a writer that fills it in would put the body's CRC-32 there (as a Java int, or
    masked to 31 bits as RocketMQ's records do)."""
    if stored == 0:
        return True
    crc = zlib.crc32(buf[body_at:body_at + body_size])
    return stored in (crc - (1 << 32) if crc >= 1 << 31 else crc, crc & 0x7FFFFFFF)


def check_entry(buf, pos: int, n: int, base: int, check_crc: bool = True) -> EntryCheck:
    """The entry at `pos` of a data file starting at log offset `base` (buf[:n] is the file), checked as
    DLedgerMmapFileStore.recover checks it: magic, size > HEADER_SIZE, pos == its own offset, size == bodySize + 48,
    the entry inside the file; and chainCrc/bodyCrc as DLedger writes them (check_crc)."""
    if n - pos < 8:
        if not any(buf[pos:n]):
            return EntryCheck(END)
        return EntryCheck(BAD, reason=f"{n - pos} bytes left at the end of the file: not an entry")
    magic, size = struct.unpack_from(">ii", buf, pos)
    if magic == PADDING_MAGIC:
        return EntryCheck(PADDING, n - pos)
    if size == 0:
        return EntryCheck(END) if magic == 0 else EntryCheck(BAD, reason=f"entry magic {magic} with size 0")
    if n - pos < BODY_OFFSET:
        return EntryCheck(BAD, reason=f"entry header cut short: {n - pos} bytes left in the file")
    h = EntryHeader(*HEADER.unpack_from(buf, pos))
    off = base + pos
    if magic != ENTRY_MAGIC:
        return EntryCheck(BAD, reason=f"bad entry magic {magic} (DLedger writes {ENTRY_MAGIC})", header=h)
    if size <= HEADER_SIZE:
        return EntryCheck(BAD, reason=f"entry size {size} is not above the header size {HEADER_SIZE}", header=h)
    if h.pos != off:
        return EntryCheck(BAD, reason=f"entry says it is at pos {h.pos}, not {off}", header=h)
    if h.body_size + BODY_OFFSET != size:
        return EntryCheck(BAD, reason=f"entry size {size} is not bodySize {h.body_size} + {BODY_OFFSET}", header=h)
    if size > n - pos:
        return EntryCheck(BAD, reason=f"entry of {size} bytes runs past the end of the file ({n - pos} bytes left): "
                                      "torn", header=h)
    if check_crc:  # DLedger reads neither field: a bad one is damage its recovery walks past (size is kept)
        if h.chain_crc != 0:
            return EntryCheck(BAD, size, reason=f"chainCrc {h.chain_crc}: DLedger writes 0", header=h)
        if not body_crc_ok(h.body_crc, buf, pos + BODY_OFFSET, h.body_size):
            return EntryCheck(BAD, size, reason=f"bodyCrc {h.body_crc} is neither 0 (what DLedger writes) nor the "
                                                "body's CRC-32", header=h)
    return EntryCheck(ENTRY, size, h)


def encode_entry(body: bytes, index: int, term: int, pos: int, channel: int = 0, chain_crc: int = 0,
                 body_crc: int = 0, magic: int = ENTRY_MAGIC) -> bytes:
    """DLedgerEntryCoder.encode of an entry at log offset `pos` (the fields as appendAsLeader sets them)."""
    return HEADER.pack(magic, BODY_OFFSET + len(body), index, term, pos, channel, chain_crc, body_crc,
                       len(body)) + body


def padding(remaining: int) -> bytes:
    """MmapFileList.preAppend's padding: magic -1 and the size of the rest of the file, then zeros."""
    return struct.pack(">ii", PADDING_MAGIC, remaining) + bytes(remaining - 8)


def encode_index_unit(pos: int, size: int, index: int, term: int, magic: int = ENTRY_MAGIC) -> bytes:
    """DLedgerEntryCoder.encodeIndex."""
    return INDEX_UNIT.pack(magic, pos, size, index, term)
