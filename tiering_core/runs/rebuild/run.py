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
``check_local_segment`` touch only storage or files and run anywhere (e.g. a Spark
executor); ``start_index_repair``/``finish_index_repair``/``abandon_index_repair`` write
metadata under the partition's lease on the driver.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tiering_core.cli.output import format_index_check
from tiering_core.errors import TieringError
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.errors import FencedError, LeaseHeldError
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.metadata.store import RemoteLogSegmentMetadata
from tiering_core.metrics import names
from tiering_core.metrics.tally import tallied
from tiering_core.runs.lease import HeldPartition, held_partition
from tiering_core.runs.segment_copy import recover_failed_copies
from tiering_core.runs.segment_ops import abandon_attempt, delete_remote_segment, segment_ref
from tiering_core.storage.manifest import CopyRecord

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.metadata.store import Lease, RemoteLogMetadataStore
    from tiering_core.storage.manifest import SegmentManifest
    from tiering_core.storage.segments import RemoteStorage
from tiering_core.runs.rebuild.examine import (
    RemoteIndexExamination,
    RemoteIndexTask,
    check_local_segment,
    examine_remote_segment,
    local_index_tasks,
)
from tiering_core.runs.rebuild.findings import IndexCheck, IndexStatus

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

# --- remote segments: metadata on the driver ------------------------------------------------


def start_index_repair(
    store: RemoteLogMetadataStore, damaged: RemoteLogSegmentMetadata, lease: Lease
) -> RemoteLogSegmentMetadata:
    """COPY_SEGMENT_STARTED for the repaired copy (a fresh UUID), before anything is uploaded."""
    attempt = replace(
        damaged,
        segment_id=uuid.uuid4(),
        state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        writer_token=lease.token,
        event_time=int(time.time() * 1000),
        custom_metadata={},
    )
    store.add_segment(attempt, lease)
    return attempt


def finish_index_repair(
    store: RemoteLogMetadataStore,
    storage: RemoteStorage,
    damaged: RemoteLogSegmentMetadata,
    attempt: RemoteLogSegmentMetadata,
    manifest: SegmentManifest,
    lease: Lease,
) -> RemoteLogSegmentMetadata:
    """FINISHED with the new checksums (the copy now serves the range), then the damaged one is deleted.

    FencedError only from the FINISHED step (nothing of the repair serves yet). Losing the lease
    after it leaves two finished copies of the range; the next rebuild deletes the superseded one.
    """
    finished = store.update_segment_state(
        attempt.segment_id,
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        lease,
        custom_metadata=CopyRecord.of_manifest(manifest).to_custom_metadata(),
    )
    try:
        delete_remote_segment(store, storage, damaged, lease)
    except FencedError as exc:
        log.warning(
            "%s: lost the lease before deleting segment %s, superseded by its repaired copy %s "
            "(the next rebuild deletes it): %s",
            damaged.topic_id_partition.topic_partition,
            damaged.segment_id,
            attempt.segment_id,
            exc,
        )
    return finished


def abandon_index_repair(
    store: RemoteLogMetadataStore, storage: RemoteStorage, attempt: RemoteLogSegmentMetadata, lease: Lease | None
) -> None:
    """The repaired copy did not complete: delete it the usual way; the damaged one stays."""
    abandon_attempt(store, storage, attempt, lease, "repair attempt")


def clean_up_interrupted_repairs(
    store: RemoteLogMetadataStore, storage: RemoteStorage, tip: TopicIdPartition, lease: Lease
) -> int:
    """A repair killed between its FINISHED and the damaged attempt's deletion leaves two finished
    copies of one range; the earlier (superseded) one is deleted, so coverage is never doubled."""
    latest: dict[tuple[int, int, tuple[tuple[int, int], ...]], RemoteLogSegmentMetadata] = {}
    duplicates = []
    for s in sorted(finished_segments(store, tip), key=lambda s: s.event_time):
        key = (s.start_offset, s.end_offset, tuple(sorted(s.leader_epochs.items())))
        if key in latest:
            duplicates.append(latest[key])
        latest[key] = s
    for s in duplicates:
        log.warning(
            "%s: deleting segment %s [%d..%d], superseded by an identical copy",
            tip.topic_partition,
            s.segment_id,
            s.start_offset,
            s.end_offset,
        )
        delete_remote_segment(store, storage, s, lease)
    return len(duplicates)


def predecessors(segments: list[RemoteLogSegmentMetadata]) -> dict[uuid.UUID, RemoteLogSegmentMetadata | None]:
    """Per finished segment, the latest finished segment ending just below it (its snapshot's source)."""
    by_end: dict[int, RemoteLogSegmentMetadata] = {}
    for s in sorted(segments, key=lambda s: s.event_time):
        by_end[s.end_offset] = s
    return {s.segment_id: by_end.get(s.start_offset - 1) for s in segments}


def finished_segments(store: RemoteLogMetadataStore, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
    return [s for s in store.list_segments(tip) if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]


def remote_index_tasks(
    store: RemoteLogMetadataStore, tip: TopicIdPartition, index_interval_bytes: int
) -> list[RemoteIndexTask]:
    """One examination per finished remote segment of a partition, in offset order."""
    segments = finished_segments(store, tip)
    previous = predecessors(segments)
    return [RemoteIndexTask(s, previous[s.segment_id], index_interval_bytes) for s in segments]


def rebuild_segment_indexes(
    ctx: TieringContext, task: RemoteIndexTask, *, repair: bool, lease: Lease | None = None
) -> IndexCheck:
    """Check one remote segment's indexes; with ``repair``, replace a damaged one (needs the lease)."""
    first = examine_remote_segment(ctx.storage, task)
    if not (repair and first.check.needs_repair):
        return first.check
    return repair_remote_segment(ctx, task, first, lease)


def repair_task(
    task: RemoteIndexTask, found: RemoteIndexExamination, attempt: RemoteLogSegmentMetadata
) -> RemoteIndexTask:
    """The examination that copies the segment again, with the producer state the check used."""
    return replace(task, repair_ref=segment_ref(attempt), open_transactions=found.open_transactions)


def repair_remote_segment(
    ctx: TieringContext, task: RemoteIndexTask, found: RemoteIndexExamination, lease: Lease | None
) -> IndexCheck:
    """STARTED for a new attempt, copy it with rebuilt indexes, then FINISHED and the damaged one deleted."""
    if lease is None:
        raise TieringError(f"{task.segment.topic_id_partition}: repairing indexes needs the partition's lease")
    attempt = start_index_repair(ctx.metadata, task.segment, lease)
    second = examine_remote_segment(ctx.storage, repair_task(task, found, attempt))
    return commit_index_repair(ctx, task.segment, attempt, found.check, second, lease)


def commit_index_repair(
    ctx: TieringContext,
    damaged: RemoteLogSegmentMetadata,
    attempt: RemoteLogSegmentMetadata,
    found: IndexCheck,
    examination: RemoteIndexExamination,
    lease: Lease | None,
) -> IndexCheck:
    """Finish the repaired copy, or clean it up when the repair upload did not complete.

    ``lease`` None (or a lease lost meanwhile): the run was fenced, the repair's objects are
    deleted and the segment is reported unrepaired.
    """
    if examination.manifest is None:
        abandon_index_repair(ctx.metadata, ctx.storage, attempt, lease)
        if examination.check.error is not None:
            return replace(found, error=examination.check.error, damaged_log=examination.check.damaged_log)
        return examination.check  # nothing to repair any more
    try:
        if lease is None:
            raise FencedError(f"{attempt.topic_id_partition}: the partition's lease was lost")
        finish_index_repair(ctx.metadata, ctx.storage, damaged, attempt, examination.manifest, lease)
    except FencedError as exc:
        abandon_index_repair(ctx.metadata, ctx.storage, attempt, None)
        return replace(
            found,
            error=f"repair not finished, the run lost the partition's lease (the repaired copy {attempt.segment_id} "
            f"was deleted): {exc}",
        )
    return replace(found, repaired_as=str(attempt.segment_id), seconds=found.seconds + examination.check.seconds)


# --- one partition, one process (the ``tiering rebuild-indexes`` command) -------------------


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


def hold_for_rebuild(ctx: TieringContext, tip: TopicIdPartition, run_id: str, hold: ExitStack) -> HeldPartition | None:
    """Hold the partition for a rebuild until ``hold`` closes (None when a copy, retention or
    removal run holds it)."""
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


def rebuild_partition_indexes(
    ctx: TieringContext,
    tp: TopicPartition,
    *,
    repair: bool = True,
    local: bool = False,
    run_id: str | None = None,
    progress: Progress | None = None,
) -> RebuildResult:
    """Check (and repair) every finished remote segment of a partition; ``local`` adds the broker's.

    One progress line per segment; the caller prints ``format_rebuild_summary`` over its partitions.
    """
    say = progress or (lambda line: log.info("%s", line))
    started = time.monotonic()
    result = RebuildResult(tp.topic, tp.partition, repair)
    partition_log = ctx.partition_log(tp)
    interval = ctx.config.topic_config(tp.topic).index_interval_bytes
    tip = TopicIdPartition(partition_log.topic_id, tp)
    tasks: list[RemoteIndexTask] = []
    with ExitStack() as hold:
        held = hold_for_rebuild(ctx, tip, run_id or uuid.uuid4().hex, hold)
        if held is None:
            result.busy = True
            say(f"{tp}: another run holds the partition; indexes not checked")
            return result

        def holding(done: int) -> Lease:
            """After each step (renewed now, as a step may outlast a beat): still held, or stop."""
            if not held.renew():
                raise TieringError(
                    f"{tp}: lost the partition's lease after {done} of {len(tasks)} segment(s); stopped "
                    f"(nothing half-done is left): {held.lost}"
                )
            return held.lease

        # Each examination reads the segment (a remote fetch request); each index file a repair
        # replaced is an index repair: counted, and stored before the partition is let go.
        tally = hold.enter_context(tallied(ctx.metadata, tip))
        if repair:
            clean_up_before_repair(ctx, tip, held.lease, result)
        # Every segment is examined before any is repaired: a repair deletes the damaged
        # attempt, whose producer snapshot the next segment's examination may need.
        tasks = remote_index_tasks(ctx.metadata, tip, interval)
        found = []
        for task in tasks:
            tally.count(names.REMOTE_FETCH_REQUESTS)
            examination = examine_remote_segment(ctx.storage, task)
            if examination.check.log_bytes:
                tally.count(names.REMOTE_FETCH_BYTES, examination.check.log_bytes)
            if examination.check.error is not None:
                tally.count(names.REMOTE_FETCH_ERRORS)
            found.append(examination)
            holding(len(found))
        for done, (task, examination) in enumerate(zip(tasks, found, strict=True), start=1):
            check = examination.check
            if repair and check.needs_repair:
                check = repair_remote_segment(ctx, task, examination, held.lease)
                if check.repaired_as is not None:
                    replaced = sum(1 for f in check.findings if f.status != IndexStatus.OK)
                    tally.count(names.INDEX_REPAIRS, replaced)
                holding(done)
            result.checks.append(check)
            say(format_index_check(check))
    if local:
        for local_task in local_index_tasks(partition_log, interval):
            check = check_local_segment(local_task)
            result.checks.append(check)
            say(format_index_check(check))
    result.seconds = time.monotonic() - started
    return result
