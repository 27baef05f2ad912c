"""What a rebuild of segment indexes tells: its plan, a partition another run holds, the broker's
segments skipped where no log dir is read, and each segment's verdict (the values ``tiering
rebuild-indexes`` and the Spark app report)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tiering_core.events import RunEvent
from tiering_core.kafka.topic import TopicPartition
from tiering_core.storage.layout import ObjectKind


class IndexStatus(StrEnum):
    OK = "ok"
    MISSING = "missing"
    DIFFERED = "differed"
    REPAIRED = "repaired"
    ERROR = "error"


@dataclass(frozen=True)
class IndexFinding:
    """One index of one segment: what is stored against what the ``.log`` rebuilds to."""

    kind: ObjectKind
    status: IndexStatus  # ok, missing or differed
    stored_bytes: int | None
    rebuilt_bytes: int
    detail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "status": self.status.value,
            "stored_bytes": self.stored_bytes,
            "rebuilt_bytes": self.rebuilt_bytes,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class IndexCheck:
    """The verdict on one segment's indexes (remote or local)."""

    topic: str
    partition: int
    base_offset: int
    end_offset: int | None
    location: str  # "remote" or "local"
    segment_id: str | None
    findings: tuple[IndexFinding, ...] = ()
    log_bytes: int = 0
    seconds: float = 0.0
    error: str | None = None
    repaired_as: str | None = None
    damaged_log: bool = False  # the error is a remote object that does not match its recorded checksum

    @property
    def needs_repair(self) -> bool:
        return self.error is None and any(f.status != IndexStatus.OK for f in self.findings)

    @property
    def status(self) -> IndexStatus:
        if self.error is not None:
            return IndexStatus.ERROR
        if self.repaired_as is not None:
            return IndexStatus.REPAIRED
        found = {f.status for f in self.findings}
        if IndexStatus.MISSING in found:
            return IndexStatus.MISSING
        if IndexStatus.DIFFERED in found:
            return IndexStatus.DIFFERED
        return IndexStatus.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "base_offset": self.base_offset,
            "end_offset": self.end_offset,
            "location": self.location,
            "segment_id": self.segment_id,
            "status": self.status.value,
            "indexes": [f.to_dict() for f in self.findings],
            "log_bytes": self.log_bytes,
            "seconds": round(self.seconds, 3),
            "error": self.error,
            "damaged_log": self.damaged_log,
            "repaired_as": self.repaired_as,
        }


@dataclass(frozen=True)
class RebuildPlanned(RunEvent):
    """The run holds the partitions it could and knows its work; nothing is examined yet."""

    partitions: int
    remote_segments: int
    remote_bytes: int
    local_segments: int
    repair: bool


@dataclass(frozen=True)
class LocalIndexesSkipped(RunEvent):
    """The broker's own segments were asked for (``local``) but this process serves no broker:
    it has no log dir to read, so only the remote segments of ``partitions`` are checked."""

    partitions: int


@dataclass(frozen=True)
class PartitionBusy(RunEvent):
    """Another run holds the partition: its remote segments are not checked (its local ones
    are, with ``local``: they need no lease)."""

    topic_partition: TopicPartition
    local: bool


@dataclass(frozen=True)
class IndexChecked(RunEvent):
    """One segment's final verdict (its repair committed or given up)."""

    check: IndexCheck
