"""Where remote segments live and how remote calls behave: the storage's own settings.

The ``remote:`` section of the config file is read into this value (``config.remote``); the
factory (``storage.factory``) builds the backend it names, so storage depends on no config code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EncryptionConfig:
    """``remote.encryption``: new segments' data keys are wrapped by ``kms_key_id`` (AWS KMS) or
    else by ``key_id``'s ``public_key_file`` (RSA-OAEP); ``private_key_files`` (key id, path)
    unwrap the data keys of segments copied under each key pair, old ones included."""

    key_id: str | None = None
    public_key_file: Path | None = None
    private_key_files: tuple[tuple[str, Path], ...] = ()
    kms_key_id: str | None = None
    kms_endpoint_url: str | None = None
    kms_region: str | None = None


#: ``remote.compression``: ``auto`` compresses a segment's log only when its batches are not.
COMPRESSION_MODES = ("none", "zstd", "auto")
DEFAULT_CHUNK_SIZE = 4 * 1024 * 1024


@dataclass(frozen=True)
class RemoteConfig:
    """Where remote segments live. ``backend`` is ``s3`` or ``filesystem``."""

    backend: str
    bucket: str | None = None
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None
    root: Path | None = None
    multipart_threshold_bytes: int = 8 * 1024 * 1024
    multipart_part_size_bytes: int = 8 * 1024 * 1024
    max_concurrency: int = 4
    max_attempts: int = 5
    timeout_seconds: float = 60.0
    deadline_seconds: float | None = None  # one remote call with its retries; None: 3 x timeout_seconds
    #: How new copies are stored (docs/segment-format.md): format 1 byte for byte when neither
    #: compression nor encryption is asked for, else format 2's chunks.
    chunk_size: int = DEFAULT_CHUNK_SIZE
    compression: str = "none"
    encryption: EncryptionConfig | None = None
