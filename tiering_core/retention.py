"""The expiration task: Kafka's remote retention as one batch run per partition.

KAFKA_SEMANTICS section 6 read with section 10: the lineage and the global log start offset
are the platform's own, so the broker deleting its old segments (and truncating its epoch
cache from the start) never deletes remote data. The plan is computed read-only
(``plan_retention``); the run records the new remote log start offset **before** deleting any
object, then deletes each segment as DELETE_SEGMENT_STARTED -> objects -> DELETE_SEGMENT_FINISHED.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tiering_core.config import TopicConfig
from tiering_core.kafka.topic import TopicPartition
from tiering_core.metadata.errors import FencedError, LeaseHeldError
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.remote_segments import delete_remote_segment
from tiering_core.tier_state import TierView, is_in_lineage, load_tier_view

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.metadata.store import RemoteLogMetadataStore, RemoteLogSegmentMetadata

log = logging.getLogger(__name__)

#: Why a segment is deleted, in the words of Kafka's retention handler.
REASON_DANGLING = "dangling-delete"
REASON_LOG_START = "log-start-offset-breach"
REASON_TIME = "retention.ms-breach"
REASON_SIZE = "retention.bytes-breach"
REASON_OLD_EPOCHS = "epochs-older-than-lineage"
REASON_DISABLED = "remote.log.delete.on.disable"


@dataclass(frozen=True)
class PlannedDeletion:
    segment: RemoteLogSegmentMetadata
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "segment_id": str(self.segment.segment_id),
            "start_offset": self.segment.start_offset,
            "end_offset": self.segment.end_offset,
            "size_bytes": self.segment.size_bytes,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class RetentionPlan:
    deletions: tuple[PlannedDeletion, ...]
    new_log_start_offset: int | None
    stopped_at: str | None

    @property
    def bytes(self) -> int:
        return sum(d.segment.size_bytes for d in self.deletions)


@dataclass
class RetentionResult:
    topic: str
    partition: int
    dry_run: bool = False
    fenced: bool = False
    skipped_reason: str | None = None
    segments_deleted: int = 0
    bytes_deleted: int = 0
    remote_log_start_offset: int | None = None
    planned: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, for ``--json`` and XCom."""
        return {**asdict(self), "seconds": round(self.seconds, 3)}


def retention_size_total(view: TierView, store: RemoteLogMetadataStore) -> int:
    """Finished in-lineage remote bytes + local bytes of segments not yet fully copied (active included)."""
    remote = sum(
        s.size_bytes
        for s in store.list_segments(view.tip)
        if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED and is_in_lineage(view, s)
    )
    segments = view.log.segments
    local = 0
    for i, segment in enumerate(segments):
        end = segments[i + 1].base_offset - 1 if i + 1 < len(segments) else None
        if end is None or end > view.highest_copied_offset:
            local += segment.size_bytes
    return remote + local


def plan_retention(view: TierView, store: RemoteLogMetadataStore, topic: TopicConfig, now_ms: int) -> RetentionPlan:
    """Which remote segments retention deletes now (read-only), in deletion order."""
    segments = store.list_segments(view.tip)
    chosen: dict[uuid.UUID, PlannedDeletion] = {}

    def choose(segment: RemoteLogSegmentMetadata, reason: str) -> None:
        chosen.setdefault(segment.segment_id, PlannedDeletion(segment, reason))

    if not topic.remote_storage_enable:
        if topic.remote_log_delete_on_disable:
            for s in segments:
                if s.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                    choose(s, REASON_DISABLED)
        return RetentionPlan(tuple(chosen.values()), None, None)

    for s in segments:
        if s.state == RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
            choose(s, REASON_DANGLING)

    lineage = view.lineage.without_empty_epochs()
    log_start = view.global_log_start_offset
    remaining: int | None = None
    if topic.retention_bytes > -1:
        remaining = retention_size_total(view, store) - topic.retention_bytes
    time_limit = now_ms - topic.retention_ms if topic.retention_ms > -1 else None
    new_log_start: int | None = None
    stopped_at: str | None = None
    first_epoch = lineage.earliest_epoch

    can_process = True
    for epoch in lineage.epochs():
        if not can_process:
            break
        for s in sorted((x for x in segments if epoch in x.leader_epochs), key=lambda x: x.start_offset):
            if s.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                stopped_at = f"segment {s.segment_id} [{s.start_offset}..{s.end_offset}] is being copied"
                can_process = False
                break
            if s.segment_id in chosen or s.state != RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                continue
            delete = (
                log_start is not None
                and first_epoch is not None
                and all(e <= first_epoch for e in s.leader_epochs)
                and s.end_offset < log_start
            )
            reason = REASON_LOG_START
            valid = False
            if not delete:
                valid = is_in_lineage(view, s)
                if valid and time_limit is not None and s.max_timestamp <= time_limit:
                    delete, reason = True, REASON_TIME
                    if remaining is not None:
                        remaining = max(0, remaining - s.size_bytes)
                elif valid and remaining is not None and remaining - s.size_bytes >= 0:
                    delete, reason = True, REASON_SIZE
                    remaining -= s.size_bytes
                if delete:
                    new_log_start = max(new_log_start or 0, s.end_offset + 1)
            if delete:
                choose(s, reason)
            elif valid:
                stopped_at = f"segment [{s.start_offset}..{s.end_offset}] is within the lineage and breaches nothing"
                can_process = False
                break

    # Segments whose epochs all predate the lineage's earliest epoch are never served again.
    if first_epoch is not None:
        for s in segments:
            if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED and s.leader_epochs:
                if max(s.leader_epochs) < first_epoch:
                    choose(s, REASON_OLD_EPOCHS)

    ordered = sorted(chosen.values(), key=lambda d: (d.segment.start_offset, d.segment.event_time))
    return RetentionPlan(tuple(ordered), new_log_start, stopped_at)


def run_retention(
    ctx: TieringContext,
    tp: TopicPartition,
    *,
    dry_run: bool = False,
    run_id: str | None = None,
    now_ms: int | None = None,
) -> RetentionResult:
    """Delete the remote segments of one partition that Kafka's retention rules expire."""
    started = time.monotonic()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    result = RetentionResult(topic=tp.topic, partition=tp.partition, dry_run=dry_run)
    topic = ctx.config.topic_config(tp.topic)
    store, storage = ctx.metadata, ctx.storage
    partition_log = ctx.partitions(tp.topic, tp.partition)[0]
    if dry_run:
        view = load_tier_view(partition_log, store)
        plan = plan_retention(view, store, topic, now)
        result.planned = [d.to_dict() for d in plan.deletions]
        result.remote_log_start_offset = view.remote_log_start_offset
        for d in plan.deletions:
            log.info(
                "%s: would delete segment [%d..%d] (%s)", tp, d.segment.start_offset, d.segment.end_offset, d.reason
            )
        return result

    view = load_tier_view(partition_log, store)
    if store.get_partition(view.tip) is None:
        result.skipped_reason = "nothing tiered yet"
        return result
    run = run_id or uuid.uuid4().hex
    try:
        lease = store.acquire_lease(view.tip, holder=f"retention:{run}", run_id=run)
    except LeaseHeldError as exc:
        log.info("%s: another run holds the partition (%s); retention skipped", tp, exc)
        result.fenced = True
        return result
    try:
        if view.observed_delete_records_offset is not None:
            store.record_delete_records(
                view.tip, view.observed_delete_records_offset, lease, source="log-start-offset-checkpoint"
            )
        view = load_tier_view(partition_log, store)
        plan = plan_retention(view, store, topic, now)
        result.planned = [d.to_dict() for d in plan.deletions]
        if plan.new_log_start_offset is not None:
            store.set_remote_log_start_offset(view.tip, plan.new_log_start_offset, lease)
            log.info("%s: remote log start offset -> %d", tp, plan.new_log_start_offset)
        for d in plan.deletions:
            delete_remote_segment(store, storage, d.segment, lease)
            result.segments_deleted += 1
            result.bytes_deleted += d.segment.size_bytes
            lease = store.renew_lease(lease)
        if plan.stopped_at:
            log.info("%s: retention stopped: %s", tp, plan.stopped_at)
    except FencedError:
        result.fenced = True
        log.warning("%s: fenced by a newer run; retention stopped", tp)
    finally:
        try:
            store.release_lease(lease)
        except FencedError:
            pass
    result.remote_log_start_offset = store.get_remote_log_start_offset(view.tip)
    result.seconds = time.monotonic() - started
    log.info(
        "%s: retention deleted %d segment(s), %d bytes; remote log start offset %s",
        tp,
        result.segments_deleted,
        result.bytes_deleted,
        result.remote_log_start_offset,
    )
    return result


def apply_delete_records(ctx: TieringContext, tp: TopicPartition, before_offset: int) -> int:
    """``tiering delete-records``: record a DeleteRecords by hand; retention then deletes below it."""
    from tiering_core.errors import TieringError

    if before_offset < 0:
        raise TieringError(f"--before-offset must be >= 0, got {before_offset}")
    store = ctx.metadata
    partition_log = ctx.partitions(tp.topic, tp.partition)[0]
    view = load_tier_view(partition_log, store)
    if before_offset > view.log_end_offset:
        raise TieringError(f"{tp}: offset {before_offset} is beyond the log end offset {view.log_end_offset}")
    lease = store.acquire_lease(view.tip, holder="delete-records")
    try:
        store.record_delete_records(view.tip, before_offset, lease, source="tiering delete-records")
    finally:
        store.release_lease(lease)
    recorded = store.get_delete_records_offset(view.tip)
    return before_offset if recorded is None else recorded


@dataclass(frozen=True)
class OrphanObject:
    key: str
    size: int
    age_ms: int
    deleted: bool

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "size": self.size, "age_ms": self.age_ms, "deleted": self.deleted}


def find_orphans(
    ctx: TieringContext,
    topic: str | None = None,
    partition: int | None = None,
    *,
    grace_ms: int = 3_600_000,
    delete: bool = False,
) -> list[OrphanObject]:
    """Remote objects under a partition's prefix that no live metadata references.

    Only objects older than ``grace_ms`` are deleted, so a copy in flight is never touched.
    """
    from tiering_core.kafka.topic import TopicIdPartition
    from tiering_core.storage.layout import parse_segment_key

    now = int(time.time() * 1000)
    found: list[OrphanObject] = []
    for record in ctx.metadata.list_partitions():
        tp = record.topic_partition
        if (topic is not None and tp.topic != topic) or (partition is not None and tp.partition != partition):
            continue
        tip = TopicIdPartition(record.topic_id, tp)
        live = {s.segment_id for s in ctx.metadata.list_segments(tip)}
        doomed: list[str] = []
        for obj in ctx.storage.list_objects(tip):
            parsed = parse_segment_key(obj.key, ctx.config.remote.prefix)
            if parsed is not None and parsed[0].segment_id in live:
                continue
            age = now - int(obj.last_modified.timestamp() * 1000)
            old_enough = age >= grace_ms
            if delete and old_enough:
                doomed.append(obj.key)
            found.append(OrphanObject(obj.key, obj.size, age, delete and old_enough))
        if doomed:
            ctx.storage.delete_keys(doomed)
            log.info("%s: deleted %d orphaned object(s)", tip, len(doomed))
    return found
