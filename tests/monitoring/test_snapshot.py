"""A partition's figures in a snapshot: its counters are the sum over the brokers that acted, and it
is at risk only when a fresh replica's observation says so (a stale one's is not believed)."""

from __future__ import annotations

from dataclasses import fields

from tiering_core.metadata.values import NO_BROKER, PartitionCounters
from tiering_core.monitoring.snapshot import PartitionMetrics, ReplicaMetrics


def replica(broker_id: int, *, stale: bool, at_risk: bool) -> ReplicaMetrics:
    return ReplicaMetrics(broker_id, 1_000, stale, at_risk, 30.0 if at_risk else None, 90, 90, 100, 10, 4)


def partition(**kwargs: object) -> PartitionMetrics:
    return PartitionMetrics("orders", 0, "AAAAAAAAAAAAAAAAAAAAAA", **kwargs)  # type: ignore[arg-type]


def test_counters_are_summed_over_every_broker_and_no_broker() -> None:
    by_broker = {
        0: PartitionCounters(copy_bytes=100, copy_requests=2, copy_errors=1),
        1: PartitionCounters(copy_bytes=50, copy_requests=1, delete_requests=3),
        NO_BROKER: PartitionCounters(fetch_bytes=7, fetch_requests=1, index_repairs=2),
    }
    metrics = partition(counters_by_broker=by_broker)
    total = metrics.counters
    for f in fields(PartitionCounters):
        assert getattr(total, f.name) == sum(getattr(c, f.name) for c in by_broker.values()), f.name
    assert by_broker[0] == PartitionCounters(copy_bytes=100, copy_requests=2, copy_errors=1)  # not added into
    assert partition().counters == PartitionCounters()


def test_a_partition_is_at_risk_only_by_a_fresh_replica() -> None:
    assert not partition().at_risk
    assert not partition(replicas=[replica(0, stale=False, at_risk=False)]).at_risk
    assert not partition(replicas=[replica(0, stale=True, at_risk=True)]).at_risk
    assert partition(replicas=[replica(0, stale=True, at_risk=True), replica(1, stale=False, at_risk=True)]).at_risk
