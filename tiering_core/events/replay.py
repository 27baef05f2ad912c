"""The events of a replay of the remote tier into a Kafka topic (``tiering_core.replay``)."""

from __future__ import annotations

from dataclasses import dataclass

from tiering_core.events import RunEvent
from tiering_core.kafka.topic import TopicPartition


@dataclass(frozen=True)
class ReplayStarted(RunEvent):
    """A source partition's replay begins: the source offsets ``first_offset``..``last_offset`` it
    covers, and where it continues from (``resumed_after``: the highest source offset the target
    already held, None for none)."""

    topic_partition: TopicPartition
    target_topic: str
    first_offset: int
    last_offset: int
    resumed_after: int | None


@dataclass(frozen=True)
class ReplayGap(RunEvent):
    """Source offsets of the range that the remote tier cannot replay (``reason``: a tiering gap,
    or below the remote log start)."""

    topic_partition: TopicPartition
    start_offset: int
    end_offset: int
    reason: str


@dataclass(frozen=True)
class ReplayCommitted(RunEvent):
    """A transaction committed: ``records`` and ``bytes`` (keys, values and headers) so far, up to
    source offset ``up_to``, in ``seconds`` since the partition's replay began."""

    topic_partition: TopicPartition
    up_to: int
    records: int
    bytes: int
    seconds: float


@dataclass(frozen=True)
class ReplayFinished(RunEvent):
    """A source partition's replay ended: its ``outcome`` (replayed, up to date, fenced, failed)
    and why when it did not replay."""

    topic_partition: TopicPartition
    outcome: str
    records: int
    bytes: int
    seconds: float
    detail: str | None = None
