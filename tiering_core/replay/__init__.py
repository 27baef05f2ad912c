"""Replay: a range of the remote tier put back into a Kafka topic through the producer API,
exactly once across kills (docs/replay.md). ``source``: what is read, through the one read path;
``target``: the topic written, its transactions and the ``tiering.source`` marks; ``run``: the
driver, one source partition per task."""

from tiering_core.replay.run import (
    PartitionReplayResult,
    ReplayRequest,
    ReplayResult,
    replay,
)
from tiering_core.replay.source import RangeRequest
from tiering_core.replay.target import SOURCE_HEADER, Partitioning, SourceMark

__all__ = [
    "SOURCE_HEADER",
    "PartitionReplayResult",
    "Partitioning",
    "RangeRequest",
    "ReplayRequest",
    "ReplayResult",
    "SourceMark",
    "replay",
]
