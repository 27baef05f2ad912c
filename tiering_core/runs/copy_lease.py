"""A partition taken for a copy run: its directory checked against the cluster, its lease held,
what killed runs left cleaned up and the remote log start repaired, then the run's one plan read
under the lease.

Apart from ``copy.py`` because this is the run's start alone, done once before any segment;
``CopyRun.begin`` takes what it returns and drives the segments from there.
"""

from __future__ import annotations

import logging
from contextlib import ExitStack
from typing import TYPE_CHECKING

from tiering_core.engine.lease import HeldPartition, held_partition
from tiering_core.engine.segment_ops import recover_failed_copies
from tiering_core.errors import TieringError
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.errors import LeaseHeldError
from tiering_core.runs.copy_plan import CopyPlan, plan_under_lease
from tiering_core.runs.segment_copy import repair_remote_log_start
from tiering_core.tier.view import tier_view

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.kafka.partition_log import PartitionLog
    from tiering_core.metadata.store import TaskAttempt

log = logging.getLogger(__name__)


def begin_copy_run(
    ctx: TieringContext,
    before: CopyPlan,
    run_id: str,
    hold: ExitStack,
    attempt: TaskAttempt | None = None,
    broker_id: int | None = None,
    now_ms: int | None = None,
) -> tuple[HeldPartition, CopyPlan, int] | None:
    """Hold the partition (until ``hold`` closes; ``attempt``: see ``held_partition``), recovery
    and remote-log-start bookkeeping, then the run's plan from a view read under the lease
    (``plan_under_lease``, its delayed upload judged at ``now_ms``); also how many failed copies
    were cleaned up.

    Returns None when another run holds the partition's lease.
    """
    store, tp = ctx.metadata, before.topic_partition
    partition_log = ctx.partition_log(tp)
    refuse_stale_directory(ctx, partition_log)
    tip = TopicIdPartition(partition_log.topic_id, tp)
    ctx.storage.require_writable()
    store.register_partition(tip)
    try:
        held = hold.enter_context(held_partition(store, tip, holder=f"copy:{run_id}", run_id=run_id, attempt=attempt))
    except LeaseHeldError as exc:
        log.info("%s: another run holds the partition (%s); nothing to do", tp, exc)
        return None
    cleaned = recover_failed_copies(store, ctx.storage, tip, held.lease)
    repair_remote_log_start(store, ctx.storage, tip, held.lease)
    plan = plan_under_lease(ctx, before, tier_view(ctx, partition_log), broker_id=broker_id, now_ms=now_ms)
    return held, plan, cleaned


def refuse_stale_directory(ctx: TieringContext, partition_log: PartitionLog) -> None:
    """With the cluster as a source: a directory whose topic id the cluster does not have (a stale
    incarnation of a recreated topic) or a partition it does not know is never copied from."""
    live = ctx.live_partition(partition_log)
    if live is not None:
        live = live.for_directory(partition_log.topic_id)
        if live.offsets is None:
            raise TieringError(live.problem or f"{partition_log.topic_partition}: no offsets from the cluster")
