"""manifest.json: round trip, and every malformed input is a ManifestError."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.storage.checksum import crc_hex
from tiering_core.storage.errors import ManifestError, RemoteStorageError
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef
from tiering_core.storage.manifest import (
    Chunk,
    ObjectEntry,
    SegmentManifest,
    max_chunk_index_bytes,
    max_stored_chunk,
)


def manifest() -> SegmentManifest:
    return SegmentManifest(
        topic="orders",
        topic_id="AbCdEfGhIjKlMnOpQr_-12",
        partition=3,
        base_offset=500,
        segment_id=str(uuid.uuid4()),
        objects={
            ObjectKind.LOG: ObjectEntry(ObjectKind.LOG, "k/x.log", 1000, "0a1b2c3d"),
            ObjectKind.OFFSET_INDEX: ObjectEntry(ObjectKind.OFFSET_INDEX, "k/x.index", 0, crc_hex(0)),
        },
        created_at_ms=1_700_000_000_000,
    )


def test_round_trip() -> None:
    m = manifest()
    assert SegmentManifest.from_json(m.to_json()) == m
    ref = m.ref()
    assert (ref.topic_id_partition.topic, ref.topic_id_partition.partition, ref.base_offset) == ("orders", 3, 500)
    assert SegmentManifest.for_ref(ref, m.objects, m.created_at_ms) == m
    assert json.loads(m.to_json())["objects"]["log"] == {"key": "k/x.log", "size": 1000, "crc32c": "0a1b2c3d"}


def mutate(path: list[str], value: Any) -> bytes:
    doc = json.loads(manifest().to_json())
    target = doc
    for name in path[:-1]:
        target = target[name]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{not json",
        b"\xff\xfe",
        b'{"topic": "\xff"}',
        b"[" * 400_000,
        b'{"a": ' * 100_000,
        b"[]",
        b"null",
        mutate(["format_version"], 2),
        mutate(["topic"], KeyError),
        mutate(["partition"], "3"),
        mutate(["partition"], True),
        mutate(["base_offset"], -1),
        mutate(["objects"], []),
        mutate(["objects", "log"], KeyError),
        mutate(["objects", "exe"], {"key": "k/x.exe", "size": 1, "crc32c": "00000000"}),
        mutate(["objects", "log", "crc32c"], "0A1B2C3D"),
        mutate(["objects", "log", "crc32c"], "123"),
        mutate(["objects", "log", "size"], -5),
        mutate(["objects", "log", "size"], 1.5),
        mutate(["objects", "log", "key"], "k/x.index"),
        mutate(["objects", "manifest.json"], {"key": "k/x.manifest.json", "size": 1, "crc32c": "00000000"}),
        mutate(["topic"], "../etc"),
        mutate(["topic"], "x" * 250),
        mutate(["topic_id"], "short"),
        mutate(["segment_id"], "not-a-uuid"),
        mutate(["segment_id"], "0B7F7A3E7C1E4C7E9D551F0E2A3B4C5D"),
    ],
)
def test_malformed_manifests_rejected(data: bytes) -> None:
    with pytest.raises(ManifestError):
        SegmentManifest.from_json(data)
    assert issubclass(ManifestError, RemoteStorageError)


def test_only_utf_8_is_read() -> None:
    with pytest.raises(ManifestError, match="segment manifest is not UTF-8: invalid start byte at byte 0"):
        SegmentManifest.from_json(manifest().to_json().decode().encode("utf-16"))


def test_a_crc_with_a_trailing_newline_is_refused() -> None:
    ref = RemoteSegmentRef(TopicIdPartition("MMMMMMMMMMMMMMMMMMMMMM", TopicPartition("m", 0)), 0, uuid.uuid4())
    entry = ObjectEntry(ObjectKind.LOG, ref.key(ObjectKind.LOG), 1, "deadbeef\n")
    data = SegmentManifest.for_ref(ref, {ObjectKind.LOG: entry}, 0).to_json()
    with pytest.raises(ManifestError, match="crc32c 'deadbeef\\\\n'"):
        SegmentManifest.from_json(data)


@pytest.mark.parametrize(("size", "chunk_size"), [(1, 1024), (10_000, 1024), (5 * 4096 + 1, 4096), (99_999, 7000)])
def test_the_chunk_index_bound_holds_for_the_widest_values(size: int, chunk_size: int) -> None:
    """Each chunk's values given the most digits they can have: the encoded index stays within
    the bound that judges a configured chunk size."""
    ref = RemoteSegmentRef(TopicIdPartition("MMMMMMMMMMMMMMMMMMMMMM", TopicPartition("m", 0)), 0, uuid.uuid4())
    count = -(-size // chunk_size)
    largest = max_stored_chunk(chunk_size)
    widest = Chunk((count - 1) * chunk_size, (count - 1) * largest, largest, "ffffffff", "f" * 64)

    def encoded(chunks: tuple[Chunk, ...]) -> int:
        entry = ObjectEntry(ObjectKind.LOG, ref.key(ObjectKind.LOG), size, "00000000", "zstd", 0, chunks)
        return len(SegmentManifest.for_ref(ref, {ObjectKind.LOG: entry}, 0, chunk_size=chunk_size).to_json())

    spent = encoded((widest,) * count) - encoded(())
    assert spent <= max_chunk_index_bytes(size, chunk_size) <= spent + 1  # a comma: the last chunk has none
    assert max_chunk_index_bytes(0, chunk_size) == 0
