"""The ``remote:`` section read into the storage's settings: the backend and where its objects
live, how calls are retried and bounded, and how new copies are stored (``remote.chunk_size``,
``remote.compression``, ``remote.encryption``); every bad value an error naming its key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tiering_core.config.remote import parse_remote_config
from tiering_core.errors import ConfigError
from tiering_core.storage.config import EncryptionConfig
from tiering_core.storage.manifest import MAX_KEY_ID


def parse(tmp_path: Path, **remote: Any) -> Any:
    return parse_remote_config({"backend": "filesystem", "root": "tier", **remote}, lambda p: tmp_path / p)


def test_an_rsa_key_ring_and_kms_are_read(tmp_path: Path) -> None:
    config = parse(
        tmp_path,
        chunk_size=65536,
        compression="auto",
        encryption={"key_id": "k2", "public_key_file": "k2.pub", "private_key_files": {"k1": "k1.pem", "k2": "k2.pem"}},
    )
    assert config.chunk_size == 65536 and config.compression == "auto"
    assert config.encryption == EncryptionConfig(
        key_id="k2",
        public_key_file=tmp_path / "k2.pub",
        private_key_files=(("k1", tmp_path / "k1.pem"), ("k2", tmp_path / "k2.pem")),
    )
    kms = parse(tmp_path, encryption={"kms_key_id": "alias/tier", "kms_endpoint_url": "http://127.0.0.1:1"})
    assert kms.encryption is not None and kms.encryption.kms_key_id == "alias/tier"


def test_the_smallest_chunk_size_named_is_accepted(tmp_path: Path) -> None:
    assert parse(tmp_path, chunk_size=5761).chunk_size == 5761
    with pytest.raises(ConfigError, match="use at least 5761"):
        parse(tmp_path, chunk_size=5760)


@pytest.mark.parametrize(
    ("remote", "message"),
    [
        ({"compression": "lz4"}, "remote.compression: 'lz4' is not one of none, zstd, auto"),
        ({"chunk_size": 100}, "remote.chunk_size: 100 is below the minimum 1024"),
        ({"chunk_size": 1 << 30}, "remote.chunk_size: 1073741824 is above"),
        (
            {"chunk_size": 1024},
            r"remote.chunk_size: 1024 is too small: a segment of Kafka's largest segment.bytes \(2147483647\) "
            r"could need a manifest above the 64.0 MiB readers accept; use at least 5761",
        ),
        ({"encryption": {"key_id": "k"}}, "remote.encryption: key_id and public_key_file go together"),
        ({"encryption": {}}, "remote.encryption: needs kms_key_id"),
        ({"encryption": {"kms_key_id": "a", "key_id": "k", "public_key_file": "p"}}, "not both"),
        ({"encryption": {"kms_key_id": "a", "password": "x"}}, "remote.encryption.password: unknown key"),
        ({"encryption": {"kms_key_id": "a", "kms_endpoint_url": "ftp://x"}}, "kms_endpoint_url"),
    ],
)
def test_bad_values_name_their_key(tmp_path: Path, remote: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(tmp_path, **remote)


def test_a_filesystem_root_resolves_beside_the_config_and_an_s3_bucket_keeps_no_root(tmp_path: Path) -> None:
    config = parse(tmp_path, prefix="prod/")
    assert (config.backend, config.root, config.bucket, config.prefix) == (
        "filesystem",
        tmp_path / "tier",
        None,
        "prod/",
    )
    s3 = parse_remote_config({"backend": "s3", "bucket": "kafka-tiered", "root": "ignored"}, lambda p: tmp_path / p)
    assert (s3.bucket, s3.root, s3.prefix, s3.deadline_seconds) == ("kafka-tiered", None, "", None)


def test_a_deadline_as_long_as_one_attempt_is_accepted(tmp_path: Path) -> None:
    config = parse(tmp_path, timeout_seconds=15, deadline_seconds=15)
    assert (config.timeout_seconds, config.deadline_seconds) == (15, 15)


def test_an_encryption_of_private_keys_alone_reads_old_segments(tmp_path: Path) -> None:
    config = parse(tmp_path, encryption={"private_key_files": {"k2": "keys/k2.pem", "k1": "keys/k1.pem"}})
    assert config.encryption == EncryptionConfig(
        private_key_files=(("k1", tmp_path / "keys/k1.pem"), ("k2", tmp_path / "keys/k2.pem"))
    )


@pytest.mark.parametrize(
    ("remote", "message"),
    [
        ({"backend": "gcs"}, "remote.backend: 'gcs' is not one of s3, filesystem"),
        ({"prefix": "/abs/"}, "remote.prefix: '/abs/' is not a relative key prefix"),
        ({"multipart_part_size_bytes": 1024}, "remote.multipart_part_size_bytes"),
        ({"max_attempts": 0}, "remote.max_attempts"),
        ({"timeout_seconds": -1}, "remote.timeout_seconds"),
        ({"encryption": {"key_id": "k" * (MAX_KEY_ID + 1), "public_key_file": "p"}}, "remote.encryption.key_id"),
        ({"encryption": {"kms_key_id": "alias\ttier"}}, "remote.encryption.kms_key_id: a key id is 1 to"),
        ({"encryption": {"private_key_files": {"k\n1": "k.pem"}}}, "remote.encryption.private_key_files"),
        ({"encryption": "k1"}, "remote.encryption"),
    ],
)
def test_more_bad_values_name_their_key(tmp_path: Path, remote: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(tmp_path, **remote)
