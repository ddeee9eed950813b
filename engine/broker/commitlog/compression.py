"""Message bodies as the consumer receives them: the one decoder of compressed bodies (format §2.3).

A producer compresses a body above `compressMsgBodyOverHowmuch` (4 KiB) with the codec it is configured with and
sets SYSFLAG bit 0 (COMPRESSED_FLAG) and the codec in bits 8-10; the broker stores the compressed bytes as they
arrive. A consumer's MessageDecoder inflates them with RocketMQ's Compressor for that codec:

* ZLIB (3, and 0 from before the types existed): one zlib stream (java.util.zip.InflaterInputStream); bytes
  after the end of the stream are ignored, a stream that ends early is an error.
* ZSTD (2): zstd frames (zstd-jni's ZstdInputStream), as many as follow one another (skippable frames included);
  anything after the last frame that is not a frame, or a frame cut short, is an error.
* LZ4 (1): LZ4 *frames* (lz4-java's LZ4FrameInputStream), with the same rules as zstd; block and content
  checksums are checked when the frame has them.
* any other value (4-7): CompressionType.findByValue throws; the consumer gets no message.

Every view that shows a body (get, dump-commitlog and its --body-dir, query-key, print-msg, tiered get) calls
`decode_body`; a body that does not decode comes back with `error` set and is never shown as the message.
The zstd and lz4 bindings are imported when a body of that codec is met: commands that meet none never load them.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

from engine.findings import Note

COMPRESSED_FLAG = 0x1
COMPRESSION_TYPE_MASK = 0x700
#: CompressionType.findByValue: the value in SYSFLAG bits 8-10 -> the codec (0 is ZLIB, for older clients).
CODECS = {0: "zlib", 1: "lz4", 2: "zstd", 3: "zlib"}
#: At most this many bytes are inflated from one body: far above the 4 MiB a producer checks a body against
#: before it compresses it (maxMessageSize), and the bound on what one hostile body can make this process allocate.
MAX_DECODED_BODY = 128 << 20
#: Output asked of a decompressor per call, so that a body is inflated a bounded step at a time.
_STEP = 1 << 20


@dataclass(frozen=True)
class Body:
    """A stored body and what a consumer receives of it."""
    data: bytes              # the body the consumer receives; the stored bytes when `error` is set
    codec: str | None        # "zlib", "zstd", "lz4", "unknown(<n>)"; None: stored as it was sent
    error: str | None = None  # why a compressed body does not decode (then nothing is the message's body)

    @property
    def ok(self) -> bool:
        return self.error is None


class BodyDecodeError(ValueError):
    """A compressed body that the consumer's decompressor would refuse."""


def codec_of(sys_flag: int) -> str | None:
    """The codec a record's SYSFLAG names, None when the body is not compressed."""
    if not sys_flag & COMPRESSED_FLAG:
        return None
    value = (sys_flag & COMPRESSION_TYPE_MASK) >> 8
    return CODECS.get(value, f"unknown({value})")


def decode_body(stored: bytes, sys_flag: int) -> Body:
    """The body as the consumer receives it (MessageDecoder.decode with deCompressBody): decoded when SYSFLAG says
    it is compressed, else the stored bytes. Never raises on bad bytes: `error` says why it does not decode."""
    codec = codec_of(sys_flag)
    if codec is None or not stored:  # the decoder inflates only a body of more than 0 bytes
        return Body(bytes(stored), codec)
    try:
        if codec == "zlib":
            data = _zlib(stored)
        elif codec == "zstd":
            data = _frames(stored, _zstd_decompressor, "zstd")
        elif codec == "lz4":
            data = _frames(stored, _lz4_decompressor, "lz4")
        else:
            raise BodyDecodeError(f"compression type {codec[8:-1]} in SYSFLAG bits 8-10 is none of RocketMQ's "
                                  "(1 LZ4, 2 ZSTD, 3 ZLIB)")
    except BodyDecodeError as e:
        return Body(bytes(stored), codec, str(e))
    except ImportError as e:
        return Body(bytes(stored), codec, f"the {codec} codec is not installed ({e}); install rmqtool's "
                                          "dependencies to read it")
    return Body(data, codec)


#: The level a RocketMQ producer compresses with (DefaultMQProducer.compressLevel, rocketmq.message.compressLevel):
#: ZlibCompressor and ZstdCompressor use it; Lz4Compressor's LZ4FrameOutputStream takes none.
PRODUCER_LEVEL = 5


def encode_body(data: bytes, sys_flag: int) -> bytes:
    """The bytes a producer sends for `data` with the codec SYSFLAG names (DefaultMQProducerImpl
    tryToCompressMessage with RocketMQ's Compressor): one zlib stream, one zstd frame, or one LZ4 frame of
    independent 4 MiB blocks (LZ4FrameOutputStream's defaults). decode_body(encode_body(d, f), f).data == d.
    A SYSFLAG without COMPRESSED_FLAG returns `data`; a codec none of RocketMQ's raises BodyDecodeError."""
    codec = codec_of(sys_flag)
    if codec is None:
        return bytes(data)
    if codec == "zlib":
        return zlib.compress(data, PRODUCER_LEVEL)
    if codec == "zstd":
        try:
            from compression import zstd
        except ImportError:
            from backports import zstd
        return zstd.compress(data, PRODUCER_LEVEL)
    if codec == "lz4":
        import lz4.frame

        return lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX4MB, block_linked=False,
                                  content_checksum=False, store_size=False)
    raise BodyDecodeError(f"compression type {codec[8:-1]} in SYSFLAG bits 8-10 is none of RocketMQ's "
                          "(1 LZ4, 2 ZSTD, 3 ZLIB)")


def _zlib(stored: bytes) -> bytes:
    """One zlib stream, as InflaterInputStream reads it: what follows its end is ignored."""
    d = zlib.decompressobj()
    out, n, data = [], 0, stored
    try:
        while True:
            chunk = d.decompress(data, _STEP)
            n += len(chunk)
            _bound(n)
            out.append(chunk)
            if d.eof:
                return b"".join(out)
            data = d.unconsumed_tail
            if not data and not chunk:
                raise BodyDecodeError(f"zlib stream ends early (after {len(stored)} stored bytes, {n} inflated)")
    except zlib.error as e:
        raise BodyDecodeError(f"not a zlib stream: {e}") from None


def _frames(stored: bytes, new_decompressor, codec: str) -> bytes:
    """Frames one after the other until the stored bytes end, as ZstdInputStream and LZ4FrameInputStream read
    them: a frame cut short, or bytes after a frame that start no frame, is an error."""
    out, n, data = [], 0, stored
    while data:
        d = new_decompressor()
        try:
            while True:
                chunk = d.decompress(data, _STEP)
                data = b""
                n += len(chunk)
                _bound(n)
                out.append(chunk)
                if d.eof:
                    break
                if d.needs_input:
                    raise BodyDecodeError(f"{codec} frame ends early (after {len(stored)} stored bytes, "
                                          f"{n} decoded)")
        except BodyDecodeError:
            raise
        except Exception as e:  # the bindings raise their own errors (ZstdError, RuntimeError) for bad bytes
            raise BodyDecodeError(f"not {codec} frames: {e}") from None
        data = d.unused_data
    return b"".join(out)


def _bound(n: int) -> None:
    if n > MAX_DECODED_BODY:
        raise BodyDecodeError(f"decodes to more than {MAX_DECODED_BODY} bytes (MAX_DECODED_BODY): not read")


def _zstd_decompressor():
    """One zstd frame's decompressor: the standard library's (Python 3.14+), else its backport."""
    try:
        from compression import zstd
    except ImportError:
        from backports import zstd
    return zstd.ZstdDecompressor()


def _lz4_decompressor():
    import lz4.frame

    return lz4.frame.LZ4FrameDecompressor()


#: The kind of the line that a message's compressed body does not decode (engine.findings.Note).
BODY_UNDECODABLE = "body-undecodable"


def undecodable_note(offset: int, codec: str, why: str) -> Note:
    """The line for stderr that the compressed body of the message at commit-log `offset` does not decode (the
    consumer could not read it): an `error:` line, kind body-undecodable, its offset, codec and why as fields."""
    return Note(BODY_UNDECODABLE, f"error: message at commit-log offset {offset}: its {codec} body does not decode "
                f"({why}); the consumer cannot read it", commitLogOffset=offset, codec=codec, reason=why)
