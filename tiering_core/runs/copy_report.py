"""What a copy run did: one partition's result (``CopyResult``, what ``run_copy`` returns and every
caller reads), and a parallel run's report: each partition's result, why a partition failed or has
a tiering gap, and the events that tell a partition's outcome and the run's summary."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from tiering_core.events import EventSink
from tiering_core.events.copy import ParallelUploadFinished, PartitionCopyOutcome
from tiering_core.kafka.topic import TopicPartition


class PartitionRun(Protocol):
    """What a copy or a retention result tells of how its partition's run ended."""

    fenced: bool
    deferred: bool
    skipped_reason: str | None


def partition_outcome(
    result: PartitionRun, problem: tuple[str, str] | None, done: str, next_run: str
) -> tuple[str, str | None]:
    """How a lane's partition ended, and why, for its copy or retention outcome event: its problem
    (``failed``, a tiering ``gap``) first, then fenced, deferred (``next_run``: what the next run
    does), skipped; else ``done``."""
    if problem is not None:
        return problem
    if result.fenced:
        return "fenced", "another run holds the partition"
    if result.deferred:
        return "deferred", f"the time budget ran out; the next run {next_run}"
    if result.skipped_reason is not None:
        return "skipped", result.skipped_reason
    return done, None


@dataclass
class CopyResult:
    topic: str
    partition: int
    dry_run: bool = False
    fenced: bool = False
    skipped_reason: str | None = None
    #: A multi-partition run's deadline passed before the partition, or the rest of its segments,
    #: started: the next run copies them (``runs.copy_many``).
    deferred: bool = False
    segments_copied: int = 0
    bytes_copied: int = 0
    segments_cleaned_up: int = 0
    highest_copied_offset: int = -1
    last_stable_offset: int | None = None
    copy_lag_segments: int = 0
    copy_lag_bytes: int = 0
    gaps: list[list[int]] = field(default_factory=list)
    planned: list[dict[str, int]] = field(default_factory=list)
    seconds: float = 0.0
    copy_delay: dict[str, int] | None = None  # why closed segments below the LSO wait (KIP-1241)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, for ``--json`` and XCom."""
        return {**asdict(self), "seconds": round(self.seconds, 3)}


@dataclass
class ParallelCopyReport:
    results: list[CopyResult] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)
    #: Why a partition failed or has a tiering gap, by ``<topic>-<partition>`` (the first message).
    problems: dict[str, tuple[str, str]] = field(default_factory=dict)
    workers: set[str] = field(default_factory=set)
    seconds: float = 0.0
    check_seconds: float = 0.0  # the driver's segment checks (CRC scan) and STARTED writes
    #: Hears each partition's ``PartitionCopyOutcome`` as the partition ends (None: nobody).
    announce: EventSink | None = field(default=None, repr=False, compare=False)

    @property
    def segments(self) -> int:
        return sum(r.segments_copied for r in self.results)

    @property
    def bytes(self) -> int:
        return sum(r.bytes_copied for r in self.results)

    @property
    def cleaned_up(self) -> int:
        return sum(r.segments_cleaned_up for r in self.results)

    @property
    def fenced(self) -> list[str]:
        return [f"{r.topic}-{r.partition}" for r in self.results if r.fenced]

    @property
    def deferred(self) -> list[str]:
        """The partitions the deadline left, whole or in part, to the next run."""
        return [f"{r.topic}-{r.partition}" for r in self.results if r.deferred]

    def add(self, result: CopyResult) -> None:
        """A partition's result, once its problems are recorded; told to ``announce`` at once, so a
        long run's log shows each partition as it ends, not all of them at the end."""
        self.results.append(result)
        if self.announce is not None:
            self.announce(self.outcome(result))

    def fail(self, tp: TopicPartition, message: str) -> None:
        self.failures.append(message)
        self.problems.setdefault(str(tp), ("failed", message))

    def gap(self, tp: TopicPartition, message: str) -> None:
        self.gaps.append(message)
        self.problems.setdefault(str(tp), ("gap", message))

    def outcome(self, result: CopyResult) -> PartitionCopyOutcome:
        """What the run did with one partition (a failure or gap first, then fenced, deferred,
        skipped; else copied), as the event that tells it."""
        tp = TopicPartition(result.topic, result.partition)
        outcome, detail = partition_outcome(result, self.problems.get(str(tp)), "copied", "copies the rest")
        return PartitionCopyOutcome(
            tp,
            outcome,
            result.segments_copied,
            result.bytes_copied,
            result.copy_lag_segments,
            result.copy_lag_bytes,
            detail,
        )

    def finished(self) -> ParallelUploadFinished:
        """The run's summary, as the event that tells it."""
        return ParallelUploadFinished(
            partitions=len(self.results),
            segments=self.segments,
            bytes_copied=self.bytes,
            seconds=self.seconds,
            workers=len(self.workers),
            failures=len(self.failures),
            check_seconds=self.check_seconds,
            fenced=len(self.fenced),
            gaps=len(self.gaps),
            deferred=len(self.deferred),
        )
