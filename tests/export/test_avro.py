"""Avro values as typed columns: what Confluent's serializer wrote through a real registry reads
back as Confluent's deserializer reads it, field by field, in the Arrow types the table maps."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.export.registry_server import RegistryServer
from tiering_core.export.avro import AvroColumns, UnsupportedSchemaError, decode_all
from tiering_core.export.registry import RegistryEndpoint, SchemaRegistry, UndecodableValue, WireValue

WIDE = {
    "type": "record",
    "name": "Payment",
    "namespace": "shop.v1",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "ok", "type": "boolean"},
        {"name": "count", "type": "int"},
        {"name": "ratio", "type": "float"},
        {"name": "amount_d", "type": "double"},
        {"name": "raw", "type": "bytes"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "PAID", "VOID"]}},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {
            "name": "customer",
            "type": {
                "type": "record",
                "name": "Customer",
                "fields": [
                    {"name": "name", "type": "string"},
                    {"name": "tags", "type": {"type": "array", "items": "string"}},
                    {"name": "previous", "type": ["null", "State"], "default": None},
                ],
            },
        },
        {"name": "lines", "type": {"type": "array", "items": {"type": "map", "values": "long"}}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local_at", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "clock", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "maybe_at", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}], "default": None},
    ],
}


def _values(n: int) -> list[dict[str, Any]]:
    base = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
    return [
        {
            "id": i,
            "ok": i % 2 == 0,
            "count": -i,
            "ratio": 0.5 * i,
            "amount_d": i / 3,
            "raw": bytes([i % 256, 0, 255]),
            "note": None if i % 3 == 0 else f"note é {i}",
            "state": ["NEW", "PAID", "VOID"][i % 3],
            "digest": i.to_bytes(4, "big"),
            "customer": {
                "name": f"c{i}",
                "tags": [f"t{j}" for j in range(i % 4)],
                "previous": None if i % 2 else "NEW",
            },
            "lines": [{"sku-a": i, "sku-b": -1}] * (i % 3),
            "day": dt.date(2026, 1, 1) + dt.timedelta(days=i),
            "at_ms": base + dt.timedelta(milliseconds=i),
            "at_us": base + dt.timedelta(microseconds=i),
            "local_at": dt.datetime(2026, 1, 2, 3, 4, 5, 6000) + dt.timedelta(seconds=i),
            "clock": dt.time(1, 2, 3, 4000),
            "price": Decimal(f"{i}.125"),
            "ref": str(uuid.UUID(int=i + 1)),
            "maybe_at": None if i % 2 else base,
        }
        for i in range(n)
    ]


def _plain(value: Any) -> Any:
    """A deserialized value in the plain Python types Arrow gives back."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def test_every_mapped_type_reads_back_as_the_deserializer_reads_it(schema_registry: RegistryServer) -> None:
    client = SchemaRegistryClient({"url": schema_registry.url})
    ctx = SerializationContext("avro-payments", MessageField.VALUE)
    serialize = AvroSerializer(client, json.dumps(WIDE))
    payloads = [serialize(v, ctx) for v in _values(30)]
    deserialize = AvroDeserializer(client)
    want = [_plain(deserialize(p, ctx)) for p in payloads]

    registry = SchemaRegistry(RegistryEndpoint(schema_registry.url))
    wires = [WireValue.parse(p) for p in payloads]
    assert len({w.schema_id for w in wires}) == 1
    columns = AvroColumns.of(wires[0].schema_id, registry.schema(wires[0].schema_id).text)
    values, failed = decode_all(columns, [w.payload for w in wires])
    assert failed == []
    table = columns.to_arrow(values)
    got = table.to_pylist()
    # Arrow maps come back as (key, value) pairs and time-millis as microseconds of a time.
    for row in got:
        row["lines"] = [dict(m) for m in row["lines"]]
    for row in want:
        row["lines"] = [dict(m) for m in row["lines"]]
    assert got == want
    types = {f.name: f.type for f in columns.arrow_type}
    assert types["at_ms"] == pa.timestamp("us", tz="UTC") and types["local_at"] == pa.timestamp("us")
    assert types["price"] == pa.decimal128(12, 3) and types["day"] == pa.date32()
    assert types["state"] == pa.string() and types["digest"] == pa.binary(4)
    assert types["customer"].field("previous").type == pa.string()
    assert types["lines"] == pa.list_(pa.map_(pa.string(), pa.int64()))
    assert columns.arrow_type.field("note").nullable and not columns.arrow_type.field("id").nullable


def test_a_primitive_schema_is_one_value_column(schema_registry: RegistryServer) -> None:
    client = SchemaRegistryClient({"url": schema_registry.url})
    ctx = SerializationContext("avro-longs", MessageField.VALUE)
    payload = AvroSerializer(client, '"long"')(42, ctx)
    wire = WireValue.parse(payload)
    columns = AvroColumns.of(
        wire.schema_id, SchemaRegistry(RegistryEndpoint(schema_registry.url)).schema(wire.schema_id).text
    )
    assert columns.to_arrow([columns.decode(wire.payload)]).to_pylist() == [{"value": 42}]


def test_corrupt_payloads_are_reasons_never_rows() -> None:
    columns = AvroColumns.of(1, json.dumps(WIDE))
    good = columns.parsed
    assert good is not None
    values, failed = decode_all(columns, [b"", b"\x02", b"\xff" * 40])
    assert values == [] and [i for i, _ in failed] == [0, 1, 2]
    assert all("corrupt Avro payload for schema id 1" in why for _, why in failed)
    small = AvroColumns.of(2, '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}')
    with pytest.raises(UndecodableValue, match="1 byte\\(s\\) left after the value"):
        small.decode(b"\x02\x02")  # a = 1, then a byte no field reads


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        (
            {"type": "record", "name": "R", "fields": [{"name": "u", "type": ["int", "string"]}]},
            "field u: a union of 2",
        ),
        (
            {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]},
            "field next: the recursive type 'Node'",
        ),
        (
            {
                "type": "record",
                "name": "R",
                "fields": [{"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 40}}],
            },
            r"field d: decimal\(40, 0\)",
        ),
        ({"type": "record", "name": "R", "fields": [{"name": "x", "type": "Missing"}]}, "field x: unknown type"),
    ],
)
def test_schemas_without_a_column_type_are_refused_naming_the_field(schema: dict, reason: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(UnsupportedSchemaError, match=reason):
        AvroColumns.of(9, json.dumps(schema))
