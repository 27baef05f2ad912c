"""A DeleteRecords applied through the platform: ``tiering delete-records`` and the manual
``tiering_delete_records`` DAG (docs/kafka-rules.md section 10 item 1).

This is the only way the global log start offset moves but by the platform's own retention: a
replica's log start (its ``log-start-offset-checkpoint`` entry, the cluster's log start) is only
the broker's local log start. The request is checked first: the partition must be tiered and not
removed, and the offset may not pass the high watermark, as Kafka bounds it (the cluster's live
high watermark with a ``kafka:`` section, which the cluster checks again, taken only from a
cluster whose cluster id is the log dirs' (``live.identity``); else the broker's
``replication-offset-checkpoint``, a lower bound; else the log end offset). Then, holding the
partition's lease so that no copy run takes the cluster's new log start for a tiering gap in
between, it is sent to the cluster through the admin API when there is a ``kafka:`` section, and
recorded in the metadata store; the next retention run deletes the remote segments wholly below
it. The cluster first: a DeleteRecords the cluster refuses is never recorded, so the remote tier
never loses records the cluster still serves. Once recorded, the partition's state object is
published (``engine.partition_state``).

Idempotent: applying the same offset again (after a failure between the two steps, say) changes
nothing more; an offset at or below one already applied leaves the log start where it is, as in
Kafka.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from tiering_core.engine.lease import held_partition
from tiering_core.engine.partition_state import publish_partition_state
from tiering_core.errors import ClusterUnreachableError, TieringError
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.errors import LeaseHeldError
from tiering_core.runs.errors import DeleteRecordsRefusedError
from tiering_core.tier.retention_plan import removed_reason
from tiering_core.tier.view import TierView, global_log_start, tier_view

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.metadata.store import TaskAttempt

log = logging.getLogger(__name__)


@dataclass
class DeleteRecordsResult:
    """One DeleteRecords: ``log_start_offset`` is the partition's global log start after it (a dry
    run: would be), ``cluster_log_start_offset`` the log start the cluster answered (None: not
    sent, no ``kafka:`` section or a dry run); ``high_watermark`` the bound it was checked
    against (``bound`` names it)."""

    topic: str
    partition: int
    topic_id: str
    before_offset: int
    high_watermark: int
    bound: str
    dry_run: bool = False
    log_start_offset: int | None = None
    sent_to_cluster: bool = False
    cluster_log_start_offset: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, for ``--json`` and XCom."""
        return asdict(self)


def _bound(ctx: TieringContext, view: TierView) -> tuple[int, str, str]:
    """The offset a DeleteRecords may not pass, what it is, and a note on why that one. The
    cluster's high watermark counts only from the cluster the log dirs belong to (``live.identity``),
    which is also the one the DeleteRecords is then sent to."""
    if ctx.cluster is not None:
        from tiering_core.live.identity import foreign_cluster

        foreign = foreign_cluster(ctx.config, ctx.cluster)
        if foreign is not None:
            raise DeleteRecordsRefusedError(f"{view.tip.topic_partition}: {foreign}; nothing applied")
        live = ctx.cluster.partition(view.log.topic_partition).for_directory(view.tip.topic_id)
        if live.offsets is None:
            raise DeleteRecordsRefusedError(live.problem or f"{view.tip.topic_partition}: no offsets from the cluster")
        return live.offsets.high_watermark, "the cluster's high watermark", ""
    if view.high_watermark is not None:
        return view.high_watermark, "the high watermark", ""
    log.warning("%s: high watermark unknown (%s); bounding by the log end offset", view.tip, view.offsets_error)
    return view.log_end_offset, "the log end offset", f" (the high watermark is unknown: {view.offsets_error})"


def check_delete_records(ctx: TieringContext, tp: TopicPartition, before_offset: int) -> DeleteRecordsResult:
    """The request checked, nothing changed: DeleteRecordsRefusedError says why it is refused."""
    if before_offset < 0:
        raise DeleteRecordsRefusedError(f"{tp}: the DeleteRecords offset must be >= 0, got {before_offset}")
    store = ctx.metadata
    try:
        partition_log = ctx.partition_log(tp)
    except TieringError as exc:  # this broker holds no such partition: no retry finds it
        raise DeleteRecordsRefusedError(f"{exc}; nothing applied") from exc
    view = tier_view(ctx, partition_log)
    record = store.get_partition(view.tip)
    if record is None:
        raise DeleteRecordsRefusedError(
            f"{tp}: nothing tiered (topic id {view.tip.topic_id} is unknown to the metadata store); "
            "a DeleteRecords is applied only to a tiered partition"
        )
    removed = removed_reason(record)
    if removed is not None:
        raise DeleteRecordsRefusedError(
            f"{tp}: topic id {view.tip.topic_id} is {removed} in the remote tier; nothing applied"
        )
    high_watermark, bound, note = _bound(ctx, view)
    if before_offset > high_watermark:
        raise DeleteRecordsRefusedError(
            f"{tp}: offset {before_offset} is beyond {bound} {high_watermark}{note} (DeleteRecords cannot pass it)"
        )
    applied = max(before_offset, view.delete_records_offset or 0)
    return DeleteRecordsResult(
        topic=tp.topic,
        partition=tp.partition,
        topic_id=view.tip.topic_id,
        before_offset=before_offset,
        high_watermark=high_watermark,
        bound=bound,
        dry_run=True,
        log_start_offset=global_log_start(view.remote_log_start_offset, applied),
    )


def apply_delete_records(
    ctx: TieringContext,
    tp: TopicPartition,
    before_offset: int,
    *,
    dry_run: bool = False,
    run_id: str | None = None,
    attempt: TaskAttempt | None = None,
) -> DeleteRecordsResult:
    """Apply a DeleteRecords to ``before_offset`` (module docstring); ``dry_run`` checks it only.

    ``attempt`` names a scheduled task's try (a retry takes over its killed previous try's lease).
    Raises DeleteRecordsRefusedError for a request refused before anything was applied,
    LeaseHeldError while another run holds the partition, ClusterUnreachableError when the cluster
    does not answer (nothing recorded: run it again).
    """
    result = check_delete_records(ctx, tp, before_offset)
    if dry_run:
        return result
    result.dry_run = False
    store = ctx.metadata
    tip = TopicIdPartition(result.topic_id, tp)
    run = run_id or uuid.uuid4().hex
    ctx.storage.require_writable()
    try:
        with held_partition(store, tip, holder=f"delete-records:{run}", run_id=run, attempt=attempt) as held:
            if ctx.cluster is not None:
                try:
                    result.cluster_log_start_offset = ctx.cluster.delete_records(tp, before_offset)
                except ClusterUnreachableError:
                    raise
                except TieringError as exc:
                    raise DeleteRecordsRefusedError(f"{exc}; nothing applied") from exc
                result.sent_to_cluster = True
                log.info("%s: the cluster's log start offset is now %d", tp, result.cluster_log_start_offset)
            try:
                applied = store.record_delete_records(tip, before_offset, held.require())
            except TieringError as exc:
                if not result.sent_to_cluster:
                    raise
                raise TieringError(
                    f"{tp}: the cluster applied the DeleteRecords to {before_offset} but recording it for the "
                    f"remote tier failed ({exc}); run it again"
                ) from exc
            # Even when it changed nothing (applied before): a manual request, and running it again
            # is how an operator would mend a state object a failed write left behind.
            publish_partition_state(store, ctx.storage, tip)
    except LeaseHeldError as exc:
        raise LeaseHeldError(f"{tp}: another run holds the partition ({exc}); nothing applied, run it again") from exc
    result.log_start_offset = global_log_start(store.get_remote_log_start_offset(tip), applied)
    log.info("%s: log start offset %s; retention deletes the remote segments below it", tp, result.log_start_offset)
    return result
