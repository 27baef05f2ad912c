"""manifest.json: round trip, and every malformed input is a ManifestError; the segment's metadata
it carries (``segment``) read as strictly, and manifests without it unchanged to the byte."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

import pytest

from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.storage.checksum import crc_hex
from tiering_core.storage.errors import ManifestError, RemoteStorageError
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef
from tiering_core.storage.manifest import (
    Chunk,
    ObjectEntry,
    SegmentManifest,
    WrappedKey,
    max_chunk_index_bytes,
    max_stored_chunk,
)
from tiering_core.storage.segment_facts import MAX_EPOCH_ENTRIES, SegmentFacts


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


# --- the segment's metadata (``segment``) ----------------------------------------------------

FACTS = SegmentFacts(
    end_offset=649,
    max_timestamp=1_700_000_123_456,
    leader_epochs=(EpochEntry(4, 500), EpochEntry(6, 600)),
    epoch_index=(EpochEntry(0, 0), EpochEntry(4, 480), EpochEntry(6, 600)),
)


def with_facts() -> SegmentManifest:
    return replace(manifest(), segment=FACTS)


def test_the_segments_metadata_round_trips() -> None:
    m = with_facts()
    parsed = SegmentManifest.from_json(m.to_json())
    assert parsed == m and parsed.segment == FACTS
    assert hash(parsed.segment) == hash(FACTS)  # a value: hashable, its tuples compared whole
    assert json.loads(m.to_json())["segment"] == {
        "end_offset": 649,
        "max_timestamp": 1_700_000_123_456,
        "leader_epochs": [[4, 500], [6, 600]],
        "epoch_index": [[0, 0], [4, 480], [6, 600]],
    }
    assert SegmentManifest.for_ref(m.ref(), m.objects, m.created_at_ms, segment=FACTS) == m
    assert m.digest() != manifest().digest()


FIXED_ID = "0f8fad5b-d9cb-469f-a165-70867728950e"


def test_a_manifest_without_the_segments_metadata_is_unchanged_to_the_byte() -> None:
    """Digests pinned from manifests as releases before the ``segment`` object wrote them: the
    store's recorded digests of every existing copy still match."""
    plain = replace(manifest(), segment_id=FIXED_ID)
    chunked = SegmentManifest(
        topic="orders",
        topic_id="AbCdEfGhIjKlMnOpQr_-12",
        partition=3,
        base_offset=500,
        segment_id=FIXED_ID,
        objects={
            ObjectKind.LOG: ObjectEntry(
                ObjectKind.LOG, "k/x.log", 1000, "0a1b2c3d", "none", 1000, (Chunk(0, 0, 1000, "0a1b2c3d", "a" * 64),)
            )
        },
        created_at_ms=1,
        format_version=2,
        chunk_size=1024,
        encryption=WrappedKey("AWS-KMS", "arn:k", b"xyz"),
    )
    assert plain.digest() == "02607a31665b09f9587c21d466ef270184c28c9062ffee4767e0410a531d4063"
    assert chunked.digest() == "c22d1c55e3bab4b33bc32efe843a1704d109d2e001387fae6a75106859e2be0c"
    for m in (plain, chunked):
        assert b'"segment"' not in m.to_json()
        parsed = SegmentManifest.from_json(m.to_json())
        assert parsed.segment is None and parsed.to_json() == m.to_json()


def mutate_facts(name: str, value: Any) -> bytes:
    doc = json.loads(with_facts().to_json())
    if value is KeyError:
        del doc["segment"][name]
    else:
        doc["segment"][name] = value
    return json.dumps(doc).encode()


def with_segment(value: Any) -> bytes:
    doc = json.loads(manifest().to_json())
    doc["segment"] = value
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (with_segment(None), "manifest segment must be an object, got None"),
        (with_segment([649]), "manifest segment must be an object"),
        (mutate_facts("end_offset", KeyError), "manifest segment field 'end_offset' must be int, got None"),
        (mutate_facts("end_offset", "649"), "manifest segment field 'end_offset' must be int, got '649'"),
        (mutate_facts("end_offset", True), "manifest segment field 'end_offset' must be int, got True"),
        (mutate_facts("end_offset", 499), r"end_offset 499 is outside \[500, 9223372036854775807\]"),
        (mutate_facts("end_offset", 2**63), "end_offset 9223372036854775808 is outside"),
        (mutate_facts("max_timestamp", 1.5), "manifest segment field 'max_timestamp' must be int, got 1.5"),
        (mutate_facts("max_timestamp", 2**63), "max_timestamp 9223372036854775808 is not a 64-bit integer"),
        (mutate_facts("max_timestamp", -(2**63) - 1), "is not a 64-bit integer"),
        (mutate_facts("leader_epochs", {"4": 500}), "manifest segment field 'leader_epochs' must be list"),
        (mutate_facts("leader_epochs", []), "leader_epochs is empty"),
        (mutate_facts("leader_epochs", [[4, 500, 1]]), r"leader_epochs\[0\] is not an \[epoch, start_offset\] pair"),
        (mutate_facts("leader_epochs", [[4, "500"]]), r"leader_epochs\[0\] is not an \[epoch, start_offset\] pair"),
        (mutate_facts("leader_epochs", [[4, False]]), r"leader_epochs\[0\] is not an \[epoch, start_offset\] pair"),
        (mutate_facts("leader_epochs", [4, 500]), r"leader_epochs\[0\] is not an \[epoch, start_offset\] pair"),
        (mutate_facts("leader_epochs", [[-1, 500]]), r"leader_epochs\[0\]: epoch -1 or start offset 500 is out of"),
        (mutate_facts("leader_epochs", [[2**31, 500]]), r"leader_epochs\[0\]: epoch 2147483648 .* out of range"),
        (mutate_facts("leader_epochs", [[6, 600], [4, 610]]), r"leader_epochs\[1\]: epoch 4 at 610 does not follow"),
        (mutate_facts("leader_epochs", [[4, 600], [4, 610]]), r"leader_epochs\[1\]: epoch 4 at 610 does not follow"),
        (mutate_facts("leader_epochs", [[4, 600], [6, 550]]), r"epoch 6 at 550 does not follow epoch 4 at 600"),
        (mutate_facts("leader_epochs", [[4, 499]]), "leader epoch 4 starts at 499, outside the segment 500..649"),
        (mutate_facts("leader_epochs", [[4, 650]]), "leader epoch 4 starts at 650, outside the segment 500..649"),
        (mutate_facts("epoch_index", KeyError), "manifest segment field 'epoch_index' must be list, got None"),
        (mutate_facts("epoch_index", [[0, -1]]), r"epoch_index\[0\]: epoch 0 or start offset -1 is out of range"),
        (mutate_facts("epoch_index", [[0, 0], [0, 5]]), r"epoch_index\[1\]: epoch 0 at 5 does not follow epoch 0"),
        (mutate_facts("epoch_index", [[0, 9], [1, 5]]), r"epoch_index\[1\]: epoch 1 at 5 does not follow epoch 0"),
        (mutate_facts("size_bytes", 1000), "manifest segment has unknown field\\(s\\) 'size_bytes'"),
    ],
)
def test_hostile_segment_metadata_is_refused_naming_the_problem(data: bytes, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        SegmentManifest.from_json(data)


def test_equal_start_offsets_are_read_as_the_store_takes_them() -> None:
    """An epoch that wrote nothing starts where the next one does: the store records such
    epochs, so a manifest holds them too."""
    facts = replace(FACTS, leader_epochs=(EpochEntry(4, 500), EpochEntry(5, 600), EpochEntry(6, 600)))
    assert SegmentManifest.from_json(replace(manifest(), segment=facts).to_json()).segment == facts
    assert replace(FACTS, epoch_index=()).epoch_index == ()  # an index may be empty; the epochs may not


@pytest.mark.parametrize("name", ["leader_epochs", "epoch_index"])
def test_epoch_lists_are_bounded(name: str) -> None:
    entries = [[e, 500] for e in range(MAX_EPOCH_ENTRIES + 1)]
    with pytest.raises(ManifestError, match=f"{name} has {MAX_EPOCH_ENTRIES + 1} entries, more than the"):
        SegmentManifest.from_json(mutate_facts(name, entries))
    most = tuple(EpochEntry(e, 500) for e in range(MAX_EPOCH_ENTRIES))
    bounded = replace(manifest(), segment=replace(FACTS, **{name: most}))
    assert SegmentManifest.from_json(bounded.to_json()).segment == bounded.segment


def test_the_widest_epoch_entry_takes_at_most_65_bytes() -> None:
    """What the bound of entries is judged by: one more entry, with the most digits it can have."""
    last = 2**63 - 1
    one = replace(FACTS, end_offset=last, epoch_index=(EpochEntry(2**31 - 2, last),))
    two = replace(one, epoch_index=(*one.epoch_index, EpochEntry(2**31 - 1, last)))
    assert len(replace(manifest(), segment=two).to_json()) - len(replace(manifest(), segment=one).to_json()) <= 65


def test_facts_are_held_to_the_same_rules_when_made() -> None:
    """No writer makes a manifest a reader would refuse."""
    with pytest.raises(ManifestError, match=r"leader epoch 4 starts at 480, outside the segment 500\.\.649"):
        replace(manifest(), segment=replace(FACTS, leader_epochs=(EpochEntry(4, 480),)))
