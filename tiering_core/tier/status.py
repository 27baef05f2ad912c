"""Per-partition tier state for ``tiering status``, the Airflow view and the DAG sensors."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tiering_core.config import not_tiered_reason
from tiering_core.errors import ClusterUnreachableError, NoRemoteDataError, TieringError
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.storage.manifest import CopyRecord
from tiering_core.tier.observation import Figures, Observed, record_views
from tiering_core.tier.offsets import (
    OffsetRange,
    first_served_offset,
    merge_offset_ranges,
    recorded_gaps,
    remote_only_offsets,
)
from tiering_core.tier.replica import tiering_gap_on
from tiering_core.tier.retention_plan import delete_lag
from tiering_core.tier.view import TierView, finished_in_lineage, tier_view

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.kafka.partition_log import PartitionLog
    from tiering_core.metadata.store import RemoteLogMetadataStore, RemoteLogSegmentMetadata

STATUS_FIELDS = (
    "topic",
    "partition",
    "topic_id",
    "log_start_offset",
    "high_watermark",
    "last_stable_offset",
    "log_end_offset",
    "leader_epoch",
    "highest_copied_offset",
    "remote_log_start_offset",
    "remote_segments",
    "remote_bytes",
    "copy_lag_segments",
    "copy_lag_bytes",
    "delete_state",
    "gaps",
)


def copy_lag_offsets(last_stable_offset: int | None, highest_copied_offset: int) -> int | None:
    """The copy lag in offsets, as a consumer's lag counts them: the offsets below the last stable
    offset not tiered yet (None without an LSO). ``status`` and ``status --cluster`` both use it."""
    return None if last_stable_offset is None else max(0, last_stable_offset - (highest_copied_offset + 1))


@dataclass
class PartitionStatus:
    topic: str
    partition: int
    topic_id: str | None
    log_start_offset: int | None = None
    local_log_start_offset: int | None = None
    high_watermark: int | None = None
    last_stable_offset: int | None = None
    log_end_offset: int | None = None
    leader_epoch: int | None = None
    highest_copied_offset: int = -1
    remote_log_start_offset: int | None = None
    remote_segments: int = 0
    remote_bytes: int = 0
    copy_lag_segments: int = 0
    copy_lag_bytes: int = 0
    delete_state: str | None = None
    gaps: list[list[int]] = field(default_factory=list)
    delete_lag_segments: int = 0
    delete_lag_bytes: int = 0
    local_retention_risk: dict[str, Any] | None = None
    # [start, end]: tiered offsets below the broker's log start, readable from the remote tier only
    remote_only_offsets: list[int] | None = None
    on_broker: bool = True
    offsets_source: str | None = None  # "broker" (the kafka: section) or "files"; None off the broker
    error: str | None = None
    not_tiered_reason: str | None = None  # why copy skips the topic (compacted, ...); None: it is tiered
    copy_delay: dict[str, int] | None = None  # why closed segments below the LSO wait (KIP-1241)
    # why a copy skips the partition for now (the broker has not checkpointed its high watermark yet)
    copy_skipped_reason: str | None = None

    @property
    def copy_lag_offsets(self) -> int | None:
        return copy_lag_offsets(self.last_stable_offset, self.highest_copied_offset)

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in STATUS_FIELDS}
        out.update(
            local_log_start_offset=self.local_log_start_offset,
            copy_lag_offsets=self.copy_lag_offsets,
            delete_lag_segments=self.delete_lag_segments,
            delete_lag_bytes=self.delete_lag_bytes,
            local_retention_risk=self.local_retention_risk,
            remote_only_offsets=self.remote_only_offsets,
            on_broker=self.on_broker,
            offsets_source=self.offsets_source,
            error=self.error,
            not_tiered_reason=self.not_tiered_reason,
            copy_delay=self.copy_delay,
            copy_skipped_reason=self.copy_skipped_reason,
        )
        return out


def partition_status(
    ctx: TieringContext, partition_log: PartitionLog, *, broker_id: int | None = None, now_ms: int | None = None
) -> PartitionStatus:
    """Status of one broker partition joined with the metadata store; with ``broker_id``, also
    records what this broker saw of it (``tier.observation``). ``now_ms``: the clock (None: now)."""
    row, seen = _partition_status(ctx, partition_log, broker_id, now_ms)
    observed = [seen] if seen is not None else []
    record_views(ctx.metadata, broker_id, observed, brokers=ctx.config.broker_ids, figures=_figures(observed, [row]))
    return row


def _figures(observed: list[Observed], rows: list[PartitionStatus]) -> dict[TopicIdPartition, Figures]:
    """The delete lag each status row computed, for its replica's observation."""
    lags = {(r.topic_id, r.partition): (r.delete_lag_segments, r.delete_lag_bytes) for r in rows}
    return {
        view.tip: Figures(delete_lag=lags[(view.tip.topic_id, view.tip.partition)])
        for view, _, _ in observed
        if (view.tip.topic_id, view.tip.partition) in lags
    }


def _partition_status(
    ctx: TieringContext, partition_log: PartitionLog, broker_id: int | None = None, now_ms: int | None = None
) -> tuple[PartitionStatus, Observed | None]:
    """The status row (read-only), and the view it came from for the replica's observation. On one
    broker of a cluster (``broker_id``) a gap another fresh replica still holds is none."""
    store = ctx.metadata
    tp = partition_log.topic_partition
    try:
        view = tier_view(ctx, partition_log)
    except ClusterUnreachableError:
        raise  # never the files instead, never a row per partition saying so
    except TieringError as exc:
        return PartitionStatus(tp.topic, tp.partition, None, offsets_source=ctx.offsets_source, error=str(exc)), None
    record = store.get_partition(view.tip)
    finished = finished_in_lineage(view, store, custom_metadata=False)
    lag_segments, lag_bytes = view.copy_lag()
    remote_start = remote_log_start(view, finished)
    starts = [view.local_log_start_offset] + ([remote_start] if remote_start is not None else [])
    log_start = min(starts)
    if view.delete_records_offset is not None:
        log_start = max(log_start, view.delete_records_offset)
    topic_config = ctx.topic_config(tp.topic)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    risk = view.local_retention_risk(topic_config, now)
    delete_lag_segments, delete_lag_bytes = delete_lag(view, store, topic_config, now)
    not_tiered = not_tiered_reason(tp.topic, topic_config)
    delay = None if not_tiered is not None else view.upload_eligibility(topic_config, now).delay
    remote_only = remote_only_offsets(remote_start, view.highest_copied_offset, view.local_log_start_offset)
    row = PartitionStatus(
        topic=tp.topic,
        partition=tp.partition,
        topic_id=view.tip.topic_id,
        log_start_offset=log_start,
        local_log_start_offset=view.local_log_start_offset,
        high_watermark=view.high_watermark,
        last_stable_offset=view.last_stable_offset,
        log_end_offset=view.log_end_offset,
        leader_epoch=view.broker_cache.latest_epoch,
        highest_copied_offset=view.highest_copied_offset,
        remote_log_start_offset=remote_start,
        remote_segments=len(finished),
        remote_bytes=sum(s.size_bytes for s in finished),
        copy_lag_segments=lag_segments,
        copy_lag_bytes=lag_bytes,
        delete_lag_segments=delete_lag_segments,
        delete_lag_bytes=delete_lag_bytes,
        delete_state=record.delete_state.value if record is not None and record.delete_state is not None else None,
        gaps=current_gaps(view, store, tiering_gap_on(ctx.config, store, view, broker_id)),
        local_retention_risk=risk.to_dict(),
        remote_only_offsets=remote_only.as_list() if remote_only is not None else None,
        offsets_source=view.offsets_source,
        error=None if view.offsets_pending else view.offsets_error,
        not_tiered_reason=not_tiered,
        copy_skipped_reason=view.offsets_pending,
        copy_delay=delay.to_dict() if delay is not None else None,
    )
    return row, (view, topic_config, risk)


def current_gaps(
    view: TierView, store: RemoteLogMetadataStore, pending: OffsetRange | bool | None = True
) -> list[list[int]]:
    """The recorded tiering gaps plus the one the broker has opened since the last copy: a gap
    shows as soon as the broker deleted data not yet tiered, not only once a copy recorded it.
    ``pending``: that gap as judged by the caller (True: the replica's own ``tiering_gap``)."""
    ranges = [(g.start, g.end) for g in store.list_gaps(view.tip)]
    if pending is True:
        pending = view.tiering_gap()
    if isinstance(pending, OffsetRange):
        ranges.append((pending.start, pending.end))
    return [g.as_list() for g in merge_offset_ranges(ranges)]


def remote_log_start(view: TierView, finished: list[RemoteLogSegmentMetadata]) -> int | None:
    """The first offset the remote tier serves (``first_served_offset``) of the finished in-lineage
    segments."""
    first = min((s.first_epoch_offset for s in finished), default=None)
    return first_served_offset(first, view.global_log_start_offset, view.remote_log_start_offset)


def collect_status(
    ctx: TieringContext,
    topic: str | None = None,
    partition: int | None = None,
    *,
    broker_id: int | None = None,
    now_ms: int | None = None,
) -> list[PartitionStatus]:
    """Every selected broker partition, plus partitions known only to the metadata store
    (removed from the broker, remote data kept) when no selector excludes them. With
    ``broker_id``, what this broker saw of its partitions is recorded, in one transaction.
    ``now_ms``: the clock retention, the local-retention risk and the delayed upload are judged
    by (None: now)."""
    logs = ctx.partitions(topic, partition)
    rows: list[PartitionStatus] = []
    observed: list[Observed] = []
    for log in logs:
        row, view_seen = _partition_status(ctx, log, broker_id, now_ms)
        rows.append(row)
        if view_seen is not None:
            observed.append(view_seen)
    record_views(ctx.metadata, broker_id, observed, brokers=ctx.config.broker_ids, figures=_figures(observed, rows))
    seen = {(r.topic, r.partition, r.topic_id) for r in rows}
    for record in ctx.metadata.list_partitions():
        tip = TopicIdPartition(record.topic_id, record.topic_partition)
        if (tip.topic, tip.partition, tip.topic_id) in seen:
            continue
        if (topic is not None and tip.topic != topic) or (partition is not None and tip.partition != partition):
            continue
        finished_state = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        remote_segments, remote_bytes = ctx.metadata.segment_totals(tip, (finished_state,))
        # Off the broker there is no lineage to judge retention by: what waits is what removal or
        # a started deletion will delete.
        waiting = {RemoteLogSegmentState.DELETE_SEGMENT_STARTED} | ({finished_state} if record.delete_state else set())
        waiting_segments, waiting_bytes = ctx.metadata.segment_totals(tip, waiting)
        rows.append(
            PartitionStatus(
                topic=tip.topic,
                partition=tip.partition,
                topic_id=tip.topic_id,
                remote_log_start_offset=record.remote_log_start_offset,
                log_start_offset=record.remote_log_start_offset,
                remote_segments=remote_segments,
                remote_bytes=remote_bytes,
                delete_lag_segments=waiting_segments,
                delete_lag_bytes=waiting_bytes,
                delete_state=record.delete_state.value if record.delete_state is not None else None,
                gaps=recorded_gaps(ctx.metadata, tip),
                on_broker=False,
            )
        )
    return sorted(rows, key=lambda r: (r.topic, r.partition))


def segment_to_dict(segment: RemoteLogSegmentMetadata) -> dict[str, Any]:
    """The ``segments --json`` contract of docs/architecture.md."""
    objects = CopyRecord.of_segment(segment).objects
    return {
        "segment_id": str(segment.segment_id),
        "topic": segment.topic_id_partition.topic,
        "partition": segment.topic_id_partition.partition,
        "start_offset": segment.start_offset,
        "end_offset": segment.end_offset,
        "leader_epochs": {str(e): o for e, o in sorted(segment.leader_epochs.items())},
        "max_timestamp": segment.max_timestamp,
        "size_bytes": segment.size_bytes,
        "state": segment.state.value,
        "objects": dict(objects),
    }


def list_remote_segments(ctx: TieringContext, topic: str, partition: int) -> list[dict[str, Any]]:
    """Not-yet-deleted remote segments of a partition (every topic id it had), by start offset."""
    rows: list[dict[str, Any]] = []
    for record in ctx.metadata.list_partitions():
        if record.topic_partition.topic == topic and record.topic_partition.partition == partition:
            tip = TopicIdPartition(record.topic_id, record.topic_partition)
            rows.extend(segment_to_dict(s) for s in ctx.metadata.list_segments(tip))
    if not rows and not any(
        r.topic_partition.topic == topic and r.topic_partition.partition == partition
        for r in ctx.metadata.list_partitions()
    ):
        # Validate the selector against the broker so a typo is an error, not an empty list (a
        # process that serves no broker has only the store to ask).
        if ctx.config.serves_no_broker:
            raise NoRemoteDataError(f"{topic}-{partition}")
        ctx.partitions(topic, partition)
    return sorted(rows, key=lambda r: (r["start_offset"], r["end_offset"]))
