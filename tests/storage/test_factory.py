"""create_remote_storage: each backend from RemoteConfig, bad config refused before any I/O."""

from __future__ import annotations

import uuid
from pathlib import Path

import boto3
import pytest

from tiering_core.errors import ConfigError
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.storage.config import RemoteConfig
from tiering_core.storage.factory import create_remote_storage
from tiering_core.storage.filesystem import FilesystemRemoteStorage
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef
from tiering_core.storage.s3 import S3RemoteStorage

MiB = 1 << 20
REF = RemoteSegmentRef(TopicIdPartition("FFFFFFFFFFFFFFFFFFFFFF", TopicPartition("factory", 0)), 0, uuid.uuid4())


def test_factory_builds_each_backend(s3_endpoint, tmp_path: Path) -> None:
    with create_remote_storage(RemoteConfig(backend="filesystem", root=tmp_path / "t", prefix="x/")) as fs:
        assert isinstance(fs, FilesystemRemoteStorage) and fs.prefix == "x/"
        fs.copy_segment(REF, {ObjectKind.LOG: b"on disk"})
        assert (tmp_path / "t" / REF.key(ObjectKind.LOG, "x/")).read_bytes() == b"on disk"
    config = RemoteConfig(
        backend="s3",
        bucket=s3_endpoint.new_bucket(),
        prefix="y/",
        endpoint_url=s3_endpoint.url,
        region="us-east-1",
        multipart_threshold_bytes=6 * MiB,
        multipart_part_size_bytes=7 * MiB,
        max_concurrency=3,
        max_attempts=2,
        timeout_seconds=11,
    )
    with create_remote_storage(config, aws_access_key_id="k", aws_secret_access_key="s", aws_session_token="") as s3:
        assert isinstance(s3, S3RemoteStorage)
        assert (s3.threshold, s3.part_size, s3.concurrency, s3.policy.max_attempts) == (6 * MiB, 7 * MiB, 3, 2)
        assert s3.client.meta.config.read_timeout == 11 and s3.prefix == "y/"
        s3.copy_segment(REF, {ObjectKind.LOG: b"via factory"})
        assert s3.fetch(REF, ObjectKind.LOG, 4) == b"factory"
    session = boto3.Session(aws_access_key_id="sess", aws_secret_access_key="s")
    with create_remote_storage(config, session=session) as s3:
        assert s3.fetch(REF, ObjectKind.LOG) == b"via factory"


@pytest.mark.parametrize(
    ("config", "credentials", "message"),
    [
        (RemoteConfig(backend="filesystem"), {}, "remote.root"),
        (RemoteConfig(backend="s3"), {}, "remote.bucket"),
        (RemoteConfig(backend="gcs", bucket="b"), {}, "remote.backend"),
        (RemoteConfig(backend="s3", bucket="b", multipart_part_size_bytes=1024), {}, "multipart_part_size_bytes"),
        (RemoteConfig(backend="s3", bucket="b", max_concurrency=0), {}, "max_concurrency"),
        (RemoteConfig(backend="s3", bucket="b", timeout_seconds=0), {}, "timeout_seconds"),
        (RemoteConfig(backend="s3", bucket="b", prefix="../up/"), {}, "remote.prefix"),
        (RemoteConfig(backend="s3", bucket="b"), {"password": "x"}, "password"),
    ],
)
def test_factory_rejects_bad_config_before_io(config: RemoteConfig, credentials: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        create_remote_storage(config, **credentials)
