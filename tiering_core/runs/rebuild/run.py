"""Index rebuild: rebuild a segment's offset, time and transaction indexes from its ``.log``,
compare them with what is stored, and repair what is missing or different.

Indexes can always be rebuilt by walking batch headers (docs/kafka-rules.md section 1); the
transaction index also needs the transactions open at the segment's base, which the producer
snapshot at that offset holds (for a remote segment: the snapshot uploaded with the segment
that ends just below it).

A repair never rewrites a finished segment in place: KIP-405 segments are immutable and
readers cache index files by segment id. It copies the segment again as a new attempt (fresh
UUID, COPY_SEGMENT_STARTED, objects with the rebuilt indexes, manifest last,
COPY_SEGMENT_FINISHED with the new checksums), which supersedes the damaged one for its
range, then deletes the damaged attempt the usual way. The broker's own files (``local``)
are only checked: the log dirs are read-only for this platform.

Indexes are only ever judged against a ``.log`` that is proven intact: its size and CRC-32C
must equal what the copy recorded, and every batch must pass its own CRC. A bit flip in a
batch header would otherwise make correct indexes look damaged, and a repair would replace the
good copy with the damaged log. Such a segment is reported as a damaged log and nothing of it
is repaired; so are the producer snapshot and leader-epoch index a repair carries over, and
the previous segment's snapshot the transaction index is rebuilt from.

The work is split like the copy engine's: ``examine_remote_segment`` and
``check_local_segment`` touch only storage or files and run anywhere, as the tasks of an
``Executor`` (this process, or Spark's executors); ``RebuildRun``, the one driver of
``tiering rebuild-indexes`` and the Spark app, writes the metadata
(``repair.py``: ``start_index_repair``/``finish_index_repair``/``abandon_index_repair``) under
the partition's lease as their outcomes return (docs/architecture.md).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from tiering_core.engine.executor import Executor, InProcessExecutor
from tiering_core.engine.lease import HeldPartition, held_partition
from tiering_core.engine.segment_ops import recover_failed_copies
from tiering_core.errors import TieringError
from tiering_core.events import EventSink, discard
from tiering_core.events.rebuild import IndexChecked, LocalIndexesSkipped, PartitionBusy, RebuildPlanned
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.errors import FencedError, LeaseHeldError
from tiering_core.metadata.store import RemoteLogSegmentMetadata
from tiering_core.metrics import names
from tiering_core.metrics.tally import Tally, tallied

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.kafka.partition_log import PartitionLog
    from tiering_core.metadata.store import Lease
    from tiering_core.storage.remote import RemoteStorage
from tiering_core.events.rebuild import IndexCheck, IndexStatus
from tiering_core.runs.rebuild.examine import (
    LocalIndexTask,
    RemoteIndexExamination,
    RemoteIndexTask,
    check_local_segment,
    examine_remote_segment,
    local_index_tasks,
)
from tiering_core.runs.rebuild.repair import (
    abandon_index_repair,
    clean_up_interrupted_repairs,
    commit_index_repair,
    remote_index_tasks,
    repair_task,
    start_index_repair,
)

log = logging.getLogger(__name__)

R = TypeVar("R")


# --- the run: plan under the leases, examine on an executor, repair under the leases --------


@dataclass
class RebuildResult:
    topic: str
    partition: int
    repair: bool
    busy: bool = False  # another run held the partition's lease
    superseded_deleted: int = 0  # leftovers of an interrupted repair
    segments_cleaned_up: int = 0  # copies or repairs a killed run left unfinished
    checks: list[IndexCheck] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, status: IndexStatus) -> int:
        return sum(1 for c in self.checks if c.status == status)

    @property
    def log_bytes(self) -> int:
        return sum(c.log_bytes for c in self.checks)

    @property
    def unresolved(self) -> list[IndexCheck]:
        """Segments still damaged after the run (or not checkable)."""
        return [c for c in self.checks if c.status not in (IndexStatus.OK, IndexStatus.REPAIRED)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "repair": self.repair,
            "busy": self.busy,
            "superseded_deleted": self.superseded_deleted,
            "segments_cleaned_up": self.segments_cleaned_up,
            "segments": len(self.checks),
            **{status.value: self.count(status) for status in IndexStatus},
            "log_bytes": self.log_bytes,
            "seconds": round(self.seconds, 3),
            "checks": [c.to_dict() for c in self.checks],
        }


@dataclass
class RebuildReport:
    """A run over some partitions: each one's result, and why a partition's repairs stopped
    (its lease was lost)."""

    results: list[RebuildResult]
    seconds: float
    failures: list[str]

    @property
    def checks(self) -> list[IndexCheck]:
        return [c for r in self.results for c in r.checks]

    def unresolved_remote(self) -> list[IndexCheck]:
        return [c for r in self.results for c in r.unresolved if c.location == "remote"]

    @property
    def ok(self) -> bool:
        """No lease lost, no remote segment left damaged (the broker's own files are only reported)."""
        return not self.failures and not self.unresolved_remote()


def hold_for_rebuild(ctx: TieringContext, tip: TopicIdPartition, run_id: str, hold: ExitStack) -> HeldPartition | None:
    """Hold the partition for a rebuild until ``hold`` closes (None when a copy, retention or
    removal run holds it)."""
    ctx.storage.require_writable()
    ctx.metadata.register_partition(tip)
    try:
        return hold.enter_context(held_partition(ctx.metadata, tip, holder=f"rebuild-indexes:{run_id}", run_id=run_id))
    except LeaseHeldError as exc:
        log.info("%s: another run holds the partition (%s); not checked", tip.topic_partition, exc)
        return None


def clean_up_before_repair(ctx: TieringContext, tip: TopicIdPartition, lease: Lease, result: RebuildResult) -> None:
    """What killed runs left (we hold the lease): unfinished copies and repairs in a STARTED
    state are deleted as the copy engine's recovery does, and of two finished copies of one
    range the superseded one."""
    result.segments_cleaned_up = recover_failed_copies(ctx.metadata, ctx.storage, tip, lease)
    result.superseded_deleted = clean_up_interrupted_repairs(ctx.metadata, ctx.storage, tip, lease)


def check_local(storage: RemoteStorage, task: LocalIndexTask) -> IndexCheck:
    """The executor task of a broker segment (the broker's files only; the storage is unused)."""
    return check_local_segment(task)


def failed_check(task: RemoteIndexTask | LocalIndexTask, tp: TopicPartition, error: str) -> IndexCheck:
    """The verdict on a segment whose task failed on the executor: an error, nothing repaired."""
    if isinstance(task, RemoteIndexTask):
        s = task.segment
        return IndexCheck(
            tp.topic, tp.partition, s.start_offset, s.end_offset, "remote", str(s.segment_id), error=error
        )
    end = None if task.next_base_offset is None else task.next_base_offset - 1
    return IndexCheck(tp.topic, tp.partition, task.base_offset, end, "local", None, error=error)


@dataclass
class PartitionRebuild:
    """One partition in a run: its lease (None: another run holds it, or it was lost), its counts
    and its tasks."""

    result: RebuildResult
    tip: TopicIdPartition
    held: HeldPartition | None = None
    tally: Tally | None = None
    remote: list[RemoteIndexTask] = field(default_factory=list)
    local: list[LocalIndexTask] = field(default_factory=list)


@dataclass(frozen=True)
class PendingRepair:
    """A repair whose COPY_SEGMENT_STARTED is written; its upload is an executor task."""

    part: PartitionRebuild
    task: RemoteIndexTask
    found: RemoteIndexExamination
    attempt: RemoteLogSegmentMetadata


class RebuildRun:
    """The one rebuild driver, whatever runs its tasks (``tiering rebuild-indexes`` in this
    process, the Spark app on Spark).

    Shaped like ``CopyRun``: the plan is made on the driver under each partition's lease
    (interrupted repairs cleaned up first); every finished remote segment is examined as an
    executor task before any is repaired, since a repair deletes the damaged attempt whose
    producer snapshot the next segment's examination may need; then each damaged segment gets
    COPY_SEGMENT_STARTED here, is copied again by a task, and is committed here under the lease
    as its outcome returns. The broker's own segments are checked last, as tasks, after the
    leases are let go: they are read-only. A lost lease stops that partition's repairs (the
    loss is in the report); the other partitions go on.
    """

    def __init__(
        self, ctx: TieringContext, *, repair: bool, local: bool, run_id: str, events: EventSink = discard
    ) -> None:
        self.ctx = ctx
        self.repair = repair
        self.local = local
        self.run_id = run_id
        self.events = events
        self.parts: list[PartitionRebuild] = []
        self.failures: list[str] = []
        self._hold = ExitStack()  # every partition's lease and tally, until the remote work ends

    def plan(self, partitions: Sequence[TopicPartition | TopicIdPartition]) -> None:
        """Hold each partition, clean up what killed runs left, and list its segments. A partition
        given with its topic id is taken as the metadata store holds it, reading no log dir (a
        process that serves no broker); its broker's own segments are then skipped, said once."""
        skipped = 0
        for tp in partitions:
            tip, partition_log = self._located(tp)
            interval = self.ctx.config.topic_config(tip.topic).index_interval_bytes
            part = PartitionRebuild(RebuildResult(tip.topic, tip.partition, self.repair), tip)
            self.parts.append(part)
            if self.local and partition_log is not None:
                part.local = local_index_tasks(partition_log, interval)
            elif self.local:
                skipped += 1
            part.held = hold_for_rebuild(self.ctx, part.tip, self.run_id, self._hold)
            if part.held is None:
                part.result.busy = True
                self.events(PartitionBusy(tip.topic_partition, partition_log is not None and self.local))
                continue
            # Each examination reads the segment (a remote fetch request); each index file a
            # repair replaced is an index repair: counted, and stored before the partition is let go.
            part.tally = self._hold.enter_context(tallied(self.ctx.metadata, part.tip))
            if self.repair:
                clean_up_before_repair(self.ctx, part.tip, part.held.lease, part.result)
            part.remote = remote_index_tasks(self.ctx.metadata, part.tip, interval)
        if skipped:
            self.events(LocalIndexesSkipped(skipped))
        remote = [t for part in self.parts for t in part.remote]
        self.events(
            RebuildPlanned(
                len(self.parts),
                len(remote),
                sum(t.segment.size_bytes for t in remote),
                sum(len(part.local) for part in self.parts),
                self.repair,
            )
        )

    def _located(self, tp: TopicPartition | TopicIdPartition) -> tuple[TopicIdPartition, PartitionLog | None]:
        """The partition with its topic id, and its directory in the log dirs (None: given by
        its topic id, the log dirs are not read)."""
        if isinstance(tp, TopicIdPartition):
            return tp, None
        partition_log = self.ctx.partition_log(tp)
        return TopicIdPartition(partition_log.topic_id, tp), partition_log

    def lease(self, part: PartitionRebuild, *, renew: bool = False) -> Lease | None:
        """The partition's lease while the run holds it (``renew``: renewed now, before a write,
        as the step before it may have outlasted a beat); a loss is reported once, and the
        partition's repairs stop."""
        if part.held is None:
            return None
        if part.held.holds and (not renew or part.held.renew()):
            return part.held.lease
        self.failures.append(
            f"{part.tip.topic_partition}: lost the partition's lease; its repairs stopped: {part.held.lost}"
        )
        part.held = None
        return None

    def still_held(self) -> None:
        for part in self.parts:
            self.lease(part)

    def done(self, part: PartitionRebuild, check: IndexCheck) -> None:
        part.result.checks.append(check)
        self.events(IndexChecked(check))

    def examine(self, executor: Executor) -> list[tuple[PartitionRebuild, RemoteIndexTask, RemoteIndexExamination]]:
        """Every held partition's finished segments examined; nothing changes yet."""
        items = [(part, task) for part in self.parts for task in part.remote]
        found: dict[int, RemoteIndexExamination] = {}
        with closing(
            executor.run(
                [task for _, task in items],
                examine_remote_segment,
                describe=lambda task: (
                    f"rebuild indexes of {task.segment.topic_id_partition.topic_partition} "
                    f"segment {task.segment.start_offset}"
                ),
                on_wait=self.still_held,
            )
        ) as outcomes:
            for outcome in outcomes:
                part, task = items[outcome.index]
                examination = outcome.result
                if examination is None:
                    check = failed_check(task, part.tip.topic_partition, outcome.error or "no result")
                    examination = RemoteIndexExamination(check)
                if part.tally is not None:
                    part.tally.count(names.REMOTE_FETCH_REQUESTS)
                    if examination.check.log_bytes:
                        part.tally.count(names.REMOTE_FETCH_BYTES, examination.check.log_bytes)
                    if examination.check.error is not None:
                        part.tally.count(names.REMOTE_FETCH_ERRORS)
                found[outcome.index] = examination
        return [(part, task, found[i]) for i, (part, task) in enumerate(items)]

    def repair_damaged(
        self,
        executor: Executor,
        examined: list[tuple[PartitionRebuild, RemoteIndexTask, RemoteIndexExamination]],
    ) -> None:
        """A new copy of each damaged segment, committed as it completes. A segment whose
        ``.log`` is not proven intact is never repaired (its check carries the error)."""
        for part in self.parts:
            self.lease(part, renew=True)
        repairs: list[PendingRepair] = []
        handed_out = False
        try:
            for part, task, found in examined:
                lease = self.lease(part) if self.repair and found.check.needs_repair else None
                if lease is not None:
                    try:
                        attempt = start_index_repair(self.ctx.metadata, task.segment, lease)
                    except FencedError as exc:
                        if part.held is not None:
                            part.held.lose(exc)
                        self.lease(part)
                    else:
                        repairs.append(PendingRepair(part, repair_task(task, found, attempt), found, attempt))
                        continue
                self.done(part, found.check)
            handed_out = True
            with closing(
                executor.run(
                    [r.task for r in repairs],
                    examine_remote_segment,
                    describe=lambda task: (
                        f"repair indexes of {task.segment.topic_id_partition.topic_partition} "
                        f"segment {task.segment.start_offset}"
                    ),
                    on_wait=self.still_held,
                )
            ) as outcomes:
                for outcome in outcomes:
                    pending = repairs[outcome.index]
                    part = pending.part
                    examination = outcome.result
                    if examination is None:
                        error = f"repair failed: {outcome.error}"
                        examination = RemoteIndexExamination(
                            failed_check(pending.task, part.tip.topic_partition, error)
                        )
                    # Without the lease (lost meanwhile) the repair's objects are deleted, its
                    # metadata left to the new lease holder's recovery.
                    lease = self.lease(part, renew=True)
                    check = commit_index_repair(
                        self.ctx, pending.task.segment, pending.attempt, pending.found.check, examination, lease
                    )
                    if check.repaired_as is not None and part.tally is not None:
                        part.tally.count(
                            names.INDEX_REPAIRS, sum(1 for f in check.findings if f.status != IndexStatus.OK)
                        )
                    self.done(part, check)
        except BaseException:
            # Closing the outcomes cancelled the tasks. Repairs started but never handed out
            # are cleaned up now; those handed out are left STARTED, as a cancelled task may
            # still write for a moment: the next rebuild (or copy) run's recovery deletes them.
            if not handed_out:
                for pending in repairs:
                    try:
                        abandon_index_repair(
                            self.ctx.metadata, self.ctx.storage, pending.attempt, self.lease(pending.part)
                        )
                    except Exception as cleanup:  # the next run's recovery deletes it; raise the cause
                        log.warning(
                            "%s: could not clean up repair attempt %s: %s",
                            pending.part.tip.topic_partition,
                            pending.attempt.segment_id,
                            cleanup,
                        )
            raise

    def check_local_segments(self, executor: Executor) -> None:
        """The broker's own segments: checked, never changed."""
        items = [(part, task) for part in self.parts for task in part.local]
        with closing(
            executor.run(
                [task for _, task in items],
                check_local,
                describe=lambda task: f"check local indexes of segment {task.base_offset} in {task.partition_dir.name}",
            )
        ) as outcomes:
            for outcome in outcomes:
                part, task = items[outcome.index]
                check = outcome.result
                if check is None:
                    check = failed_check(task, part.tip.topic_partition, outcome.error or "no result")
                self.done(part, check)

    def release(self) -> None:
        """Let every partition go (its tally stored first); the broker's segments need no lease."""
        self._hold.close()

    def report(self, seconds: float) -> RebuildReport:
        for part in self.parts:
            part.result.checks.sort(key=lambda c: (c.location != "remote", c.base_offset))
            part.result.seconds = seconds
        return RebuildReport([part.result for part in self.parts], seconds, self.failures)


def rebuild_indexes(
    ctx: TieringContext,
    partitions: Sequence[TopicPartition | TopicIdPartition],
    executor: Executor,
    *,
    repair: bool = True,
    local: bool = False,
    run_id: str | None = None,
    events: EventSink = discard,
) -> RebuildReport:
    """Check (and repair) the indexes of every finished remote segment of ``partitions`` (those
    given with their topic id as the store holds them); ``local`` adds the broker's. One
    ``IndexChecked`` per segment; the caller prints the summary."""
    started = time.monotonic()
    run = RebuildRun(ctx, repair=repair, local=local, run_id=run_id or uuid.uuid4().hex, events=events)
    try:
        run.plan(partitions)
        run.repair_damaged(executor, run.examine(executor))
    finally:
        run.release()
    run.check_local_segments(executor)
    return run.report(time.monotonic() - started)


def rebuild_partition_indexes(
    ctx: TieringContext,
    tp: TopicPartition | TopicIdPartition,
    *,
    repair: bool = True,
    local: bool = False,
    run_id: str | None = None,
    events: EventSink = discard,
) -> RebuildResult:
    """One partition in this process (``tiering rebuild-indexes``); a lost lease fails the run."""
    report = rebuild_indexes(
        ctx, [tp], InProcessExecutor(ctx.storage), repair=repair, local=local, run_id=run_id, events=events
    )
    if report.failures:
        raise TieringError(report.failures[0])
    return report.results[0]
