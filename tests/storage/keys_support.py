"""RSA key pairs written as PEM files, and the encodings the format-2 tests store segments with."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tiering_core.storage.config import EncryptionConfig
from tiering_core.storage.encoding import SegmentEncoding
from tiering_core.storage.keys import KeyRing


@dataclass(frozen=True)
class KeyPair:
    key_id: str
    public: Path
    private: Path


def write_key_pair(directory: Path, key_id: str) -> KeyPair:
    """A fresh 2048-bit key pair under ``directory`` (unencrypted PEM, as the config reads it),
    the private key created 0600 as an operator must."""
    directory.mkdir(parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = directory / f"{key_id}.pem"
    public = directory / f"{key_id}.pub.pem"
    write_private_key(private, key)
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return KeyPair(key_id, public, private)


def write_private_key(path: Path, key: rsa.RSAPrivateKey) -> None:
    """``key`` as unencrypted PKCS#8 PEM in a file only its owner can read, from its creation on."""
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
        out.write(pem)
    path.chmod(0o600)  # a file that was there already keeps its mode through O_CREAT


def rsa_encryption(current: KeyPair | None, *readable: KeyPair) -> EncryptionConfig:
    """New segments under ``current`` (None: read only); ``readable`` and ``current`` unwrap."""
    held = {k.key_id: k.private for k in (*readable, *([current] if current else []))}
    return EncryptionConfig(
        key_id=current.key_id if current else None,
        public_key_file=current.public if current else None,
        private_key_files=tuple(sorted(held.items())),
    )


def encoding(compression: str, encryption: EncryptionConfig | None = None, chunk_size: int = 1024) -> SegmentEncoding:
    return SegmentEncoding(chunk_size, compression, KeyRing.of(encryption))
