"""Protobuf files for the tests, built as ``FileDescriptorProto``\\ s (what protoc would make of
their ``.proto`` text; no protoc is needed), their message classes, Confluent's ProtobufSerializer
and ProtobufDeserializer on the real registry, and a deserialized message as a table's row holds
it."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message_factory import GetMessageClass

from tests.export.registry_server import RegistryServer

F = descriptor_pb2.FieldDescriptorProto
OPTIONAL, REPEATED = F.LABEL_OPTIONAL, F.LABEL_REPEATED
UNSIGNED = (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64)


def field(name: str, number: int, kind: int, type_name: str = "", label: int = OPTIONAL, **more: Any) -> F:
    if type_name:
        more["type_name"] = type_name
    return F(name=name, number=number, type=kind, label=label, **more)


def message(name: str, *fields: F, nested: tuple[descriptor_pb2.DescriptorProto, ...] = (), **more: Any) -> Any:
    return descriptor_pb2.DescriptorProto(name=name, field=list(fields), nested_type=list(nested), **more)


def map_entry(name: str, key: int, value: int, value_type: str = "") -> descriptor_pb2.DescriptorProto:
    entry = message(name, field("key", 1, key), field("value", 2, value, value_type))
    entry.options.map_entry = True
    return entry


def descriptor_file(name: str, *messages: Any, dependency: list[str] | None = None) -> Any:
    """A proto3 file of package ``shop`` holding ``messages``."""
    return descriptor_pb2.FileDescriptorProto(
        name=name, package="shop", syntax="proto3", message_type=list(messages), dependency=dependency or []
    )


def payment_file(version: int = 1, count_type: int = F.TYPE_INT32) -> descriptor_pb2.FileDescriptorProto:
    """``shop/payment.proto``: a value of every kind the table maps (``version`` 2 adds a field)."""
    address = message("Address", field("city", 1, F.TYPE_STRING), field("zip", 2, F.TYPE_INT32))
    customer = message(
        "Customer",
        field("name", 1, F.TYPE_STRING),
        field("tags", 2, F.TYPE_STRING, label=REPEATED),
        field("address", 3, F.TYPE_MESSAGE, ".shop.Payment.Customer.Address"),
        nested=(address,),
    )
    line = message("Line", field("sku", 1, F.TYPE_STRING), field("n", 2, F.TYPE_INT32))
    fields = [
        field("id", 1, F.TYPE_INT64),
        field("count", 2, count_type),
        field("big", 3, F.TYPE_UINT64),
        field("amount", 4, F.TYPE_DOUBLE),
        field("ratio", 5, F.TYPE_FLOAT),
        field("ok", 6, F.TYPE_BOOL),
        field("note", 7, F.TYPE_STRING),
        field("raw", 8, F.TYPE_BYTES),
        field("state", 9, F.TYPE_ENUM, ".shop.Payment.State"),
        field("customer", 10, F.TYPE_MESSAGE, ".shop.Payment.Customer"),
        field("lines", 11, F.TYPE_MESSAGE, ".shop.Payment.Line", label=REPEATED),
        field("counts", 12, F.TYPE_MESSAGE, ".shop.Payment.CountsEntry", label=REPEATED),
        field("at", 13, F.TYPE_MESSAGE, ".google.protobuf.Timestamp"),
        field("maybe", 14, F.TYPE_MESSAGE, ".google.protobuf.StringValue"),
        field("coupon", 15, F.TYPE_STRING, oneof_index=0, proto3_optional=True),
        field("sint", 16, F.TYPE_SINT64),
    ]
    if version >= 2:
        fields.append(field("channel", 17, F.TYPE_STRING))
    payment = message(
        "Payment",
        *fields,
        nested=(customer, line, map_entry("CountsEntry", F.TYPE_STRING, F.TYPE_INT64)),
        oneof_decl=[descriptor_pb2.OneofDescriptorProto(name="_coupon")],
        enum_type=[
            descriptor_pb2.EnumDescriptorProto(
                name="State",
                value=[
                    descriptor_pb2.EnumValueDescriptorProto(name=n, number=i) for i, n in enumerate(["NEW", "PAID"])
                ],
            )
        ],
    )
    return descriptor_pb2.FileDescriptorProto(
        name=f"shop/payment_v{version}_{count_type}.proto",
        package="shop",
        syntax="proto3",
        dependency=["google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto"],
        message_type=[payment, message("Other", field("x", 1, F.TYPE_INT32))],
    )


def message_class(*files: descriptor_pb2.FileDescriptorProto, name: str) -> Any:
    """The class of the message ``name`` of ``files`` (each added after the ones it imports)."""
    pool = descriptor_pool.DescriptorPool()
    for dependency in ("google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto"):
        proto = descriptor_pb2.FileDescriptorProto()
        descriptor_pool.Default().FindFileByName(dependency).CopyToProto(proto)
        pool.Add(proto)
    for file in files:
        pool.Add(file)
    return GetMessageClass(pool.FindMessageTypeByName(name))


def payment(cls: Any, i: int, version: int = 1) -> Any:
    value = cls(
        id=2**40 + i,
        count=-i,
        big=2**64 - 1 - i,
        amount=i / 3,
        ratio=0.5 * i,
        ok=i % 2 == 0,
        note=f"note é {i}" if i % 3 else "",
        raw=bytes([i % 256, 0, 255]),
        state=i % 3,  # 2 has no name
        lines=[cls.Line(sku=f"s{j}", n=j) for j in range(i % 3)],
        counts={"a": i} if i % 2 else {},
        sint=-(2**50) - i,
    )
    value.customer.name = f"c{i}" if i % 4 else ""
    if i % 4:
        value.customer.tags.extend(f"t{j}" for j in range(i % 3))
        value.customer.address.city = f"city{i}"
    value.at.FromDatetime(dt.datetime(2026, 11, 29, 12, tzinfo=dt.UTC) + dt.timedelta(microseconds=7 * i))
    if i % 2:
        value.maybe.value = f"m{i}"
        value.coupon = "" if i % 3 == 0 else f"c{i}"
    if version >= 2:
        value.channel = f"ch{i}"
    return value


class Proto:
    """Confluent's Protobuf serializer and deserializer of one topic's values, on the real registry."""

    def __init__(self, registry: RegistryServer, topic: str, part: str = MessageField.VALUE) -> None:
        self.client = SchemaRegistryClient({"url": registry.url})
        self.ctx = SerializationContext(topic, part)

    def serialize(self, cls: Any, values: list[Any]) -> list[bytes]:
        serializer = ProtobufSerializer(cls, self.client, {"use.deprecated.format": False})
        return [bytes(serializer(v, self.ctx) or b"") for v in values]

    def deserialize(self, cls: Any, data: bytes) -> dict[str, Any]:
        """The deserializer's message as a typed table's row holds it (``proto_columns``)."""
        deserializer = ProtobufDeserializer(cls, {"use.deprecated.format": False}, self.client)
        return proto_columns(deserializer(data, self.ctx))


def proto_columns(message: Any) -> dict[str, Any]:
    """A message's fields as a row holds them: unset ones with presence null, enums by name (their
    number when unnamed), maps as (key, value) pairs, timestamps as instants, wrappers unwrapped."""
    row: dict[str, Any] = {}
    for f in message.DESCRIPTOR.fields:
        value = getattr(message, f.name)
        if f.type == FieldDescriptor.TYPE_MESSAGE and f.message_type.GetOptions().map_entry:
            row[f.name] = [(k, _one(f.message_type.fields_by_name["value"], value[k])) for k in value]
        elif f.is_repeated:
            row[f.name] = [_one(f, v) for v in value]
        elif f.has_presence and not message.HasField(f.name):
            row[f.name] = None
        else:
            row[f.name] = _one(f, value)
    return row


def _one(f: Any, value: Any) -> Any:
    if f.type == FieldDescriptor.TYPE_ENUM:
        named = f.enum_type.values_by_number.get(value)
        return named.name if named is not None else str(value)
    if f.type in UNSIGNED:
        return Decimal(value)
    if f.type != FieldDescriptor.TYPE_MESSAGE:
        return value
    if f.message_type.full_name == "google.protobuf.Timestamp":
        return value.ToDatetime(tzinfo=dt.UTC)
    if f.message_type.full_name.endswith("Value") and f.message_type.full_name.startswith("google.protobuf."):
        return value.value
    return proto_columns(value)
