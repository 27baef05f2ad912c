"""The Tiering page's overview read set-wise from the store, on SQLite and PostgreSQL: the same
value as the overview of ``collect_metrics``' snapshot of the same store (the partitions shown and
their names, the best fresh replica's lags, merged gaps, local-retention risk of fresh replicas
only, stale replicas but a silent broker's, failed scrubs of shown partitions only, the last copy),
with removed, observed-only and stale partitions in it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import insert, update

from tests.engine_support import select_count, traced_statements
from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.counters import COUNTERS
from tiering_core.metadata.models import registered_partition
from tiering_core.metadata.observations import LATEST
from tiering_core.metadata.queries import G, P, S
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.metadata.store import RemoteLogMetadataStore
from tiering_core.metadata.values import NO_BROKER, ReplicaObservation
from tiering_core.monitoring.collect import collect_metrics
from tiering_core.monitoring.overview import AlertEntry, Overview, TopicSummary, collect_overview, overview_of

STALENESS_MS = 600_000
ORDERS, GONE, CLICKS, NOWHERE = "O" * 22, "G" * 22, "C" * 22, "N" * 22


def tip(topic_id: str, topic: str, partition: int) -> TopicIdPartition:
    return TopicIdPartition(topic_id, TopicPartition(topic, partition))


def observed(
    broker: int,
    t: TopicIdPartition,
    *,
    epoch: int | None = 3,
    lso: int | None = 100,
    risk: bool = False,
    lag: int | None = None,
) -> ReplicaObservation:
    return ReplicaObservation(
        broker, t, lso, lso, 120, 0, 1000, epoch, 0, risk, 60.0 if risk else None, 0, lag, None if lag is None else 1
    )


def fill(store: RemoteLogMetadataStore) -> None:
    """``orders`` 0-3 tiered; ``gone`` 0 and 1 removed (1 still observed); ``clicks`` 0 only observed;
    counters of a partition the store knows nothing else of."""
    now = int(time.time() * 1000)
    finished, copying = RemoteLogSegmentState.COPY_SEGMENT_FINISHED, RemoteLogSegmentState.COPY_SEGMENT_STARTED
    records = [(ORDERS, "orders", p, False) for p in range(4)] + [(GONE, "gone", p, True) for p in range(2)]
    with store.engine.begin() as conn:
        conn.execute(
            insert(P),
            [
                {
                    **registered_partition(TopicIdPartition(topic_id, TopicPartition(topic, partition)), now),
                    "id": i + 1,
                    "delete_state": "DELETE_PARTITION_FINISHED" if dropped else None,
                    "dropped": dropped,
                }
                for i, (topic_id, topic, partition, dropped) in enumerate(records)
            ],
        )
        segments = [(1, 0, finished, 100), (1, 1, finished, 200), (1, 2, copying, 400), (2, 0, finished, 50)]
        segments += [(3, 0, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED, 800), (5, 0, finished, 1600)]
        conn.execute(
            insert(S),
            [
                {
                    "segment_id": f"00000000-0000-0000-0000-{n:012d}",
                    "partition_id": pid,
                    "start_offset": s * 10,
                    "end_offset": s * 10 + 9,
                    "max_timestamp": now,
                    "size_bytes": size,
                    "state": state.value,
                    "leader_epochs": {"0": s * 10},
                    "writer_token": 1,
                    "event_time": now,
                    "finish_seq": n + 1 if state is finished else None,
                    "custom_metadata": {},
                }
                for n, (pid, s, state, size) in enumerate(segments)
            ],
        )
        gaps = [(1, 5, 9), (1, 8, 12), (1, 20, 20), (4, 0, 3), (5, 0, 99)]  # partition 5: removed
        conn.execute(
            insert(G),
            [{"partition_id": pid, "start_offset": a, "end_offset": b, "detected_ms": now} for pid, a, b in gaps],
        )
        counts = [
            (ORDERS, "orders", 0, 1, 0, now - 5000),
            (ORDERS, "orders", 0, 2, 0, now - 3000),
            (ORDERS, "orders", 1, 1, 2, None),
            (ORDERS, "orders", 1, NO_BROKER, 1, None),
            (GONE, "gone", 0, 1, 7, now - 1000),  # removed, not observed: not shown
            (GONE, "gone", 1, 2, 1, now - 2000),  # removed but observed: shown
            (NOWHERE, "nowhere", 0, NO_BROKER, 4, now),  # neither known nor observed
        ]
        zero = dict.fromkeys(
            (
                "copy_bytes",
                "copy_requests",
                "copy_errors",
                "delete_requests",
                "delete_errors",
                "fetch_bytes",
                "fetch_requests",
                "fetch_errors",
                "index_repairs",
            ),
            0,
        )
        conn.execute(
            insert(COUNTERS),
            [
                {
                    "topic_id": topic_id,
                    "topic": topic,
                    "partition": partition,
                    "broker_id": broker,
                    **zero,
                    "scrub_failures": failures,
                    "last_copy_ms": last_copy,
                    "updated_ms": now,
                }
                for topic_id, topic, partition, broker, failures, last_copy in counts
            ],
        )
    o = [tip(ORDERS, "orders", p) for p in range(4)]
    gone, clicks = tip(GONE, "gone", 1), tip(CLICKS, "clicks", 0)
    store.record_observations(
        [
            observed(0, o[0], epoch=3, lso=100, lag=10),
            observed(1, o[0], epoch=4, lso=50, lag=20),  # the best: the highest epoch
            observed(2, o[0], epoch=9, lso=500, lag=30),  # aged below: stale, not the best
            observed(0, o[1], epoch=None, lso=None, lag=40),
            observed(1, o[1], epoch=2, lso=7, lag=None),  # the best: its lag is unknown
            observed(2, o[1], epoch=2, lso=7, lag=50),  # a tie but for the broker id
            observed(1, o[2], risk=True, lag=5),
            observed(2, o[3], risk=True, lag=6),  # aged below: its risk and lag do not count
            observed(0, gone, lag=1),
            observed(5, clicks, lag=2),  # broker 5: not in the config, stale below
            observed(0, clicks, lag=3),
        ]
    )
    with store.engine.begin() as conn:
        for broker, t in ((2, o[0]), (2, o[3]), (5, clicks)):
            conn.execute(
                update(LATEST)
                .where(LATEST.c.topic_id == t.topic_id, LATEST.c.partition == t.partition, LATEST.c.broker_id == broker)
                .values(observed_ms=LATEST.c.observed_ms - 2 * STALENESS_MS)
            )


def open_context(tmp_path: Path, url: str) -> TieringContext:
    brokers: dict[int, Any] = {}
    for b in range(4):  # broker 3 reports nothing: silent
        (tmp_path / f"broker-{b}").mkdir()
        brokers[b] = {"log_dirs": [str(tmp_path / f"broker-{b}")]}
    config = tmp_path / "tiering.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "brokers": brokers,
                "metadata": {"url": url},
                "remote": {"backend": "filesystem", "root": str(tmp_path / "tier")},
                "cluster": {"observation_staleness_ms": STALENESS_MS},
            }
        )
    )
    return TieringContext.open(load_config(config))


def test_the_overview_is_the_snapshot_s_read_for_less(metadata_url: str, tmp_path: Path) -> None:
    with open_context(tmp_path, metadata_url) as ctx:
        fill(ctx.metadata)
        expected = overview_of(collect_metrics(ctx))
        found = collect_overview(ctx)
    assert abs(found.db_now_ms - expected.db_now_ms) < 60_000
    found.db_now_ms = expected.db_now_ms
    assert found == expected
    # ... and what that is, spelled out.
    assert found == Overview(
        expected.db_now_ms,
        [
            TopicSummary("clicks", 1, 0, 3, 1),
            TopicSummary("gone", 1, 0, 1, 1, last_copy_ms=found.topics[1].last_copy_ms),
            TopicSummary(
                "orders",
                4,
                350,
                20 + 5,
                2,
                gap_partitions=2,
                gap_offsets=8 + 1 + 4,
                at_risk=1,
                last_copy_ms=found.topics[2].last_copy_ms,
            ),
        ],
        gaps=[AlertEntry("orders", "orders-0", 9), AlertEntry("orders", "orders-3", 4)],
        risks=[AlertEntry("orders", "orders-2")],
        stale=[
            AlertEntry("clicks", "clicks-0", 5),
            AlertEntry("orders", "orders-0", 2),
            AlertEntry("orders", "orders-3", 2),
        ],
        scrubs=[AlertEntry("gone", "gone-1", 1), AlertEntry("orders", "orders-1", 3)],
        silent_brokers=[3],
    )
    assert found.topics[2].last_copy_ms is not None and found.topics[1].last_copy_ms is not None
    assert found.topics[2].last_copy_ms > found.topics[1].last_copy_ms - 2000


def test_an_empty_store_and_a_store_gone_stale(metadata_url: str, tmp_path: Path) -> None:
    with open_context(tmp_path, metadata_url) as ctx:
        empty = collect_overview(ctx)
        assert empty == Overview(empty.db_now_ms, [], silent_brokers=[0, 1, 2, 3])
        fill(ctx.metadata)
        with ctx.metadata.engine.begin() as conn:
            conn.execute(update(LATEST).values(observed_ms=LATEST.c.observed_ms - 2 * STALENESS_MS))
        expected = overview_of(collect_metrics(ctx))
        found = collect_overview(ctx)
    found.db_now_ms = expected.db_now_ms
    assert found == expected
    assert found.silent_brokers == [0, 1, 2, 3] and found.risks == []
    assert found.stale == [AlertEntry("clicks", "clicks-0", 5)]  # only the broker outside the config
    assert all(t.copy_lag_bytes is None for t in found.topics)


def test_the_overview_costs_the_same_few_queries_however_many_partitions(tmp_path: Path) -> None:
    """Read set-wise: the statements it runs do not grow with the partitions or the alerts."""
    with (
        open_context(tmp_path, f"sqlite:///{tmp_path / 'm.db'}") as ctx,
        traced_statements(ctx.metadata.engine) as statements,
    ):
        counts = []
        for partitions in (range(0, 3), range(3, 60)):
            tips = [tip(ORDERS, "orders", p) for p in partitions]
            ctx.metadata.record_observations([observed(b, t, risk=True, lag=1) for t in tips for b in range(3)])
            statements.clear()
            found = collect_overview(ctx)
            counts.append(select_count(statements))
        assert found.topics == [TopicSummary("orders", 60, 0, 60, 60, at_risk=60)] and len(found.risks) == 60
    assert 0 < counts[0] == counts[1] <= 6, statements
