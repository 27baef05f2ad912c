"""Runs record what their broker saw of each partition (tier.observation), on SQLite and PostgreSQL:
status, copy, retention and the sensor's planning, one transaction per run; without a broker id
nothing is recorded, and a broker id the store refuses stops a copy before it holds anything."""

from __future__ import annotations

import pytest

from tests.engine_support import TieringEnv, tip_of, write_segments
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
