"""Format 2 (docs/segment-format.md) over both backends: every codec and format combination round
trips, ``auto`` compresses only uncompressed batches, and a tampered, truncated, swapped or
reordered chunk is refused by fetch, open_stream and verify, naming the segment and the chunk."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.storage.keys_support import KeyPair, encoding, rsa_encryption, write_key_pair
from tiering_core.kafka.batch import CODEC_LZ4, CODEC_NONE
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.storage.checksum import crc32c, crc_hex
from tiering_core.storage.chunks import ChunkError
from tiering_core.storage.errors import ManifestError, RemoteObjectNotFoundError, RemoteStorageError
from tiering_core.storage.filesystem import FilesystemRemoteStorage
from tiering_core.storage.keys import DataKeyError
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef
from tiering_core.storage.manifest import CHUNKED_FORMAT, SegmentManifest
from tiering_core.storage.remote import RemoteStorage
from tiering_core.storage.s3 import S3RemoteStorage

TIP = TopicIdPartition("EEEEEEEEEEEEEEEEEEEEEE", TopicPartition("orders", 1))
CHUNK = 1024


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, KeyPair]:
    root = tmp_path_factory.mktemp("keys")
    return {key_id: write_key_pair(root, key_id) for key_id in ("k1", "k2")}


@pytest.fixture(params=["s3", "filesystem"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], RemoteStorage]]:
    """Opens storages over one bucket or root, as separate processes would (nothing cached)."""
    opened: list[RemoteStorage] = []
    if request.param == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        bucket = endpoint.new_bucket()

        def make() -> RemoteStorage:
            return S3RemoteStorage(bucket, prefix="p/", endpoint_url=endpoint.url, region="us-east-1")
    else:

        def make() -> RemoteStorage:
            return FilesystemRemoteStorage(tmp_path / "tier", prefix="p/")

    def opened_one() -> RemoteStorage:
        opened.append(make())
        return opened[-1]

    yield opened_one
    for storage in opened:
        storage.close()


@pytest.fixture()
def storage(opener: Callable[[], RemoteStorage]) -> RemoteStorage:
    return opener()


def segment_files(root: Path, codec: int = CODEC_NONE, records: int = 120) -> dict[ObjectKind, Path | bytes]:
    """A closed segment's files as a broker wrote them (JSON-like values: they compress)."""
    w = PartitionWriter(root, TopicPartition("orders", 1), codec=codec, index_interval_bytes=512, seed=7)
    for i in range(records):
        w.append([(f"key-{i}".encode(), json.dumps({"id": i, "name": f"customer {i % 7}", "ok": True}).encode())])
    w.roll()
    stem = w.path / f"{0:020d}"
    return {
        ObjectKind.LOG: stem.with_suffix(".log"),
        ObjectKind.OFFSET_INDEX: stem.with_suffix(".index"),
        ObjectKind.TIME_INDEX: stem.with_suffix(".timeindex"),
        ObjectKind.LEADER_EPOCH_CHECKPOINT: b"0\n1\n0 0\n",
    }


def original(files: dict[ObjectKind, Path | bytes], kind: ObjectKind) -> bytes:
    source = files[kind]
    return source if isinstance(source, bytes) else Path(source).read_bytes()


def new_ref() -> RemoteSegmentRef:
    return RemoteSegmentRef(TIP, 0, uuid.uuid4(), None)


COMBINATIONS = [
    ("none", False),
    ("zstd", False),
    ("auto", False),
    ("none", True),
    ("zstd", True),
    ("auto", True),
]


@pytest.mark.parametrize(("compression", "encrypted"), COMBINATIONS)
def test_every_combination_round_trips_and_verifies(
    storage: RemoteStorage, tmp_path: Path, keys: dict[str, KeyPair], compression: str, encrypted: bool
) -> None:
    storage.encoding = encoding(compression, rsa_encryption(keys["k1"]) if encrypted else None, CHUNK)
    files = segment_files(tmp_path / "logs")
    ref = new_ref()
    manifest = storage.copy_segment(ref, files)
    assert manifest.format_version == CHUNKED_FORMAT and manifest.tamper_evident  # whatever the config
    assert storage.read_manifest(ref) == manifest
    log = original(files, ObjectKind.LOG)
    assert len(log) > 5 * CHUNK  # several chunks
    for kind in files:
        data = original(files, kind)
        entry = manifest.objects[kind]
        assert (entry.size, entry.crc32c) == (len(data), crc_hex(crc32c(data)))  # the original bytes'
        assert storage.fetch(ref, kind) == data
        with storage.open_stream(ref, kind) as stream:
            assert stream.read() == data
        stored = storage.get_range(entry.key, 0, None)
        assert entry.chunks is not None and len(entry.chunks) == -(-len(data) // CHUNK)
        assert entry.stored_size == len(stored)
        if compression != "none" or encrypted:
            if encrypted:
                assert data[:64] not in stored  # nothing readable without the key
        else:
            assert stored == data  # stored byte for byte: only the manifest gains digests
    for start, end in [(0, 0), (CHUNK - 1, CHUNK), (3 * CHUNK + 5, 4 * CHUNK + 700), (len(log) - 3, None)]:
        assert storage.fetch(ref, ObjectKind.LOG, start, end) == log[start : None if end is None else end + 1]
    with storage.open_stream(ref, ObjectKind.LOG, 2 * CHUNK + 17) as stream:
        assert stream.read(10) == log[2 * CHUNK + 17 : 2 * CHUNK + 27]
        assert stream.read() == log[2 * CHUNK + 27 :]
    assert storage.verify_segment(ref) == []
    if compression == "zstd" or compression == "auto":
        assert manifest.objects[ObjectKind.LOG].compression == "zstd"
        assert manifest.objects[ObjectKind.LOG].stored_size < len(log) / 2  # JSON-like values compress


def test_auto_leaves_compressed_batches_uncompressed(storage: RemoteStorage, tmp_path: Path) -> None:
    storage.encoding = encoding("auto")
    files = segment_files(tmp_path / "logs", codec=CODEC_LZ4)
    ref = new_ref()
    manifest = storage.copy_segment(ref, files)
    log = manifest.objects[ObjectKind.LOG]
    assert log.compression == "none" and log.stored_size == log.size
    assert manifest.objects[ObjectKind.OFFSET_INDEX].compression == "zstd"  # indexes still compress
    assert storage.fetch(ref, ObjectKind.LOG) == original(files, ObjectKind.LOG)


def test_format_2_segment_without_an_object_reads_as_missing(storage: RemoteStorage, tmp_path: Path) -> None:
    storage.encoding = encoding("zstd")
    ref = new_ref()
    storage.copy_segment(ref, {ObjectKind.LOG: original(segment_files(tmp_path / "logs"), ObjectKind.LOG)})
    with pytest.raises(RemoteObjectNotFoundError, match="has no txnindex"):
        storage.fetch(ref, ObjectKind.TRANSACTION_INDEX)


def test_empty_objects_round_trip(storage: RemoteStorage) -> None:
    storage.encoding = encoding("zstd")
    ref = new_ref()
    storage.copy_segment(ref, {ObjectKind.LOG: b"x" * 10, ObjectKind.TRANSACTION_INDEX: b""})
    assert storage.fetch(ref, ObjectKind.TRANSACTION_INDEX) == b""
    assert storage.verify_segment(ref) == []


# --- refusals ---------------------------------------------------------------------------------


def copied(storage: RemoteStorage, tmp_path: Path, keys: dict[str, KeyPair], encrypted: bool) -> RemoteSegmentRef:
    storage.encoding = encoding("zstd", rsa_encryption(keys["k1"]) if encrypted else None)
    ref = new_ref()
    storage.copy_segment(ref, segment_files(tmp_path / f"logs-{ref.segment_id}"))
    return ref


def rewrite_object(storage: RemoteStorage, key: str, data: bytes) -> None:
    storage.put_object(key, data)


def refused_everywhere(
    opener: Callable[[], RemoteStorage], writer: RemoteStorage, ref: RemoteSegmentRef, chunk: int, why: str
) -> None:
    """fetch, a stream from the start and verify, in a process that never read the segment, all
    refuse the chunk, each naming it."""
    storage = opener()
    storage.encoding = writer.encoding
    name = re.escape(f"{ref}: log chunk {chunk}")
    with pytest.raises(ChunkError, match=f"{name}: .*{why}"):
        storage.fetch(ref, ObjectKind.LOG)
    with pytest.raises(ChunkError, match=f"{name}: .*{why}"), storage.open_stream(ref, ObjectKind.LOG) as stream:
        stream.read()
    problems = storage.verify_segment(ref)
    assert any(re.match(f"log: {name}: ", p) for p in problems), problems


@pytest.mark.parametrize("encrypted", [False, True])
def test_a_tampered_chunk_is_refused(
    opener: Callable[[], RemoteStorage], tmp_path: Path, keys: dict[str, KeyPair], encrypted: bool
) -> None:
    storage = opener()
    ref = copied(storage, tmp_path, keys, encrypted)
    key = ref.key(ObjectKind.LOG, storage.prefix)
    manifest = storage.read_manifest(ref)
    assert manifest is not None
    chunk = manifest.objects[ObjectKind.LOG].chunks[2]  # type: ignore[index]
    stored = bytearray(storage.get_range(key, 0, None))
    stored[chunk.stored_offset + 20] ^= 0x01
    rewrite_object(storage, key, bytes(stored))
    refused_everywhere(opener, storage, ref, 2, "crc32c")


def test_a_tampered_chunk_with_a_forged_checksum_fails_its_tag(
    opener: Callable[[], RemoteStorage], tmp_path: Path, keys: dict[str, KeyPair]
) -> None:
    storage = opener()
    ref = copied(storage, tmp_path, keys, encrypted=True)
    key = ref.key(ObjectKind.LOG, storage.prefix)
    stored = bytearray(storage.get_range(key, 0, None))
    doc = json.loads(storage.get_range(ref.key(ObjectKind.MANIFEST, storage.prefix), 0, None))
    _, at, size, _, _ = doc["objects"]["log"]["chunks"][1]
    stored[at + 30] ^= 0x01
    doc["objects"]["log"]["chunks"][1][3] = crc_hex(crc32c(bytes(stored[at : at + size])))
    doc["objects"]["log"]["chunks"][1][4] = hashlib.sha256(bytes(stored[at : at + size])).hexdigest()
    rewrite_object(storage, key, bytes(stored))
    rewrite_object(storage, ref.key(ObjectKind.MANIFEST, storage.prefix), json.dumps(doc).encode())
    refused_everywhere(opener, storage, ref, 1, "AES-GCM tag")


@pytest.mark.parametrize("encrypted", [False, True])
def test_a_truncated_object_is_refused(
    opener: Callable[[], RemoteStorage], tmp_path: Path, keys: dict[str, KeyPair], encrypted: bool
) -> None:
    storage = opener()
    ref = copied(storage, tmp_path, keys, encrypted)
    key = ref.key(ObjectKind.LOG, storage.prefix)
    manifest = storage.read_manifest(ref)
    assert manifest is not None
    chunks = manifest.objects[ObjectKind.LOG].chunks or ()
    stored = storage.get_range(key, 0, None)
    rewrite_object(storage, key, stored[: chunks[-2].stored_offset + 5])  # cut inside the chunk before last
    refused_everywhere(opener, storage, ref, len(chunks) - 2, "")


@pytest.mark.parametrize("across_segments", [False, True])
def test_a_swapped_or_reordered_chunk_fails_its_tag(
    opener: Callable[[], RemoteStorage], tmp_path: Path, keys: dict[str, KeyPair], across_segments: bool
) -> None:
    """Chunks reordered within an object, or one taken from another segment, with the manifest's
    chunk index rewritten to match: the checksums agree, the AAD does not."""
    storage = opener()
    ref = copied(storage, tmp_path, keys, encrypted=True)
    donor = copied(storage, tmp_path, keys, encrypted=True) if across_segments else ref
    manifest_key = ref.key(ObjectKind.MANIFEST, storage.prefix)
    doc = json.loads(storage.get_range(manifest_key, 0, None))
    donor_doc = json.loads(storage.get_range(donor.key(ObjectKind.MANIFEST, storage.prefix), 0, None))
    stored = storage.get_range(ref.key(ObjectKind.LOG, storage.prefix), 0, None)
    donor_stored = storage.get_range(donor.key(ObjectKind.LOG, storage.prefix), 0, None)
    chunks = doc["objects"]["log"]["chunks"]
    donor_chunks = donor_doc["objects"]["log"]["chunks"]

    def piece(data: bytes, entry: list) -> bytes:
        return data[entry[1] : entry[1] + entry[2]]

    # ours: chunk 1 and chunk 2 trade places (or chunk 1 is the donor's chunk 1)
    order = [piece(stored, c) for c in chunks]
    if across_segments:
        order[1] = piece(donor_stored, donor_chunks[1])
    else:
        order[1], order[2] = order[2], order[1]
    at = 0
    for i, data in enumerate(order):
        chunks[i][1:] = [at, len(data), crc_hex(crc32c(data))]
        at += len(data)
    doc["objects"]["log"]["stored_size"] = at
    rewrite_object(storage, ref.key(ObjectKind.LOG, storage.prefix), b"".join(order))
    rewrite_object(storage, manifest_key, json.dumps(doc).encode())
    refused_everywhere(opener, storage, ref, 1, "AES-GCM tag")


def test_a_hostile_chunk_index_is_refused_before_any_read(storage: RemoteStorage, tmp_path: Path) -> None:
    storage.encoding = encoding("zstd")
    ref = new_ref()
    storage.copy_segment(ref, segment_files(tmp_path / "logs"))
    manifest_key = ref.key(ObjectKind.MANIFEST, storage.prefix)
    doc = json.loads(storage.get_range(manifest_key, 0, None))
    doc["objects"]["log"]["chunks"][0][2] = 1 << 40  # a chunk claiming a terabyte
    rewrite_object(storage, manifest_key, json.dumps(doc).encode())
    with pytest.raises(ManifestError, match="chunk 0 does not tile"):
        storage.read_manifest(ref)


# --- keys -------------------------------------------------------------------------------------


def test_wrong_or_missing_key_is_an_error_naming_the_key_id(
    opener: Callable[[], RemoteStorage], tmp_path: Path, keys: dict[str, KeyPair]
) -> None:
    ref = copied(opener(), tmp_path, keys, encrypted=True)
    storage = opener()  # a process that never read it
    wrong = KeyPair("k1", keys["k2"].public, keys["k2"].private)  # k2's key filed under k1's id
    storage.encoding = encoding("zstd", rsa_encryption(None, wrong))
    with pytest.raises(DataKeyError, match="key id 'k1' does not unwrap") as wrong_key:
        storage.fetch(ref, ObjectKind.LOG)
    assert str(ref.segment_id) in str(wrong_key.value)
    storage.encoding = encoding("zstd", rsa_encryption(None, keys["k2"]))
    with pytest.raises(DataKeyError, match=r"key id .k1., which remote\.encryption\.private_key_files does not"):
        storage.fetch(ref, ObjectKind.LOG)
    assert storage.verify_segment(ref) == [f"encryption: {_message(storage, ref)}"]
    storage.encoding = encoding("none")
    with pytest.raises(DataKeyError, match=r"key id .k1., and remote\.encryption is not configured"):
        storage.fetch(ref, ObjectKind.LOG)


def _message(storage: RemoteStorage, ref: RemoteSegmentRef) -> str:
    try:
        storage.fetch(ref, ObjectKind.LOG)
    except RemoteStorageError as exc:
        return str(exc)
    raise AssertionError("the fetch should have failed")


def test_rotation_keeps_old_segments_readable(storage: RemoteStorage, tmp_path: Path, keys: dict[str, KeyPair]) -> None:
    files = segment_files(tmp_path / "logs")
    storage.encoding = encoding("zstd", rsa_encryption(keys["k1"]))
    old = new_ref()
    storage.copy_segment(old, files)
    storage.encoding = encoding("zstd", rsa_encryption(keys["k2"], keys["k1"]))  # rotated, k1 kept to read
    new = new_ref()
    manifest = storage.copy_segment(new, files)
    assert manifest.encryption is not None and manifest.encryption.key_id == "k2"
    old_manifest = storage.read_manifest(old)
    assert old_manifest is not None and old_manifest.encryption is not None
    assert old_manifest.encryption.key_id == "k1"
    for ref in (old, new):
        assert storage.fetch(ref, ObjectKind.LOG) == original(files, ObjectKind.LOG)
        assert storage.verify_segment(ref) == []


def test_no_key_material_in_the_manifest(storage: RemoteStorage, tmp_path: Path, keys: dict[str, KeyPair]) -> None:
    ref = copied(storage, tmp_path, keys, encrypted=True)
    text = storage.get_range(ref.key(ObjectKind.MANIFEST, storage.prefix), 0, None).decode()
    manifest = SegmentManifest.from_json(text.encode())
    assert manifest.encryption is not None
    assert storage.encoding.keys is not None
    data_key = storage.encoding.keys.unwrap(manifest.encryption, str(ref))
    assert len(data_key) == 32 and data_key.hex() not in text and "PRIVATE" not in text
    assert data_key.hex() not in repr(manifest) and "wrapped=" not in repr(manifest.encryption)
