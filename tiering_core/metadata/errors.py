"""Errors of the metadata store, each naming the partition or segment it concerns."""

from __future__ import annotations

from tiering_core.errors import TieringError


class MetadataStoreError(TieringError):
    """The metadata database could not be reached or used (the message shows the URL without password)."""


class DuplicateSegmentError(MetadataStoreError):
    """A segment id was added twice; every copy attempt needs a fresh UUID."""


class InvalidSegmentMetadataError(TieringError, ValueError):
    """Segment metadata that cannot describe a Kafka segment (offsets or leader epochs out of order)."""


class FencedError(TieringError):
    """A writer's lease is no longer the partition's current one; nothing of its write landed."""


class LeaseHeldError(TieringError):
    """Another run holds the partition's lease and it has not expired."""


class InvalidStateTransitionError(TieringError):
    """A state change that Kafka's state machine does not allow; names both states and the subject."""

    def __init__(self, subject: str, current: str, new: str) -> None:
        self.subject = subject
        self.current = current
        self.new = new
        super().__init__(f"{subject}: invalid state transition {current} -> {new}")


class SegmentNotFoundError(TieringError):
    """No segment with that id (in the lease's partition)."""


class PartitionDeletedError(TieringError):
    """The partition is being (or was) removed: nothing may be copied to it."""


class PartitionNotEmptyError(MetadataStoreError):
    """A partition's removal cannot finish (or its metadata be dropped) while some of its segments
    are not DELETE_SEGMENT_FINISHED; names the partition and how many."""
