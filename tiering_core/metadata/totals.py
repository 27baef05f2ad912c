"""Set-wise figures over every partition at once, for metrics and the Tiering page.

Each read is one aggregate query over the whole store (or one topic), never one per partition,
so a snapshot of ten thousand partitions costs a handful of statements:

- ``figure_rows``: what a metrics snapshot needs, on one connection: the latest observations,
  per partition its record (delete state, tombstone) and, over its live segments (from the index
  of live segments), the finished ones' number and bytes (the remote log size) and all of them
  (the metadata entries kept), every recorded tiering gap, and the counters;
- ``finished_totals``: the remote log size of a batch of partitions (a run's);
- ``series_totals``: a topic's chart: per bucket of one resolution, the sum over its partitions
  of each partition's highest remote size and copy lag among its replicas' points;
- ``topic_names``: every topic the store knows (tiered or observed).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sqlalchemy import ColumnElement, Dialect, bindparam, case, func, literal_column, select, union

from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.counters import COUNT_COLUMNS, COUNTERS, TASK_COLUMNS
from tiering_core.metadata.observations import LATEST, POINTS
from tiering_core.metadata.queries import IS_FINISHED, LIVE, DriverQuery, G, P, S
from tiering_core.metadata.transactions import StoreCore

#: A row of ``FigureRows.partitions``: the partition's record and its live segments' figures.
PARTITION_FIGURE_COLUMNS = (
    "id",
    "topic_id",
    "topic",
    "partition",
    "delete_state",
    "dropped",
    "remote_segments",
    "remote_bytes",
    "metadata_count",
)


#: A row of ``FigureRows.observations``: a replica's latest observation, what a snapshot shows of it.
OBSERVATION_FIGURE_COLUMNS = (
    "topic_id",
    "topic",
    "partition",
    "broker_id",
    "high_watermark",
    "last_stable_offset",
    "log_end_offset",
    "local_log_start_offset",
    "leader_epoch",
    "at_risk",
    "headroom_seconds",
    "observed_ms",
    "copy_lag_bytes",
    "copy_lag_segments",
    "delete_lag_bytes",
    "delete_lag_segments",
)
#: A row of ``FigureRows.counters``: a replica's counters row but the topic name (without the
#: last task's columns, ``last_task_ms`` on, when the task is not asked for).
COUNTER_FIGURE_COLUMNS = (
    "topic_id",
    "partition",
    "broker_id",
    *COUNT_COLUMNS,
    "last_copy_ms",
    "last_task_ms",
    *TASK_COLUMNS,
)
_COUNT_FIGURE_COLUMNS = COUNTER_FIGURE_COLUMNS[: COUNTER_FIGURE_COLUMNS.index("last_task_ms")]


@dataclass(frozen=True, slots=True)
class FigureRows:
    """Everything a metrics snapshot is computed from, read in one go as plain tuples (only the
    columns it shows: each one more costs a few ms per ten thousand rows): the database clock,
    the latest observations (``OBSERVATION_FIGURE_COLUMNS``), the partitions
    (``PARTITION_FIGURE_COLUMNS``), the gaps (partition row id, start, end) and the counters
    (``COUNTER_FIGURE_COLUMNS``)."""

    db_now_ms: int
    observations: list[tuple[Any, ...]]
    partitions: list[tuple[Any, ...]]
    gaps: list[tuple[Any, ...]]
    counters: list[tuple[Any, ...]]


class TotalsStatements:
    """The aggregate statements for one dialect, built once per store."""

    def __init__(self, dialect: Dialect) -> None:
        one: ColumnElement[int] = literal_column("1")
        zero: ColumnElement[int] = literal_column("0")  # literals: a DriverQuery binds only named values
        finished = case((IS_FINISHED, one), else_=zero)
        totals = (
            select(
                P.c.id,
                P.c.topic_id,
                P.c.topic,
                P.c.partition,
                P.c.delete_state,
                P.c.dropped,
                func.coalesce(func.sum(finished), zero),
                func.coalesce(func.sum(case((IS_FINISHED, S.c.size_bytes), else_=zero)), zero),
                func.count(S.c.segment_id),
            )
            .select_from(P.outerjoin(S, (S.c.partition_id == P.c.id) & LIVE))
            .group_by(P.c.id, P.c.topic_id, P.c.topic, P.c.partition, P.c.delete_state, P.c.dropped)
        )
        self.totals_all = DriverQuery(totals, dialect)
        self.totals_of_topic = DriverQuery(totals.where(P.c.topic == bindparam("topic")), dialect)
        observations = select(*(LATEST.c[name] for name in OBSERVATION_FIGURE_COLUMNS))
        self.observations_all = DriverQuery(observations, dialect)
        self.observations_of_topic = DriverQuery(observations.where(LATEST.c.topic == bindparam("topic")), dialect)
        counters = select(*(COUNTERS.c[name] for name in COUNTER_FIGURE_COLUMNS))
        self.counters_all = DriverQuery(counters, dialect)
        self.counters_of_topic = DriverQuery(counters.where(COUNTERS.c.topic == bindparam("topic")), dialect)
        counts = select(*(COUNTERS.c[name] for name in _COUNT_FIGURE_COLUMNS))
        self.counts_all = DriverQuery(counts, dialect)
        self.counts_of_topic = DriverQuery(counts.where(COUNTERS.c.topic == bindparam("topic")), dialect)
        self.finished_of = (
            select(P.c.topic_id, P.c.partition, func.count(), func.coalesce(func.sum(S.c.size_bytes), zero))
            .select_from(P.join(S, (S.c.partition_id == P.c.id) & LIVE & IS_FINISHED))
            .where(P.c.topic_id.in_(bindparam("ids", expanding=True)))
            .group_by(P.c.id, P.c.topic_id, P.c.partition)
        )
        gaps = select(G.c.partition_id, G.c.start_offset, G.c.end_offset)
        self.gaps_all = DriverQuery(gaps, dialect)
        self.gaps_of_topic = DriverQuery(
            gaps.join(P, P.c.id == G.c.partition_id).where(P.c.topic == bindparam("topic")), dialect
        )
        topic_ids = union(
            select(P.c.topic_id).where(P.c.topic == bindparam("topic")),
            select(LATEST.c.topic_id).where(LATEST.c.topic == bindparam("topic")),
        ).subquery()
        per_partition = (
            select(
                POINTS.c.bucket_ms,
                func.max(POINTS.c.remote_bytes).label("remote_bytes"),
                func.max(POINTS.c.copy_lag_bytes).label("copy_lag_bytes"),
            )
            .where(
                POINTS.c.topic_id.in_(select(topic_ids.c.topic_id)),
                POINTS.c.resolution_ms == bindparam("res"),
                POINTS.c.bucket_ms >= bindparam("since"),
            )
            .group_by(POINTS.c.bucket_ms, POINTS.c.topic_id, POINTS.c.partition)
            .subquery()
        )
        self.series = DriverQuery(
            select(
                per_partition.c.bucket_ms,
                func.coalesce(func.sum(per_partition.c.remote_bytes), literal_column("0")),
                func.coalesce(func.sum(per_partition.c.copy_lag_bytes), literal_column("0")),
            )
            .group_by(per_partition.c.bucket_ms)
            .order_by(per_partition.c.bucket_ms),
            dialect,
        )
        names = union(
            select(P.c.topic).where(P.c.dropped == literal_column("false" if dialect.name == "postgresql" else "0")),
            select(LATEST.c.topic),
        ).subquery()
        self.topic_names = DriverQuery(select(names.c.topic).order_by(names.c.topic), dialect)


class TotalsStore(StoreCore):
    """Aggregate reads over every partition (module docstring)."""

    @cached_property
    def _tq(self) -> TotalsStatements:
        return TotalsStatements(self.engine.dialect)

    def figure_rows(self, *, topic: str | None = None, tasks: bool = True) -> FigureRows:
        """The rows of every partition the store knows (tombstones too), or of one topic, that a
        metrics snapshot is computed from: four set-wise queries on one connection. ``tasks=False``
        leaves the last task's columns out of the counters rows (a third of what they cost)."""
        params: dict[str, Any] = {} if topic is None else {"topic": topic}
        tq = self._tq
        with self._read() as conn:
            db_now = self._db_now(conn)
            if topic is None:
                counted = tq.counters_all if tasks else tq.counts_all
                queries = (tq.observations_all, tq.totals_all, tq.gaps_all, counted)
            else:
                counted = tq.counters_of_topic if tasks else tq.counts_of_topic
                queries = (tq.observations_of_topic, tq.totals_of_topic, tq.gaps_of_topic, counted)
            observations, partitions, gaps, counters = (q.rows(conn, params) for q in queries)
        return FigureRows(db_now, observations, partitions, gaps, counters)

    def finished_totals(self, tips: Collection[TopicIdPartition]) -> dict[TopicIdPartition, tuple[int, int]]:
        """(number, bytes) of each partition's COPY_SEGMENT_FINISHED segments (the remote log
        size), for a batch of partitions in one query; a partition with none is left out."""
        if not tips:
            return {}
        wanted = {(t.topic_id, t.partition): t for t in tips}
        with self._read() as conn:
            rows = conn.execute(self._tq.finished_of, {"ids": sorted({t.topic_id for t in tips})}).all()
        return {
            wanted[(tid, part)]: (int(count), int(size)) for tid, part, count, size in rows if (tid, part) in wanted
        }

    def series_totals(self, topic: str, *, resolution_ms: int, since_ms: int) -> list[tuple[int, int, int]]:
        """A topic's chart at one resolution from ``since_ms`` on: per bucket (in time order), the
        sum over its partitions of each partition's highest remote size and copy lag among its
        replicas' points, as (bucket ms, remote bytes, copy lag bytes)."""
        with self._read() as conn:
            rows = self._tq.series.rows(conn, {"topic": topic, "res": resolution_ms, "since": since_ms})
        return [(int(at), int(size), int(lag)) for at, size, lag in rows]

    def topic_names(self) -> list[str]:
        """Every topic the store knows, tiered (not removed) or observed, by name."""
        with self._read() as conn:
            return [name for (name,) in self._tq.topic_names.rows(conn, {})]
