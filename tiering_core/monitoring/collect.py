"""A ``MetricsSnapshot`` of every partition (or one topic's), read from the metadata store alone.

The figures are the cluster view's (``tier.cluster``), by its rules: a partition is every one the
store knows that is not removed, or that a broker observed; a replica is stale when its latest
observation is older than ``cluster.observation_staleness_ms``, and a broker of the config that
reported nothing fresh is silent; lags are those the best fresh replica (``best_replica_of``)
observed, and so are KIP-1257's retention percents; remote size and count are the
COPY_SEGMENT_FINISHED segments', gaps the recorded ones merged, the offsets only the tier holds
those below the best fresh replica's log start. Counters are the store's (``metadata.counters``).

The snapshot costs a handful of set-wise queries (latest observations, segment totals grouped by
partition, gaps, counters), never one per partition, so the exposition and the page stay fast
at tens of thousands of replicas. ``topic_series`` reads a topic's chart from the downsampled
observation series the same way.
"""

from __future__ import annotations

from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any

from tiering_core.metadata.counters import COUNT_COLUMNS, task_of_row
from tiering_core.metadata.listing import collector_paused
from tiering_core.metadata.observations import HOUR_MS, SERIES_RESOLUTIONS, is_fresh, replica_rank
from tiering_core.metadata.values import PartitionCounters
from tiering_core.monitoring.snapshot import MetricsSnapshot, PartitionMetrics, ReplicaMetrics, SeriesPoint
from tiering_core.tier.cluster import silent_brokers
from tiering_core.tier.offsets import first_served_offset, global_log_start, merge_offset_ranges, remote_only_offsets

if TYPE_CHECKING:
    from tiering_core.context import TieringContext

#: The chart windows: name -> (resolution of the series' points, how far back), in ms.
WINDOWS: dict[str, tuple[int, int]] = {
    "24h": (SERIES_RESOLUTIONS[0][0], 24 * HOUR_MS),
    "7d": (SERIES_RESOLUTIONS[1][0], 7 * 24 * HOUR_MS),
}


def collect_metrics(ctx: TieringContext, topic: str | None = None, *, tasks: bool = True) -> MetricsSnapshot:
    """Every partition's figures (module docstring), or one topic's, at the database clock;
    ``tasks=False`` leaves each partition's ``last_task`` None, unread (the exposition has no use
    for it)."""
    staleness = ctx.config.observation_staleness_ms
    n = len(COUNT_COLUMNS)
    reporting: set[int] = set()
    # Rows read and turned into values with the collector paused (tens of thousands of new objects
    # would trigger collections that walk them all).
    with collector_paused:
        rows = ctx.metadata.figure_rows(topic=topic, tasks=tasks)
        now = rows.db_now_ms
        gaps_by_id: dict[int, list[tuple[int, int]]] = {}
        for pid, start, end in rows.gaps:
            gaps_by_id.setdefault(pid, []).append((start, end))
        partitions: dict[tuple[str, int], PartitionMetrics] = {}
        last_finished: dict[tuple[str, int], int] = {}
        for row in rows.partitions:
            pid, topic_id, name, part, delete_state, dropped, remote_segments, remote_bytes, kept = row[:9]
            if dropped:
                continue
            m = PartitionMetrics(name, part, topic_id, int(remote_bytes), int(remote_segments), int(kept))
            m.delete_state = delete_state
            remote_start, applied, first_finished = row[9:12]
            m.remote_log_start_offset = first_served_offset(
                first_finished, global_log_start(remote_start, applied), remote_start
            )
            if row[12] is not None:
                last_finished[(topic_id, part)] = int(row[12])
            gaps = gaps_by_id.get(pid)
            if gaps:
                merged = merge_offset_ranges(gaps)
                m.gap_count = len(merged)
                m.gap_offsets = sum(g.end - g.start + 1 for g in merged)
            partitions[(topic_id, part)] = m
        # The best fresh replica of each partition so far: its rank and its row. (Names bound
        # locally: this loop runs once per replica.)
        best: dict[tuple[str, int], tuple[tuple[int, int, int], tuple[Any, ...]]] = {}
        known_partition, best_so_far, fresh_at, rank_of = partitions.get, best.get, is_fresh, replica_rank
        for row in sorted(rows.observations, key=_BROKER_OF_ROW):
            (topic_id, name, part, broker, hw, lso, leo, start, epoch, risk, room, at, *_) = row
            key = (topic_id, part)
            m = known_partition(key) or partitions.setdefault(key, PartitionMetrics(name, part, topic_id))
            fresh = fresh_at(at, now, staleness)
            m.replicas.append(ReplicaMetrics(broker, at, not fresh, bool(risk), room, hw, lso, leo, start, epoch))
            if fresh:
                reporting.add(broker)
                rank = rank_of(epoch, lso, broker)
                known = best_so_far(key)
                if known is None or rank < known[0]:
                    best[key] = (rank, row)
        for key, (_, row) in best.items():
            m = partitions[key]
            m.best_broker = row[3]
            m.copy_lag_bytes, m.copy_lag_segments, m.delete_lag_bytes, m.delete_lag_segments = row[12:16]
            m.retention_size_percent, m.local_retention_size_percent = row[16:18]
            if key in last_finished:
                only = remote_only_offsets(m.remote_log_start_offset, last_finished[key], row[7])
                m.remote_only_offsets = None if only is None else only.as_list()
        # Per partition the row of the last task that acted (its value is built once, at the end).
        last_task: dict[tuple[str, int], tuple[Any, ...]] = {}
        for row in rows.counters:
            key = (row[0], row[1])
            counted = partitions.get(key)
            if counted is None:
                continue  # a removed partition's counts are no longer exported
            counted.counters_by_broker[row[2]] = PartitionCounters(*row[3 : 3 + n])
            last_copy = row[3 + n]
            if last_copy is not None and (counted.last_copy_ms is None or last_copy > counted.last_copy_ms):
                counted.last_copy_ms = int(last_copy)
            task_ms = row[4 + n] if tasks else None
            if task_ms is not None:
                known_task = last_task.get(key)
                if known_task is None or task_ms >= known_task[4 + n]:
                    last_task[key] = row
        for key, row in last_task.items():
            partitions[key].last_task = task_of_row(*row[5 + n :])
        ordered = sorted(partitions.values(), key=_PARTITION_ORDER)
    throttles = ctx.metadata.throttle_figures()
    silent = sorted(silent_brokers(ctx.config.brokers, reporting))
    erasures = ctx.metadata.erasure_figures(topic)
    return MetricsSnapshot(
        now, ordered, silent, throttles, erasures=list(erasures.partitions), table_erasures=list(erasures.tables)
    )


_BROKER_OF_ROW = itemgetter(3)
_PARTITION_ORDER = attrgetter("topic", "partition", "topic_id")


def topic_series(ctx: TieringContext, topic: str, window: str) -> list[SeriesPoint]:
    """A topic's chart over ``window`` ("24h": the 5-minute points, "7d": the hourly points): per
    bucket, the sum over its partitions of each partition's highest remote size and copy lag
    among its replicas (a partition no replica reported in a bucket adds nothing to it)."""
    if window not in WINDOWS:
        raise ValueError(f"unknown chart window {window!r}: one of {', '.join(WINDOWS)}")
    resolution, span = WINDOWS[window]
    store = ctx.metadata
    since = store.database_now_ms() - span
    return [
        SeriesPoint(at, size, lag)
        for at, size, lag in store.series_totals(topic, resolution_ms=resolution, since_ms=since)
    ]


def topic_names(ctx: TieringContext) -> list[str]:
    """Every topic the store knows (tiered and not removed, or observed), by name: one query."""
    return ctx.metadata.topic_names()


__all__ = ["WINDOWS", "collect_metrics", "topic_names", "topic_series"]
