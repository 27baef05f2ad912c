"""A copy run's plan, decided once: a topic Kafka would not tier skipped before its directory is
read, a partition whose high watermark is not checkpointed yet skipped after; otherwise the closed
segments below the LSO, as the dry run tells them without writing a segment; the plan under the
lease the same as the read-only one; the lease-held view after a run's commits as a fresh read."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.engine_support import TieringEnv, tip_of, write_segments
from tiering_core.events import RunEvent
from tiering_core.events.copy import CopySkipped, DryRunPlanned, WouldCopy
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.topic import TopicPartition
from tiering_core.runs.copy import run_copy
from tiering_core.runs.copy_plan import (
    CopyPlan,
    PlannedSegment,
    dry_run_copy,
    plan_before_lease,
    plan_copies,
    plan_copy,
    plan_under_lease,
    view_after_copies,
)
from tiering_core.tier.view import tier_view


def closed_and_active(env: TieringEnv, topic: str = "orders") -> tuple[PartitionWriter, list[tuple[int, int, int]]]:
    """Three closed segments of five records and four records in the active one, the high
    watermark at the end; each closed segment's (base, end, ``.log`` size)."""
    w = env.writer(topic)
    bases = write_segments(w, 3)
    w.append_records(4)
    w.set_high_watermark()
    closed = [(b, b + 4, (w.path / f"{b:020d}.log").stat().st_size) for b in bases]
    return w, closed


def without_view(plan: CopyPlan) -> CopyPlan:
    """The plan but the view it was read from (two reads are two views)."""
    return replace(plan, view=None)


def test_a_planned_segment_tells_its_offsets_and_size() -> None:
    assert PlannedSegment(10, 19, 300).to_dict() == {"base_offset": 10, "end_offset": 19, "size_bytes": 300}


def test_a_plan_without_a_view_has_copied_nothing_and_is_not_eligible() -> None:
    plan = CopyPlan(TopicPartition("orders", 0), skipped_reason="remote.storage.enable is false")
    assert (plan.highest_copied_offset, plan.last_stable_offset, plan.planned, plan.eligible) == (-1, None, (), False)


@pytest.mark.parametrize(
    ("topic", "config", "reason"),
    [
        ("orders", {"remote.storage.enable": False}, "remote.storage.enable is false"),
        ("orders", {"remote.log.copy.disable": True}, "remote.log.copy.disable is true"),
        ("__consumer_offsets", {}, "internal topic"),
    ],
)
def test_a_topic_kafka_would_not_tier_is_skipped_before_its_directory_is_read(
    fs_env: TieringEnv, topic: str, config: dict[str, object], reason: str
) -> None:
    w, _ = closed_and_active(fs_env, topic)
    fs_env.write_config(**{topic: config})
    events: list[RunEvent] = []
    with fs_env.context() as ctx:
        for plan in (plan_copy(ctx, w.tp), plan_before_lease(ctx, w.tp)):
            assert plan.view is None and plan.skipped_reason is not None and reason in plan.skipped_reason
        result = dry_run_copy(ctx, w.tp, events.append, None, None)
        assert ctx.metadata.get_partition(tip_of(w)) is None  # nothing registered
    assert result.skipped_reason is not None and reason in result.skipped_reason
    assert events == [CopySkipped(w.tp, result.skipped_reason)]


def test_a_high_watermark_not_checkpointed_yet_skips_the_partition(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 2)  # closed segments, but the broker has not checkpointed a high watermark
    with fs_env.context() as ctx:
        [plan] = plan_copies(ctx, [w.tp])
    assert plan.view is not None and plan.skipped_reason == plan.view.offsets_pending
    assert plan.skipped_reason is not None and "high watermark" in plan.skipped_reason
    assert not plan.eligible


def test_the_plan_lists_the_closed_segments_below_the_lso_and_the_dry_run_tells_them(fs_env: TieringEnv) -> None:
    w, closed = closed_and_active(fs_env)
    events: list[RunEvent] = []
    with fs_env.context() as ctx:
        [plan] = plan_copies(ctx, [w.tp])
        assert without_view(plan) == without_view(plan_copy(ctx, w.tp))  # one view each, planned alike
        result = dry_run_copy(ctx, w.tp, events.append, None, None)
        assert ctx.metadata.list_segments(tip_of(w)) == []  # a dry run copies nothing
    assert [(s.base_offset, s.end_offset, s.size_bytes) for s in plan.planned] == closed
    assert plan.eligible and plan.skipped_reason is None and plan.replica is None and plan.delay is None
    assert (plan.highest_copied_offset, plan.last_stable_offset) == (-1, w.next_offset)
    assert result.planned == [s.to_dict() for s in plan.planned] and result.dry_run
    assert events == [*(WouldCopy(w.tp, *c) for c in closed), DryRunPlanned(w.tp, len(closed))]


def test_the_plan_under_the_lease_is_the_read_only_one_on_a_single_broker(fs_env: TieringEnv) -> None:
    w, _ = closed_and_active(fs_env)
    with fs_env.context() as ctx:
        before = plan_before_lease(ctx, w.tp)
        assert before.skipped_reason is None and before.view is None
        view = tier_view(ctx, ctx.partition_log(w.tp))
        under = plan_under_lease(ctx, before, view)
        assert without_view(under) == without_view(plan_copy(ctx, w.tp))
        assert under.view is view


def test_the_view_after_a_runs_copies_is_what_a_fresh_read_sees(fs_env: TieringEnv) -> None:
    w, closed = closed_and_active(fs_env)
    with fs_env.context() as ctx:
        read_before = tier_view(ctx, ctx.partition_log(w.tp))
        assert run_copy(ctx, w.tp).segments_copied == len(closed)
        after = view_after_copies(ctx.metadata, read_before)
        fresh = tier_view(ctx, ctx.partition_log(w.tp))
    assert read_before.highest_copied_offset == -1
    assert after.highest_copied_offset == fresh.highest_copied_offset == closed[-1][1]
    assert after.remote_log_start_offset == fresh.remote_log_start_offset == 0
    assert (after.global_log_start_offset, after.lineage) == (fresh.global_log_start_offset, fresh.lineage)
    assert after.log_end_offset == read_before.log_end_offset  # the broker's side as read
