"""Protobuf values as typed columns: what Confluent's ProtobufSerializer wrote through a real
registry (its file served serialized, its imports as references) reads back as Confluent's
ProtobufDeserializer reads it, field by field, in the Arrow types the table maps. End to end, such
a topic tiered and exported: its rows, its dead letters, its table evolving."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.engine_support import TieringEnv
from tests.export.proto_files import (
    OPTIONAL,
    REPEATED,
    F,
    Proto,
    descriptor_file,
    field,
    message,
    message_class,
    payment_file,
)
from tests.export.proto_files import payment as proto_payment
from tests.export.registry_server import RegistryServer
from tests.export.support import table_of
from tests.export.typed_support import (
    CART,
    Json,
    cart,
    dead_letters_of,
    iceberg_types,
    rows_by_offset_alone,
    tier,
    with_typed_export,
)
from tiering_core.export import load_catalog, open_table, run_export, table_name
from tiering_core.export.avro import UnsupportedSchemaError
from tiering_core.export.protobuf import ProtobufColumns, message_indexes, message_paths
from tiering_core.export.registry import RegistryEndpoint, SchemaRegistry, UndecodableValue, WireValue
from tiering_core.export.typed import SchemaChangeError, ValueSchemas


def test_every_mapped_type_reads_back_as_the_deserializer_reads_it(schema_registry: RegistryServer) -> None:
    cls = message_class(payment_file(), name="shop.Payment")
    proto = Proto(schema_registry, "proto-wide")
    payloads = proto.serialize(cls, [proto_payment(cls, i) for i in range(12)])
    wires = [WireValue.parse(p) for p in payloads]
    assert len({w.schema_id for w in wires}) == 1
    registered = SchemaRegistry(RegistryEndpoint(schema_registry.url)).schema(wires[0].schema_id)
    assert registered.schema_type == "PROTOBUF"
    columns = ProtobufColumns.of(wires[0].schema_id, registered.text, registered.references)
    got = columns.to_arrow([columns.decode(w.payload) for w in wires]).to_pylist()
    assert got == [proto.deserialize(cls, p) for p in payloads]
    assert {g["state"] for g in got} == {"NEW", "PAID", "2"}  # a number without a name, as its number
    assert {g["coupon"] for g in got} == {None, "", "c1", "c5", "c7", "c11"}  # unset is not ""
    types = {f.name: f.type for f in columns.arrow_type}
    assert (types["id"], types["count"], types["big"], types["sint"]) == (
        pa.int64(),
        pa.int32(),
        pa.decimal128(20, 0),
        pa.int64(),
    )
    assert (types["amount"], types["ratio"], types["raw"], types["state"]) == (
        pa.float64(),
        pa.float32(),
        pa.binary(),
        pa.string(),
    )
    assert types["at"] == pa.timestamp("us", tz="UTC") and types["maybe"] == pa.string()
    line = pa.struct([pa.field("sku", pa.string(), nullable=False), pa.field("n", pa.int32(), nullable=False)])
    assert types["lines"] == pa.list_(line)
    assert types["counts"] == pa.map_(pa.string(), pa.int64())
    assert types["customer"].field("address").type.field("zip").type == pa.int32()
    nullable = {f.name for f in columns.arrow_type if f.nullable}
    assert nullable == {"customer", "at", "maybe", "coupon"}  # the fields with presence


def test_an_imported_file_is_fetched_as_the_schemas_reference(schema_registry: RegistryServer) -> None:
    common = descriptor_file("shop/money.proto", message("Money", field("units", 1, F.TYPE_INT64)))
    order = descriptor_file(
        "shop/order.proto",
        message("Order", field("total", 1, F.TYPE_MESSAGE, ".shop.Money"), field("n", 2, F.TYPE_INT32)),
        dependency=["shop/money.proto"],
    )
    cls = message_class(common, order, name="shop.Order")
    proto = Proto(schema_registry, "proto-orders")
    value = cls(n=3)
    value.total.units = 2**40
    data = proto.serialize(cls, [value])[0]
    wire = WireValue.parse(data)
    schemas = ValueSchemas(RegistryEndpoint(schema_registry.url), "protobuf")
    registered = schemas.registry.schema(wire.schema_id)
    assert [r["name"] for r in registered.references] == ["shop/money.proto"]
    columns = schemas.columns(wire.schema_id)
    assert columns.decode(wire.payload) == proto.deserialize(cls, data) == {"total": {"units": 2**40}, "n": 3}
    with pytest.raises(UnsupportedSchemaError, match=r"imports shop/money.proto, and no registry to fetch it from"):
        ProtobufColumns.of(wire.schema_id, registered.text, registered.references)


def encoded(file: Any) -> str:
    return base64.b64encode(file.SerializeToString()).decode()


def test_message_indexes_and_corrupt_payloads_are_reasons_never_rows() -> None:
    columns = ProtobufColumns.of(5, encoded(payment_file()))
    assert message_indexes(b"\x00rest") == ([0], 1)
    assert message_indexes(b"\x04\x02\x04") == ([1, 2], 3)  # zigzag: 2 indexes, 1 and 2
    other = ProtobufColumns.of(6, encoded(descriptor_file("a.proto", message("A", field("x", 1, F.TYPE_INT32)))))
    assert other.decode(b"\x00\x08\x07") == {"x": 7}
    for payload, reason in [
        (b"\x02\x02\x08\x01", "names message [1] of schema id 5: the table's columns are its first message's"),
        (b"", "ends inside its message indexes (schema id 5)"),
        (b"\x03", "names -2 message indexes"),
        (b"\x00\x0a\xff", "corrupt Protobuf payload for schema id 5"),  # a string longer than the payload
        (b"\x00\xff\xff\xff", "corrupt Protobuf payload for schema id 5"),
    ]:
        with pytest.raises(UndecodableValue) as caught:
            columns.decode(payload)
        assert reason in caught.value.reason and caught.value.schema_id == 5


def test_the_message_the_topic_names_gives_the_columns_a_nested_one_too() -> None:
    file = descriptor_file(
        "two.proto",
        message("Header", field("v", 1, F.TYPE_INT32)),
        message("Order", field("id", 1, F.TYPE_INT64), nested=(message("Line", field("sku", 1, F.TYPE_STRING)),)),
    )
    assert message_paths(file) == {"shop.Header": (0,), "shop.Order": (1,), "shop.Order.Line": (1, 0)}
    order = ProtobufColumns.of(4, encoded(file), message="shop.Order")
    line = ProtobufColumns.of(4, encoded(file), message="shop.Order.Line")
    assert (order.message, order.record_name, order.indexes, line.indexes) == ("shop.Order", "shop.Order", (1,), (1, 0))
    assert order.arrow_type.names == ["id"] and line.arrow_type.names == ["sku"]
    assert order.decode(b"\x02\x02\x08\x07") == {"id": 7}  # message indexes [1] (zigzag: 1 index, 1)
    assert line.decode(b"\x04\x02\x00\x0a\x01a") == {"sku": "a"}  # [1, 0]
    assert ProtobufColumns.of(4, encoded(file)).decode(b"\x00\x08\x07") == {"v": 7}  # unnamed: the first
    for columns, payload, reason in [
        (
            order,
            b"\x00\x08\x07",
            "names message [0] of schema id 4: the table's columns are message [1]'s (shop.Order)",
        ),
        (line, b"\x02\x02\x08\x07", "names message [1] of schema id 4: the table's columns are message [1, 0]'s"),
    ]:
        with pytest.raises(UndecodableValue) as caught:
            columns.decode(payload)
        assert reason in caught.value.reason
    with pytest.raises(UnsupportedSchemaError) as refused:
        ProtobufColumns.of(4, encoded(file), message="shop.Gone")
    assert "the file two.proto defines no message shop.Gone (shop.Header, shop.Order, shop.Order.Line)" in str(
        refused.value
    )


@pytest.mark.parametrize(
    ("file", "reason"),
    [
        (
            descriptor_file("r.proto", message("Node", field("next", 1, F.TYPE_MESSAGE, ".shop.Node"))),
            "field next: the recursive message shop.Node",
        ),
        (
            descriptor_file(
                "d.proto",
                message("D", field("took", 1, F.TYPE_MESSAGE, ".google.protobuf.Duration")),
                dependency=["google/protobuf/duration.proto"],
            ),
            "field took: the well-known type google.protobuf.Duration",
        ),
        (
            descriptor_file(
                "i.proto", message("I", field("m", 1, F.TYPE_MESSAGE, ".shop.Gone")), dependency=["gone.proto"]
            ),
            "imports gone.proto, which is neither a reference of the schema nor a well-known file",
        ),
        (descriptor_file("e.proto"), "the file e.proto defines no message"),
    ],
)
def test_schemas_without_a_column_type_are_refused_naming_the_field(file: Any, reason: str) -> None:
    with pytest.raises(UnsupportedSchemaError) as caught:
        ProtobufColumns.of(9, encoded(file))
    assert str(caught.value).startswith("Protobuf schema id 9: ") and reason in str(caught.value)


def test_a_schema_served_as_proto_text_is_refused() -> None:
    with pytest.raises(UnsupportedSchemaError, match="the registry served no FileDescriptorProto"):
        ProtobufColumns.of(3, 'syntax = "proto3"; message A { int32 x = 1; }')


def test_repeated_labels_hold_lists() -> None:
    file = descriptor_file(
        "l.proto",
        message("L", field("xs", 1, F.TYPE_INT32, label=REPEATED), field("y", 2, F.TYPE_INT32, label=OPTIONAL)),
    )
    columns = ProtobufColumns.of(2, encoded(file))
    assert columns.decode(b"\x00\x0a\x02\x01\x02") == {"xs": [1, 2], "y": 0}  # packed 1, 2; y unset reads 0


def test_protobuf_values_read_back_as_the_deserializer_reads_them_dead_letters_and_evolution(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    proto = Proto(schema_registry, "proto-payments")
    v1, v2 = message_class(payment_file(1), name="shop.Payment"), message_class(payment_file(2), name="shop.Payment")
    one = proto.serialize(v1, [proto_payment(v1, i) for i in range(6)])
    two = proto.serialize(v2, [proto_payment(v2, i, 2) for i in range(6, 12)])
    class_of = {WireValue.parse(v).schema_id: c for vs, c in ((one, v1), (two, v2)) for v in vs}
    assert len(class_of) == 2
    corrupt = one[0][:6] + b"\x0a\xff"  # a length beyond the payload
    other_message = one[0][:5] + b"\x02\x02" + one[0][6:]  # names the file's second message
    unknown_id = b"\x00" + (2**31 - 11).to_bytes(4, "big") + one[0][5:]
    json_id = Json(schema_registry, "proto-json").serialize(CART, [cart(1)])[0]
    dead_values = [corrupt, other_message, unknown_id, json_id]
    segments = [[*one[:4], corrupt], [*two[:3], one[4], other_message], [unknown_id, json_id, *two[3:], one[5]]]
    sent = tier(tiering_env, "proto-payments", segments)
    with_typed_export(tiering_env, tmp_path, schema_registry, **{"proto-payments": {"value": "protobuf"}})
    with tiering_env.context() as ctx:
        result = run_export(ctx, "proto-payments", commit_bytes=1)
        assert not result.failed and result.dead_letters == len(dead_values) and result.rows == 12
        table = table_of(ctx, "proto-payments")
        rows = rows_by_offset_alone(table)
        dead = dead_letters_of(ctx, "proto-payments")
    assert set(rows) | set(dead) == set(sent) and not set(rows) & set(dead)
    for offset, row in rows.items():
        data = sent[offset] or b""
        cls = class_of[WireValue.parse(data).schema_id]
        want = proto.deserialize(cls, data)
        assert {k: row[k] for k in want} == want and row["value_schema_id"] == WireValue.parse(data).schema_id
        if cls is v1:
            assert row["channel"] is None
    by_value = {sent[o]: row["reason"] for o, row in dead.items()}
    assert "corrupt Protobuf payload" in by_value[corrupt] and "names message [1]" in by_value[other_message]
    assert f"schema id {2**31 - 11} is unknown" in by_value[unknown_id]
    assert "is a JSON schema, not the topic's protobuf" in by_value[json_id]
    types = iceberg_types(table)
    assert (types["big"], types["at"], types["state"], types["count"]) == (
        "decimal(20, 0)",
        "timestamptz",
        "string",
        "int",
    )
    assert types["counts"] == "map<string, long>" and types["channel"] == "string"
    assert json.loads(table.properties["tiering.value-schema-ids"]) == list(class_of)


def test_values_of_a_files_second_message_export_by_the_message_the_topic_names(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    """Confluent's serializer names a file's second message by its message indexes; with
    ``value_message`` naming it the values are rows of its fields, and a value of the file's first
    message is a dead letter (without it, every value of the second would be). A message the file
    does not define stops the topic's export, as a schema without columns does."""
    file = descriptor_file(
        "shop/orders.proto",
        message("Header", field("v", 1, F.TYPE_INT32)),
        message("Order", field("id", 1, F.TYPE_INT64), field("note", 2, F.TYPE_STRING)),
    )
    order, header = message_class(file, name="shop.Order"), message_class(file, name="shop.Header")
    proto = Proto(schema_registry, "proto-orders")
    orders = proto.serialize(order, [order(id=2**40 + i, note=f"n{i}") for i in range(5)])
    first = proto.serialize(header, [header(v=1)])[0]
    assert len({WireValue.parse(v).schema_id for v in [*orders, first]}) == 1  # one file, one schema id
    sent = tier(tiering_env, "proto-orders", [[*orders[:3], first], [*orders[3:]]])
    tier(tiering_env, "proto-misnamed", [[*orders[:3]]])
    topics = {
        "proto-orders": {"value": "protobuf", "value_message": "shop.Order"},
        "proto-misnamed": {"value": "protobuf", "value_message": "shop.Gone"},  # stops, as a schema without columns
    }
    with_typed_export(tiering_env, tmp_path, schema_registry, **topics)
    with tiering_env.context() as ctx:
        result = run_export(ctx, "proto-orders")
        assert not result.failed and result.rows == 5 and result.dead_letters == 1, result
        table = table_of(ctx, "proto-orders")
        rows = rows_by_offset_alone(table)
        dead = dead_letters_of(ctx, "proto-orders")
        with pytest.raises(SchemaChangeError, match=r"the file shop/orders\.proto defines no message shop\.Gone"):
            run_export(ctx, "proto-misnamed")
        misnamed = open_table(load_catalog(ctx.config), table_name(ctx.config.export, "proto-misnamed"), create=False)
        assert misnamed is None and dead_letters_of(ctx, "proto-misnamed") == {}  # nothing written, nothing left
    assert {o: proto.deserialize(order, sent[o] or b"") for o in rows} == {
        o: {"id": row["id"], "note": row["note"]} for o, row in rows.items()
    }
    assert sorted(rows) == [0, 1, 2, 4, 5] and list(dead) == [3]
    assert "names message [0]" in dead[3]["reason"] and "(shop.Order)" in dead[3]["reason"]
    assert (iceberg_types(table)["id"], iceberg_types(table)["note"]) == ("long", "string")
