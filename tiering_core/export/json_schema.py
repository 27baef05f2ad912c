"""JSON Schema values as typed Arrow columns, for a table that analysts query by field.

A JSON Schema maps to Arrow (and from there to Iceberg) as follows; a schema outside this table is
refused with one line naming the field, before anything is written:

==============================================  =========================================
JSON Schema                                     Arrow (Iceberg)
==============================================  =========================================
boolean, integer, number                        bool, int64 (long), float64 (double)
string, enum (of strings)                       string
string format date, date-time, uuid             date32 (date), timestamp[us, UTC]
                                                (timestamptz), uuid (uuid)
object with properties (nested ones too)        struct
object with only additionalProperties: S        map<string, S>
array with items: S                             list<S>
type [T, "null"], anyOf/oneOf [T, null]         T, nullable
allOf of object schemas ($refs too)             struct of their properties together
a property not in required                      nullable
local $ref (#/definitions/..., #/$defs/...)     the type it names (not recursive)
==============================================  =========================================

A value's top-level object gives the columns; a schema whose top level is not an object gives one
column, ``value``. A payload is a value only if it is UTF-8 JSON that the schema validates
(``jsonschema``, the draft the schema names) and its fields convert to their columns (a date that
is no date, an integer beyond 64 bits); otherwise it is an ``UndecodableValue`` (a dead letter).
Properties the schema does not name are not columns: they are left out of the row.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema
import pyarrow as pa

from tiering_core.errors import one_line
from tiering_core.export.avro import DEFAULT_METADATA, VALUE_COLUMN, UnsupportedSchemaError
from tiering_core.export.registry import UndecodableValue
from tiering_core.export.schema import typed_array

#: The bounds of a long column.
_LONG = (-(2**63), 2**63 - 1)
_FORMATS: dict[str, pa.DataType] = {"date": pa.date32(), "date-time": pa.timestamp("us", tz="UTC"), "uuid": pa.uuid()}

#: A value of the schema's JSON as its column's Python value (a ``ValueError`` when it is none).
Convert = Callable[[Any], Any]


@dataclass(frozen=True)
class _Mapped:
    """One schema node: its column type, whether it admits null, and its value's conversion."""

    arrow: pa.DataType
    nullable: bool
    convert: Convert


def _same(value: Any) -> Any:
    return value


def _long(value: Any) -> int:
    if isinstance(value, bool) or int(value) != value or not _LONG[0] <= int(value) <= _LONG[1]:
        raise ValueError(f"{value!r} is not a 64-bit integer")
    return int(value)


def _double(value: Any) -> float:
    return float(value)


def _date(value: Any) -> dt.date:
    return dt.date.fromisoformat(str(value))


def _timestamp(value: Any) -> dt.datetime:
    parsed = dt.datetime.fromisoformat(str(value))
    if parsed.tzinfo is None:
        raise ValueError(f"date-time {value!r} has no UTC offset")
    return parsed.astimezone(dt.UTC)


def _uuid(value: Any) -> bytes:
    return uuid.UUID(str(value)).bytes


_PRIMITIVES: dict[str, tuple[pa.DataType, Convert]] = {
    "boolean": (pa.bool_(), _same),
    "integer": (pa.int64(), _long),
    "number": (pa.float64(), _double),
    "string": (pa.string(), _same),
}
_CONVERT_FORMAT: dict[str, Convert] = {"date": _date, "date-time": _timestamp, "uuid": _uuid}


def _nullable(convert: Convert) -> Convert:
    return lambda value: None if value is None else convert(value)


def _list(convert: Convert) -> Convert:
    return lambda value: [convert(v) for v in value]


def _map(convert: Convert) -> Convert:
    return lambda value: [(str(k), convert(v)) for k, v in value.items()]


def _struct(converts: Mapping[str, Convert]) -> Convert:
    return lambda value: {name: convert(value.get(name)) for name, convert in converts.items()}


class _Mapper:
    """Walks one schema document (``root``, for local ``$ref``\\ s) into columns."""

    def __init__(self, root: Any) -> None:
        self.root = root

    def resolve(self, ref: str, where: str, path: tuple[str, ...]) -> Any:
        if not ref.startswith("#"):
            raise UnsupportedSchemaError(f"field {where}: $ref {ref!r} is not within the schema (only #/... refs)")
        if ref in path:
            raise UnsupportedSchemaError(f"field {where}: the recursive $ref {ref!r} has no column type")
        node = self.root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or part not in node:
                raise UnsupportedSchemaError(f"field {where}: $ref {ref!r} names nothing in the schema")
            node = node[part]
        return node

    def mapped(self, schema: Any, where: str, path: tuple[str, ...] = ()) -> _Mapped:
        if schema is True or schema == {}:
            raise UnsupportedSchemaError(f"field {where}: a schema that admits any value has no column type")
        if not isinstance(schema, Mapping):
            raise UnsupportedSchemaError(f"field {where}: {schema!r} is not a JSON Schema")
        if "$ref" in schema:
            ref = str(schema["$ref"])
            return self.mapped(self.resolve(ref, where, path), where, (*path, ref))
        if "allOf" in schema:
            return self.mapped(self.all_of(schema, where, path), where, path)
        for combinator in ("anyOf", "oneOf"):
            if combinator in schema:
                return self.union(schema[combinator], combinator, where, path)
        kind = schema.get("type")
        nullable = False
        if isinstance(kind, list):
            kinds = [k for k in kind if k != "null"]
            nullable = len(kinds) < len(kind)
            if len(kinds) != 1:
                raise UnsupportedSchemaError(
                    f"field {where}: {len(kinds)} non-null types {kinds} have no column type "
                    '(only one type, or one and "null", maps)'
                )
            kind = kinds[0]
        if kind is None and "enum" in schema:
            kind = "string" if all(isinstance(v, str) for v in schema["enum"]) else None
        if kind is None and "properties" in schema:
            kind = "object"
        one = self.one(schema, kind, where, path)
        return _Mapped(one.arrow, nullable or one.nullable, _nullable(one.convert) if nullable else one.convert)

    def all_of(self, schema: Mapping[str, Any], where: str, path: tuple[str, ...]) -> dict[str, Any]:
        """``allOf`` of object schemas (with the keywords beside it) as the one object schema whose
        columns a value meeting them all fills: their properties and required names together. The
        payload is still validated against the schema as written."""
        branches = schema["allOf"]
        if not isinstance(branches, list) or not branches:
            raise UnsupportedSchemaError(f"field {where}: allOf is not a list of schemas")
        properties: dict[str, Any] = {}
        required: list[str] = []
        for branch in [{k: v for k, v in schema.items() if k != "allOf"}, *branches]:
            seen = path
            while isinstance(branch, Mapping) and "$ref" in branch:
                ref = str(branch["$ref"])
                branch, seen = self.resolve(ref, where, seen), (*seen, ref)
            if isinstance(branch, Mapping) and "allOf" in branch:
                branch = self.all_of(branch, where, seen)
            if not isinstance(branch, Mapping):
                raise UnsupportedSchemaError(f"field {where}: allOf holds {branch!r}, not an object schema")
            if branch.get("type", "object") != "object" or any(k in branch for k in ("anyOf", "oneOf")):
                raise UnsupportedSchemaError(
                    f"field {where}: allOf of a schema that is not an object's has no column type (only objects merge)"
                )
            for name, sub in (branch.get("properties") or {}).items():
                if properties.setdefault(name, sub) != sub:
                    raise UnsupportedSchemaError(f"field {where}: allOf gives the property {name} two schemas")
            required += [name for name in branch.get("required") or () if name not in required]
        return {"type": "object", "properties": properties, "required": required}

    def union(self, branches: Any, combinator: str, where: str, path: tuple[str, ...]) -> _Mapped:
        if not isinstance(branches, list):
            raise UnsupportedSchemaError(f"field {where}: {combinator} is not a list of schemas")
        kept = [b for b in branches if not (isinstance(b, Mapping) and b.get("type") == "null")]
        if len(kept) != 1:
            raise UnsupportedSchemaError(
                f"field {where}: {combinator} of {len(kept)} non-null schemas has no column type "
                "(only one schema, or one and null, maps)"
            )
        one = self.mapped(kept[0], where, path)
        if len(kept) == len(branches):
            return one
        return _Mapped(one.arrow, True, _nullable(one.convert))

    def one(self, schema: Mapping[str, Any], kind: Any, where: str, path: tuple[str, ...]) -> _Mapped:
        if kind == "null":
            raise UnsupportedSchemaError(f"field {where}: a value that is always null has no column type")
        if kind == "string" and schema.get("format") in _FORMATS:
            fmt = str(schema["format"])
            return _Mapped(_FORMATS[fmt], False, _CONVERT_FORMAT[fmt])
        if kind in _PRIMITIVES:
            arrow, convert = _PRIMITIVES[kind]
            return _Mapped(arrow, False, convert)
        if kind == "array":
            if not isinstance(schema.get("items"), Mapping):
                raise UnsupportedSchemaError(f"field {where}: an array needs one items schema to have a column type")
            items = self.mapped(schema["items"], f"{where}[]", path)
            return _Mapped(pa.list_(items.arrow), False, _list(items.convert))
        if kind == "object":
            return self.object(schema, where, path)
        raise UnsupportedSchemaError(f"field {where}: type {kind!r} has no column type")

    def object(self, schema: Mapping[str, Any], where: str, path: tuple[str, ...]) -> _Mapped:
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        if not properties:
            if not isinstance(extra, Mapping) or not extra:
                raise UnsupportedSchemaError(
                    f"field {where}: an object without properties has a column type only with an "
                    "additionalProperties schema (a map)"
                )
            values = self.mapped(extra, f"{where}{{}}", path)
            return _Mapped(pa.map_(pa.string(), values.arrow), False, _map(values.convert))
        required = set(schema.get("required") or ())
        fields: list[pa.Field] = []
        converts: dict[str, Convert] = {}
        for name, sub in properties.items():
            inner = f"{where}.{name}" if where != "the value" else str(name)
            one = self.mapped(sub, inner, path)
            nullable = one.nullable or name not in required
            has_default = isinstance(sub, Mapping) and "default" in sub
            metadata = {DEFAULT_METADATA: b"true"} if has_default else None
            fields.append(pa.field(str(name), one.arrow, nullable=nullable, metadata=metadata))
            converts[str(name)] = _nullable(one.convert) if nullable else one.convert
        return _Mapped(pa.struct(fields), False, _struct(converts))


@dataclass(frozen=True)
class JsonSchemaColumns:
    """One writer schema's columns, its validator and its conversion."""

    schema_id: int
    arrow_type: pa.StructType
    #: True when the schema's top level is not an object (its value is the one ``value`` column).
    wrapped: bool
    validator: Any
    convert: Convert
    #: The schema's ``title``: the record name the record subject strategies name a subject by.
    record_name: str | None = None

    @classmethod
    def of(cls, schema_id: int, schema_text: str) -> JsonSchemaColumns:
        try:
            schema = json.loads(schema_text)
            validator_class = jsonschema.validators.validator_for(schema)
            validator_class.check_schema(schema)
        except ValueError as exc:
            raise UnsupportedSchemaError(f"JSON schema id {schema_id}: not JSON: {one_line(exc)}") from exc
        except jsonschema.SchemaError as exc:
            at = "/".join(str(p) for p in exc.absolute_path) or "its top level"
            raise UnsupportedSchemaError(
                f"JSON schema id {schema_id}: not a JSON Schema at {at}: {one_line(exc.message)}"
            ) from exc
        try:
            top = _Mapper(schema).mapped(schema, "the value", ("#",))
        except UnsupportedSchemaError as exc:
            raise UnsupportedSchemaError(f"JSON schema id {schema_id}: {exc}") from exc
        wrapped = not pa.types.is_struct(top.arrow) or top.nullable
        if wrapped:
            arrow_type = pa.struct([pa.field(VALUE_COLUMN, top.arrow)])
            inner = top.convert
            convert: Convert = lambda value: {VALUE_COLUMN: inner(value)}  # noqa: E731
        else:
            arrow_type, convert = top.arrow, top.convert
        title = schema.get("title") if isinstance(schema, dict) else None
        record_name = title if isinstance(title, str) else None
        return cls(schema_id, arrow_type, wrapped, validator_class(schema), convert, record_name)

    def decode(self, payload: bytes) -> Any:
        """One payload's value (a dict of columns), or UndecodableValue."""
        try:
            document = json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # nested deeper than Python recurses
            raise UndecodableValue(
                f"JSON payload for schema id {self.schema_id} is not JSON: {one_line(exc)}", self.schema_id
            ) from exc
        try:
            error = jsonschema.exceptions.best_match(self.validator.iter_errors(document))
        except RecursionError as exc:
            raise UndecodableValue(
                f"JSON payload for schema id {self.schema_id} is nested too deep to validate", self.schema_id
            ) from exc
        if error is not None:
            at = "/".join(str(p) for p in error.absolute_path) or "the value"
            raise UndecodableValue(
                f"JSON payload for schema id {self.schema_id} fails its schema at {at}: {one_line(error.message)}",
                self.schema_id,
            )
        try:
            return self.convert(document)
        except (ValueError, TypeError, AttributeError, OverflowError, RecursionError) as exc:
            raise UndecodableValue(
                f"JSON payload for schema id {self.schema_id} has no column value: {one_line(exc)}", self.schema_id
            ) from exc

    def to_arrow(self, values: Sequence[Any]) -> pa.StructArray:
        """Decoded values as one struct column of this schema's type."""
        return typed_array(values, self.arrow_type)
