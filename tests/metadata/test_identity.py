"""The store's identity, on SQLite and PostgreSQL: a new store has an id and its creation time and no
recovery under way; a recovery once begun keeps its start until it ends; the store tells whether it
knows any partition and any segment; a store whose identity row was removed is refused in words
that say how to mend it."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import delete

from tests.metadata.support import segment, tip
from tiering_core.metadata.errors import MetadataStoreError
from tiering_core.metadata.identity import STORE
from tiering_core.metadata.store import RemoteLogMetadataStore

A = tip("AAAAAAAAAAAAAAAAAAAAAA", "orders", 0)


def test_a_new_store_has_an_id_of_its_own_and_no_recovery(
    metadata_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    before = int(time.time() * 1000)
    with RemoteLogMetadataStore(metadata_url) as store:
        identity = store.store_identity()
        assert identity == store.store_identity()  # the same row, read again
    with RemoteLogMetadataStore(f"sqlite:///{tmp_path_factory.mktemp('other') / 'metadata.db'}") as other:
        assert other.store_identity().store_id != identity.store_id
    assert identity.store_id
    assert before - 60_000 <= identity.created_ms <= int(time.time() * 1000) + 60_000  # the database's clock
    assert identity.recovery_started_ms is None and not identity.recovering


def test_a_recovery_keeps_its_first_start_until_it_ends(store: RemoteLogMetadataStore) -> None:
    started = store.begin_recovery()
    assert started.recovering and started.store_id == store.store_identity().store_id
    assert store.store_identity() == started
    again = store.begin_recovery()  # a recover run again after it was interrupted
    assert again.recovery_started_ms == started.recovery_started_ms
    store.end_recovery()
    ended = store.store_identity()
    assert not ended.recovering and (ended.store_id, ended.created_ms) == (started.store_id, started.created_ms)


def test_the_store_tells_whether_it_holds_partitions_and_segments(store: RemoteLogMetadataStore) -> None:
    assert not store.holds_partitions() and not store.holds_segments()
    lease = store.acquire_lease(A, "copy")
    assert store.holds_partitions() and not store.holds_segments()
    store.add_segment(segment(A, 0, 99), lease)  # a copy only started counts too
    assert store.holds_segments()


def test_a_store_without_its_identity_row_is_refused_saying_how_to_mend_it(store: RemoteLogMetadataStore) -> None:
    with store.engine.begin() as conn:
        conn.execute(delete(STORE))
    with pytest.raises(MetadataStoreError, match="no identity row") as refused:
        store.store_identity()
    assert "`tiering recover`" in str(refused.value) and "backup" in str(refused.value)
