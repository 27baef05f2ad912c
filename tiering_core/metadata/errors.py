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


class TopicIdConflictError(MetadataStoreError):
    """A topic id the store knows under another topic name: a topic id names one topic for its
    whole life, so a partition dir claiming it for another name (a copied or edited
    ``partition.metadata``) must never share that topic's lease, segments and lineage."""

    def __init__(self, topic_id: str, stored: str, claimed: str) -> None:
        self.topic_id = topic_id
        self.stored = stored
        self.claimed = claimed
        super().__init__(
            f"topic id {topic_id} belongs to topic {stored!r} in the metadata store, but the partition dir of "
            f"topic {claimed!r} carries it (in its partition.metadata): refusing to treat {claimed!r} as "
            f"{stored!r}; a topic id names one topic for its whole life"
        )


def check_topic_name(topic_id: str, stored: str, claimed: str) -> None:
    """TopicIdConflictError unless the stored partition's topic name is the one claimed."""
    if stored != claimed:
        raise TopicIdConflictError(topic_id, stored, claimed)


class UnknownBrokerError(TieringError, ValueError):
    """An observation from a broker id the store does not accept (negative, not an integer, or
    outside the brokers the caller allows); nothing of the batch is recorded."""


class SchemaBehindError(MetadataStoreError):
    """The store's schema is older than this version of the platform: it is never migrated
    unasked (the operator runs ``tiering db upgrade``, after a backup), so nothing is opened."""


class SchemaAheadError(MetadataStoreError):
    """The store's schema is newer than this version of the platform knows: a newer version
    upgraded it, and this one cannot tell what its columns mean."""


class BackupError(TieringError):
    """A backup refused or failed, naming the file and why; nothing was written under its name."""
