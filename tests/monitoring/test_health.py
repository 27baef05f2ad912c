"""The first screen's figures from the store alone: the replicas at local-retention risk (the least
headroom first, per broker on request), the age of the oldest segment not yet copied (what the
observation measured, grown since), and the copy throughput from the recorded state history (a
copy an hour old is history, not the recent window)."""

from __future__ import annotations

from sqlalchemy import update

from tests.engine_support import TieringEnv, write_segments
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.queries import HI, S
from tiering_core.monitoring.health import HISTORY_BUCKET_MS, THROUGHPUT_WINDOW_MS, collect_health
from tiering_core.runs.copy import run_copy
from tiering_core.runs.copy_plan import plan_copies

BROKER = 1
HOUR_MS = 3_600_000


def closed(tiering: TieringEnv, topic: str, segments: int) -> PartitionWriter:
    w = tiering.writer(topic, 0)
    write_segments(w, segments)
    w.append_records(1)
    w.set_high_watermark()
    return w


def test_risk_and_the_oldest_uncopied_age_come_from_fresh_observations(fs_env: TieringEnv) -> None:
    # orders: retention far beyond the records' age (no risk); clicks: retention already passed.
    fs_env.write_config(orders={"local.retention.ms": 10**13}, clicks={"local.retention.ms": 60_000})
    orders, clicks = closed(fs_env, "orders", 2), closed(fs_env, "clicks", 1)
    with fs_env.context() as ctx:
        plan_copies(ctx, [orders.tp, clicks.tp], broker_id=BROKER)
        health = collect_health(ctx)
        (risk,) = health.risks
        assert (risk.name, risk.broker_id, health.risk_count) == ("clicks-0", BROKER, 1)
        assert risk.headroom_seconds is not None and risk.headroom_seconds < 0  # past due
        assert risk.copy_lag_bytes is not None and risk.copy_lag_bytes > 0
        oldest = health.oldest_uncopied
        assert oldest is not None and oldest.broker_id == BROKER
        # Both partitions' records share one clock: the older segment is orders' first (written
        # first); a later read finds it older by the time between the reads.
        ages = {t: collect_health(ctx, topic=t).oldest_uncopied for t in ("orders", "clicks")}
        assert oldest.topic == "orders" and ages["orders"] is not None and ages["clicks"] is not None
        assert 0 <= ages["orders"].age_ms - oldest.age_ms < 60_000
        assert 60_000 < ages["clicks"].age_ms < ages["orders"].age_ms
        assert collect_health(ctx, broker=BROKER + 1).risks == []  # another broker's view
        run_copy(ctx, orders.tp, broker_id=BROKER)
        run_copy(ctx, clicks.tp, broker_id=BROKER)
        assert collect_health(ctx).oldest_uncopied is None  # everything closed is copied
        assert collect_health(ctx).risks == []


def test_throughput_is_the_recent_window_s_and_the_history_keeps_older_copies(fs_env: TieringEnv) -> None:
    w = closed(fs_env, "orders", 3)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp, broker_id=BROKER)
        with ctx.metadata.engine.begin() as conn:
            total = sum(conn.execute(S.select().with_only_columns(S.c.size_bytes)).scalars())
            # The copy ran two hours ago, as far as the store's history says.
            conn.execute(update(HI).values(at_ms=HI.c.at_ms - 2 * HOUR_MS))
        aged = collect_health(ctx)
        assert total > 0 and aged.copied_bytes == 0 and aged.bytes_per_second == 0
        assert sum(size for _, size in aged.copy_history) == total
        (then,) = [at for at, _ in aged.copy_history]
        assert aged.db_now_ms - 2 * HOUR_MS - HISTORY_BUCKET_MS < then <= aged.db_now_ms - 2 * HOUR_MS
        write_segments(w, 2)
        w.set_high_watermark()
        run_copy(ctx, w.tp, broker_id=BROKER)
        now = collect_health(ctx)
        recent = now.copied_bytes
        assert 0 < recent and now.bytes_per_second == recent * 1000 / THROUGHPUT_WINDOW_MS
        assert [size for _, size in now.copy_history] == [total, recent]
        assert collect_health(ctx, topic="clicks").copy_history == []
