"""The events of the runs that read the remote tier (restore, verify), and the value of one
segment's verification they carry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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


@dataclass
class SegmentVerification:
    """One finished segment checked against its manifest and metadata: what is wrong with it
    (nothing: ok)."""

    topic: str
    partition: int
    segment_id: str
    start_offset: int
    end_offset: int
    size_bytes: int
    problems: list[str] = field(default_factory=list)
    #: Whether the metadata store holds the digest of its manifest (copied with digests): a
    #: segment copied before reads as it did, but nothing proves its bytes are the ones copied
    #: until ``tiering rewrite`` copies it again.
    tamper_evident: bool = True

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "segment_id": self.segment_id,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "size_bytes": self.size_bytes,
            "ok": self.ok,
            "problems": list(self.problems),
            "tamper_evident": self.tamper_evident,
        }


@dataclass(frozen=True)
class VerifyPlanned(RunEvent):
    """The finished segments a verify checks: how many, their log bytes, of how many partitions."""

    segments: int
    size_bytes: int
    partitions: int


@dataclass(frozen=True)
class SegmentVerified(RunEvent):
    """One segment checked (``done`` of ``total`` so far)."""

    result: SegmentVerification
    done: int
    total: int
