"""Remote partition removal (KAFKA_SEMANTICS section 7), triggered by hand.

DELETE_PARTITION_MARKED -> DELETE_PARTITION_STARTED -> every segment deleted ->
DELETE_PARTITION_FINISHED -> the partition's metadata is dropped (a tombstone stays, so the
same topic id is never copied to again). Every step is idempotent: a run killed anywhere is
resumed by running it again.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tiering_core.errors import TieringError
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.errors import FencedError, LeaseHeldError
from tiering_core.metadata.states import RemotePartitionDeleteState
from tiering_core.remote_segments import delete_remote_segment

if TYPE_CHECKING:
    from tiering_core.context import TieringContext

log = logging.getLogger(__name__)


@dataclass
class RemovalResult:
    topic: str
    partition: int
    dry_run: bool = False
    fenced: bool = False
    topic_ids: list[str] = field(default_factory=list)
    segments_deleted: int = 0
    bytes_deleted: int = 0
    state: str | None = None
    planned: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, for ``--json`` and XCom."""
        return {**asdict(self), "seconds": round(self.seconds, 3)}


def partitions_to_remove(ctx: TieringContext, tp: TopicPartition) -> list[TopicIdPartition]:
    """Every topic id the metadata store holds for ``tp`` that is not already removed."""
    found = []
    for record in ctx.metadata.list_partitions():
        if record.topic_partition == tp and not record.dropped:
            found.append(TopicIdPartition(record.topic_id, record.topic_partition))
    return found


def delete_partition(
    ctx: TieringContext, tp: TopicPartition, *, dry_run: bool = False, run_id: str | None = None
) -> RemovalResult:
    """Delete all remote data of a partition (all its topic ids); resumable."""
    started = time.monotonic()
    store, storage = ctx.metadata, ctx.storage
    result = RemovalResult(topic=tp.topic, partition=tp.partition, dry_run=dry_run)
    targets = partitions_to_remove(ctx, tp)
    if not targets:
        raise TieringError(f"partition {tp} has no remote data to remove (unknown to the metadata store)")
    result.topic_ids = [t.topic_id for t in targets]
    for tip in targets:
        segments = store.list_segments(tip)
        result.planned.extend(
            {
                "topic_id": tip.topic_id,
                "segment_id": str(s.segment_id),
                "start_offset": s.start_offset,
                "end_offset": s.end_offset,
                "size_bytes": s.size_bytes,
                "state": s.state.value,
            }
            for s in segments
        )
    if dry_run:
        log.info("%s: dry run: %d remote segment(s) would be deleted", tp, len(result.planned))
        return result

    run = run_id or uuid.uuid4().hex
    for tip in targets:
        try:
            lease = store.acquire_lease(tip, holder=f"delete-partition:{run}", run_id=run)
        except LeaseHeldError as exc:
            log.warning("%s: another run holds the partition (%s); removal not started", tp, exc)
            result.fenced = True
            continue
        try:
            record = store.get_partition(tip)
            state = record.delete_state if record is not None else None
            if state is None:
                store.mark_partition_for_deletion(tip, lease)
                state = RemotePartitionDeleteState.DELETE_PARTITION_MARKED
                log.info("%s: marked for deletion", tip)
            if state == RemotePartitionDeleteState.DELETE_PARTITION_MARKED:
                store.update_partition_delete_state(tip, RemotePartitionDeleteState.DELETE_PARTITION_STARTED, lease)
                state = RemotePartitionDeleteState.DELETE_PARTITION_STARTED
            if state == RemotePartitionDeleteState.DELETE_PARTITION_STARTED:
                for segment in store.list_segments(tip):
                    delete_remote_segment(store, storage, segment, lease)
                    result.segments_deleted += 1
                    result.bytes_deleted += segment.size_bytes
                    lease = store.renew_lease(lease)
                store.update_partition_delete_state(tip, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED, lease)
                state = RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
            store.drop_partition_metadata(tip, lease)
            result.state = state.value
            log.info(
                "%s: remote partition deleted (%d segment(s), %d bytes)",
                tip,
                result.segments_deleted,
                result.bytes_deleted,
            )
        except FencedError:
            result.fenced = True
            log.warning("%s: fenced by a newer run; removal stopped (run it again to resume)", tip)
        finally:
            try:
                store.release_lease(lease)
            except (FencedError, TieringError):
                pass
    result.seconds = time.monotonic() - started
    return result
