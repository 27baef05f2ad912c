"""Typed tables: a topic whose values are Schema Registry-encoded Avro, JSON Schema or Protobuf
(``export.topics.T.value: avro | json_schema | protobuf``) exports the value's fields as columns,
beside the Kafka columns of every export table.

The table's columns are ``DATA_SCHEMA``'s but ``value`` (the bytes are decoded), then
``value_schema_id`` (the registry id each row was written with), then the value's fields (the
mapping of ``export.avro``, ``export.json_schema`` or ``export.protobuf``), all optional: a row of
an older schema reads null in a field added since. The value's columns are the merge, in order, of
the writer schemas the table has met; the ids are kept in the table property
``tiering.value-schema-ids``, set in the same commit as the rows that brought them, so whoever
writes next rebuilds the same columns from the registry.

A decoded key (``export.topics.T.key`` not ``bytes``) keeps its bytes in ``key`` and adds
``key_schema_id`` and ``key_fields`` (a struct of its fields), merged and evolved as the value's
columns are (``side`` ``key``), their ids in the property ``tiering.key-schema-ids``; a topic
whose value stays ``bytes`` keeps its ``value`` column.

A writer schema merges when its change is one the format and Iceberg both read old data through: a
field added that is optional (Avro: a union with null; JSON Schema: a property not required, or one
admitting null; Protobuf: any field, each has a default) or has a default, a field removed (its
column stays, null from then on), int widened to long, float to double. Anything else (a type
changed, a required field added without a default, a field named like a Kafka column) is a
``SchemaChangeError`` naming both schema ids: the topic's export stops before the segment holding
it is committed to either table.

A value that cannot be decoded (no magic byte, an unknown schema id, a schema that is no version of
the subject the topic's ``subject_strategy`` names, a corrupt payload) is a dead
letter: its raw record and the reason go to the table ``<table>_dead_letters`` (``DEAD_LETTER_SCHEMA``),
committed with the same exactly-once marks, before the main table's commit of the same segments.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from tiering_core.config.export_topics import AVRO as AVRO_FORMAT
from tiering_core.config.export_topics import BYTES, RECORD_STRATEGY, TOPIC_STRATEGY
from tiering_core.config.export_topics import JSON_SCHEMA as JSON_SCHEMA_FORMAT
from tiering_core.config.export_topics import PROTOBUF as PROTOBUF_FORMAT
from tiering_core.errors import ExportError
from tiering_core.export.avro import DEFAULT_METADATA, AvroColumns
from tiering_core.export.json_schema import JsonSchemaColumns
from tiering_core.export.protobuf import ProtobufColumns
from tiering_core.export.registry import (
    AVRO,
    JSON_SCHEMA,
    PROTOBUF,
    RegisteredSchema,
    RegistryEndpoint,
    SchemaRegistry,
    UndecodableValue,
)
from tiering_core.export.table import DATA_SCHEMA, TableName

#: The column of the registry id each row's value was written with.
SCHEMA_ID_COLUMN = "value_schema_id"
#: The table property listing the value schema ids merged into the table's columns, in order.
SCHEMA_IDS_PROPERTY = "tiering.value-schema-ids"
#: A decoded key's columns (``export.topics.T.key`` not ``bytes``): the registry id it was written
#: with, and its fields as one struct; its bytes stay in ``key``.
KEY_SCHEMA_ID_COLUMN = "key_schema_id"
KEY_FIELDS_COLUMN = "key_fields"
#: The table property listing the key schema ids merged into ``key_fields``, in order.
KEY_SCHEMA_IDS_PROPERTY = "tiering.key-schema-ids"
#: The two parts of a record a registry schema decodes.
VALUE = "value"
KEY = "key"
#: The suffix of a typed table's dead-letter table.
DEAD_LETTERS_SUFFIX = "_dead_letters"

#: The Kafka columns of a typed table: the export's, but the value's bytes.
KAFKA_COLUMNS = pa.schema([f for f in DATA_SCHEMA if f.name != "value"])
#: A dead letter: the record as Kafka holds it, where it was, and why it could not be decoded.
DEAD_LETTER_SCHEMA = pa.schema(
    [
        *DATA_SCHEMA,
        pa.field("reason", pa.string(), nullable=False),
        pa.field("schema_id", pa.int32()),
    ]
)
_WIDER = {pa.int32(): pa.int64(), pa.float32(): pa.float64()}


def _protobuf_columns(registry: SchemaRegistry, schema: RegisteredSchema, message: str | None) -> ProtobufColumns:
    def fetch(subject: str, version: int) -> tuple[str, tuple[Any, ...]]:
        reference = registry.reference(subject, version)
        return reference.text, reference.references

    return ProtobufColumns.of(schema.schema_id, schema.text, schema.references, fetch, message)


#: The registry's schema type of each format a topic's values may have, and its columns' maker
#: (given the message named, which only a Protobuf schema has: the config allows no other).
_SCHEMA_TYPES: dict[str, tuple[str, Callable[[SchemaRegistry, RegisteredSchema, str | None], Any]]] = {
    AVRO_FORMAT: (AVRO, lambda _registry, schema, _message: AvroColumns.of(schema.schema_id, schema.text)),
    JSON_SCHEMA_FORMAT: (
        JSON_SCHEMA,
        lambda _registry, schema, _message: JsonSchemaColumns.of(schema.schema_id, schema.text),
    ),
    PROTOBUF_FORMAT: (PROTOBUF, _protobuf_columns),
}


class WriterSchema(Protocol):
    """One registry schema as columns (``AvroColumns``, ``JsonSchemaColumns``): its id, its
    columns' type, and its payloads' decoder."""

    @property
    def schema_id(self) -> int: ...

    @property
    def arrow_type(self) -> pa.StructType: ...

    @property
    def record_name(self) -> str | None: ...

    def decode(self, payload: bytes) -> Any: ...


@dataclass(frozen=True)
class SubjectStrategy:
    """Which subject a topic's key or value schema is a version of: Confluent's subject name
    strategies (``topic``: ``<topic>-key``/``<topic>-value``; ``record``: the record's full name;
    ``topic_record``: ``<topic>-<record>``)."""

    topic: str
    strategy: str = TOPIC_STRATEGY

    def subject(self, side: str, record_name: str | None) -> str | None:
        """The subject of a ``side`` (key or value) schema whose record is ``record_name`` (None:
        the strategy names no subject for a schema without a record)."""
        if self.strategy == TOPIC_STRATEGY:
            return f"{self.topic}-{side}"
        if record_name is None:
            return None
        return record_name if self.strategy == RECORD_STRATEGY else f"{self.topic}-{record_name}"


class SchemaChangeError(ExportError):
    """A value schema the table's columns cannot take (a change old rows cannot be read through)."""


def dead_letter_table(name: TableName) -> TableName:
    """The dead-letter table of the typed table ``name``."""
    return TableName(name.namespace, name.name + DEAD_LETTERS_SUFFIX)


def relaxed(type_: pa.DataType) -> pa.DataType:
    """``type_`` with every nested field optional and no metadata (a table column's type)."""
    if pa.types.is_struct(type_):
        return pa.struct([pa.field(f.name, relaxed(f.type)) for f in type_])
    if pa.types.is_list(type_):
        return pa.list_(relaxed(type_.value_type))
    if pa.types.is_map(type_):
        return pa.map_(type_.key_type, relaxed(type_.item_type))
    return type_


def conformed(array: pa.Array, type_: pa.DataType) -> pa.Array:
    """``array``, a writer schema's column, as a column of ``type_``, a merge holding it
    (``_merge``): struct fields by name (one the writer lacks all null), every nested field
    optional, an int or float widened. No value is copied but a widened one."""
    if array.type.equals(type_):
        return array
    if array.offset:
        array = pa.concat_arrays([array])  # children as long as the array: from offset 0
    validity, n, nulls = array.buffers()[0], len(array), array.null_count
    if pa.types.is_struct(type_):
        names = {f.name for f in array.type}
        children = [conformed(array.field(f.name), f.type) if f.name in names else pa.nulls(n, f.type) for f in type_]
        return pa.Array.from_buffers(type_, n, [validity], nulls, children=children)
    if pa.types.is_map(type_):
        entries = array.values
        children = [entries.field(0), conformed(entries.field(1), type_.item_type)]
        entries = pa.StructArray.from_arrays(children, fields=[type_.key_field, type_.item_field])
        return pa.Array.from_buffers(type_, n, array.buffers()[:2], nulls, children=[entries])
    if pa.types.is_list(type_):
        items = conformed(array.values, type_.value_type)
        return pa.Array.from_buffers(type_, n, array.buffers()[:2], nulls, children=[items])
    return array.cast(type_)


def _merge(table: pa.DataType, writer: pa.DataType, path: str) -> pa.DataType:
    """The column type holding both ``table``'s rows and ``writer``'s (a ``ValueError`` naming the
    field and both types when none does)."""
    if pa.types.is_struct(table) and pa.types.is_struct(writer):
        fields = {f.name: f for f in table}
        for f in writer:
            inner = f"{path}.{f.name}" if path else f.name
            if f.name in fields:
                fields[f.name] = pa.field(f.name, _merge(fields[f.name].type, f.type, inner))
            elif not f.nullable and DEFAULT_METADATA not in (f.metadata or {}):
                raise ValueError(f"field {inner} is added as required without a default")
            else:
                fields[f.name] = pa.field(f.name, relaxed(f.type))
        return pa.struct(list(fields.values()))
    if pa.types.is_list(table) and pa.types.is_list(writer):
        return pa.list_(_merge(table.value_type, writer.value_type, f"{path}[]"))
    if pa.types.is_map(table) and pa.types.is_map(writer):
        return pa.map_(pa.string(), _merge(table.item_type, writer.item_type, f"{path}{{}}"))
    if table.equals(relaxed(writer)):
        return table
    for narrow, wide in _WIDER.items():
        if {table, writer} == {narrow, wide}:
            return wide
    raise ValueError(f"field {path or 'the value'} changes from {table} to {writer}")


def typed_schema(value_type: pa.StructType | None, key_type: pa.StructType | None = None) -> pa.Schema:
    """The typed table's Arrow schema for the value columns ``value_type`` (None: the value's
    bytes) and the key's fields ``key_type`` (None: the key's bytes alone)."""
    if value_type is None:
        columns = [*DATA_SCHEMA]
    else:
        taken = {*KAFKA_COLUMNS.names, SCHEMA_ID_COLUMN, KEY_SCHEMA_ID_COLUMN, KEY_FIELDS_COLUMN}
        clash = [f.name for f in value_type if f.name in taken]
        if clash:
            raise ValueError(f"field {clash[0]} is named like a column of the Kafka record")
        columns = [*KAFKA_COLUMNS, pa.field(SCHEMA_ID_COLUMN, pa.int32()), *value_type]
    if key_type is not None:
        columns += [pa.field(KEY_SCHEMA_ID_COLUMN, pa.int32()), pa.field(KEY_FIELDS_COLUMN, key_type)]
    return pa.schema(columns)


@dataclass(frozen=True)
class ValueColumns:
    """The table's value columns (or, ``side`` ``key``, its key's fields): the merge of the writer
    schemas ``schema_ids`` (in order)."""

    schema_ids: tuple[int, ...] = ()
    value_type: pa.StructType = field(default_factory=lambda: pa.struct([]))
    side: str = VALUE

    @property
    def schema(self) -> pa.Schema:
        """The table's schema with these value columns (the key as bytes)."""
        return typed_schema(self.value_type)

    def with_schema(self, columns: WriterSchema) -> ValueColumns:
        """These columns with the writer schema ``columns`` merged (itself when it changes
        nothing); a ``SchemaChangeError`` naming both ids when it cannot merge."""
        if columns.schema_id in self.schema_ids:
            return self
        try:
            first = not self.schema_ids  # the first schema seen shapes the columns
            merged = relaxed(columns.arrow_type) if first else _merge(self.value_type, columns.arrow_type, "")
            if self.side == VALUE:  # a key's fields are in a column of their own
                typed_schema(merged)
        except ValueError as exc:
            since = f"schema id {self.schema_ids[-1]}" if self.schema_ids else "no schema"
            raise SchemaChangeError(
                f"{self.side} schema id {columns.schema_id} cannot evolve the table's columns (from {since}): {exc}"
            ) from exc
        if merged.equals(self.value_type, check_metadata=False) and self.schema_ids:
            return ValueColumns((*self.schema_ids, columns.schema_id), self.value_type, self.side)
        return ValueColumns((*self.schema_ids, columns.schema_id), merged, self.side)

    @property
    def property_name(self) -> str:
        return SCHEMA_IDS_PROPERTY if self.side == VALUE else KEY_SCHEMA_IDS_PROPERTY

    def property_value(self) -> str:
        return json.dumps(list(self.schema_ids))


@dataclass(frozen=True)
class TypedColumns:
    """A typed table's decoded columns: the value's (None: the value's bytes) and the key's
    (None: the key's bytes alone; its columns appear with the first key schema)."""

    value: ValueColumns | None = None
    key: ValueColumns | None = None

    @property
    def schema(self) -> pa.Schema:
        key = self.key.value_type if self.key is not None and self.key.schema_ids else None
        return typed_schema(None if self.value is None else self.value.value_type, key)

    def properties(self) -> dict[str, str]:
        """The table properties naming the schema ids these columns merge."""
        return {c.property_name: c.property_value() for c in (self.value, self.key) if c is not None and c.schema_ids}

    def ids(self, side: str) -> tuple[int, ...]:
        columns = self.value if side == VALUE else self.key
        return () if columns is None else columns.schema_ids


def schema_ids_of(properties: Mapping[str, str], name: str = SCHEMA_IDS_PROPERTY) -> tuple[int, ...]:
    """The schema ids a table's property ``name`` (the value's, or the key's) says its columns
    merge (none: a new table)."""
    raw = properties.get(name)
    if not raw:
        return ()
    try:
        ids = json.loads(raw)
        return tuple(int(i) for i in ids)
    except (ValueError, TypeError) as exc:
        raise ExportError(f"the table property {name} is not a list of schema ids: {raw!r}") from exc


class ValueSchemas:
    """The writer schemas of one registry, each fetched and mapped once per process, read as the
    topic's format (``value_format``: ``avro``, ``json_schema`` or ``protobuf``; ``message``: the
    Protobuf message whose fields are the columns, None for the file's first)."""

    _registries: dict[RegistryEndpoint, SchemaRegistry] = {}
    _columns: dict[tuple[str, str, int, str | None], WriterSchema] = {}

    def __init__(
        self,
        endpoint: RegistryEndpoint,
        value_format: str = AVRO_FORMAT,
        side: str = VALUE,
        subjects: SubjectStrategy | None = None,
        message: str | None = None,
    ) -> None:
        if value_format not in _SCHEMA_TYPES:
            raise ExportError(f"values in {value_format} have no typed columns")
        self.endpoint = endpoint
        self.value_format = value_format
        self.side = side
        self.subjects = subjects
        self.message = message
        self.registry = self._registries.setdefault(endpoint, SchemaRegistry(endpoint))
        self._checked: set[int] = set()
        self._refused: dict[int, str] = {}

    def checked(self, schema_id: int) -> WriterSchema:
        """``columns``, once the schema is known to be a version of the subject the topic's
        strategy names (``UndecodableValue`` when not: a value of another topic or producer)."""
        columns = self.columns(schema_id)
        if self.subjects is None or schema_id in self._checked:
            return columns
        if schema_id in self._refused:  # asked once per writer
            raise UndecodableValue(self._refused[schema_id], schema_id)
        strategy = self.subjects.strategy
        subject = self.subjects.subject(self.side, columns.record_name)
        if subject is None:
            reason = f"schema id {schema_id} has no record name: the {strategy} subject strategy names no subject"
        elif subject in self.registry.subjects(schema_id) or subject in self.registry.subjects(schema_id, fresh=True):
            self._checked.add(schema_id)
            return columns
        else:
            reason = f"schema id {schema_id} is no version of the subject {subject!r} ({strategy} subject strategy)"
        self._refused[schema_id] = reason
        raise UndecodableValue(reason, schema_id)

    def columns(self, schema_id: int) -> WriterSchema:
        """The schema of ``schema_id`` as columns (``UndecodableValue`` when the registry does
        not know it or it is not of the topic's format: a dead letter)."""
        key = (self.endpoint.url, self.value_format, schema_id, self.message)
        schema_type, make = _SCHEMA_TYPES[self.value_format]
        known = self._columns.get(key)
        if known is None:
            registered = self.registry.schema(schema_id)
            if registered.schema_type != schema_type:
                raise UndecodableValue(
                    f"schema id {schema_id} is a {registered.schema_type} schema, not the topic's {self.value_format}",
                    schema_id,
                )
            known = self._columns.setdefault(key, make(self.registry, registered, self.message))
        return known

    def merged(self, schema_ids: Sequence[int], side: str = VALUE) -> ValueColumns:
        """The columns of a table whose property lists ``schema_ids``."""
        columns = ValueColumns(side=side)
        for schema_id in schema_ids:
            columns = columns.with_schema(self.columns(schema_id))
        return columns


def typed_columns(
    endpoint: RegistryEndpoint,
    formats: tuple[str, str],
    schema_ids: Sequence[int],
    key_schema_ids: Sequence[int] = (),
    subjects: SubjectStrategy | None = None,
    messages: tuple[str | None, str | None] = (None, None),
) -> tuple[ValueSchemas | None, ValueSchemas | None, TypedColumns]:
    """The schemas of a topic's values and keys (``formats``: the value's and the key's; None for
    ``bytes``, not decoded; ``subjects``: the subjects their schemas must be versions of;
    ``messages``: the Protobuf messages named for each) and the columns the schema ids of each
    merge to."""
    (value_format, key_format), (value_message, key_message) = formats, messages
    values = ValueSchemas(endpoint, value_format, VALUE, subjects, value_message) if value_format != BYTES else None
    keys = ValueSchemas(endpoint, key_format, KEY, subjects, key_message) if key_format != BYTES else None
    columns = TypedColumns(
        None if values is None else values.merged(schema_ids),
        None if keys is None else keys.merged(key_schema_ids, side=KEY),
    )
    return values, keys, columns
