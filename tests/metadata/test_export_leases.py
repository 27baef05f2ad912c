"""Export table leases on SQLite and PostgreSQL: one export of a table at a time, fenced by a
token that only grows, renewed in the background, taken over at once by a later try of the same
task instance only; and across real OS processes that race for the same table."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from tests.metadata.support import start_in, worker
from tiering_core.engine.lease import held_partition, held_table
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.errors import FencedError, LeaseHeldError
from tiering_core.metadata.store import RemoteLogMetadataStore, TaskAttempt

CATALOG, TABLE = "tiering", "kafka.orders.eu"
FIRST = TaskAttempt("tiering_export", "scheduled__2026-11-25T00:00:00+00:00", "export_table", -1, 1)


def test_one_export_holds_a_table_and_a_stale_one_is_fenced(store: RemoteLogMetadataStore) -> None:
    first = store.acquire_table_lease(CATALOG, TABLE, "export:a", ttl_ms=60_000)
    with pytest.raises(LeaseHeldError, match=r"tiering\.kafka\.orders\.eu: lease held by export:a \(token 1\)"):
        store.acquire_table_lease(CATALOG, TABLE, "export:b")
    # another table, or the same name in another catalog, is another lease
    other = store.acquire_table_lease(CATALOG, "kafka.orders", "export:b")
    elsewhere = store.acquire_table_lease("lake", TABLE, "export:b")
    assert other.token == elsewhere.token == 1
    renewed = store.renew_table_lease(first)
    assert renewed.token == first.token and renewed.expires_at_ms >= first.expires_at_ms
    current = store.current_table_lease(CATALOG, TABLE)
    assert current is not None and (current.holder, current.token) == ("export:a", 1)
    store.release_table_lease(first)
    assert store.current_table_lease(CATALOG, TABLE) is None
    assert store.latest_table_lease_token(CATALOG, TABLE) == (1, None)
    second = store.acquire_table_lease(CATALOG, TABLE, "export:b")
    assert second.token == 2  # tokens only grow
    with pytest.raises(FencedError, match="lease token 1 of export:a is fenced"):
        store.renew_table_lease(first)
    assert store.release_table_lease_if_current(first) is False
    assert store.latest_table_lease_token(CATALOG, TABLE) == (2, "export:b")
    assert store.latest_table_lease_token(CATALOG, "kafka.none") is None


def test_an_expired_table_lease_passes_to_the_next_export(store: RemoteLogMetadataStore) -> None:
    stalled = store.acquire_table_lease(CATALOG, TABLE, "export:stalled", ttl_ms=300)
    deadline = time.monotonic() + 60
    while store.current_table_lease(CATALOG, TABLE) is not None:
        assert time.monotonic() < deadline, "the lease never expired"
        time.sleep(0.02)
    with pytest.raises(FencedError, match="expired"):
        store.renew_table_lease(stalled)
    newer = store.acquire_table_lease(CATALOG, TABLE, "export:next")
    assert newer.token == stalled.token + 1


def test_a_retry_of_the_same_task_instance_takes_the_table_over_at_once(store: RemoteLogMetadataStore) -> None:
    killed = store.acquire_table_lease(CATALOG, TABLE, FIRST.holder("export"), attempt=FIRST)
    for stranger in (
        dataclasses.replace(FIRST, run_id="manual__2026-11-25T00:05:00+00:00", try_number=2),
        dataclasses.replace(FIRST, task_id="other", try_number=2),
        FIRST,
    ):
        with pytest.raises(LeaseHeldError):
            store.acquire_table_lease(CATALOG, TABLE, stranger.holder("export"), attempt=stranger)
    with pytest.raises(LeaseHeldError):  # a partition run's try of the same names is another kind
        retry_copy = dataclasses.replace(FIRST, try_number=2)
        store.acquire_table_lease(CATALOG, TABLE, retry_copy.holder("copy"), attempt=retry_copy)
    retry = dataclasses.replace(FIRST, try_number=2)
    taken = store.acquire_table_lease(CATALOG, TABLE, retry.holder("export"), attempt=retry)
    assert taken.token == killed.token + 1 and taken.holder.endswith("#2")
    with pytest.raises(FencedError):
        store.renew_table_lease(killed)
    with pytest.raises(ValueError, match="not the name"):
        store.acquire_table_lease(CATALOG, TABLE, "export:someone#3", attempt=dataclasses.replace(FIRST, try_number=3))


def test_names_beyond_the_store_s_columns_are_refused(store: RemoteLogMetadataStore) -> None:
    with pytest.raises(ValueError, match="1024"):
        store.acquire_table_lease(CATALOG, "k." + "t" * 1023, "export:a")
    with pytest.raises(ValueError, match="255"):
        store.acquire_table_lease("c" * 256, TABLE, "export:a")


def test_held_table_renews_in_the_background_and_releases(metadata_url: str) -> None:
    with RemoteLogMetadataStore(metadata_url, lease_ms=2_000) as store:
        with held_table(store, CATALOG, TABLE, holder="export:run-1") as held:
            deadline = time.monotonic() + 60
            while held.beats < 4:  # each beat renewed the lease: it outlives its 2 s
                assert time.monotonic() < deadline and held.holds, held.lost
                time.sleep(0.05)
            assert held.renew() and held.subject == TABLE
            with pytest.raises(LeaseHeldError):
                store.acquire_table_lease(CATALOG, TABLE, "export:run-2")
            # the table's lease and a partition's are apart
            tip = TopicIdPartition("DDDDDDDDDDDDDDDDDDDDDD", TopicPartition("orders.eu", 0))
            with held_partition(store, tip, holder="copy:run-3", heartbeat=False):
                pass
        assert store.current_table_lease(CATALOG, TABLE) is None
        assert store.latest_table_lease_token(CATALOG, TABLE) == (1, None)
        assert held.holds is False


def test_processes_racing_for_a_table_get_one_lease_each_in_turn(metadata_url: str) -> None:
    """Real OS processes acquire the same fresh table's lease at one instant: exactly one wins, on
    a table row none of them had made before."""
    RemoteLogMetadataStore(metadata_url).close()  # opening creates the schema, before the race
    start_at = start_in(2.0)
    procs = [worker("table_lease", metadata_url, start_at) for _ in range(4)]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err for _, err in results]
    outcomes = [json.loads(out.strip().splitlines()[-1]) for out, _ in results]
    assert sorted(o["won"] for o in outcomes) == [False, False, False, True]
    with RemoteLogMetadataStore(metadata_url) as store:
        assert store.latest_table_lease_token(CATALOG, TABLE) == (1, next(o["holder"] for o in outcomes if o["won"]))
