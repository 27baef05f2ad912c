"""Set-wise figures over every partition at once, for metrics and the Tiering page.

Each read is one aggregate query over the whole store (or one topic), never one per partition,
so a snapshot of ten thousand partitions costs a handful of statements:

- ``figure_rows``: what a metrics snapshot needs, on one connection: the latest observations,
  per partition its record (delete state, tombstone, remote log start and the highest DeleteRecords
  applied through the platform) and, over its live segments (from the index of live segments), the
  finished ones' number, bytes (the remote log size) and offsets, and all of them (the metadata
  entries kept), every recorded tiering gap, and the counters;
- ``finished_totals``: the remote log size of a batch of partitions (a run's);
- ``series_totals``: a topic's chart: per bucket of one resolution, the sum over its partitions
  of each partition's highest remote size and copy lag among its replicas' points;
- ``overview_rows``: what the Tiering page shows above its partitions, and nothing more: per
  topic its partitions added up (count, remote size, the best fresh replica's copy lag, the last
  copy), and only the partitions and replicas in an alert state (gaps, a fresh replica at risk,
  stale replicas of brokers that are not silent, failed scrubs), by ``figure_rows``' rules;
- ``topic_names``: every topic the store knows (tiered or observed).

The rules the overview's SQL restates (``metrics.collect`` applies them to ``figure_rows``): a
partition shown is one the store knows and has not removed, or one a broker observed, named by its
record, else by its lowest broker's observation; an observation is fresh when it is at most the
staleness old at the database clock; the best fresh replica has the highest leader epoch, then
LSO, then the lowest broker id (``observations.replica_rank``; a missing value ranks as -1).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Dialect,
    Integer,
    Select,
    Subquery,
    bindparam,
    case,
    cast,
    exists,
    func,
    literal_column,
    null,
    or_,
    select,
    true,
    union,
    union_all,
)

from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.counters import COUNT_COLUMNS, COUNTERS, TASK_COLUMNS
from tiering_core.metadata.observations import LATEST, POINTS
from tiering_core.metadata.queries import IS_APPLIED, IS_FINISHED, LIVE, D, DriverQuery, G, P, S
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
    "remote_log_start_offset",
    "delete_records_offset",
    "first_finished_offset",
    "last_finished_offset",
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
    "retention_size_percent",
    "local_retention_size_percent",
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


#: A row of ``OverviewRows.topics``: one topic's partitions added up (lags and last copy: None when
#: none is known).
TOPIC_FIGURE_COLUMNS = ("topic", "partitions", "remote_bytes", "copy_lag_bytes", "copy_lag_segments", "last_copy_ms")


@dataclass(frozen=True, slots=True)
class OverviewRows:
    """What the Tiering page shows above its partitions (module docstring), as plain tuples: the
    database clock, the brokers with a fresh observation, per topic ``TOPIC_FIGURE_COLUMNS`` (in
    no order), and only the partitions in an alert state, each as (topic, partition, topic id,
    ...): their recorded gaps (... start, end), those a fresh replica says are at risk, the stale
    replicas but those of silent brokers (... broker id), the failed scrubs (... failures summed
    over brokers)."""

    db_now_ms: int
    reporting: list[int]
    topics: list[tuple[Any, ...]]
    gaps: list[tuple[Any, ...]]
    risks: list[tuple[Any, ...]]
    stale: list[tuple[Any, ...]]
    scrubs: list[tuple[Any, ...]]


def shown_name(
    topic_id: ColumnElement[Any], partition: ColumnElement[Any], not_dropped: ColumnElement[bool]
) -> ColumnElement[Any]:
    """The topic name a partition is shown under: its record's, else its lowest broker's
    observation's (None: not shown)."""
    record, first = P.alias("record"), LATEST.alias("first_seen")
    kept = select(record.c.topic).where(
        record.c.topic_id == topic_id, record.c.partition == partition, record.c.dropped == not_dropped
    )
    seen = (
        select(first.c.topic)
        .where(first.c.topic_id == topic_id, first.c.partition == partition)
        .order_by(first.c.broker_id)
        .limit(1)
    )
    return func.coalesce(kept.scalar_subquery(), seen.scalar_subquery())


def shown_partitions(not_dropped: ColumnElement[bool]) -> Subquery:
    """Every partition shown (topic id, partition, topic, its row id or None): those the store
    knows and has not removed, and those only a broker observed, once (the lowest broker's)."""
    o = LATEST
    record, first = P.alias("record"), LATEST.alias("first_seen")
    observed_only = select(o.c.topic_id, o.c.partition, o.c.topic, cast(null(), Integer)).where(
        ~exists().where(
            record.c.topic_id == o.c.topic_id, record.c.partition == o.c.partition, record.c.dropped == not_dropped
        ),
        ~exists().where(
            first.c.topic_id == o.c.topic_id, first.c.partition == o.c.partition, first.c.broker_id < o.c.broker_id
        ),
    )
    return union_all(
        select(P.c.topic_id, P.c.partition, P.c.topic, P.c.id).where(P.c.dropped == not_dropped), observed_only
    ).subquery("shown")


def topic_figures(not_dropped: ColumnElement[bool], fresh: ColumnElement[bool]) -> Select[Any]:
    """Per topic (``TOPIC_FIGURE_COLUMNS``): its shown partitions counted, their remote size, the
    best fresh replica's copy lag of each summed, and the last copy."""
    minus_one: ColumnElement[int] = literal_column("-1")
    o = LATEST
    shown = shown_partitions(not_dropped)
    rank = func.row_number().over(
        partition_by=(o.c.topic_id, o.c.partition),
        order_by=(
            func.coalesce(o.c.leader_epoch, minus_one).desc(),
            func.coalesce(o.c.last_stable_offset, minus_one).desc(),
            o.c.broker_id,
        ),
    )
    ranked = (
        select(o.c.topic_id, o.c.partition, o.c.copy_lag_bytes, o.c.copy_lag_segments, rank.label("rank"))
        .where(fresh)
        .subquery("ranked")
    )
    remote = (
        select(S.c.partition_id, func.sum(S.c.size_bytes).label("size"))
        .where(LIVE & IS_FINISHED)
        .group_by(S.c.partition_id)
        .subquery("remote")
    )
    copied = (
        select(COUNTERS.c.topic_id, COUNTERS.c.partition, func.max(COUNTERS.c.last_copy_ms).label("at"))
        .group_by(COUNTERS.c.topic_id, COUNTERS.c.partition)
        .subquery("copied")
    )
    return (
        select(
            shown.c.topic,
            func.count(),
            func.coalesce(func.sum(remote.c.size), literal_column("0")),
            func.sum(ranked.c.copy_lag_bytes),
            func.sum(ranked.c.copy_lag_segments),
            func.max(copied.c.at),
        )
        .select_from(
            shown.outerjoin(remote, remote.c.partition_id == shown.c.id)
            .outerjoin(
                ranked,
                (ranked.c.topic_id == shown.c.topic_id)
                & (ranked.c.partition == shown.c.partition)
                & (ranked.c.rank == literal_column("1")),
            )
            .outerjoin(copied, (copied.c.topic_id == shown.c.topic_id) & (copied.c.partition == shown.c.partition))
        )
        .group_by(shown.c.topic)
    )


class OverviewStatements:
    """The overview's statements for one dialect (module docstring). ``fresh_since``: the oldest
    observation that is fresh; ``brokers``: the config's brokers (a stale replica is not listed
    when its broker is one of them and reported nothing fresh: the broker is silent)."""

    def __init__(self, dialect: Dialect) -> None:
        not_dropped: ColumnElement[bool] = literal_column("false" if dialect.name == "postgresql" else "0")
        o = LATEST
        fresh_one = LATEST.alias("fresh_one")
        since = bindparam("fresh_since", type_=BigInteger)
        fresh = o.c.observed_ms >= since
        self.topics: Select[Any] = topic_figures(not_dropped, fresh)
        self.reporting: Select[Any] = select(o.c.broker_id).where(fresh).distinct()
        self.gaps: Select[Any] = (
            select(P.c.topic, P.c.partition, P.c.topic_id, G.c.start_offset, G.c.end_offset)
            .select_from(G.join(P, P.c.id == G.c.partition_id))
            .where(P.c.dropped == not_dropped)
        )
        self.risks: Select[Any] = (
            select(shown_name(o.c.topic_id, o.c.partition, not_dropped), o.c.partition, o.c.topic_id)
            .where(o.c.at_risk == true(), fresh)
            .distinct()
        )
        silent_or_other = or_(
            o.c.broker_id.in_(select(fresh_one.c.broker_id).where(fresh_one.c.observed_ms >= since)),
            o.c.broker_id.not_in(bindparam("brokers", expanding=True)),
        )
        self.stale: Select[Any] = select(
            shown_name(o.c.topic_id, o.c.partition, not_dropped), o.c.partition, o.c.topic_id, o.c.broker_id
        ).where(o.c.observed_ms < since, silent_or_other)
        failed = (
            select(COUNTERS.c.topic_id, COUNTERS.c.partition, func.sum(COUNTERS.c.scrub_failures).label("failures"))
            .where(COUNTERS.c.scrub_failures > literal_column("0"))
            .group_by(COUNTERS.c.topic_id, COUNTERS.c.partition)
            .subquery("failed")
        )
        self.scrubs: Select[Any] = select(
            shown_name(failed.c.topic_id, failed.c.partition, not_dropped),
            failed.c.partition,
            failed.c.topic_id,
            failed.c.failures,
        )


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
                P.c.remote_log_start_offset,
                select(func.max(D.c.before_offset)).where(D.c.partition_id == P.c.id, IS_APPLIED).scalar_subquery(),
                func.min(case((IS_FINISHED, S.c.start_offset))),
                func.max(case((IS_FINISHED, S.c.end_offset))),
            )
            .select_from(P.outerjoin(S, (S.c.partition_id == P.c.id) & LIVE))
            .group_by(
                P.c.id,
                P.c.topic_id,
                P.c.topic,
                P.c.partition,
                P.c.delete_state,
                P.c.dropped,
                P.c.remote_log_start_offset,
            )
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

    @cached_property
    def _overview_q(self) -> OverviewStatements:
        return OverviewStatements(self.engine.dialect)

    def overview_rows(self, *, staleness_ms: int, brokers: Collection[int]) -> OverviewRows:
        """What the Tiering page shows above its partitions (module docstring), on one connection:
        an observation older than ``staleness_ms`` at the database clock is stale; ``brokers``: the
        config's brokers."""
        oq = self._overview_q
        with self._read() as conn:
            now = self._db_now(conn)
            params: dict[str, Any] = {"fresh_since": now - staleness_ms, "brokers": sorted(brokers)}
            reporting = [int(b) for (b,) in conn.execute(oq.reporting, params)]
            topics, gaps, risks, stale, scrubs = (
                [tuple(row) for row in conn.execute(q, params)]
                for q in (oq.topics, oq.gaps, oq.risks, oq.stale, oq.scrubs)
            )
        return OverviewRows(now, reporting, topics, gaps, risks, stale, scrubs)

    def topic_names(self) -> list[str]:
        """Every topic the store knows, tiered (not removed) or observed, by name."""
        with self._read() as conn:
            return [name for (name,) in self._tq.topic_names.rows(conn, {})]
