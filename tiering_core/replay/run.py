"""The replay driver: a range of the remote tier back into a Kafka topic, one source partition per
task on an executor's threads, each in transactions of its own (docs/replay.md).

Per source partition: its reader and range (``replay.source``), the parts the tier cannot replay
reported as ``ReplayGap``, a transactional producer initialised (fencing a killed or concurrent
replay of the same partition into the same topic), where it stopped read back from the target
(``PartitionWriter.last_replayed``), then the records from there read through the reader, as many
per transaction as ``TRANSACTION_BYTES`` and ``TRANSACTION_RECORDS`` allow, each transaction
committed before the next is read. A failure or a fence stops only its partition.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tiering_core.engine.executor import InProcessExecutor
from tiering_core.engine.read_ahead import read_ahead
from tiering_core.errors import ClusterUnreachableError, TieringError, one_line
from tiering_core.events import EventSink, discard
from tiering_core.events.replay import ReplayCommitted, ReplayFinished, ReplayGap, ReplayStarted
from tiering_core.kafka.isolation import IsolationLevel
from tiering_core.metadata.values import ReplayRecord
from tiering_core.replay.source import (
    RangeRequest,
    SourceRange,
    open_source,
    resolve_range,
    source_partitions,
    source_topic_id,
)
from tiering_core.replay.target import (
    DEFAULT_MAX_REQUEST_SIZE,
    Partitioning,
    PartitionWriter,
    ReplayFencedError,
    ReplayTarget,
    TargetTopic,
    is_client_error,
    record_bytes,
)
from tiering_core.tier.offsets import OffsetRange

if TYPE_CHECKING:
    from tiering_core.config import KafkaConfig
    from tiering_core.context import TieringContext
    from tiering_core.kafka.topic import TopicIdPartition
    from tiering_core.read.reader import FetchedRecord, RemoteLogReader
    from tiering_core.storage.remote import RemoteStorage

#: A transaction holds at most this many records and about this many bytes (a record larger than
#: that is a transaction of its own): memory follows it, and a kill loses at most one.
TRANSACTION_RECORDS = 20_000
TRANSACTION_BYTES = 16 * 1024 * 1024
#: At most one progress line per partition this often (and one at its end).
PROGRESS_SECONDS = 2.0

OUTCOME_REPLAYED = "replayed"
OUTCOME_UP_TO_DATE = "up to date"
OUTCOME_FENCED = "fenced"
OUTCOME_FAILED = "failed"


@dataclass(frozen=True)
class ReplayRequest:
    """What to replay where: the source topic (``topic_id``: one of its incarnations, default the
    newest the store holds), its partitions (default all), the range, and the target."""

    topic: str
    target_topic: str
    range: RangeRequest
    partitions: tuple[int, ...] = ()
    topic_id: str | None = None
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED
    partitioning: Partitioning = Partitioning.SAME
    concurrency: int = 4
    max_request_size: int = DEFAULT_MAX_REQUEST_SIZE

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise TieringError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.max_request_size < 1024:
            raise TieringError(f"max request size must be at least 1024 bytes, got {self.max_request_size}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: what a DAG's planning task hands its replay tasks (``from_dict`` reads it)."""
        return {
            "topic": self.topic,
            "target_topic": self.target_topic,
            "from_offset": self.range.from_offset,
            "from_timestamp": self.range.from_timestamp,
            "to_offset": self.range.to_offset,
            "to_timestamp": self.range.to_timestamp,
            "partitions": list(self.partitions),
            "topic_id": self.topic_id,
            "isolation": self.isolation.value,
            "partitioning": self.partitioning.value,
            "concurrency": self.concurrency,
            "max_request_size": self.max_request_size,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ReplayRequest:
        """A request from ``to_dict``'s fields (or a DAG's Params); a TieringError names a bad one."""

        def integer(name: str) -> int | None:
            value = raw.get(name)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, int):
                raise TieringError(f"{name}: expected an integer, got {value!r}")
            return value

        try:
            isolation = IsolationLevel(raw.get("isolation", IsolationLevel.READ_COMMITTED.value))
            partitioning = Partitioning(raw.get("partitioning", Partitioning.SAME.value))
        except ValueError as exc:
            raise TieringError(str(exc)) from None
        partitions = raw.get("partitions") or []
        if not isinstance(partitions, (list, tuple)) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
        ):
            raise TieringError(f"partitions: expected a list of partition numbers, got {partitions!r}")
        for name in ("topic", "target_topic"):
            if not isinstance(raw.get(name), str) or not raw[name]:
                raise TieringError(f"{name}: expected a topic name, got {raw.get(name)!r}")
        return cls(
            topic=raw["topic"],
            target_topic=raw["target_topic"],
            range=RangeRequest(
                integer("from_offset"), integer("from_timestamp"), integer("to_offset"), integer("to_timestamp")
            ),
            partitions=tuple(partitions),
            topic_id=raw.get("topic_id"),
            isolation=isolation,
            partitioning=partitioning,
            concurrency=integer("concurrency") or 4,
            max_request_size=integer("max_request_size") or DEFAULT_MAX_REQUEST_SIZE,
        )


@dataclass
class PartitionReplayResult:
    """One source partition's replay."""

    topic: str
    partition: int
    topic_id: str
    target_topic: str
    first_offset: int | None = None
    last_offset: int | None = None
    resumed_after: int | None = None
    records: int = 0
    bytes: int = 0
    transactions: int = 0
    seconds: float = 0.0
    gaps: list[tuple[OffsetRange, str]] = field(default_factory=list)
    outcome: str = OUTCOME_REPLAYED
    detail: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome in (OUTCOME_REPLAYED, OUTCOME_UP_TO_DATE)

    def record(self, started_ms: int, finished_ms: int, run: str | None) -> ReplayRecord:
        """What the metadata store keeps of it."""
        return ReplayRecord(
            self.topic,
            self.topic_id,
            self.partition,
            self.target_topic,
            self.first_offset,
            self.last_offset,
            self.resumed_after,
            self.records,
            self.bytes,
            self.outcome,
            self.detail,
            tuple((g.start, g.end, why) for g, why in self.gaps),
            started_ms,
            finished_ms,
            run,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "topic_id": self.topic_id,
            "target_topic": self.target_topic,
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "resumed_after": self.resumed_after,
            "records": self.records,
            "bytes": self.bytes,
            "transactions": self.transactions,
            "seconds": round(self.seconds, 3),
            "gaps": [{"start": g.start, "end": g.end, "reason": why} for g, why in self.gaps],
            "outcome": self.outcome,
            "detail": self.detail,
        }


@dataclass
class ReplayResult:
    """A replay's partitions, in partition order."""

    topic: str
    topic_id: str
    target_topic: str
    partitions: list[PartitionReplayResult]

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.partitions)

    @property
    def failed(self) -> list[PartitionReplayResult]:
        return [p for p in self.partitions if not p.ok]

    @property
    def has_gaps(self) -> bool:
        return any(p.gaps for p in self.partitions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "topic_id": self.topic_id,
            "target_topic": self.target_topic,
            "records": self.records,
            "bytes": self.bytes,
            "partitions": [p.to_dict() for p in self.partitions],
        }


def check_target(target: TargetTopic, topic_id: str, partitions: list[TopicIdPartition], how: Partitioning) -> None:
    """Refuse a target that cannot take the replay, before anything is written."""
    if target.topic_id == topic_id:
        raise TieringError(f"target topic {target.name} is the source topic itself: its records would be doubled")
    if how is Partitioning.SAME:
        beyond = [tip.partition for tip in partitions if tip.partition >= target.partitions]
        if beyond:
            raise TieringError(
                f"target topic {target.name} has {target.partitions} partition(s), fewer than the source's: "
                f"partition(s) {', '.join(map(str, beyond))} have no partition of the same number there "
                "(add partitions, or replay with --partitions key)"
            )


def replay(
    ctx: TieringContext,
    request: ReplayRequest,
    kafka: KafkaConfig,
    *,
    events: EventSink = discard,
    clock: Callable[[], float] = time.monotonic,
    run: str | None = None,
) -> ReplayResult:
    """Replay ``request`` into the cluster of ``kafka``; a partition's failure is its result. Each
    partition's replay is recorded in the metadata store as it ends, under ``run`` (who ran it)."""
    topic_id = source_topic_id(ctx, request.topic, request.topic_id)
    tips = source_partitions(ctx, request.topic, topic_id, request.partitions)
    target = ReplayTarget(kafka, request.target_topic)
    try:
        described = target.describe()
        check_target(described, topic_id, tips, request.partitioning)
        executor = InProcessExecutor(ctx.storage, threads=min(request.concurrency, len(tips)))

        def task(_storage: RemoteStorage, tip: TopicIdPartition) -> PartitionReplayResult:
            started_ms = int(time.time() * 1000)
            result = replay_partition(ctx, tip, request, target, described.partitions, events=events, clock=clock)
            ctx.metadata.record_replay(result.record(started_ms, int(time.time() * 1000), run))
            return result

        results: dict[int, PartitionReplayResult] = {}
        for outcome in executor.run(tips, task, describe=str):
            assert outcome.result is not None
            results[outcome.index] = outcome.result
    finally:
        target.close()
    return ReplayResult(request.topic, topic_id, request.target_topic, [results[i] for i in sorted(results)])


def replay_partition(
    ctx: TieringContext,
    tip: TopicIdPartition,
    request: ReplayRequest,
    target: ReplayTarget,
    target_partitions: int,
    *,
    events: EventSink = discard,
    clock: Callable[[], float] = time.monotonic,
) -> PartitionReplayResult:
    """One source partition's replay; its failure or fence is its result (an unreachable cluster
    fails the whole replay)."""
    started = clock()
    tp = tip.topic_partition
    result = PartitionReplayResult(tp.topic, tp.partition, tip.topic_id, request.target_topic)
    try:
        _replay(ctx, tip, request, target, target_partitions, result, events, clock, started)
    except ClusterUnreachableError:
        raise
    except ReplayFencedError as exc:
        result.outcome, result.detail = OUTCOME_FENCED, str(exc)
    except (TieringError, OSError) as exc:
        result.outcome, result.detail = OUTCOME_FAILED, one_line(exc)
    except Exception as exc:  # kafka-python's own errors (a broker refusing, a timeout) fail the partition
        if not is_client_error(exc):
            raise
        result.outcome, result.detail = OUTCOME_FAILED, f"{type(exc).__name__}: {one_line(exc)}"
    result.seconds = clock() - started
    events(ReplayFinished(tp, result.outcome, result.records, result.bytes, result.seconds, result.detail))
    return result


def _replay(
    ctx: TieringContext,
    tip: TopicIdPartition,
    request: ReplayRequest,
    target: ReplayTarget,
    target_partitions: int,
    result: PartitionReplayResult,
    events: EventSink,
    clock: Callable[[], float],
    started: float,
) -> None:
    tp = tip.topic_partition
    reader = open_source(ctx, tip)
    gaps = [OffsetRange(g.start, g.end) for g in ctx.metadata.list_gaps(tip)]
    span: SourceRange = resolve_range(reader, request.range, gaps, request.isolation)
    result.first_offset, result.last_offset = span.first, span.last
    result.gaps = list(span.gaps)
    for gap, why in span.gaps:
        events(ReplayGap(tp, gap.start, gap.end, why))
    writer = PartitionWriter(
        target, tip, request.partitioning, target_partitions, max_request_size=request.max_request_size
    )
    try:
        result.resumed_after = writer.last_replayed(clock)
        next_offset = span.first if result.resumed_after is None else max(span.first, result.resumed_after + 1)
        if next_offset > span.last:
            result.outcome = OUTCOME_UP_TO_DATE
            return
        events(ReplayStarted(tp, request.target_topic, span.first, span.last, result.resumed_after))
        shown = clock()
        transactions = read_ahead(
            lambda: _transactions(reader, next_offset, span.last, request.isolation), 1, thread_name="replay-read"
        )
        with closing(transactions) as ahead:
            for records, size in ahead:
                writer.write(records)
                result.bytes += size
                result.records += len(records)
                result.transactions += 1
                if clock() - shown >= PROGRESS_SECONDS or records[-1].offset >= span.last:
                    shown = clock()
                    events(ReplayCommitted(tp, records[-1].offset, result.records, result.bytes, shown - started))
        if result.records == 0:
            result.outcome = OUTCOME_UP_TO_DATE
    finally:
        writer.close()


def _transactions(
    reader: RemoteLogReader, first: int, last: int, isolation: IsolationLevel
) -> Iterator[tuple[list[FetchedRecord], int]]:
    """The records of ``first``..``last`` and their bytes, a transaction's worth at a time: at
    most ``TRANSACTION_RECORDS``, and as many as ``TRANSACTION_BYTES`` holds at the size seen so
    far (counted here, on the reading thread, not on the one that sends)."""
    wanted, next_offset = min(1000, TRANSACTION_RECORDS), first
    while next_offset <= last:
        records = reader.read(next_offset, wanted, isolation)
        if records and records[-1].offset > last:
            records = [r for r in records if r.offset <= last]
        if not records:
            return
        size = sum(map(record_bytes, records))
        yield records, size
        next_offset = records[-1].offset + 1
        wanted = max(1, min(TRANSACTION_RECORDS, TRANSACTION_BYTES // max(1, size // len(records))))
