"""Export commits recorded on SQLite and PostgreSQL: under the table's export lease only (a stale
or released lease records nothing), the first record of a snapshot standing, each table by its
UUID, and read back by snapshot id or as the newest placed before a point of the table's history."""

from __future__ import annotations

import uuid

import pytest

from tiering_core.metadata.errors import FencedError
from tiering_core.metadata.store import ExportCommit, RemoteLogMetadataStore, TableLease

CATALOG, TABLE = "tiering", "kafka.orders"
TABLE_UUID = "5f0c8f5e-3d4b-4b8e-9a21-6c1e2d3f4a5b"


def commit(snapshot_id: int, sequence_number: int, timestamp_ms: int, table_uuid: str = TABLE_UUID) -> ExportCommit:
    exported = f'{{"AAAAAAAAAAAAAAAAAAAAAA":{{"0":[[0,{snapshot_id}]]}}}}'
    return ExportCommit(table_uuid, snapshot_id, sequence_number, timestamp_ms, exported)


def test_commits_are_recorded_under_the_table_lease_and_read_back_by_place(store: RemoteLogMetadataStore) -> None:
    lease = store.acquire_table_lease(CATALOG, TABLE, "export:a", ttl_ms=60_000)
    assert store.latest_export_commit(TABLE_UUID) is None
    first, second, third = commit(-7, 1, 1_000), commit(42, 2, 900), commit(2**63 - 1, 3, 1_100)
    for c in (third, first, second):  # the order of recording is not the order of the table's history
        assert store.record_export_commit(lease, c)
    assert not store.record_export_commit(lease, commit(42, 9, 9, table_uuid=TABLE_UUID))  # the first stands
    assert store.export_commit(TABLE_UUID, 42) == second
    assert store.export_commit(TABLE_UUID, 43) is None
    assert store.latest_export_commit(TABLE_UUID) == third
    assert store.latest_export_commit(TABLE_UUID, before=third.position) == second
    assert store.latest_export_commit(TABLE_UUID, before=(2, 901)) == second
    assert store.latest_export_commit(TABLE_UUID, before=(2, 900)) == first
    assert store.latest_export_commit(TABLE_UUID, before=(1, 1_000)) is None
    # a format-1 table: every sequence number is 0, the timestamps place the commits
    v1 = str(uuid.uuid4())
    for c in (commit(1, 0, 50, v1), commit(2, 0, 70, v1)):
        store.record_export_commit(lease, c)
    assert store.latest_export_commit(v1, before=(0, 70)) == commit(1, 0, 50, v1)
    # another table UUID (the table dropped and made again under its name) is another table
    assert store.latest_export_commit(str(uuid.uuid4())) is None


def test_an_export_that_lost_the_table_records_nothing(store: RemoteLogMetadataStore) -> None:
    stale = store.acquire_table_lease(CATALOG, TABLE, "export:a", ttl_ms=60_000)
    store.release_table_lease(stale)
    with pytest.raises(FencedError, match="was released"):
        store.record_export_commit(stale, commit(1, 1, 1))
    newer = store.acquire_table_lease(CATALOG, TABLE, "export:b", ttl_ms=60_000)
    with pytest.raises(FencedError, match="lease token 1 of export:a is fenced"):
        store.record_export_commit(stale, commit(1, 1, 1))
    assert store.latest_export_commit(TABLE_UUID) is None
    assert store.record_export_commit(newer, commit(1, 1, 1))
    never_leased = TableLease(CATALOG, "kafka.never-leased", "export:c", 1, 2**62)
    with pytest.raises(FencedError, match="unknown to the metadata store"):
        store.record_export_commit(never_leased, commit(2, 2, 2))


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"table_uuid": "orders"}, "must be a UUID"),
        ({"table_uuid": TABLE_UUID.upper()}, "canonical form"),
        ({"snapshot_id": 2**63}, "snapshot_id must be a 64-bit integer"),
        ({"sequence_number": True}, "sequence_number must be a 64-bit integer"),
        ({"timestamp_ms": "1"}, "timestamp_ms must be a 64-bit integer"),
        ({"exported": {"a": 1}}, "JSON text"),
    ],
)
def test_a_commit_that_cannot_be_one_is_refused(fields: dict[str, object], problem: str) -> None:
    values: dict[str, object] = {
        "table_uuid": TABLE_UUID,
        "snapshot_id": 1,
        "sequence_number": 1,
        "timestamp_ms": 1,
        "exported": "{}",
    }
    with pytest.raises(ValueError, match=problem):
        ExportCommit(**{**values, **fields})  # type: ignore[arg-type]
