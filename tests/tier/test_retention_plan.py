"""Kafka's remote retention, planned read-only: time and size breaches walked in lineage order
with every deletion counting against the size excess, the walk stopped at the first segment
breaching nothing, a topic no longer tiered deleting all or nothing by its config, the local bytes
not yet copied, KIP-1257's percents, Kafka's cleanup limit, the delete lag of unknown and removed
partitions, and why a partition is left alone."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from tests.engine_support import TieringEnv, tip_of, write_segments
from tests.metadata.support import segment, tip
from tiering_core.config import TopicConfig
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState
from tiering_core.metadata.values import PartitionRecord
from tiering_core.runs.copy import run_copy
from tiering_core.tier.retention_plan import (
    REASON_COPY_LEFTOVER,
    REASON_DISABLED,
    REASON_SIZE,
    REASON_TIME,
    PlannedDeletion,
    RetentionPlan,
    delete_lag,
    local_bytes_not_copied,
    plan_retention,
    removed_reason,
    retention_size_in_percent,
    retention_size_total,
    size_in_percent,
    time_retention_limit,
)
from tiering_core.tier.view import load_tier_view

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
STAMPS = (1_000, 2_000, 3_000, 4_000)  # each segment's records' timestamp


def timed_segments(env: TieringEnv) -> PartitionWriter:
    """Four segments of five records, each stamped with its ``STAMPS``, copied; the active one empty."""
    w = env.writer()
    for stamp in STAMPS:
        w.append([(b"k", b"v" * 40)] * 5, timestamp=stamp)
        w.roll()
    w.set_high_watermark()
    with env.context() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == len(STAMPS)
    return w


def log_sizes(w: PartitionWriter) -> list[int]:
    """Each local segment's ``.log`` size, oldest first (the active one last)."""
    return [(w.path / f"{base:020d}.log").stat().st_size for base in w.segment_bases()]


def planned(env: TieringEnv, now_ms: int) -> RetentionPlan:
    with env.context() as ctx:
        view = load_tier_view(ctx.partitions("orders", 0)[0], ctx.metadata)
        return plan_retention(view, ctx.metadata, ctx.config.topic_config("orders"), now_ms)


def test_time_retention_deletes_the_breaching_segments_and_stops_at_the_first_within(fs_env: TieringEnv) -> None:
    """``retention.ms`` 1500 at 3600: Kafka's cleanup limit is 2100, so the segments stamped 1000
    and 2000 go and the one stamped 3000 (offsets 10..14) stops the walk."""
    timed_segments(fs_env)
    fs_env.write_config(orders={"retention.ms": 1_500})
    plan = planned(fs_env, now_ms=3_600)
    assert [(d.segment.start_offset, d.segment.end_offset, d.reason) for d in plan.deletions] == [
        (0, 4, REASON_TIME),
        (5, 9, REASON_TIME),
    ]
    assert plan.new_log_start_offset == 10
    assert plan.stopped_at == "segment [10..14] is within the lineage and breaches nothing"
    assert plan.bytes == sum(d.segment.size_bytes for d in plan.deletions)
    assert plan.retention_deletions == plan.deletions and plan.copy_leftovers == ()


def test_a_time_deletion_counts_against_the_size_excess(fs_env: TieringEnv) -> None:
    """Two segments over ``retention.bytes``: time deletes the first, so size deletes only the
    second; the third keeps the total at the limit and stops the walk."""
    w = timed_segments(fs_env)
    sizes = log_sizes(w)[:4]
    fs_env.write_config(orders={"retention.ms": 1_500, "retention.bytes": sum(sizes) - sizes[0] - sizes[1]})
    plan = planned(fs_env, now_ms=2_600)  # cleanup limit 1100: the first segment only
    assert [(d.segment.start_offset, d.reason) for d in plan.deletions] == [(0, REASON_TIME), (5, REASON_SIZE)]
    assert plan.new_log_start_offset == 10
    assert plan.bytes == sizes[0] + sizes[1]


@pytest.mark.parametrize("delete_on_disable", [True, False])
def test_a_topic_no_longer_tiered_deletes_all_or_nothing_by_its_config(
    fs_env: TieringEnv, delete_on_disable: bool
) -> None:
    timed_segments(fs_env)
    fs_env.write_config(
        orders={"remote.storage.enable": False, "remote.log.delete.on.disable": delete_on_disable, "retention.ms": 1}
    )
    plan = planned(fs_env, now_ms=10_000)
    expected = [(o, REASON_DISABLED) for o in (0, 5, 10, 15)] if delete_on_disable else []
    assert [(d.segment.start_offset, d.reason) for d in plan.deletions] == expected
    assert (plan.new_log_start_offset, plan.stopped_at) == (None, None)


def test_the_local_bytes_are_those_of_segments_not_wholly_copied_the_active_one_included(
    fs_env: TieringEnv,
) -> None:
    w = fs_env.writer()
    write_segments(w, 3)
    w.append_records(4)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        view = load_tier_view(ctx.partitions("orders", 0)[0], ctx.metadata)
        assert local_bytes_not_copied(view) == sum(log_sizes(w))  # nothing copied yet
        run_copy(ctx, w.tp)
        view = load_tier_view(ctx.partitions("orders", 0)[0], ctx.metadata)
        remote = sum(s.size_bytes for s in ctx.metadata.list_segments(tip_of(w)))
        active = log_sizes(w)[-1]
        assert local_bytes_not_copied(view) == active
        assert retention_size_total(view, ctx.metadata) == remote + active
        limit = remote // 2
        topic = TopicConfig(retention_bytes=limit)
        # within the limit the finished bytes given count; over it, the exact total does
        assert retention_size_in_percent(view, ctx.metadata, topic, 0) == active * 100 // limit
        assert retention_size_in_percent(view, ctx.metadata, topic, 10**9) == (remote + active) * 100 // limit
        assert retention_size_in_percent(view, ctx.metadata, TopicConfig(retention_bytes=-1), 10**9) == 0


def test_size_in_percent_truncates_and_knows_no_limit() -> None:
    assert size_in_percent(50, 200) == 25
    assert size_in_percent(2, 3) == 66  # truncated, not rounded
    assert size_in_percent(300, 200) == 150  # retention has not caught up
    assert size_in_percent(300, -1) == 0 and size_in_percent(300, 0) == 0
    assert size_in_percent(300, None) is None


def test_the_cleanup_limit_is_now_less_retention_ms_never_negative() -> None:
    assert time_retention_limit(TopicConfig(retention_ms=400), 1_000) == 600
    assert time_retention_limit(TopicConfig(retention_ms=0), 1_000) == 1_000
    assert time_retention_limit(TopicConfig(retention_ms=-2), 1_000) is None
    assert time_retention_limit(TopicConfig(retention_ms=1_000), 999) is None


def test_a_planned_deletion_tells_its_segment_and_reason() -> None:
    leftover = replace(segment(tip(), 0, 9, size=70), state=RemoteLogSegmentState.COPY_SEGMENT_STARTED)
    breach = replace(segment(tip(), 10, 19, size=30), state=FINISHED)
    plan = RetentionPlan(
        (PlannedDeletion(leftover, REASON_COPY_LEFTOVER), PlannedDeletion(breach, REASON_TIME)), 20, None
    )
    assert plan.bytes == 100
    assert [d.segment for d in plan.copy_leftovers] == [leftover]
    assert [d.segment for d in plan.retention_deletions] == [breach]
    assert plan.retention_deletions[0].to_dict() == {
        "segment_id": str(breach.segment_id),
        "start_offset": 10,
        "end_offset": 19,
        "size_bytes": 30,
        "reason": REASON_TIME,
    }
    assert uuid.UUID(plan.copy_leftovers[0].to_dict()["segment_id"]) == leftover.segment_id


def test_a_removed_or_removing_partition_is_left_alone_saying_why() -> None:
    known = PartitionRecord(tip().topic_id, tip().topic_partition, None, None, False, None, 0, 0, 0, 1, 1)
    assert removed_reason(known) is None
    assert removed_reason(replace(known, dropped=True)) == "removed"
    marked = replace(known, delete_state=RemotePartitionDeleteState.DELETE_PARTITION_STARTED)
    assert removed_reason(marked) == "being removed (DELETE_PARTITION_STARTED)"


def test_delete_lag_of_unknown_and_removed_partitions(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        view = load_tier_view(ctx.partitions("orders", 0)[0], ctx.metadata)
        topic = ctx.config.topic_config("orders")
        assert delete_lag(view, ctx.metadata, topic, 0) == (0, 0)
        assert ctx.metadata.get_partition(tip_of(w)) is None  # nothing registered by reading
        run_copy(ctx, w.tp)
        sizes = [s.size_bytes for s in ctx.metadata.list_segments(tip_of(w))]
        lease = ctx.metadata.acquire_lease(tip_of(w), holder="removal")
        ctx.metadata.mark_partition_for_deletion(tip_of(w), lease)
        ctx.metadata.release_lease(lease)
        view = load_tier_view(ctx.partitions("orders", 0)[0], ctx.metadata)
        assert delete_lag(view, ctx.metadata, topic, 0) == (3, sum(sizes))
