"""What a copy run does, decided once: the planning half of ``runs.copy``.

A partition is skipped when Kafka would not tier it (an internal topic, ``remote.storage.enable``
false, ``remote.log.copy.disable`` true), when its log is behind the recorded lineage or the
cluster's offsets are unusable, when the broker has not checkpointed its high watermark yet (a new
partition's first seconds: a later run copies it), or, on one broker of a cluster, when another broker holds the
best fresh replica (``tier.replica``). Otherwise the plan lists the closed segments whose next
base offset is at or below the LSO that the delayed upload lets go now (``TierView.upload_eligibility``:
``remote.copy.lag.ms``/``remote.copy.lag.bytes``; ``delay`` says why the rest wait), and the
tiering gap no fresh replica still holds. Planning
writes nothing but, with a broker id, what that broker saw of each partition (``tier.observation``).

One ``CopyPlan`` holds all of it (the tier view it was read from, the skip reason, the replica
choice, the gap, the candidates), so nothing downstream asks again. Read-only plans
(``plan_copies``, ``plan_copy``: the sensor, the hook, the dry run: ``dry_run_copy``) come from one view each; a
scheduled run's sensor hands its plans on (their order and eligibility), so no later task reads
the views again before a lane holds a partition. A run that writes plans in two steps around the
partition's lease, because only a view read under the lease may decide what to upload (another
run may have copied in between): ``plan_before_lease`` decides from the config alone whether to
take the lease at all (the topic is tiered), and ``plan_under_lease`` makes the run's one plan
from the view read once the lease is held: on one broker of a cluster, this broker's observation
of it recorded first and the replica choice made from it. At the end the run reads no view
again: ``view_after_copies`` is the lease-held view with what the run's own commits changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tiering_core.config import not_tiered_reason
from tiering_core.engine.allocation import fewer_collections
from tiering_core.events import EventSink
from tiering_core.events.copy import CopyDelayed, CopyNotPlanned, CopySkipped, DryRunPlanned, WouldCopy
from tiering_core.kafka.topic import TopicPartition
from tiering_core.runs.copy_report import CopyResult
from tiering_core.tier.observation import Observed, record_views
from tiering_core.tier.offsets import global_log_start
from tiering_core.tier.replica import ReplicaChoice, choose_replica, in_cluster, tiering_gap_on
from tiering_core.tier.view import highest_copied_offset, tier_views

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.metadata.store import RemoteLogMetadataStore
    from tiering_core.tier.offsets import OffsetRange
    from tiering_core.tier.view import CopyCandidate, CopyDelay, TierView


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
    """What a copy of one partition does now (module docstring).

    ``view`` is None when the partition was skipped before its directory was read (Kafka would not
    tier the topic). ``replica`` is the choice among a cluster's replicas (None on a single broker).
    ``delay``: why closed segments below the LSO wait (KIP-1241); None when none does.
    """

    topic_partition: TopicPartition
    view: TierView | None = None
    skipped_reason: str | None = None
    replica: ReplicaChoice | None = None
    gap: OffsetRange | None = None
    candidates: tuple[CopyCandidate, ...] = ()
    delay: CopyDelay | None = None

    @property
    def highest_copied_offset(self) -> int:
        return -1 if self.view is None else self.view.highest_copied_offset

    @property
    def last_stable_offset(self) -> int | None:
        return None if self.view is None else self.view.last_stable_offset

    @property
    def planned(self) -> tuple[PlannedSegment, ...]:
        return tuple(PlannedSegment(c.base_offset, c.end_offset, c.segment.size_bytes) for c in self.candidates)

    @property
    def eligible(self) -> bool:
        return bool(self.candidates) and self.skipped_reason is None


def skip_reason(ctx: TieringContext, tp: TopicPartition) -> str | None:
    """Why Kafka would not tier this topic at all (None: it would), the cluster's topic configs
    included (``config.not_tiered_reason``)."""
    return not_tiered_reason(tp.topic, ctx.topic_config(tp.topic))


def plan_copy(
    ctx: TieringContext, tp: TopicPartition, *, broker_id: int | None = None, now_ms: int | None = None
) -> CopyPlan:
    """The read-only plan of one partition (the dry run): a topic Kafka would not tier is skipped
    before its directory is read; otherwise as ``plan_copies``."""
    reason = skip_reason(ctx, tp)
    if reason is not None:
        return CopyPlan(tp, skipped_reason=reason)
    return _plans(ctx, [tp], [None], broker_id, now_ms)[0]


def plan_copies(
    ctx: TieringContext, tps: Sequence[TopicPartition], *, broker_id: int | None = None, now_ms: int | None = None
) -> list[CopyPlan]:
    """The read-only plans of many partitions, their observations recorded in one transaction
    (every partition's, a topic Kafka would not tier included). On one broker of a cluster, a
    partition whose best fresh replica is another broker's is skipped (``tier.replica``), and a
    gap another replica still holds is none. ``now_ms``: the clock the delayed upload is judged
    by (None: now)."""
    return _plans(ctx, tps, [skip_reason(ctx, tp) for tp in tps], broker_id, now_ms)


def _plans(
    ctx: TieringContext,
    tps: Sequence[TopicPartition],
    not_tiered: Sequence[str | None],
    broker_id: int | None,
    now_ms: int | None,
) -> list[CopyPlan]:
    plans: list[CopyPlan] = []
    with fewer_collections():  # every view is kept: thousands of partitions' objects survive
        views = _observed_views(ctx, tps, broker_id)
        for tp, view, reason in zip(tps, views, not_tiered, strict=True):
            skipped = reason or view.behind_lineage or view.live_problem or view.offsets_pending
            replica = replica_choice(ctx, view, broker_id) if skipped is None else None
            eligible = view.upload_eligibility(ctx.topic_config(tp.topic), now_ms)
            plans.append(
                CopyPlan(
                    topic_partition=tp,
                    view=view,
                    skipped_reason=skipped or (replica.skipped_reason if replica is not None else None),
                    replica=replica,
                    gap=tiering_gap_on(ctx.config, ctx.metadata, view, broker_id),
                    candidates=eligible.candidates,
                    delay=eligible.delay,
                )
            )
    return plans


def _observed_views(ctx: TieringContext, tps: Sequence[TopicPartition], broker_id: int | None) -> list[TierView]:
    """Each partition's view, what this broker saw of them recorded in one transaction."""
    views = tier_views(ctx, [ctx.partition_log(tp) for tp in tps])
    observed: list[Observed] = [(view, ctx.topic_config(view.tip.topic), None) for view in views]
    record_views(ctx.metadata, broker_id, observed, brokers=ctx.config.broker_ids)
    return views


def plan_before_lease(ctx: TieringContext, tp: TopicPartition) -> CopyPlan:
    """Whether a run takes the partition's lease at all: not when Kafka would not tier the topic
    (the config alone, nothing read). Everything else, the replica choice on one broker of a
    cluster included, is planned from the view read under the lease (``plan_under_lease``)."""
    return CopyPlan(tp, skipped_reason=skip_reason(ctx, tp))


def plan_under_lease(
    ctx: TieringContext, before: CopyPlan, view: TierView, *, broker_id: int | None = None, now_ms: int | None = None
) -> CopyPlan:
    """A run's one plan, from ``view`` read while it holds the partition's lease: on one broker of a
    cluster, whether this broker's replica is the one to copy (its observation of ``view`` recorded
    first, so it is among the fresh ones; ``replica.skipped_reason`` says why not); what it uploads
    (nothing when the broker's log is behind the recorded lineage: then it is skipped; what the
    delayed upload holds back waits, ``delay`` saying why) and the gap it records."""
    tp = before.topic_partition
    topic = ctx.topic_config(tp.topic)
    replica = None
    if broker_id is not None and in_cluster(ctx.config):
        record_views(ctx.metadata, broker_id, [(view, topic, None)], brokers=ctx.config.broker_ids)
        replica = replica_choice(ctx, view, broker_id)
    eligible = view.upload_eligibility(topic, now_ms)
    return CopyPlan(
        topic_partition=tp,
        view=view,
        skipped_reason=(replica.skipped_reason if replica is not None else None)
        or view.behind_lineage
        or view.offsets_pending,
        replica=replica,
        gap=tiering_gap_on(ctx.config, ctx.metadata, view, broker_id),
        candidates=eligible.candidates,
        delay=eligible.delay,
    )


def view_after_copies(store: RemoteLogMetadataStore, view: TierView) -> TierView:
    """``view`` (read under the lease) as the run's own commits left it: the highest copied offset
    and the remote log start, which only the lease holder moves, read again from the store; the
    broker's side stays as read, its later segments being the next run's (no view is read again)."""
    remote_start = store.get_remote_log_start_offset(view.tip)
    global_start = global_log_start(remote_start, view.delete_records_offset)
    lineage = view.full_lineage.truncate_from_start(global_start) if global_start is not None else view.full_lineage
    copied = highest_copied_offset(store, view.tip, view.full_lineage, view.log_end_offset)
    return replace(
        view,
        remote_log_start_offset=remote_start,
        global_log_start_offset=global_start,
        lineage=lineage,
        highest_copied_offset=copied,
    )


def replica_choice(ctx: TieringContext, view: TierView, broker_id: int | None) -> ReplicaChoice | None:
    """Which broker's replica copies the partition (``tier.replica``; this broker's own observation
    recorded before); None on a single broker, where there is no choice to make."""
    if broker_id is None or not in_cluster(ctx.config):
        return None
    copied, deleted = view.highest_copied_offset, view.global_log_start_offset
    resume = max(copied + 1, deleted or 0) if copied >= 0 else None
    return choose_replica(ctx.metadata, view.tip, broker_id, ctx.config.observation_staleness_ms, resume=resume)


def dry_run_copy(
    ctx: TieringContext, tp: TopicPartition, events: EventSink, broker_id: int | None, now_ms: int | None
) -> CopyResult:
    """``--dry-run``: the read-only plan (``plan_copy``) told as events and a result; no lease is
    taken and nothing is written but what planning records."""
    result = CopyResult(topic=tp.topic, partition=tp.partition, dry_run=True)
    plan = plan_copy(ctx, tp, broker_id=broker_id, now_ms=now_ms)
    result.skipped_reason = plan.skipped_reason
    result.highest_copied_offset = plan.highest_copied_offset
    result.last_stable_offset = plan.last_stable_offset
    if plan.skipped_reason is not None:  # nothing planned
        if plan.view is None:  # Kafka would not tier the topic: its directory was not read
            events(CopySkipped(tp, plan.skipped_reason))
        else:  # not this broker's to copy
            events(CopyNotPlanned(tp, plan.skipped_reason))
        return result
    result.planned = [c.to_dict() for c in plan.planned]
    result.gaps = [plan.gap.as_list()] if plan.gap else []
    for c in plan.planned:
        events(WouldCopy(tp, c.base_offset, c.end_offset, c.size_bytes))
    if plan.delay is not None:
        result.copy_delay = plan.delay.to_dict()
        events(CopyDelayed(tp, **plan.delay.to_dict()))
    events(DryRunPlanned(tp, len(plan.planned)))
    return result
