"""Protobuf values as typed Arrow columns, for a table that analysts query by field.

The registry holds a Protobuf schema as a ``.proto`` file; its Confluent-compatible API serves it
as a ``FileDescriptorProto`` (base64, ``?format=serialized``: what Confluent's own deserializer
asks for), so no ``.proto`` text is parsed here. Files it imports are its references, fetched the
same way by subject and version; the well-known ``google/protobuf/*`` files come with the
``protobuf`` package. A value is the Confluent wire format's payload after the message indexes
(zigzag varints naming the message in the file, a single 0 for the first), parsed by ``protobuf``.

A schema's columns are those of its file's first message (the one a producer of a one-message file
names), or of the message the topic's config names (``value_message``, ``key_message``: its full
name, nested ones too); a value naming another message of the file is a dead letter. The mapping:

=========================================  ==========================================
Protobuf                                   Arrow (Iceberg)
=========================================  ==========================================
bool, string, bytes                        bool, string, binary
int32, sint32, sfixed32                    int32 (int)
int64, sint64, sfixed64, uint32, fixed32   int64 (long)
uint64, fixed64                            decimal128(20, 0) (decimal(20, 0))
float, double                              float32, float64
enum                                       string (the value's name; its number when unnamed)
message (nested ones too)                  struct, null when unset
repeated T                                 list<T>
map<K, V>                                  map<K, V>
google.protobuf.Timestamp                  timestamp[us, UTC] (timestamptz)
google.protobuf.*Value (wrappers)          the wrapped type, null when unset
=========================================  ==========================================

A field with presence (``optional``, a ``oneof`` member, a message) is null when unset; any other
reads its default when unset, as Protobuf's readers do. Every field has a default, so adding one
is a compatible change. Recursive messages, groups and the other well-known types (Any, Struct,
Duration, ...) have no column type: a schema holding one is refused naming the field.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass

from tiering_core.errors import one_line
from tiering_core.export.avro import DEFAULT_METADATA, UnsupportedSchemaError
from tiering_core.export.registry import UndecodableValue
from tiering_core.export.schema import typed_array

#: The message indexes a payload may name at most (Confluent's deserializer's bound).
MAX_MESSAGE_INDEXES = 100_000
_TIMESTAMP = "google.protobuf.Timestamp"
_WRAPPERS = {
    f"google.protobuf.{name}Value": kind
    for name, kind in (
        ("Double", FieldDescriptor.TYPE_DOUBLE),
        ("Float", FieldDescriptor.TYPE_FLOAT),
        ("Int64", FieldDescriptor.TYPE_INT64),
        ("UInt64", FieldDescriptor.TYPE_UINT64),
        ("Int32", FieldDescriptor.TYPE_INT32),
        ("UInt32", FieldDescriptor.TYPE_UINT32),
        ("Bool", FieldDescriptor.TYPE_BOOL),
        ("String", FieldDescriptor.TYPE_STRING),
        ("Bytes", FieldDescriptor.TYPE_BYTES),
    )
}
_SCALARS: dict[int, pa.DataType] = {
    FieldDescriptor.TYPE_BOOL: pa.bool_(),
    FieldDescriptor.TYPE_STRING: pa.string(),
    FieldDescriptor.TYPE_BYTES: pa.binary(),
    FieldDescriptor.TYPE_INT32: pa.int32(),
    FieldDescriptor.TYPE_SINT32: pa.int32(),
    FieldDescriptor.TYPE_SFIXED32: pa.int32(),
    FieldDescriptor.TYPE_INT64: pa.int64(),
    FieldDescriptor.TYPE_SINT64: pa.int64(),
    FieldDescriptor.TYPE_SFIXED64: pa.int64(),
    FieldDescriptor.TYPE_UINT32: pa.int64(),
    FieldDescriptor.TYPE_FIXED32: pa.int64(),
    FieldDescriptor.TYPE_UINT64: pa.decimal128(20, 0),
    FieldDescriptor.TYPE_FIXED64: pa.decimal128(20, 0),
    FieldDescriptor.TYPE_FLOAT: pa.float32(),
    FieldDescriptor.TYPE_DOUBLE: pa.float64(),
}
_UNSIGNED_64 = (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64)

#: A field's value as its column's Python value.
Convert = Callable[[Any], Any]

#: The registry's file of a reference, by (subject, version): its base64 FileDescriptorProto and
#: its own references.
FetchReference = Callable[[str, int], tuple[str, Sequence[Any]]]


def file_descriptor(text: str, where: str) -> descriptor_pb2.FileDescriptorProto:
    """A schema the registry served (base64 of a ``FileDescriptorProto``) as the file it is."""
    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError, DecodeError) as exc:
        raise UnsupportedSchemaError(
            f"{where}: the registry served no FileDescriptorProto (a .proto text the registry did not "
            f"serialize: ?format=serialized): {one_line(exc)}"
        ) from exc
    return proto


def _pool(
    proto: descriptor_pb2.FileDescriptorProto, references: Sequence[Any], fetch: FetchReference | None, where: str
) -> descriptor_pool.DescriptorPool:
    """A pool holding the file, the files it imports (each once) and theirs."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(file: descriptor_pb2.FileDescriptorProto, refs: Sequence[Any]) -> None:
        by_name = {str(r.get("name")): r for r in refs if isinstance(r, dict)}
        for dependency in file.dependency:
            if dependency in added:
                continue
            if dependency in by_name:
                ref = by_name[dependency]
                if fetch is None:
                    raise UnsupportedSchemaError(f"{where}: imports {dependency}, and no registry to fetch it from")
                text, its_refs = fetch(str(ref.get("subject")), int(ref.get("version", -1)))
                add(file_descriptor(text, f"{where}: import {dependency}"), its_refs)
                continue
            try:
                known = descriptor_pool.Default().FindFileByName(dependency)
            except KeyError:
                raise UnsupportedSchemaError(
                    f"{where}: imports {dependency}, which is neither a reference of the schema nor a well-known file"
                ) from None
            builtin = descriptor_pb2.FileDescriptorProto()
            known.CopyToProto(builtin)
            add(builtin, ())
        if file.name not in added:
            added.add(file.name)
            pool.Add(file)

    try:
        add(proto, references)
    except (TypeError, ValueError) as exc:  # a file the pool refuses (a clash, a type it lacks)
        raise UnsupportedSchemaError(f"{where}: {one_line(exc)}") from exc
    return pool


@dataclass(frozen=True)
class _Mapped:
    arrow: pa.DataType
    convert: Convert


def _same(value: Any) -> Any:
    return value


def _unsigned(value: Any) -> Decimal:
    return Decimal(int(value))


def _timestamp(value: Any) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(
        seconds=value.seconds, microseconds=value.nanos // 1000
    )


def _enum(field: FieldDescriptor) -> Convert:
    names = {v.number: v.name for v in field.enum_type.values}
    return lambda value: names.get(value, str(value))


def _message_type(descriptor: Descriptor, where: str, path: tuple[str, ...]) -> _Mapped:
    if descriptor.full_name in path:
        raise UnsupportedSchemaError(f"field {where}: the recursive message {descriptor.full_name} has no column type")
    fields: list[pa.Field] = []
    converts: list[tuple[FieldDescriptor, Convert, bool]] = []
    for field in descriptor.fields:
        inner = f"{where}.{field.name}" if where != "the value" else field.name
        mapped = _field_type(field, inner, (*path, descriptor.full_name))
        nullable = _nullable(field)
        fields.append(pa.field(field.name, mapped.arrow, nullable=nullable, metadata={DEFAULT_METADATA: b"true"}))
        converts.append((field, mapped.convert, nullable))

    def convert(message: Message) -> dict[str, Any]:
        row: dict[str, Any] = {}
        for field, one, nullable in converts:
            if nullable and not message.HasField(field.name):
                row[field.name] = None
            else:
                row[field.name] = one(getattr(message, field.name))
        return row

    return _Mapped(pa.struct(fields), convert)


def _nullable(field: FieldDescriptor) -> bool:
    return not field.is_repeated and field.has_presence


def _scalar(field: FieldDescriptor, kind: int, where: str) -> _Mapped:
    if kind == FieldDescriptor.TYPE_ENUM:
        return _Mapped(pa.string(), _enum(field))
    if kind not in _SCALARS:
        raise UnsupportedSchemaError(f"field {where}: protobuf type {kind} has no column type")
    return _Mapped(_SCALARS[kind], _unsigned if kind in _UNSIGNED_64 else _same)


def _value_type(field: FieldDescriptor, where: str, path: tuple[str, ...]) -> _Mapped:
    """The type of one value of ``field`` (an element of a repeated one)."""
    if field.type == FieldDescriptor.TYPE_GROUP:
        raise UnsupportedSchemaError(f"field {where}: a group has no column type")
    if field.type != FieldDescriptor.TYPE_MESSAGE:
        return _scalar(field, field.type, where)
    name = field.message_type.full_name
    if name == _TIMESTAMP:
        return _Mapped(pa.timestamp("us", tz="UTC"), _timestamp)
    if name in _WRAPPERS:
        inner = _scalar(field, _WRAPPERS[name], where)
        return _Mapped(inner.arrow, lambda value: inner.convert(value.value))
    if name.startswith("google.protobuf."):
        raise UnsupportedSchemaError(f"field {where}: the well-known type {name} has no column type")
    return _message_type(field.message_type, where, path)


def _field_type(field: FieldDescriptor, where: str, path: tuple[str, ...]) -> _Mapped:
    if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
        key = _value_type(field.message_type.fields_by_name["key"], f"{where}{{key}}", path)
        value = _value_type(field.message_type.fields_by_name["value"], f"{where}{{}}", path)
        return _Mapped(
            pa.map_(key.arrow, value.arrow),
            lambda entries: [(key.convert(k), value.convert(entries[k])) for k in entries],
        )
    one = _value_type(field, where, path)
    if field.is_repeated:
        return _Mapped(pa.list_(one.arrow), lambda values: [one.convert(v) for v in values])
    return one


def message_indexes(payload: bytes) -> tuple[list[int], int]:
    """The message indexes at the start of a payload, and where the message's bytes start."""
    buffer = io.BytesIO(payload)

    def varint() -> int:
        value = shift = 0
        while True:
            byte = buffer.read(1)
            if not byte:
                raise UndecodableValue("the Protobuf payload ends inside its message indexes")
            value |= (byte[0] & 0x7F) << shift
            shift += 7
            if not byte[0] & 0x80:
                return (value >> 1) ^ -(value & 1)
            if shift > 63:
                raise UndecodableValue("the Protobuf payload's message indexes hold a varint longer than 64 bits")

    count = varint()
    if not 0 <= count <= MAX_MESSAGE_INDEXES:
        raise UndecodableValue(f"the Protobuf payload names {count} message indexes")
    indexes = [varint() for _ in range(count)] if count else [0]
    return indexes, buffer.tell()


def message_paths(proto: descriptor_pb2.FileDescriptorProto) -> dict[str, tuple[int, ...]]:
    """Each message of a file (nested ones too) by full name: the message indexes a wire-format
    payload names it by (its index in the file, then in each message it is nested in)."""
    package = f"{proto.package}." if proto.package else ""
    paths: dict[str, tuple[int, ...]] = {}
    todo: list[tuple[str, tuple[int, ...], Any]] = [
        (package + m.name, (i,), m) for i, m in enumerate(proto.message_type)
    ]
    while todo:
        name, path, found = todo.pop()
        paths[name] = path
        todo.extend((f"{name}.{m.name}", (*path, i), m) for i, m in enumerate(found.nested_type))
    return paths


@dataclass(frozen=True)
class ProtobufColumns:
    """One writer schema's columns (its file's first message, or the one named) and its decoder."""

    schema_id: int
    arrow_type: pa.StructType
    message: str
    message_class: Any
    convert: Convert
    #: The message indexes of ``message``: a value naming others is a dead letter.
    indexes: tuple[int, ...] = (0,)

    @classmethod
    def of(
        cls,
        schema_id: int,
        schema_text: str,
        references: Sequence[Any] = (),
        fetch: FetchReference | None = None,
        message: str | None = None,
    ) -> ProtobufColumns:
        """The columns of ``message`` (a full name; None: the file's first message)."""
        where = f"Protobuf schema id {schema_id}"
        proto = file_descriptor(schema_text, where)
        if not proto.message_type:
            raise UnsupportedSchemaError(f"{where}: the file {proto.name} defines no message")
        paths = message_paths(proto)
        if message is None:
            message = next(name for name, path in paths.items() if path == (0,))
        elif message not in paths:
            defined = ", ".join(sorted(paths)[:20])
            raise UnsupportedSchemaError(f"{where}: the file {proto.name} defines no message {message} ({defined})")
        descriptor = _pool(proto, references, fetch, where).FindMessageTypeByName(message)
        try:
            mapped = _message_type(descriptor, "the value", ())
        except UnsupportedSchemaError as exc:
            raise UnsupportedSchemaError(f"{where}: {exc}") from exc
        columns = GetMessageClass(descriptor), mapped.convert, paths[message]
        return cls(schema_id, mapped.arrow, descriptor.full_name, *columns)

    @property
    def record_name(self) -> str:
        """The full name of the message the columns are, as the record subject strategies name a
        subject."""
        return self.message

    def decode(self, payload: bytes) -> Any:
        """One payload's value (a dict of columns), or UndecodableValue."""
        try:
            indexes, start = message_indexes(payload)
        except UndecodableValue as exc:
            raise UndecodableValue(f"{exc.reason} (schema id {self.schema_id})", self.schema_id) from exc
        if tuple(indexes) != self.indexes:
            table = "its first message's" if self.indexes == (0,) else f"message {list(self.indexes)}'s"
            raise UndecodableValue(
                f"the value names message {indexes} of schema id {self.schema_id}: the table's columns are "
                f"{table} ({self.message})",
                self.schema_id,
            )
        try:
            message = self.message_class.FromString(payload[start:])
            return self.convert(message)
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise UndecodableValue(
                f"corrupt Protobuf payload for schema id {self.schema_id}: {one_line(exc) or type(exc).__name__}",
                self.schema_id,
            ) from exc

    def to_arrow(self, values: Sequence[Any]) -> pa.StructArray:
        """Decoded values as one struct column of this schema's type."""
        return typed_array(values, self.arrow_type)
