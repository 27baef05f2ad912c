"""Spark reads a typed table. Iceberg's own Spark runtime (iceberg-spark-runtime, built for Spark
4.0 and 4.1) does not load in Spark 4.2 (its classes implement Spark's ``View`` and use
``CatalogManager`` as 4.2 no longer declares them), so this is a reader that needs no Iceberg
runtime, not Iceberg's own: Spark reads the data files of the table's current snapshot (the list
pyiceberg's scan plans) with ``spark.read.parquet`` under the table's current schema (pyiceberg's,
as Arrow gives it to Spark, a uuid as its 16 bytes). Every row equals what Confluent's
AvroDeserializer (JSONDeserializer) makes of the record's bytes, in files written under an older
schema too (columns added since read null, an int widened to a long read as one), times of day
and uuids included, and its Kafka columns equal pyiceberg's."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any

from tests.engine_support import TieringEnv
from tests.export.registry_server import RegistryServer
from tests.export.spark_reader import spark_rows
from tests.export.support import table_of
from tests.export.typed_support import (
    CART,
    CART_V2,
    PAYMENT,
    Avro,
    Json,
    cart,
    iceberg_types,
    payment,
    rows_by_offset,
    tier,
    with_fields,
    with_typed_export,
)
from tiering_core.export import run_export
from tiering_core.export.registry import WireValue

#: A compatible change: fields added (optional; one a time of day), an int and a float widened.
WIDER = with_fields(
    PAYMENT,
    {"name": "coupon", "type": ["null", "string"], "default": None},
    {"name": "due", "type": ["null", {"type": "long", "logicalType": "time-micros"}], "default": None},
    id="long",
    amount="double",
)


def added(i: int) -> dict[str, Any]:
    """The values of ``WIDER``'s added fields."""
    return {"coupon": f"c{i}" if i % 2 else None, "due": None if i == 3 else dt.time(9, i, 30, 250 + i)}


def test_spark_reads_every_row_as_the_deserializer_reads_it(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer, spark: Any
) -> None:
    avro = Avro(schema_registry, "payments")
    sent: dict[tuple[int, int], bytes | None] = {}
    for partition in (0, 1):
        first = [avro.serialize(PAYMENT, [payment(100 * partition + 10 * s + i) for i in range(6)]) for s in range(2)]
        segments: list[list[bytes | None]] = [[*values] for values in first]
        later = [payment(100 * partition + 50 + i) | added(i) for i in range(5)]
        segments.append([*avro.serialize(WIDER, later)])
        tiered = tier(tiering_env, "payments", segments, partition)
        sent.update({(partition, offset): value for offset, value in tiered.items()})
    with_typed_export(tiering_env, tmp_path, schema_registry, payments={"value": "avro"})
    with tiering_env.context() as ctx:
        result = run_export(ctx, "payments", commit_bytes=1)  # a commit per segment: the table evolves in them
        assert not result.failed and result.dead_letters == 0 and result.rows == len(sent)
        table = table_of(ctx, "payments")
        by_pyiceberg = rows_by_offset(table)
        types = iceberg_types(table)
        assert (types["id"], types["amount"], types["coupon"], types["due"]) == ("long", "double", "string", "time")
        assert len({snapshot.schema_id for snapshot in table.snapshots()}) == 2  # older files hold an int id
        rows = spark_rows(spark, table)
    assert len(rows) == len(sent)
    by_spark = {(row["partition"], row["offset"]): row for row in rows}
    assert set(by_spark) == set(sent) == set(by_pyiceberg)  # each offset once
    schema_of = {WireValue.parse(v or b"").schema_id: s for v, s in ((sent[(0, 0)], PAYMENT), (sent[(0, 12)], WIDER))}
    assert len(schema_of) == 2
    value_columns = {f["name"] for f in WIDER["fields"]}
    for where, data in sent.items():
        row = by_spark[where]
        writer = schema_of[WireValue.parse(data or b"").schema_id]
        written = {f["name"] for f in writer["fields"]}
        assert {name: row[name] for name in written} == avro.deserialize(data or b""), where
        assert all(row[name] is None for name in value_columns - written), where
        kafka = {name: value for name, value in by_pyiceberg[where].items() if name not in value_columns}
        assert {name: row[name] for name in kafka} == kafka, where
    assert by_spark[(1, 3)]["key"] == b"k3" and by_spark[(1, 3)]["timestamp"].tzinfo == dt.UTC


def test_spark_reads_a_json_schema_table_its_uuids_as_their_bytes(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer, spark: Any
) -> None:
    js = Json(schema_registry, "carts")
    one = js.serialize(CART, [cart(i) for i in range(5)])
    two = js.serialize(CART_V2, [cart(i, 2) for i in range(5, 10)])
    schema_of = {WireValue.parse(v).schema_id: s for vs, s in ((one, CART), (two, CART_V2)) for v in vs}
    sent = tier(tiering_env, "carts", [[*one[:3]], [*two[:3], one[3]], [*two[3:], one[4]]])
    with_typed_export(tiering_env, tmp_path, schema_registry, carts={"value": "json_schema"})
    with tiering_env.context() as ctx:
        result = run_export(ctx, "carts", commit_bytes=1)
        assert not result.failed and result.dead_letters == 0 and result.rows == len(sent)
        table = table_of(ctx, "carts")
        assert iceberg_types(table)["ref"] == "uuid"
        rows = {row["offset"]: row for row in spark_rows(spark, table)}
    assert set(rows) == set(sent)
    for offset, data in sent.items():
        row = rows[offset]
        writer = schema_of[WireValue.parse(data or b"").schema_id]
        want = js.deserialize(data or b"", writer)
        want["counts"] = dict(want["counts"])  # a map: Spark's dict for the deserializer's pairs
        got = {name: row[name] for name in want} | {"ref": str(uuid.UUID(bytes=row["ref"]))}
        assert got == want, offset
        assert row["coupon"] is None or writer is CART_V2
