"""The metric set: Kafka's names for what KIP-405 measures, and what this platform adds.

A name is Kafka's own where Kafka has one (KIP-930 dropped the ``PerSec`` of the broker's meters;
a counter here is the meter's count). Labels are ``topic`` and ``partition``, plus ``broker`` where
a replica is meant (a copy runs on, and a local-retention risk belongs to, one broker's replica).
``PLATFORM_METRICS`` are what only the Prometheus exposition reports, about brokers, not partitions.
StatsD names are ``tiering.<Name>`` (Airflow's own ``statsd_prefix`` goes in front); Prometheus
names are ``tiering_<Name>``, counters' samples ending in ``_total``.
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


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric: its Kafka name, kind, labels and a one-line meaning."""

    name: str
    kind: MetricKind
    labels: tuple[str, ...]
    help: str

    @property
    def statsd_name(self) -> str:
        return f"tiering.{self.name}"

    @property
    def prometheus_name(self) -> str:
        """``tiering_<Name>``; a name in the hyphens of Kafka's own client metrics
        (``remote-copy-throttle-time-avg``) with underscores, as Prometheus allows."""
        return f"tiering_{self.name.replace('-', '_')}"

    @property
    def prometheus_samples(self) -> tuple[str, ...]:
        """The sample names a query uses: a counter's ``_total`` (and ``_created`` is not exported)."""
        return (f"{self.prometheus_name}_total",) if self.kind is MetricKind.COUNTER else (self.prometheus_name,)


def _counter(name: str, labels: tuple[str, ...], help: str) -> MetricSpec:
    return MetricSpec(name, MetricKind.COUNTER, labels, help)


def _gauge(name: str, labels: tuple[str, ...], help: str) -> MetricSpec:
    return MetricSpec(name, MetricKind.GAUGE, labels, help)


REMOTE_COPY_BYTES = _counter(
    "RemoteCopyBytes", REPLICA_LABELS, "Bytes of segments and their indexes copied to the remote tier"
)
REMOTE_COPY_REQUESTS = _counter("RemoteCopyRequests", REPLICA_LABELS, "Segment copies started")
REMOTE_COPY_ERRORS = _counter("RemoteCopyErrors", REPLICA_LABELS, "Segment copies that failed")
REMOTE_DELETE_REQUESTS = _counter("RemoteDeleteRequests", PARTITION_LABELS, "Remote segment deletions started")
REMOTE_DELETE_ERRORS = _counter("RemoteDeleteErrors", PARTITION_LABELS, "Remote segment deletions that failed")
REMOTE_FETCH_BYTES = _counter("RemoteFetchBytes", PARTITION_LABELS, "Bytes read from the remote tier")
REMOTE_FETCH_REQUESTS = _counter(
    "RemoteFetchRequests",
    PARTITION_LABELS,
    "Reads of the remote tier (fetch, find-offset, restore, verify, rebuild, export)",
)
REMOTE_FETCH_ERRORS = _counter("RemoteFetchErrors", PARTITION_LABELS, "Reads of the remote tier that failed")
INDEX_REPAIRS = _counter("IndexRepairs", PARTITION_LABELS, "Remote index files rebuilt and replaced")
SCRUB_FAILURES = _counter("ScrubFailures", PARTITION_LABELS, "Remote segments a verify found damaged or missing")

REMOTE_COPY_LAG_BYTES = _gauge(
    "RemoteCopyLagBytes", PARTITION_LABELS, "Bytes of closed segments below the LSO not yet copied"
)
REMOTE_COPY_LAG_SEGMENTS = _gauge(
    "RemoteCopyLagSegments", PARTITION_LABELS, "Closed segments below the LSO not yet copied"
)
REMOTE_DELETE_LAG_BYTES = _gauge(
    "RemoteDeleteLagBytes", PARTITION_LABELS, "Bytes of remote segments past retention not yet deleted"
)
REMOTE_DELETE_LAG_SEGMENTS = _gauge(
    "RemoteDeleteLagSegments", PARTITION_LABELS, "Remote segments past retention not yet deleted"
)
REMOTE_LOG_SIZE_BYTES = _gauge(
    "RemoteLogSizeBytes", PARTITION_LABELS, "Bytes of the partition's copied remote segments"
)
REMOTE_LOG_METADATA_COUNT = _gauge("RemoteLogMetadataCount", PARTITION_LABELS, "Remote segment metadata entries kept")
TIERING_GAPS = _gauge("TieringGaps", PARTITION_LABELS, "Offset ranges the broker deleted before they were tiered")
TIERING_GAP_OFFSETS = _gauge("TieringGapOffsets", PARTITION_LABELS, "Offsets lost in tiering gaps")
LOCAL_RETENTION_RISK = _gauge(
    "LocalRetentionRisk", REPLICA_LABELS, "1 when the broker's retention may delete a segment not yet tiered"
)
LOCAL_RETENTION_HEADROOM_SECONDS = _gauge(
    "LocalRetentionHeadroomSeconds", REPLICA_LABELS, "Seconds before the broker's retention reaches untiered data"
)
LAST_COPY_AGE_SECONDS = _gauge("LastCopyAgeSeconds", PARTITION_LABELS, "Seconds since the last successful copy")
#: KIP-1257 (Kafka 4.3, ``kafka.log.remote:type=RemoteLogManager``), per partition, whole percents
#: (truncated), 0 where the limit is unlimited; may pass 100 until retention catches up.
RETENTION_SIZE_IN_PERCENT = _gauge(
    "RetentionSizeInPercent",
    PARTITION_LABELS,
    "Local and remote size of the partition in percent of retention.bytes (0: unlimited)",
)
LOCAL_RETENTION_SIZE_IN_PERCENT = _gauge(
    "LocalRetentionSizeInPercent",
    PARTITION_LABELS,
    "Local log size of the partition in percent of local.retention.bytes (0: unlimited)",
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
    "SilentBroker", BROKER_LABELS, "1 when the broker reported no fresh observation of any partition"
)

#: The upload and fetch quotas' throttle time (KIP-956, Kafka's names): over the takes that waited
#: of every process of the broker heard from within ``metadata.quota_holders.THROTTLE_WINDOW_MS``.
REMOTE_COPY_THROTTLE_TIME_AVG = _gauge(
    "remote-copy-throttle-time-avg", BROKER_LABELS, "Average milliseconds a copy waited for the broker's upload quota"
)
REMOTE_COPY_THROTTLE_TIME_MAX = _gauge(
    "remote-copy-throttle-time-max", BROKER_LABELS, "Longest milliseconds a copy waited for the broker's upload quota"
)
REMOTE_FETCH_THROTTLE_TIME_AVG = _gauge(
    "remote-fetch-throttle-time-avg", BROKER_LABELS, "Average milliseconds a read waited for the broker's fetch quota"
)
REMOTE_FETCH_THROTTLE_TIME_MAX = _gauge(
    "remote-fetch-throttle-time-max", BROKER_LABELS, "Longest milliseconds a read waited for the broker's fetch quota"
)
#: Each throttle metric's quota kind and whether it is the average (else the maximum).
THROTTLE_METRICS: dict[MetricSpec, tuple[str, bool]] = {
    REMOTE_COPY_THROTTLE_TIME_AVG: ("copy", True),
    REMOTE_COPY_THROTTLE_TIME_MAX: ("copy", False),
    REMOTE_FETCH_THROTTLE_TIME_AVG: ("fetch", True),
    REMOTE_FETCH_THROTTLE_TIME_MAX: ("fetch", False),
}

#: What only the Prometheus exposition reports (computed from the store, never emitted by a run).
PLATFORM_METRICS: tuple[MetricSpec, ...] = (SILENT_BROKER, *THROTTLE_METRICS)
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
