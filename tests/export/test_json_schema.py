"""JSON Schema values as typed columns: what Confluent's JSONSerializer wrote through a real
registry reads back as Confluent's JSONDeserializer reads it, field by field, in the Arrow types
the table maps; what the schema refuses or no column holds is a reason, never a row. End to end,
such a topic tiered and exported: its rows, its dead letters, its table evolving or refusing."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.engine_support import TieringEnv
from tests.export.registry_server import RegistryServer
from tests.export.support import table_of
from tests.export.typed_support import (
    CART,
    CART_V2,
    PAYMENT,
    Avro,
    Json,
    cart,
    dead_letters_of,
    iceberg_types,
    json_columns,
    payment,
    row_columns,
    rows_by_offset,
    rows_by_offset_alone,
    tier,
    with_typed_export,
)
from tiering_core.export import run_export
from tiering_core.export.avro import UnsupportedSchemaError
from tiering_core.export.json_schema import JsonSchemaColumns
from tiering_core.export.registry import RegistryEndpoint, SchemaRegistry, UndecodableValue, WireValue
from tiering_core.export.typed import SchemaChangeError

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


#: Composition: a base type by ``$ref`` and the order's own fields, an item's ``allOf`` one more level in.
ALL_OF: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "definitions": {
        "Base": {
            "type": "object",
            "properties": {"id": {"type": "integer"}, "at": {"type": "string", "format": "date-time"}},
            "required": ["id"],
        }
    },
    "allOf": [
        {"$ref": "#/definitions/Base"},
        {
            "type": "object",
            "properties": {
                "note": {"type": ["string", "null"]},
                "line": {
                    "allOf": [
                        {"properties": {"sku": {"type": "string"}, "n": {"type": "integer"}}},
                        {"required": ["sku"]},
                    ]
                },
            },
            "required": ["line"],
        },
    ],
}
#: The one object schema ``ALL_OF`` means, written out.
ALL_OF_WRITTEN_OUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "at": {"type": "string", "format": "date-time"},
        "note": {"type": ["string", "null"]},
        "line": {
            "type": "object",
            "properties": {"sku": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["sku"],
        },
    },
    "required": ["id", "line"],
}


def test_all_of_object_schemas_is_one_struct_of_their_fields_as_the_deserializer_reads_it(
    schema_registry: RegistryServer,
) -> None:
    client = SchemaRegistryClient({"url": schema_registry.url})
    ctx = SerializationContext("json-all-of", MessageField.VALUE)
    values = [
        {"id": i, "line": {"sku": f"s{i}"} | ({"n": i} if i % 2 else {})}
        | ({"at": f"2026-11-30T0{i}:00:00Z"} if i % 3 else {})
        | ({"note": None if i % 2 else f"n{i}"} if i % 4 else {})
        for i in range(8)
    ]
    payloads = [JSONSerializer(json.dumps(ALL_OF), client)(v, ctx) for v in values]
    want = [JSONDeserializer(None, schema_registry_client=client)(p, ctx) for p in payloads]
    wires = [WireValue.parse(p) for p in payloads]
    registered = SchemaRegistry(RegistryEndpoint(schema_registry.url)).schema(wires[0].schema_id)
    columns = JsonSchemaColumns.of(wires[0].schema_id, registered.text)
    assert columns.arrow_type == JsonSchemaColumns.of(2, json.dumps(ALL_OF_WRITTEN_OUT)).arrow_type
    assert columns.arrow_type.names == ["id", "at", "note", "line"]
    got = columns.to_arrow([columns.decode(w.payload) for w in wires]).to_pylist()
    assert [row_columns(row) for row in got] == [json_columns(w, ALL_OF_WRITTEN_OUT) for w in want]
    with pytest.raises(UndecodableValue, match="fails its schema at line: 'sku' is a required property"):
        columns.decode(json.dumps({"id": 1, "line": {"n": 2}}).encode())  # validated by the schema as written


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
        (b'{"id": 1, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "is not JSON: maximum recursion depth"),
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
        (
            {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}}, {"type": "string"}]},
            "field the value: allOf of a schema that is not an object's",
        ),
        (
            {"allOf": [{"properties": {"a": {"type": "integer"}}}, {"properties": {"a": {"type": "string"}}}]},
            "allOf gives the property a two schemas",
        ),
        (
            {"definitions": {"N": {"allOf": [{"$ref": "#/definitions/N"}]}}, "allOf": [{"$ref": "#/definitions/N"}]},
            "the recursive $ref '#/definitions/N'",
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


# End to end: a topic of JSON Schema values tiered, exported, read back.


def test_json_schema_values_read_back_as_the_deserializer_reads_them_dead_letters_and_evolution(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    js = Json(schema_registry, "carts")
    one = js.serialize(CART, [cart(i) for i in range(5)])
    two = js.serialize(CART_V2, [cart(i, 2) for i in range(5, 10)])
    schema_of = {WireValue.parse(v).schema_id: s for vs, s in ((one, CART), (two, CART_V2)) for v in vs}
    assert len(schema_of) == 2
    header = one[0][:5]
    refused = header + json.dumps({**cart(0), "id": "seven"}).encode()  # JSON its schema refuses
    not_json = header + b'{"id": 1,'
    no_date = header + json.dumps({**cart(3), "day": "someday"}).encode()
    unknown_id = b"\x00" + (2**31 - 9).to_bytes(4, "big") + one[0][5:]
    avro_id = Avro(schema_registry, "carts-avro").serialize(PAYMENT, [payment(1)])[0]  # not the topic's format
    dead_values = [refused, not_json, no_date, unknown_id, avro_id]
    sent = tier(
        tiering_env,
        "carts",
        [[*one[:3], refused, not_json], [*two[:3], one[3]], [no_date, unknown_id, avro_id, *two[3:], one[4]]],
    )
    with_typed_export(tiering_env, tmp_path, schema_registry, carts={"value": "json_schema"})
    with tiering_env.context() as ctx:
        result = run_export(ctx, "carts", commit_bytes=1)
        assert not result.failed and result.dead_letters == len(dead_values) and result.rows == 10
        table = table_of(ctx, "carts")
        rows = rows_by_offset_alone(table)
        dead = dead_letters_of(ctx, "carts")
    assert set(rows) | set(dead) == set(sent) and not set(rows) & set(dead)
    for offset, row in rows.items():
        data = sent[offset] or b""
        writer = schema_of[WireValue.parse(data).schema_id]
        assert row["value_schema_id"] == WireValue.parse(data).schema_id
        want = js.deserialize(data, writer)
        assert {k: row_columns(row[k]) for k in want} == want, offset
        if writer is CART:
            assert row["coupon"] is None
    by_value = {sent[o]: row["reason"] for o, row in dead.items()}
    assert "fails its schema at id: 'seven' is not of type 'integer'" in by_value[refused]
    assert "is not JSON" in by_value[not_json] and "has no column value" in by_value[no_date]
    assert f"schema id {2**31 - 9} is unknown" in by_value[unknown_id]
    assert (
        f"schema id {WireValue.parse(avro_id).schema_id} is a AVRO schema, not the topic's json_schema"
        in by_value[avro_id]
    )
    assert all(row["value"] == sent[o] for o, row in dead.items())
    types = iceberg_types(table)
    assert (types["id"], types["total"], types["at"], types["day"], types["ref"]) == (
        "long",
        "double",
        "timestamptz",
        "date",
        "uuid",
    )
    assert types["lines"] == "list<struct<sku: string, n: long>>" and types["counts"] == "map<string, long>"
    assert types["coupon"] == "string" and "value" not in types
    assert json.loads(table.properties["tiering.value-schema-ids"]) == list(schema_of)


def test_an_incompatible_json_schema_change_stops_the_export(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    js = Json(schema_registry, "carts-required")
    first = js.serialize(CART, [cart(i) for i in range(3)])
    required = {**CART_V2, "required": [*CART["required"], "coupon"]}
    bad = js.serialize(required, [{**cart(4), "coupon": "c"}])[0]
    tier(tiering_env, "carts-required", [first[:2], [bad, first[2]]])
    with_typed_export(tiering_env, tmp_path, schema_registry, **{"carts-required": {"value": "json_schema"}})
    with tiering_env.context() as ctx:
        with pytest.raises(SchemaChangeError) as caught:
            run_export(ctx, "carts-required", commit_bytes=1)
        old, new = WireValue.parse(first[0]).schema_id, WireValue.parse(bad).schema_id
        assert f"value schema id {new} cannot evolve the table's columns (from schema id {old})" in str(caught.value)
        assert "field coupon is added as required without a default" in str(caught.value)
        assert sorted(o for _p, o in rows_by_offset(table_of(ctx, "carts-required"))) == [0, 1]
