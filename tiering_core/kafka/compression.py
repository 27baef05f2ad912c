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


def _xerial_snappy_decompress(data: bytes | memoryview) -> bytes:
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
        out += snappy.decompress(view[pos : pos + size])
        pos += size
    return bytes(out)


def _zstd_decompress(data: bytes | memoryview) -> bytes:
    """All frames of the stream (a frame without a content size is fine)."""
    decompressor = zstandard.ZstdDecompressor()
    out = bytearray()
    remaining = bytes(data)
    while remaining:
        obj = decompressor.decompressobj()
        out += obj.decompress(remaining)
        if not obj.eof:
            raise CompressionError("zstd stream ends inside a frame")
        remaining = obj.unused_data
    return bytes(out)


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """The records block of a batch; damage raises ``CompressionError`` naming the codec."""
    if codec == CODEC_NONE:
        return bytes(data)
    name = codec_name(codec)
    try:
        if codec == CODEC_GZIP:
            return gzip.decompress(data)
        if codec == CODEC_SNAPPY:
            return _xerial_snappy_decompress(data) if is_xerial(data) else bytes(snappy.decompress(bytes(data)))
        if codec == CODEC_LZ4:
            return bytes(lz4.frame.decompress(data))
        return _zstd_decompress(data)
    except CompressionError as exc:
        raise CompressionError(f"{name}: {exc}") from exc
    except (OSError, EOFError, zlib.error, RuntimeError, ValueError, zstandard.ZstdError) as exc:
        raise CompressionError(f"{name} data is damaged: {exc}") from exc
    except snappy.UncompressError as exc:  # python-snappy's own error type
        raise CompressionError(f"{name} data is damaged: {exc}") from exc
