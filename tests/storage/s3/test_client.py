"""S3 specifics against moto's HTTP server: real multipart, batched deletes, sessions and credentials."""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

import boto3
import pytest

from tiering_core.errors import ConfigError
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.storage.checksum import crc32c, crc_hex
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef
from tiering_core.storage.s3 import S3RemoteStorage

TIP = TopicIdPartition("SSSSSSSSSSSSSSSSSSSSSS", TopicPartition("s3-specific", 0))
MiB = 1 << 20


def test_large_objects_go_up_in_parts_and_checksum_in_one_pass(s3_endpoint, tmp_path: Path) -> None:
    bucket = s3_endpoint.new_bucket()
    storage = S3RemoteStorage(
        bucket,
        endpoint_url=s3_endpoint.url,
        region="us-east-1",
        multipart_threshold_bytes=5 * MiB,
        multipart_part_size_bytes=5 * MiB,
        max_concurrency=2,
    )
    log = tmp_path / "seg.log"
    log.write_bytes(os.urandom(12 * MiB + 1))
    small = tmp_path / "seg.index"
    small.write_bytes(os.urandom(5 * MiB - 1))  # just under the threshold: one PutObject
    ref = RemoteSegmentRef(TIP, 0, uuid.uuid4())
    manifest = storage.copy_segment(ref, {ObjectKind.LOG: log, ObjectKind.OFFSET_INDEX: small})
    client = s3_endpoint.client()
    head = client.head_object(Bucket=bucket, Key=ref.key(ObjectKind.LOG))
    assert head["ETag"].endswith('-3"') and head["ContentLength"] == 12 * MiB + 1
    assert "-" not in client.head_object(Bucket=bucket, Key=ref.key(ObjectKind.OFFSET_INDEX))["ETag"]
    assert manifest.objects[ObjectKind.LOG].crc32c == crc_hex(crc32c(log.read_bytes()))
    assert manifest.objects[ObjectKind.OFFSET_INDEX].crc32c == crc_hex(crc32c(small.read_bytes()))
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_deletes_go_in_batches_of_a_thousand(s3_endpoint) -> None:
    bucket = s3_endpoint.new_bucket()
    storage = S3RemoteStorage(bucket, endpoint_url=s3_endpoint.url, region="us-east-1")
    batches: list[int] = []
    storage.client.meta.events.register(
        "before-call.s3.DeleteObjects", lambda params, **_: batches.append(params["body"].count(b"<Key>"))
    )
    client = s3_endpoint.client()
    for i in range(3):
        client.put_object(Bucket=bucket, Key=f"k/{i}", Body=b"x")
    storage.delete_keys([f"k/{i}" for i in range(2500)])  # three exist, the rest never did
    assert batches == [1000, 1000, 500]
    assert storage.list_prefix("k/") == []
    storage.delete_keys([])
    assert batches == [1000, 1000, 500]


def test_an_explicit_session_supplies_the_credentials(s3_endpoint) -> None:
    session = boto3.Session(aws_access_key_id="from-session", aws_secret_access_key="secret")
    storage = S3RemoteStorage(
        s3_endpoint.new_bucket(), endpoint_url=s3_endpoint.url, region="eu-west-1", session=session
    )
    signed: list[str] = []
    storage.client.meta.events.register(
        "before-send.s3.PutObject", lambda request, **_: signed.append(request.headers["Authorization"].decode())
    )
    ref = RemoteSegmentRef(TIP, 0, uuid.uuid4())
    storage.copy_segment(ref, {ObjectKind.LOG: b"signed"})
    assert storage.fetch(ref, ObjectKind.LOG) == b"signed"
    assert all("Credential=from-session/" in s and "/eu-west-1/s3/" in s for s in signed) and signed
    with pytest.raises(ConfigError, match="not both"):
        S3RemoteStorage("bucket", session=session, aws_access_key_id="k", aws_secret_access_key="s")


def test_explicit_keys_replace_the_default_chain(s3_endpoint) -> None:
    storage = S3RemoteStorage(
        s3_endpoint.new_bucket(),
        endpoint_url=s3_endpoint.url,
        region="us-east-1",
        aws_access_key_id="explicit-key",
        aws_secret_access_key="explicit-secret",
    )
    assert storage.client._request_signer._credentials.access_key == "explicit-key"
    default = S3RemoteStorage("bucket", endpoint_url=s3_endpoint.url, region="us-east-1")
    assert default.client._request_signer._credentials.access_key == os.environ["AWS_ACCESS_KEY_ID"]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"multipart_part_size_bytes": 1024}, "multipart_part_size_bytes"),
        ({"multipart_threshold_bytes": 0}, "multipart_threshold_bytes"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"timeout_seconds": 0}, "timeout_seconds"),
        ({"deadline_seconds": -1}, "deadline_seconds"),
    ],
)
def test_out_of_range_settings_are_config_errors(kwargs: dict[str, float], name: str) -> None:
    with pytest.raises(ConfigError, match=f"remote.{name}"):
        S3RemoteStorage("bucket", endpoint_url="http://127.0.0.1:9", **kwargs)  # type: ignore[arg-type]


def test_timeouts_and_deadlines_come_from_the_settings() -> None:
    storage = S3RemoteStorage("bucket", endpoint_url="http://127.0.0.1:9", timeout_seconds=7, max_attempts=3)
    config = storage.client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (7, 7)
    assert config.retries["total_max_attempts"] == 1  # our own retry loop is the only one
    assert storage.policy.max_attempts == 3 and storage.policy.deadline_seconds == 21
    assert storage.cleanup_policy.deadline_seconds == 7
    assert S3RemoteStorage("bucket", deadline_seconds=9).policy.deadline_seconds == 9


def test_every_upload_carries_its_crc32c_for_s3_to_check(s3_endpoint, tmp_path: Path) -> None:
    """Each PutObject and UploadPart sends the CRC-32C of its bytes (the one the manifest
    records) as x-amz-checksum-crc32c, so S3 refuses bytes that do not match it; the payload
    is not SHA-256 signed as well (a second pass over the data for no more safety)."""
    bucket = s3_endpoint.new_bucket()
    storage = S3RemoteStorage(
        bucket,
        endpoint_url=s3_endpoint.url,
        region="us-east-1",
        multipart_threshold_bytes=5 * MiB,
        multipart_part_size_bytes=5 * MiB,
    )
    sent: list[tuple[str, dict[str, str]]] = []

    def capture(request, **_):
        sent.append(
            (request.url, {k.lower(): v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()})
        )

    storage.client.meta.events.register("before-send.s3.UploadPart", capture)
    storage.client.meta.events.register("before-send.s3.PutObject", capture)
    storage.client.meta.events.register("before-send.s3.CreateMultipartUpload", capture)
    data = os.urandom(11 * MiB)
    (tmp_path / "seg.log").write_bytes(data)
    ref = RemoteSegmentRef(TIP, 0, uuid.uuid4())
    manifest = storage.copy_segment(ref, {ObjectKind.LOG: tmp_path / "seg.log", ObjectKind.OFFSET_INDEX: b"idx"})

    def b64(value: bytes) -> str:
        return base64.b64encode(crc32c(value).to_bytes(4, "big")).decode()

    create = [h for url, h in sent if url.endswith("?uploads")]
    assert [h.get("x-amz-checksum-algorithm") for h in create] == ["CRC32C"]
    parts = {int(url.rsplit("partNumber=", 1)[1].split("&")[0]): h for url, h in sent if "partNumber=" in url}
    assert sorted(parts) == [1, 2, 3]
    for number, headers in parts.items():
        chunk = data[(number - 1) * 5 * MiB : number * 5 * MiB]
        assert headers["x-amz-checksum-crc32c"] == b64(chunk)
    puts = {url.rsplit("/", 1)[1]: h for url, h in sent if "?" not in url}
    assert puts[ref.key(ObjectKind.OFFSET_INDEX).rsplit("/", 1)[1]]["x-amz-checksum-crc32c"] == b64(b"idx")
    assert puts[ref.key(ObjectKind.MANIFEST).rsplit("/", 1)[1]]["x-amz-checksum-crc32c"] == b64(
        storage.get_range(ref.key(ObjectKind.MANIFEST), 0, None)
    )
    assert all(h["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD" for _, h in sent if "x-amz-checksum-crc32c" in h)
    assert manifest.objects[ObjectKind.LOG].crc32c == crc_hex(crc32c(data))
