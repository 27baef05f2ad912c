"""Alembic migrations on SQLite and PostgreSQL: from empty, round trip, schema == models, data kept
across revisions; first use creates a new database at head (also when several processes open it at
once), and a store behind or ahead of the code is refused, never migrated unasked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, inspect, text

import tiering_core.metadata.migrations
from tests.metadata.support import finish, refused_then_upgraded, segment, start_in, tip, worker
from tiering_core.metadata.erasures import (
    ErasureRecord,
    LocalSegment,
    LocalSegments,
    SegmentErasure,
    TableErasureRecord,
)
from tiering_core.metadata.errors import MetadataStoreError, SchemaAheadError
from tiering_core.metadata.migrations import current_revision, downgrade, head_revision, upgrade
from tiering_core.metadata.models import DIALECT_INDEXES, Base
from tiering_core.metadata.store import ExportCommit, RemoteLogMetadataStore
from tiering_core.metadata.values import ReplayRecord
from tiering_core.storage.quota import ThrottleStats

TIP = tip("MMMMMMMMMMMMMMMMMMMMMM", "orders", 0)


MIGRATIONS = Path(tiering_core.metadata.migrations.__file__).resolve().parent


def script_head() -> str:
    """The head revision as the Alembic script directory says (one head, a linear history)."""
    scripts = ScriptDirectory(str(MIGRATIONS))
    heads = scripts.get_heads()
    assert len(heads) == 1, heads
    return heads[0]


def schema_diffs(engine: Engine) -> list[object]:
    """Differences between the database and the models as they apply to its backend."""
    dialect = engine.dialect.name

    def applies(obj: object, name: str | None, type_: str, reflected: bool, _compare_to: object) -> bool:
        return not (type_ == "index" and name in DIALECT_INDEXES and DIALECT_INDEXES[name] != dialect)

    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"include_object": applies})
        return list(compare_metadata(context, Base.metadata))


def index_names(engine: Engine) -> set[str]:
    found = set()
    for table in inspect(engine).get_table_names():
        found |= {ix["name"] for ix in inspect(engine).get_indexes(table) if ix["name"]}
    return found


def tiering_tables(engine: Engine) -> list[str]:
    return sorted(t for t in inspect(engine).get_table_names() if t.startswith("tiering_"))


def test_upgrade_from_empty_downgrade_to_base_and_again_matches_the_models(metadata_url: str) -> None:
    engine = create_engine(metadata_url)
    try:
        assert current_revision(metadata_url) is None
        upgrade(metadata_url)
        assert current_revision(metadata_url) == head_revision() == script_head()
        assert schema_diffs(engine) == []
        assert {"ix_segment_epochs_cover", "ix_partitions_topic_partition"} <= index_names(engine)
        backend_only = {name for name, dialect in DIALECT_INDEXES.items() if dialect == engine.dialect.name}
        assert backend_only and backend_only <= index_names(engine)
        assert not (set(DIALECT_INDEXES) - backend_only) & index_names(engine)
        assert tiering_tables(engine) == sorted(t.name for t in Base.metadata.sorted_tables)
        downgrade(metadata_url, "base")
        assert current_revision(metadata_url) is None
        assert tiering_tables(engine) == []
        upgrade(metadata_url, "0001")
        assert current_revision(metadata_url) == "0001"
        upgrade(metadata_url)
        assert schema_diffs(engine) == []
    finally:
        engine.dispose()


def test_data_written_at_0001_survives_the_upgrade_and_the_way_back(metadata_url: str) -> None:
    upgrade(metadata_url, "0001")
    engine = create_engine(metadata_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO tiering_partitions (id, topic_id, topic, partition, delete_state, dropped, "
                    "lease_holder, lease_token, lease_expires_ms, fencing_counter, remote_log_start_offset, "
                    "delete_records_offset, finish_counter) "
                    "VALUES (1, :tid, 'orders', 0, NULL, false, NULL, 3, 0, 3, 10, 4242, 1)"
                ),
                {"tid": TIP.topic_id},
            )
            conn.execute(
                text(
                    "INSERT INTO tiering_segments (segment_id, partition_id, start_offset, end_offset, "
                    "max_timestamp, size_bytes, state, leader_epochs, writer_token, event_time, finish_seq, "
                    "custom_metadata) VALUES ('6f1c1f5e-5b1e-4c59-8a3f-0b4a4cbd2c11', 1, 0, 9999, 5, 77, "
                    "'COPY_SEGMENT_FINISHED', '{\"0\": 0}', 3, 5, 1, '{}')"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO tiering_segment_epochs (segment_id, epoch, partition_id, start_offset, end_offset, "
                    "finish_seq) VALUES ('6f1c1f5e-5b1e-4c59-8a3f-0b4a4cbd2c11', 0, 1, 0, 9999, 1)"
                )
            )
            conn.execute(
                text("INSERT INTO tiering_epoch_highest (partition_id, epoch, highest_offset) VALUES (1, 0, 9999)")
            )
        upgrade(metadata_url)
        with RemoteLogMetadataStore(metadata_url) as store:
            # 0001's column held DeleteRecords observed in the broker's files too: kept, never counted.
            (kept,) = store.delete_records_observations(TIP)
            assert (kept.offset, kept.source, kept.applied) == (4242, "metadata schema 0001", False)
            assert store.get_delete_records_offset(TIP) is None
            assert store.get_remote_log_start_offset(TIP) == 10
            # The backfilled widest range lets segment_for reach deep into the old segment.
            found = store.segment_for(TIP, 0, 9_000)
            assert found is not None and found.size_bytes == 77
            lease = store.acquire_lease(TIP, "after-upgrade")
            assert lease.token == 4
            store.record_delete_records(TIP, 5000, lease)
        downgrade(metadata_url, "0001")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT delete_records_offset FROM tiering_partitions")).scalar() == 5000
    finally:
        engine.dispose()


def test_0006_adds_export_table_leases_and_keeps_what_0005_held(metadata_url: str) -> None:
    """A store at 0005 (partitions and their leases in use) is refused on open, then gains the
    export table leases by the upgrade; their tokens start at 1 beside the partitions' own; the
    way back drops only them."""
    upgrade(metadata_url, "0005_counters")
    engine = create_engine(metadata_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO tiering_partitions (id, topic_id, topic, partition, delete_state, dropped, "
                    "lease_holder, lease_token, lease_expires_ms, fencing_counter, remote_log_start_offset, "
                    "finish_counter, created_ms, updated_ms) "
                    "VALUES (1, :tid, 'orders', 0, NULL, false, NULL, 7, 0, 7, NULL, 0, 1, 1)"
                ),
                {"tid": TIP.topic_id},
            )
        assert "tiering_export_tables" not in tiering_tables(engine)
        refused_then_upgraded(metadata_url, "0005_counters")
        with RemoteLogMetadataStore(metadata_url) as store:
            assert current_revision(metadata_url) == head_revision()
            assert "tiering_export_tables" in tiering_tables(engine)
            lease = store.acquire_table_lease("tiering", "kafka.orders", "export:after-upgrade")
            assert lease.token == 1
            assert store.acquire_lease(TIP, "copy:after-upgrade").token == 8
        downgrade(metadata_url, "0005_counters")
        assert "tiering_export_tables" not in tiering_tables(engine)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT fencing_counter FROM tiering_partitions")).scalar() == 8
        upgrade(metadata_url)
        assert schema_diffs(engine) == []
    finally:
        engine.dispose()


def test_0007_adds_export_commits_and_keeps_the_export_leases_0006_held(metadata_url: str) -> None:
    """A store at 0006 (an export table's lease in use) is refused on open, then gains the export
    commits by the upgrade; a commit is recorded under the lease taken after the upgrade; the way
    back drops only them."""
    upgrade(metadata_url, "0006_export_leases")
    engine = create_engine(metadata_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO tiering_export_tables (catalog, table_name, lease_holder, lease_token, "
                    "lease_expires_ms, fencing_counter, created_ms, updated_ms) "
                    "VALUES ('tiering', 'kafka.orders', NULL, 4, 0, 4, 1, 1)"
                )
            )
        assert "tiering_export_commits" not in tiering_tables(engine)
        refused_then_upgraded(metadata_url, "0006_export_leases")
        with RemoteLogMetadataStore(metadata_url) as store:
            assert current_revision(metadata_url) == head_revision()
            assert "tiering_export_commits" in tiering_tables(engine)
            lease = store.acquire_table_lease("tiering", "kafka.orders", "export:after-upgrade")
            assert lease.token == 5
            commit = ExportCommit("0b5d1c2e-8f43-4f0e-9a51-3f1d2f6c7a80", 2**62, 3, 1_795_000_000_000, "{}")
            assert store.record_export_commit(lease, commit)
            assert store.latest_export_commit(commit.table_uuid) == commit
        downgrade(metadata_url, "0006_export_leases")
        assert "tiering_export_commits" not in tiering_tables(engine)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT fencing_counter FROM tiering_export_tables")).scalar() == 5
        upgrade(metadata_url)
        assert schema_diffs(engine) == []
    finally:
        engine.dispose()


def test_0008_adds_quota_holders_and_keeps_the_export_commits_0007_held(metadata_url: str) -> None:
    """A store at 0007 (an export commit recorded) is refused on open, then gains the quota holders
    by the upgrade; a process then draws on a broker's quota beside the commit kept; the way back
    drops only the holders."""
    upgrade(metadata_url, "0007_export_commits")
    engine = create_engine(metadata_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO tiering_export_commits (table_uuid, snapshot_id, catalog, table_name, "
                    "sequence_number, timestamp_ms, exported, lease_token, recorded_ms) "
                    "VALUES ('0b5d1c2e-8f43-4f0e-9a51-3f1d2f6c7a80', 11, 'tiering', 'kafka.orders', 3, 5, '{}', 4, 1)"
                )
            )
        assert "tiering_quota_holders" not in tiering_tables(engine)
        refused_then_upgraded(metadata_url, "0007_export_commits")
        with RemoteLogMetadataStore(metadata_url) as store:
            assert current_revision(metadata_url) == head_revision()
            assert "tiering_quota_holders" in tiering_tables(engine)
            assert store.heartbeat_quota(1, "copy", "after-upgrade", ThrottleStats(5.0, 1, 5.0)) == 1
            assert store.latest_export_commit("0b5d1c2e-8f43-4f0e-9a51-3f1d2f6c7a80") is not None
        downgrade(metadata_url, "0007_export_commits")
        assert "tiering_quota_holders" not in tiering_tables(engine)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT snapshot_id FROM tiering_export_commits")).scalar() == 11
        upgrade(metadata_url)
        assert schema_diffs(engine) == []
    finally:
        engine.dispose()


def test_0009_adds_the_retention_percents_and_keeps_the_observations_0008_held(metadata_url: str) -> None:
    """A store at 0008 (a replica observed) is refused on open, then gains KIP-1257's percents by
    the upgrade, empty for the row written before; the way back drops only the two columns, the
    observation kept."""
    upgrade(metadata_url, "0008_quota_holders")
    engine = create_engine(metadata_url)
    columns = (
        "topic_id, partition, broker_id, topic, log_end_offset, local_log_start_offset, local_bytes, at_risk, "
        "observed_ms"
    )
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    f"INSERT INTO tiering_replica_observations ({columns}) "
                    "VALUES (:tid, 0, 1, 'orders', 42, 0, 4096, false, 5)"
                ),
                {"tid": TIP.topic_id},
            )

        def percents() -> set[str]:
            return {c["name"] for c in inspect(engine).get_columns("tiering_replica_observations")} & {
                "retention_size_percent",
                "local_retention_size_percent",
            }

        assert percents() == set()
        refused_then_upgraded(metadata_url, "0008_quota_holders")
        with RemoteLogMetadataStore(metadata_url):
            assert current_revision(metadata_url) == head_revision()
        assert percents() == {"retention_size_percent", "local_retention_size_percent"}
        with engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT log_end_offset, retention_size_percent, local_retention_size_percent "
                    "FROM tiering_replica_observations"
                )
            ).one()
        assert tuple(row) == (42, None, None)
        downgrade(metadata_url, "0008_quota_holders")
        assert percents() == set()
        with engine.connect() as conn:
            assert conn.execute(text("SELECT log_end_offset FROM tiering_replica_observations")).scalar() == 42
        upgrade(metadata_url)
        assert schema_diffs(engine) == []
    finally:
        engine.dispose()


def test_0010_adds_the_replays_and_keeps_the_observations_0009_held(metadata_url: str) -> None:
    """A store at 0009 (a replica observed) is refused on open, then gains the replays by the
    upgrade; a replay is recorded and read back beside the observation kept; the way back drops
    only the replays."""
    upgrade(metadata_url, "0009_retention_percent")
    engine = create_engine(metadata_url)
    columns = (
        "topic_id, partition, broker_id, topic, log_end_offset, local_log_start_offset, local_bytes, at_risk, "
        "observed_ms"
    )
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    f"INSERT INTO tiering_replica_observations ({columns}) "
                    "VALUES (:tid, 0, 1, 'orders', 42, 0, 1, false, 5)"
                ),
                {"tid": TIP.topic_id},
            )
        assert "tiering_replays" not in tiering_tables(engine)
        record = ReplayRecord(
            "orders", TIP.topic_id, 0, "orders-again", 0, 99, 49, 50, 5000, "replayed", None, ((10, 12, "gap"),), 1, 2
        )
        refused_then_upgraded(metadata_url, "0009_retention_percent")
        with RemoteLogMetadataStore(metadata_url) as store:
            assert current_revision(metadata_url) == head_revision()
            store.record_replay(record)
            assert store.recent_replays() == [record]
        downgrade(metadata_url, "0009_retention_percent")
        assert "tiering_replays" not in tiering_tables(engine)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT log_end_offset FROM tiering_replica_observations")).scalar() == 42
        upgrade(metadata_url)
        assert schema_diffs(engine) == []
    finally:
        engine.dispose()


def test_0011_trims_the_gaps_recorded_below_the_global_log_start(metadata_url: str) -> None:
    """A store at 0010 holds gaps recorded before they were trimmed: on its upgrade, a gap wholly below a
    partition's global log start (its remote log start, or a higher DeleteRecords applied through
    the platform, never an older row from a replica) goes, one it cuts through starts at it
    (detected when it first was), and the rest stay; the way back keeps what 0011 left."""
    upgrade(metadata_url, "0010_replays")
    engine = create_engine(metadata_url)
    other = tip("NNNNNNNNNNNNNNNNNNNNNN", "orders", 1)
    untiered = tip("OOOOOOOOOOOOOOOOOOOOOO", "orders", 2)
    try:
        with engine.begin() as conn:
            for pid, part, remote_start in ((1, TIP, 20), (2, other, 20), (3, untiered, None)):
                conn.execute(
                    text(
                        "INSERT INTO tiering_partitions (id, topic_id, topic, partition, delete_state, dropped, "
                        "lease_holder, lease_token, lease_expires_ms, fencing_counter, remote_log_start_offset, "
                        "finish_counter, created_ms, updated_ms) "
                        "VALUES (:pid, :tid, 'orders', :part, NULL, false, NULL, 1, 0, 1, :start, 0, 1, 1)"
                    ),
                    {"pid": pid, "tid": part.topic_id, "part": part.partition, "start": remote_start},
                )
            deletes = [(1, 30, "tiering delete-records"), (2, 90, "log-start-offset-checkpoint")]
            conn.execute(
                text(
                    "INSERT INTO tiering_delete_records (partition_id, before_offset, source, observed_ms, token) "
                    "VALUES (:pid, :offset, :source, 1, 1)"
                ),
                [{"pid": pid, "offset": offset, "source": source} for pid, offset, source in deletes],
            )
            gaps = [
                (1, 5, 15, 100),
                (1, 25, 34, 300),
                (1, 28, 34, 200),
                (1, 40, 49, 400),
                (2, 10, 19, 100),
                (2, 15, 24, 200),
                (3, 0, 9, 100),
            ]
            conn.execute(
                text(
                    "INSERT INTO tiering_gaps (partition_id, start_offset, end_offset, detected_ms) "
                    "VALUES (:pid, :start, :end, :at)"
                ),
                [{"pid": pid, "start": a, "end": b, "at": at} for pid, a, b, at in gaps],
            )

        def stored() -> list[tuple[int, int, int, int]]:
            with engine.connect() as conn:
                query = "SELECT partition_id, start_offset, end_offset, detected_ms FROM tiering_gaps"
                return sorted(tuple(r) for r in conn.execute(text(query)))

        refused_then_upgraded(metadata_url, "0010_replays")
        with RemoteLogMetadataStore(metadata_url) as store:
            assert current_revision(metadata_url) == head_revision()
            assert [(g.start, g.end, g.detected_ms) for g in store.list_gaps(TIP)] == [(30, 34, 200), (40, 49, 400)]
            assert [(g.start, g.end) for g in store.list_gaps(other)] == [(20, 24)]  # the remote log start's
            assert [(g.start, g.end) for g in store.list_gaps(untiered)] == [(0, 9)]  # no log start yet
        kept = stored()
        downgrade(metadata_url, "0010_replays")
        assert stored() == kept
        upgrade(metadata_url)
        assert stored() == kept and schema_diffs(engine) == []
    finally:
        engine.dispose()


def test_0013_adds_the_erasures_and_keeps_the_identity_0012_held(metadata_url: str) -> None:
    """A store at 0012 (its identity row) is refused on open, then gains the erasures' audit trail
    by the upgrade; an erasure is recorded and read back beside the identity kept; the way back
    drops only the erasures."""
    upgrade(metadata_url, "0012_store_identity")
    engine = create_engine(metadata_url)
    try:
        with engine.connect() as conn:
            identity = conn.execute(text("SELECT store_id FROM tiering_store")).scalar()
        assert identity is not None and "tiering_erasures" not in tiering_tables(engine)
        segment = SegmentErasure("old-id", "new-id", 3)
        record = ErasureRecord("e-1", "orders", TIP.topic_id, 0, ("ab" * 32,), "tiering erase", 5, (segment,), 2)
        refused_then_upgraded(metadata_url, "0012_store_identity")
        with RemoteLogMetadataStore(metadata_url) as store:
            store.record_erasure(record)
            assert store.erasures("orders") == [record]
            assert store.store_identity().store_id == identity
        downgrade(metadata_url, "0012_store_identity")
        assert "tiering_erasures" not in tiering_tables(engine)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT store_id FROM tiering_store")).scalar() == identity
        upgrade(metadata_url)
        assert schema_diffs(engine) == []
    finally:
        engine.dispose()


def insert_finished_erasure(engine: Engine) -> None:
    """Erasure e-1 of orders-0, finished (3 records removed), as revision 0013's columns hold it."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO tiering_erasures (erasure_id, topic, topic_id, partition, key_sha256, requested_by, "
                "segments, records_removed, segments_read, outcome, started_ms) VALUES ('e-1', 'orders', "
                f"'{TIP.topic_id}', 0, '[]', 'tiering erase', '[]', 3, 2, 'finished', 5)"
            )
        )


def test_0014_adds_the_table_erasures_and_keeps_the_partitions_erasures(metadata_url: str) -> None:
    """A store at 0013 (a partition's erasure in it) is refused on open, then gains the export
    tables' erasures by the upgrade; a table's erasure is recorded and read back beside the
    partition's kept; the way back drops only the tables' erasures."""
    upgrade(metadata_url, "0013_erasures")
    engine = create_engine(metadata_url)

    def partition_erasures() -> list[tuple[str, int, int]]:
        with engine.connect() as conn:
            query = "SELECT erasure_id, partition, records_removed FROM tiering_erasures"
            return [tuple(r) for r in conn.execute(text(query))]

    try:
        insert_finished_erasure(engine)
        assert "tiering_table_erasures" not in tiering_tables(engine)
        table = TableErasureRecord("e-1", "orders", "kafka.orders", "u" * 36, 6, 3, 2, 4, ("s3://b/m.avro",))
        refused_then_upgraded(metadata_url, "0013_erasures")
        with RemoteLogMetadataStore(metadata_url) as store:
            store.record_table_erasure(table)
            assert store.table_erasures("orders") == [table]
            assert [(r.erasure_id, r.records_removed) for r in store.erasures("orders")] == [("e-1", 0)]
        downgrade(metadata_url, "0013_erasures")
        assert "tiering_table_erasures" not in tiering_tables(engine)
        assert partition_erasures() == [("e-1", 0, 3)]
        upgrade(metadata_url)
        assert schema_diffs(engine) == []
    finally:
        engine.dispose()


def test_0015_adds_the_local_segments_to_the_erasures_and_keeps_those_recorded_before(metadata_url: str) -> None:
    """A store at 0014 (a partition's erasure in it) is refused on open, then gains the broker's
    local segments in each partition's erasure by the upgrade (NULL for the one recorded before:
    it did not look); an erasure naming them is read back as recorded; the way back drops only
    the column."""
    upgrade(metadata_url, "0014_table_erasures")
    engine = create_engine(metadata_url)
    try:
        insert_finished_erasure(engine)
        local = LocalSegments(
            "/var/lib/kafka", (LocalSegment(40, "00000000000000000040.log", 2, 1_000, False, True, 61_000),), 3, 60_000
        )
        record = ErasureRecord("e-2", "orders", TIP.topic_id, 1, ("ab" * 32,), "me", 6, local_segments=local)
        refused_then_upgraded(metadata_url, "0014_table_erasures")
        with RemoteLogMetadataStore(metadata_url) as store:
            store.record_erasure(record)
            found = {r.erasure_id: r for r in store.erasures("orders")}
            assert found["e-2"] == record and found["e-1"].local_segments is None
        downgrade(metadata_url, "0014_table_erasures")
        assert "local_segments" not in {c["name"] for c in inspect(engine).get_columns("tiering_erasures")}
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT erasure_id, records_removed FROM tiering_erasures ORDER BY erasure_id"))
            assert [tuple(r) for r in rows] == [("e-1", 3), ("e-2", 0)]
        upgrade(metadata_url)
        assert schema_diffs(engine) == []
    finally:
        engine.dispose()


def test_the_store_creates_a_fresh_database_at_head_and_refuses_a_newer_schema(metadata_url: str) -> None:
    with RemoteLogMetadataStore(metadata_url) as store:
        store.register_partition(TIP)
    assert current_revision(metadata_url) == head_revision()
    engine = create_engine(metadata_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    finally:
        engine.dispose()
    with pytest.raises(SchemaAheadError) as refused:
        RemoteLogMetadataStore(metadata_url)
    message = str(refused.value)
    assert "\n" not in message
    assert f"schema revision 9999, newer than this version of the platform knows (head {head_revision()})" in message
    assert "upgrade the platform" in message
    assert current_revision(metadata_url) == "9999"


def test_a_store_behind_the_head_is_refused_unchanged_until_it_is_upgraded(metadata_url: str) -> None:
    """Opening never migrates an existing store: at an older revision it is refused, its tables and
    rows as they were; the explicit upgrade then brings it to head with its segments kept."""
    with RemoteLogMetadataStore(metadata_url) as store:
        lease = store.acquire_lease(TIP, "t")
        kept = finish(store, lease, segment(TIP, 0, 99))
    downgrade(metadata_url, "0001")
    engine = create_engine(metadata_url)
    try:
        before = tiering_tables(engine)
        for _ in range(2):  # every opener alike: the first refusal changed nothing for the second
            with pytest.raises(MetadataStoreError, match=r"schema revision 0001, behind .* run `tiering db upgrade`"):
                RemoteLogMetadataStore(metadata_url)
        assert tiering_tables(engine) == before
        with engine.connect() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM tiering_segments")).scalar() == 1
        refused_then_upgraded(metadata_url, "0001")
        assert schema_diffs(engine) == []
    finally:
        engine.dispose()
    with RemoteLogMetadataStore(metadata_url) as store:
        found = store.segment_for(TIP, 0, 50)
        assert found is not None and found.segment_id == kept.segment_id


def test_tables_without_a_schema_revision_are_not_built_over(metadata_url: str) -> None:
    """Only a new, empty database is created at head: one holding the platform's tables with its
    revision lost is refused, its rows kept."""
    with RemoteLogMetadataStore(metadata_url) as store:
        store.register_partition(TIP)
    engine = create_engine(metadata_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE alembic_version"))
        with pytest.raises(
            MetadataStoreError, match=r"holds the platform's tables \(tiering_.*\) but no schema revision"
        ):
            RemoteLogMetadataStore(metadata_url)
        assert current_revision(metadata_url) is None
        with engine.connect() as conn:
            assert conn.execute(text("SELECT topic FROM tiering_partitions")).scalars().all() == ["orders"]
    finally:
        engine.dispose()


def test_processes_opening_a_fresh_database_at_once_all_succeed(metadata_url: str) -> None:
    start_at = start_in(2.0)
    procs = [worker("open", metadata_url, start_at) for _ in range(3)]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in results]
    assert [out.split() for out, _ in results] == [["REVISION", head_revision()]] * 3
    with RemoteLogMetadataStore(metadata_url) as store:
        assert len(store.list_partitions()) == 3


def test_tiering_db_upgrade_and_downgrade_through_the_command(
    metadata_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tiering_core.cli import main

    log_dir = tmp_path / "kafka-logs"
    log_dir.mkdir()
    config = tmp_path / "tiering.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "log_dirs": [str(log_dir)],
                "metadata": {"url": metadata_url},
                "remote": {"backend": "filesystem", "root": str(tmp_path / "remote")},
            }
        )
    )

    def tiering(*args: str) -> tuple[int, str, str]:
        code = main(["--config", str(config), *args])
        out, err = capsys.readouterr()
        return code, out, err

    assert tiering("db", "current") == (0, "metadata schema at revision None\n", "")
    assert tiering("db", "upgrade", "0001")[:2] == (0, "metadata schema at revision 0001\n")
    assert current_revision(metadata_url) == "0001"
    assert tiering("db", "upgrade")[:2] == (0, f"metadata schema at revision {script_head()}\n")
    engine = create_engine(metadata_url)
    try:
        assert schema_diffs(engine) == []
        code, out, _ = tiering("--json", "db", "downgrade", "0002")
        assert code == 0 and json.loads(out) == {"revision": "0002"}
        code, out, err = tiering("db", "downgrade", "no-such-revision")
        assert code == 1 and out == "" and err.startswith("tiering: ") and "no-such-revision" in err
        assert current_revision(metadata_url) == "0002"
        assert tiering("db", "downgrade", "base")[:2] == (0, "metadata schema at revision None\n")
        assert tiering_tables(engine) == []
    finally:
        engine.dispose()
