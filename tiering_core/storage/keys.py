"""Segment data keys: one fresh AES-256 key per segment, stored only wrapped (docs/segment-format.md).

A key ring wraps new data keys under one key, RSA-OAEP (SHA-256) with the current key pair's
public key or AWS KMS's ``GenerateDataKey``, and unwraps with any key it holds: the private keys
of old key pairs stay in the ring after a rotation, so segments copied under them stay readable.
No key, wrapped or not, ever appears in a message or a log line; messages name the key id.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tiering_core.errors import ConfigError
from tiering_core.storage.config import EncryptionConfig
from tiering_core.storage.errors import RemoteStorageError
from tiering_core.storage.manifest import WrappedKey

RSA_OAEP = "RSA-OAEP-SHA256"
AWS_KMS = "AWS-KMS"
DATA_KEY_SIZE = 32
#: Key files are small; anything larger is not a PEM key.
MAX_KEY_FILE = 64 * 1024
MIN_RSA_BITS = 2048
_OAEP = padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA256()), algorithm=hashes.SHA256(), label=None)


class DataKeyError(RemoteStorageError):
    """A data key cannot be wrapped or unwrapped: the key id is unknown, wrong, or its service failed."""


def _read_pem(path: Path, what: str, *, private: bool = False) -> bytes:
    """A key file's bytes. A private key file open to its group or others (any of mode 0o077) is
    refused, as ssh refuses one: whoever else can read it can read every segment."""
    try:
        if not path.is_file():
            raise ConfigError(f"{what}: {path} is not a regular file")
        status = path.stat()
        if private and status.st_mode & 0o077:
            raise ConfigError(
                f"{what}: {path} is open to its group or others (mode {stat.S_IMODE(status.st_mode):04o}): chmod 600 it"
            )
        if status.st_size > MAX_KEY_FILE:
            raise ConfigError(f"{what}: {path} is larger than a key file")
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {path}: {exc.strerror}") from None


def load_public_key(path: Path, what: str) -> rsa.RSAPublicKey:
    try:
        key = serialization.load_pem_public_key(_read_pem(path, what))
    except (ValueError, TypeError):
        raise ConfigError(f"{what}: {path} is not a PEM public key") from None
    if not isinstance(key, rsa.RSAPublicKey) or key.key_size < MIN_RSA_BITS:
        raise ConfigError(f"{what}: {path} is not an RSA public key of at least {MIN_RSA_BITS} bits")
    return key


def load_private_key(path: Path, what: str) -> rsa.RSAPrivateKey:
    try:
        key = serialization.load_pem_private_key(_read_pem(path, what, private=True), password=None)
    except (ValueError, TypeError):
        raise ConfigError(f"{what}: {path} is not an unencrypted PEM private key") from None
    if not isinstance(key, rsa.RSAPrivateKey) or key.key_size < MIN_RSA_BITS:
        raise ConfigError(f"{what}: {path} is not an RSA private key of at least {MIN_RSA_BITS} bits")
    return key


@dataclass
class KeyRing:
    """Wraps each new segment's data key under the configured key; unwraps under any held key.

    ``kms`` makes the KMS client when first needed (boto3, the storage's credentials)."""

    config: EncryptionConfig
    kms: Callable[[], Any] | None = None
    _public: rsa.RSAPublicKey | None = field(default=None, repr=False)
    _private: dict[str, rsa.RSAPrivateKey] = field(default_factory=dict, repr=False)
    _kms_client: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        section = "remote.encryption"
        for key_id, path in self.config.private_key_files:
            self._private[key_id] = load_private_key(path, f"{section}.private_key_files.{key_id}")
        if self.config.public_key_file is not None:
            self._public = load_public_key(self.config.public_key_file, f"{section}.public_key_file")
            own = self._private.get(self.config.key_id or "")
            if own is not None and own.public_key().public_numbers() != self._public.public_numbers():
                raise ConfigError(
                    f"{section}: the private key of key id {self.config.key_id!r} does not match public_key_file"
                )

    @classmethod
    def of(cls, config: EncryptionConfig | None, kms: Callable[[], Any] | None = None) -> KeyRing | None:
        return None if config is None else cls(config, kms)

    @property
    def encrypts(self) -> bool:
        """Whether new segments are encrypted (a ring holding only old private keys reads)."""
        return self.config.kms_key_id is not None or self._public is not None

    def wraps_new_keys_like(self, wrapped: WrappedKey) -> bool:
        """Whether ``wrapped`` is wrapped the way new data keys are (the same RSA key id, or the
        same KMS key named by id or ARN; an alias never matches)."""
        kms_key_id = self.config.kms_key_id
        if kms_key_id is not None:
            return wrapped.key_wrap == AWS_KMS and (
                wrapped.key_id == kms_key_id or wrapped.key_id.endswith(f"/{kms_key_id}")
            )
        return wrapped.key_wrap == RSA_OAEP and wrapped.key_id == self.config.key_id

    def new_data_key(self) -> tuple[bytes, WrappedKey]:
        """A fresh data key and its wrapped form for the manifest."""
        if self.config.kms_key_id is not None:
            key_id = self.config.kms_key_id
            try:
                answer = self._kms().generate_data_key(KeyId=key_id, KeySpec="AES_256")
            except Exception as exc:
                raise DataKeyError(f"KMS key {key_id!r}: GenerateDataKey failed: {_reason(exc)}") from None
            plain = bytes(answer["Plaintext"])
            if len(plain) != DATA_KEY_SIZE:
                raise DataKeyError(f"KMS key {key_id!r}: returned a data key of {len(plain)} bytes")
            return plain, WrappedKey(AWS_KMS, str(answer.get("KeyId") or key_id), bytes(answer["CiphertextBlob"]))
        if self._public is None or self.config.key_id is None:
            raise DataKeyError("remote.encryption: no key to encrypt new segments with")
        plain = os.urandom(DATA_KEY_SIZE)
        return plain, WrappedKey(RSA_OAEP, self.config.key_id, self._public.encrypt(plain, _OAEP))

    def unwrap(self, wrapped: WrappedKey, segment: str) -> bytes:
        """The data key of ``segment``; a DataKeyError naming the key id if this ring cannot."""
        if wrapped.key_wrap == AWS_KMS:
            try:
                answer = self._kms().decrypt(CiphertextBlob=wrapped.wrapped, KeyId=wrapped.key_id)
            except DataKeyError:
                raise
            except Exception as exc:
                raise DataKeyError(
                    f"{segment}: KMS key {wrapped.key_id!r} cannot unwrap its data key: {_reason(exc)}"
                ) from None
            plain = bytes(answer["Plaintext"])
        else:
            private = self._private.get(wrapped.key_id)
            if private is None:
                raise DataKeyError(
                    f"{segment}: encrypted under key id {wrapped.key_id!r}, which "
                    "remote.encryption.private_key_files does not hold"
                )
            try:
                plain = private.decrypt(wrapped.wrapped, _OAEP)
            except ValueError:
                raise DataKeyError(
                    f"{segment}: the private key of key id {wrapped.key_id!r} does not unwrap its "
                    "data key (a wrong key file for that id?)"
                ) from None
        if len(plain) != DATA_KEY_SIZE:
            raise DataKeyError(f"{segment}: key id {wrapped.key_id!r} unwrapped a {len(plain)}-byte key")
        return plain

    def _kms(self) -> Any:
        if self._kms_client is None:
            if self.kms is None:
                raise DataKeyError("remote.encryption: segments use AWS KMS, and no KMS client can be made")
            self._kms_client = self.kms()
        return self._kms_client


def _reason(exc: BaseException) -> str:
    """A remote failure's kind and code, never its full text (which may echo request fields)."""
    response = getattr(exc, "response", None)
    if isinstance(response, Mapping):
        error = response.get("Error", {})
        return f"{type(exc).__name__} {error.get('Code', '')}".strip()
    return type(exc).__name__
