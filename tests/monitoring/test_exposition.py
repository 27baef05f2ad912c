"""The exposition is Prometheus text format 0.0.4 as Prometheus' own parser reads it: every
metric of ``names`` with its help and type, counters as ``_total``, each value the snapshot's
(copies per broker, the other counters summed over brokers, unknown gauges left out), and fast."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from tiering_core.metadata.erasures import ErasureFigures, TableErasureFigures
from tiering_core.metadata.quota_holders import ThrottleFigures
from tiering_core.metadata.values import NO_BROKER, PartitionCounters
from tiering_core.metrics import names
from tiering_core.metrics.names import COUNTER_FIELDS
from tiering_core.monitoring.exposition import CONTENT_TYPE, ZERO_UNTIL_COMPUTED, escape_label_value, render
from tiering_core.monitoring.snapshot import MetricsSnapshot, PartitionMetrics, ReplicaMetrics
from tiering_core.storage.quota import ThrottleStats

NOW_MS = 1_700_000_100_000
EXPORTED = names.METRICS + names.PLATFORM_METRICS


def replica(broker_id: int, *, stale: bool = False, at_risk: bool = False, headroom: float | None = None):
    return ReplicaMetrics(
        broker_id=broker_id,
        observed_ms=NOW_MS - 1000,
        stale=stale,
        at_risk=at_risk,
        headroom_seconds=headroom,
        high_watermark=100,
        last_stable_offset=100,
        log_end_offset=100,
        local_log_start_offset=10,
        leader_epoch=3,
    )


def counters(seed: int) -> PartitionCounters:
    return PartitionCounters(*(seed * 100 + i for i in range(10)))


def sample_snapshot() -> MetricsSnapshot:
    copied = PartitionMetrics(
        topic="orders",
        partition=0,
        topic_id="id-0",
        remote_bytes=5_000_000_000,
        remote_segments=12,
        metadata_count=13,
        copy_lag_bytes=2048,
        copy_lag_segments=2,
        delete_lag_bytes=0,
        delete_lag_segments=0,
        retention_size_percent=137,
        local_retention_size_percent=42,
        gap_count=1,
        gap_offsets=5,
        last_copy_ms=NOW_MS - 61_500,
        best_broker=1,
        replicas=[replica(1, headroom=3600.5), replica(2, at_risk=True, headroom=12.0), replica(3, stale=True)],
        counters_by_broker={
            1: counters(1),
            2: counters(2),
            NO_BROKER: PartitionCounters(fetch_bytes=7, fetch_requests=1),
        },
    )
    never_observed = PartitionMetrics(topic="orders", partition=1, topic_id="id-1")
    # A topic name that needs every escape of the format (the store keeps what it was given).
    odd = PartitionMetrics(
        topic='we"ird\\to%pic\nx',
        partition=7,
        topic_id="id-7",
        copy_lag_bytes=0,
        copy_lag_segments=0,
        retention_size_percent=0,  # unlimited retention.bytes; local.retention.bytes not known
        best_broker=4,
        replicas=[replica(4, headroom=math.inf)],
        counters_by_broker={5: counters(5)},  # broker 5 holds no replica any more
    )
    throttles = [
        ThrottleFigures(1, "copy", ThrottleStats(throttle_ms=900.0, throttles=4, throttle_ms_max=400.5)),
        ThrottleFigures(2, "copy", ThrottleStats()),  # capped, never waited
        ThrottleFigures(NO_BROKER, "fetch", ThrottleStats(throttle_ms=30.0, throttles=2, throttle_ms_max=20.0)),
    ]
    return MetricsSnapshot(
        db_now_ms=NOW_MS,
        partitions=[copied, never_observed, odd],
        silent_brokers=[3, 6],
        throttles=throttles,
        dag_runs={"tiering_copy__orders": True, "tiering_retention_default_topics": False},
        erasures=[
            ErasureFigures("orders", "finished", 3, 40),
            ErasureFigures("orders", "started", 1, 2),
            ErasureFigures('we"ird\\to%pic\nx', "finished", 1, 5),
        ],
        table_erasures=[TableErasureFigures("orders", 2, 17, 3), TableErasureFigures("payments", 1, 0, 0)],
    )


def parsed(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """sample name -> sorted labels -> value."""
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = tuple(sorted(s.labels.items()))
            assert key not in samples.setdefault(s.name, {}), f"duplicate sample {s.name}{key}"
            samples[s.name][key] = s.value
    return samples


def expected(snapshot: MetricsSnapshot) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """What every sample must be, computed from the snapshot the plain way."""
    want: dict[str, dict[tuple[tuple[str, str], ...], float]] = {spec.prometheus_samples[0]: {} for spec in EXPORTED}
    gauges = {
        names.REMOTE_COPY_LAG_BYTES: lambda p: p.copy_lag_bytes,
        names.REMOTE_COPY_LAG_SEGMENTS: lambda p: p.copy_lag_segments,
        names.REMOTE_DELETE_LAG_BYTES: lambda p: p.delete_lag_bytes,
        names.REMOTE_DELETE_LAG_SEGMENTS: lambda p: p.delete_lag_segments,
        names.REMOTE_LOG_SIZE_BYTES: lambda p: p.remote_bytes,
        names.REMOTE_LOG_METADATA_COUNT: lambda p: p.metadata_count,
        names.TIERING_GAPS: lambda p: p.gap_count,
        names.TIERING_GAP_OFFSETS: lambda p: p.gap_offsets,
        names.LAST_COPY_AGE_SECONDS: lambda p: None if p.last_copy_ms is None else (NOW_MS - p.last_copy_ms) / 1000,
        names.RETENTION_SIZE_IN_PERCENT: lambda p: p.retention_size_percent,
        names.LOCAL_RETENTION_SIZE_IN_PERCENT: lambda p: p.local_retention_size_percent,
    }
    seen: set[int] = set()
    for p in snapshot.partitions:
        part = (("partition", str(p.partition)), ("topic", p.topic))
        total = p.counters
        for spec, field in COUNTER_FIELDS.items():
            sample = want[spec.prometheus_samples[0]]
            if "broker" in spec.labels:
                brokers = {r.broker_id for r in p.replicas} | (set(p.counters_by_broker) - {NO_BROKER})
                for b in brokers:
                    c = p.counters_by_broker.get(b, PartitionCounters())
                    sample[tuple(sorted((*part, ("broker", str(b)))))] = getattr(c, field)
            else:
                sample[part] = getattr(total, field)
        for spec, value_of in gauges.items():
            value = value_of(p)
            if value is None and p.best_broker is not None and spec in ZERO_UNTIL_COMPUTED:
                value = 0  # observed, not computed: Kafka's gauge before its first computation
            if value is not None:
                want[spec.prometheus_name][part] = value
        for r in p.replicas:
            seen.add(r.broker_id)
            if r.stale:
                continue
            labels = tuple(sorted((*part, ("broker", str(r.broker_id)))))
            want[names.LOCAL_RETENTION_RISK.prometheus_name][labels] = 1 if r.at_risk else 0
            headroom = math.inf if r.headroom_seconds is None else r.headroom_seconds
            want[names.LOCAL_RETENTION_HEADROOM_SECONDS.prometheus_name][labels] = headroom
    for b in seen | set(snapshot.silent_brokers):
        want[names.SILENT_BROKER.prometheus_name][(("broker", str(b)),)] = 1 if b in snapshot.silent_brokers else 0
    for spec, (kind, average) in names.THROTTLE_METRICS.items():
        for b in seen | set(snapshot.silent_brokers):
            want[spec.prometheus_name][(("broker", str(b)),)] = 0.0  # no figure: never throttled
        for f in snapshot.throttles:
            if f.kind == kind:
                labels = () if f.broker_id == NO_BROKER else (("broker", str(f.broker_id)),)
                value = f.stats.throttle_ms / f.stats.throttles if f.stats.throttles else 0.0
                want[spec.prometheus_name][labels] = (value if average else f.stats.throttle_ms_max) / 1000
    for dag_id, failed in snapshot.dag_runs.items():
        want[names.DAG_RUN_FAILED.prometheus_name][(("dag_id", dag_id),)] = 1 if failed else 0
    for e in snapshot.erasures:
        want[names.ERASURES.prometheus_samples[0]][(("outcome", e.outcome), ("topic", e.topic))] = e.erasures
        removed = want[names.ERASED_RECORDS.prometheus_samples[0]]
        removed[(("topic", e.topic),)] = removed.get((("topic", e.topic),), 0) + e.records_removed
    for t in snapshot.table_erasures:
        want[names.ERASED_TABLE_ROWS.prometheus_samples[0]][(("topic", t.topic),)] = t.rows_deleted
        want[names.ERASURE_EXPIRED_SNAPSHOTS.prometheus_samples[0]][(("topic", t.topic),)] = t.snapshots_expired
    return {sample: values for sample, values in want.items() if values}  # a family without samples


def test_every_value_is_the_snapshots() -> None:
    snapshot = sample_snapshot()
    assert parsed(render(snapshot)) == expected(snapshot)


def test_copy_counters_are_per_broker_and_the_others_summed() -> None:
    samples = parsed(render(sample_snapshot()))
    part = (("partition", "0"), ("topic", "orders"))
    copy_bytes = samples["tiering_remote_copy_bytes_total"]
    assert copy_bytes[(("broker", "1"), *part)] == 100 and copy_bytes[(("broker", "2"), *part)] == 200
    assert copy_bytes[(("broker", "3"), *part)] == 0  # a replica that has not copied yet: a 0, not absent
    assert (("broker", str(NO_BROKER)), *part) not in copy_bytes  # reads run on no broker
    assert samples["tiering_remote_fetch_bytes_total"][part] == 105 + 205 + 7
    assert samples["tiering_remote_fetch_requests_total"][part] == 106 + 206 + 1
    odd = (("partition", "7"), ("topic", 'we"ird\\to%pic\nx'))
    assert samples["tiering_remote_copy_bytes_total"][(("broker", "5"), *odd)] == 500  # moved away, still counted


def test_unknown_gauges_are_left_out_and_stale_replicas_report_no_risk() -> None:
    samples = parsed(render(sample_snapshot()))
    never = (("partition", "1"), ("topic", "orders"))
    assert (
        never not in samples["tiering_remote_copy_lag_bytes"] and never not in samples["tiering_last_copy_age_seconds"]
    )
    assert samples["tiering_remote_log_size_bytes"][never] == 0  # known: nothing copied
    risk = samples["tiering_local_retention_risk"]
    part = (("partition", "0"), ("topic", "orders"))
    assert risk[(("broker", "2"), *part)] == 1 and risk[(("broker", "1"), *part)] == 0
    assert (("broker", "3"), *part) not in risk  # stale
    assert samples["tiering_last_copy_age_seconds"][part] == 61.5
    # KIP-1257's percents: over 100 until retention catches up, 0 for unlimited, absent when not known
    assert samples["tiering_retention_size_in_percent"][part] == 137
    assert samples["tiering_local_retention_size_in_percent"][part] == 42
    odd = (("partition", "7"), ("topic", 'we"ird\\to%pic\nx'))
    assert samples["tiering_retention_size_in_percent"][odd] == 0
    assert samples["tiering_local_retention_size_in_percent"][odd] == 0  # observed, its limit not known
    assert never not in samples["tiering_retention_size_in_percent"]
    assert samples["tiering_silent_broker"] == {
        (("broker", b),): v for b, v in [("1", 0), ("2", 0), ("3", 1), ("4", 0), ("6", 1)]
    }


def test_the_quotas_throttle_time_is_per_known_broker_in_seconds() -> None:
    samples = parsed(render(sample_snapshot()))
    quiet = {(("broker", b),): 0.0 for b in ("3", "4", "6")}  # known brokers no quota held back
    copy_avg = samples["tiering_remote_copy_throttle_time_avg_seconds"]
    assert copy_avg == {(("broker", "1"),): 0.225, (("broker", "2"),): 0.0, **quiet}  # Kafka's 225 ms
    copy_max = samples["tiering_remote_copy_throttle_time_max_seconds"]
    assert copy_max == {(("broker", "1"),): 0.4005, (("broker", "2"),): 0.0, **quiet}
    # a process of no broker, unlabelled; every known broker at 0
    fetch_avg = samples["tiering_remote_fetch_throttle_time_avg_seconds"]
    assert fetch_avg == {(): 0.015, (("broker", "1"),): 0.0, (("broker", "2"),): 0.0, **quiet}
    assert samples["tiering_remote_fetch_throttle_time_max_seconds"][()] == 0.02
    assert names.REMOTE_COPY_THROTTLE_TIME_AVG.kafka_name == (
        "kafka.server:type=RemoteLogManager remote-copy-throttle-time-avg"
    )


def test_format_details() -> None:
    text = render(sample_snapshot())
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"
    assert text.endswith("\n") and not text.endswith("\n\n") and not text.startswith("\n")
    for spec in EXPORTED:
        sample = spec.prometheus_samples[0]
        assert f"# HELP {sample} {spec.help}\n# TYPE {sample} {spec.kind.value}\n" in text
    assert 'topic="we\\"ird\\\\to%pic\\nx"' in text  # escaped as the format says
    assert 'tiering_local_retention_headroom_seconds{topic="we' in text and "} +Inf\n" in text
    assert 'tiering_remote_log_size_bytes{topic="orders",partition="0"} 5000000000\n' in text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["tiering_remote_copy_bytes"].type == "counter"
    assert families["tiering_remote_copy_lag_bytes"].type == "gauge"
    assert escape_label_value('a\\b"c\nd') == 'a\\\\b\\"c\\nd'


def test_an_empty_snapshot_still_describes_every_metric() -> None:
    text = render(MetricsSnapshot(db_now_ms=NOW_MS, partitions=[]))
    assert {f.name for f in text_string_to_metric_families(text)} == {spec.prometheus_name for spec in EXPORTED}
    assert all(not f.samples for f in text_string_to_metric_families(text))


def large_snapshot(partitions: int = 10_000, brokers: int = 3) -> MetricsSnapshot:
    """``partitions`` partitions, each replicated on ``brokers`` brokers with counts on each and reads."""
    parts = []
    for i in range(partitions):
        by_broker = {b: counters(i * 7 + b) for b in range(brokers)}
        by_broker[NO_BROKER] = PartitionCounters(fetch_bytes=i * 1000, fetch_requests=i)
        parts.append(
            PartitionMetrics(
                topic=f"topic-{i // 100:03d}",
                partition=i % 100,
                topic_id=f"id-{i // 100}",
                remote_bytes=i * 1_000_000_007,
                remote_segments=i,
                metadata_count=i + 1,
                copy_lag_bytes=i * 3,
                copy_lag_segments=i % 5,
                delete_lag_bytes=i * 2,
                delete_lag_segments=i % 3,
                retention_size_percent=i % 150,
                local_retention_size_percent=None if i % 4 == 0 else i % 120,
                gap_count=i % 2,
                gap_offsets=i % 2 * 10,
                last_copy_ms=NOW_MS - i * 17,
                replicas=[replica(b, at_risk=b == i % brokers, headroom=i + b / 2) for b in range(brokers)],
                counters_by_broker=by_broker,
            )
        )
    throttles = [
        ThrottleFigures(b, kind, ThrottleStats(b * 100.0, b + 1, b * 50.0))
        for b in range(brokers)
        for kind in ("copy", "fetch")
    ]
    return MetricsSnapshot(db_now_ms=NOW_MS, partitions=parts, silent_brokers=[], throttles=throttles)


def test_ten_thousand_partitions_on_three_brokers_render_right() -> None:
    """The values at scale (its speed is measured by bench/bench_page.py, beside a bare query)."""
    snapshot = large_snapshot()
    assert parsed(render(snapshot)) == expected(snapshot)


def test_erasures_are_counted_per_topic_and_outcome_and_their_records_per_topic() -> None:
    """Erasures per topic and outcome; a topic's records removed summed over its outcomes (the
    killed erasure's switched segments count too); no erasure yet: the families have no sample."""
    from dataclasses import replace

    samples = parsed(render(sample_snapshot()))
    odd = 'we"ird\\to%pic\nx'
    assert samples["tiering_erasures_total"] == {
        (("outcome", "finished"), ("topic", "orders")): 3,
        (("outcome", "started"), ("topic", "orders")): 1,
        (("outcome", "finished"), ("topic", odd)): 1,
    }
    assert samples["tiering_erased_records_total"] == {(("topic", "orders"),): 42, (("topic", odd),): 5}
    tables = {(("topic", "orders"),): 17, (("topic", "payments"),): 0}
    assert samples["tiering_erased_table_rows_total"] == tables  # a topic whose table held no row: a 0
    assert samples["tiering_erasure_expired_snapshots_total"] == {
        (("topic", "orders"),): 3,
        (("topic", "payments"),): 0,
    }
    none_yet = parsed(render(replace(sample_snapshot(), erasures=[], table_erasures=[])))
    assert "tiering_erasures_total" not in none_yet and "tiering_erased_records_total" not in none_yet
    assert "tiering_erased_table_rows_total" not in none_yet
