"""A run's tally of one partition: each act is sent at once and counted in memory, counts from many
threads add up, a request that raises is counted as an error too, and the counts reach the store
once when the run ends (also when it fails), never twice; a store that cannot take them is logged,
naming the partition, without failing the run."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.metadata.support import tip
from tests.monitoring.test_collect import RecordingSink
from tiering_core.metadata.counters import ReplicaCounters
from tiering_core.metadata.errors import MetadataStoreError
from tiering_core.metadata.store import RemoteLogMetadataStore, TaskAttempt
from tiering_core.metadata.values import NO_BROKER, PartitionCounters
from tiering_core.metrics import names
from tiering_core.metrics.sink import emitting
from tiering_core.metrics.tally import Tally, tallied

A = tip("AAAAAAAAAAAAAAAAAAAAAA", "orders", 4)
COPY = TaskAttempt("tiering_copy", "manual__1", "copy", 0, 1)


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[RemoteLogMetadataStore]:
    with RemoteLogMetadataStore(f"sqlite:///{tmp_path / 'metadata.db'}") as s:
        yield s


def stored(store: RemoteLogMetadataStore) -> dict[int, ReplicaCounters]:
    return {c.broker_id: c for c in store.partition_counters()}


def test_each_act_is_sent_at_once_and_counted_in_memory() -> None:
    sink = RecordingSink()
    tally = Tally(A, broker_id=2)
    assert not tally.acted
    with emitting(sink):
        tally.count(names.REMOTE_COPY_REQUESTS)
        tally.count(names.REMOTE_FETCH_BYTES, 300)
    assert sink.sent == [
        (names.REMOTE_COPY_REQUESTS.name, 1, {"topic": "orders", "partition": "4", "broker": "2"}),
        (names.REMOTE_FETCH_BYTES.name, 300, {"topic": "orders", "partition": "4"}),
    ]
    assert tally.counts == PartitionCounters(copy_requests=1, fetch_bytes=300)
    assert tally.acted


def test_a_request_that_raises_counts_as_a_request_and_an_error() -> None:
    tally = Tally(A)
    with tally.request(names.REMOTE_DELETE_REQUESTS, names.REMOTE_DELETE_ERRORS):
        pass
    with pytest.raises(OSError), tally.request(names.REMOTE_DELETE_REQUESTS, names.REMOTE_DELETE_ERRORS):
        raise OSError("the tier refused the deletion")
    assert tally.counts == PartitionCounters(delete_requests=2, delete_errors=1)


def test_counts_from_parallel_uploads_add_up() -> None:
    tally = Tally(A, broker_id=1)
    threads, per_thread = 8, 250

    def upload() -> None:
        for _ in range(per_thread):
            tally.count(names.REMOTE_COPY_REQUESTS)
            tally.copy_finished(10)

    workers = [threading.Thread(target=upload) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert tally.counts == PartitionCounters(copy_requests=threads * per_thread, copy_bytes=threads * per_thread * 10)
    assert tally.copied


def test_a_run_that_did_nothing_stores_nothing(store: RemoteLogMetadataStore) -> None:
    with tallied(store, A, broker_id=1):
        pass
    assert store.partition_counters() == []


def test_the_counts_are_stored_once_when_the_run_ends_even_when_it_fails(store: RemoteLogMetadataStore) -> None:
    with pytest.raises(RuntimeError), tallied(store, A, attempt=COPY) as tally:
        tally.copy_finished(700)
        tally.count(names.SCRUB_FAILURES)
        raise RuntimeError("the copy failed after one segment")
    rows = stored(store)
    assert set(rows) == {NO_BROKER}  # no broker given: the acts of no broker
    assert rows[NO_BROKER].counters == PartitionCounters(copy_bytes=700, scrub_failures=1)
    assert rows[NO_BROKER].last_copy_ms is not None and rows[NO_BROKER].last_task == COPY
    assert not tally.acted  # cleared once stored
    tally.store(store)  # storing again adds nothing
    assert stored(store)[NO_BROKER].counters == PartitionCounters(copy_bytes=700, scrub_failures=1)


def test_a_store_that_cannot_take_the_counts_does_not_fail_the_run(
    store: RemoteLogMetadataStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def unreachable(*args: object, **kwargs: object) -> None:
        raise MetadataStoreError("the metadata database could not be reached")

    monkeypatch.setattr(store, "add_counts", unreachable)  # the injected fault
    with caplog.at_level(logging.WARNING, logger="tiering_core.metrics.tally"), tallied(store, A, broker_id=1) as tally:
        tally.count(names.REMOTE_COPY_REQUESTS)
    (warning,) = caplog.records
    assert str(A) in warning.getMessage() and "could not be reached" in warning.getMessage()
