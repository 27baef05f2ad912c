"""Replica choice on a cluster of brokers (tier.replica), on SQLite and PostgreSQL: two brokers'
log dirs hold replicas of one partition written by our writer with the same records, rolled at
different offsets. A copy run copies only from the best fresh replica and never past its own LSO,
a follower skips with its reason, a stale observation does not count, a gap another replica still
holds is none, two brokers racing are fenced by the lease, and an unknown broker id is refused."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from tests.engine_support import TieringEnv
from tests.metadata.test_observations import age
from tiering_core.config import load_config, select_broker
from tiering_core.context import TieringContext
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.errors import UnknownBrokerError
from tiering_core.read.reader import open_reader
from tiering_core.report.lines import event_line
from tiering_core.runs.copy import CopyRun, run_copy
from tiering_core.runs.copy_plan import plan_copies
from tiering_core.tier.status import collect_status

TP = TopicPartition("orders", 0)
TOPIC_ID = "mYmOgOlwTqyLnR1xXuOhUA"


@dataclass
class Cluster:
    """Brokers 1 and 2 (log dirs ``broker-1``, ``broker-2``) over one store and one bucket."""

    env: TieringEnv
    config_path: Path

    @classmethod
    def create(cls, env: TieringEnv, *, staleness_ms: int | None = None, brokers: tuple[int, ...] = (1, 2)) -> Cluster:
        doc: dict[str, Any] = {
            "brokers": {b: {"log_dirs": [str(env.root / f"broker-{b}")]} for b in brokers},
            "metadata": {"url": env.metadata_url, "lease_ms": 30_000},
            "remote": env.remote,
            "topics": {"*": {"retention.ms": -1, "retention.bytes": -1}},
        }
        if staleness_ms is not None:
            doc["cluster"] = {"observation_staleness_ms": staleness_ms}
        path = env.root / "cluster.yaml"
        path.write_text(yaml.safe_dump(doc))
        return cls(env, path)

    def replica(self, broker: int) -> PartitionWriter:
        clock = itertools.count(1_700_000_000_000, 7)
        return PartitionWriter(
            self.env.root / f"broker-{broker}",
            TP,
            topic_id=TOPIC_ID,
            segment_bytes=10**9,
            clock=lambda: next(clock),
            seed=42,
            node_id=broker,
        )

    @contextmanager
    def broker(self, broker_id: int | None) -> Iterator[TieringContext]:
        with TieringContext.open(select_broker(load_config(self.config_path), broker_id)) as ctx:
            yield ctx


def append(writer: PartitionWriter, count: int, rolls: tuple[int, ...] = ()) -> None:
    """``count`` records one per batch; the segment rolls before each offset of ``rolls``."""
    for _ in range(count):
        if writer.next_offset in rolls:
            writer.roll()
        writer.append_records(1, value_size=40, per_batch=1, key_prefix=f"k{writer.next_offset}")


def copy(cluster: Cluster, broker: int, **kwargs: Any) -> Any:
    lines: list[str] = []
    with cluster.broker(broker) as ctx:
        result = run_copy(ctx, TP, broker_id=broker, events=lambda e: lines.append(event_line(e)), **kwargs)
    vars(result)["lines"] = lines  # what it said, for the tests to read
    return result


def served(cluster: Cluster, broker: int, start: int = 0) -> list[int]:
    with cluster.broker(broker) as ctx:
        return [r.offset for r in open_reader(ctx, TP).read(start, 1000)]


def finished(cluster: Cluster) -> list[tuple[int, int]]:
    with cluster.broker(1) as ctx:
        return sorted(
            (s.start_offset, s.end_offset)
            for s in ctx.metadata.list_segments(TopicIdPartition(TOPIC_ID, TP))
            if s.state.value == "COPY_SEGMENT_FINISHED"
        )


def test_replicas_rolled_apart_copied_alternately_serve_every_offset_once(tiering_env: TieringEnv) -> None:
    cluster = Cluster.create(tiering_env)
    one, two = cluster.replica(1), cluster.replica(2)
    append(one, 14, rolls=(5, 10))
    append(two, 14, rolls=(7,))
    one.set_high_watermark(12)
    two.set_high_watermark(8)  # a lagging follower

    alone = copy(cluster, 2)  # nobody else was seen yet: broker 2 copies what it may
    assert alone.skipped_reason is None and alone.segments_copied == 1
    assert finished(cluster) == [(0, 6)]  # its segment [7..13] straddles its own LSO 8: it waits
    first = copy(cluster, 1)
    assert first.skipped_reason is None and finished(cluster) == [(0, 6), (5, 9)]
    behind = copy(cluster, 2)
    assert behind.skipped_reason == "broker 1 holds a more advanced replica (LSO 12 > 8)"
    assert behind.lines == ["orders-0: skipped: broker 1 holds a more advanced replica (LSO 12 > 8)"]
    assert behind.to_dict()["skipped_reason"] == behind.skipped_reason

    append(one, 12, rolls=(15, 20))
    append(two, 12, rolls=(14, 21))
    one.set_high_watermark(20)
    two.set_high_watermark(26)
    second = copy(cluster, 2)  # now broker 2 leads: it copies from its segment holding 10
    assert second.skipped_reason is None
    assert finished(cluster) == [(0, 6), (5, 9), (7, 13), (14, 20)]
    third = copy(cluster, 1)
    assert third.skipped_reason == "broker 2 holds a more advanced replica (LSO 26 > 20)"
    assert max(end for _, end in finished(cluster)) < 26  # never past the copying replica's LSO
    assert served(cluster, 1) == list(range(21))
    assert served(cluster, 2, 9) == list(range(9, 21))


def test_a_stale_observation_does_not_count(tiering_env: TieringEnv) -> None:
    cluster = Cluster.create(tiering_env, staleness_ms=60_000)
    one, two = cluster.replica(1), cluster.replica(2)
    append(one, 20, rolls=(5, 10, 15))
    append(two, 20, rolls=(5, 10, 15))
    one.set_high_watermark(20)
    two.set_high_watermark(12)
    with cluster.broker(1) as ctx:
        collect_status(ctx, broker_id=1)  # broker 1 reports LSO 20, then goes quiet
    assert copy(cluster, 2).skipped_reason == "broker 1 holds a more advanced replica (LSO 20 > 12)"
    engine = sa.create_engine(tiering_env.metadata_url)
    age(engine, 1, 61_000)  # as if broker 1's last run was longer ago than the staleness limit
    engine.dispose()
    result = copy(cluster, 2)  # broker 1's observation is stale now: broker 2 copies, up to its LSO
    assert result.skipped_reason is None and result.segments_copied == 2
    assert finished(cluster) == [(0, 4), (5, 9)]


def test_a_follower_with_a_higher_local_log_start_records_no_false_gap(tiering_env: TieringEnv) -> None:
    cluster = Cluster.create(tiering_env)
    one, two = cluster.replica(1), cluster.replica(2)
    for w in (one, two):
        append(w, 20, rolls=(5, 10, 15))
        w.set_high_watermark(6)
    assert copy(cluster, 1).segments_copied == 1  # [0..4] tiered
    for w in (one, two):
        w.set_high_watermark(20)
    two.delete_oldest_segments(2)  # broker 2's own retention: its local log start is 10
    with cluster.broker(1) as ctx:
        collect_status(ctx, broker_id=1)
    with cluster.broker(2) as ctx:
        (row,) = collect_status(ctx, broker_id=2)
        (plan,) = plan_copies(ctx, [TP], broker_id=2)
    assert row.gaps == [] and plan.gap is None
    assert row.local_log_start_offset == 10
    assert plan.skipped_reason == "broker 1 holds an equal replica (leader epoch 0, LSO 20) and the lower broker id"
    # Broker 2 even leads now, but broker 1 still holds 5, the first offset not yet tiered: it copies.
    two.append_records(1, value_size=40, per_batch=1, key_prefix="k20")
    two.set_high_watermark(21)
    follower = copy(cluster, 2)
    assert follower.skipped_reason == (
        "broker 1 still holds offset 5, the first not yet tiered, which this replica no longer has (local log start 10)"
    )
    assert follower.gaps == []
    assert copy(cluster, 1).segments_copied == 2  # [15..19] is its active segment
    assert finished(cluster) == [(0, 4), (5, 9), (10, 14)]
    with cluster.broker(2) as ctx:
        assert ctx.metadata.list_gaps(TopicIdPartition(TOPIC_ID, TP)) == []
    assert served(cluster, 1) == list(range(15))


def test_a_gap_no_fresh_replica_holds_is_recorded(tiering_env: TieringEnv) -> None:
    from tiering_core.errors import TieringGapError

    cluster = Cluster.create(tiering_env)
    one, two = cluster.replica(1), cluster.replica(2)
    for w in (one, two):
        append(w, 20, rolls=(5, 10, 15))
        w.set_high_watermark(6)
    assert copy(cluster, 1).segments_copied == 1
    for w in (one, two):
        w.set_high_watermark(20)
    one.delete_oldest_segments(2)
    two.delete_oldest_segments(3)  # broker 2 holds 15.. only; broker 1 10..: 5..9 is gone everywhere
    with cluster.broker(2) as ctx:
        (row,) = collect_status(ctx, broker_id=2)
    assert row.gaps == []  # broker 1 was last seen holding every offset from 0
    with pytest.raises(TieringGapError, match=r"offsets 5\.\.9 were deleted"):
        copy(cluster, 1)  # broker 1 reports its log start 10 first: now no replica holds 5..9
    with cluster.broker(2) as ctx:
        assert [(g.start, g.end) for g in ctx.metadata.list_gaps(TopicIdPartition(TOPIC_ID, TP))] == [(5, 9)]
        (row,) = collect_status(ctx, broker_id=2)
    assert row.gaps == [[5, 9]]
    assert finished(cluster) == [(0, 4), (10, 14)]


def test_two_brokers_racing_are_fenced_by_the_lease(tiering_env: TieringEnv) -> None:
    cluster = Cluster.create(tiering_env)
    one, two = cluster.replica(1), cluster.replica(2)
    for w in (one, two):
        append(w, 10, rolls=(5,))
        w.set_high_watermark(10)
    with cluster.broker(1) as ctx1, cluster.broker(2) as ctx2:
        # Both decide before either records: each sees only itself and believes it is the best.
        holder = CopyRun.begin(ctx2, TP, run_id="broker-2", broker_id=2)
        assert holder.active
        rival = run_copy(ctx1, TP, broker_id=1, run_id="broker-1")
        assert rival.skipped_reason is None and rival.fenced and rival.segments_copied == 0
        holder.release()
    assert finished(cluster) == []
    assert copy(cluster, 1).segments_copied == 1


def test_an_observation_from_an_unknown_broker_is_refused(tiering_env: TieringEnv) -> None:
    cluster = Cluster.create(tiering_env)
    one = cluster.replica(1)
    append(one, 10, rolls=(5,))
    one.set_high_watermark(10)
    with cluster.broker(1) as ctx:
        with pytest.raises(UnknownBrokerError, match=r"broker 7 is not one of the configured brokers \(1, 2\)"):
            run_copy(ctx, TP, broker_id=7)
        with pytest.raises(UnknownBrokerError, match="broker 7 is not one of the configured brokers"):
            collect_status(ctx, broker_id=7)
        assert ctx.metadata.latest_observations().replicas == {}
    assert finished(cluster) == []


def test_one_broker_configured_copies_as_on_a_single_broker(tiering_env: TieringEnv) -> None:
    cluster = Cluster.create(tiering_env, brokers=(1,))
    one = cluster.replica(1)
    append(one, 10, rolls=(5,))
    one.set_high_watermark(10)
    with cluster.broker(None) as ctx:
        assert ctx.config.broker_id == 1
        result = run_copy(ctx, TP, broker_id=ctx.config.broker_id)
    assert result.skipped_reason is None and result.segments_copied == 1


def test_removal_refuses_a_topic_id_another_broker_reports_unless_forced(tiering_env: TieringEnv) -> None:
    from tiering_core.runs.errors import RemovalRefusedError, RemovalRequestRefusedError
    from tiering_core.runs.removal import delete_partition, plan_removal_request

    cluster = Cluster.create(tiering_env)
    two = cluster.replica(2)
    append(two, 10, rolls=(5,))
    two.set_high_watermark(10)
    PartitionWriter(cluster.env.root / "broker-1", TopicPartition("other", 0), node_id=1)  # broker 1 holds no orders-0
    assert copy(cluster, 2).segments_copied == 1
    with cluster.broker(1) as ctx:
        with pytest.raises(
            RemovalRefusedError,
            match=rf"orders-0 is still on the cluster \(topic id {TOPIC_ID} "
            r"reported by broker 2 \(seen \d+ s ago\)\)",
        ):
            delete_partition(ctx, TP)
        with pytest.raises(RemovalRequestRefusedError, match=r"still on the cluster.*reported by broker 2"):
            plan_removal_request(ctx, "orders", [0], confirm="orders", dry_run=False, force=False)
        assert plan_removal_request(ctx, "orders", [0], confirm="orders", dry_run=True, force=True) == [
            {"partition": 0, "topic_ids": [TOPIC_ID], "force": True}
        ]
        result = delete_partition(ctx, TP, force=True)
    assert result.topic_ids == [TOPIC_ID] and result.segments_deleted == 1
    assert finished(cluster) == []


def test_a_follower_s_dry_run_plans_nothing_and_says_why(tiering_env: TieringEnv) -> None:
    cluster = Cluster.create(tiering_env)
    one, two = cluster.replica(1), cluster.replica(2)
    append(one, 12, rolls=(5, 10))
    append(two, 12, rolls=(5, 10))
    one.set_high_watermark(12)
    two.set_high_watermark(9)
    with cluster.broker(1) as ctx:
        collect_status(ctx, broker_id=1)
    dry = copy(cluster, 2, dry_run=True)
    assert dry.planned == [] and dry.skipped_reason == "broker 1 holds a more advanced replica (LSO 12 > 9)"
    assert dry.lines == ["orders-0: skipped: broker 1 holds a more advanced replica (LSO 12 > 9)"]
    leader = copy(cluster, 1, dry_run=True)
    assert leader.skipped_reason is None and [(p["base_offset"], p["end_offset"]) for p in leader.planned] == [
        (0, 4),
        (5, 9),
    ]
    assert finished(cluster) == []
