"""Errors of the runs (copy, removal, rebuild): each says which partition or segment and why,
under ``TieringError`` so the ``tiering`` command prints it as its one-line reason."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiering_core.errors import TieringError

if TYPE_CHECKING:
    from tiering_core.runs.removal_targets import RemovalTargets


class CopyFailedError(TieringError):
    """A segment could not be copied; what was uploaded of it has been cleaned up."""


class DamagedSegmentError(TieringError):
    """A remote object does not match what was recorded when the segment was copied (or a batch
    of its ``.log`` fails its CRC): the segment's indexes cannot be judged, nothing is repaired."""


class RemovalRefusedError(TieringError):
    """Removing would delete the remote data of a partition the broker still holds.

    ``targets`` is what was found (nothing to remove, the live topic ids ``kept``), so a caller
    deciding whether to force the removal needs no second look at the store; ``None`` when the
    broker's log dirs could not be read at all.
    """

    def __init__(self, message: str, *, targets: RemovalTargets | None = None) -> None:
        super().__init__(message)
        self.targets = targets


class DeletionUnprovenError(RemovalRefusedError):
    """Topic ids missing from the broker's log dirs without positive evidence that they were
    deleted; ``targets`` is what a forced removal deletes."""


class RemovalRequestRefusedError(TieringError):
    """A removal request refused before anything is deleted (a wrong confirmation, a partition
    without remote data, live data without ``force``); retrying does not help."""


class DeleteRecordsRefusedError(TieringError):
    """A DeleteRecords refused before anything was applied (a negative offset or one beyond the high
    watermark, a partition not tiered or removed, a directory the cluster does not know, a cluster
    other than the log dirs', the cluster refusing it); retrying does not help."""


class ErasureRefusedError(TieringError):
    """An erasure refused before anything was read or written (keys given badly, a key file outside
    its directory, a topic or partition with nothing in the remote tier); retrying does not help."""
