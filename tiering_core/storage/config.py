"""Where remote segments live and how remote calls behave: the storage's own settings.

The ``remote:`` section of the config file is read into this value (``config.remote``); the
factory (``storage.factory``) builds the backend it names, so storage depends on no config code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
