"""Remote storage errors: one clear message naming backend, key, operation and cause."""

from __future__ import annotations

from tiering_core.errors import TieringError


class RemoteStorageError(TieringError):
    """A remote call failed for good (after retries, within the deadline)."""


class RemoteObjectNotFoundError(RemoteStorageError):
    """The object does not exist."""


class InvalidRangeError(RemoteStorageError):
    """A byte range that the object cannot satisfy (inverted, negative, or starting past its end)."""


class ManifestError(RemoteStorageError):
    """A segment manifest is malformed, or describes another segment than the one it is stored for."""


class PartitionStateError(RemoteStorageError):
    """A partition's ``partition-state.json`` is malformed, too large, or names another partition."""
