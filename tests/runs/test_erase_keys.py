"""An erasure's keys as given: utf8, hex and base64, on the command line or one per line in a key
file; a bad key is refused naming its line and never itself; the key file's size is bounded."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from tiering_core.errors import TieringError
from tiering_core.runs import erase_keys
from tiering_core.runs.erase_keys import KeyEncoding, decode_keys, read_key_file

KEYS = [b"user-1", "ünïcode key".encode(), bytes(range(256))[:40], b" spaced "]


def written(encoding: KeyEncoding, key: bytes) -> str:
    if encoding is KeyEncoding.UTF8:
        return key.decode()
    return key.hex() if encoding is KeyEncoding.HEX else base64.b64encode(key).decode()


@pytest.mark.parametrize("encoding", list(KeyEncoding))
def test_each_encoding_gives_the_bytes_kafka_sees(encoding: KeyEncoding, tmp_path: Path) -> None:
    binary = KEYS[2]  # a line of text cannot hold its newline: only hex and base64 can write it
    keys = [k for k in KEYS if encoding is not KeyEncoding.UTF8 or k != binary]
    lines = [written(encoding, k) for k in keys]
    assert decode_keys(lines, encoding) == frozenset(keys)
    path = tmp_path / "keys.txt"
    path.write_bytes(("\r\n".join(lines) + "\n\n").encode())  # CRLF and a blank tail are no keys
    assert read_key_file(path, encoding) == frozenset(keys)


@pytest.mark.parametrize(
    ("encoding", "bad"), [(KeyEncoding.HEX, "abz1"), (KeyEncoding.BASE64, "not base64!"), (KeyEncoding.HEX, "ab c")]
)
def test_a_bad_key_is_refused_naming_its_line_and_never_itself(encoding: KeyEncoding, bad: str, tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    path.write_text(f"{written(encoding, b'fine')}\n{bad}\n")
    with pytest.raises(TieringError) as refused:
        read_key_file(path, encoding)
    assert str(refused.value) == f"{path}: line 2: not a key in {encoding.value}"
    with pytest.raises(TieringError, match=r"^--key #2: not a key in") as refused:
        decode_keys([written(encoding, b"fine"), bad], encoding)
    assert bad not in str(refused.value)


def test_an_empty_key_file_and_a_non_utf8_line_are_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(TieringError, match="no key in the key file"):
        read_key_file(empty, KeyEncoding.UTF8)
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(TieringError, match="line 2: not a key in utf8"):
        read_key_file(latin, KeyEncoding.UTF8)


def test_a_key_file_above_the_bound_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(erase_keys, "MAX_KEY_FILE_BYTES", 16)
    path = tmp_path / "keys.txt"
    path.write_text("a\n" * 9)
    with pytest.raises(TieringError, match="key file is 18 bytes, more than the 16"):
        read_key_file(path, KeyEncoding.UTF8)


def test_a_key_file_is_read_only_from_under_the_configured_directory(tmp_path: Path) -> None:
    """The erase DAG's Params name a key file relative to ``dags.erase.key_dir``: never an absolute
    path, never ``..``, never a link that leads out of the directory."""
    from tiering_core.runs.erase_keys import key_file_under
    from tiering_core.runs.errors import ErasureRefusedError

    key_dir = tmp_path / "requests"
    (key_dir / "2026-11").mkdir(parents=True)
    inside = key_dir / "2026-11" / "request-118.txt"
    inside.write_text("user-1\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("not a key file\n")
    (key_dir / "escape").symlink_to(outside)
    (key_dir / "up").symlink_to(tmp_path)

    assert key_file_under(str(key_dir), "2026-11/request-118.txt") == inside
    refused = {
        str(outside): "expected a path relative to dags.erase.key_dir",
        "../secret.txt": "expected a path relative to dags.erase.key_dir",
        "2026-11/../../secret.txt": "expected a path relative to dags.erase.key_dir",
        "": "expected a path relative to dags.erase.key_dir",
        "escape": "leads out of dags.erase.key_dir",
        "up/secret.txt": "leads out of dags.erase.key_dir",
    }
    for name, reason in refused.items():
        with pytest.raises(ErasureRefusedError, match=reason):
            key_file_under(str(key_dir), name)
    with pytest.raises(ErasureRefusedError, match=r"dags\.erase\.key_dir is not set"):
        key_file_under(None, "2026-11/request-118.txt")
