"""Format-2 objects chunk by chunk: each chunk written as stored (plain, zstd, sealed) and read back
exactly, any range or a stream from any position; every damaged, forged, moved or oversized chunk
refused naming it; and ``auto``'s sample of a log's first batches."""

from __future__ import annotations

import io
import os
import random
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import zstandard

from tiering_core.kafka.batch import CODEC_GZIP, CODEC_NONE
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.topic import TopicPartition
from tiering_core.storage.checksum import crc32c, crc_hex
from tiering_core.storage.chunks import (
    DATA_KEY_SIZE,
    NONCE_SIZE,
    TAG_SIZE,
    ChunkedObject,
    ChunkError,
    ChunkSealer,
    encode_object,
    index_plain_object,
    log_is_compressed,
)
from tiering_core.storage.errors import InvalidRangeError
from tiering_core.storage.layout import ObjectKind
from tiering_core.storage.manifest import ObjectEntry, sha256_hex

CHUNK = 1024
SEGMENT = "orders-1 segment 0"
#: Text-like bytes (they compress), not a multiple of the chunk size.
ORIGINAL = b"".join(b"record %06d {'name': 'customer %d'}\n" % (i, i % 7) for i in range(300))


def sealer() -> ChunkSealer:
    return ChunkSealer("0f8fad5b-d9cb-469f-a165-70867728950e", os.urandom(DATA_KEY_SIZE))


def stored(compress: bool, seal: ChunkSealer | None, source: bytes = ORIGINAL) -> tuple[ChunkedObject, bytes]:
    out = io.BytesIO()
    entry = encode_object(
        source, out, kind=ObjectKind.LOG, key="k/x.log", chunk_size=CHUNK, compress=compress, sealer=seal
    )
    return ChunkedObject(SEGMENT, entry, CHUNK, seal), out.getvalue()


def getter(data: bytes, calls: list[tuple[int, int]] | None = None) -> Callable[[int, int], bytes]:
    def get(first: int, last: int) -> bytes:
        if calls is not None:
            calls.append((first, last))
        return data[first : last + 1]

    return get


@pytest.mark.parametrize(("compress", "seal"), [(False, None), (True, None), (False, sealer()), (True, sealer())])
def test_every_encoding_reads_back_any_range_exactly(compress: bool, seal: ChunkSealer | None) -> None:
    obj, data = stored(compress, seal)
    entry = obj.entry
    assert (entry.size, entry.crc32c, entry.stored_size) == (len(ORIGINAL), crc_hex(crc32c(ORIGINAL)), len(data))
    assert len(obj.chunks) == -(-len(ORIGINAL) // CHUNK)
    assert entry.compression == ("zstd" if compress else "none")
    for chunk in obj.chunks:
        piece = data[chunk.stored_offset : chunk.stored_offset + chunk.stored_size]
        assert (chunk.crc32c, chunk.sha256) == (crc_hex(crc32c(piece)), sha256_hex(piece))
    if seal is not None and not compress:
        assert entry.stored_size == len(ORIGINAL) + len(obj.chunks) * (NONCE_SIZE + TAG_SIZE)
    if seal is None and not compress:
        assert data == ORIGINAL  # each stored chunk is its original bytes
    for start, end in [
        (0, None),
        (0, 0),
        (CHUNK - 1, CHUNK),
        (3 * CHUNK + 5, 5 * CHUNK + 7),
        (len(ORIGINAL) - 1, 10**9),
    ]:
        assert obj.read(getter(data), start, end) == ORIGINAL[start : None if end is None else end + 1]
    with obj.stream(getter(data), 2 * CHUNK + 17) as stream:
        assert stream.read() == ORIGINAL[2 * CHUNK + 17 :]


def test_a_range_is_one_get_of_just_its_chunks() -> None:
    obj, data = stored(True, None)
    calls: list[tuple[int, int]] = []
    obj.read(getter(data, calls), CHUNK + 1, 3 * CHUNK)
    first, last = obj.chunks[1], obj.chunks[3]
    assert calls == [(first.stored_offset, last.stored_offset + last.stored_size - 1)]


def test_a_stream_asks_one_chunk_twice_then_twice_as_many_each_time() -> None:
    source = bytes(40 * CHUNK)
    obj, data = stored(False, None, source)
    calls: list[tuple[int, int]] = []
    with obj.stream(getter(data, calls), 0) as stream:
        assert stream.read() == source
    assert [(last + 1 - first) // CHUNK for first, last in calls] == [1, 1, 2, 4, 8, 16, 8]


def test_the_plain_index_pass_equals_the_plain_encoding(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(ORIGINAL)
    indexed = index_plain_object(path, kind=ObjectKind.LOG, key="k/x.log", chunk_size=CHUNK)
    assert indexed == stored(False, None)[0].entry


def test_empty_objects_read_empty_and_a_start_past_the_end_is_refused() -> None:
    empty, data = stored(True, sealer(), b"")
    assert (empty.entry.size, empty.chunks, data) == (0, (), b"")
    assert empty.read(getter(data), 0, None) == b""
    assert empty.stream(getter(data), 0).read() == b""
    obj, data = stored(False, None)
    with pytest.raises(InvalidRangeError, match=f"range start {len(ORIGINAL)} is beyond the object's"):
        obj.read(getter(data), len(ORIGINAL), None)
    with pytest.raises(InvalidRangeError, match=f"log start {len(ORIGINAL) + 1} is beyond its end"):
        obj.stream(getter(data), len(ORIGINAL) + 1)


def piece(obj: ChunkedObject, data: bytes, index: int) -> bytes:
    chunk = obj.chunks[index]
    return data[chunk.stored_offset : chunk.stored_offset + chunk.stored_size]


def test_a_damaged_or_forged_chunk_is_refused_naming_it() -> None:
    obj, data = stored(True, None)
    good = piece(obj, data, 2)
    with pytest.raises(ChunkError, match=f"{SEGMENT}: log chunk 2: {len(good) - 1} stored bytes, manifest says"):
        obj.decode(2, good[:-1])
    flipped = bytes([good[0] ^ 1]) + good[1:]
    with pytest.raises(ChunkError, match=f"log chunk 2: crc32c {crc_hex(crc32c(flipped))} != manifest"):
        obj.decode(2, flipped)
    forged = replace(obj.chunks[2], crc32c=crc_hex(crc32c(flipped)))
    chunks = (*obj.chunks[:2], forged, *obj.chunks[3:])
    with_forged_crc = replace(obj, entry=replace(obj.entry, chunks=chunks))
    with pytest.raises(ChunkError, match="log chunk 2: its SHA-256 is not the manifest's"):
        with_forged_crc.decode(2, flipped)


def test_a_sealed_chunk_moved_to_another_place_fails_its_tag() -> None:
    obj, data = stored(False, sealer())
    moved = piece(obj, data, 0)
    chunk = obj.chunks[1]
    undigested = replace(chunk, stored_size=len(moved), crc32c=crc_hex(crc32c(moved)), sha256=None)
    chunks = (obj.chunks[0], undigested, *obj.chunks[2:])
    forged = replace(obj, entry=replace(obj.entry, chunks=chunks))
    with pytest.raises(ChunkError, match="log chunk 1: fails its AES-GCM tag"):
        forged.decode(1, moved)
    other_key = replace(obj, sealer=sealer())
    with pytest.raises(ChunkError, match="log chunk 0: fails its AES-GCM tag"):
        other_key.decode(0, moved)


def test_decompression_is_bounded_by_the_chunk_s_length() -> None:
    bomb = zstandard.ZstdCompressor().compress(bytes(100 * CHUNK))
    entry = ObjectEntry(ObjectKind.LOG, "k/x.log", CHUNK, "00000000", "zstd", len(bomb), None)
    obj, _ = stored(True, None, bytes(CHUNK))
    chunk = replace(obj.chunks[0], stored_size=len(bomb), crc32c=crc_hex(crc32c(bomb)), sha256=sha256_hex(bomb))
    bounded = replace(obj, entry=replace(entry, chunks=(chunk,)))
    with pytest.raises(ChunkError, match=f"log chunk 0: holds {CHUNK + 1} bytes, not {CHUNK}"):
        bounded.decode(0, bomb)
    junk = random.Random(7).randbytes(64)
    junk_chunk = replace(chunk, stored_size=len(junk), crc32c=crc_hex(crc32c(junk)), sha256=sha256_hex(junk))
    with pytest.raises(ChunkError, match="log chunk 0: does not decompress"):
        replace(bounded, entry=replace(bounded.entry, chunks=(junk_chunk,))).decode(0, junk)


def log(root: Path, codec: int, records: int = 20) -> Path:
    writer = PartitionWriter(root, TopicPartition("orders", 1), codec=codec, seed=7)
    for i in range(records):
        writer.append([(f"key-{i}".encode(), b"value %d" % i)])
    writer.roll()
    return writer.path / f"{0:020d}.log"


def test_auto_samples_the_log_s_first_batches_for_a_codec(tmp_path: Path) -> None:
    compressed = log(tmp_path / "gzip", CODEC_GZIP)
    plain = log(tmp_path / "plain", CODEC_NONE)
    assert log_is_compressed(compressed) and log_is_compressed(compressed.read_bytes())
    assert not log_is_compressed(plain)
    assert not log_is_compressed(b"") and not log_is_compressed(b"\xff" * 200)  # not batches: no codec
