"""What the store holds of every partition's tiering, read at once: the values the Prometheus
exposition and the Tiering page are computed from.

Counters are the store's (recorded by the runs as they act), so they survive every restart of
whatever serves them; gauges come from the latest replica observations (the best fresh replica's
copy lag, each replica's local-retention risk) and the segment metadata (remote size and count).
``db_now_ms`` is the database clock the ages are measured against.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tiering_core.metadata.erasures import ErasureFigures, TableErasureFigures
from tiering_core.metadata.quota_holders import ThrottleFigures
from tiering_core.metadata.values import PartitionCounters, TaskAttempt


@dataclass(slots=True)
class ReplicaMetrics:
    """One broker's replica as its latest observation says. (Not frozen, as the snapshot's other
    values: a snapshot holds one per replica, tens of thousands, and a frozen dataclass costs
    several times more to build.)"""

    broker_id: int
    observed_ms: int
    stale: bool
    at_risk: bool
    headroom_seconds: float | None
    high_watermark: int | None
    last_stable_offset: int | None
    log_end_offset: int
    local_log_start_offset: int
    leader_epoch: int | None


@dataclass(slots=True)
class PartitionMetrics:
    """One partition's tiering figures. Lags are the best fresh replica's (None: no fresh replica
    observed one); ``last_copy_ms`` is the database clock of the last segment copy that finished;
    ``last_task`` the Airflow task instance of the last run that acted on the partition (copy,
    retention or removal), for the page's link to its log."""

    topic: str
    partition: int
    topic_id: str
    remote_bytes: int = 0
    remote_segments: int = 0
    metadata_count: int = 0
    copy_lag_bytes: int | None = None
    copy_lag_segments: int | None = None
    delete_lag_bytes: int | None = None
    delete_lag_segments: int | None = None
    #: KIP-1257's percents of retention.bytes and local.retention.bytes, the best fresh replica's.
    retention_size_percent: int | None = None
    local_retention_size_percent: int | None = None
    gap_count: int = 0
    gap_offsets: int = 0
    last_copy_ms: int | None = None
    delete_state: str | None = None
    best_broker: int | None = None
    #: The first offset the remote tier serves (None: nothing tiered).
    remote_log_start_offset: int | None = None
    #: [start, end]: tiered offsets below the best fresh replica's log start, readable from the tier only.
    remote_only_offsets: list[int] | None = None
    last_task: TaskAttempt | None = None
    replicas: list[ReplicaMetrics] = field(default_factory=list)
    #: Per broker id (``NO_BROKER`` for acts on no broker).
    counters_by_broker: dict[int, PartitionCounters] = field(default_factory=dict)

    @property
    def counters(self) -> PartitionCounters:
        total = PartitionCounters()
        for c in self.counters_by_broker.values():
            total.add(c)
        return total

    @property
    def at_risk(self) -> bool:
        return any(r.at_risk and not r.stale for r in self.replicas)


@dataclass(slots=True)
class MetricsSnapshot:
    """Every partition the store knows (or one topic's), with the database clock, the brokers
    of the config that reported nothing fresh (stale everywhere) and the throttle figures of the
    brokers' upload and fetch quotas; ``dag_runs`` is filled where Airflow's database is at hand
    (the API server): each platform DAG's id and whether its latest finished run failed;
    ``erasures`` are the audit trail's figures per topic and outcome, ``table_erasures`` its
    export tables' figures per topic."""

    db_now_ms: int
    partitions: list[PartitionMetrics]
    silent_brokers: list[int] = field(default_factory=list)
    throttles: list[ThrottleFigures] = field(default_factory=list)
    dag_runs: dict[str, bool] = field(default_factory=dict)
    erasures: list[ErasureFigures] = field(default_factory=list)
    table_erasures: list[TableErasureFigures] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    """One chart point of a topic: its remote size and copy lag at ``at_ms`` (summed over its
    partitions, each partition's highest value among its replicas in that bucket)."""

    at_ms: int
    remote_bytes: int
    copy_lag_bytes: int
