"""Kafka's remote retention, read-only: which remote segments are due for deletion and the delete
lag they make (no lease, nothing written); the planning half of ``runs.retention``.

docs/kafka-rules.md section 6 read with section 10: the lineage and the global log start offset
are the platform's own, so the broker deleting its old segments (and truncating its epoch cache
from the start), or a replica's log start moving inside a segment, never makes a segment due;
only the recorded global log start (moved by retention itself, or by a DeleteRecords applied
through the platform) does. A COPY_SEGMENT_STARTED segment stops the walk where a copy may be
running (Kafka stops at a segment being copied); a run holding the partition's lease plans it as
a killed copy's leftover instead. Status rows and the retention run read the plan and the
delete lag here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tiering_core.config import TopicConfig
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.tier.view import TierView, finished_in_lineage, is_in_lineage

if TYPE_CHECKING:
    from tiering_core.metadata.store import PartitionRecord, RemoteLogMetadataStore, RemoteLogSegmentMetadata

#: Why a segment is deleted, in the words of Kafka's retention handler.
REASON_DANGLING = "dangling-delete"
REASON_LOG_START = "log-start-offset-breach"
REASON_TIME = "retention.ms-breach"
REASON_SIZE = "retention.bytes-breach"
REASON_OLD_EPOCHS = "epochs-older-than-lineage"
REASON_DISABLED = "remote.log.delete.on.disable"
#: Not a retention rule: the objects of a killed copy, cleaned up before the walk.
REASON_COPY_LEFTOVER = "killed-copy-cleanup"

_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_DELETING = RemoteLogSegmentState.DELETE_SEGMENT_STARTED


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
    """What a run deletes, in order; ``new_log_start_offset`` is recorded before any object goes."""

    deletions: tuple[PlannedDeletion, ...]
    new_log_start_offset: int | None
    stopped_at: str | None

    @property
    def bytes(self) -> int:
        return sum(d.segment.size_bytes for d in self.deletions)

    @property
    def copy_leftovers(self) -> tuple[PlannedDeletion, ...]:
        return tuple(d for d in self.deletions if d.reason == REASON_COPY_LEFTOVER)

    @property
    def retention_deletions(self) -> tuple[PlannedDeletion, ...]:
        """Remote data the rules delete (killed copies' leftovers excluded: never remote data)."""
        return tuple(d for d in self.deletions if d.reason != REASON_COPY_LEFTOVER)


def retention_size_total(view: TierView, store: RemoteLogMetadataStore) -> int:
    """Section 6's size total: finished in-lineage remote bytes + local bytes of segments not
    wholly copied (the active one included). A segment being copied counts once, as local."""
    remote = sum(s.size_bytes for s in finished_in_lineage(view, store, custom_metadata=False))
    return remote + local_bytes_not_copied(view)


def local_bytes_not_copied(view: TierView) -> int:
    """Local bytes of the segments not wholly copied, the active one included (Kafka's
    ``onlyLocalLogSegmentsSize``): the local half of the size total."""
    segments = view.log.segments
    local = 0
    for i, segment in enumerate(segments):
        end = segments[i + 1].base_offset - 1 if i + 1 < len(segments) else None
        if end is None or end > view.highest_copied_offset:
            local += segment.size_bytes
    return local


def size_in_percent(size: int, limit: int | None) -> int | None:
    """KIP-1257's percent: ``size`` in whole percents of ``limit`` (truncated, as Kafka's integer
    division; above 100 while retention has not caught up), 0 for no limit (``-1``, or ``0``),
    None when the limit is not known."""
    if limit is None:
        return None
    return size * 100 // limit if limit > 0 else 0


def retention_size_in_percent(
    view: TierView, store: RemoteLogMetadataStore, topic: TopicConfig, finished_bytes: int
) -> int:
    """KIP-1257's RetentionSizeInPercent: the size total in percents of ``retention.bytes``, as
    Kafka's expiration task computes it: the local bytes not wholly copied plus ``finished_bytes``
    (every COPY_SEGMENT_FINISHED segment's) while that stays within the limit, the exact total
    (finished segments in the lineage only, ``retention_size_total``) once it is over."""
    limit = topic.retention_bytes
    if limit <= 0:
        return 0
    total = local_bytes_not_copied(view) + finished_bytes
    if total > limit:
        total = retention_size_total(view, store)
    return total * 100 // limit


def time_retention_limit(topic: TopicConfig, now_ms: int) -> int | None:
    """Kafka's ``cleanupUntilMs``: segments with maxTimestamp at or below it breach retention.ms.

    None (no time deletions) for unlimited retention, and when ``now - retention.ms`` is
    negative (Kafka's ``cleanupUntilMs >= 0`` guard).
    """
    if topic.retention_ms <= -1:
        return None
    limit = now_ms - topic.retention_ms
    return limit if limit >= 0 else None


@dataclass
class RetentionRules:
    """Kafka's ``RemoteLogRetentionHandler``: one predicate per rule, asked of the finished
    segments in lineage order; a segment breaching a rule is deleted, the first in the lineage
    breaching none stops the walk.

    ``over_size`` is the size total's excess over ``retention.bytes`` still to delete (None:
    unlimited); every deletion counts against it, whichever rule made it.
    """

    view: TierView
    log_start: int | None
    first_epoch: int | None
    time_limit: int | None
    over_size: int | None

    def _deleted(self, segment: RemoteLogSegmentMetadata) -> None:
        if self.over_size is not None:
            self.over_size = max(0, self.over_size - segment.size_bytes)

    def breaches_log_start(self, segment: RemoteLogSegmentMetadata) -> bool:
        """Wholly below the global log start offset, in epochs no later than the lineage's first."""
        if self.log_start is None or self.first_epoch is None or segment.end_offset >= self.log_start:
            return False
        if not all(e <= self.first_epoch for e in segment.leader_epochs):
            return False
        if is_in_lineage(self.view, segment):
            # Below the log start it is no longer part of the log's size (Kafka's local log
            # deletes log-start breaches before measuring size): a rerun after a run killed
            # between recording the log start and deleting must not delete more by size.
            self._deleted(segment)
        return True

    def breaches_time(self, segment: RemoteLogSegmentMetadata) -> bool:
        """``retention.ms``: its max timestamp is at or below Kafka's ``cleanupUntilMs``."""
        if self.time_limit is None or segment.max_timestamp > self.time_limit:
            return False
        self._deleted(segment)
        return True

    def breaches_size(self, segment: RemoteLogSegmentMetadata) -> bool:
        """``retention.bytes``: deleting it keeps the size total at or above the limit."""
        if self.over_size is None or self.over_size - segment.size_bytes < 0:
            return False
        self.over_size -= segment.size_bytes
        return True


def _in_lineage_order(
    epochs: Iterable[int], segments: list[RemoteLogSegmentMetadata]
) -> Iterator[RemoteLogSegmentMetadata]:
    """Each epoch's segments by start offset, epochs oldest first (Kafka's walk of the cache); the
    segments are grouped by epoch once, so a long lineage costs no pass over them per epoch."""
    by_epoch: dict[int, list[RemoteLogSegmentMetadata]] = {}
    for segment in segments:
        for epoch in segment.leader_epochs:
            by_epoch.setdefault(epoch, []).append(segment)
    for epoch in epochs:
        yield from sorted(by_epoch.get(epoch, ()), key=lambda x: x.start_offset)


def plan_retention(
    view: TierView,
    store: RemoteLogMetadataStore,
    topic: TopicConfig,
    now_ms: int,
    *,
    copy_in_progress: bool = True,
) -> RetentionPlan:
    """Which remote segments retention deletes now (read-only), in deletion order.

    ``copy_in_progress``: a COPY_SEGMENT_STARTED segment is being copied right now, and the
    walk stops at it (Kafka). A run holding the lease passes False: such a segment is a killed
    copy's leftover, planned for cleanup (REASON_COPY_LEFTOVER) and walked past.
    """
    segments = store.list_segments(view.tip, custom_metadata=False)
    chosen: dict[uuid.UUID, PlannedDeletion] = {}

    def choose(segment: RemoteLogSegmentMetadata, reason: str) -> None:
        chosen.setdefault(segment.segment_id, PlannedDeletion(segment, reason))

    def ordered() -> tuple[PlannedDeletion, ...]:
        return tuple(sorted(chosen.values(), key=lambda d: (d.segment.start_offset, d.segment.event_time)))

    # A deletion once started is always finished, whatever the topic's config says now.
    for s in segments:
        if s.state == _DELETING:
            choose(s, REASON_DANGLING)
    if not copy_in_progress:
        for s in segments:
            if s.state == _STARTED:
                choose(s, REASON_COPY_LEFTOVER)

    if not topic.remote_storage_enable:
        if topic.remote_log_delete_on_disable:
            for s in segments:
                if s.state == _FINISHED:
                    choose(s, REASON_DISABLED)
        return RetentionPlan(ordered(), None, None)

    lineage = view.lineage.without_empty_epochs()
    rules = RetentionRules(
        view,
        log_start=view.global_log_start_offset,
        first_epoch=lineage.earliest_epoch,
        time_limit=time_retention_limit(topic, now_ms),
        over_size=retention_size_total(view, store) - topic.retention_bytes if topic.retention_bytes > -1 else None,
    )
    new_log_start: int | None = None
    stopped_at: str | None = None
    first_epoch = lineage.earliest_epoch
    for s in _in_lineage_order(lineage.epochs(), segments):
        if s.state == _STARTED and copy_in_progress:
            stopped_at = f"segment {s.segment_id} [{s.start_offset}..{s.end_offset}] is being copied"
            break
        if s.segment_id in chosen or s.state != _FINISHED:
            continue
        if rules.breaches_log_start(s):
            choose(s, REASON_LOG_START)
            continue
        if not is_in_lineage(view, s):
            continue
        if rules.breaches_time(s):
            choose(s, REASON_TIME)
        elif rules.breaches_size(s):
            choose(s, REASON_SIZE)
        else:
            stopped_at = f"segment [{s.start_offset}..{s.end_offset}] is within the lineage and breaches nothing"
            break
        new_log_start = max(new_log_start or 0, s.end_offset + 1)

    # Segments whose epochs all predate the lineage's earliest epoch are never served again.
    if first_epoch is not None:
        for s in segments:
            if s.state == _FINISHED and s.leader_epochs and max(s.leader_epochs) < first_epoch:
                choose(s, REASON_OLD_EPOCHS)

    return RetentionPlan(ordered(), new_log_start, stopped_at)


def delete_lag(view: TierView, store: RemoteLogMetadataStore, topic: TopicConfig, now_ms: int) -> tuple[int, int]:
    """(segments, bytes) waiting to be deleted, as Kafka's RemoteDeleteLagSegments/Bytes. Read-only.

    What retention would delete now plus deletions started and not finished, each once. A
    partition being removed (or removed) waits for all its remaining segments. A killed copy's
    leftover is not remote data and is not counted; a COPY_SEGMENT_STARTED segment stops the
    walk while some run holds the partition's lease (it may be being copied right now).
    """
    record = store.get_partition(view.tip)
    if record is None:
        return 0, 0
    if removed_reason(record) is not None:
        return store.segment_totals(view.tip, (_FINISHED, _DELETING))
    plan = plan_retention(view, store, topic, now_ms, copy_in_progress=store.is_lease_active(view.tip))
    pending = [d.segment for d in plan.retention_deletions]
    unique = {s.segment_id: s for s in pending}
    return len(unique), sum(s.size_bytes for s in unique.values())


def removed_reason(record: PartitionRecord) -> str | None:
    """Why retention (and a DeleteRecords) leaves a partition alone: removed, or being removed
    (section 7 owns it)."""
    if record.dropped:
        return "removed"
    if record.delete_state is not None:
        return f"being removed ({record.delete_state.value})"
    return None
