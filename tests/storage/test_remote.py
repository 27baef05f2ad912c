"""Segments over remote objects, on the filesystem backend (``test_backends.py`` and
``test_segment_format.py`` run the behaviours both backends share): the manifest is copy's own,
the digest read with a manifest is the stored bytes', a ref carrying another digest is refused
even once a manifest is cached, a manifest above the bound or listing another key is refused
naming it, a copy whose manifest would be too large leaves nothing, a recorded format-2 segment
without its manifest is missing, and ranges and streams of a chunked object are its original
bytes."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import tiering_core.storage.remote as remote
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.storage.encoding import SegmentEncoding
from tiering_core.storage.errors import (
    InvalidRangeError,
    ManifestError,
    RemoteObjectNotFoundError,
    RemoteStorageError,
)
from tiering_core.storage.filesystem import FilesystemRemoteStorage
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef
from tiering_core.storage.manifest import CHUNKED_FORMAT, MIN_CHUNK_SIZE

TIP = TopicIdPartition("RRRRRRRRRRRRRRRRRRRRRR", TopicPartition("orders", 3))
PREFIX = "p/"
LOG = os.urandom(10 * MIN_CHUNK_SIZE + 123)  # ten whole chunks and a short last one


@pytest.fixture()
def storage(tmp_path: Path) -> Iterator[FilesystemRemoteStorage]:
    backend = FilesystemRemoteStorage(tmp_path / "tier", prefix=PREFIX)
    backend.encoding = SegmentEncoding(chunk_size=MIN_CHUNK_SIZE)
    with backend:
        yield backend


def copied(storage: FilesystemRemoteStorage, base: int = 0) -> RemoteSegmentRef:
    ref = RemoteSegmentRef(TIP, base, uuid.uuid4())
    storage.copy_segment(ref, {ObjectKind.LOG: LOG, ObjectKind.OFFSET_INDEX: b"\x00" * 16})
    return ref


def manifest_path(storage: FilesystemRemoteStorage, ref: RemoteSegmentRef) -> Path:
    return storage.root / ref.key(ObjectKind.MANIFEST, PREFIX)


def test_the_manifest_is_written_by_the_copy_never_given(storage: FilesystemRemoteStorage) -> None:
    ref = RemoteSegmentRef(TIP, 0, uuid.uuid4())
    with pytest.raises(RemoteStorageError, match="the manifest is written by copy_segment, not given"):
        storage.copy_segment(ref, {ObjectKind.LOG: LOG, ObjectKind.MANIFEST: b"{}"})
    assert storage.list_objects(TIP) == []


def test_the_digest_is_the_stored_manifests_and_a_ref_with_another_is_refused(
    storage: FilesystemRemoteStorage,
) -> None:
    """Read first without a digest (so it is cached), the manifest still refuses a ref carrying
    another digest: the cache never answers for bytes it was not read from."""
    ref = copied(storage)
    stored = hashlib.sha256(manifest_path(storage, ref).read_bytes()).hexdigest()
    read = storage.read_manifest_digested(ref)
    assert read is not None and read[1] == stored
    assert storage.read_manifest(replace(ref, manifest_sha256=stored)) == read[0]
    forged = "0" * 64
    with pytest.raises(ManifestError, match=f"manifest SHA-256 {stored} is not {forged}.*replaced or forged"):
        storage.read_manifest(replace(ref, manifest_sha256=forged))
    with pytest.raises(ManifestError, match="replaced or forged"):
        storage.fetch(replace(ref, manifest_sha256=forged), ObjectKind.LOG, 0, 10)


def test_a_segment_without_a_manifest_has_none(storage: FilesystemRemoteStorage) -> None:
    assert storage.read_manifest_digested(RemoteSegmentRef(TIP, 0, uuid.uuid4())) is None


def test_a_manifest_above_the_bound_is_refused_naming_it(
    storage: FilesystemRemoteStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = copied(storage)
    size = manifest_path(storage, ref).stat().st_size
    monkeypatch.setattr(remote, "MAX_MANIFEST_BYTES", size - 1)
    with pytest.raises(ManifestError, match=f"{ref.key(ObjectKind.MANIFEST, PREFIX)}.*larger than {size - 1} bytes"):
        storage.read_manifest(ref)


def test_a_manifest_listing_a_key_outside_its_segment_is_refused(storage: FilesystemRemoteStorage) -> None:
    ref = copied(storage)
    path = manifest_path(storage, ref)
    doc = json.loads(path.read_bytes())
    elsewhere = copied(storage, base=100).key(ObjectKind.LOG, PREFIX)
    doc["objects"]["log"]["key"] = elsewhere
    path.write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match=f"manifest lists '{elsewhere}' for log"):
        storage.fetch(ref, ObjectKind.LOG)


def test_a_copy_whose_manifest_would_be_too_large_fails_naming_the_chunk_size_and_leaves_nothing(
    storage: FilesystemRemoteStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote, "MAX_MANIFEST_BYTES", 512)
    ref = RemoteSegmentRef(TIP, 0, uuid.uuid4())
    with pytest.raises(
        RemoteStorageError, match=f"above the .* readers accept: raise remote.chunk_size \\(now {MIN_CHUNK_SIZE}\\)"
    ):
        storage.copy_segment(ref, {ObjectKind.LOG: LOG})
    assert storage.list_objects(TIP) == []


def test_a_recorded_format_2_segment_without_its_manifest_is_missing(storage: FilesystemRemoteStorage) -> None:
    ref = copied(storage)
    manifest_path(storage, ref).unlink()
    with pytest.raises(RemoteObjectNotFoundError, match="the manifest of a format-2 segment is missing"):
        storage.fetch(replace(ref, format_version=CHUNKED_FORMAT), ObjectKind.LOG, 0, 10)


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (0, 0),
        (MIN_CHUNK_SIZE - 1, MIN_CHUNK_SIZE),  # across a chunk boundary
        (3 * MIN_CHUNK_SIZE + 5, 7 * MIN_CHUNK_SIZE + 9),
        (len(LOG) - 1, len(LOG) - 1),
        (len(LOG) - 50, len(LOG) + 10_000),  # past the end: to the end
        (17, None),
    ],
)
def test_a_range_of_a_chunked_object_is_its_original_bytes(
    storage: FilesystemRemoteStorage, start: int, end: int | None
) -> None:
    ref = copied(storage)
    assert storage.fetch(ref, ObjectKind.LOG, start, end) == LOG[start : None if end is None else end + 1]


def test_a_stream_of_a_chunked_object_from_any_start_is_its_original_bytes(storage: FilesystemRemoteStorage) -> None:
    ref = copied(storage)
    for start in (0, MIN_CHUNK_SIZE, 5 * MIN_CHUNK_SIZE + 77, len(LOG) - 1):
        with storage.open_stream(ref, ObjectKind.LOG, start) as stream:
            assert stream.read() == LOG[start:]
    with pytest.raises(InvalidRangeError, match=f"log start {len(LOG)} is beyond its end"):
        storage.open_stream(ref, ObjectKind.LOG, len(LOG))


def test_bad_ranges_are_refused_naming_the_object(storage: FilesystemRemoteStorage) -> None:
    ref = copied(storage)
    key = ref.key(ObjectKind.LOG, PREFIX)
    with pytest.raises(InvalidRangeError, match=f"{key}.*invalid range \\[-1, 5\\]"):
        storage.fetch(ref, ObjectKind.LOG, -1, 5)
    with pytest.raises(InvalidRangeError, match=f"{key}.*invalid range \\[9, 8\\]"):
        storage.fetch(ref, ObjectKind.LOG, 9, 8)
    with pytest.raises(InvalidRangeError, match=f"{key}.*invalid start -1"):
        storage.open_stream(ref, ObjectKind.LOG, -1)
