"""The events of a retention lane (``runs.lanes``), one per thing it tells."""

from __future__ import annotations

from dataclasses import dataclass

from tiering_core.events import RunEvent
from tiering_core.kafka.topic import TopicPartition


@dataclass(frozen=True)
class PartitionRetentionOutcome(RunEvent):
    """What a retention lane did with one partition, told once per partition (``outcome``:
    deleted, fenced, skipped, deferred or failed; ``detail`` says why)."""

    topic_partition: TopicPartition
    outcome: str
    segments_deleted: int
    bytes_deleted: int
    detail: str | None = None
