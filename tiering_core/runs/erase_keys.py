"""The keys of an erasure as a person or a file gives them: bytes as Kafka sees them, written in
an encoding (utf8, hex or base64), one key per line in a key file of bounded size. A bad key is
refused naming where it is (the line), never what it is: the key itself is never echoed."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path

from tiering_core.errors import TieringError
from tiering_core.kafka.files import read_regular
from tiering_core.runs.errors import ErasureRefusedError

#: The largest key file read (a list of keys to erase, not a data set).
MAX_KEY_FILE_BYTES = 64 * 1024 * 1024


class KeyEncoding(StrEnum):
    UTF8 = "utf8"
    HEX = "hex"
    BASE64 = "base64"


def decode_key(text: str, encoding: KeyEncoding, where: str) -> bytes:
    """One key's bytes from ``text`` in ``encoding``; a TieringError naming ``where``, not the key."""
    try:
        if encoding is KeyEncoding.UTF8:
            key = text.encode("utf-8")
        elif encoding is KeyEncoding.HEX:
            key = bytes.fromhex(text)
        else:
            key = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, binascii.Error, UnicodeError):
        raise TieringError(f"{where}: not a key in {encoding.value}") from None
    if not key:
        raise TieringError(f"{where}: an empty key")
    return key


def decode_keys(texts: Iterable[str], encoding: KeyEncoding) -> frozenset[bytes]:
    """The keys given on the command line (``--key``), each decoded."""
    return frozenset(decode_key(t, encoding, f"--key #{i}") for i, t in enumerate(texts, 1))


def read_key_file(path: Path, encoding: KeyEncoding) -> frozenset[bytes]:
    """The keys of ``path``, one per line in ``encoding`` (a line of utf8 keeps its spaces; blank
    lines are skipped, as a trailing newline is), at most ``MAX_KEY_FILE_BYTES``."""
    data = read_regular(path, MAX_KEY_FILE_BYTES, "key file")
    keys: set[bytes] = set()
    for number, raw in enumerate(data.split(b"\n"), 1):
        line = raw[:-1] if raw.endswith(b"\r") else raw
        if not line:
            continue
        try:
            text = line.decode("utf-8") if encoding is KeyEncoding.UTF8 else line.decode("ascii").strip()
        except UnicodeDecodeError:
            raise TieringError(f"{path}: line {number}: not a key in {encoding.value}") from None
        keys.add(decode_key(text, encoding, f"{path}: line {number}"))
    if not keys:
        raise TieringError(f"{path}: no key in the key file")
    return frozenset(keys)


def key_file_under(key_dir: str | None, name: str) -> Path:
    """The key file ``name`` (a path relative to ``key_dir``, the erase DAG's ``dags.erase.key_dir``)
    as it resolves on this host; refused when no directory is configured, or when the name (or a
    link on its way) leads out of it: a run's Params name a key file, never any file of the host."""
    if key_dir is None:
        raise ErasureRefusedError("key_file: dags.erase.key_dir is not set in the config; give the keys as a list")
    relative = Path(name)
    if not name or relative.is_absolute() or ".." in relative.parts:
        raise ErasureRefusedError(f"key_file {name!r}: expected a path relative to dags.erase.key_dir, without '..'")
    root = Path(key_dir).resolve()
    path = (root / relative).resolve()
    if not path.is_relative_to(root):
        raise ErasureRefusedError(f"key_file {name!r}: leads out of dags.erase.key_dir {key_dir}")
    return path
