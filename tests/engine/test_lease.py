"""Holding a partition (``tiering_core/engine/lease.py``, docs/architecture.md): the lease taken for
the block, renewed in the background past its time to live, given up at the end (also on an
error), and a run whose lease was taken over knowing it and who took it. On a real SQLite store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine_support import expire_lease, wait_until
from tests.metadata.support import tip
from tiering_core.engine.lease import MIN_RENEW_INTERVAL_S, held_partition, held_table, renew_interval
from tiering_core.metadata.errors import FencedError, LeaseHeldError
from tiering_core.metadata.store import RemoteLogMetadataStore

TIP = tip("LLLLLLLLLLLLLLLLLLLLLL", "orders", 0)


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[RemoteLogMetadataStore]:
    """Leases of 1.5 s: the heartbeat (every 0.5 s) must keep a run's lease past that."""
    with RemoteLogMetadataStore(f"sqlite:///{tmp_path / 'm.db'}", lease_ms=1500) as s:
        yield s


def test_a_lease_is_renewed_at_a_third_of_its_time_to_live() -> None:
    assert renew_interval(600_000) == 200.0
    assert renew_interval(1500) == 0.5
    assert renew_interval(30) == MIN_RENEW_INTERVAL_S  # no busy loop under the very short leases of tests


def test_the_lease_is_held_for_the_block_and_given_up_after_it_also_on_an_error(
    store: RemoteLogMetadataStore,
) -> None:
    with held_partition(store, TIP, holder="copy:run-1", run_id="run-1") as held:
        assert held.holds and held.lost is None and held.tip == TIP
        assert held.require() == held.lease and held.lease.holder == "copy:run-1"
        with pytest.raises(LeaseHeldError):  # another run waits
            store.acquire_lease(TIP, "retention:run-2")
    assert not held.holds and store.current_lease(TIP) is None
    with pytest.raises(FencedError, match="orders-0: the run no longer holds the partition"):
        held.require()
    with pytest.raises(RuntimeError, match="the block failed"), held_partition(store, TIP, holder="copy:run-3"):
        raise RuntimeError("the block failed")
    assert store.current_lease(TIP) is None


def test_the_heartbeat_keeps_the_lease_past_its_time_to_live(store: RemoteLogMetadataStore) -> None:
    with held_partition(store, TIP, holder="copy:long") as held:
        first = held.lease
        wait_until(lambda: held.beats >= 4, what="four renewals: twice the lease's time to live")
        assert held.holds and held.lease.token == first.token
        assert held.lease.expires_at_ms > first.expires_at_ms
        with pytest.raises(LeaseHeldError):
            store.acquire_lease(TIP, "copy:other")
    assert store.current_lease(TIP) is None


def test_without_a_heartbeat_the_lease_lapses_and_a_renewal_says_so(store: RemoteLogMetadataStore) -> None:
    with held_partition(store, TIP, holder="removal:short", heartbeat=False) as held:
        assert held.renew() and held.beats == 0  # renewed by hand, not in the background
        expire_lease(store, TIP)
        assert not held.renew() and not held.holds
        assert held.newer_holder() is None  # lapsed, and nobody took it since


def test_a_run_whose_lease_was_taken_knows_it_and_who_took_it(store: RemoteLogMetadataStore) -> None:
    with held_partition(store, TIP, holder="copy:stalled", heartbeat=False) as held:
        expire_lease(store, TIP)
        newer = store.acquire_lease(TIP, "copy:newer")
        assert not held.renew()
        assert held.lost is not None and not held.holds
        assert held.newer_holder() == "copy:newer"
        with pytest.raises(FencedError, match="no longer holds the partition"):
            held.require()
        held.lose("a later reason")  # the first reason is kept
        assert held.lost != "a later reason"
    assert store.current_lease(TIP) == newer  # the stalled run's end gives up nothing of the newer one's
    store.release_lease(newer)
    assert held.newer_holder() == f"a newer run (token {newer.token}, since released)"


def test_an_export_holds_its_table_by_the_same_idiom(store: RemoteLogMetadataStore) -> None:
    with held_table(store, "tiering", "kafka.orders", holder="export:run-1") as held:
        assert held.holds and held.subject == "kafka.orders"
        with pytest.raises(LeaseHeldError):
            store.acquire_table_lease("tiering", "kafka.orders", "export:run-2")
        with held_table(store, "tiering", "kafka.payments", holder="export:run-2") as other:
            assert other.holds  # another table: another lease
    assert not held.holds
    with held_table(store, "tiering", "kafka.orders", holder="export:run-3") as again:
        assert again.holds
