"""Runs record what their broker saw of each partition (tier.observation), on SQLite and PostgreSQL:
status, copy, retention and the sensor's planning, one transaction per run; without a broker id
nothing is recorded, and a broker id the store refuses stops a copy before it holds anything."""

from __future__ import annotations

import pytest

from tests.engine_support import TieringEnv, tip_of, write_segments
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.errors import UnknownBrokerError
from tiering_core.runs.copy import run_copy
from tiering_core.runs.copy_plan import plan_copies
from tiering_core.runs.retention import run_retention
from tiering_core.tier.status import collect_status, partition_status


def test_status_records_every_partition_of_the_run_at_one_database_time(tiering_env: TieringEnv) -> None:
    tiering_env.write_config(orders={"local.retention.ms": 60_000})
    a = tiering_env.writer("orders", 0)
    write_segments(a, 3)  # bases 0, 5, 10; active 15
    a.become_leader(4)
    a.append_records(2)
    a.set_high_watermark(12)
    b = tiering_env.writer("orders", 1)
    b.append_records(3)
    b.set_high_watermark(3)
    with tiering_env.context() as ctx:
        collect_status(ctx)
        assert ctx.metadata.latest_observations().replicas == {}  # no broker id: nothing recorded
        rows = {r.partition: r for r in collect_status(ctx, broker_id=2)}
        latest = ctx.metadata.latest_observations()
    assert set(latest.replicas) == {tip_of(a), tip_of(b)}
    seen_a, seen_b = latest.replicas[tip_of(a)][2], latest.replicas[tip_of(b)][2]
    assert seen_a.observed_ms == seen_b.observed_ms  # one write for the run
    assert (seen_a.high_watermark, seen_a.last_stable_offset, seen_a.log_end_offset) == (12, 12, 17)
    assert (seen_a.local_log_start_offset, seen_a.leader_epoch, seen_a.leader_epoch_start_offset) == (0, 4, 15)
    risk = rows[0].local_retention_risk
    assert risk is not None and seen_a.local_bytes == risk["local_bytes"] > 0
    # The writer's records are from 2023: the oldest uncopied segment is long past a minute's retention.
    assert seen_a.at_risk is True and seen_a.headroom_seconds is not None and seen_a.headroom_seconds < 0
    assert seen_a.headroom_seconds == pytest.approx((60_000 - risk["oldest_uncopied_age_ms"]) / 1000, abs=60)
    assert (seen_b.log_end_offset, seen_b.leader_epoch, seen_b.leader_epoch_start_offset) == (3, 0, 0)
    assert seen_b.at_risk is False and seen_b.headroom_seconds is None  # no closed segment waits


def test_copy_records_what_its_broker_saw_after_copying(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    write_segments(w, 3)
    w.set_high_watermark(15)
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        assert ctx.metadata.latest_observations().replicas == {}
        w.append_records(5)
        w.roll()
        w.set_high_watermark(20)
        result = run_copy(ctx, w.tp, broker_id=1)
        replicas, _ = ctx.metadata.observations_of(tip_of(w))
    assert result.segments_copied == 1 and list(replicas) == [1]
    seen = replicas[1]
    assert (seen.last_stable_offset, seen.log_end_offset, seen.at_risk, seen.headroom_seconds) == (20, 20, False, None)


def test_a_copy_with_a_refused_broker_id_holds_nothing(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    write_segments(w, 2)
    w.set_high_watermark(10)
    with tiering_env.context() as ctx:
        with pytest.raises(UnknownBrokerError, match=r"orders-0 refused: broker id -1 is not a Kafka broker id"):
            run_copy(ctx, w.tp, broker_id=-1)
        assert ctx.metadata.get_partition(tip_of(w)) is None
        assert ctx.metadata.latest_observations().replicas == {}


def test_retention_planning_and_a_single_status_record_their_broker(tiering_env: TieringEnv) -> None:
    a = tiering_env.writer("orders", 0)
    write_segments(a, 2)
    a.set_high_watermark(10)
    b = tiering_env.writer("orders", 1)
    write_segments(b, 1)
    b.set_high_watermark(5)
    with tiering_env.context() as ctx:
        run_copy(ctx, a.tp, broker_id=0)
        run_retention(ctx, a.tp, broker_id=3)
        plans = plan_copies(ctx, [a.tp, b.tp], broker_id=5)
        assert [p.eligible for p in plans] == [False, True]
        partition_status(ctx, ctx.partitions("orders", 1)[0], broker_id=6)
        latest = ctx.metadata.latest_observations(topic="orders")
    assert sorted(latest.replicas[tip_of(a)]) == [0, 3, 5]
    assert sorted(latest.replicas[tip_of(b)]) == [5, 6]
    planned = latest.replicas[tip_of(a)][5], latest.replicas[tip_of(b)][5]
    assert planned[0].observed_ms == planned[1].observed_ms
    assert {o.last_stable_offset for o in latest.replicas[tip_of(a)].values()} == {10}


def local_segment_sizes(w: PartitionWriter) -> list[int]:
    """The ``.log`` sizes of the writer's local segments, by base offset (the active one last)."""
    return [p.stat().st_size for p in sorted(w.path.glob("*.log"))]


def percents(tiering_env: TieringEnv, w: PartitionWriter, **topic: int) -> tuple[int | None, int | None]:
    """KIP-1257's two percents as broker 1's ``status`` records them with ``topic``'s YAML entry."""
    tiering_env.write_config(orders=topic)
    with tiering_env.context() as ctx:
        collect_status(ctx, broker_id=1)
        seen = ctx.metadata.observations_of(tip_of(w))[0][1]
    return seen.retention_size_percent, seen.local_retention_size_percent


def test_retention_percents_from_the_yaml_at_every_limit(tiering_env: TieringEnv) -> None:
    """RetentionSizeInPercent is the size total (local not yet copied + remote) over retention.bytes,
    LocalRetentionSizeInPercent the whole local log over local.retention.bytes (-2: retention.bytes),
    both truncated to whole percents; unlimited reads 0, an unknown local limit is not reported."""
    w = tiering_env.writer()
    write_segments(w, 3)  # bases 0, 5, 10; active 15
    w.append_records(2)
    w.set_high_watermark(15)
    local = sum(local_segment_sizes(w))
    assert percents(tiering_env, w, **{"retention.bytes": -1}) == (0, None)  # unlimited; local not known
    assert percents(tiering_env, w, **{"retention.bytes": -1, "local.retention.bytes": -1}) == (0, 0)
    assert percents(tiering_env, w, **{"retention.bytes": 0, "local.retention.bytes": 0}) == (0, 0)
    half = {"retention.bytes": 2 * local, "local.retention.bytes": -2}  # -2: the same as the total
    assert percents(tiering_env, w, **half) == (50, 50)
    third = {"retention.bytes": 3 * local + 2, "local.retention.bytes": 4 * local}
    assert percents(tiering_env, w, **third) == (local * 100 // (3 * local + 2), 25)  # truncated: 33
    assert percents(tiering_env, w, **{"retention.bytes": 100 * local + 1})[0] == 0  # under 1 %
    over = {"retention.bytes": local * 2 // 3, "local.retention.bytes": local // 4}
    assert percents(tiering_env, w, **over) == (local * 100 // (local * 2 // 3), local * 100 // (local // 4))

    # Copied, the same bytes count once, as remote: the total and both percents stay.
    tiering_env.write_config(orders=half)
    with tiering_env.context() as ctx:
        result = run_copy(ctx, w.tp, broker_id=1)
        finished = sum(s.size_bytes for s in ctx.metadata.list_segments(tip_of(w)))
        seen = ctx.metadata.observations_of(tip_of(w))[0][1]
    assert result.segments_copied == 3 and finished == sum(local_segment_sizes(w)[:3])
    assert (seen.retention_size_percent, seen.local_retention_size_percent) == (50, 50)
    # The broker deletes two copied segments: the local log shrinks, the size total does not.
    w.delete_oldest_segments(2)
    left = sum(local_segment_sizes(w))
    assert percents(tiering_env, w, **half) == (50, left * 100 // (2 * local))
    # Over the limit the remote part is the lineage's finished segments (the exact total): the same here.
    over_limit = percents(tiering_env, w, **{"retention.bytes": local // 2})
    assert over_limit == (local * 100 // (local // 2), None) and over_limit[0] >= 200


def test_retention_percents_reach_the_sink_and_every_run_that_records(tiering_env: TieringEnv) -> None:
    """Copy, retention, status and the sensor's planning record the percents (the run's topic
    config); the gauges go to the sink as the other observed gauges do."""
    from tests.monitoring.test_collect import RecordingSink
    from tiering_core.metrics import names
    from tiering_core.metrics.sink import emitting

    w = tiering_env.writer()
    write_segments(w, 2)
    w.set_high_watermark(10)
    local = sum(local_segment_sizes(w))
    tiering_env.write_config(orders={"retention.bytes": 4 * local, "local.retention.bytes": local})
    sink = RecordingSink()
    with tiering_env.context() as ctx, emitting(sink):
        for act in (
            lambda: plan_copies(ctx, [w.tp], broker_id=1),
            lambda: run_copy(ctx, w.tp, broker_id=1),
            lambda: run_retention(ctx, w.tp, broker_id=1),
            lambda: partition_status(ctx, ctx.partition_log(w.tp), broker_id=1),
        ):
            act()
            seen = ctx.metadata.observations_of(tip_of(w))[0][1]
            assert (seen.retention_size_percent, seen.local_retention_size_percent) == (25, 100)
    sent = {(name, value) for name, value, _ in sink.sent}
    assert {(names.RETENTION_SIZE_IN_PERCENT.name, 25), (names.LOCAL_RETENTION_SIZE_IN_PERCENT.name, 100)} <= sent
