"""A remote segment's repair as the driver writes it: COPY_SEGMENT_STARTED for the new copy,
FINISHED (then the damaged copy deleted) or the attempt abandoned, and the leftovers of a repair
a killed run interrupted.

Apart from the run (``run.py``) because these are metadata steps under a held lease, whoever
drives them: the rebuild run commits its repairs with them, and a rewrite starts each segment's
new copy as a repair starts (``runs/rewrite.py``).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING

from tiering_core.engine.segment_ops import abandon_attempt, delete_remote_segment, segment_ref
from tiering_core.events.rebuild import IndexCheck
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.errors import FencedError
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.metadata.store import RemoteLogSegmentMetadata
from tiering_core.runs.rebuild.examine import RemoteIndexExamination, RemoteIndexTask
from tiering_core.storage.manifest import CopyRecord

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.metadata.store import Lease, RemoteLogMetadataStore
    from tiering_core.storage.manifest import SegmentManifest
    from tiering_core.storage.remote import RemoteStorage

log = logging.getLogger(__name__)


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


def repair_task(
    task: RemoteIndexTask, found: RemoteIndexExamination, attempt: RemoteLogSegmentMetadata
) -> RemoteIndexTask:
    """The examination that copies the segment again, with the producer state the check used."""
    return replace(task, repair_ref=segment_ref(attempt), open_transactions=found.open_transactions)


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
