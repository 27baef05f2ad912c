"""Erasure by record key reaches the topic's export table: at every snapshot left no row of the
keys, every other row kept with its offset, the snapshots that named a file holding them expired
and those files gone from the S3 warehouse while every file a remaining snapshot names is there;
the export's exactly-once progress survives (a rerun of the export adds nothing); a tag holding
such a snapshot is refused by name and left alone; a dry run writes nothing; an erasure failing
between its delete and its expiry, or before its files are deleted, is finished by the next; a
typed table's dead letters are erased with it; another writer's rows of a key after the last
export commit keep the export's progress; a table an export holds is a failure line, the tier
erased all the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tiering_core.export.erase as table_erase
from tests.engine_support import TieringEnv
from tests.export.registry_server import RegistryServer
from tests.export.support import sqlite_catalog, table_of, with_export
from tests.export.typed_support import PAYMENT, Avro, payment, tier, with_typed_export
from tests.services import S3Endpoint
from tiering_core.export import exported_so_far, run_export
from tiering_core.export.erase import ERASURE_PROPERTY, References, erase_topic
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.erasures import FINISHED, HELD
from tiering_core.runs.copy import run_copy
from tiering_core.runs.erase import ErasureRequest

pytestmark = pytest.mark.xdist_group("erase")

SQLITE = pytest.mark.parametrize("tiering_env", ["sqlite"], indirect=True)
TOPIC = "orders"
#: Keys no other byte string of the test holds.
ERASED = b"subject-4be1d7-erase-me"
OTHER = b"subject-90c3aa-erase-me"
#: A key only another writer of the table wrote.
FOREIGN = b"subject-e61f08-foreign"


def write_segments(w: PartitionWriter) -> None:
    """Four segments: the first without the keys, the second and the third holding ``ERASED``
    (the third ``OTHER`` too), the last without them; one segment stays active."""
    w.append([(b"a", b"1"), (b"b", b"2"), (None, b"3")])
    w.roll()
    w.append([(ERASED, b"4"), (b"c", b"5"), (ERASED, b"6")])
    w.roll()
    w.append([(b"d", b"7"), (OTHER, b"8"), (ERASED, b"9")])
    w.roll()
    w.append([(b"e", b"10"), (b"f", b"11")])
    w.roll()
    w.append([(b"active", b"12")])
    w.set_high_watermark()


@pytest.fixture()
def warehouse(tiering_env: TieringEnv, tmp_path: Path, s3_endpoint: S3Endpoint) -> str:
    """A SQLite catalog whose warehouse is a bucket of the moto server; its name."""
    bucket = s3_endpoint.new_bucket()
    with_export(tiering_env, sqlite_catalog(tmp_path, warehouse=f"s3://{bucket}/warehouse"))
    return bucket


def exported(env: TieringEnv) -> PartitionWriter:
    """The segments tiered, then exported one commit per segment (a snapshot each)."""
    w = env.writer(TOPIC, 0)
    write_segments(w)
    with env.context() as ctx:
        run_copy(ctx, w.tp)
        result = run_export(ctx, TOPIC, commit_bytes=1)
        assert not result.failed and len(result.snapshots) == 4
    return w


def rows(table: Any, snapshot_id: int | None = None) -> list[tuple[int, int, bytes | None, bytes | None]]:
    got = table.scan(snapshot_id=snapshot_id, selected_fields=("partition", "offset", "key", "value")).to_arrow()
    return sorted(zip(*(got[c].to_pylist() for c in ("partition", "offset", "key", "value")), strict=True))


def objects(s3: S3Endpoint, bucket: str) -> dict[str, str]:
    """The warehouse's objects, key -> ETag."""
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}


def key_of(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[1]


def erase(env: TieringEnv, *keys: bytes, dry_run: bool = False, partitions: tuple[int, ...] = ()) -> Any:
    with env.context() as ctx:
        request = ErasureRequest(TOPIC, frozenset(keys), partitions, requested_by="test")
        return erase_topic(ctx, request, dry_run=dry_run)


def assert_no_row_of(table: Any, keys: set[bytes], s3: S3Endpoint, bucket: str) -> None:
    """At every snapshot the table has, no row of ``keys``; every file it names is in the bucket;
    no manifest entry's key bounds hold one of ``keys`` (bounds are truncated: their first bytes)."""
    table.refresh()
    held = set(objects(s3, bucket))
    references = References(table)
    for snapshot in table.snapshots():
        assert not [r for r in rows(table, snapshot.snapshot_id) if r[2] in keys], snapshot.snapshot_id
        assert {key_of(url) for url in references.of(snapshot)} <= held
        key_field = table.schema().find_field("key").field_id
        for manifest in snapshot.manifests(table.io):
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                bounds = [b.get(key_field) for b in (entry.data_file.lower_bounds, entry.data_file.upper_bounds) if b]
                assert not [b for b in bounds if b is not None and any(b[:12] == k[:12] for k in keys)]


@SQLITE
def test_erase_deletes_the_rows_expires_the_snapshots_and_deletes_the_files(
    tiering_env: TieringEnv, warehouse: str, s3_endpoint: S3Endpoint
) -> None:
    w = exported(tiering_env)
    with tiering_env.context() as ctx:
        table = table_of(ctx, TOPIC)
        before = rows(table)
        progress = exported_so_far(ctx, table)
        first = table.snapshots()[0].snapshot_id  # the first segment's commit: no key
        first_rows = rows(table, first)
        holding = set(table_erase.find_holding(table, table_erase.key_row_filter(request_of(ERASED))).files)
        old = [s.snapshot_id for s in table.snapshots()]
    assert len(holding) == 2 and first_rows == [(0, 0, b"a", b"1"), (0, 1, b"b", b"2"), (0, 2, None, b"3")]

    result = erase(tiering_env, ERASED)
    assert result.failures == []
    (part,) = result.tables
    assert (part.table, part.rows_deleted, part.data_files_deleted) == ("kafka.orders", 3, 2)
    assert part.snapshots_expired >= 3  # the three commits holding them, and the delete's own
    with tiering_env.context() as ctx:
        table = table_of(ctx, TOPIC)
        assert rows(table) == [r for r in before if r[2] != ERASED]  # offsets and values kept
        assert_no_row_of(table, {ERASED}, s3_endpoint, warehouse)
        remaining = [s.snapshot_id for s in table.snapshots()]
        assert first in remaining and rows(table, first) == first_rows  # time travel before the keys
        assert set(old[1:]).isdisjoint(remaining)
        assert table.current_snapshot().summary.additional_properties[ERASURE_PROPERTY] == result.erasure_id
        assert not {key_of(url) for url in holding} & set(objects(s3_endpoint, warehouse))
        assert exported_so_far(ctx, table) == progress
        again = run_export(ctx, TOPIC)  # the export's progress survives: nothing exported twice
        assert again.planned == [] and again.snapshots == []
        (record,) = ctx.metadata.table_erasures(TOPIC)
        assert (record.erasure_id, record.table_uuid, record.outcome) == (
            result.erasure_id,
            part.table_uuid,
            FINISHED,
        )
        assert (record.rows_deleted, record.data_files_deleted, record.snapshots_expired, record.pending) == (
            3,
            2,
            part.snapshots_expired,
            (),
        )
    (tier,) = result.partitions
    assert tier.records_removed == 3  # the tier's part, as before

    again = erase(tiering_env, ERASED)  # nothing more to do
    assert again.failures == [] and (again.tables[0].rows_deleted, again.tables[0].snapshots_expired) == (0, 0)

    w.append([(ERASED, b"13"), (b"g", b"14")])  # the topic goes on: the export appends after the erasure
    w.roll()
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        more = run_export(ctx, TOPIC)
        assert [(s.start_offset, s.end_offset) for s in more.exported] == [(11, 13)]  # the new segment only
        kept = [r[1] for r in before if r[2] != ERASED]
        assert [r[1] for r in rows(table_of(ctx, TOPIC))] == [*kept, 11, 12, 13]


def request_of(*keys: bytes, partitions: tuple[int, ...] = ()) -> ErasureRequest:
    return ErasureRequest(TOPIC, frozenset(keys), partitions)


@SQLITE
def test_a_dry_run_counts_and_writes_nothing(tiering_env: TieringEnv, warehouse: str, s3_endpoint: S3Endpoint) -> None:
    exported(tiering_env)
    with tiering_env.context() as ctx:
        location = table_of(ctx, TOPIC).metadata_location
    listed = objects(s3_endpoint, warehouse)
    result = erase(tiering_env, ERASED, OTHER, dry_run=True)
    (part,) = result.tables
    assert (part.rows_deleted, part.data_files_deleted, part.snapshots_expired, part.dry_run) == (4, 2, 3, True)
    with tiering_env.context() as ctx:
        assert table_of(ctx, TOPIC).metadata_location == location
        assert ctx.metadata.table_erasures() == []
        assert ctx.metadata.current_table_lease("tiering", "kafka.orders") is None
    assert objects(s3_endpoint, warehouse) == listed


@SQLITE
def test_a_tagged_snapshot_holding_the_keys_is_refused_by_name_and_kept(
    tiering_env: TieringEnv, warehouse: str, s3_endpoint: S3Endpoint
) -> None:
    exported(tiering_env)
    with tiering_env.context() as ctx:
        table = table_of(ctx, TOPIC)
        tagged = table.snapshots()[1].snapshot_id  # the second segment's commit holds ERASED
        table.manage_snapshots().create_tag(tagged, "audit-2026").commit()
    result = erase(tiering_env, ERASED)
    (part,) = result.tables
    line = (
        f"snapshot {tagged} is held by tag audit-2026 and still holds rows of the erased keys: "
        "drop the tag and run erase again"
    )
    assert part.held == [line] and result.failures == [f"kafka.orders: {line}"]
    with tiering_env.context() as ctx:
        table = table_of(ctx, TOPIC)
        assert table.metadata.refs["audit-2026"].snapshot_id == tagged  # the tag is not touched
        assert ERASED in {r[2] for r in rows(table, tagged)} and ERASED not in {r[2] for r in rows(table)}
        (record,) = ctx.metadata.table_erasures(TOPIC)
        assert record.outcome == HELD
        table.manage_snapshots().remove_tag("audit-2026").commit()
    again = erase(tiering_env, ERASED)
    assert again.failures == [] and again.tables[0].snapshots_expired >= 1
    with tiering_env.context() as ctx:
        assert_no_row_of(table_of(ctx, TOPIC), {ERASED}, s3_endpoint, warehouse)
        assert [r.outcome for r in ctx.metadata.table_erasures(TOPIC)] == [FINISHED, HELD]


def fail_once(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """``export.erase``'s ``name`` raises on its first call (a run dying there), then works."""
    real = getattr(table_erase, name)
    calls = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError(f"killed in {name}")
        return real(*args, **kwargs)

    monkeypatch.setattr(table_erase, name, failing)


@SQLITE
@pytest.mark.parametrize("where", ["snapshots_holding", "delete_unreferenced"], ids=["before-expiry", "before-files"])
def test_an_erasure_dying_part_way_is_finished_by_the_next(
    tiering_env: TieringEnv, warehouse: str, s3_endpoint: S3Endpoint, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    exported(tiering_env)
    with tiering_env.context() as ctx:
        table = table_of(ctx, TOPIC)
        before = rows(table)
        progress = exported_so_far(ctx, table)
        holding = set(table_erase.find_holding(table, table_erase.key_row_filter(request_of(ERASED))).files)
    fail_once(monkeypatch, where)
    killed = erase(tiering_env, ERASED)
    assert killed.tables == [] and len(killed.failures) == 1 and f"killed in {where}" in killed.failures[0]
    with tiering_env.context() as ctx:
        (record,) = ctx.metadata.table_erasures(TOPIC)
        assert record.outcome == "started" and bool(record.pending) == (where == "delete_unreferenced")
        assert ERASED not in {r[2] for r in rows(table_of(ctx, TOPIC))}  # the delete landed

    result = erase(tiering_env, ERASED)
    assert result.failures == []
    with tiering_env.context() as ctx:
        table = table_of(ctx, TOPIC)
        assert rows(table) == [r for r in before if r[2] != ERASED]
        assert_no_row_of(table, {ERASED}, s3_endpoint, warehouse)
        assert not {key_of(url) for url in holding} & set(objects(s3_endpoint, warehouse))
        assert exported_so_far(ctx, table) == progress and run_export(ctx, TOPIC).planned == []
        killed_row = next(r for r in ctx.metadata.table_erasures(TOPIC) if r.erasure_id == killed.erasure_id)
        assert killed_row.pending == ()  # the next run deleted what it left named


@SQLITE
def test_a_partition_s_erasure_deletes_only_that_partition_s_rows(
    tiering_env: TieringEnv, warehouse: str, s3_endpoint: S3Endpoint
) -> None:
    writers = []
    for partition in (0, 1):
        w = tiering_env.writer(TOPIC, partition)
        w.append([(ERASED, b"x"), (b"kept", b"y")])
        w.roll()
        w.append([(b"active", b"z")])
        w.set_high_watermark()
        writers.append(w)
    with tiering_env.context() as ctx:
        for w in writers:
            run_copy(ctx, w.tp)
        assert not run_export(ctx, TOPIC).failed
    result = erase(tiering_env, ERASED, partitions=(1,))
    assert result.failures == [] and result.tables[0].rows_deleted == 1
    with tiering_env.context() as ctx:
        assert [(p, k) for p, _o, k, _v in rows(table_of(ctx, TOPIC))] == [(0, ERASED), (0, b"kept"), (1, b"kept")]


@SQLITE
def test_a_topic_without_an_export_table_is_left_alone(tiering_env: TieringEnv, warehouse: str) -> None:
    w = tiering_env.writer(TOPIC, 0)
    write_segments(w)
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
    result = erase(tiering_env, ERASED)
    assert result.failures == [] and result.partitions[0].records_removed == 3
    assert [(t.table, t.skipped) for t in result.tables] == [("kafka.orders", "the topic has no export table")]


@SQLITE
def test_a_typed_table_and_its_dead_letters_are_both_erased(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    avro = Avro(schema_registry, "refunds")
    good = avro.serialize(PAYMENT, [payment(i) for i in range(3)])
    tier(tiering_env, "refunds", [[good[0], b"plain text", good[1]], [b"\x00\x01", good[2]]])  # keys k0, k1, ...
    with_typed_export(tiering_env, tmp_path, schema_registry, refunds={"value": "avro"})
    with tiering_env.context() as ctx:
        result = run_export(ctx, "refunds")
        assert not result.failed and result.dead_letters == 2 and result.rows == 3
        tables = [table_of(ctx, "refunds"), table_of(ctx, "refunds_dead_letters")]
        holding = {
            url
            for t in tables
            for url in table_erase.find_holding(t, table_erase.key_row_filter(request_of(b"k1"))).files
        }
        assert len(holding) == 2  # one file in each table
        erased = erase_topic(ctx, ErasureRequest("refunds", frozenset({b"k1"})))
    assert erased.failures == [] and erased.partitions[0].records_removed == 2
    assert [(t.table, t.rows_deleted, t.data_files_deleted) for t in erased.tables] == [
        ("kafka.refunds", 1, 1),
        ("kafka.refunds_dead_letters", 1, 1),
    ]
    with tiering_env.context() as ctx:
        for name, kept in (("refunds", [0, 2]), ("refunds_dead_letters", [3])):
            table = table_of(ctx, name)
            for snapshot in table.snapshots():
                assert b"k1" not in table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()["key"].to_pylist()
            assert sorted(table.scan().to_arrow()["offset"].to_pylist()) == kept
        assert not [url for url in holding if Path(url.removeprefix("file://")).exists()]
        again = run_export(ctx, "refunds")
        assert again.planned == [] and again.snapshots == []


@SQLITE
def test_another_writer_s_rows_of_the_keys_after_the_last_export_commit_keep_the_export_s_progress(
    tiering_env: TieringEnv, warehouse: str, s3_endpoint: S3Endpoint
) -> None:
    """Another writer added rows of the key after the last export commit, then deleted them, then
    committed again: the snapshots naming their file lie between the export commit and the current
    snapshot. Expiring them alone would hide the export commit from the walk while it stays in the
    table; the erasure expires it too, and the store's record of it answers."""
    import pyarrow as pa
    from pyiceberg.expressions import EqualTo

    exported(tiering_env)
    with tiering_env.context() as ctx:
        table = table_of(ctx, TOPIC)
        progress = exported_so_far(ctx, table)
        last_export = table.current_snapshot().snapshot_id
        added = table.scan(row_filter="offset = 0").to_arrow()
        table.append(added.set_column(added.schema.get_field_index("key"), "key", pa.array([FOREIGN], pa.binary())))
        table.delete(EqualTo("key", FOREIGN))
        table.append(table.scan(row_filter="offset = 1").to_arrow())  # its manifests no longer name the file
        table.refresh()
        assert FOREIGN not in {r[2] for r in rows(table)}
        planned = erase_topic(ctx, ErasureRequest(TOPIC, frozenset({FOREIGN})), dry_run=True).tables[0]
        assert (planned.rows_deleted, planned.data_files_deleted, planned.snapshots_expired) == (0, 1, 3)
        result = erase_topic(ctx, ErasureRequest(TOPIC, frozenset({FOREIGN})))
        assert result.failures == [] and (result.tables[0].rows_deleted, result.tables[0].snapshots_expired) == (0, 3)
        table = table_of(ctx, TOPIC)
        assert last_export not in {s.snapshot_id for s in table.snapshots()}  # expired with them
        assert_no_row_of(table, {FOREIGN}, s3_endpoint, warehouse)
        assert exported_so_far(ctx, table) == progress
        assert run_export(ctx, TOPIC).planned == []


@SQLITE
def test_a_topic_the_tier_holds_nothing_of_is_still_erased_from_its_table(
    tiering_env: TieringEnv, warehouse: str, s3_endpoint: S3Endpoint
) -> None:
    """The topic's partition is being removed from the tier (the erasure of the tier has nothing to
    read), its table stays: the whole topic's erasure still reaches the table; a partition named
    that the tier does not hold is refused as before."""
    from tests.engine_support import tip_of
    from tiering_core.engine.lease import held_partition
    from tiering_core.runs.errors import ErasureRefusedError

    w = exported(tiering_env)
    with tiering_env.context() as ctx:
        with held_partition(ctx.metadata, tip_of(w), holder="test:removal") as held:
            ctx.metadata.mark_partition_for_deletion(tip_of(w), held.require())
        before = rows(table_of(ctx, TOPIC))
    with pytest.raises(ErasureRefusedError):
        erase(tiering_env, ERASED, partitions=(0,))
    result = erase(tiering_env, ERASED)
    assert result.partitions == [] and result.failures == [] and result.tables[0].rows_deleted == 3
    with tiering_env.context() as ctx:
        assert rows(table_of(ctx, TOPIC)) == [r for r in before if r[2] != ERASED]
        assert_no_row_of(table_of(ctx, TOPIC), {ERASED}, s3_endpoint, warehouse)


@SQLITE
def test_a_table_an_export_holds_is_a_failure_line_and_the_tier_is_erased_all_the_same(
    tiering_env: TieringEnv, warehouse: str
) -> None:
    from tiering_core.engine.lease import held_table

    exported(tiering_env)
    with tiering_env.context() as ctx:
        location = table_of(ctx, TOPIC).metadata_location
        with held_table(ctx.metadata, "tiering", "kafka.orders", holder="export:other-run"):
            result = erase(tiering_env, ERASED)
        assert table_of(ctx, TOPIC).metadata_location == location  # the table untouched
    assert result.partitions[0].records_removed == 3 and result.tables == []
    (failure,) = result.failures
    assert failure.startswith("export table of orders: erase from kafka.orders: an export holds the table, try again")
    again = erase(tiering_env, ERASED)  # once the export is done
    assert again.failures == [] and again.tables[0].rows_deleted == 3
