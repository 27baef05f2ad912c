"""``remote.chunk_size``, ``remote.compression`` and ``remote.encryption``: read into the storage's
settings, every bad value an error naming its key, and the key files read when the storage is
built (a missing or mismatched one names its key id)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.storage.keys_support import write_key_pair
from tiering_core.config.remote import parse_remote_config
from tiering_core.errors import ConfigError
from tiering_core.storage.config import EncryptionConfig
from tiering_core.storage.factory import create_remote_storage


def parse(tmp_path: Path, **remote: Any) -> Any:
    return parse_remote_config({"backend": "filesystem", "root": "tier", **remote}, lambda p: tmp_path / p)


def test_defaults_store_plain_chunks(tmp_path: Path) -> None:
    config = parse(tmp_path)
    assert (config.chunk_size, config.compression, config.encryption) == (4 * 1024 * 1024, "none", None)
    storage = create_remote_storage(config)
    assert storage.encoding.compression == "none" and not storage.encoding.encrypts


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


def test_key_files_are_read_when_the_storage_is_built(tmp_path: Path) -> None:
    k1, k2 = write_key_pair(tmp_path, "k1"), write_key_pair(tmp_path, "k2")
    missing = parse(
        tmp_path, encryption={"key_id": "k1", "public_key_file": "k1.pub.pem", "private_key_files": {"k1": "nope.pem"}}
    )
    with pytest.raises(
        ConfigError, match=r"remote\.encryption\.private_key_files\.k1: .*nope\.pem is not a regular file"
    ):
        create_remote_storage(missing)
    mismatched = parse(
        tmp_path,
        encryption={"key_id": "k1", "public_key_file": k1.public.name, "private_key_files": {"k1": k2.private.name}},
    )
    with pytest.raises(ConfigError, match="private key of key id 'k1' does not match public_key_file"):
        create_remote_storage(mismatched)
    not_a_key = tmp_path / "junk.pem"
    not_a_key.write_text("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    with pytest.raises(ConfigError, match=r"public_key_file: .*junk\.pem is not a PEM public key"):
        create_remote_storage(parse(tmp_path, encryption={"key_id": "k1", "public_key_file": "junk.pem"}))
    good = create_remote_storage(
        parse(tmp_path, compression="zstd", encryption={"key_id": "k1", "public_key_file": k1.public.name})
    )
    assert good.encoding.encrypts and good.encoding.keys is not None and good.encoding.keys.encrypts
