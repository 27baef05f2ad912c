"""Decompression bombs stay bounded: a batch of kilobytes to megabytes that expands to 1 GiB is
refused, naming file and position, in a process whose peak RSS stays under 512 MB.

Each bomb is built here in pieces (never held whole) and read in a subprocess, through the LSO
computation (a commit marker) and through record decoding (a data batch), for every codec.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import lz4.frame
import pytest
import snappy
import zstandard

from tests.memory import run_measured
from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import (
    ATTR_CODEC_MASK,
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    HEADER_SIZE,
    iter_batch_headers,
)
from tiering_core.kafka.compression import XERIAL_BLOCK_SIZE, XERIAL_HEADER, DecompressedSizeError, decompress
from tiering_core.kafka.crc import crc32c
from tiering_core.kafka.records import RecordSpec, encode_batch, read_batches

BOMB_BYTES = 1 << 30
RSS_LIMIT_MB = 512
_CHUNK = bytes(1 << 20)


def _zeros() -> Iterator[bytes]:
    for _ in range(BOMB_BYTES // len(_CHUNK)):
        yield _CHUNK


def _gzip_bomb() -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return b"".join(compressor.compress(c) for c in _zeros()) + compressor.flush()


def _snappy_bomb() -> bytes:
    block = snappy.compress(bytes(XERIAL_BLOCK_SIZE))
    framed = struct.pack(">i", len(block)) + block
    return XERIAL_HEADER + framed * (BOMB_BYTES // XERIAL_BLOCK_SIZE)


def _lz4_bomb() -> bytes:
    compressor = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False)
    return compressor.begin() + b"".join(compressor.compress(c) for c in _zeros()) + compressor.flush()


def _zstd_bomb() -> bytes:
    compressor = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    return b"".join(compressor.compress(c) for c in _zeros()) + compressor.flush()


BOMBS: dict[str, tuple[int, Callable[[], bytes]]] = {
    "gzip": (CODEC_GZIP, _gzip_bomb),
    "snappy": (CODEC_SNAPPY, _snappy_bomb),
    "lz4": (CODEC_LZ4, _lz4_bomb),
    "zstd": (CODEC_ZSTD, _zstd_bomb),
}


@pytest.fixture(scope="module", params=sorted(BOMBS))
def bomb(request: pytest.FixtureRequest) -> tuple[int, bytes]:
    codec, make = BOMBS[request.param]
    return codec, make()


def with_body(batch: bytes, codec: int, body: bytes) -> bytes:
    """``batch`` with another (compressed) records block: codec bits, length and CRC fixed up."""
    head = bytearray(batch[:HEADER_SIZE])
    struct.pack_into(">i", head, 8, HEADER_SIZE - 12 + len(body))
    (attributes,) = struct.unpack_from(">h", head, 21)
    struct.pack_into(">h", head, 21, (attributes & ~ATTR_CODEC_MASK) | codec)
    struct.pack_into(">I", head, 17, crc32c(bytes(head[21:]) + body))
    return bytes(head) + body


_MEASURE = """
import resource, sys
from pathlib import Path
from tiering_core.errors import CorruptLogError
from tiering_core.kafka.partition_log import PartitionLog
from tiering_core.kafka.records import iter_batches
mode, path = sys.argv[1], Path(sys.argv[2])
try:
    if mode == "lso":
        PartitionLog(path).last_stable_offset
    elif mode == "arrow":
        from tiering_core.kafka.arrow import read_segment
        from tiering_core.kafka.topic import TopicPartition

        for _ in read_segment(path, TopicPartition("orders", 0)):
            pass
    else:
        for _ in iter_batches(path):
            pass
except CorruptLogError as exc:
    print(exc)
else:
    print("no error")
"""


def _measure(mode: str, path: Path) -> tuple[str, int]:
    return run_measured(_MEASURE, mode, str(path), timeout=300)


def test_a_bomb_in_a_commit_marker_is_refused_by_the_lso_in_bounded_memory(make_writer, bomb) -> None:
    codec, body = bomb
    w = make_writer(segment_bytes=10**9)
    w.append_records(5)
    w.begin_transaction(11)
    w.append([(b"k", b"v")], producer_id=11)
    w.commit(11)
    w.set_high_watermark()
    log_path = w.active_log_path
    marker = list(iter_batch_headers(log_path))[-1]
    assert marker.is_control
    data = log_path.read_bytes()
    with log_path.open("r+b") as out:
        out.seek(marker.position)
        out.truncate()
        out.write(with_body(data[marker.position : marker.position + marker.size_in_bytes], codec, body))
    message, peak_mb = _measure("lso", w.path)
    assert peak_mb < RSS_LIMIT_MB, f"peak RSS {peak_mb} MB"
    assert str(log_path) in message and f"at byte {marker.position}" in message, message
    assert "decompresses to more than" in message, message


def test_a_bomb_in_a_data_batch_is_refused_by_record_decoding_in_bounded_memory(tmp_path: Path, bomb) -> None:
    codec, body = bomb
    first = encode_batch([RecordSpec(b"k", b"v", 1)], base_offset=0, partition_leader_epoch=0)
    second = encode_batch([RecordSpec(b"k", b"v", 2)], base_offset=1, partition_leader_epoch=0, codec=codec)
    log_path = tmp_path / "00000000000000000000.log"
    log_path.write_bytes(first + with_body(second, codec, body))
    message, peak_mb = _measure("records", log_path)
    assert peak_mb < RSS_LIMIT_MB, f"peak RSS {peak_mb} MB"
    assert str(log_path) in message and f"at byte {len(first)}" in message, message
    assert "decompresses to more than" in message, message


def test_a_bomb_in_a_data_batch_is_refused_by_arrow_decoding_in_bounded_memory(tmp_path: Path, bomb) -> None:
    codec, body = bomb
    first = encode_batch([RecordSpec(b"k", b"v", 1)], base_offset=0, partition_leader_epoch=0)
    second = encode_batch([RecordSpec(b"k", b"v", 2)], base_offset=1, partition_leader_epoch=0, codec=codec)
    log_path = tmp_path / "00000000000000000000.log"
    log_path.write_bytes(first + with_body(second, codec, body))
    message, peak_mb = _measure("arrow", log_path)
    assert peak_mb < RSS_LIMIT_MB, f"peak RSS {peak_mb} MB"
    assert str(log_path) in message and f"at byte {len(first)}" in message, message
    assert "decompresses to more than" in message, message


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_decompression_stops_at_the_limit_and_keeps_what_fits(codec: int) -> None:
    from tiering_core.kafka.compression import compress

    data = bytes(range(256)) * 4096  # 1 MiB
    assert decompress(codec, compress(codec, data), limit=len(data)) == data
    with pytest.raises(DecompressedSizeError, match=f"more than {len(data) - 1} bytes"):
        decompress(codec, compress(codec, data), limit=len(data) - 1)


class _RecordingStream(io.RawIOBase):
    """A readable stream that remembers the largest read asked of it."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)
        self.largest_read = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        self.largest_read = max(self.largest_read, size)
        return self._data.read(size)


def test_read_batches_bounds_a_batch_length_by_the_object_size() -> None:
    batch = bytearray(encode_batch([RecordSpec(b"k", b"v", 1)], base_offset=0, partition_leader_epoch=0))
    struct.pack_into(">i", batch, 8, 2**31 - 1)  # a damaged length: 2 GiB
    stream = _RecordingStream(bytes(batch))
    with pytest.raises(CorruptLogError, match=f"beyond the end of the {len(batch)}-byte object") as caught:
        list(read_batches(stream, Path("remote/0.log"), 0, object_size=len(batch)))  # type: ignore[arg-type]
    assert caught.value.position == 0 and stream.largest_read <= len(batch)
