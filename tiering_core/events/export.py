"""The events of an export of the tiered log into its Iceberg table (``tiering_core.export.run``)."""

from __future__ import annotations

from dataclasses import dataclass

from tiering_core.events import RunEvent
from tiering_core.kafka.topic import TopicPartition


@dataclass(frozen=True)
class ExportPlanned(RunEvent):
    """The segments an export of ``topic`` into ``table`` writes (or, in a dry run, would write)."""

    topic: str
    table: str
    segments: int
    size_bytes: int


@dataclass(frozen=True)
class SegmentWouldExport(RunEvent):
    """A dry run's planned segment."""

    topic_partition: TopicPartition
    segment_id: str
    start_offset: int
    end_offset: int


@dataclass(frozen=True)
class SegmentExported(RunEvent):
    """One segment's data files written (not committed yet); ``done`` of ``total`` so far."""

    topic_partition: TopicPartition
    segment_id: str
    start_offset: int
    end_offset: int
    rows: int
    files: int
    done: int
    total: int
    #: Records whose value could not be decoded (a typed topic), written to the dead-letter table.
    dead_letters: int = 0


@dataclass(frozen=True)
class SegmentExportFailed(RunEvent):
    """One segment not exported; ``reason`` names its id and the offset its decode stopped at."""

    reason: str
    done: int
    total: int


@dataclass(frozen=True)
class ExportCommitted(RunEvent):
    """One snapshot of ``table`` holding ``segments`` segments."""

    table: str
    segments: int
    snapshot_id: int


@dataclass(frozen=True)
class ExportCleanedUp(RunEvent):
    """Data files of export attempts that never committed, removed from ``table``'s location."""

    table: str
    files: int
