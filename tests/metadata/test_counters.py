"""Counters of what runs did, on SQLite and PostgreSQL: an add creates the row and later adds raise
it, the last copy takes the database clock and the last task the latest that acted, rows survive
reopening the store, and runs adding to one row at once lose no count."""

from __future__ import annotations

import threading

import pytest

from tests.metadata.support import tip
from tiering_core.metadata.counters import ReplicaCounters
from tiering_core.metadata.store import RemoteLogMetadataStore, TaskAttempt
from tiering_core.metadata.values import NO_BROKER, PartitionCounters

A = tip("AAAAAAAAAAAAAAAAAAAAAA", "orders", 0)
B = tip("BBBBBBBBBBBBBBBBBBBBBB", "payments", 3)
COPY = TaskAttempt("tiering_copy", "scheduled__2026-11-25T00:00:00+00:00", "copy", 2, 1)
RETRY = TaskAttempt("tiering_copy", "scheduled__2026-11-25T00:00:00+00:00", "copy", 2, 2)


def by_replica(store: RemoteLogMetadataStore, topic: str | None = None) -> dict[tuple[str, int, int], ReplicaCounters]:
    return {
        (c.topic_id_partition.topic_id, c.topic_id_partition.partition, c.broker_id): c
        for c in store.partition_counters(topic=topic)
    }


def test_adds_raise_one_row_per_replica_and_survive_reopening(metadata_url: str) -> None:
    with RemoteLogMetadataStore(metadata_url) as store:
        assert store.partition_counters() == []
        first = store.add_counts(
            A, PartitionCounters(copy_requests=2, copy_bytes=700), broker_id=1, copied=True, attempt=COPY
        )
        store.add_counts(A, PartitionCounters(copy_requests=1, copy_errors=1), broker_id=1, attempt=RETRY)
        store.add_counts(A, PartitionCounters(fetch_requests=3, fetch_bytes=90, fetch_errors=1))
        store.add_counts(B, PartitionCounters(delete_requests=4, delete_errors=1), broker_id=0)
        later = store.add_counts(A, PartitionCounters(index_repairs=2, scrub_failures=1))  # no task: keeps the last
    with RemoteLogMetadataStore(metadata_url) as store:
        rows = by_replica(store)
        assert set(rows) == {(A.topic_id, 0, 1), (A.topic_id, 0, NO_BROKER), (B.topic_id, 3, 0)}
        copied = rows[(A.topic_id, 0, 1)]
        assert copied.counters == PartitionCounters(copy_bytes=700, copy_requests=3, copy_errors=1)
        assert copied.last_copy_ms == first  # the failed copy after it did not move it
        assert copied.last_task == RETRY and copied.topic_id_partition == A
        read = rows[(A.topic_id, 0, NO_BROKER)]
        assert read.counters == PartitionCounters(
            fetch_bytes=90, fetch_requests=3, fetch_errors=1, index_repairs=2, scrub_failures=1
        )
        assert read.last_copy_ms is None and read.last_task is None and later >= first
        assert rows[(B.topic_id, 3, 0)].counters == PartitionCounters(delete_requests=4, delete_errors=1)
        assert set(by_replica(store, "payments")) == {(B.topic_id, 3, 0)}


def test_a_broker_id_below_no_broker_is_refused(store: RemoteLogMetadataStore) -> None:
    with pytest.raises(ValueError, match="NO_BROKER"):
        store.add_counts(A, PartitionCounters(copy_requests=1), broker_id=-2)
    assert store.partition_counters() == []


def test_runs_adding_to_one_row_at_once_lose_no_count(metadata_url: str) -> None:
    """Several stores (as separate processes would each open one) add to one replica's row at once."""
    threads, adds = 4, 25
    RemoteLogMetadataStore(metadata_url).close()  # the schema created once, before the race
    start = threading.Barrier(threads)
    failures: list[BaseException] = []

    def run() -> None:
        try:
            with RemoteLogMetadataStore(metadata_url) as store:
                start.wait()
                for _ in range(adds):
                    store.add_counts(A, PartitionCounters(copy_requests=1, copy_bytes=10), broker_id=1, copied=True)
        except BaseException as exc:  # reported below
            failures.append(exc)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert failures == []
    with RemoteLogMetadataStore(metadata_url) as store:
        (row,) = store.partition_counters()
    assert row.counters == PartitionCounters(copy_requests=threads * adds, copy_bytes=10 * threads * adds)
