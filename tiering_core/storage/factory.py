"""Build the configured remote storage backend.

Each backend is imported only when configured: the filesystem backend runs without boto3.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from tiering_core.errors import ConfigError
from tiering_core.storage.config import EncryptionConfig, RemoteConfig

if TYPE_CHECKING:
    import boto3

    from tiering_core.storage.encoding import SegmentEncoding
    from tiering_core.storage.remote import RemoteStorage

CREDENTIALS = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")


def create_remote_storage(
    config: RemoteConfig, *, session: boto3.Session | None = None, **credentials: str
) -> RemoteStorage:
    """The backend ``config`` names. A boto3 ``session`` or explicit credentials (e.g. from an
    Airflow connection) replace the standard AWS chain; empty credentials are ignored."""
    unknown = sorted(set(credentials) - set(CREDENTIALS))
    if unknown:
        raise ConfigError(f"unknown remote storage credential(s): {', '.join(unknown)}")
    storage = _backend(config, session, credentials)
    storage.encoding = segment_encoding(config, session, credentials)
    return storage


def segment_encoding(
    config: RemoteConfig, session: boto3.Session | None = None, credentials: Mapping[str, str] | None = None
) -> SegmentEncoding:
    """How new copies are stored, with the key ring that wraps and unwraps their data keys (its
    key files are read here: a missing or bad one fails the build, naming its key)."""
    from tiering_core.storage.encoding import SegmentEncoding
    from tiering_core.storage.keys import KeyRing

    encryption = config.encryption
    kms = None
    if encryption is not None:
        kms = partial(_kms_client, encryption, config.region, session, dict(credentials or {}))
    return SegmentEncoding(config.chunk_size, config.compression, KeyRing.of(encryption, kms))


def _kms_client(
    encryption: EncryptionConfig, region: str | None, session: boto3.Session | None, credentials: Mapping[str, str]
) -> Any:
    from botocore.config import Config

    from tiering_core.storage.s3.session import new_session

    if session is None:
        session = new_session(
            credentials.get("aws_access_key_id") or None,
            credentials.get("aws_secret_access_key") or None,
            credentials.get("aws_session_token") or None,
        )
    return session.client(
        "kms",
        region_name=encryption.kms_region or region,
        endpoint_url=encryption.kms_endpoint_url,
        config=Config(connect_timeout=10, read_timeout=30, retries={"total_max_attempts": 3, "mode": "standard"}),
    )


def _backend(config: RemoteConfig, session: boto3.Session | None, credentials: Mapping[str, str]) -> RemoteStorage:
    if config.backend == "filesystem":
        if config.root is None:
            raise ConfigError("remote.root: required for the filesystem backend")
        from tiering_core.storage.filesystem import FilesystemRemoteStorage

        return FilesystemRemoteStorage(config.root, prefix=config.prefix)
    if config.backend != "s3":
        raise ConfigError(f"remote.backend: {config.backend!r} is not s3 or filesystem")
    if not config.bucket:
        raise ConfigError("remote.bucket: required for the s3 backend")
    from tiering_core.storage.s3 import S3RemoteStorage

    return S3RemoteStorage(
        config.bucket,
        prefix=config.prefix,
        endpoint_url=config.endpoint_url,
        region=config.region,
        multipart_threshold_bytes=config.multipart_threshold_bytes,
        multipart_part_size_bytes=config.multipart_part_size_bytes,
        max_concurrency=config.max_concurrency,
        max_attempts=config.max_attempts,
        timeout_seconds=config.timeout_seconds,
        deadline_seconds=config.deadline_seconds,
        session=session,
        aws_access_key_id=credentials.get("aws_access_key_id") or None,
        aws_secret_access_key=credentials.get("aws_secret_access_key") or None,
        aws_session_token=credentials.get("aws_session_token") or None,
    )
