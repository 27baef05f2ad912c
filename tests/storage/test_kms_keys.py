"""Data keys wrapped by AWS KMS (moto's KMS on the same real HTTP server as S3): a round trip, a
key ring that reads RSA-wrapped segments after moving to KMS, and an unknown or wrong KMS key
refused with a message naming the key id and never the key."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.conftest import S3Endpoint
from tests.storage.keys_support import rsa_encryption, write_key_pair
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.storage.config import EncryptionConfig, RemoteConfig
from tiering_core.storage.factory import create_remote_storage
from tiering_core.storage.keys import DataKeyError
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef
from tiering_core.storage.remote import RemoteStorage

TIP = TopicIdPartition("KKKKKKKKKKKKKKKKKKKKKK", TopicPartition("payments", 0))
LOG = json.dumps([{"id": i, "card": "tok_" + str(i % 13)} for i in range(2000)]).encode()


def kms(endpoint: S3Endpoint) -> Any:
    return boto3.client("kms", endpoint_url=endpoint.url, region_name="us-east-1")


def storage(tmp_path: Path, endpoint: S3Endpoint, encryption: EncryptionConfig) -> RemoteStorage:
    config = RemoteConfig(
        backend="s3",
        bucket="kms-tier",
        endpoint_url=endpoint.url,
        region="us-east-1",
        chunk_size=8192,
        compression="zstd",
        encryption=encryption,
    )
    return create_remote_storage(config)


@pytest.fixture()
def bucket(s3_endpoint: S3Endpoint) -> None:
    client = boto3.client("s3", endpoint_url=s3_endpoint.url, region_name="us-east-1")
    try:
        client.create_bucket(Bucket="kms-tier")
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass


def test_kms_round_trip_rotation_and_refusals(tmp_path: Path, s3_endpoint: S3Endpoint, bucket: None) -> None:
    client = kms(s3_endpoint)
    key_id = client.create_key(Description="tier")["KeyMetadata"]["KeyId"]
    other = client.create_key(Description="other")["KeyMetadata"]["KeyId"]
    pair = write_key_pair(tmp_path / "keys", "rsa-1")
    with storage(tmp_path, s3_endpoint, rsa_encryption(pair)) as before:
        old = RemoteSegmentRef(TIP, 0, uuid.uuid4(), None)
        before.copy_segment(old, {ObjectKind.LOG: LOG})
    moved = EncryptionConfig(
        kms_key_id=key_id, kms_endpoint_url=s3_endpoint.url, private_key_files=(("rsa-1", pair.private),)
    )
    with storage(tmp_path, s3_endpoint, moved) as tier:
        new = RemoteSegmentRef(TIP, 100, uuid.uuid4(), None)
        manifest = tier.copy_segment(new, {ObjectKind.LOG: LOG})
        assert manifest.encryption is not None and manifest.encryption.key_wrap == "AWS-KMS"
        assert key_id in manifest.encryption.key_id
        stored = tier.get_range(new.key(ObjectKind.LOG, tier.prefix), 0, None)
        assert b"tok_" not in stored
        for ref in (old, new):  # the RSA-wrapped segment still reads after the move to KMS
            assert tier.fetch(ref, ObjectKind.LOG) == LOG
            assert tier.verify_segment(ref) == []
        text = tier.get_range(new.key(ObjectKind.MANIFEST, tier.prefix), 0, None).decode()
        data_key = tier.encoding.keys.unwrap(manifest.encryption, str(new))  # type: ignore[union-attr]
        assert data_key.hex() not in text

        # a manifest naming another KMS key than the one that wrapped its data key
        doc = json.loads(text)
        doc["encryption"]["key_id"] = other
        tier.put_object(new.key(ObjectKind.MANIFEST, tier.prefix), json.dumps(doc).encode())
    with storage(tmp_path, s3_endpoint, moved) as fresh, pytest.raises(DataKeyError) as wrong:
        fresh.fetch(new, ObjectKind.LOG)
    assert f"KMS key {other!r} cannot unwrap its data key" in str(wrong.value)
    assert data_key.hex() not in str(wrong.value)

    missing = EncryptionConfig(kms_key_id="alias/not-made", kms_endpoint_url=s3_endpoint.url)
    with storage(tmp_path, s3_endpoint, missing) as unknown, pytest.raises(DataKeyError) as refused:
        unknown.copy_segment(RemoteSegmentRef(TIP, 200, uuid.uuid4(), None), {ObjectKind.LOG: LOG})
    assert "KMS key 'alias/not-made': GenerateDataKey failed" in str(refused.value)
    assert not [o.key for o in unknown.list_prefix("") if f"/{200:020d}-" in o.key]  # nothing left behind
