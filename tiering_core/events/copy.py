"""The events of a copy run (``runs.copy``; ``runs.copy_many`` for many partitions at once), one
per thing it tells."""

from __future__ import annotations

from dataclasses import dataclass

from tiering_core.events import RunEvent
from tiering_core.kafka.topic import TopicPartition


@dataclass(frozen=True)
class CopySkipped(RunEvent):
    """Nothing copied from this broker's log: Kafka would not tier the topic, or the log is behind
    the recorded lineage (not the leader's)."""

    topic_partition: TopicPartition
    reason: str


@dataclass(frozen=True)
class CopyNotPlanned(RunEvent):
    """The plan gives this broker nothing to copy: another broker's replica is the one to copy
    (or, in a dry run, the log cannot be copied from)."""

    topic_partition: TopicPartition
    reason: str


@dataclass(frozen=True)
class CopyDelayed(RunEvent):
    """Closed segments below the LSO wait for their delayed upload (KIP-1241): from
    ``base_offset`` on, ``waiting_segments`` of them. The effective ``remote.copy.lag.ms`` and
    ``remote.copy.lag.bytes`` (-1: that check is not applied) against the first one's age and
    the bytes of the local log after it."""

    topic_partition: TopicPartition
    base_offset: int
    waiting_segments: int
    waiting_bytes: int
    copy_lag_ms: int
    copy_lag_bytes: int
    segment_age_ms: int
    newer_bytes: int


@dataclass(frozen=True)
class PartitionHeld(RunEvent):
    """Another copy run holds the partition's lease: this run does nothing."""

    topic_partition: TopicPartition


@dataclass(frozen=True)
class SegmentCopied(RunEvent):
    """A segment's objects uploaded and COPY_SEGMENT_FINISHED committed. ``index`` of ``total``
    in a sequential run; ``worker``: the Spark executor that uploaded it."""

    topic_partition: TopicPartition
    base_offset: int
    end_offset: int
    size_bytes: int
    seconds: float
    index: int | None = None
    total: int | None = None
    worker: str | None = None


@dataclass(frozen=True)
class SegmentVanished(RunEvent):
    """The broker's own retention deleted a segment while it was being copied."""

    topic_partition: TopicPartition
    base_offset: int


@dataclass(frozen=True)
class SegmentFailed(RunEvent):
    """A segment's upload failed; what it wrote was cleaned up and the run stops."""

    topic_partition: TopicPartition
    base_offset: int
    reason: str


@dataclass(frozen=True)
class SegmentNotFinished(RunEvent):
    """An upload that ended after an earlier segment of its partition failed: cleaned up, never
    finished, so the copied offset never skips."""

    topic_partition: TopicPartition
    base_offset: int


@dataclass(frozen=True)
class SegmentLeftUploading(RunEvent):
    """A segment was uploading when the run was aborted: the next run's recovery cleans it up."""

    topic_partition: TopicPartition
    base_offset: int


@dataclass(frozen=True)
class FencedWhileCopying(RunEvent):
    """A newer run (``holder``) took the partition's lease while this one copied: it stops."""

    topic_partition: TopicPartition
    base_offset: int
    holder: str


@dataclass(frozen=True)
class LeaseExpiredWhileCopying(RunEvent):
    """The lease expired under the run (no newer holder): it stops and fails for ``reason``."""

    topic_partition: TopicPartition
    reason: str


@dataclass(frozen=True)
class CopyFinished(RunEvent):
    """A run's summary, once it released the partition: what it copied and where the partition is."""

    topic_partition: TopicPartition
    segments_copied: int
    bytes_copied: int
    seconds: float
    highest_copied_offset: int
    copy_lag_segments: int
    copy_lag_bytes: int


@dataclass(frozen=True)
class WouldCopy(RunEvent):
    """A dry run's planned segment."""

    topic_partition: TopicPartition
    base_offset: int
    end_offset: int
    size_bytes: int


@dataclass(frozen=True)
class DryRunPlanned(RunEvent):
    """A dry run's summary: how many segments a run would copy now."""

    topic_partition: TopicPartition
    segments: int


@dataclass(frozen=True)
class UploadsPlanned(RunEvent):
    """The multi-partition copy's plan (``runs.copy_many``): its partitions' candidates, handed
    out ``slots`` at a time."""

    segments: int
    size_bytes: int
    partitions: int
    slots: int


@dataclass(frozen=True)
class SegmentRefused(RunEvent):
    """The driver's check of a segment failed (a CRC failure, a vanished file): it is not handed
    out, and the partition's segments before it are still committed."""

    topic_partition: TopicPartition
    base_offset: int
    reason: str


@dataclass(frozen=True)
class CopyDeferred(RunEvent):
    """The run's deadline passed before this partition (``segments`` None) or the rest of its
    segments (``segments`` of them) started: nothing of them was touched, the next run copies them."""

    topic_partition: TopicPartition
    segments: int | None = None


@dataclass(frozen=True)
class PartitionCopyOutcome(RunEvent):
    """What a multi-partition run did with one partition, told once per partition at its end
    (``outcome``: copied, deferred, fenced, skipped, failed or gap; ``detail`` says why)."""

    topic_partition: TopicPartition
    outcome: str
    segments_copied: int
    bytes_copied: int
    copy_lag_segments: int
    copy_lag_bytes: int
    detail: str | None = None


@dataclass(frozen=True)
class ParallelUploadFinished(RunEvent):
    """The multi-partition copy's summary. ``check_seconds``: the driver's segment checks (CRC
    scan) and STARTED writes; ``fenced``: partitions another run held."""

    partitions: int
    segments: int
    bytes_copied: int
    seconds: float
    workers: int
    failures: int
    check_seconds: float
    fenced: int
    gaps: int
    deferred: int = 0
