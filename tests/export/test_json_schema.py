"""JSON Schema values as typed columns: what Confluent's JSONSerializer wrote through a real
registry reads back as Confluent's JSONDeserializer reads it, field by field, in the Arrow types
the table maps; what the schema refuses or no column holds is a reason, never a row."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.export.registry_server import RegistryServer
from tests.export.typed_support import json_columns, row_columns
from tiering_core.export.avro import UnsupportedSchemaError
from tiering_core.export.json_schema import JsonSchemaColumns
from tiering_core.export.registry import RegistryEndpoint, SchemaRegistry, UndecodableValue, WireValue

WIDE: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Payment",
    "type": "object",
    "definitions": {
        "Address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "integer"}},
            "required": ["city"],
        }
    },
    "properties": {
        "id": {"type": "integer"},
        "ok": {"type": "boolean"},
        "amount": {"type": "number"},
        "note": {"type": ["string", "null"]},
        "state": {"enum": ["NEW", "PAID", "VOID"]},
        "customer": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "address": {"$ref": "#/definitions/Address"},
            },
            "required": ["name", "tags"],
        },
        "lines": {"type": "array", "items": {"type": "object", "additionalProperties": {"type": "integer"}}},
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"},
        "ref": {"type": "string", "format": "uuid"},
        "maybe": {"anyOf": [{"type": "null"}, {"type": "number"}]},
    },
    "required": ["id", "ok", "amount", "state", "customer", "lines", "day", "at", "ref"],
}


def _values(n: int) -> list[dict[str, Any]]:
    values = []
    for i in range(n):
        value: dict[str, Any] = {
            "id": 2**40 + i,
            "ok": i % 2 == 0,
            "amount": i / 3 if i % 4 else i,  # an integer is a number too
            "state": ["NEW", "PAID", "VOID"][i % 3],
            "customer": {"name": f"c{i}", "tags": [f"t{j}" for j in range(i % 4)]},
            "lines": [{"sku-a": i, "sku-b": -1}] * (i % 3),
            "day": f"2026-01-{1 + i % 28:02d}",
            "at": f"2026-11-29T12:00:{i % 60:02d}.{i:06d}+0{i % 3}:00" if i % 2 else f"2026-11-29T12:00:00.{i:03d}Z",
            "ref": f"00000000-0000-0000-0000-{i + 1:012d}",
        }
        if i % 3:
            value["note"] = None if i % 3 == 1 else f"note é {i}"
            value["customer"]["address"] = {"city": f"city{i % 5}"} | ({"zip": 1000 + i} if i % 2 else {})
            value["maybe"] = None if i % 2 else i / 7
        values.append(value)
    return values


def test_every_mapped_type_reads_back_as_the_deserializer_reads_it(schema_registry: RegistryServer) -> None:
    client = SchemaRegistryClient({"url": schema_registry.url})
    ctx = SerializationContext("json-payments", MessageField.VALUE)
    serialize = JSONSerializer(json.dumps(WIDE), client)
    payloads = [serialize(v, ctx) for v in _values(30)]
    deserialize = JSONDeserializer(None, schema_registry_client=client)
    want = [deserialize(p, ctx) for p in payloads]

    registry = SchemaRegistry(RegistryEndpoint(schema_registry.url))
    wires = [WireValue.parse(p) for p in payloads]
    assert len({w.schema_id for w in wires}) == 1
    registered = registry.schema(wires[0].schema_id)
    assert registered.schema_type == "JSON"
    columns = JsonSchemaColumns.of(wires[0].schema_id, registered.text)
    got = columns.to_arrow([columns.decode(w.payload) for w in wires]).to_pylist()
    assert [row_columns(row) for row in got] == [json_columns(w, WIDE) for w in want]
    types = {f.name: f.type for f in columns.arrow_type}
    assert types["id"] == pa.int64() and types["amount"] == pa.float64() and types["ok"] == pa.bool_()
    assert types["day"] == pa.date32() and types["at"] == pa.timestamp("us", tz="UTC") and types["ref"] == pa.uuid()
    assert types["state"] == pa.string() and types["note"] == pa.string() and types["maybe"] == pa.float64()
    assert types["lines"] == pa.list_(pa.map_(pa.string(), pa.int64()))
    assert types["customer"] == pa.struct(
        [
            pa.field("name", pa.string(), nullable=False),
            pa.field("tags", pa.list_(pa.string()), nullable=False),
            pa.field(
                "address", pa.struct([pa.field("city", pa.string(), nullable=False), pa.field("zip", pa.int64())])
            ),
        ]
    )
    nullable = {f.name for f in columns.arrow_type if f.nullable}
    assert nullable == {"note", "maybe"}  # not required, or admitting null


def test_a_schema_whose_top_level_is_not_an_object_is_one_value_column(schema_registry: RegistryServer) -> None:
    client = SchemaRegistryClient({"url": schema_registry.url})
    ctx = SerializationContext("json-lists", MessageField.VALUE)
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "array",
        "items": {"type": "string", "format": "date"},
    }
    payload = JSONSerializer(json.dumps(schema), client)(["2026-01-02", "2026-03-04"], ctx)
    wire = WireValue.parse(payload)
    columns = JsonSchemaColumns.of(
        wire.schema_id, SchemaRegistry(RegistryEndpoint(schema_registry.url)).schema(wire.schema_id).text
    )
    assert columns.wrapped
    row = columns.to_arrow([columns.decode(wire.payload)]).to_pylist()[0]
    want = JSONDeserializer(None, schema_registry_client=client)(payload, ctx)
    assert (
        row_columns(row)
        == {"value": json_columns(want, schema)}
        == {"value": [dt.date(2026, 1, 2), dt.date(2026, 3, 4)]}
    )


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\xff\xfe", "is not JSON"),
        (b'{"id": 1', "is not JSON"),
        (b'{"id": "one", "when": "2026-01-01"}', "fails its schema at id: 'one' is not of type 'integer'"),
        (b'{"when": "2026-01-01"}', "fails its schema at the value: 'id' is a required property"),
        (b'{"id": 1, "when": "yesterday"}', "has no column value: Invalid isoformat string"),
        (b'{"id": 1, "at": "2026-01-01T00:00:00"}', "has no column value: date-time '2026-01-01T00:00:00' has no UTC"),
        (b'{"id": 36893488147419103232}', "has no column value: 36893488147419103232 is not a 64-bit integer"),
        (b'{"id": 1, "ref": "not-a-uuid"}', "has no column value"),
    ],
)
def test_values_the_schema_refuses_or_no_column_holds_are_reasons(payload: bytes, reason: str) -> None:
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "when": {"type": "string", "format": "date"},
            "at": {"type": "string", "format": "date-time"},
            "ref": {"type": "string", "format": "uuid"},
        },
        "required": ["id"],
    }
    columns = JsonSchemaColumns.of(4, json.dumps(schema))
    with pytest.raises(UndecodableValue) as caught:
        columns.decode(payload)
    assert caught.value.schema_id == 4 and reason in caught.value.reason
    assert caught.value.reason.startswith("JSON payload for schema id 4 ")
    # a value the schema takes, with a property it does not name (not a column)
    assert columns.decode(b'{"id": 7, "extra": [1]}') == {"id": 7, "when": None, "at": None, "ref": None}


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"type": "object", "properties": {"u": {"type": ["integer", "string"]}}}, "field u: 2 non-null types"),
        (
            {"type": "object", "properties": {"u": {"oneOf": [{"type": "integer"}, {"type": "string"}]}}},
            "field u: oneOf",
        ),
        (
            {"type": "object", "properties": {"n": {"$ref": "#"}}},
            "field n: the recursive $ref '#'",
        ),
        ({"type": "object", "properties": {"o": {"type": "object"}}}, "field o: an object without properties"),
        ({"type": "object", "properties": {"a": {"type": "array"}}}, "field a: an array needs one items schema"),
        ({"type": "object", "properties": {"x": {}}}, "field x: a schema that admits any value"),
        ({"type": "object", "properties": {"r": {"$ref": "other.json"}}}, "field r: $ref 'other.json' is not within"),
        ({"type": "object", "properties": {"r": {"$ref": "#/definitions/Gone"}}}, "names nothing in the schema"),
        (
            {"type": "object", "properties": {"c": {"type": "object", "properties": {"d": {"type": "null"}}}}},
            "field c.d: a value that is always null",
        ),
    ],
)
def test_schemas_without_a_column_type_are_refused_naming_the_field(schema: dict[str, Any], reason: str) -> None:
    with pytest.raises(UnsupportedSchemaError) as caught:
        JsonSchemaColumns.of(9, json.dumps(schema))
    assert str(caught.value).startswith("JSON schema id 9: ") and reason in str(caught.value)


def test_a_schema_that_is_no_json_schema_is_refused() -> None:
    with pytest.raises(UnsupportedSchemaError, match=r"^JSON schema id 3: not JSON: "):
        JsonSchemaColumns.of(3, "{not json")
    bad = {"type": "object", "properties": {"c": {"type": "object", "properties": {"d": {"type": "nope"}}}}}
    with pytest.raises(
        UnsupportedSchemaError, match=r"^JSON schema id 3: not a JSON Schema at properties/c/properties/d/type: "
    ):
        JsonSchemaColumns.of(3, json.dumps(bad))
