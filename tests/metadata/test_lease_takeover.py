"""A retry takes over its own killed try's lease at once, on SQLite and PostgreSQL; every other
holder (another task, run, DAG or map index, an earlier or the same try, a run with no task
identity) still waits, and the previous try's late writes are fenced."""

from __future__ import annotations

import dataclasses

import pytest

from tests.metadata.support import S, segment, tip
from tests.metadata.test_leases import WRITES, snapshot
from tiering_core.engine.lease import held_partition
from tiering_core.metadata.errors import FencedError, LeaseHeldError
from tiering_core.metadata.store import Lease, RemoteLogMetadataStore, TaskAttempt
from tiering_core.metadata.values import MAX_HOLDER_CHARS

TIP = tip("CCCCCCCCCCCCCCCCCCCCCC", "orders", 1)  # the partition of test_leases' WRITES
FIRST = TaskAttempt("tiering_copy", "scheduled__2026-11-25T00:00:00+00:00", "copy.copy_partition", 3, 1)


def acquire(store: RemoteLogMetadataStore, attempt: TaskAttempt, kind: str = "copy", ttl_ms: int = 600_000) -> Lease:
    return store.acquire_lease(TIP, attempt.holder(kind), ttl_ms=ttl_ms, attempt=attempt)


def test_a_retry_takes_over_its_previous_try_lease_at_once_and_fences_it(store: RemoteLogMetadataStore) -> None:
    killed = acquire(store, FIRST)
    started = segment(TIP, 0, 99)
    store.add_segment(started, killed)  # the killed try had begun a copy
    retry = acquire(store, dataclasses.replace(FIRST, try_number=2))
    assert retry.token > killed.token and retry.holder.endswith("#2")
    current = store.current_lease(TIP)
    assert current is not None and (current.holder, current.token) == (retry.holder, retry.token)
    before = snapshot(store)
    for name, write in sorted(WRITES.items()):  # the killed try, should it still run, lands nothing
        with pytest.raises(FencedError):
            write(store, killed, started.segment_id)
        assert snapshot(store) == before, name
    assert store.release_lease_if_current(killed) is False
    store.update_segment_state(started.segment_id, S.COPY_SEGMENT_FINISHED, retry)  # the retry writes
    # A third try takes over from the second the same way (tries 1 and 2 both ended).
    third = acquire(store, dataclasses.replace(FIRST, try_number=3))
    assert third.token > retry.token
    with pytest.raises(FencedError):
        store.renew_lease(retry)


STRANGERS = {
    "another task": dataclasses.replace(FIRST, task_id="retention.retention_partition", try_number=2),
    "another run": dataclasses.replace(FIRST, run_id="manual__2026-11-25T00:05:00+00:00", try_number=2),
    "another dag": dataclasses.replace(FIRST, dag_id="tiering_copy_orders", try_number=2),
    "another map index": dataclasses.replace(FIRST, map_index=4, try_number=2),
    "unmapped": dataclasses.replace(FIRST, map_index=-1, try_number=2),
    "the same try": FIRST,
}


@pytest.mark.parametrize("who", sorted(STRANGERS))
def test_anyone_but_a_later_try_of_the_same_task_instance_still_waits(store: RemoteLogMetadataStore, who: str) -> None:
    held = acquire(store, FIRST)
    with pytest.raises(LeaseHeldError, match="held by"):
        acquire(store, STRANGERS[who])
    with pytest.raises(LeaseHeldError):
        store.acquire_lease(TIP, f"copy:{FIRST.run_id}")  # a run with no task identity
    store.renew_lease(held)  # still the holder


def test_an_earlier_try_cannot_take_the_lease_of_a_later_one(store: RemoteLogMetadataStore) -> None:
    second = acquire(store, dataclasses.replace(FIRST, try_number=2))
    with pytest.raises(LeaseHeldError):
        acquire(store, FIRST)
    store.renew_lease(second)


def test_a_retry_does_not_take_over_a_run_without_task_identity_nor_another_kind(
    store: RemoteLogMetadataStore,
) -> None:
    plain = store.acquire_lease(TIP, f"copy:{FIRST.run_id}", ttl_ms=600_000)  # e.g. `tiering copy`
    with pytest.raises(LeaseHeldError):
        acquire(store, dataclasses.replace(FIRST, try_number=2))
    store.release_lease(plain)
    acquire(store, FIRST, kind="retention")
    with pytest.raises(LeaseHeldError):  # same names, but a retention run's lease is not a copy's
        acquire(store, dataclasses.replace(FIRST, try_number=2), kind="copy")


def test_the_holder_must_be_the_attempt_s_name(store: RemoteLogMetadataStore) -> None:
    with pytest.raises(ValueError, match="not the name"):
        store.acquire_lease(TIP, "copy:somebody-else#2", attempt=dataclasses.replace(FIRST, try_number=2))
    assert store.current_lease(TIP) is None


def test_long_names_fit_the_store_and_still_pass_to_the_retry(store: RemoteLogMetadataStore) -> None:
    long = TaskAttempt("d" * 250, "r" * 250, "t" * 250, 12345, 9)
    assert len(long.holder("delete-partition")) <= MAX_HOLDER_CHARS
    other = dataclasses.replace(long, task_id="t" * 249 + "u", try_number=10)
    assert long.instance_name("copy") != other.instance_name("copy")  # the digest tells them apart
    killed = acquire(store, long)
    with pytest.raises(LeaseHeldError):
        acquire(store, other)
    retry = acquire(store, dataclasses.replace(long, try_number=10))  # 9 -> 10: one digit more
    record = store.get_partition(TIP)
    assert retry.token > killed.token and record is not None and record.lease_holder == retry.holder


def test_held_partition_names_a_scheduled_try_after_its_task_instance(store: RemoteLogMetadataStore) -> None:
    with held_partition(store, TIP, holder="copy:ignored-run", run_id=FIRST.run_id, attempt=FIRST, heartbeat=False):
        current = store.current_lease(TIP)
        assert current is not None and current.holder == FIRST.holder("copy")
        with held_partition(
            store, TIP, holder="copy:x", attempt=dataclasses.replace(FIRST, try_number=2), heartbeat=False
        ) as retry:
            assert retry.holds and retry.lease.holder == f"copy:{FIRST.dag_id}/{FIRST.run_id}/{FIRST.task_id}[3]#2"
    assert store.current_lease(TIP) is None  # the retry released it; the first try's release was a no-op


def test_a_task_attempt_is_validated() -> None:
    with pytest.raises(ValueError):
        TaskAttempt("d", "r", "t", -1, -1)
    with pytest.raises(ValueError):
        TaskAttempt("", "r", "t")
    assert TaskAttempt("d", "r", "t").holder("copy") == "copy:d/r/t#1"
