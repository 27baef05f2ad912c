"""The events of the runs that read the remote tier (restore)."""

from __future__ import annotations

from dataclasses import dataclass

from tiering_core.events import RunEvent
from tiering_core.kafka.topic import TopicPartition


@dataclass(frozen=True)
class RestoringFromTierAlone(RunEvent):
    """The broker holds no directory of the partition: its one live topic id is restored from the
    metadata and the remote tier alone."""

    topic_partition: TopicPartition
    topic_id: str


@dataclass(frozen=True)
class SegmentRestored(RunEvent):
    """One segment's files written into the staging directory."""

    topic_partition: TopicPartition
    start_offset: int
    end_offset: int
    restored: int
    total: int
    bytes: int
