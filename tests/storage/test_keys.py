"""Private key files: only their owner may have access, as ssh asks of its keys; a file open to its
group or others is refused at once, naming the file, its mode and the config key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.storage.keys_support import rsa_encryption, write_key_pair
from tiering_core.errors import ConfigError
from tiering_core.storage.keys import KeyRing, load_private_key


@pytest.mark.parametrize("mode", [0o666, 0o644, 0o640, 0o604, 0o620])
def test_a_private_key_open_to_group_or_others_is_refused(tmp_path: Path, mode: int) -> None:
    pair = write_key_pair(tmp_path, "k1")
    pair.private.chmod(mode)
    expected = f"remote.encryption.private_key_files.k1: {pair.private} is open to its group or others (mode 0{mode:o})"
    with pytest.raises(ConfigError, match=re.escape(expected) + ": chmod 600 it$"):
        KeyRing(rsa_encryption(pair))


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_a_private_key_only_its_owner_may_read_is_loaded(tmp_path: Path, mode: int) -> None:
    pair = write_key_pair(tmp_path, "k1")
    pair.private.chmod(mode)
    ring = KeyRing(rsa_encryption(pair))
    data_key, wrapped = ring.new_data_key()
    assert ring.unwrap(wrapped, "a segment") == data_key
    assert load_private_key(pair.private, "k1").key_size == 2048


def test_the_public_key_may_be_read_by_anyone(tmp_path: Path) -> None:
    pair = write_key_pair(tmp_path, "k1")
    pair.public.chmod(0o644)
    assert KeyRing(rsa_encryption(pair)).encrypts
