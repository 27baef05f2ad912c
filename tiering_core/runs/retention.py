"""The expiration task: Kafka's remote retention as one batch run per partition.

docs/kafka-rules.md section 6 read with section 10. What is due is planned read-only
(``tier.retention_plan``); the run records the new remote log start offset **before** deleting
any object (and publishes the partition's state object, ``engine.partition_state``), then deletes
each segment as DELETE_SEGMENT_STARTED -> objects -> DELETE_SEGMENT_FINISHED.

A run holds the partition's lease, so a COPY_SEGMENT_STARTED segment it finds cannot be copied
right now: it is the leftover of a killed copy, cleaned up first (the copy engine's own
recovery) so that it never stops the walk. Read-only callers that cannot know (``delete_lag``
while a copy holds the lease) stop at it, as Kafka stops at a segment being copied.

Each segment deletion is a RemoteDeleteRequest (an error when it fails), counted on the run's
broker (``metrics.tally``); the run's observation of the partition is recorded when it ends,
with the delete lag it leaves.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tiering_core.config import TopicConfig, not_tiered_reason
from tiering_core.engine.lease import HeldPartition, held_partition
from tiering_core.engine.partition_state import publish_partition_state
from tiering_core.engine.segment_ops import delete_remote_segment, recover_failed_copies
from tiering_core.kafka.topic import TopicPartition
from tiering_core.metadata.errors import FencedError, LeaseHeldError
from tiering_core.metadata.observations import check_broker_id
from tiering_core.metrics import names
from tiering_core.metrics.tally import Tally, tallied
from tiering_core.tier.observation import Figures, record_views, reporting_gauges
from tiering_core.tier.retention_plan import (
    REASON_COPY_LEFTOVER,
    REASON_DANGLING,
    RetentionPlan,
    delete_lag,
    plan_retention,
    removed_reason,
)
from tiering_core.tier.view import TierView, tier_view

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.kafka.partition_log import PartitionLog
    from tiering_core.metadata.store import TaskAttempt

log = logging.getLogger(__name__)


@dataclass
class RetentionResult:
    """One partition's retention run; ``new_remote_log_start_offset`` is what the run recorded
    (a dry run: would record), None when it does not move."""

    topic: str
    partition: int
    dry_run: bool = False
    fenced: bool = False
    skipped_reason: str | None = None
    #: A retention lane's deadline passed before the partition's turn: the next run does it.
    deferred: bool = False
    segments_deleted: int = 0
    bytes_deleted: int = 0
    copies_cleaned: int = 0
    remote_log_start_offset: int | None = None
    new_remote_log_start_offset: int | None = None
    stopped_at: str | None = None
    planned: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, for ``--json`` and XCom."""
        return {**asdict(self), "seconds": round(self.seconds, 3)}


def _advanced(plan: RetentionPlan, current: int | None) -> int | None:
    """The remote log start offset the plan records, None when it would not move it."""
    new = plan.new_log_start_offset
    if new is None or (current is not None and new <= current):
        return None
    return new


def run_retention(
    ctx: TieringContext,
    tp: TopicPartition,
    *,
    dry_run: bool = False,
    run_id: str | None = None,
    now_ms: int | None = None,
    attempt: TaskAttempt | None = None,
    broker_id: int | None = None,
) -> RetentionResult:
    """Delete the remote segments of one partition that Kafka's retention rules expire.

    ``attempt`` names a scheduled task's try: a retry takes over its killed previous try's lease.
    ``broker_id``: the broker whose log dirs the run reads; what it saw of the partition is
    recorded when the run ends, with the delete lag it leaves (None: not recorded). Deletions are
    counted (``metrics.tally``) on that broker.
    """
    if broker_id is not None:
        check_broker_id(broker_id, ctx.config.broker_ids, tp)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    topic = ctx.topic_config(tp.topic)
    store = ctx.metadata
    partition_log = ctx.partition_log(tp)
    view = tier_view(ctx, partition_log)
    lag: tuple[int, int] | None = None
    try:
        result = _run_retention(ctx, tp, view, partition_log, topic, now, dry_run, run_id, attempt, broker_id)
        if (broker_id is not None or reporting_gauges()) and not result.fenced:
            lag = delete_lag(view, store, topic, now)
        return result
    finally:
        figures = {view.tip: Figures(delete_lag=lag)}
        record_views(store, broker_id, [(view, topic, None)], brokers=ctx.config.broker_ids, figures=figures)


def _run_retention(
    ctx: TieringContext,
    tp: TopicPartition,
    view: TierView,
    partition_log: PartitionLog,
    topic: TopicConfig,
    now: int,
    dry_run: bool,
    run_id: str | None,
    attempt: TaskAttempt | None,
    broker_id: int | None,
) -> RetentionResult:
    """``run_retention`` from the view it took."""
    started = time.monotonic()
    result = RetentionResult(topic=tp.topic, partition=tp.partition, dry_run=dry_run)
    store = ctx.metadata
    record = store.get_partition(view.tip)
    result.remote_log_start_offset = view.remote_log_start_offset
    if record is None:
        result.skipped_reason = not_tiered_reason(tp.topic, topic) or "nothing tiered yet"
        return result
    removed = removed_reason(record)
    if removed is not None:
        result.skipped_reason = removed
        log.info("%s: topic id %s is %s in the remote tier; retention does nothing", tp, view.tip.topic_id, removed)
        return result
    if view.live_problem is not None:  # the cluster's offsets and configs are another topic's
        result.skipped_reason = view.live_problem
        log.warning("%s: retention does nothing: %s", tp, view.live_problem)
        return result

    if dry_run:
        # As the run would see it: it holds the lease, so COPY_SEGMENT_STARTED is a leftover.
        plan = plan_retention(view, store, topic, now, copy_in_progress=False)
        _report_plan(result, plan, view.remote_log_start_offset)
        result.copies_cleaned = len(plan.copy_leftovers)
        for d in plan.deletions:
            log.info(
                "%s: would delete segment [%d..%d] (%s)", tp, d.segment.start_offset, d.segment.end_offset, d.reason
            )
        if plan.copy_leftovers:
            log.info(
                "%s: %d leftover(s) of killed copies would be cleaned up first; planned as if they were",
                tp,
                len(plan.copy_leftovers),
            )
        result.seconds = time.monotonic() - started
        return result

    run = run_id or uuid.uuid4().hex
    ctx.storage.require_writable()
    try:
        with (
            held_partition(store, view.tip, holder=f"retention:{run}", run_id=run, attempt=attempt) as held,
            tallied(store, view.tip, broker_id=broker_id, attempt=attempt) as tally,
        ):
            view = _apply_retention(ctx, held, view, partition_log, topic, now, result, tally)
    except LeaseHeldError as exc:
        log.info("%s: another run holds the partition (%s); retention skipped", tp, exc)
        result.fenced = True
        return result
    except FencedError:
        result.fenced = True
        log.warning("%s: fenced by a newer run; retention stopped", tp)
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


def _apply_retention(
    ctx: TieringContext,
    held: HeldPartition,
    view: TierView,
    partition_log: PartitionLog,
    topic: TopicConfig,
    now: int,
    result: RetentionResult,
    tally: Tally,
) -> TierView:
    """Plan and delete while holding the partition; the view the plan was made from."""
    store, storage, tp = ctx.metadata, ctx.storage, partition_log.topic_partition
    view = tier_view(ctx, partition_log)
    plan = plan_retention(view, store, topic, now, copy_in_progress=False)
    _report_plan(result, plan, view.remote_log_start_offset)
    if plan.new_log_start_offset is not None:
        stored = store.set_remote_log_start_offset(view.tip, plan.new_log_start_offset, held.require())
        log.info("%s: remote log start offset -> %d", tp, plan.new_log_start_offset)
        if stored != view.remote_log_start_offset:  # moved (and the gaps below it trimmed)
            publish_partition_state(store, storage, view.tip)
    done: set[uuid.UUID] = set()
    if plan.copy_leftovers:
        # Also finishes every dangling deletion: those are counted below as deleted.
        recover_failed_copies(store, storage, view.tip, held.require())
        result.copies_cleaned = len(plan.copy_leftovers)
        done = {d.segment.segment_id for d in plan.deletions if d.reason in (REASON_COPY_LEFTOVER, REASON_DANGLING)}
    for d in plan.retention_deletions:
        if d.segment.segment_id not in done:
            with tally.request(names.REMOTE_DELETE_REQUESTS, names.REMOTE_DELETE_ERRORS):
                delete_remote_segment(store, storage, d.segment, held.require())
        result.segments_deleted += 1
        result.bytes_deleted += d.segment.size_bytes
    if plan.stopped_at:
        log.info("%s: retention stopped: %s", tp, plan.stopped_at)
    return view


def _report_plan(result: RetentionResult, plan: RetentionPlan, current_log_start: int | None) -> None:
    result.planned = [d.to_dict() for d in plan.deletions]
    result.new_remote_log_start_offset = _advanced(plan, current_log_start)
    result.stopped_at = plan.stopped_at
