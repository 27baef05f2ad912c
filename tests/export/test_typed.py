"""A typed table's columns: the first writer schema's fields, all optional, then each later schema
merged when old rows read through the change, and one line naming both ids when they do not."""

from __future__ import annotations

import base64
import json
from typing import Any

import pyarrow as pa
import pytest

from tests.export.proto_files import F, payment_file
from tests.export.typed_support import with_fields
from tiering_core.errors import ExportError
from tiering_core.export.avro import AvroColumns
from tiering_core.export.json_schema import JsonSchemaColumns
from tiering_core.export.protobuf import ProtobufColumns
from tiering_core.export.table import DATA_SCHEMA, TableName
from tiering_core.export.typed import (
    DEAD_LETTER_SCHEMA,
    KAFKA_COLUMNS,
    KEY,
    KEY_FIELDS_COLUMN,
    KEY_SCHEMA_ID_COLUMN,
    KEY_SCHEMA_IDS_PROPERTY,
    SCHEMA_ID_COLUMN,
    SCHEMA_IDS_PROPERTY,
    SchemaChangeError,
    SubjectStrategy,
    TypedColumns,
    ValueColumns,
    conformed,
    dead_letter_table,
    schema_ids_of,
)

BASE: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "total", "type": "float"},
        {"name": "lines", "type": {"type": "array", "items": {"type": "map", "values": "int"}}},
        {"name": "who", "type": {"type": "record", "name": "Who", "fields": [{"name": "age", "type": "int"}]}},
    ],
}


def columns(*schemas: dict[str, Any]) -> ValueColumns:
    merged = ValueColumns()
    for i, schema in enumerate(schemas, 1):
        merged = merged.with_schema(AvroColumns.of(i, json.dumps(schema)))
    return merged


def test_the_first_schema_gives_optional_columns_after_the_kafka_columns() -> None:
    merged = columns(BASE)
    assert merged.schema_ids == (1,)
    assert merged.schema.names == [*KAFKA_COLUMNS.names, SCHEMA_ID_COLUMN, "id", "total", "lines", "who"]
    assert "value" not in merged.schema.names
    assert all(f.nullable for f in merged.value_type)
    assert merged.value_type.field("who").type.field("age").nullable


def test_compatible_changes_widen_the_columns_nested_ones_too() -> None:
    wider = with_fields(
        BASE,
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "currency", "type": "string", "default": "EUR"},
        id="long",
        total="double",
        lines={"type": "array", "items": {"type": "map", "values": "long"}},
        who={"type": "record", "name": "Who", "fields": [{"name": "age", "type": "long"}]},
    )
    merged = columns(BASE, wider)
    types = {f.name: f.type for f in merged.value_type}
    assert types["id"] == pa.int64() and types["total"] == pa.float64()
    assert types["lines"] == pa.list_(pa.map_(pa.string(), pa.int64()))
    assert types["who"].field("age").type == pa.int64()
    assert types["note"] == pa.string() and types["currency"] == pa.string()
    # an older writer after a newer one changes nothing, and a field removed keeps its column
    narrower = {**BASE, "fields": BASE["fields"][:2]}
    again = merged.with_schema(AvroColumns.of(3, json.dumps(narrower)))
    assert again.value_type == merged.value_type and again.schema_ids == (1, 2, 3)
    assert again.with_schema(AvroColumns.of(3, json.dumps(narrower))) is again


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (with_fields(BASE, total="string"), "field total changes from float to string"),
        (with_fields(BASE, id="double"), "field id changes from int32 to double"),
        (
            with_fields(BASE, {"name": "region", "type": "string"}),
            "field region is added as required without a default",
        ),
        (
            with_fields(BASE, who={"type": "record", "name": "Who", "fields": [{"name": "age", "type": "string"}]}),
            "field who.age changes from int32 to string",
        ),
        (
            with_fields(BASE, lines={"type": "array", "items": {"type": "map", "values": "string"}}),
            "field lines[]{} changes from int32 to string",
        ),
        (with_fields(BASE, {"name": "offset", "type": ["null", "long"], "default": None}), "named like a column"),
    ],
)
def test_an_incompatible_change_names_both_schema_ids_and_the_field(change: dict[str, Any], says: str) -> None:
    with pytest.raises(SchemaChangeError) as caught:
        columns(BASE, change)
    assert str(caught.value).startswith("value schema id 2 cannot evolve the table's columns (from schema id 1): ")
    assert says in str(caught.value)


def test_a_first_schema_with_a_kafka_column_name_is_refused() -> None:
    clash = {"type": "record", "name": "R", "fields": [{"name": "partition", "type": "int"}]}
    with pytest.raises(SchemaChangeError, match=r"from no schema.*field partition is named like a column"):
        columns(clash)


def test_the_schema_ids_property_and_the_dead_letter_table() -> None:
    merged = columns(BASE, with_fields(BASE, id="long"))
    assert schema_ids_of({SCHEMA_IDS_PROPERTY: merged.property_value()}) == (1, 2)
    assert schema_ids_of({}) == ()
    with pytest.raises(ExportError, match=SCHEMA_IDS_PROPERTY):
        schema_ids_of({SCHEMA_IDS_PROPERTY: "[1, 'x'"})
    assert dead_letter_table(TableName("kafka", "orders.eu")) == TableName("kafka", "orders.eu_dead_letters")
    assert DEAD_LETTER_SCHEMA.names[-2:] == ["reason", "schema_id"] and "value" in DEAD_LETTER_SCHEMA.names


JSON_BASE: dict[str, Any] = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "who": {"type": "object", "properties": {"age": {"type": "integer"}}}},
    "required": ["id"],
}


def json_columns(*schemas: dict[str, Any]) -> ValueColumns:
    merged = ValueColumns()
    for i, schema in enumerate(schemas, 1):
        merged = merged.with_schema(JsonSchemaColumns.of(i, json.dumps(schema)))
    return merged


def test_json_schema_columns_evolve_by_the_same_rules() -> None:
    added = {
        **JSON_BASE,
        "properties": {
            **JSON_BASE["properties"],
            "note": {"type": "string"},  # not required: optional
            "rate": {"type": ["number", "null"]},
            "currency": {"type": "string", "default": "EUR"},
        },
        "required": ["id", "rate", "currency"],
    }
    merged = json_columns(JSON_BASE, added)
    assert merged.schema_ids == (1, 2)
    assert {f.name: f.type for f in merged.value_type} == {
        "id": pa.int64(),
        "who": pa.struct([pa.field("age", pa.int64())]),
        "note": pa.string(),
        "rate": pa.float64(),
        "currency": pa.string(),
    }
    required = {**JSON_BASE, "properties": {**JSON_BASE["properties"], "region": {"type": "string"}}}
    with pytest.raises(
        SchemaChangeError, match=r"from schema id 1.*field region is added as required without a default"
    ):
        json_columns(JSON_BASE, {**required, "required": ["id", "region"]})
    retyped = {**JSON_BASE, "properties": {**JSON_BASE["properties"], "id": {"type": "string"}}}
    with pytest.raises(SchemaChangeError, match="field id changes from int64 to string"):
        json_columns(JSON_BASE, retyped)


def proto_columns(schema_id: int, file: Any) -> ProtobufColumns:
    return ProtobufColumns.of(schema_id, base64.b64encode(file.SerializeToString()).decode())


def test_protobuf_columns_evolve_by_the_same_rules_every_field_having_a_default() -> None:
    merged = ValueColumns().with_schema(proto_columns(1, payment_file(1)))
    wider = merged.with_schema(proto_columns(2, payment_file(2, F.TYPE_INT64)))  # a field added, count widened
    types = {f.name: f.type for f in wider.value_type}
    assert types["channel"] == pa.string() and types["count"] == pa.int64() and wider.schema_ids == (1, 2)
    with pytest.raises(SchemaChangeError, match=r"from schema id 1.*field count changes from int32 to string"):
        merged.with_schema(proto_columns(3, payment_file(1, F.TYPE_STRING)))


def test_a_decoded_key_is_one_struct_column_beside_its_bytes() -> None:
    key = {"type": "record", "name": "K", "fields": [{"name": "offset", "type": "int"}]}  # a Kafka column's name
    none_yet = TypedColumns(None, ValueColumns(side=KEY))
    assert none_yet.schema.names == DATA_SCHEMA.names and none_yet.properties() == {}  # no key schema met yet
    keyed = TypedColumns(None, none_yet.key.with_schema(AvroColumns.of(4, json.dumps(key))))  # type: ignore[union-attr]
    assert keyed.schema.names == [*DATA_SCHEMA.names, KEY_SCHEMA_ID_COLUMN, KEY_FIELDS_COLUMN]
    assert keyed.schema.field(KEY_FIELDS_COLUMN).type == pa.struct([pa.field("offset", pa.int32())])
    assert (
        keyed.properties() == {KEY_SCHEMA_IDS_PROPERTY: "[4]"} and keyed.ids(KEY) == (4,) and keyed.ids("value") == ()
    )
    both = TypedColumns(columns(BASE), keyed.key)
    assert both.schema.names == [
        *KAFKA_COLUMNS.names,
        SCHEMA_ID_COLUMN,
        "id",
        "total",
        "lines",
        "who",
        KEY_SCHEMA_ID_COLUMN,
        KEY_FIELDS_COLUMN,
    ]
    assert both.properties() == {SCHEMA_IDS_PROPERTY: "[1]", KEY_SCHEMA_IDS_PROPERTY: "[4]"}
    with pytest.raises(
        SchemaChangeError, match=r"^key schema id 5 cannot evolve the table's columns \(from schema id 4\)"
    ):
        keyed.key.with_schema(AvroColumns.of(5, json.dumps(with_fields(key, offset="string"))))  # type: ignore[union-attr]
    with pytest.raises(SchemaChangeError, match="field key_fields is named like a column"):
        columns(with_fields(BASE, {"name": "key_fields", "type": ["null", "long"], "default": None}))


def test_the_subject_strategies_name_confluents_subjects() -> None:
    assert SubjectStrategy("orders").subject("value", "shop.Order") == "orders-value"
    assert SubjectStrategy("orders").subject(KEY, None) == "orders-key"
    assert SubjectStrategy("orders", "record").subject("value", "shop.Order") == "shop.Order"
    assert SubjectStrategy("orders", "topic_record").subject(KEY, "shop.Order") == "orders-shop.Order"
    assert SubjectStrategy("orders", "record").subject("value", None) is None  # a primitive schema has no record
    assert (
        AvroColumns.of(1, json.dumps(BASE)).record_name == "Order" and AvroColumns.of(2, '"long"').record_name is None
    )
    assert JsonSchemaColumns.of(3, json.dumps({**JSON_BASE, "title": "shop.Cart"})).record_name == "shop.Cart"
    assert proto_columns(4, payment_file()).record_name == "shop.Payment"


def test_a_writer_schemas_column_conforms_to_the_merged_columns_without_its_values_built_again() -> None:
    item = pa.struct([pa.field("sku", pa.string(), nullable=False), pa.field("qty", pa.int32())])
    writer = pa.struct(
        [
            pa.field("id", pa.int32(), nullable=False),
            pa.field("home", pa.struct([pa.field("city", pa.string(), nullable=False)])),
            pa.field("lines", pa.list_(item)),
            pa.field("totals", pa.map_(pa.string(), pa.float32())),
        ]
    )
    rows = [
        {"id": 1, "home": {"city": "Oslo"}, "lines": [{"sku": "a", "qty": 2}], "totals": [("x", 1.5)]},
        {"id": 2, "home": None, "lines": None, "totals": None},
        {"id": 3, "home": {"city": "Rome"}, "lines": [], "totals": []},
    ]
    wider = with_fields(
        {"type": "record", "name": "R", "fields": []},
        {"name": "note", "type": ["null", "string"], "default": None},
    )
    columns = ValueColumns().with_schema(AvroColumns.of(1, json.dumps(wider)))
    table = pa.struct(
        [
            *columns.value_type,
            pa.field("id", pa.int64()),
            pa.field("home", pa.struct([pa.field("city", pa.string()), pa.field("zip", pa.int64())])),
            pa.field("lines", pa.list_(pa.struct([pa.field("sku", pa.string()), pa.field("qty", pa.int64())]))),
            pa.field("totals", pa.map_(pa.string(), pa.float64())),
        ]
    )
    array = pa.array(rows, writer)
    got = conformed(array, table)
    assert got.type.equals(table)
    got.validate(full=True)
    want = [
        {"note": None, **row, "home": None if row["home"] is None else {**row["home"], "zip": None}} for row in rows
    ]
    assert got.to_pylist() == want
    assert conformed(array, writer) is array
    assert conformed(array.slice(1), table).to_pylist() == want[1:]
