"""Codecs: round trips, the framing Kafka's Java client uses, and interop with kafka-python's codecs."""

from __future__ import annotations

import os
import struct

import crc32c as raw_crc32c
import pytest
import snappy
import zstandard
from kafka import codec as kp_codec

from tiering_core.kafka.batch import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD
from tiering_core.kafka.compression import (
    XERIAL_BLOCK_SIZE,
    CompressionError,
    UnsupportedCodecError,
    codec_by_name,
    codec_name,
    compress,
    decompress,
)
from tiering_core.kafka.crc import crc32c

CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]
# Half random (incompressible), half repetitive, longer than a xerial block and an lz4 block.
PAYLOAD = os.urandom(50_000) + b"kafka tiered storage " * 5_000


@pytest.mark.parametrize("codec", CODECS, ids=[codec_name(c) for c in CODECS])
def test_round_trip(codec: int) -> None:
    assert decompress(codec, compress(codec, PAYLOAD)) == PAYLOAD
    assert decompress(codec, compress(codec, b"")) == b""
    assert codec_by_name(codec_name(codec)) == codec


def test_kafka_python_decodes_ours_and_we_decode_theirs() -> None:
    pairs = [
        (CODEC_GZIP, kp_codec.gzip_encode, kp_codec.gzip_decode),
        (CODEC_SNAPPY, kp_codec.snappy_encode, kp_codec.snappy_decode),
        (CODEC_LZ4, kp_codec.lz4_encode, kp_codec.lz4_decode),
        (CODEC_ZSTD, kp_codec.zstd_encode, kp_codec.zstd_decode),
    ]
    for codec, their_encode, their_decode in pairs:
        assert their_decode(compress(codec, PAYLOAD)) == PAYLOAD, codec_name(codec)
        assert decompress(codec, their_encode(PAYLOAD)) == PAYLOAD, codec_name(codec)


def test_snappy_is_xerial_framed_in_32k_blocks_and_raw_snappy_reads() -> None:
    data = compress(CODEC_SNAPPY, PAYLOAD)
    assert data[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, blocks, out = 16, 0, b""
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        out += snappy.decompress(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
        blocks += 1
    assert out == PAYLOAD and blocks == -(-len(PAYLOAD) // XERIAL_BLOCK_SIZE)
    assert decompress(CODEC_SNAPPY, snappy.compress(PAYLOAD)) == PAYLOAD
    assert decompress(CODEC_SNAPPY, kp_codec.snappy_encode(PAYLOAD, xerial_compatible=False)) == PAYLOAD


def test_lz4_frame_descriptor_matches_kafkas_writer() -> None:
    data = compress(CODEC_LZ4, PAYLOAD)
    assert data[:4] == bytes.fromhex("04224d18")  # frame magic, little-endian
    # FLG: version 01, independent blocks, no block checksum, no content size, no content checksum.
    assert data[4] == 0x60
    assert data[5] == 0x40  # BD: 64 KiB maximum block size
    assert data[-4:] == b"\0\0\0\0"  # end mark, no content checksum after it


def test_zstd_frames_without_content_size_and_concatenated_frames_decode() -> None:
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(PAYLOAD)
    assert decompress(CODEC_ZSTD, frame) == PAYLOAD
    assert decompress(CODEC_ZSTD, frame + compress(CODEC_ZSTD, b"tail")) == PAYLOAD + b"tail"
    params = zstandard.get_frame_parameters(compress(CODEC_ZSTD, PAYLOAD))
    assert params.content_size == zstandard.CONTENTSIZE_UNKNOWN


@pytest.mark.parametrize("codec", CODECS[1:], ids=[codec_name(c) for c in CODECS[1:]])
def test_damaged_data_is_a_compression_error_naming_the_codec(codec: int) -> None:
    data = compress(codec, PAYLOAD)
    with pytest.raises(CompressionError, match=codec_name(codec)):
        decompress(codec, data[: len(data) // 2])


def test_unknown_codec() -> None:
    with pytest.raises(UnsupportedCodecError, match="codec id 5"):
        compress(5, b"x")
    with pytest.raises(UnsupportedCodecError, match="codec id 7"):
        decompress(7, b"x")
    with pytest.raises(UnsupportedCodecError, match="brotli"):
        codec_by_name("brotli")


def test_crc32c_matches_the_package_and_continues() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c(PAYLOAD) == raw_crc32c.crc32c(PAYLOAD)
    assert crc32c(PAYLOAD[1000:], crc32c(PAYLOAD[:1000])) == crc32c(PAYLOAD)
    assert crc32c(memoryview(PAYLOAD)[5:]) == crc32c(PAYLOAD[5:])
