"""Typed exports end to end: values Confluent's AvroSerializer wrote through the real registry,
tiered by the platform's copy, exported, and every row read back by pyiceberg and DuckDB equal to
what Confluent's AvroDeserializer makes of the record's bytes; dead letters beside them."""

from __future__ import annotations

from pathlib import Path

import duckdb

from tests.engine_support import TieringEnv
from tests.export.registry_server import RegistryServer
from tests.export.support import table_of
from tests.export.typed_support import (
    PAYMENT,
    Avro,
    iceberg_types,
    payment,
    rows_by_offset,
    value_of,
    with_typed_export,
)
from tiering_core.export import run_export
from tiering_core.export.registry import WireValue
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.runs.copy import run_copy


def append(w: PartitionWriter, values: list[bytes], sent: dict[tuple[int, int], bytes]) -> None:
    """``values`` as one batch of keyed records, each remembered by its (partition, offset)."""
    first, _last = w.append([(f"k{i}".encode(), v) for i, v in enumerate(values)])
    for i, v in enumerate(values):
        sent[(w.tp.partition, first + i)] = v


def test_every_value_reads_back_as_the_deserializer_reads_it(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    avro = Avro(schema_registry, "payments")
    sent: dict[tuple[int, int], bytes] = {}
    writers = []
    for partition in (0, 1):
        w = tiering_env.writer("payments", partition)
        for part in range(3):
            append(w, avro.serialize(PAYMENT, [payment(100 * partition + 10 * part + i) for i in range(7)]), sent)
            w.roll()
        w.append([(None, avro.serialize(PAYMENT, [payment(999)])[0])])  # the active segment: never tiered
        w.set_high_watermark()
        writers.append(w)
    with_typed_export(tiering_env, tmp_path, schema_registry, payments={"value": "avro"})
    with tiering_env.context() as ctx:
        for w in writers:
            run_copy(ctx, w.tp)
        result = run_export(ctx, "payments")
        assert not result.failed and result.dead_letters == 0 and result.rows == len(sent)
        table = table_of(ctx, "payments")
        rows = rows_by_offset(table)
        assert set(rows) == set(sent)
        schema_id = WireValue.parse(next(iter(sent.values()))).schema_id
        for where, data in sent.items():
            row = rows[where]
            assert value_of(row, PAYMENT) == avro.deserialize(data), where
            assert row["value_schema_id"] == schema_id and row["key"] == f"k{where[1] % 7}".encode()
            assert "value" not in row
        types = iceberg_types(table)
        assert types["customer"] == (
            "struct<name: string, tags: list<string>, address: struct<city: string, zip: int>>"
        )
        assert types["lines"] == "map<string, long>" and types["state"] == "string" and types["ref"] == "string"
        assert types["at_ms"] == types["at_us"] == "timestamptz" and types["day"] == "date"
        assert types["price"] == "decimal(12, 3)" and types["id"] == "int" and types["amount"] == "float"
        assert types["note"] == "string" and types["value_schema_id"] == "int"
        # DuckDB over the table's data files
        files = [task.file.file_path for task in table.scan().plan_files()]
        got = duckdb.sql(
            'select partition, "offset", customer.address.city as city, price, state from read_parquet($files)',
            params={"files": files},
        ).fetchall()
        assert len(got) == len(sent)
        for partition, offset, city, price, state in got:
            want = avro.deserialize(sent[(partition, offset)])
            assert (city, price, state) == (want["customer"]["address"]["city"], want["price"], want["state"])
        # an export that is up to date commits nothing
        again = run_export(ctx, "payments")
        assert again.planned == [] and again.snapshots == []
