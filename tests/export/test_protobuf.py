"""Protobuf values as typed columns: what Confluent's ProtobufSerializer wrote through a real
registry (its file served serialized, its imports as references) reads back as Confluent's
ProtobufDeserializer reads it, field by field, in the Arrow types the table maps."""

from __future__ import annotations

import base64
from typing import Any

import pyarrow as pa
import pytest

from tests.export.proto_files import (
    OPTIONAL,
    REPEATED,
    F,
    Proto,
    field,
    message,
    message_class,
    payment,
    payment_file,
)
from tests.export.registry_server import RegistryServer
from tiering_core.export.avro import UnsupportedSchemaError
from tiering_core.export.protobuf import ProtobufColumns, message_indexes
from tiering_core.export.registry import RegistryEndpoint, SchemaRegistry, UndecodableValue, WireValue
from tiering_core.export.typed import ValueSchemas


def test_every_mapped_type_reads_back_as_the_deserializer_reads_it(schema_registry: RegistryServer) -> None:
    cls = message_class(payment_file(), name="shop.Payment")
    proto = Proto(schema_registry, "proto-payments")
    payloads = proto.serialize(cls, [payment(cls, i) for i in range(12)])
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


def descriptor_file(name: str, *messages: Any, dependency: list[str] | None = None) -> Any:
    from google.protobuf import descriptor_pb2

    return descriptor_pb2.FileDescriptorProto(
        name=name, package="shop", syntax="proto3", message_type=list(messages), dependency=dependency or []
    )


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
