"""The export driver: a topic's remote segments into its Iceberg table, exactly once, on any executor.

``tiering export`` (in this process) and the Spark app (``spark_apps/export_table.py``, Spark's
executors) both run ``run_export``, as the copy runs share ``CopyRun``. Holding the table
(``session.exporting``: its export lease; another export of the table at the same time gets a
one-line ``TableBusyError``), the driver plans, hands one task per segment to an ``Executor``
(``write_segment``: the segment's data files under the export's attempt) and commits what comes
back in snapshots of at most ``COMMIT_BYTES`` of segments, in plan order whatever order the tasks
end in (a killed run leaves the table holding a prefix of its plan, less the segments that
failed); at the end, the export's own uncommitted files and those killed attempts left are removed
(``TableExport.finish``). A segment that fails (a corrupt batch, a record Arrow cannot hold, its
Spark task lost) is reported with its id and offset, its files deleted, and the others go on; the
run then names it in ``ExportResult.failed``. The driver emits ``events.export`` events; how they
read is the caller's (``report/lines.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tiering_core.engine.executor import Executor, InProcessExecutor
from tiering_core.errors import ExportError
from tiering_core.events import EventSink, discard
from tiering_core.events.export import (
    ExportCleanedUp,
    ExportCommitted,
    ExportPlanned,
    SegmentExported,
    SegmentExportFailed,
    SegmentWouldExport,
)
from tiering_core.export.plan import ExportSegment, require_remote_data
from tiering_core.export.session import dry_run as plan_dry_run
from tiering_core.export.session import exporting
from tiering_core.export.typed import SchemaChangeError
from tiering_core.export.typed_write import SegmentSchemaError, TypedWrite, write_typed_segment_files
from tiering_core.export.write import ExportAttempt, SegmentExportError, write_segment_files
from tiering_core.kafka.isolation import IsolationLevel
from tiering_core.kafka.topic import TopicPartition

if TYPE_CHECKING:
    import pyarrow as pa

    from tiering_core.context import TieringContext
    from tiering_core.export.session import TableExport
    from tiering_core.metadata.store import TaskAttempt
    from tiering_core.storage.remote import RemoteStorage

#: Segment bytes written before a commit: a killed run loses at most this much work.
COMMIT_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class WrittenSegment:
    """What a task wrote for one segment: its data files (URLs) and rows; of a typed topic also
    its dead letters' files and count, and the value and key schema ids the table must merge for it."""

    files: list[str]
    rows: int
    dead_letter_files: list[str] = field(default_factory=list)
    dead_letters: int = 0
    schema_ids: tuple[int, ...] = ()
    key_schema_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class SegmentFailure:
    """A segment not exported (a corrupt batch, its log gone, its task lost): ``reason`` names the
    segment id and ``offset``, the first offset its decode did not reach; its files are deleted."""

    segment_id: str
    offset: int
    reason: str
    #: A value schema the table cannot take: the topic's export stops at this segment.
    stops: bool = False

    def __str__(self) -> str:
        return self.reason


def write_segment(
    storage: RemoteStorage, segment: ExportSegment, *, attempt: ExportAttempt, typed: TypedWrite | None = None
) -> WrittenSegment | SegmentFailure:
    """One segment's data files under ``attempt`` (``typed``: a typed topic's, with its dead
    letters), written wherever the executor runs it. A bad segment is a result, not a task
    failure: Spark would only retry it, and the driver names it."""
    rows = 0

    def count(batch: pa.RecordBatch) -> None:
        nonlocal rows
        rows += batch.num_rows

    try:
        if typed is not None:
            out = write_typed_segment_files(storage, segment, attempt, typed)
            return WrittenSegment(
                out.files, out.rows, out.dead_letter_files, out.dead_letters, out.schema_ids, out.key_schema_ids
            )
        files = write_segment_files(storage, segment, attempt, on_batch=count)
    except SegmentExportError as exc:
        return SegmentFailure(exc.segment_id, exc.offset, str(exc), stops=isinstance(exc, SegmentSchemaError))
    return WrittenSegment(files, rows)


@dataclass
class ExportResult:
    """What one export of a topic into its table did."""

    table: str
    dry_run: bool
    planned: list[ExportSegment] = field(default_factory=list)
    exported: list[ExportSegment] = field(default_factory=list)
    failed: list[SegmentFailure] = field(default_factory=list)
    rows: int = 0
    files: int = 0
    #: Records of a typed topic whose value could not be decoded that this export committed to the
    #: dead-letter table.
    dead_letters: int = 0
    snapshots: list[int] = field(default_factory=list)
    cleaned_files: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "dry_run": self.dry_run,
            "planned": [s.to_dict() for s in self.planned],
            "exported_segments": len(self.exported),
            "rows": self.rows,
            "dead_letters": self.dead_letters,
            "data_files": self.files,
            "snapshots": self.snapshots,
            "failed": [{"segment_id": f.segment_id, "offset": f.offset, "error": str(f)} for f in self.failed],
            "cleaned_files": len(self.cleaned_files),
        }


def run_export(
    ctx: TieringContext,
    topic: str,
    partition: int | None = None,
    *,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
    table: str | None = None,
    dry_run: bool = False,
    events: EventSink = discard,
    commit_bytes: int | None = None,
    attempt: TaskAttempt | None = None,
    executor: Executor | None = None,
) -> ExportResult:
    """Export ``topic`` (or one partition of it) into its table (``table``: ``NAMESPACE.NAME``
    instead), on ``executor`` (default: this process, one segment after the other); ``attempt``:
    the scheduled task's try the table's lease is named after."""
    return export_topic(
        ctx,
        topic,
        [partition],
        isolation=isolation,
        table=table,
        dry_run=dry_run,
        events=events,
        commit_bytes=commit_bytes,
        attempt=attempt,
        executor=executor,
    )


def export_topic(
    ctx: TieringContext,
    topic: str,
    partitions: Sequence[int | None],
    *,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
    table: str | None = None,
    dry_run: bool = False,
    events: EventSink = discard,
    commit_bytes: int | None = None,
    attempt: TaskAttempt | None = None,
    executor: Executor | None = None,
) -> ExportResult:
    """``run_export`` of the listed partitions of ``topic`` (None: every partition the tier has,
    also those gone from the log dirs), under one hold of the table."""
    if dry_run:  # reads only: no lease, nothing created or migrated
        name, planned = plan_dry_run(ctx, topic, partitions, table=table, isolation=isolation)
        events(ExportPlanned(topic, str(name), len(planned), _size(planned)))
        for s in planned:
            events(SegmentWouldExport(s.topic_partition, s.segment_id, s.first_offset, s.end_offset))
        return ExportResult(str(name), dry_run, planned)
    for p in partitions:  # before the table is created (``exporting`` checks the topic): a failed export leaves none
        if p is not None:
            require_remote_data(ctx, topic, p)
    with exporting(ctx, topic, table=table, attempt=attempt) as export:
        result = ExportResult(str(export.name), dry_run)
        result.planned = [s for p in partitions for s in export.plan(topic, p, isolation)]
        events(ExportPlanned(topic, result.table, len(result.planned), _size(result.planned)))
        written = export.start_attempt() if result.planned else None
        if written is not None:
            commits = Commits(
                export,
                written,
                result,
                events,
                COMMIT_BYTES if commit_bytes is None else commit_bytes,
                export.start_typed(),
            )
            commits.write(executor or InProcessExecutor(ctx.storage))
        result.cleaned_files = export.finish(written)
        if result.cleaned_files:
            events(ExportCleanedUp(result.table, len(result.cleaned_files)))
        if result.failed and not result.snapshots:
            export.drop_if_unused()
    return result


def selected_topics(partitions: Sequence[TopicPartition], whole_topics: bool) -> dict[str, list[int | None]]:
    """Per topic, the partitions to plan: ``[None]`` (every partition the tier has, also those
    gone from the log dirs) unless single partitions were selected."""
    topics: dict[str, list[int | None]] = {}
    for tp in sorted(partitions):
        listed = topics.setdefault(tp.topic, [])
        if not whole_topics:
            listed.append(tp.partition)
    return {topic: listed or [None] for topic, listed in topics.items()}


def export_partitions(
    ctx: TieringContext,
    partitions: Sequence[TopicPartition],
    *,
    whole_topics: bool = True,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
    table: str | None = None,
    dry_run: bool = False,
    events: EventSink = discard,
    attempt: TaskAttempt | None = None,
    executor: Executor | None = None,
) -> list[ExportResult]:
    """Each topic of ``partitions`` into its table, one after the other (``whole_topics``: every
    partition the tier has of each; ``table`` names one table, so it needs one topic)."""
    topics = selected_topics(partitions, whole_topics)
    if table is not None and len(topics) > 1:
        raise ExportError("--table names one table: select one topic")
    return [
        export_topic(
            ctx,
            topic,
            listed,
            isolation=isolation,
            table=table,
            dry_run=dry_run,
            events=events,
            attempt=attempt,
            executor=executor,
        )
        for topic, listed in topics.items()
    ]


def _size(segments: Sequence[ExportSegment]) -> int:
    return sum(s.segment.size_bytes for s in segments)


class Commits:
    """The segments an export's tasks wrote, committed in plan order in snapshots of at least
    ``commit_bytes`` of segments (the rest at the end), whatever order the tasks end in."""

    def __init__(
        self,
        export: TableExport,
        attempt: ExportAttempt,
        result: ExportResult,
        events: EventSink,
        commit_bytes: int,
        typed: TypedWrite | None = None,
    ) -> None:
        self.export = export
        self.attempt = attempt
        self.typed = typed
        self.result = result
        self.events = events
        self.commit_bytes = commit_bytes
        self.ended: dict[int, WrittenSegment | SegmentFailure] = {}  # by plan index, until their turn comes
        self.next = 0  # the plan index whose turn it is
        self.pending: list[tuple[ExportSegment, WrittenSegment]] = []
        self.pending_bytes = 0

    def write(self, executor: Executor) -> None:
        """Every planned segment written on ``executor``, each committed in its turn. An abort
        (the lease lost, an interrupt) closes the run early: queued and running tasks are
        cancelled, and their files are never committed."""
        planned = self.result.planned
        outcomes = executor.run(
            planned,
            functools.partial(write_segment, attempt=self.attempt, typed=self.typed),
            describe=lambda s: f"export {s.topic_partition} segment {s.start_offset}",
            on_wait=self.export.require,
        )
        try:
            for done, outcome in enumerate(outcomes, 1):
                segment = planned[outcome.index]
                written = outcome.result
                if outcome.error is not None or written is None:  # the task itself failed
                    reason = (
                        f"{segment.topic_partition}: segment {segment.segment_id} (offsets {segment.start_offset}-"
                        f"{segment.end_offset}): {outcome.error or 'no result'}"
                    )
                    written = SegmentFailure(segment.segment_id, segment.first_offset, reason)
                if isinstance(written, SegmentFailure):
                    self.result.failed.append(written)
                    self.events(SegmentExportFailed(written.reason, done, len(planned)))
                    self.settle(outcome.index, written)
                    continue
                self.events(
                    SegmentExported(
                        segment.topic_partition,
                        segment.segment_id,
                        segment.first_offset,
                        segment.end_offset,
                        written.rows,
                        len(written.files),
                        done,
                        len(planned),
                        written.dead_letters,
                    )
                )
                self.settle(outcome.index, written)
        finally:
            outcomes.close()
        self.commit()

    def settle(self, index: int, written: WrittenSegment | SegmentFailure) -> None:
        """The task of plan entry ``index`` ended (a failure: the segment is not committed); the
        entries whose turn has come join the next commit, made once it holds ``commit_bytes``. A
        segment whose value schema the table cannot take stops the export: what precedes it is
        committed, nothing from it on."""
        self.ended[index] = written
        while self.next in self.ended:
            ready = self.ended.pop(self.next)
            segment = self.result.planned[self.next]
            self.next += 1
            if isinstance(ready, SegmentFailure):
                if ready.stops:
                    self.commit()
                    raise SchemaChangeError(f"export to {self.result.table} stopped: {ready.reason}")
                continue
            self.pending.append((segment, ready))
            self.pending_bytes += segment.segment.size_bytes
            if self.pending_bytes >= self.commit_bytes:
                self.commit()

    def commit(self) -> None:
        if not self.pending:
            return
        written, self.pending, self.pending_bytes = self.pending, [], 0
        # A failed commit leaves its files: the catalog may have taken it all the same (an answer
        # lost on the way back), and a later export removes them only if no snapshot holds them.
        evolve = None
        if self.typed is not None and self.export.dead_letters is not None:
            needed = [w.schema_ids for _segment, w in written]
            keys = [w.key_schema_ids for _segment, w in written]
            self.export.table.refresh()
            self.export.dead_letters.widened(self.export.table, needed, keys)  # a SchemaChangeError commits nothing
            dead = [(segment, w.dead_letter_files) for segment, w in written if w.dead_letter_files]
            if dead:  # before the table's commit: a rerun finds them committed and adds none again
                taken = {id(s) for s in self.export.dead_letters.commit(self.typed.dead_letters, dead).committed}
                self.result.dead_letters += sum(w.dead_letters for s, w in written if id(s) in taken)
            evolve = self.export.dead_letters.evolver(needed, keys)
        outcome = self.export.commit(self.attempt, [(segment, w.files) for segment, w in written], evolve=evolve)
        committed = {id(s) for s in outcome.committed}
        self.result.exported.extend(outcome.committed)
        self.result.rows += sum(w.rows for s, w in written if id(s) in committed)
        self.result.files += sum(len(w.files) for s, w in written if id(s) in committed)
        if outcome.snapshot_id is not None:
            self.result.snapshots.append(outcome.snapshot_id)
            self.events(ExportCommitted(self.result.table, len(outcome.committed), outcome.snapshot_id))
