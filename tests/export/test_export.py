"""The tiered log exported as an Iceberg table, read back with pyiceberg and DuckDB: the offsets
per partition are the tiered range minus what read_committed drops, each exactly once."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
import yaml

from tests.engine_support import TieringEnv
from tests.export.support import build_partition, sqlite_catalog, with_export
from tests.services import S3Endpoint
from tiering_core.export import (
    exported_ranges,
    exported_so_far,
    load_catalog,
    open_table,
    plan_export,
    run_export,
    table_name,
)
from tiering_core.kafka.isolation import IsolationLevel
from tiering_core.kafka.topic import TopicPartition
from tiering_core.read.reader import open_reader
from tiering_core.runs.copy import run_copy


def fetched_offsets(ctx, tp: TopicPartition, isolation: IsolationLevel) -> list[int]:  # type: ignore[no-untyped-def]
    reader = open_reader(ctx, tp)
    return [r.offset for r in reader.read(reader.log_start_offset or 0, 100_000, isolation)]


def table_of(ctx, topic: str):  # type: ignore[no-untyped-def]
    table = open_table(load_catalog(ctx.config), table_name(ctx.config.export, topic), create=False)
    assert table is not None
    return table


def scanned(table, **kwargs) -> pa.Table:  # type: ignore[no-untyped-def]
    return table.scan(**kwargs).to_arrow()


def duckdb_rows(table) -> pa.Table:  # type: ignore[no-untyped-def]
    files = [task.file.file_path for task in table.scan().plan_files()]
    return duckdb.sql(
        'select partition, "offset", key, value from read_parquet($files) order by partition, "offset"',
        params={"files": files},
    ).to_arrow_table()


@pytest.mark.parametrize("isolation", list(IsolationLevel))
def test_export_equals_fetch_at_each_isolation(
    tiering_env: TieringEnv, tmp_path: Path, isolation: IsolationLevel
) -> None:
    w0 = build_partition(tiering_env, "orders.eu", 0)
    w1 = build_partition(tiering_env, "orders.eu", 1)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        for w in (w0, w1):
            run_copy(ctx, w.tp)
        want = {w.tp.partition: fetched_offsets(ctx, w.tp, isolation) for w in (w0, w1)}
        result = run_export(ctx, "orders.eu", isolation=isolation)
        assert not result.failed
        table = table_of(ctx, "orders.eu")
        assert table.name() == ("kafka", "orders.eu")
        got = scanned(table)
        for partition, offsets in want.items():
            mine = got.filter(pa.compute.equal(got["partition"], partition))
            assert sorted(mine["offset"].to_pylist()) == offsets
        # row filters on offset and partition
        part = scanned(table, row_filter="partition = 1 and offset >= 5 and offset < 20")
        assert sorted(part["offset"].to_pylist()) == [o for o in want[1] if 5 <= o < 20]
        assert set(part["partition"].to_pylist()) <= {1}
        # DuckDB over the table's data files
        rows = duckdb_rows(table)
        for partition, offsets in want.items():
            assert [
                o
                for p, o in zip(rows["partition"].to_pylist(), rows["offset"].to_pylist(), strict=True)
                if p == partition
            ] == offsets
        # same keys and values as fetch
        reader = open_reader(ctx, w0.tp)
        fetched = {r.offset: (r.key, r.value) for r in reader.read(0, 100_000, isolation)}
        mine = got.filter(pa.compute.equal(got["partition"], 0))
        assert {
            o: (k, v)
            for o, k, v in zip(
                mine["offset"].to_pylist(), mine["key"].to_pylist(), mine["value"].to_pylist(), strict=True
            )
        } == fetched
        done = exported_ranges(table)
        for w in (w0, w1):
            assert done.up_to(w.topic_id, w.tp.partition) == open_reader(ctx, w.tp).highest_offset
        # a rerun of an up-to-date export commits nothing
        snapshots = len(table.snapshots())
        again = run_export(ctx, "orders.eu", isolation=isolation)
        assert again.planned == [] and again.snapshots == []
        table.refresh()
        assert len(table.snapshots()) == snapshots
        assert plan_export(ctx, "orders.eu", done=exported_so_far(ctx, table)) == []


def test_export_with_a_postgresql_catalog_and_an_s3_warehouse(
    tiering_env: TieringEnv, pg_url: str, s3_endpoint: S3Endpoint
) -> None:
    """The warehouse's endpoint, region, path style and credentials come from the ``remote``
    section and the AWS chain."""
    w = build_partition(tiering_env, "orders", 0)
    bucket = s3_endpoint.new_bucket()
    with_export(tiering_env, {"uri": pg_url, "warehouse": f"s3://{bucket}/warehouse"})
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        want = fetched_offsets(ctx, w.tp, IsolationLevel.READ_COMMITTED)
        result = run_export(ctx, "orders")
        assert not result.failed and result.files
        table = table_of(ctx, "orders")
        assert table.location().startswith(f"s3://{bucket}/warehouse")
        assert sorted(scanned(table)["offset"].to_pylist()) == want
        assert sorted(scanned(table, row_filter="offset >= 10")["offset"].to_pylist()) == [o for o in want if o >= 10]
        keys = [o["Key"] for o in s3_endpoint.client().list_objects_v2(Bucket=bucket)["Contents"]]
        assert any("/data/tiering-attempts/" in k and k.endswith(".parquet") for k in keys)
        assert run_export(ctx, "orders").snapshots == []


def test_a_segment_with_nothing_committed_is_recorded_and_not_exported_again(
    tiering_env: TieringEnv, tmp_path: Path
) -> None:
    w = tiering_env.writer("orders", 0)
    w.append([(b"k", b"v")])
    w.roll()
    w.begin_transaction(5, 0)
    w.append([(b"a", b"aborted")] * 3, producer_id=5)
    w.abort(5)
    w.roll()
    w.append([(b"k2", b"v2")])
    w.set_high_watermark()
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        result = run_export(ctx, "orders")
        assert len(result.exported) == 2 and result.rows == 1
        table = table_of(ctx, "orders")
        assert scanned(table)["offset"].to_pylist() == [0]
        assert exported_ranges(table).up_to(w.topic_id, 0) == open_reader(ctx, w.tp).highest_offset
        assert run_export(ctx, "orders").planned == []


def test_a_segment_is_written_one_decoded_group_at_a_time(tiering_env: TieringEnv, tmp_path: Path) -> None:
    """Memory follows the decoder's group, not the segment: each group is a row group of its own."""
    import pyarrow.parquet as pq

    from tiering_core.export import exporting, write_segment_files
    from tiering_core.kafka.arrow import GroupBounds

    w = tiering_env.writer("orders", 0)
    w.append_records(200, value_size=20, per_batch=10)
    w.roll()
    w.append_records(1)
    w.set_high_watermark()
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        with exporting(ctx, "orders") as export:
            (segment,) = export.plan("orders")
            files = write_segment_files(ctx.storage, segment, export.start_attempt(), bounds=GroupBounds(max_batches=4))
    metadata = [pq.ParquetFile(f.removeprefix("file://")).metadata for f in files]
    assert sum(m.num_rows for m in metadata) == 200
    assert sum(m.num_row_groups for m in metadata) == 5  # 20 batches, 4 to a group


def test_a_transaction_without_an_outcome_in_the_remote_tier_holds_its_segments_back(
    tiering_env: TieringEnv, tmp_path: Path
) -> None:
    """At read_committed a transaction still open at the end of the last tiered segment may be
    aborted by a marker the remote tier does not hold yet: its segments wait for the copy that
    tiers the marker, then are exported without its records."""
    w = tiering_env.writer("orders", 0)
    w.append([(b"k", b"before")] * 2)
    w.begin_transaction(9, 0)
    w.append([(b"a", b"aborted")] * 3, producer_id=9)
    w.roll()  # segment 0 ends inside the open transaction
    w.append([(b"k", b"plain")] * 2)
    w.roll()
    w.abort(9)  # the ABORT marker lands in the active segment, which is never tiered
    w.append([(b"k", b"after")])
    w.set_high_watermark()
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == 2
        held = run_export(ctx, "orders")
        assert held.planned == [] and held.rows == 0
        uncommitted = run_export(ctx, "orders", isolation=IsolationLevel.READ_UNCOMMITTED, table="kafka.orders_all")
        assert uncommitted.rows == 7  # read_uncommitted needs no outcome
        w.roll()  # the marker's segment closes and is tiered
        w.set_high_watermark()
        run_copy(ctx, w.tp)
        result = run_export(ctx, "orders")
        assert not result.failed
        table = table_of(ctx, "orders")
        assert sorted(scanned(table)["offset"].to_pylist()) == fetched_offsets(ctx, w.tp, IsolationLevel.READ_COMMITTED)
        assert sorted(scanned(table)["value"].to_pylist()) == [b"after", b"before", b"before", b"plain", b"plain"]


def test_the_catalog_goes_by_its_configured_name(tiering_env: TieringEnv, tmp_path: Path) -> None:
    """pyiceberg's SQL catalog scopes tables by the catalog's name: a reader naming the catalog as
    ``export.catalog_name`` says sees the table (and DuckDB reads its scan), another name sees none."""
    from pyiceberg.catalog import load_catalog as pyiceberg_catalog

    from tiering_core.export import catalog_properties

    w = build_partition(tiering_env, "orders", 0)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    doc = yaml.safe_load(tiering_env.config_path.read_text())
    doc["export"]["catalog_name"] = "lake"
    tiering_env.config_path.write_text(yaml.safe_dump(doc))
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        want = fetched_offsets(ctx, w.tp, IsolationLevel.READ_COMMITTED)
        assert not run_export(ctx, "orders").failed
        properties = catalog_properties(ctx.config)
    lake = pyiceberg_catalog("lake", **properties)
    assert lake.table_exists(("kafka", "orders"))
    assert not pyiceberg_catalog("tiering", **properties).table_exists(("kafka", "orders"))
    con = lake.load_table(("kafka", "orders")).scan(row_filter="partition = 0").to_duckdb("orders")
    got = con.sql('select "offset" from orders order by "offset"').fetchall()
    assert [o for (o,) in got] == want
