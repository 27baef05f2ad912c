"""Lanes of a scheduled run (``runs.lanes``): a bounded, balanced and deterministic split, most
urgent partitions first, and the copy driver's lazy begin and deadline under an injected clock
(filesystem tier, SQLite store): what the deadline leaves is the next run's, nothing lost."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.runs.copy_many_support import bases, copy_sequentially, make_config, make_log_dir, remote_state, tip
from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.engine.executor import InProcessExecutor
from tiering_core.events import RunEvent
from tiering_core.events.copy import CopyDeferred, PartitionCopyOutcome, SegmentCopied
from tiering_core.events.retention import PartitionRetentionOutcome
from tiering_core.kafka.checkpoints import (
    REPLICATION_OFFSET_CHECKPOINT,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from tiering_core.kafka.topic import TopicPartition
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.metadata.store import TaskAttempt
from tiering_core.runs.copy import run_copy
from tiering_core.runs.copy_many import copy_partitions
from tiering_core.runs.copy_plan import plan_copies
from tiering_core.runs.lanes import (
    Lane,
    LaneRun,
    RetentionLaneReport,
    by_urgency,
    copy_lane,
    lane_bound,
    lane_partitions,
    partition_runs,
    planned_order,
    retention_lane,
    split_into_lanes,
)
from tiering_core.runs.retention import RetentionResult

PARTITIONS = 4


def orders(*partitions: int) -> list[TopicPartition]:
    return [TopicPartition("orders", p) for p in partitions]


class Clock:
    """A monotonic clock the test moves: the deadline passes when the test says so, not by sleeping."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_partitions_that_fit_the_bound_are_one_lane_each_labelled_as_today() -> None:
    lanes = split_into_lanes(orders(0, 1, 2), 4)
    assert [lane.label for lane in lanes] == ["orders-0", "orders-1", "orders-2"]
    assert lanes[1] == Lane(1, (TopicPartition("orders", 1),))
    assert lanes[1].to_dict() == {"lane": "orders-1", "partitions": [["orders", [1]]]}
    assert lane_partitions(lanes[1].to_dict()["partitions"]) == orders(1)


def test_beyond_the_bound_each_lane_takes_a_balanced_deterministic_share_in_urgency_order() -> None:
    ranked = orders(7, 3, 9, 0, 1, 2, 4, 5, 6, 8)  # most urgent first
    lanes = split_into_lanes(ranked, 4)
    assert [lane.partitions for lane in lanes] == [
        tuple(orders(7, 1, 6)),
        tuple(orders(3, 2, 8)),
        tuple(orders(9, 4)),
        tuple(orders(0, 5)),
    ]
    assert [lane.label for lane in lanes] == [
        "lane-0 (3 partitions)",
        "lane-1 (3 partitions)",
        "lane-2 (2 partitions)",
        "lane-3 (2 partitions)",
    ]
    assert split_into_lanes(ranked, 4) == lanes  # the same input, the same lanes
    assert sorted(tp for lane in lanes for tp in lane.partitions) == sorted(ranked)  # each exactly once


def test_a_plan_handed_on_as_runs_of_one_topic_reads_back_in_its_order() -> None:
    """The sensor's plan: consecutive partitions of a topic share one entry; the listing reads it
    back, and the pairs an earlier sensor handed on, the same way."""
    order = [
        TopicPartition("orders", 3),
        TopicPartition("orders", 0),
        TopicPartition("audit", 1),
        TopicPartition("orders", 2),
    ]
    runs = partition_runs(order)
    assert runs == [["orders", [3, 0]], ["audit", [1]], ["orders", [2]]]
    assert lane_partitions(runs) == order
    assert lane_partitions([[tp.topic, tp.partition] for tp in order]) == order
    assert partition_runs([]) == [] and lane_partitions([]) == []
    with pytest.raises(ValueError, match=r"'x' of \['orders', \[1, 'x'\]\] is not a partition number"):
        lane_partitions([["orders", [1, "x"]]])


def test_the_bound_is_the_smaller_of_the_configured_lanes_and_the_scheduler_s_limit() -> None:
    assert lane_bound(16, 1024) == 16 and lane_bound(16, 4) == 4 and lane_bound(3, 4) == 3
    with pytest.raises(ValueError, match="at least one lane"):
        split_into_lanes(orders(0), 0)
    with pytest.raises(ValueError, match=r"\[topic, partition\] pairs"):
        lane_partitions([["orders"]])


def test_the_planned_order_keeps_the_partitions_with_work_most_urgent_first_from_the_plans_views(
    tmp_path: Path,
) -> None:
    """The sensor's plans order the run: a partition copied up to its LSO is left out, the others
    come in ``by_urgency``'s order, and no view is read again."""
    from tests.engine_support import counted_view_builds

    log_dir = make_log_dir(tmp_path, partitions=PARTITIONS)
    with TieringContext.open(load_config(make_config(tmp_path, log_dir, "planned"))) as ctx:
        run_copy(ctx, TopicPartition("orders", 2))
        plans = plan_copies(ctx, orders(0, 1, 2, 3))
        with counted_view_builds() as builds:
            assert planned_order(ctx, plans) == orders(3, 1, 0)
        assert builds == {}
        assert by_urgency(ctx, orders(0, 1, 3)) == orders(3, 1, 0)


def test_most_urgent_first_at_risk_then_copy_lag_bytes(tmp_path: Path) -> None:
    """Partition p of make_log_dir has 2 + p % 3 segments (3 has one more): lag bytes order them
    2, 3, 1, 0; once 2 is copied it is last; the topic whose local retention is about to delete
    untiered data comes before all of them, whatever its lag."""
    log_dir = make_log_dir(tmp_path, partitions=PARTITIONS)
    config = make_config(tmp_path, log_dir, "urgency")
    with TieringContext.open(load_config(config)) as ctx:
        assert by_urgency(ctx, orders(0, 1, 2, 3)) == orders(2, 3, 1, 0)
        run_copy(ctx, TopicPartition("orders", 2))
        assert by_urgency(ctx, orders(0, 1, 2, 3)) == orders(3, 1, 0, 2)

    from tests.engine_support import write_segments
    from tiering_core.kafka.log_writer import PartitionWriter

    write_segments(PartitionWriter(log_dir, TopicPartition("audit", 0)), 1, records=2)
    doc = yaml.safe_load(config.read_text())
    doc["topics"] = {"audit": {"local.retention.bytes": 1, "retention.bytes": 10**9}}
    config.write_text(yaml.safe_dump(doc))
    audit = TopicPartition("audit", 0)
    with TieringContext.open(load_config(config)) as ctx:
        assert by_urgency(ctx, [*orders(0, 1, 2, 3), audit]) == [audit, *orders(3, 1, 0, 2)]
        # a partition whose view cannot be read goes last, for the copy to report why
        assert by_urgency(ctx, [TopicPartition("gone", 0), *orders(0)]) == [*orders(0), TopicPartition("gone", 0)]


def test_a_lazy_copy_begins_partitions_in_the_given_order_as_the_one_before_runs_out(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, partitions=PARTITIONS)
    config = make_config(tmp_path, log_dir, "lazy")
    events: list[RunEvent] = []
    with TieringContext.open(load_config(config)) as ctx:
        report = copy_partitions(
            ctx, orders(3, 1, 0, 2), InProcessExecutor(ctx.storage, threads=1), events=events.append, lazily=True
        )
    assert report.failures == [] and report.deferred == []
    copied = [e.topic_partition.partition for e in events if isinstance(e, SegmentCopied)]
    assert copied == [3] * 3 + [1] * 3 + [0] * 2 + [2] * 4  # one partition after the other, in order
    with TieringContext.open(load_config(config)) as ctx:
        for p in range(PARTITIONS):  # every lease released as its partition finished
            record = ctx.metadata.get_partition(tip(config, p))
            assert record is not None and record.lease_holder is None


@pytest.mark.parametrize("threads", [1, 3])
def test_past_the_deadline_nothing_starts_and_the_next_run_copies_the_rest(tmp_path: Path, threads: int) -> None:
    """The clock passes the deadline as the first segment commits: what is in flight finishes,
    the rest of that partition and the partitions not begun are deferred; nothing STARTED is left
    behind, no lease held, and the next run ends where serial copies end."""
    log_dir = make_log_dir(tmp_path, partitions=PARTITIONS)
    serial = make_config(tmp_path, log_dir, "serial")
    lane = make_config(tmp_path, log_dir, "lane")
    assert copy_sequentially(serial) == []
    clock = Clock()
    events: list[RunEvent] = []

    def tell(event: RunEvent) -> None:
        events.append(event)
        if isinstance(event, SegmentCopied):
            clock.now = 100.0  # the budget runs out here

    with TieringContext.open(load_config(lane)) as ctx:
        report = copy_partitions(
            ctx,
            orders(2, 0, 1, 3),
            InProcessExecutor(ctx.storage, threads=threads),
            events=tell,
            lazily=True,
            deadline=10.0,
            clock=clock,
        )
    assert report.failures == [] and report.gaps == [] and report.deferred
    segments = {2: 4, 0: 2, 1: 3, 3: 3}
    for r in report.results:  # every segment of a begun partition copied or left, counted
        if r.last_stable_offset is None:  # never begun: nothing of it touched
            assert r.deferred and r.segments_copied == 0
            continue
        assert r.segments_copied + r.copy_lag_segments == segments[r.partition]
        assert r.deferred == (r.copy_lag_segments > 0)
    if threads == 1:  # one segment was out when the budget ran out
        assert report.deferred == ["orders-0", "orders-1", "orders-2", "orders-3"]
        assert [r.segments_copied for r in report.results] == [0, 0, 1, 0]
        deferred = [(e.topic_partition.partition, e.segments) for e in events if isinstance(e, CopyDeferred)]
        assert deferred == [(2, 3), (0, None), (1, None), (3, None)]
    with TieringContext.open(load_config(lane)) as ctx:
        for p in range(PARTITIONS):
            segments = ctx.metadata.list_segments(tip(lane, p), include_deleted=True)
            assert all(s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED for s in segments)
            record = ctx.metadata.get_partition(tip(lane, p))
            assert record is None or record.lease_holder is None
    with TieringContext.open(load_config(lane)) as ctx:
        again = copy_partitions(ctx, orders(2, 0, 1, 3), InProcessExecutor(ctx.storage, threads=threads), lazily=True)
    assert again.failures == [] and again.deferred == []
    assert remote_state(lane) == remote_state(serial)
    assert bases(remote_state(lane), "orders-2") == [0, 20, 40, 60]


def test_a_lane_s_retry_takes_over_the_leases_its_killed_try_left(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, partitions=2)
    config = make_config(tmp_path, log_dir, "retry")
    first = TaskAttempt("tiering_copy__orders", "scheduled__1", "copy", 1, 1)
    with TieringContext.open(load_config(config)) as ctx:
        for p in range(2):
            t = tip(config, p)
            ctx.metadata.register_partition(t)
            ctx.metadata.acquire_lease(t, first.holder("copy"), ttl_ms=600_000, attempt=first)
        stranger = copy_partitions(ctx, orders(0, 1), InProcessExecutor(ctx.storage), lazily=True)
        assert stranger.fenced == ["orders-0", "orders-1"]  # another run's try: the partitions are held
        retry = TaskAttempt("tiering_copy__orders", "scheduled__1", "copy", 1, 2)
        report = copy_partitions(ctx, orders(0, 1), InProcessExecutor(ctx.storage), lazily=True, attempt=retry)
    assert report.fenced == [] and report.failures == []
    assert [r.segments_copied for r in report.results] == [2, 3]


def test_a_copy_lane_tells_one_outcome_per_partition(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, partitions=PARTITIONS)
    config = make_config(tmp_path, log_dir, "outcomes")
    segment = log_dir / "orders-1" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[100] ^= 0xFF  # a CRC mismatch: partition 1 cannot be copied
    segment.write_bytes(bytes(data))
    clock = Clock()
    events: list[RunEvent] = []
    with TieringContext.open(load_config(config)) as ctx:
        report = copy_lane(ctx, orders(0, 1, 2, 3), LaneRun("r1", 60, events=events.append, clock=clock))
    # Told as each partition ends: the failed one first; one outcome each.
    outcomes = sorted((e for e in events if isinstance(e, PartitionCopyOutcome)), key=lambda e: e.topic_partition)
    assert [(str(e.topic_partition), e.outcome) for e in outcomes] == [
        ("orders-0", "copied"),
        ("orders-1", "failed"),
        ("orders-2", "copied"),
        ("orders-3", "copied"),
    ]
    assert outcomes[1].detail is not None and outcomes[1].detail.startswith("orders-1:")
    assert [r.segments_copied for r in report.results] == [2, 0, 4, 3]


def test_a_copy_lane_tells_each_partition_as_it_ends_not_at_the_end_of_the_lane(tmp_path: Path) -> None:
    """A lane of many partitions logs each one's line when that partition is done: the first
    partition's outcome comes before the last partition copies anything."""
    log_dir = make_log_dir(tmp_path, partitions=PARTITIONS)
    config = make_config(tmp_path, log_dir, "as-they-end")
    events: list[RunEvent] = []
    with TieringContext.open(load_config(config)) as ctx:
        copy_lane(ctx, orders(0, 1, 2, 3), LaneRun("r1", 60, events=events.append, clock=Clock()))
    told = {str(e.topic_partition): i for i, e in enumerate(events) if isinstance(e, PartitionCopyOutcome)}
    last_starts = min(
        i for i, e in enumerate(events) if isinstance(e, SegmentCopied) and e.topic_partition.partition == 3
    )
    assert sorted(told) == ["orders-0", "orders-1", "orders-2", "orders-3"]
    assert told["orders-0"] < last_starts, "the first partition's outcome waited for the whole lane"


def test_a_partition_not_checkpointed_yet_is_skipped_in_the_lane_not_failed(tmp_path: Path) -> None:
    """A partition the broker has not checkpointed a high watermark for yet (created seconds ago):
    the lane tells it skipped with that reason; the others are copied, and so is it by the next
    run once the broker has written its checkpoint."""
    log_dir = make_log_dir(tmp_path, partitions=3)
    config = make_config(tmp_path, log_dir, "pending")
    checkpoint = log_dir / REPLICATION_OFFSET_CHECKPOINT
    entries = read_offset_checkpoint(checkpoint)
    write_offset_checkpoint(checkpoint, {tp: hw for tp, hw in entries.items() if tp != TopicPartition("orders", 1)})
    events: list[RunEvent] = []
    with TieringContext.open(load_config(config)) as ctx:
        report = copy_lane(ctx, orders(0, 1, 2), LaneRun("r1", 60, events=events.append, clock=Clock()))
        outcomes = sorted((e for e in events if isinstance(e, PartitionCopyOutcome)), key=lambda e: e.topic_partition)
        assert [(str(e.topic_partition), e.outcome) for e in outcomes] == [
            ("orders-0", "copied"),
            ("orders-1", "skipped"),
            ("orders-2", "copied"),
        ]
        assert outcomes[1].detail is not None and "has not checkpointed" in outcomes[1].detail
        assert [r.segments_copied for r in report.results] == [2, 0, 4]
        write_offset_checkpoint(checkpoint, entries)
        report = copy_lane(ctx, orders(1), LaneRun("r2", 60, clock=Clock()))
    assert [r.segments_copied for r in report.results] == [3]


def test_a_retention_outcome_names_a_failure_first_then_fenced_deferred_skipped_else_deleted() -> None:
    report = RetentionLaneReport([], {"orders-0": "orders-0: store unreachable"})
    failed = report.outcome(RetentionResult("orders", 0, fenced=True, segments_deleted=1, bytes_deleted=9))
    assert (failed.outcome, failed.detail, failed.segments_deleted) == ("failed", "orders-0: store unreachable", 1)
    fenced = report.outcome(RetentionResult("orders", 1, fenced=True, deferred=True, skipped_reason="not tiered"))
    assert (fenced.outcome, fenced.detail) == ("fenced", "another run holds the partition")
    deferred = report.outcome(RetentionResult("orders", 1, deferred=True, skipped_reason="not tiered"))
    assert (deferred.outcome, deferred.detail) == ("deferred", "the time budget ran out; the next run does it")
    skipped = report.outcome(RetentionResult("orders", 1, skipped_reason="not tiered"))
    assert (skipped.outcome, skipped.detail) == ("skipped", "not tiered")
    deleted = report.outcome(RetentionResult("orders", 1, segments_deleted=2, bytes_deleted=20))
    assert (deleted.outcome, deleted.detail, deleted.bytes_deleted) == ("deleted", None, 20)


def test_a_retention_lane_stops_starting_partitions_at_its_deadline(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, partitions=3)
    config = make_config(tmp_path, log_dir, "retention")
    doc = yaml.safe_load(config.read_text())
    doc["topics"] = {"*": {"retention.bytes": 0}}
    config.write_text(yaml.safe_dump(doc))
    assert copy_sequentially(config) == []
    clock = Clock()
    events: list[RunEvent] = []

    def tell(event: RunEvent) -> None:
        events.append(event)
        clock.now = 100.0  # the first partition's retention used the budget up

    with TieringContext.open(load_config(config)) as ctx:
        report = retention_lane(ctx, orders(1, 0, 2), LaneRun("r1", 60, events=tell, clock=clock))
    assert [(str(e.topic_partition), e.outcome) for e in events if isinstance(e, PartitionRetentionOutcome)] == [
        ("orders-1", "deleted"),
        ("orders-0", "deferred"),
        ("orders-2", "deferred"),
    ]
    assert [r.segments_deleted for r in report.results] == [3, 0, 0] and report.failures == {}
    state = remote_state(config)
    assert bases(state, "orders-1") == [] and len(bases(state, "orders-0")) == 2
