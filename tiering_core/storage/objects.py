"""Remote objects: the primitives each backend (filesystem, S3) provides, nothing about segments.

Keys live under the store's ``prefix``; every write reports its size and CRC-32C, so the segment
layer above (``segments``) can record and verify what it copied.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Self

from tiering_core.storage.layout import (
    validate_deployment_prefix,
)
from tiering_core.storage.quota import StorageQuotas

log = logging.getLogger(__name__)
Progress = Callable[[int], None]


@dataclass(frozen=True)
class RemoteObject:
    key: str
    size: int
    last_modified: datetime


#: IncompleteUpload kinds.
MULTIPART_UPLOAD = "multipart-upload"
TEMP_FILE = "temp-file"


@dataclass(frozen=True)
class IncompleteUpload:
    """An upload its process never finished (killed mid-copy): an S3 multipart upload, whose
    parts are stored and billed but listed by no object listing, or a filesystem temp file.

    ``key`` names the leftover: the upload's object key (S3) or the temp file (filesystem);
    ``target`` is the object it would have become. ``last_active`` is when its newest part
    was stored or it began (S3), or its last write (filesystem): an upload still in progress
    is always young. ``size`` is the bytes it holds.
    """

    kind: str
    key: str
    target: str
    last_active: datetime
    size: int
    upload_id: str | None = None

    def age_ms(self, now: datetime) -> int:
        return int((now - self.last_active).total_seconds() * 1000)


class ObjectStore(ABC):
    """A backend's object primitives under ``prefix``: put, get (ranged or streamed), size, delete,
    list, and the incomplete uploads a killed process left. A segment's objects take ``quotas.copy``
    tokens as their bytes go out (``storage.quota``)."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = validate_deployment_prefix(prefix)
        self.quotas = StorageQuotas()
        #: What must pass before any write or deletion under the prefix (``engine.binding``: the
        #: prefix is this metadata store's); None: nothing (a Spark executor's copy, whose driver
        #: passed it).
        self.write_check: Callable[[], None] | None = None

    def require_writable(self) -> None:
        """Raise unless this process may write and delete under the prefix (``write_check``)."""
        if self.write_check is not None:
            self.write_check()

    # --- backend primitives ------------------------------------------------------------------

    @abstractmethod
    def put_object(self, key: str, source: Path | bytes, progress: Progress | None = None) -> tuple[int, int]:
        """Store ``source`` under ``key``; returns (size, CRC-32C) computed while streaming."""

    @abstractmethod
    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        """Bytes [start, min(end, size - 1)] of an object (``end`` inclusive, None = to the end),
        in one request. A missing object is RemoteObjectNotFoundError; ``start`` at or past the
        end is InvalidRangeError, except ``start == 0`` on an empty object, which reads b""."""

    @abstractmethod
    def open_object(self, key: str, start: int = 0) -> BinaryIO:
        """A stream over the object from ``start`` (same errors as :meth:`get_range`)."""

    @abstractmethod
    def object_size(self, key: str) -> int | None:
        """Size of the object, or None if it does not exist."""

    @abstractmethod
    def delete_keys(self, keys: Iterable[str]) -> None:
        """Delete objects; missing ones are not an error."""

    @abstractmethod
    def list_prefix(self, prefix: str) -> list[RemoteObject]:
        """Every object under ``prefix``, sorted by key."""

    @abstractmethod
    def describe(self, key: str) -> str:
        """Where ``key`` lives, for error messages (bucket or root)."""

    @abstractmethod
    def list_child_prefixes(self, prefix: str) -> list[str]:
        """The distinct ``<prefix><name>/`` one level below ``prefix`` that hold anything,
        objects or unfinished uploads (a delimiter listing), sorted."""

    @abstractmethod
    def list_incomplete_uploads(self, prefix: str) -> list[IncompleteUpload]:
        """Every unfinished upload under ``prefix``, of any age, sorted by key."""

    @abstractmethod
    def remove_incomplete_upload(self, upload: IncompleteUpload) -> None:
        """Abort the multipart upload or remove the temp file; one already gone is not an error."""

    def _put_segment_object(self, key: str, source: Path | bytes, progress: Progress | None) -> tuple[int, int]:
        """One object of :meth:`copy_segment`; a backend may leave making it durable to
        :meth:`_sync_segment`, which runs once the manifest is written too."""
        return self.put_object(key, source, progress)

    def _sync_segment(self, keys: list[str]) -> None:  # noqa: B027 - only a filesystem has something to do
        """Make the objects :meth:`_put_segment_object` wrote durable before copy_segment returns."""

    def discard_keys(self, keys: Iterable[str]) -> None:
        """Best-effort delete after a failure: a backend may bound it more tightly than a
        normal delete, since the caller's recovery deletes leftovers again later."""
        self.delete_keys(keys)

    def close(self) -> None:  # noqa: B027 - optional for backends
        """Release connections."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- segments --------------------------------------------------------------------------
