"""What a copy run would do now, read-only: the planning half of ``runs.copy``.

A partition is skipped when Kafka would not tier it (an internal topic, ``remote.storage.enable``
false, ``remote.log.copy.disable`` true), when its log is behind the recorded lineage or the
cluster's offsets are unusable, or, on one broker of a cluster, when another broker holds the
best fresh replica (``tier.replica``). Otherwise the plan lists the closed segments whose next
base offset is at or below the LSO, and the tiering gap no fresh replica still holds. Planning
writes nothing but, with a broker id, what that broker saw of each partition (``tier.observation``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tiering_core.config import not_tiered_reason
from tiering_core.kafka.topic import TopicPartition
from tiering_core.tier.observation import Observed, record_views
from tiering_core.tier.replica import choose_replica, in_cluster, tiering_gap_on
from tiering_core.tier.view import tier_view

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.tier.view import TierView


@dataclass(frozen=True)
class PlannedSegment:
    """A closed segment a copy run would upload, as ``--dry-run`` and the sensor report it."""

    base_offset: int
    end_offset: int
    size_bytes: int

    def to_dict(self) -> dict[str, int]:
        return {"base_offset": self.base_offset, "end_offset": self.end_offset, "size_bytes": self.size_bytes}


@dataclass(frozen=True)
class CopyPlan:
    """What a copy run would do now (read-only)."""

    topic_partition: TopicPartition
    highest_copied_offset: int
    last_stable_offset: int | None
    candidates: tuple[PlannedSegment, ...]
    gap: list[int] | None
    skipped_reason: str | None = None

    @property
    def eligible(self) -> bool:
        return bool(self.candidates) and self.skipped_reason is None


def skip_reason(ctx: TieringContext, tp: TopicPartition) -> str | None:
    """Why Kafka would not tier this topic at all (None: it would), the cluster's topic configs
    included (``config.not_tiered_reason``)."""
    return not_tiered_reason(tp.topic, ctx.topic_config(tp.topic))


def plan_copy(ctx: TieringContext, tp: TopicPartition, *, broker_id: int | None = None) -> CopyPlan:
    """The segments a copy run would upload now; writes nothing but, with ``broker_id``, what this
    broker saw of the partition (``tier.observation``)."""
    return plan_copies(ctx, [tp], broker_id=broker_id)[0]


def plan_copies(ctx: TieringContext, tps: Sequence[TopicPartition], *, broker_id: int | None = None) -> list[CopyPlan]:
    """``plan_copy`` of each partition, their observations recorded in one transaction. On one
    broker of a cluster, a partition whose best fresh replica is another broker's is skipped
    (``tier.replica``), and a gap another replica still holds is none."""
    views: list[TierView] = []
    observed: list[Observed] = []
    for tp in tps:
        view = tier_view(ctx, ctx.partition_log(tp))
        views.append(view)
        observed.append((view, ctx.topic_config(tp.topic), None))
    record_views(ctx.metadata, broker_id, observed, brokers=ctx.config.broker_ids)
    plans: list[CopyPlan] = []
    for tp, view in zip(tps, views, strict=True):
        gap = tiering_gap_on(ctx.config, ctx.metadata, view, broker_id)
        plans.append(
            CopyPlan(
                topic_partition=tp,
                highest_copied_offset=view.highest_copied_offset,
                last_stable_offset=view.last_stable_offset,
                candidates=tuple(
                    PlannedSegment(c.base_offset, c.end_offset, c.segment.size_bytes) for c in view.copy_candidates()
                ),
                gap=gap.as_list() if gap else None,
                skipped_reason=skip_reason(ctx, tp)
                or view.behind_lineage
                or view.live_problem
                or replica_not_chosen(ctx, view, broker_id),
            )
        )
    return plans


def replica_not_chosen(ctx: TieringContext, view: TierView, broker_id: int | None) -> str | None:
    """Why this broker does not copy the partition: another broker holds the best fresh replica
    (``tier.replica``; its own observation recorded before). None on a single broker."""
    if broker_id is None or not in_cluster(ctx.config):
        return None
    copied, deleted = view.highest_copied_offset, view.global_log_start_offset
    resume = max(copied + 1, deleted or 0) if copied >= 0 else None
    choice = choose_replica(ctx.metadata, view.tip, broker_id, ctx.config.observation_staleness_ms, resume=resume)
    return choice.skipped_reason
