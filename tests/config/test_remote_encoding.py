"""``remote.chunk_size``, ``remote.compression`` and ``remote.encryption`` as the storage built from
them uses them: the key files read when the storage is built (a missing or mismatched one names its
key id)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.test_remote import parse
from tests.storage.keys_support import write_key_pair
from tiering_core.errors import ConfigError
from tiering_core.storage.factory import create_remote_storage


def test_defaults_store_plain_chunks(tmp_path: Path) -> None:
    config = parse(tmp_path)
    assert (config.chunk_size, config.compression, config.encryption) == (4 * 1024 * 1024, "none", None)
    storage = create_remote_storage(config)
    assert storage.encoding.compression == "none" and not storage.encoding.encrypts


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
