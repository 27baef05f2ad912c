"""Replica observations on SQLite and PostgreSQL: the latest per broker and partition is upserted,
the chart series keeps one point per bucket and is pruned past its horizons by the write itself,
the best replica is the highest epoch, then LSO, then lowest broker id among fresh observations,
and an observation from a broker the store does not accept is refused with its whole batch."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, inspect, text

from tests.metadata.support import finish, refused_then_upgraded, segment, tip
from tests.metadata.test_migrations import MIGRATIONS, schema_diffs
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.errors import UnknownBrokerError
from tiering_core.metadata.migrations import current_revision, downgrade, head_revision, upgrade
from tiering_core.metadata.observations import HOUR_MS, MINUTE_MS, SERIES_RESOLUTIONS, best_replica_of
from tiering_core.metadata.store import RemoteLogMetadataStore, ReplicaObservation

A = tip("AAAAAAAAAAAAAAAAAAAAAA", "orders", 0)
B = tip("AAAAAAAAAAAAAAAAAAAAAA", "orders", 1)
C = tip("CCCCCCCCCCCCCCCCCCCCCC", "payments", 0)
FINE, COARSE = (resolution for resolution, _ in SERIES_RESOLUTIONS)


def seen(
    broker: int, at: TopicIdPartition = A, *, epoch: int | None = 3, lso: int | None = 100, **values: object
) -> ReplicaObservation:
    observation = ReplicaObservation(
        broker_id=broker,
        topic_id_partition=at,
        high_watermark=None if lso is None else lso + 5,
        last_stable_offset=lso,
        log_end_offset=(lso or 0) + 10,
        local_log_start_offset=0,
        local_bytes=4096,
        leader_epoch=epoch,
        leader_epoch_start_offset=None if epoch is None else 50,
        at_risk=False,
        headroom_seconds=None,
    )
    return dataclasses.replace(observation, **values)  # type: ignore[arg-type]


@pytest.fixture()
def engine(metadata_url: str) -> Iterator[Engine]:
    e = create_engine(metadata_url)
    yield e
    e.dispose()


def points(engine: Engine, resolution: int | None = None) -> list[tuple[int, int, int, int]]:
    """(broker, partition, resolution, bucket) of every stored series point."""
    where = "" if resolution is None else f" WHERE resolution_ms = {resolution}"
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT broker_id, partition, resolution_ms, bucket_ms FROM tiering_replica_observation_points"
                f"{where} ORDER BY 1, 2, 3, 4"
            )
        )
        return [tuple(r) for r in rows]  # type: ignore[misc]


def age(engine: Engine, broker: int, by_ms: int) -> None:
    """Make a broker's latest observations ``by_ms`` older, as if its last run was that long ago."""
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE tiering_replica_observations SET observed_ms = observed_ms - :by WHERE broker_id = :b"),
            {"by": by_ms, "b": broker},
        )


def test_a_run_records_all_its_partitions_and_the_next_run_replaces_them(
    store: RemoteLogMetadataStore, engine: Engine
) -> None:
    before = store.database_now_ms()
    stamp = store.record_observations(
        [seen(1, A, at_risk=True, headroom_seconds=12.5), seen(1, B, lso=None), seen(1, C, epoch=None)]
    )
    assert before <= stamp <= store.database_now_ms()
    latest = store.latest_observations()
    assert set(latest.replicas) == {A, B, C} and latest.db_now_ms >= stamp
    a = latest.replicas[A][1]
    assert a == seen(1, A, at_risk=True, headroom_seconds=12.5, observed_ms=stamp)
    assert latest.replicas[B][1].last_stable_offset is None and latest.replicas[B][1].high_watermark is None
    assert latest.replicas[C][1].leader_epoch is None and latest.replicas[C][1].leader_epoch_start_offset is None

    again = store.record_observations([seen(1, A, lso=200, epoch=4), seen(2, A, lso=150)])
    replicas, _ = store.observations_of(A)
    assert sorted(replicas) == [1, 2]
    assert replicas[1] == seen(1, A, lso=200, epoch=4, observed_ms=again)
    assert replicas[2].last_stable_offset == 150
    with engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM tiering_replica_observations")).scalar() == 4
    assert set(store.latest_observations(topic="orders").replicas) == {A, B}
    assert list(store.latest_observations(topic="payments").replicas) == [C]
    assert store.latest_observations(topic="nope").replicas == {}
    assert store.latest_observations(A).replicas == {A: replicas}
    assert store.latest_observations(tip("ZZZZZZZZZZZZZZZZZZZZZZ")).replicas == {}
    assert store.record_observations([]) >= again
    # Two observations of one replica in a batch: the later counts.
    store.record_observations([seen(1, C, lso=7), seen(1, C, lso=9)])
    assert store.latest_observations(C).replicas[C][1].last_stable_offset == 9


def test_the_series_keeps_one_point_per_bucket_and_prunes_past_its_horizons(
    store: RemoteLogMetadataStore, engine: Engine
) -> None:
    for lso in (100, 110, 120):  # three runs within one bucket: one point per resolution, the last one
        now = store.record_observations([seen(1, A, lso=lso), seen(2, A, lso=lso - 5)])
    assert [(b, r) for b, _, r, _ in points(engine)] == [(1, FINE), (1, COARSE), (2, FINE), (2, COARSE)]
    series = store.observation_series(A)
    assert [[o.last_stable_offset for o in series[b]] for b in (1, 2)] == [[120], [115]]

    # Points earlier runs left: inside and past each resolution's horizon, for a partition this
    # run does not observe too (the write prunes them all).
    day, week = 24 * HOUR_MS, 7 * 24 * HOUR_MS
    old = {
        (FINE, now - now % FINE - 10 * FINE): True,  # 50 minutes ago: kept
        (FINE, now - day + FINE): True,  # just inside 24 h: kept
        (FINE, now - day - FINE): False,  # past 24 h: pruned (the hourly point covers it)
        (COARSE, now - now % COARSE - 30 * HOUR_MS): True,  # 30 h ago: kept
        (COARSE, now - week + HOUR_MS): True,
        (COARSE, now - week - HOUR_MS): False,
        (COARSE, now - 30 * week): False,
    }
    with engine.begin() as conn:
        for partition in (0, 1):
            for resolution, bucket in old:
                conn.execute(
                    text(
                        "INSERT INTO tiering_replica_observation_points (topic_id, partition, broker_id, "
                        "resolution_ms, bucket_ms, high_watermark, last_stable_offset, log_end_offset, "
                        "local_log_start_offset, local_bytes, leader_epoch, leader_epoch_start_offset, at_risk, "
                        "headroom_seconds, observed_ms) VALUES (:tid, :p, 1, :r, :b, 1, 1, 1, 0, 1, 0, 0, false, "
                        "NULL, :b)"
                    ),
                    {"tid": A.topic_id, "p": partition, "r": resolution, "b": bucket},
                )
    assert len(points(engine)) == 4 + 2 * len(old)
    store.record_observations([seen(2, C)])
    kept = {(r, b) for broker, p, r, b in points(engine) if broker == 1}
    assert kept == {key for key, keep in old.items() if keep} | {(FINE, now - now % FINE), (COARSE, now - now % COARSE)}
    for resolution, horizon in SERIES_RESOLUTIONS:
        assert all(b >= now - horizon for _, _, r, b in points(engine, resolution) if r == resolution)

    # The chart: hourly points older than a day, then the 5-minute points, in time order.
    chart = [o.observed_ms for o in store.observation_series(A)[1]]
    assert chart == sorted(chart)
    assert chart == sorted([b for (r, b), keep in old.items() if keep and (r == FINE or b < now - day)] + [chart[-1]])
    assert chart[-1] >= now


def test_the_series_stays_bounded_per_replica(store: RemoteLogMetadataStore, engine: Engine) -> None:
    """A replica observed every 5 minutes for 8 days holds at most a day of 5-minute points and a
    week of hourly ones, whatever was written before."""
    now = store.database_now_ms()
    with engine.begin() as conn:
        for resolution, _ in SERIES_RESOLUTIONS:
            newest = now - now % resolution
            conn.execute(
                text(
                    "INSERT INTO tiering_replica_observation_points (topic_id, partition, broker_id, "
                    "resolution_ms, bucket_ms, high_watermark, last_stable_offset, log_end_offset, "
                    "local_log_start_offset, local_bytes, leader_epoch, leader_epoch_start_offset, at_risk, "
                    "headroom_seconds, observed_ms) VALUES (:tid, 0, 1, :r, :b, 1, 1, 1, 0, 1, 0, 0, false, NULL, :b)"
                ),
                [
                    {"tid": A.topic_id, "r": resolution, "b": newest - i * resolution}
                    for i in range(1, 8 * 24 * HOUR_MS // resolution)
                ],
            )
    store.record_observations([seen(1)])
    fine, coarse = points(engine, FINE), points(engine, COARSE)
    assert 24 * HOUR_MS // FINE <= len(fine) <= 24 * HOUR_MS // FINE + 1
    assert 7 * 24 <= len(coarse) <= 7 * 24 + 1
    assert 5 * MINUTE_MS == FINE and HOUR_MS == COARSE


def test_best_replica_highest_epoch_then_lso_then_lowest_broker(store: RemoteLogMetadataStore) -> None:
    assert store.best_replica(A, staleness_ms=60_000) is None
    store.record_observations([seen(3, lso=100, epoch=5), seen(1, lso=900, epoch=4), seen(2, lso=100, epoch=5)])
    best = store.best_replica(A, staleness_ms=60_000)
    assert best is not None and best.broker_id == 2  # epoch 5 beats a higher LSO at epoch 4; tie -> lowest id
    store.record_observations([seen(3, lso=101, epoch=5)])
    best = store.best_replica(A, staleness_ms=60_000)
    assert best is not None and (best.broker_id, best.last_stable_offset) == (3, 101)
    # An unknown LSO or an empty epoch cache ranks below any known one.
    store.record_observations([seen(1, lso=None, epoch=9), seen(2, lso=5000, epoch=None), seen(3, lso=None, epoch=9)])
    best = store.best_replica(A, staleness_ms=60_000)
    assert best is not None and best.broker_id == 1
    store.record_observations([seen(4, lso=0, epoch=9)])
    best = store.best_replica(A, staleness_ms=60_000)
    assert best is not None and best.broker_id == 4
    # The same rule over a cluster view read once.
    latest = store.latest_observations()
    chosen = best_replica_of(latest.replicas[A].values(), now_ms=latest.db_now_ms, staleness_ms=60_000)
    assert chosen is not None and chosen.broker_id == 4


def test_a_stale_observation_does_not_count(store: RemoteLogMetadataStore, engine: Engine) -> None:
    store.record_observations([seen(1, lso=100, epoch=3), seen(2, lso=500, epoch=7)])
    age(engine, 2, 3 * 60_000)  # broker 2 last reported three minutes ago
    best = store.best_replica(A, staleness_ms=120_000)
    assert best is not None and best.broker_id == 1
    best = store.best_replica(A, staleness_ms=240_000)
    assert best is not None and best.broker_id == 2
    age(engine, 1, 3 * 60_000)
    assert store.best_replica(A, staleness_ms=120_000) is None
    replicas, db_now = store.observations_of(A)
    assert all(o.age_ms(db_now) >= 3 * 60_000 for o in replicas.values())
    with pytest.raises(ValueError, match="staleness"):
        store.best_replica(A, staleness_ms=-1)


@pytest.mark.parametrize(
    ("broker", "allowed", "match"),
    [
        (-1, None, r"broker id -1 is not a Kafka broker id"),
        (True, None, r"broker id True is not a Kafka broker id"),
        (7, {1, 2, 3}, r"broker 7 is not one of the configured brokers \(1, 2, 3\)"),
        (0, {1}, r"broker 0 is not one of the configured brokers \(1\)"),
    ],
)
def test_an_observation_from_a_broker_the_store_does_not_accept_is_refused_with_its_batch(
    store: RemoteLogMetadataStore, engine: Engine, broker: int, allowed: set[int] | None, match: str
) -> None:
    with pytest.raises(UnknownBrokerError, match=rf"observation of orders-1\(A+\) refused: {match}"):
        store.record_observations([seen(1, A), seen(broker, B)], brokers=allowed)  # type: ignore[arg-type]
    assert store.latest_observations().replicas == {}
    assert points(engine) == []
    store.record_observations([seen(2, A)], brokers={1, 2, 3})
    assert list(store.latest_observations().replicas[A]) == [2]


def test_a_database_made_before_observations_upgrades_and_keeps_its_data(metadata_url: str) -> None:
    """A store from the revision before observations (whatever precedes them in the chain) is
    refused on open; upgraded, it keeps its partitions and segments, records observations; and the
    way back."""
    before = ScriptDirectory(str(MIGRATIONS)).get_revision("0004_observations").down_revision
    assert isinstance(before, str)
    upgrade(metadata_url, before)
    engine = create_engine(metadata_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO tiering_partitions (id, topic_id, topic, partition, delete_state, dropped, "
                    "lease_holder, lease_token, lease_expires_ms, fencing_counter, remote_log_start_offset, "
                    "finish_counter) VALUES (1, :tid, 'orders', 0, NULL, false, NULL, 2, 0, 2, NULL, 0)"
                ),
                {"tid": A.topic_id},
            )
        refused_then_upgraded(metadata_url, before)
        with RemoteLogMetadataStore(metadata_url) as store:
            assert current_revision(metadata_url) == head_revision()
            assert schema_diffs(engine) == []
            lease = store.acquire_lease(A, "after-upgrade")
            assert lease.token == 3
            finish(store, lease, segment(A, 0, 99))
            store.record_observations([seen(1, A), seen(2, A)])
            best = store.best_replica(A, staleness_ms=60_000)
            assert best is not None and best.broker_id == 1
        downgrade(metadata_url, before)
        with engine.connect() as conn:
            tables = set(inspect(engine).get_table_names())
            assert not {"tiering_replica_observations", "tiering_replica_observation_points"} & tables
            assert conn.execute(text("SELECT COUNT(*) FROM tiering_segments")).scalar() == 1
        upgrade(metadata_url)
        with RemoteLogMetadataStore(metadata_url) as store:
            assert store.latest_observations().replicas == {}
            assert store.segment_for(A, 0, 50) is not None
    finally:
        engine.dispose()


def test_runs_recording_overlapping_replicas_at_once_do_not_deadlock(store: RemoteLogMetadataStore) -> None:
    """A status and a planning run on one broker, listing the same partitions in opposite orders."""
    tips = [tip("AAAAAAAAAAAAAAAAAAAAAA", "orders", p) for p in range(40)]
    failures: list[BaseException] = []

    def runs(order: list[TopicIdPartition], lso: int) -> None:
        try:
            for _ in range(15):
                store.record_observations([seen(1, t, lso=lso) for t in order])
        except BaseException as exc:
            failures.append(exc)

    threads = [
        threading.Thread(target=runs, args=(tips, 100)),
        threading.Thread(target=runs, args=(tips[::-1], 200)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert failures == []
    latest = store.latest_observations()
    assert len(latest.replicas) == 40
    assert {o.last_stable_offset for r in latest.replicas.values() for o in r.values()} <= {100, 200}


def test_an_older_observation_landing_late_does_not_replace_a_newer_one(
    store: RemoteLogMetadataStore, engine: Engine
) -> None:
    """A run whose transaction read the database clock before another's but commits after it."""
    stamp = store.record_observations([seen(1, lso=100)])
    with engine.begin() as conn:  # the newer observation, as if recorded a minute from now
        conn.execute(
            text("UPDATE tiering_replica_observations SET observed_ms = :later, last_stable_offset = 500"),
            {"later": stamp + 60_000},
        )
        conn.execute(
            text("UPDATE tiering_replica_observation_points SET observed_ms = :later, last_stable_offset = 500"),
            {"later": stamp + 60_000},
        )
    store.record_observations([seen(1, lso=300)])
    replicas, _ = store.observations_of(A)
    assert (replicas[1].last_stable_offset, replicas[1].observed_ms) == (500, stamp + 60_000)
    assert [o.last_stable_offset for o in store.observation_series(A)[1]] == [500]


def test_the_health_figures_read_only_fresh_replicas_at_risk_or_measuring_a_headroom(
    store: RemoteLogMetadataStore, engine: Engine
) -> None:
    store.record_observations(
        [
            seen(1, A, at_risk=True, headroom_seconds=-5.0, copy_lag_bytes=700),
            seen(1, B, headroom_seconds=600.0),
            seen(1, C),  # nothing waits under a time limit: not read
            seen(2, A, headroom_seconds=30.0),
        ]
    )
    age(engine, 2, 10 * MINUTE_MS)  # broker 2's observation is stale at a 5-minute staleness
    now, rows = store.waiting_rows(staleness_ms=5 * MINUTE_MS)
    by_replica = {(r[0], r[1], r[2]): r[3:6] for r in rows}
    assert by_replica == {("orders", 0, 1): (True, -5.0, 700), ("orders", 1, 1): (False, 600.0, None)}
    assert all(now - 5 * MINUTE_MS <= r[6] <= now for r in rows)
    assert len(store.waiting_rows(staleness_ms=HOUR_MS)[1]) == 3  # broker 2 fresh enough now
    assert [r[2] for r in store.waiting_rows(staleness_ms=HOUR_MS, broker=2)[1]] == [2]
    assert store.waiting_rows(staleness_ms=HOUR_MS, topic="payments")[1] == []
    assert store.observing_brokers() == [1, 2]
