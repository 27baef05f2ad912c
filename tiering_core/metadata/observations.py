"""Replica observations: what each broker's runs saw of their replicas, and the best replica.

Every run on a broker (copy, retention, status, the sensor's planning) records, per partition it
looked at, one ``ReplicaObservation`` stamped with the database clock (as leases are, so ages
agree across hosts). A run's observations are recorded in one transaction.

History is bounded:
- the latest observation per (broker, partition) is overwritten by the next (upsert);
- a downsampled series for charts keeps, per broker and partition, one point per 5-minute bucket
  for the last 24 hours and one per hour for 7 days (each bucket holds its latest observation);
  the write that records new points deletes the points past their horizon, through an index on
  (resolution, bucket), so a replica never has more than about 290 + 170 points.

The best replica of a partition (``best_replica_of``, one rule for the store's query and for a
cluster view built from ``latest_observations``): the highest leader epoch, then the highest LSO,
ties to the lowest broker id; an observation older than the staleness does not count.

A broker id is a non-negative integer (Kafka's ``node.id``); a caller that knows its cluster passes
the ids it allows, and an observation from any other broker is refused with the whole batch.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from functools import cached_property
from typing import Any

from sqlalchemy import Dialect, Table, bindparam, delete, or_, select
from sqlalchemy.dialects import postgresql, sqlite

from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.errors import UnknownBrokerError
from tiering_core.metadata.listing import collector_paused
from tiering_core.metadata.models import ReplicaObservationPointRow, ReplicaObservationRow
from tiering_core.metadata.queries import DriverQuery, Statements
from tiering_core.metadata.transactions import StoreCore, tip_params
from tiering_core.metadata.values import ClusterObservations, ReplicaObservation

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
#: The series' resolutions and how long each keeps its points: (bucket width, horizon), in ms.
SERIES_RESOLUTIONS: tuple[tuple[int, int], ...] = ((5 * MINUTE_MS, 24 * HOUR_MS), (HOUR_MS, 7 * 24 * HOUR_MS))

_latest = ReplicaObservationRow.__table__
_points = ReplicaObservationPointRow.__table__
assert isinstance(_latest, Table) and isinstance(_points, Table)
LATEST: Table = _latest
POINTS: Table = _points

#: The lags, remote size and retention percents a run computed (nullable), in
#: ``ReplicaObservation``'s field order.
LAG_COLUMNS = (
    "copy_lag_bytes",
    "copy_lag_segments",
    "delete_lag_bytes",
    "delete_lag_segments",
    "remote_bytes",
    "remote_segments",
    "retention_size_percent",
    "local_retention_size_percent",
)
#: The observed values, in the order of ``ReplicaObservation``'s fields after the partition.
VALUE_COLUMNS = (
    "high_watermark",
    "last_stable_offset",
    "log_end_offset",
    "local_log_start_offset",
    "local_bytes",
    "leader_epoch",
    "leader_epoch_start_offset",
    "at_risk",
    "headroom_seconds",
    "observed_ms",
    *LAG_COLUMNS,
)
ROW_COLUMNS = ("topic_id", "topic", "partition", "broker_id", *VALUE_COLUMNS)


def replica_rank(leader_epoch: int | None, last_stable_offset: int | None, broker_id: int) -> tuple[int, int, int]:
    """Sorts the best replica first: highest leader epoch, highest LSO, lowest broker id (the rule
    of ``best_replica_of``, for callers ranking plain rows)."""
    epoch = -1 if leader_epoch is None else leader_epoch
    lso = -1 if last_stable_offset is None else last_stable_offset
    return (-epoch, -lso, broker_id)


def is_fresh(observed_ms: int, now_ms: int, staleness_ms: int) -> bool:
    """An observation made at ``observed_ms`` still counts at ``now_ms`` (database clock)."""
    return now_ms - observed_ms <= staleness_ms


def _rank(observation: ReplicaObservation) -> tuple[int, int, int]:
    return replica_rank(observation.leader_epoch, observation.last_stable_offset, observation.broker_id)


def best_replica_of(
    observations: Iterable[ReplicaObservation], *, now_ms: int, staleness_ms: int
) -> ReplicaObservation | None:
    """The best fresh replica among one partition's observations (module docstring), or None
    when none was observed within ``staleness_ms`` of ``now_ms`` (the database clock)."""
    if isinstance(staleness_ms, bool) or not isinstance(staleness_ms, int) or staleness_ms < 0:
        raise ValueError(f"staleness must be a non-negative number of milliseconds, not {staleness_ms!r}")
    fresh = [o for o in observations if is_fresh(o.observed_ms, now_ms, staleness_ms)]
    return min(fresh, key=_rank, default=None)


def check_broker_id(broker_id: object, allowed: Collection[int] | None, what: object) -> int:
    """``broker_id`` if the store accepts it (module docstring); UnknownBrokerError otherwise."""
    if isinstance(broker_id, bool) or not isinstance(broker_id, int) or broker_id < 0:
        raise UnknownBrokerError(
            f"observation of {what} refused: broker id {broker_id!r} is not a Kafka broker id (a non-negative integer)"
        )
    if allowed is not None and broker_id not in allowed:
        known = ", ".join(str(b) for b in sorted(allowed)) or "none"
        raise UnknownBrokerError(
            f"observation of {what} refused: broker {broker_id} is not one of the configured brokers ({known})"
        )
    return broker_id


def observation_from_row(row: Sequence[Any], tip: TopicIdPartition) -> ReplicaObservation:
    """A value from a row of ``ROW_COLUMNS`` (the tip given, shared by its brokers' rows)."""
    (_, _, _, broker, hw, lso, leo, start, size, epoch, epoch_start, risk, headroom, observed, *lags) = row
    return ReplicaObservation(
        broker,
        tip,
        hw,
        lso,
        leo,
        start,
        size,
        epoch,
        epoch_start,
        bool(risk),
        None if headroom is None else float(headroom),
        int(observed),
        *lags,
    )


class ObservationStatements:
    """The observation statements for one dialect, built once per store."""

    def __init__(self, dialect: Dialect, q: Statements) -> None:
        dialect_insert = postgresql.insert if dialect.name == "postgresql" else sqlite.insert
        upsert: Any = dialect_insert(LATEST)
        # A run whose transaction read the clock earlier but commits later does not overwrite a
        # newer observation.
        self.upsert_latest = upsert.on_conflict_do_update(
            index_elements=["topic_id", "partition", "broker_id"],
            set_={name: upsert.excluded[name] for name in VALUE_COLUMNS},
            where=LATEST.c.observed_ms <= upsert.excluded.observed_ms,
        )
        point: Any = dialect_insert(POINTS)
        self.upsert_point = point.on_conflict_do_update(
            index_elements=["topic_id", "partition", "broker_id", "resolution_ms", "bucket_ms"],
            set_={name: point.excluded[name] for name in VALUE_COLUMNS},
            where=POINTS.c.observed_ms <= point.excluded.observed_ms,
        )
        self.prune_points = delete(POINTS).where(
            POINTS.c.resolution_ms == bindparam("res"), POINTS.c.bucket_ms < bindparam("horizon")
        )
        columns = [LATEST.c[name] for name in ROW_COLUMNS]
        self.latest_of = select(*columns, q.now.label("db_now")).where(
            LATEST.c.topic_id == bindparam("tid"), LATEST.c.partition == bindparam("part")
        )
        self.latest_all = DriverQuery(select(*columns), dialect)
        self.latest_of_topic = DriverQuery(select(*columns).where(LATEST.c.topic == bindparam("topic")), dialect)
        self.series_of = (
            select(POINTS.c.broker_id, POINTS.c.resolution_ms, *(POINTS.c[name] for name in VALUE_COLUMNS))
            .where(POINTS.c.topic_id == bindparam("tid"), POINTS.c.partition == bindparam("part"))
            .order_by(POINTS.c.broker_id, POINTS.c.observed_ms)
        )


class ObservationStore(StoreCore):
    """Recording replica observations and reading them back (module docstring)."""

    @cached_property
    def _oq(self) -> ObservationStatements:
        return ObservationStatements(self.engine.dialect, self._q)

    def record_observations(
        self, observations: Sequence[ReplicaObservation], *, brokers: Collection[int] | None = None
    ) -> int:
        """Record a run's observations in one transaction, each replacing its replica's latest and
        landing in the series; prunes the series past its horizons. Returns the database clock
        that stamps them. ``brokers``: the broker ids the caller's cluster has (None: any);
        UnknownBrokerError (nothing recorded) for an observation from another. Of two observations
        of one replica in the batch the later counts.

        Rows are written in key order, so two runs writing overlapping replicas at once (a status
        beside a copy on one broker) lock them in the same order and never deadlock.
        """
        replicas: dict[tuple[str, int, int], ReplicaObservation] = {}
        for o in observations:
            check_broker_id(o.broker_id, brokers, o.topic_id_partition)
            replicas[(o.topic_id_partition.topic_id, o.topic_id_partition.partition, o.broker_id)] = o
        if not replicas:
            return self.database_now_ms()
        ordered = [replicas[key] for key in sorted(replicas)]
        with self._write() as conn:
            db_now = self._db_now(conn)
            rows = [
                {
                    "topic_id": o.topic_id_partition.topic_id,
                    "topic": o.topic_id_partition.topic,
                    "partition": o.topic_id_partition.partition,
                    "broker_id": o.broker_id,
                    "high_watermark": o.high_watermark,
                    "last_stable_offset": o.last_stable_offset,
                    "log_end_offset": o.log_end_offset,
                    "local_log_start_offset": o.local_log_start_offset,
                    "local_bytes": o.local_bytes,
                    "leader_epoch": o.leader_epoch,
                    "leader_epoch_start_offset": o.leader_epoch_start_offset,
                    "at_risk": bool(o.at_risk),
                    "headroom_seconds": o.headroom_seconds,
                    "observed_ms": db_now,
                    **{name: getattr(o, name) for name in LAG_COLUMNS},
                }
                for o in ordered
            ]
            conn.execute(self._oq.upsert_latest, rows)
            points = []
            for resolution, _ in SERIES_RESOLUTIONS:
                bucket = db_now - db_now % resolution
                for row in rows:
                    point = dict(row, resolution_ms=resolution, bucket_ms=bucket)
                    del point["topic"]
                    points.append(point)
            conn.execute(self._oq.upsert_point, points)
            conn.execute(
                self._oq.prune_points,
                [{"res": res, "horizon": db_now - horizon} for res, horizon in SERIES_RESOLUTIONS],
            )
        return db_now

    def database_now_ms(self) -> int:
        """The database clock (ms): observations' ages are measured against it."""
        with self._read() as conn:
            return self._db_now(conn)

    def observations_of(self, tip: TopicIdPartition) -> tuple[dict[int, ReplicaObservation], int]:
        """The latest observation of each broker's replica of ``tip``, and the database clock."""
        with self._read() as conn:
            rows = conn.execute(self._oq.latest_of, self._clock(tip_params(tip))).all()
            db_now = int(rows[0].db_now) if rows else self._db_now(conn)
        return {r.broker_id: observation_from_row(tuple(r)[:-1], tip) for r in rows}, db_now

    def best_replica(self, tip: TopicIdPartition, *, staleness_ms: int) -> ReplicaObservation | None:
        """The best fresh replica of ``tip`` (``best_replica_of`` against the database clock), or
        None when no broker observed it within ``staleness_ms``."""
        replicas, db_now = self.observations_of(tip)
        return best_replica_of(replicas.values(), now_ms=db_now, staleness_ms=staleness_ms)

    def latest_observation_rows(self, *, topic: str | None = None) -> tuple[int, list[tuple[Any, ...]]]:
        """The database clock and the latest observation of every replica (or one topic's) as
        plain tuples of ``ROW_COLUMNS``: for figures over tens of thousands of replicas."""
        with self._read() as conn:
            db_now = self._db_now(conn)
            if topic is None:
                return db_now, self._oq.latest_all.rows(conn, {})
            return db_now, self._oq.latest_of_topic.rows(conn, {"topic": topic})

    def latest_observations(
        self, tip: TopicIdPartition | None = None, *, topic: str | None = None
    ) -> ClusterObservations:
        """The latest observation of every replica (of one partition, of one topic, or all), per
        partition and broker, with the database clock they are to be judged by."""
        if tip is not None:
            replicas, db_now = self.observations_of(tip)
            return ClusterObservations(db_now, {tip: replicas} if replicas else {})
        db_now, rows = self.latest_observation_rows(topic=topic)
        # Rows to values with the collector paused (tens of thousands of objects would trigger
        # collections that walk them all), each partition's key built and hashed once.
        by_tip: dict[TopicIdPartition, dict[int, ReplicaObservation]] = {}
        partitions: dict[tuple[str, int], tuple[TopicIdPartition, dict[int, ReplicaObservation]]] = {}
        with collector_paused:
            for row in rows:
                (
                    topic_id,
                    topic,
                    partition,
                    broker,
                    hw,
                    lso,
                    leo,
                    start,
                    size,
                    epoch,
                    epoch_start,
                    risk,
                    room,
                    at,
                    *lags,
                ) = row
                known = partitions.get((topic_id, partition))
                if known is None:
                    tip_of_row = TopicIdPartition(topic_id, TopicPartition(topic, partition))
                    known = partitions[(topic_id, partition)] = (tip_of_row, {})
                    by_tip[tip_of_row] = known[1]
                known[1][broker] = ReplicaObservation(
                    broker,
                    known[0],
                    hw,
                    lso,
                    leo,
                    start,
                    size,
                    epoch,
                    epoch_start,
                    bool(risk),
                    None if room is None else float(room),
                    int(at),
                    *lags,
                )
        return ClusterObservations(db_now, by_tip)

    def waiting_rows(
        self, *, staleness_ms: int, topic: str | None = None, broker: int | None = None
    ) -> tuple[int, list[tuple[Any, ...]]]:
        """The database clock and the fresh replicas (of one topic, one broker, or all) at
        local-retention risk or measuring a headroom (closed segments wait for copy under a local
        time limit), as (topic, partition, broker id, at risk, headroom seconds, copy lag bytes,
        observed ms): the only replicas the page's health figures need, read without the rest."""
        c = LATEST.c
        query = select(
            c.topic, c.partition, c.broker_id, c.at_risk, c.headroom_seconds, c.copy_lag_bytes, c.observed_ms
        )
        query = query.where(c.observed_ms >= bindparam("since"), or_(c.at_risk, c.headroom_seconds.is_not(None)))
        if topic is not None:
            query = query.where(c.topic == bindparam("topic"))
        if broker is not None:
            query = query.where(c.broker_id == bindparam("broker"))
        with self._read() as conn:
            db_now = self._db_now(conn)
            params = {"since": db_now - staleness_ms, "topic": topic, "broker": broker}
            rows = conn.execute(query, {k: v for k, v in params.items() if v is not None or k == "since"}).all()
        return db_now, [tuple(row) for row in rows]

    def observing_brokers(self) -> list[int]:
        """Every broker with a latest observation in the store, by id."""
        with self._read() as conn:
            return sorted(int(b) for b in conn.execute(select(LATEST.c.broker_id).distinct()).scalars())

    def observation_series(self, tip: TopicIdPartition) -> dict[int, list[ReplicaObservation]]:
        """Per broker, the chart series of ``tip`` in time order: hourly points older than the
        finest resolution's horizon, then the 5-minute points."""
        finest, horizon = SERIES_RESOLUTIONS[0]
        with self._read() as conn:
            db_now = self._db_now(conn)
            rows = conn.execute(self._oq.series_of, tip_params(tip)).all()
        series: dict[int, list[ReplicaObservation]] = {}
        for r in rows:
            if r.resolution_ms != finest and r.observed_ms >= db_now - horizon:
                continue  # the finer series covers this time
            values = tuple(r)[2:]
            series.setdefault(r.broker_id, []).append(
                observation_from_row((None, None, None, r.broker_id, *values), tip)
            )
        return series
