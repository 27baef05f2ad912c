"""What the Tiering page shows above its partitions: one summary per topic and the partitions and
replicas in an alert state, read from the store with a few set-wise queries that return only that
(``metadata.totals.overview_rows``: per-topic sums, and only the partitions and replicas in an
alert state), never every partition's figures.

The figures are a ``MetricsSnapshot``'s, by ``collect_metrics``' rules (the partitions shown,
their names, freshness at the database clock, the best fresh replica's lags, merged gaps, silent
brokers), so the page agrees with the exposition, the partition table and ``tiering status``;
``overview_of`` computes the same value from a snapshot. Alert entries are in the snapshot's
partition order (topic, partition, topic id), a replica's after its partition's lower brokers'.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from tiering_core.monitoring.snapshot import MetricsSnapshot, PartitionMetrics
from tiering_core.tier.cluster import silent_brokers
from tiering_core.tier.offsets import merge_offset_ranges

if TYPE_CHECKING:
    from tiering_core.context import TieringContext


@dataclass(slots=True)
class TopicSummary:
    """One topic's partitions added up; a lag is None when no partition has a fresh replica that
    measured it, the last copy None when none finished."""

    topic: str
    partitions: int = 0
    remote_bytes: int = 0
    copy_lag_bytes: int | None = None
    copy_lag_segments: int | None = None
    gap_partitions: int = 0
    gap_offsets: int = 0
    at_risk: int = 0
    last_copy_ms: int | None = None

    def add(self, p: PartitionMetrics) -> None:
        self.partitions += 1
        self.remote_bytes += p.remote_bytes
        if p.copy_lag_bytes is not None:
            self.copy_lag_bytes = (self.copy_lag_bytes or 0) + p.copy_lag_bytes
        if p.copy_lag_segments is not None:
            self.copy_lag_segments = (self.copy_lag_segments or 0) + p.copy_lag_segments
        if p.gap_count:
            self.gap_partitions += 1
            self.gap_offsets += p.gap_offsets
        if p.at_risk:
            self.at_risk += 1
        if p.last_copy_ms is not None and (self.last_copy_ms is None or p.last_copy_ms > self.last_copy_ms):
            self.last_copy_ms = p.last_copy_ms


@dataclass(frozen=True, slots=True)
class AlertEntry:
    """A partition (``topic-N``) an alert names, with the figure the alert sums (offsets lost,
    scrub failures; 0 for the others) or, for a stale replica, its broker id."""

    topic: str
    name: str
    value: int = 0


@dataclass(slots=True)
class Overview:
    """The page's top at the database clock ``db_now_ms``: the topics by name, the partitions with
    a tiering gap, those at local-retention risk, the stale replicas of brokers that are not
    silent, the partitions with failed scrubs (module docstring's order), and the config's brokers
    that reported nothing fresh."""

    db_now_ms: int
    topics: list[TopicSummary]
    gaps: list[AlertEntry] = field(default_factory=list)
    risks: list[AlertEntry] = field(default_factory=list)
    stale: list[AlertEntry] = field(default_factory=list)
    scrubs: list[AlertEntry] = field(default_factory=list)
    silent_brokers: list[int] = field(default_factory=list)


def overview_of(snapshot: MetricsSnapshot) -> Overview:
    """The overview of a snapshot's partitions (the page's figures from a snapshot in hand)."""
    topics: dict[str, TopicSummary] = {}
    found = Overview(snapshot.db_now_ms, [], silent_brokers=list(snapshot.silent_brokers))
    silent = set(snapshot.silent_brokers)
    for p in snapshot.partitions:
        summary = topics.get(p.topic)
        if summary is None:
            summary = topics[p.topic] = TopicSummary(p.topic)
        summary.add(p)
        name = f"{p.topic}-{p.partition}"
        if p.gap_count:
            found.gaps.append(AlertEntry(p.topic, name, p.gap_offsets))
        if p.at_risk:
            found.risks.append(AlertEntry(p.topic, name))
        for r in p.replicas:
            if r.stale and r.broker_id not in silent:
                found.stale.append(AlertEntry(p.topic, name, r.broker_id))
        failures = sum(c.scrub_failures for c in p.counters_by_broker.values())
        if failures:
            found.scrubs.append(AlertEntry(p.topic, name, failures))
    found.topics = [topics[t] for t in sorted(topics)]
    return found


_PARTITION_ORDER = itemgetter(0, 1, 2)


def _entries(rows: Iterable[tuple[Any, ...]], value: int | None = None) -> list[AlertEntry]:
    """Entries from (topic, partition, topic id[, value]) rows, in partition order; a row of a
    partition not shown (no name) is left out."""
    ordered = sorted((row for row in rows if row[0] is not None), key=lambda row: (*_PARTITION_ORDER(row), *row[3:]))
    return [AlertEntry(row[0], f"{row[0]}-{row[1]}", int(row[3]) if value is None else value) for row in ordered]


def collect_overview(ctx: TieringContext) -> Overview:
    """The overview of every partition the store knows, read set-wise (module docstring)."""
    config = ctx.config
    rows = ctx.metadata.overview_rows(staleness_ms=config.observation_staleness_ms, brokers=config.brokers)
    topics: dict[str, TopicSummary] = {}
    for name, count, remote, lag_bytes, lag_segments, last_copy in rows.topics:
        topics[name] = TopicSummary(
            name,
            int(count),
            int(remote),
            None if lag_bytes is None else int(lag_bytes),
            None if lag_segments is None else int(lag_segments),
            last_copy_ms=None if last_copy is None else int(last_copy),
        )
    ranges: dict[tuple[Any, ...], list[tuple[int, int]]] = {}
    for topic, partition, topic_id, start, end in rows.gaps:
        ranges.setdefault((topic, partition, topic_id), []).append((start, end))
    lost = [(*key, sum(g.end - g.start + 1 for g in merge_offset_ranges(found))) for key, found in ranges.items()]
    found = Overview(
        rows.db_now_ms,
        [topics[t] for t in sorted(topics)],
        gaps=_entries(lost),
        risks=_entries(rows.risks, 0),
        stale=_entries(rows.stale),
        scrubs=_entries(rows.scrubs),
        silent_brokers=sorted(silent_brokers(config.brokers, rows.reporting)),
    )
    for entry in found.gaps:
        topics[entry.topic].gap_partitions += 1
        topics[entry.topic].gap_offsets += entry.value
    for entry in found.risks:
        topics[entry.topic].at_risk += 1
    return found


__all__ = ["AlertEntry", "Overview", "TopicSummary", "collect_overview", "overview_of"]
