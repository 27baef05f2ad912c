"""Lanes: a scheduled run's partitions of one broker in a bounded number of tasks.

Kafka's RLM runs one task per partition on a small thread pool; a scheduler maps one task per
lane instead, so a run's task count stays at the bound (``lane_bound``) whatever the partition
count. Where the partitions fit the bound a lane is one partition; beyond it each lane gets a
balanced, deterministic share, dealt out in order of urgency so that every lane starts with the
partitions closest to losing data: the copy sensor's plans give that order (``planned_order``, no
view read again), else the views read now (``by_urgency``). A copy lane runs its share through the one
multi-partition copy driver (``runs.copy_many.copy_partitions``), begun lazily most urgent first
on ``copy.concurrency`` threads; a retention lane runs ``run_retention`` per partition. Both stop
starting work at their deadline and report the rest deferred to the next run
(docs/architecture.md, "Lanes").
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tiering_core.engine.executor import InProcessExecutor
from tiering_core.errors import TieringError
from tiering_core.events import EventSink, discard
from tiering_core.events.retention import PartitionRetentionOutcome
from tiering_core.kafka.topic import TopicPartition
from tiering_core.runs.copy_many import copy_partitions
from tiering_core.runs.copy_plan import CopyPlan
from tiering_core.runs.copy_report import ParallelCopyReport, partition_outcome
from tiering_core.runs.retention import RetentionResult, run_retention
from tiering_core.tier.observation import headroom_seconds
from tiering_core.tier.view import tier_view

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.metadata.store import TaskAttempt
    from tiering_core.tier.view import TierView


@dataclass(frozen=True)
class Lane:
    """One task's share of a run: its partitions, most urgent first, and its label in the grid
    (``<topic>-<partition>`` for a lane of one partition, as a task per partition is labelled)."""

    index: int
    partitions: tuple[TopicPartition, ...]

    @property
    def label(self) -> str:
        if len(self.partitions) == 1:
            return str(self.partitions[0])
        return f"lane-{self.index} ({len(self.partitions)} partitions)"

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, the listing task's XCom: the operator's arguments, fixed for every retry."""
        return {"lane": self.label, "partitions": partition_runs(self.partitions)}


def lane_partitions(raw: Sequence[Any]) -> list[TopicPartition]:
    """Partitions as ``partition_runs`` gives them (``[topic, [partition, ...]]``: a lane's, the
    sensor's plan) or as earlier versions did (``[topic, partition]`` pairs), in their order;
    ValueError naming the entry that is neither."""
    partitions = []
    for entry in raw:
        if not isinstance(entry, (list, tuple)) or len(entry) != 2 or not isinstance(entry[0], str):
            raise ValueError(
                f"partitions: expected [topic, partition] pairs or [topic, [partition, ...]] runs, got {entry!r}"
            )
        topic, numbers = entry
        for number in numbers if isinstance(numbers, (list, tuple)) else (numbers,):
            try:
                partitions.append(TopicPartition(topic, int(number)))
            except (TypeError, ValueError):
                raise ValueError(f"partitions: {number!r} of {entry!r} is not a partition number") from None
    return partitions


def partition_runs(partitions: Sequence[TopicPartition]) -> list[list[Any]]:
    """Partitions in their order as ``[topic, [partition, ...]]`` runs of one topic each: a plan of
    thousands handed on through XCom as a few strings and lists of numbers (Airflow walks every
    element of a value it stores, and a pair per partition costs a second per 4,000 there)."""
    runs: list[list[Any]] = []
    for tp in partitions:
        if runs and runs[-1][0] == tp.topic:
            runs[-1][1].append(tp.partition)
        else:
            runs.append([tp.topic, [tp.partition]])
    return runs


def lane_bound(lanes: int, max_map_length: int) -> int:
    """How many tasks a run of one broker maps: ``copy.lanes``, never more than the scheduler's
    ``[core] max_map_length`` (a longer list fails the listing task)."""
    return max(1, min(lanes, max_map_length))


def split_into_lanes(partitions: Sequence[TopicPartition], bound: int) -> list[Lane]:
    """One lane per partition where they fit ``bound``; beyond it ``bound`` lanes, dealt out
    round robin from ``partitions`` (most urgent first), so each lane's share differs by at most
    one and starts with the most urgent ones. Deterministic for the same input."""
    if bound < 1:
        raise ValueError(f"a run needs at least one lane, not {bound}")
    if len(partitions) <= bound:
        return [Lane(i, (tp,)) for i, tp in enumerate(partitions)]
    return [Lane(i, tuple(partitions[i::bound])) for i in range(bound)]


@dataclass(frozen=True)
class Urgency:
    """How soon a partition's untiered data is at risk, for ordering (``by_urgency``): at risk by
    the local-retention check first, then the least headroom, then the most copy lag bytes."""

    topic_partition: TopicPartition
    at_risk: bool
    headroom_seconds: float | None
    copy_lag_bytes: int

    @property
    def key(self) -> tuple[bool, float, int, str, int]:
        headroom = math.inf if self.headroom_seconds is None else self.headroom_seconds
        tp = self.topic_partition
        return (not self.at_risk, headroom, -self.copy_lag_bytes, tp.topic, tp.partition)


def urgency_of(ctx: TieringContext, view: TierView) -> Urgency:
    """A partition's urgency from its tier view's local-retention risk and copy lag (the figures
    ``status`` and the gauges report)."""
    tp = view.tip.topic_partition
    risk = view.local_retention_risk(ctx.topic_config(tp.topic))
    return Urgency(tp, risk.at_risk, headroom_seconds(risk), risk.uncopied_bytes)


def urgency(ctx: TieringContext, tp: TopicPartition) -> Urgency | None:
    """The partition's urgency from its tier view, read now; None when it cannot be read (the copy
    reports why)."""
    try:
        return urgency_of(ctx, tier_view(ctx, ctx.partition_log(tp)))
    except (TieringError, OSError):
        return None


def planned_order(ctx: TieringContext, plans: Sequence[CopyPlan]) -> list[TopicPartition]:
    """A scheduled run's partitions from its sensor's plans, read nothing again: those with a
    segment to copy now or a tiering gap to record, most urgent first (``Urgency.key``); the
    others are left out (nothing to do, not this broker's replica, or waiting for their delayed
    upload). The lanes' view under each lease still decides what is copied."""
    urgencies = [
        urgency_of(ctx, plan.view)
        for plan in plans
        if plan.view is not None and (plan.eligible or (plan.gap is not None and plan.skipped_reason is None))
    ]
    return [u.topic_partition for u in sorted(urgencies, key=lambda u: u.key)]


def by_urgency(ctx: TieringContext, partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
    """``partitions`` most urgent first (``Urgency.key``); those whose view cannot be read last,
    in their given order. Read-only."""
    known: list[Urgency] = []
    unknown: list[TopicPartition] = []
    for tp in partitions:
        found = urgency(ctx, tp)
        if found is None:
            unknown.append(tp)
        else:
            known.append(found)
    return [u.topic_partition for u in sorted(known, key=lambda u: u.key)] + unknown


@dataclass(frozen=True)
class LaneRun:
    """What a lane of either kind runs under: its run's id, its time budget from when it starts,
    the task's attempt (a retry takes over its killed try's leases), the broker observing, where
    each partition's outcome goes, and the clock that keeps the budget."""

    run_id: str
    budget_seconds: float
    attempt: TaskAttempt | None = None
    broker_id: int | None = None
    events: EventSink = discard
    clock: Callable[[], float] = time.monotonic

    def deadline(self) -> float:
        """The budget from now: nothing starts after it."""
        return self.clock() + self.budget_seconds


def copy_lane(
    ctx: TieringContext, partitions: Sequence[TopicPartition], run: LaneRun, *, report: ParallelCopyReport | None = None
) -> ParallelCopyReport:
    """Copy a lane's partitions in the given order on ``copy.concurrency`` threads, each begun
    only as the one before has nothing left to hand out; no segment or partition starts after
    ``run.budget_seconds``. One ``PartitionCopyOutcome`` per partition to ``run.events``, as it ends
    (``report``: the report filled as partitions end, whose ``announce`` hears them instead)."""
    executor = InProcessExecutor(ctx.storage, threads=ctx.config.copy.concurrency)
    return copy_partitions(
        ctx,
        partitions,
        executor,
        run_id=run.run_id,
        events=run.events,
        attempt=run.attempt,
        broker_id=run.broker_id,
        lazily=True,
        deadline=run.deadline(),
        clock=run.clock,
        tell_outcomes=True,
        report=report,
    )


@dataclass
class RetentionLaneReport:
    """A retention lane's results, one per partition, and why a partition failed, by label."""

    results: list[RetentionResult]
    failures: dict[str, str]

    def outcome(self, result: RetentionResult) -> PartitionRetentionOutcome:
        tp = TopicPartition(result.topic, result.partition)
        failed = ("failed", self.failures[str(tp)]) if str(tp) in self.failures else None
        outcome, detail = partition_outcome(result, failed, "deleted", "does it")
        return PartitionRetentionOutcome(tp, outcome, result.segments_deleted, result.bytes_deleted, detail)


def retention_lane(ctx: TieringContext, partitions: Sequence[TopicPartition], run: LaneRun) -> RetentionLaneReport:
    """``run_retention`` for each of a lane's partitions in turn, a failure stopping only its
    partition; none starts after ``run.budget_seconds``. One ``PartitionRetentionOutcome`` each."""
    deadline = run.deadline()
    report = RetentionLaneReport([], {})
    for tp in partitions:
        if run.clock() >= deadline:
            result = RetentionResult(topic=tp.topic, partition=tp.partition, deferred=True)
        else:
            try:
                result = run_retention(ctx, tp, run_id=run.run_id, attempt=run.attempt, broker_id=run.broker_id)
            except (TieringError, OSError) as exc:
                result = RetentionResult(topic=tp.topic, partition=tp.partition)
                report.failures[str(tp)] = str(exc) if str(exc).startswith(f"{tp}:") else f"{tp}: {exc}"
        report.results.append(result)
        run.events(report.outcome(result))
    return report
