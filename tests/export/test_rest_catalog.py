"""The export through an Iceberg REST catalog (Apache Iceberg's own REST catalog server) beside the
SQL one: the same table, read back with pyiceberg and DuckDB, exactly once across reruns and
beside another writer of the table, its progress marks kept by the REST catalog's snapshots."""

from __future__ import annotations

import uuid

import duckdb
import pyarrow as pa
from pyiceberg.catalog import load_catalog as pyiceberg_catalog

from tests.engine_support import TieringEnv
from tests.export.rest_catalog import RestCatalogServer
from tests.export.support import build_partition, with_export
from tiering_core.export import exported_ranges, load_catalog, open_table, run_export, table_name
from tiering_core.kafka.isolation import IsolationLevel
from tiering_core.read.reader import open_reader
from tiering_core.runs.copy import run_copy


def test_an_export_through_a_rest_catalog_equals_fetch_once_beside_another_writer(
    tiering_env: TieringEnv, rest_catalog: RestCatalogServer
) -> None:
    namespace = f"rest_{uuid.uuid4().hex[:8]}"
    w = build_partition(tiering_env, "orders", 0)
    with_export(tiering_env, {"type": "rest", "uri": rest_catalog.uri}, namespace=namespace)
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        reader = open_reader(ctx, w.tp)
        fetched = {r.offset: (r.key, r.value) for r in reader.read(0, 100_000, IsolationLevel.READ_COMMITTED)}
        assert fetched
        result = run_export(ctx, "orders")
        assert not result.failed and result.snapshots

        table = open_table(load_catalog(ctx.config), table_name(ctx.config.export, "orders"), create=False)
        assert table is not None
        assert table.location().startswith(rest_catalog.warehouse.as_uri())
        got = table.scan().to_arrow()
        rows = zip(got["offset"].to_pylist(), got["key"].to_pylist(), got["value"].to_pylist(), strict=True)
        assert {o: (k, v) for o, k, v in rows} == fetched
        assert got.num_rows == len(fetched)  # each offset once
        files = [task.file.file_path for task in table.scan().plan_files()]
        offsets = duckdb.sql('select "offset" from read_parquet($files) order by 1', params={"files": files})
        assert [o for (o,) in offsets.fetchall()] == sorted(fetched)

        # Another writer of the table, through its own REST client, appends a row of its own.
        other = pyiceberg_catalog("other", type="rest", uri=rest_catalog.uri).load_table((namespace, "orders"))
        at = got.schema.get_field_index("offset")
        foreign = got.slice(0, 1).set_column(at, got.schema.field(at), pa.array([10**9], pa.int64()))
        other.append(foreign)

        # A rerun finds its progress in the catalog's snapshots: nothing again, the other row kept.
        again = run_export(ctx, "orders")
        assert again.planned == [] and again.snapshots == []
        table.refresh()
        assert exported_ranges(table).up_to(w.topic_id, w.tp.partition) == reader.highest_offset
        offsets_now = table.scan().to_arrow()["offset"].to_pylist()
        assert sorted(offsets_now) == sorted([*fetched, 10**9])
