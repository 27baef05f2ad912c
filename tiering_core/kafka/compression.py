"""Record-batch compression codecs, written the way Kafka's Java client writes them.

- gzip: RFC 1952 stream at the JVM's default level (6).
- snappy: the xerial block framing of snappy-java's ``SnappyOutputStream`` (16-byte header,
  then big-endian length-prefixed blocks of at most 32 KiB of input), which is what the JVM
  producer sends; raw (unframed) snappy, as some non-JVM clients send, is accepted on read.
  A stream is xerial when it starts with the 8-byte xerial magic (kafka-python's
  ``_detect_xerial_stream`` and snappy-java decide the same way).
- lz4: the LZ4 frame format as ``Lz4BlockOutputStream`` writes it: 64 KiB independent blocks,
  no content size, no checksums. Kafka's reader rejects linked blocks, so they are never written.
- zstd: one frame at level 3 without a content size (a streaming JVM writer does not know it).

Decompression is bounded for every codec: output is produced piece by piece (or, for snappy,
checked against the length a block declares) and stops with ``DecompressedSizeError`` past a
limit, a small multiple of Kafka's default ``max.message.bytes``; a commit/abort marker gets a
few KiB. A hostile or damaged batch never costs more memory than the limit.
"""

from __future__ import annotations

import gzip
import struct
import zlib

import lz4.frame
import snappy
import zstandard

from tiering_core.errors import TieringError
from tiering_core.kafka.batch import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD

CODEC_NAMES = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy", CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}
GZIP_LEVEL = 6
ZSTD_LEVEL = 3
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, minimum compatible version 1
XERIAL_BLOCK_SIZE = 32 * 1024
_BLOCK_LENGTH = struct.Struct(">i")
#: Kafka's default ``max.message.bytes`` (1 MiB + the 12-byte log overhead): the largest batch a
#: broker accepts, compressed.
DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
#: A batch decompresses to at most this many bytes here: a small multiple of max.message.bytes,
#: room for a producer's well-compressed batch, while a bomb (kilobytes expanding to gigabytes)
#: stops before it is held in memory.
MAX_DECOMPRESSED_BATCH_BYTES = 64 * DEFAULT_MAX_MESSAGE_BYTES
#: A control batch holds one commit/abort marker: a few dozen bytes decompressed.
MAX_DECOMPRESSED_CONTROL_BATCH_BYTES = 4096


class UnsupportedCodecError(TieringError, ValueError):
    """The attributes name a codec Kafka does not define (also a ValueError: a bad argument)."""


class CompressionError(TieringError, ValueError):
    """A compressed record block cannot be decompressed (truncated or damaged)."""


def codec_name(codec: int) -> str:
    try:
        return CODEC_NAMES[codec]
    except KeyError:
        raise UnsupportedCodecError(f"unknown compression codec id {codec} (Kafka defines 0-4)") from None


def codec_by_name(name: str) -> int:
    for codec, known in CODEC_NAMES.items():
        if known == name:
            return codec
    raise UnsupportedCodecError(f"unknown compression codec {name!r} (one of {', '.join(CODEC_NAMES.values())})")


def compress(codec: int, data: bytes) -> bytes:
    """``data`` compressed as a Kafka producer would send it with ``codec``."""
    if codec == CODEC_NONE:
        return bytes(data)
    if codec == CODEC_GZIP:
        return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
    if codec == CODEC_SNAPPY:
        return xerial_snappy_compress(data)
    if codec == CODEC_LZ4:
        return bytes(
            lz4.frame.compress(
                data,
                block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                block_linked=False,
                content_checksum=False,
                block_checksum=False,
                store_size=False,
            )
        )
    if codec == CODEC_ZSTD:
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=False).compress(data)
    raise UnsupportedCodecError(f"unknown compression codec id {codec} (Kafka defines 0-4)")


def xerial_snappy_compress(data: bytes) -> bytes:
    view = memoryview(data)
    out = bytearray(XERIAL_HEADER)
    for start in range(0, len(data), XERIAL_BLOCK_SIZE):
        block = snappy.compress(view[start : start + XERIAL_BLOCK_SIZE])
        out += _BLOCK_LENGTH.pack(len(block))
        out += block
    return bytes(out)


def is_xerial(data: bytes | memoryview) -> bool:
    return len(data) >= len(XERIAL_HEADER) and bytes(data[: len(XERIAL_MAGIC)]) == XERIAL_MAGIC


class DecompressedSizeError(CompressionError):
    """A batch decompresses to more than the limit (a decompression bomb, or a damaged stream)."""


def _check_size(produced: int, limit: int) -> None:
    if produced > limit:
        raise DecompressedSizeError(f"decompresses to more than {limit} bytes (the limit for one batch)")


def _snappy_length(block: bytes | memoryview, where: int) -> int:
    """The uncompressed length a raw snappy block declares (its leading varint), read before decompressing."""
    length = 0
    for i in range(min(len(block), 5)):
        byte = block[i]
        length |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return length
    raise CompressionError(f"snappy block at byte {where} has no valid length")


def _snappy_block(block: bytes | memoryview, where: int, produced: int, limit: int) -> bytes:
    """One raw block, refused before decompressing when it would take the output past ``limit``."""
    _check_size(produced + _snappy_length(block, where), limit)
    return bytes(snappy.decompress(bytes(block)))


def _xerial_snappy_decompress(data: bytes | memoryview, limit: int) -> bytes:
    view = memoryview(data)
    out = bytearray()
    pos = len(XERIAL_HEADER)
    while pos < len(view):
        if len(view) - pos < _BLOCK_LENGTH.size:
            raise CompressionError(f"xerial snappy stream ends inside a block length at byte {pos}")
        (size,) = _BLOCK_LENGTH.unpack_from(view, pos)
        pos += _BLOCK_LENGTH.size
        if size < 0 or pos + size > len(view):
            raise CompressionError(f"xerial snappy block of {size} bytes at byte {pos} runs past the stream end")
        out += _snappy_block(view[pos : pos + size], pos, len(out), limit)
        pos += size
    return bytes(out)


def _gzip_decompress(data: bytes | memoryview, limit: int) -> bytes:
    """Every member of the stream, as ``gzip.decompress``, asking zlib for at most ``limit`` + 1 bytes."""
    out = bytearray()
    pending = bytes(data)
    while pending:
        member = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        while not member.eof:
            before = len(out)
            out += member.decompress(pending, limit + 1 - len(out))
            _check_size(len(out), limit)
            pending = member.unconsumed_tail
            if not member.eof and not pending and len(out) == before:
                raise CompressionError("gzip stream ends inside a member")
        pending = member.unused_data
    return bytes(out)


def _lz4_decompress(data: bytes | memoryview, limit: int) -> bytes:
    """The first frame, as ``lz4.frame.decompress`` (Kafka reads one frame), at most ``limit`` bytes."""
    decompressor = lz4.frame.LZ4FrameDecompressor()
    out = bytearray()
    pending = bytes(data)
    while not decompressor.eof:
        before = len(out)
        out += decompressor.decompress(pending, max_length=limit + 1 - len(out))
        _check_size(len(out), limit)
        pending = b""
        if not decompressor.eof and decompressor.needs_input and len(out) == before:
            raise CompressionError("lz4 frame ends early")
    return bytes(out)


#: Compressed bytes handed to zstd per call: a zstd block of 4 bytes (an RLE block) expands to at
#: most 128 KiB, so one call yields at most about 4 MiB whatever the input.
_ZSTD_FEED = 128


def _zstd_decompress(data: bytes | memoryview, limit: int) -> bytes:
    """All frames of the stream (a frame without a content size is fine), fed in small pieces."""
    decompressor = zstandard.ZstdDecompressor()
    out = bytearray()
    remaining = bytes(data)
    while remaining:
        obj = decompressor.decompressobj()
        pos = 0
        while not obj.eof and pos < len(remaining):
            out += obj.decompress(remaining[pos : pos + _ZSTD_FEED])
            _check_size(len(out), limit)
            pos += _ZSTD_FEED
        if not obj.eof:
            raise CompressionError("zstd stream ends inside a frame")
        remaining = obj.unused_data + remaining[pos:]
    return bytes(out)


def decompress(codec: int, data: bytes | memoryview, limit: int = MAX_DECOMPRESSED_BATCH_BYTES) -> bytes:
    """The records block of a batch, at most ``limit`` bytes; damage raises ``CompressionError``
    naming the codec, and a larger block ``DecompressedSizeError`` before it is held in memory."""
    if codec == CODEC_NONE:
        return bytes(data)
    name = codec_name(codec)
    try:
        if codec == CODEC_GZIP:
            return _gzip_decompress(data, limit)
        if codec == CODEC_SNAPPY:
            return _xerial_snappy_decompress(data, limit) if is_xerial(data) else _snappy_block(data, 0, 0, limit)
        if codec == CODEC_LZ4:
            return _lz4_decompress(data, limit)
        return _zstd_decompress(data, limit)
    except DecompressedSizeError as exc:
        raise DecompressedSizeError(f"{name}: {exc}") from None
    except CompressionError as exc:
        raise CompressionError(f"{name}: {exc}") from exc
    except (OSError, EOFError, zlib.error, RuntimeError, ValueError, zstandard.ZstdError) as exc:
        raise CompressionError(f"{name} data is damaged: {exc}") from exc
    except snappy.UncompressError as exc:  # python-snappy's own error type
        raise CompressionError(f"{name} data is damaged: {exc}") from exc
