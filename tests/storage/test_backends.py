"""One behaviour suite over both backends: S3 through moto's HTTP server, and the filesystem."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from botocore.awsrequest import AWSResponse

from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.storage.checksum import crc32c, crc_hex
from tiering_core.storage.errors import (
    InvalidRangeError,
    ManifestError,
    RemoteObjectNotFoundError,
    RemoteStorageError,
)
from tiering_core.storage.filesystem import FilesystemRemoteStorage
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef, partition_prefix
from tiering_core.storage.remote import RemoteStorage
from tiering_core.storage.s3 import S3RemoteStorage
from tiering_core.storage.segment_facts import SegmentFacts

TIP = TopicIdPartition("DDDDDDDDDDDDDDDDDDDDDD", TopicPartition("orders", 2))
PREFIX = "p/"
MiB = 1 << 20


@pytest.fixture(params=["s3", "filesystem"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RemoteStorage]:
    if request.param == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        backend: RemoteStorage = S3RemoteStorage(
            endpoint.new_bucket(),
            prefix=PREFIX,
            endpoint_url=endpoint.url,
            region="us-east-1",
            multipart_threshold_bytes=5 * MiB,
            multipart_part_size_bytes=5 * MiB,
            max_concurrency=3,
        )
    else:
        backend = FilesystemRemoteStorage(tmp_path / "tier", prefix=PREFIX)
    with backend:
        yield backend


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: object) -> Iterator[bytes]:
        yield self._body


@contextmanager
def failing_upload(storage: RemoteStorage, key: str) -> Iterator[None]:
    """Make the upload of ``key`` fail for real: S3 answers it with a 400 error; on the
    filesystem a directory sits where the object would be renamed to."""
    if isinstance(storage, S3RemoteStorage):

        def refuse(request, **_kwargs):
            if request.url.endswith(key):
                body = b"<Error><Code>InvalidRequest</Code><Message>injected</Message></Error>"
                return AWSResponse(request.url, 400, {}, _Raw(body))
            return None

        storage.client.meta.events.register("before-send.s3.PutObject", refuse)
        try:
            yield
        finally:
            storage.client.meta.events.unregister("before-send.s3.PutObject", refuse)
    else:
        assert isinstance(storage, FilesystemRemoteStorage)
        blocker = storage.root / key
        blocker.mkdir(parents=True)
        try:
            yield
        finally:
            blocker.rmdir()


def segment_files(tmp_path: Path, log_size: int) -> dict[ObjectKind, Path | bytes]:
    log = tmp_path / f"seg-{uuid.uuid4().hex[:6]}.log"
    log.write_bytes(os.urandom(log_size))
    return {
        ObjectKind.LOG: log,
        ObjectKind.OFFSET_INDEX: os.urandom(80),
        ObjectKind.TIME_INDEX: b"",
        ObjectKind.PRODUCER_SNAPSHOT: os.urandom(40),
        ObjectKind.LEADER_EPOCH_CHECKPOINT: b"0\n1\n0 0\n",
    }


def new_ref(base: int = 0) -> RemoteSegmentRef:
    return RemoteSegmentRef(TIP, base, uuid.uuid4())


def keys(storage: RemoteStorage) -> list[str]:
    return [o.key for o in storage.list_objects(TIP)]


def test_multipart_round_trip_ranges_and_verify(storage: RemoteStorage, tmp_path: Path) -> None:
    files = segment_files(tmp_path, 12 * MiB + 123)
    ref = new_ref()
    manifest = storage.copy_segment(ref, files)
    data = Path(files[ObjectKind.LOG]).read_bytes()  # type: ignore[arg-type]
    assert manifest.objects[ObjectKind.LOG].size == len(data)
    assert set(manifest.objects) == set(files)
    assert storage.fetch(ref, ObjectKind.LOG) == data
    assert storage.fetch(ref, ObjectKind.LOG, 0, 0) == data[:1]  # first byte
    assert storage.fetch(ref, ObjectKind.LOG, len(data) - 1) == data[-1:]  # last byte
    assert storage.fetch(ref, ObjectKind.LOG, len(data) - 1, len(data) - 1) == data[-1:]
    assert storage.fetch(ref, ObjectKind.LOG, 0, len(data) - 1) == data  # whole object, end inclusive
    assert storage.fetch(ref, ObjectKind.LOG, 5 * MiB - 1, 5 * MiB + 1) == data[5 * MiB - 1 : 5 * MiB + 2]
    assert storage.fetch(ref, ObjectKind.LOG, 10, 10**12) == data[10:]  # an end past the object reads to its end
    with pytest.raises(InvalidRangeError, match=f"beyond the object's {len(data)} bytes"):
        storage.fetch(ref, ObjectKind.LOG, len(data))
    assert storage.fetch(ref, ObjectKind.TIME_INDEX) == b""
    with pytest.raises(RemoteObjectNotFoundError):
        storage.fetch(ref, ObjectKind.TRANSACTION_INDEX)
    assert storage.read_manifest(ref) == manifest
    assert storage.verify_segment(ref) == []
    with storage.open_stream(ref, ObjectKind.LOG, 7) as stream:
        assert stream.read(100) == data[7:107]
        assert stream.read() == data[107:]
        assert stream.read(1) == b""
    with storage.open_stream(ref, ObjectKind.TIME_INDEX) as stream:
        assert stream.read() == b""
    with pytest.raises(InvalidRangeError, match="beyond"):
        storage.open_stream(ref, ObjectKind.LOG, len(data))


def test_reupload_overwrites_delete_twice_and_listing(storage: RemoteStorage) -> None:
    ref = new_ref(100)
    storage.copy_segment(ref, {ObjectKind.LOG: b"first", ObjectKind.TRANSACTION_INDEX: b"txn"})
    manifest = storage.copy_segment(ref, {ObjectKind.LOG: b"second!"})
    assert storage.fetch(ref, ObjectKind.LOG) == b"second!"
    assert storage.read_manifest(ref) == manifest and set(manifest.objects) == {ObjectKind.LOG}
    # the kind the second upload does not carry is gone too: the same ref ends in the same state
    assert sorted(keys(storage)) == sorted([ref.key(ObjectKind.LOG, PREFIX), ref.key(ObjectKind.MANIFEST, PREFIX)])
    assert all(o.size > 0 for o in storage.list_objects(TIP))
    storage.delete_segment(ref)
    storage.delete_segment(ref)
    assert storage.list_objects(TIP) == []
    assert storage.read_manifest(ref) is None


def test_verify_detects_tampering(storage: RemoteStorage) -> None:
    ref = new_ref()
    storage.copy_segment(
        ref, {ObjectKind.LOG: b"abcdef", ObjectKind.OFFSET_INDEX: b"12345678", ObjectKind.TIME_INDEX: b"12"}
    )
    storage.put_object(ref.key(ObjectKind.OFFSET_INDEX, PREFIX), b"87654321")  # same size, other bytes
    storage.put_object(ref.key(ObjectKind.TIME_INDEX, PREFIX), b"123")
    storage.delete_keys([ref.key(ObjectKind.LOG, PREFIX)])
    assert storage.verify_segment(ref) == [
        f"log: object {ref.key(ObjectKind.LOG, PREFIX)} is missing",
        f"index: {ref}: index chunk 0: crc32c {crc_hex(crc32c(b'87654321'))} "
        f"!= manifest {crc_hex(crc32c(b'12345678'))}",
        "timeindex: stored size 3 != manifest 2",
    ]


def test_manifest_never_present_after_a_failed_upload(storage: RemoteStorage, tmp_path: Path) -> None:
    ref = new_ref()
    files = segment_files(tmp_path, 1000)
    # the log and both indexes go up first; the snapshot fails
    with failing_upload(storage, ref.key(ObjectKind.PRODUCER_SNAPSHOT, PREFIX)):
        with pytest.raises(RemoteStorageError, match="snapshot"):
            storage.copy_segment(ref, files)
    assert storage.read_manifest(ref) is None
    assert storage.list_objects(TIP) == []
    storage.copy_segment(ref, files)  # the same upload, once the fault is gone
    assert storage.verify_segment(ref) == []


def test_failed_manifest_write_leaves_nothing(storage: RemoteStorage, tmp_path: Path) -> None:
    ref = new_ref()
    with failing_upload(storage, ref.key(ObjectKind.MANIFEST, PREFIX)):
        with pytest.raises(RemoteStorageError, match="manifest"):
            storage.copy_segment(ref, segment_files(tmp_path, 100))
    assert storage.list_objects(TIP) == []


def test_failed_reupload_leaves_no_manifest(storage: RemoteStorage) -> None:
    ref = new_ref()
    storage.copy_segment(ref, {ObjectKind.LOG: b"first", ObjectKind.OFFSET_INDEX: b"idx"})
    with failing_upload(storage, ref.key(ObjectKind.TIME_INDEX, PREFIX)):
        with pytest.raises(RemoteStorageError):
            storage.copy_segment(
                ref, {ObjectKind.LOG: b"second", ObjectKind.OFFSET_INDEX: b"idx2", ObjectKind.TIME_INDEX: b"t"}
            )
    assert storage.read_manifest(ref) is None
    assert storage.list_objects(TIP) == []


def test_missing_source_fails_before_any_io(storage: RemoteStorage, tmp_path: Path) -> None:
    ref = new_ref()
    storage.copy_segment(ref, {ObjectKind.LOG: b"kept"})
    before = storage.list_objects(TIP)
    with pytest.raises(RemoteStorageError, match=r"gone\.snapshot is not a readable file"):
        storage.copy_segment(ref, {ObjectKind.LOG: b"new", ObjectKind.PRODUCER_SNAPSHOT: tmp_path / "gone.snapshot"})
    with pytest.raises(RemoteStorageError, match="needs its log"):
        storage.copy_segment(ref, {ObjectKind.OFFSET_INDEX: b"idx"})
    assert storage.list_objects(TIP) == before and storage.fetch(ref, ObjectKind.LOG) == b"kept"


def test_the_segments_metadata_goes_into_the_manifest(storage: RemoteStorage) -> None:
    ref = new_ref(100)
    facts = SegmentFacts(104, 1_700_000_000_000, (EpochEntry(3, 100),), (EpochEntry(0, 0), EpochEntry(3, 90)))
    manifest = storage.copy_segment(ref, {ObjectKind.LOG: b"x" * 10}, facts=facts)
    assert manifest.segment == facts
    read = storage.read_manifest(replace(ref, manifest_sha256=manifest.digest()))
    assert read is not None and read.segment == facts
    assert storage.copy_segment(new_ref(200), {ObjectKind.LOG: b"y"}).segment is None


def test_facts_a_reader_would_refuse_fail_the_copy_before_any_io(storage: RemoteStorage) -> None:
    ref = new_ref(100)
    storage.copy_segment(ref, {ObjectKind.LOG: b"kept"})
    before = storage.list_objects(TIP)
    bad = SegmentFacts(104, 0, (EpochEntry(3, 99),))
    with pytest.raises(ManifestError, match=r"orders-2 segment 100 \(.*\): manifest segment leader epoch 3 starts"):
        storage.copy_segment(ref, {ObjectKind.LOG: b"new"}, facts=bad)
    assert storage.list_objects(TIP) == before and storage.fetch(ref, ObjectKind.LOG) == b"kept"


def test_progress_counts_every_byte_once(storage: RemoteStorage, tmp_path: Path) -> None:
    files = segment_files(tmp_path, 11 * MiB + 5)
    seen: list[int] = []
    manifest = storage.copy_segment(new_ref(), files, progress=seen.append)
    assert sum(seen) == sum(e.size for e in manifest.objects.values())
    assert len(seen) > 3  # reported while streaming, not once at the end


def test_listing_has_sizes_and_times_of_this_partition_only(storage: RemoteStorage) -> None:
    refs = [new_ref(base) for base in (0, 10, 20)]
    for ref in refs:
        storage.copy_segment(ref, {ObjectKind.LOG: b"x" * (ref.base_offset + 1)})
    other = TopicIdPartition("DDDDDDDDDDDDDDDDDDDDDD", TopicPartition("orders", 22))
    storage.copy_segment(RemoteSegmentRef(other, 0, uuid.uuid4()), {ObjectKind.LOG: b"other"})
    listed = storage.list_objects(TIP)
    assert len(listed) == 6 and all(o.key.startswith("p/orders-DDDDDDDDDDDDDDDDDDDDDD/2/") for o in listed)
    assert [o.key for o in listed] == sorted(o.key for o in listed)
    sizes = {o.key: o.size for o in listed}
    for ref in refs:
        assert sizes[ref.key(ObjectKind.LOG, PREFIX)] == ref.base_offset + 1
    assert all(o.last_modified.tzinfo is not None for o in listed)
    assert len(storage.list_prefix(PREFIX)) == 8
    assert [o.key for o in storage.list_prefix("p/orders-DDDDDDDDDDDDDDDDDDDDDD/2")] == [o.key for o in listed] + [
        o.key for o in storage.list_objects(other)
    ]
    assert storage.list_prefix("p/nothing-here/") == []


def test_missing_objects_and_bad_ranges_are_clear_errors(storage: RemoteStorage) -> None:
    ref = new_ref()
    with pytest.raises(RemoteObjectNotFoundError, match="not found"):
        storage.open_stream(ref, ObjectKind.LOG)
    with pytest.raises(RemoteObjectNotFoundError, match="not found"):
        storage.fetch(ref, ObjectKind.LOG)
    assert storage.verify_segment(ref) == ["manifest.json is missing"]
    assert storage.object_size(ref.key(ObjectKind.LOG, PREFIX)) is None
    storage.copy_segment(ref, {ObjectKind.LOG: b"0123456789"})
    assert storage.object_size(ref.key(ObjectKind.LOG, PREFIX)) == 10
    with pytest.raises(InvalidRangeError, match="invalid range"):
        storage.fetch(ref, ObjectKind.LOG, 5, 4)
    with pytest.raises(InvalidRangeError, match="invalid range"):
        storage.fetch(ref, ObjectKind.LOG, -1)
    with pytest.raises(InvalidRangeError, match="beyond"):
        storage.fetch(ref, ObjectKind.LOG, 11, 20)
    assert storage.fetch(ref, ObjectKind.LOG, 9, 9) == b"9"
    storage.put_object(ref.key(ObjectKind.MANIFEST, PREFIX), b"{broken")
    problems = storage.verify_segment(ref)
    assert len(problems) == 1 and problems[0].startswith("manifest:")
    with pytest.raises(ManifestError):
        storage.read_manifest(ref)


def test_manifest_of_another_segment_is_refused(storage: RemoteStorage) -> None:
    a, b = new_ref(0), new_ref(0)
    storage.copy_segment(a, {ObjectKind.LOG: b"a"})
    storage.copy_segment(b, {ObjectKind.LOG: b"b"})
    storage.put_object(
        b.key(ObjectKind.MANIFEST, PREFIX), storage.get_range(a.key(ObjectKind.MANIFEST, PREFIX), 0, None)
    )
    with pytest.raises(ManifestError, match=f"describes .*{a.segment_id}"):
        storage.read_manifest(b)
    assert storage.verify_segment(b)[0].startswith("manifest:")


# --- a delete that fails part-way leaves no manifest behind ------------------------------------


@contextmanager
def failing_delete(storage: RemoteStorage, key: str) -> Iterator[None]:
    """Make the delete of ``key`` fail for real: S3 refuses a DeleteObjects that names it; on
    the filesystem a non-empty directory sits where the object is, which unlink refuses."""
    if isinstance(storage, S3RemoteStorage):

        def refuse(request, **_kwargs):
            if key.encode() in (request.body or b""):
                body = b"<Error><Code>AccessDenied</Code><Message>injected</Message></Error>"
                return AWSResponse(request.url, 403, {}, _Raw(body))
            return None

        storage.client.meta.events.register("before-send.s3.DeleteObjects", refuse)
        try:
            yield
        finally:
            storage.client.meta.events.unregister("before-send.s3.DeleteObjects", refuse)
    else:
        assert isinstance(storage, FilesystemRemoteStorage)
        blocker = storage.root / key
        data = blocker.read_bytes()
        blocker.unlink()
        (blocker / "in-the-way").mkdir(parents=True)
        try:
            yield
        finally:
            (blocker / "in-the-way").rmdir()
            blocker.rmdir()
            blocker.write_bytes(data)  # the object is still there, as after a refused delete


def test_a_delete_that_fails_part_way_has_removed_the_manifest_first(storage: RemoteStorage) -> None:
    ref = new_ref(300)
    storage.copy_segment(ref, {ObjectKind.LOG: b"log", ObjectKind.OFFSET_INDEX: b"index"})
    with failing_delete(storage, ref.key(ObjectKind.OFFSET_INDEX, PREFIX)), pytest.raises(RemoteStorageError):
        storage.delete_segment(ref)
    assert storage.read_manifest(ref) is None  # the segment is visibly incomplete, never "whole"
    storage.delete_segment(ref)  # and a retry finishes the job
    assert keys(storage) == []


def test_a_reupload_whose_cleanup_fails_has_removed_the_old_manifest_first(storage: RemoteStorage) -> None:
    """Re-uploading a segment with fewer kinds deletes the old manifest, then the kinds the new
    upload does not carry; if that fails, no manifest describes the old objects any more."""
    ref = new_ref(400)
    storage.copy_segment(ref, {ObjectKind.LOG: b"first", ObjectKind.TRANSACTION_INDEX: b"txn"})
    with failing_delete(storage, ref.key(ObjectKind.TRANSACTION_INDEX, PREFIX)), pytest.raises(RemoteStorageError):
        storage.copy_segment(ref, {ObjectKind.LOG: b"second"})
    assert storage.read_manifest(ref) is None
    manifest = storage.copy_segment(ref, {ObjectKind.LOG: b"second"})
    assert set(manifest.objects) == {ObjectKind.LOG} and storage.verify_segment(ref) == []
    # the transaction index nothing lists any more is left to the orphan sweep
    left = {ref.key(kind, PREFIX) for kind in (ObjectKind.LOG, ObjectKind.MANIFEST, ObjectKind.TRANSACTION_INDEX)}
    assert set(keys(storage)) == left


# --- what killed processes leave, and partitions found from the keys ---------------------------


def leave_incomplete_upload(storage: RemoteStorage, tip: TopicIdPartition, name: str, data: bytes) -> str:
    """What a process killed mid-upload leaves: an S3 multipart upload with one part stored,
    or a temp file in the partition's directory. Returns the key it is listed under."""
    key = f"{partition_prefix(tip, PREFIX)}{name}"
    if isinstance(storage, S3RemoteStorage):
        client = storage.client
        upload = client.create_multipart_upload(Bucket=storage.bucket, Key=key)
        client.upload_part(Bucket=storage.bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=data)
        return key
    assert isinstance(storage, FilesystemRemoteStorage)
    temp = storage.root / key
    temp = temp.with_name(f".tmp-{temp.name}.{uuid.uuid4().hex}")
    temp.parent.mkdir(parents=True, exist_ok=True)
    temp.write_bytes(data)
    return temp.relative_to(storage.root).as_posix()


def test_incomplete_uploads_are_listed_by_age_and_removed(storage: RemoteStorage) -> None:
    ref = new_ref(0)
    storage.copy_segment(ref, {ObjectKind.LOG: b"finished"})
    key = leave_incomplete_upload(storage, TIP, "00000000000000000100-killed.log", b"x" * 1000)
    assert keys(storage) == sorted([ref.key(ObjectKind.LOG, PREFIX), ref.key(ObjectKind.MANIFEST, PREFIX)])
    (upload,) = storage.incomplete_uploads(TIP)
    assert upload.key == key and upload.size == 1000 and upload.age_ms(datetime.now(UTC)) < 60_000
    assert upload.target == f"{partition_prefix(TIP, PREFIX)}00000000000000000100-killed.log"
    expected_kind = "multipart-upload" if isinstance(storage, S3RemoteStorage) else "temp-file"
    assert upload.kind == expected_kind
    hour = 3_600_000
    assert storage.incomplete_uploads(TIP, older_than_ms=hour) == []  # young: may be in flight
    assert storage.remove_incomplete_uploads(TIP, older_than_ms=hour) == []
    assert storage.incomplete_uploads(TIP) == [upload]
    later = datetime.now(UTC) + timedelta(hours=2)
    assert storage.remove_incomplete_uploads(TIP, older_than_ms=hour, now=later) == [upload]
    assert storage.incomplete_uploads(TIP) == []
    assert storage.read_manifest(ref) is not None and storage.verify_segment(ref) == []  # finished data untouched
    with pytest.raises(ValueError, match="must be positive"):
        storage.remove_incomplete_uploads(TIP, older_than_ms=0)


def test_partitions_are_found_from_the_keys(storage: RemoteStorage) -> None:
    """Objects or only an unfinished upload make a partition visible; other names under the
    prefix are not partitions."""
    other = TopicIdPartition("ZZZZZZZZZZZZZZZZZZZZZZ", TopicPartition("a-b.c", 11))
    upload_only = TopicIdPartition("YYYYYYYYYYYYYYYYYYYYYY", TopicPartition("orders", 0))
    storage.copy_segment(new_ref(), {ObjectKind.LOG: b"x"})
    storage.copy_segment(RemoteSegmentRef(other, 5, uuid.uuid4()), {ObjectKind.LOG: b"y"})
    leave_incomplete_upload(storage, upload_only, "00000000000000000000-killed.log", b"z")
    storage.put_object(f"{PREFIX}not-a-partition/0/file", b"foreign")
    storage.put_object(f"{PREFIX}orders-{TIP.topic_id}/07/file", b"partition spelt another way")
    storage.put_object(f"{PREFIX}orders-{TIP.topic_id}/x/file", b"not a partition number")
    storage.put_object("elsewhere/orders-XXXXXXXXXXXXXXXXXXXXXX/0/file", b"outside the prefix")
    assert storage.remote_partitions() == sorted([TIP, other, upload_only])


def test_an_empty_store_has_no_partitions(storage: RemoteStorage) -> None:
    assert storage.remote_partitions() == []
    assert storage.incomplete_uploads(TIP) == []
