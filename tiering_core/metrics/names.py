"""The metric set: one name per metric in Prometheus' conventions, mapped to what Kafka calls it.

Every metric has one base name in snake_case that ends in its unit (``_bytes``, ``_seconds``;
``_segments``, ``_offsets``, ``_entries`` for counts of things; ``_in_percent`` for KIP-1257's
whole percents, kept as Kafka computes them); from it come:

- the Prometheus name ``tiering_<base>``, a counter's sample ``tiering_<base>_total``;
- the name a run sends through Airflow's metrics pipeline, ``tiering.<base>`` (Airflow puts its
  ``statsd_prefix`` or ``otel_prefix`` in front; OpenTelemetry's Prometheus exporter turns the dots
  into underscores and adds ``_total`` to a counter: the exposition's sample name behind the prefix).

``kafka_name`` is the broker metric it stands for (KIP-405's ``BrokerTopicMetrics`` meters and
gauges as KIP-930 and KIP-963 name them; KIP-956's ``RemoteLogManager`` throttle sensors, in ms
there and in seconds here; KIP-1257's ``RemoteLogManager`` percents); None for the platform's own.
Labels are ``topic`` and ``partition``, plus ``broker`` where a replica is meant (a copy runs on,
and a local-retention risk belongs to, one broker's replica). ``PLATFORM_METRICS`` are what only
the Prometheus exposition reports, about brokers and DAGs, not partitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class MetricKind(Enum):
    COUNTER = "counter"
    GAUGE = "gauge"


PARTITION_LABELS = ("topic", "partition")
REPLICA_LABELS = ("topic", "partition", "broker")
BROKER_LABELS = ("broker",)
DAG_LABELS = ("dag_id",)
ERASURE_LABELS = ("topic", "outcome")


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric: its base name, the Kafka metric it maps to, kind, labels and a one-line meaning."""

    name: str
    kafka_name: str | None
    kind: MetricKind
    labels: tuple[str, ...]
    help: str

    @property
    def statsd_name(self) -> str:
        """The name sent through Airflow's StatsD or OpenTelemetry pipeline."""
        return f"tiering.{self.name}"

    @property
    def prometheus_name(self) -> str:
        return f"tiering_{self.name}"

    @property
    def prometheus_samples(self) -> tuple[str, ...]:
        """The sample names a query uses: a counter's ``_total`` (and ``_created`` is not exported)."""
        return (f"{self.prometheus_name}_total",) if self.kind is MetricKind.COUNTER else (self.prometheus_name,)


def _counter(name: str, kafka_name: str | None, labels: tuple[str, ...], help: str) -> MetricSpec:
    return MetricSpec(name, kafka_name, MetricKind.COUNTER, labels, help)


def _gauge(name: str, kafka_name: str | None, labels: tuple[str, ...], help: str) -> MetricSpec:
    return MetricSpec(name, kafka_name, MetricKind.GAUGE, labels, help)


#: Kafka's JMX groups the names are found under.
TOPIC_METRICS = "kafka.server:type=BrokerTopicMetrics,name="
REMOTE_LOG_MANAGER = "kafka.log.remote:type=RemoteLogManager,name="
RLM_SENSORS = "kafka.server:type=RemoteLogManager "

REMOTE_COPY_BYTES = _counter(
    "remote_copy_bytes",
    f"{TOPIC_METRICS}RemoteCopyBytesPerSec",
    REPLICA_LABELS,
    "Bytes of segments and their indexes copied to the remote tier",
)
REMOTE_COPY_REQUESTS = _counter(
    "remote_copy_requests", f"{TOPIC_METRICS}RemoteCopyRequestsPerSec", REPLICA_LABELS, "Segment copies started"
)
REMOTE_COPY_ERRORS = _counter(
    "remote_copy_errors", f"{TOPIC_METRICS}RemoteCopyErrorsPerSec", REPLICA_LABELS, "Segment copies that failed"
)
REMOTE_DELETE_REQUESTS = _counter(
    "remote_delete_requests",
    f"{TOPIC_METRICS}RemoteDeleteRequestsPerSec",
    PARTITION_LABELS,
    "Remote segment deletions started",
)
REMOTE_DELETE_ERRORS = _counter(
    "remote_delete_errors",
    f"{TOPIC_METRICS}RemoteDeleteErrorsPerSec",
    PARTITION_LABELS,
    "Remote segment deletions that failed",
)
REMOTE_FETCH_BYTES = _counter(
    "remote_fetch_bytes", f"{TOPIC_METRICS}RemoteFetchBytesPerSec", PARTITION_LABELS, "Bytes read from the remote tier"
)
REMOTE_FETCH_REQUESTS = _counter(
    "remote_fetch_requests",
    f"{TOPIC_METRICS}RemoteFetchRequestsPerSec",
    PARTITION_LABELS,
    "Reads of the remote tier (fetch, find-offset, restore, verify, rebuild, export)",
)
REMOTE_FETCH_ERRORS = _counter(
    "remote_fetch_errors",
    f"{TOPIC_METRICS}RemoteFetchErrorsPerSec",
    PARTITION_LABELS,
    "Reads of the remote tier that failed",
)
INDEX_REPAIRS = _counter("index_repairs", None, PARTITION_LABELS, "Remote index files rebuilt and replaced")
SCRUB_FAILURES = _counter("scrub_failures", None, PARTITION_LABELS, "Remote segments a verify found damaged or missing")

REMOTE_COPY_LAG_BYTES = _gauge(
    "remote_copy_lag_bytes",
    f"{TOPIC_METRICS}RemoteCopyLagBytes",
    PARTITION_LABELS,
    "Bytes of closed segments below the LSO not yet copied",
)
REMOTE_COPY_LAG_SEGMENTS = _gauge(
    "remote_copy_lag_segments",
    f"{TOPIC_METRICS}RemoteCopyLagSegments",
    PARTITION_LABELS,
    "Closed segments below the LSO not yet copied",
)
REMOTE_DELETE_LAG_BYTES = _gauge(
    "remote_delete_lag_bytes",
    f"{TOPIC_METRICS}RemoteDeleteLagBytes",
    PARTITION_LABELS,
    "Bytes of remote segments past retention not yet deleted",
)
REMOTE_DELETE_LAG_SEGMENTS = _gauge(
    "remote_delete_lag_segments",
    f"{TOPIC_METRICS}RemoteDeleteLagSegments",
    PARTITION_LABELS,
    "Remote segments past retention not yet deleted",
)
REMOTE_LOG_SIZE_BYTES = _gauge(
    "remote_log_size_bytes",
    f"{TOPIC_METRICS}RemoteLogSizeBytes",
    PARTITION_LABELS,
    "Bytes of the partition's copied remote segments",
)
#: Not ``_count``: Prometheus keeps that suffix for summaries and histograms.
REMOTE_LOG_METADATA_COUNT = _gauge(
    "remote_log_metadata_entries",
    f"{TOPIC_METRICS}RemoteLogMetadataCount",
    PARTITION_LABELS,
    "Remote segment metadata entries kept",
)
TIERING_GAPS = _gauge("gaps", None, PARTITION_LABELS, "Offset ranges the broker deleted before they were tiered")
TIERING_GAP_OFFSETS = _gauge("gap_offsets", None, PARTITION_LABELS, "Offsets lost in tiering gaps")
LOCAL_RETENTION_RISK = _gauge(
    "local_retention_risk",
    None,
    REPLICA_LABELS,
    "1 when the broker's retention may delete a segment not yet tiered",
)
LOCAL_RETENTION_HEADROOM_SECONDS = _gauge(
    "local_retention_headroom_seconds",
    None,
    REPLICA_LABELS,
    "Seconds before the broker's retention reaches untiered data (+Inf: it never does)",
)
LAST_COPY_AGE_SECONDS = _gauge(
    "last_copy_age_seconds", None, PARTITION_LABELS, "Seconds since the last successful copy"
)
#: KIP-1257 (Kafka 4.3), per partition, whole percents (truncated), 0 where the limit is unlimited
#: or not known (as Kafka's gauge reads before its first computation); may pass 100 until
#: retention catches up.
RETENTION_SIZE_IN_PERCENT = _gauge(
    "retention_size_in_percent",
    f"{REMOTE_LOG_MANAGER}RetentionSizeInPercent",
    PARTITION_LABELS,
    "Local and remote size of the partition in percent of retention.bytes (0: unlimited or not known)",
)
LOCAL_RETENTION_SIZE_IN_PERCENT = _gauge(
    "local_retention_size_in_percent",
    f"{REMOTE_LOG_MANAGER}LocalRetentionSizeInPercent",
    PARTITION_LABELS,
    "Local log size of the partition in percent of local.retention.bytes (0: unlimited or not known)",
)

METRICS: tuple[MetricSpec, ...] = (
    REMOTE_COPY_BYTES,
    REMOTE_COPY_REQUESTS,
    REMOTE_COPY_ERRORS,
    REMOTE_DELETE_REQUESTS,
    REMOTE_DELETE_ERRORS,
    REMOTE_FETCH_BYTES,
    REMOTE_FETCH_REQUESTS,
    REMOTE_FETCH_ERRORS,
    INDEX_REPAIRS,
    SCRUB_FAILURES,
    REMOTE_COPY_LAG_BYTES,
    REMOTE_COPY_LAG_SEGMENTS,
    REMOTE_DELETE_LAG_BYTES,
    REMOTE_DELETE_LAG_SEGMENTS,
    REMOTE_LOG_SIZE_BYTES,
    REMOTE_LOG_METADATA_COUNT,
    TIERING_GAPS,
    TIERING_GAP_OFFSETS,
    LOCAL_RETENTION_RISK,
    LOCAL_RETENTION_HEADROOM_SECONDS,
    LAST_COPY_AGE_SECONDS,
    RETENTION_SIZE_IN_PERCENT,
    LOCAL_RETENTION_SIZE_IN_PERCENT,
)

#: Brokers that reported nothing fresh: 1 for a configured broker whose worker sent no fresh
#: observation of any partition (its lags and risks are then unknown), 0 for a broker that did.
SILENT_BROKER = _gauge(
    "silent_broker", None, BROKER_LABELS, "1 when the broker reported no fresh observation of any partition"
)

#: The upload and fetch quotas' throttle time (KIP-956's sensors, in ms there): over the takes that
#: waited of every process of the broker heard from within
#: ``metadata.quota_holders.THROTTLE_WINDOW_MS``; 0 for a broker whose quotas never held a take back.
REMOTE_COPY_THROTTLE_TIME_AVG = _gauge(
    "remote_copy_throttle_time_avg_seconds",
    f"{RLM_SENSORS}remote-copy-throttle-time-avg",
    BROKER_LABELS,
    "Average seconds a copy waited for the broker's upload quota",
)
REMOTE_COPY_THROTTLE_TIME_MAX = _gauge(
    "remote_copy_throttle_time_max_seconds",
    f"{RLM_SENSORS}remote-copy-throttle-time-max",
    BROKER_LABELS,
    "Longest seconds a copy waited for the broker's upload quota",
)
REMOTE_FETCH_THROTTLE_TIME_AVG = _gauge(
    "remote_fetch_throttle_time_avg_seconds",
    f"{RLM_SENSORS}remote-fetch-throttle-time-avg",
    BROKER_LABELS,
    "Average seconds a read waited for the broker's fetch quota",
)
REMOTE_FETCH_THROTTLE_TIME_MAX = _gauge(
    "remote_fetch_throttle_time_max_seconds",
    f"{RLM_SENSORS}remote-fetch-throttle-time-max",
    BROKER_LABELS,
    "Longest seconds a read waited for the broker's fetch quota",
)
#: Each throttle metric's quota kind and whether it is the average (else the maximum).
THROTTLE_METRICS: dict[MetricSpec, tuple[str, bool]] = {
    REMOTE_COPY_THROTTLE_TIME_AVG: ("copy", True),
    REMOTE_COPY_THROTTLE_TIME_MAX: ("copy", False),
    REMOTE_FETCH_THROTTLE_TIME_AVG: ("fetch", True),
    REMOTE_FETCH_THROTTLE_TIME_MAX: ("fetch", False),
}

#: The platform's DAGs (tagged ``tiering``) whose latest finished run failed: read from Airflow's
#: database by the API server that serves the exposition, 0 once a later run succeeds.
DAG_RUN_FAILED = _gauge(
    "dag_run_failed", None, DAG_LABELS, "1 when the latest finished run of the platform's DAG failed"
)

#: Erasures by record key (``tiering erase``, the erase DAG), from the store's audit trail: each
#: partition's erasure by its outcome (``started``: under way, or killed and left for a rerun;
#: ``finished``), and the records they removed from the remote tier.
ERASURES = _counter(
    "erasures", None, ERASURE_LABELS, "Erasures by record key of a partition, by outcome (started or finished)"
)
ERASED_RECORDS = _counter(
    "erased_records", None, ("topic",), "Records removed from the remote tier by erasures by record key"
)
#: The export tables' part of those erasures: the rows deleted from a topic's tables, and the
#: snapshots expired because they named a data file holding rows of the keys.
ERASED_TABLE_ROWS = _counter(
    "erased_table_rows", None, ("topic",), "Rows deleted from a topic's export tables by erasures by record key"
)
ERASURE_EXPIRED_SNAPSHOTS = _counter(
    "erasure_expired_snapshots",
    None,
    ("topic",),
    "Export table snapshots expired by erasures by record key (they named files holding erased rows)",
)

#: What only the Prometheus exposition reports (computed from the store, never emitted by a run).
PLATFORM_METRICS: tuple[MetricSpec, ...] = (
    SILENT_BROKER,
    *THROTTLE_METRICS,
    DAG_RUN_FAILED,
    ERASURES,
    ERASED_RECORDS,
    ERASED_TABLE_ROWS,
    ERASURE_EXPIRED_SNAPSHOTS,
)
BY_NAME: dict[str, MetricSpec] = {m.name: m for m in METRICS + PLATFORM_METRICS}

#: The field of ``PartitionCounters`` each counter metric is kept in.
COUNTER_FIELDS: dict[MetricSpec, str] = {
    REMOTE_COPY_BYTES: "copy_bytes",
    REMOTE_COPY_REQUESTS: "copy_requests",
    REMOTE_COPY_ERRORS: "copy_errors",
    REMOTE_DELETE_REQUESTS: "delete_requests",
    REMOTE_DELETE_ERRORS: "delete_errors",
    REMOTE_FETCH_BYTES: "fetch_bytes",
    REMOTE_FETCH_REQUESTS: "fetch_requests",
    REMOTE_FETCH_ERRORS: "fetch_errors",
    INDEX_REPAIRS: "index_repairs",
    SCRUB_FAILURES: "scrub_failures",
}
