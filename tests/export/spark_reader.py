"""Spark reading a typed table without Iceberg's Spark runtime (which does not load in Spark 4.2):
the data files of the table's current snapshot, as pyiceberg's scan plans them, read with
``spark.read.parquet`` under the table's current schema (a uuid as its 16 bytes), and the rows
collected as the Python values pyiceberg and the deserializers give."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa

from tiering_core.export.schema import storage_type


def spark_rows(spark: Any, table: Any) -> list[dict[str, Any]]:
    """The table's rows as Spark reads them: its current snapshot's data files (the table holds no
    delete files: the export deletes by rewriting files) under its current schema, time columns
    enabled (Spark 4.2's TIME is off by default)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    tasks = list(table.scan().plan_files())
    assert tasks and not any(task.delete_files for task in tasks)
    arrow = table.schema().as_arrow()
    schema = from_arrow_schema(pa.schema([field.with_type(storage_type(field.type)) for field in arrow]))
    spark.conf.set("spark.sql.timeType.enabled", "true")
    frame = spark.read.schema(schema).parquet(*[task.file.file_path for task in tasks])
    return [python_value(row.asDict(recursive=True), frame.schema) for row in frame.collect()]


def python_value(value: Any, kind: Any) -> Any:
    """A value Spark collected, as pyiceberg and the deserializer give it: an instant (Spark hands
    it over in the local time zone, naive) in UTC, binary as bytes."""
    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(kind, T.StructType):
        return {f.name: python_value(value[f.name], f.dataType) for f in kind.fields}
    if isinstance(kind, T.ArrayType):
        return [python_value(v, kind.elementType) for v in value]
    if isinstance(kind, T.MapType):
        return {python_value(k, kind.keyType): python_value(v, kind.valueType) for k, v in value.items()}
    if isinstance(kind, T.TimestampType):
        assert isinstance(value, dt.datetime) and value.tzinfo is None
        return value.astimezone(dt.UTC)
    if isinstance(kind, T.BinaryType):
        return bytes(value)
    return value
