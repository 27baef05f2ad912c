"""Avro values as typed Arrow columns, for a table that analysts query by field.

An Avro schema maps to Arrow (and from there to Iceberg) as follows; a schema outside this table
is refused with one line naming the field, before anything is written:

==========================================  =========================================
Avro                                        Arrow (Iceberg)
==========================================  =========================================
boolean, int, long, float, double           bool, int32, int64, float32, float64
string, enum                                string
bytes, fixed                                binary, fixed-size binary (fixed)
record                                      struct (nested records: nested structs)
array, map                                  list, map<string, ...>
union of null and one type                  that type, nullable
int date                                    date32 (date)
int time-millis, long time-micros           time64[us] (time)
long timestamp-millis, timestamp-micros     timestamp[us, UTC] (timestamptz)
long local-timestamp-millis/micros          timestamp[us] (timestamp)
bytes/fixed decimal(p, s)                   decimal128(p, s) (decimal, p <= 38)
string uuid                                 string
==========================================  =========================================

A value's top-level record gives the columns; a schema whose top level is not a record gives
one column, ``value``. A payload that cannot be read, or that leaves bytes unread, is an
``UndecodableValue`` (a dead letter), never a row.

A batch of payloads (``decode_batch``) is decoded column at a time by the schema's compiled
program (``export.avro_program``), straight into Arrow buffers. It reads stricter than fastavro
where fastavro reads nonsense, and says why: a block's item count more than the bytes left, or
its byte size (after a negative count, as the spec allows) negative or past the payload's end, a
varint longer than 10 bytes (as Avro's Java decoder refuses it), a negative enum index or union
branch (fastavro reads them from the end), a negative time (fastavro wraps some into the day), an
int outside 32 bits or a decimal with more digits than its precision (both failed the whole
segment, in Arrow) are dead letters. A boolean byte other than 0 is true,
as fastavro reads it. A schema the program cannot express (array items that may take no bytes),
and a batch holding a map with a key twice (fastavro keeps the last), are decoded by fastavro
(``schemaless_reader``), value by value, as ``decode`` does.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

from tiering_core.errors import TieringError, one_line
from tiering_core.export.avro_kernel import ERROR_REASONS, OK
from tiering_core.export.avro_program import AvroProgram, compile_program, run_program
from tiering_core.export.registry import UndecodableValue

#: The column a schema whose top level is not a record decodes into.
VALUE_COLUMN = "value"
#: The Arrow field metadata key marking a record field that has a default (a reader of older
#: values fills it in, so adding it is a compatible change).
DEFAULT_METADATA = b"avro.default"
#: Iceberg's widest decimal.
MAX_DECIMAL_PRECISION = 38
#: The most payload bytes decoded as one batch: a column's offsets are 32-bit (a string or list
#: column holds at most as many bytes or items as the payloads' bytes).
MAX_BATCH_BYTES = 2**31 - 1

_PRIMITIVES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
_LOGICAL: dict[tuple[str, str | None], pa.DataType] = {
    ("int", "date"): pa.date32(),
    ("int", "time-millis"): pa.time64("us"),
    ("long", "time-micros"): pa.time64("us"),
    ("long", "timestamp-millis"): pa.timestamp("us", tz="UTC"),
    ("long", "timestamp-micros"): pa.timestamp("us", tz="UTC"),
    ("long", "local-timestamp-millis"): pa.timestamp("us"),
    ("long", "local-timestamp-micros"): pa.timestamp("us"),
    ("string", "uuid"): pa.string(),
}


class UnsupportedSchemaError(TieringError):
    """An Avro schema the typed table cannot hold (names the field and why)."""


@dataclass(frozen=True)
class AvroColumns:
    """One writer schema's columns and its decoder."""

    schema_id: int
    arrow_type: pa.StructType
    #: True when the schema's top level is not a record (its value is the one ``value`` column).
    wrapped: bool
    parsed: Any
    #: The compiled decoder of a batch (None: fastavro's, value by value).
    program: AvroProgram | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, schema_id: int, schema_text: str) -> AvroColumns:
        try:
            schema = json.loads(schema_text)
        except ValueError:
            schema = schema_text  # a primitive's schema may be its bare name
        named: dict[str, Any] = {}
        mapped = _arrow_type(schema, named, "", None, ())
        wrapped = not isinstance(mapped, pa.StructType) or not _is_record(schema, named)
        arrow_type = pa.struct([pa.field(VALUE_COLUMN, mapped)]) if wrapped else mapped
        try:
            parsed = fastavro.parse_schema(_plain_uuids(schema))
        except Exception as exc:  # fastavro raises several types for a malformed schema
            raise UnsupportedSchemaError(f"Avro schema id {schema_id}: {one_line(exc)}") from exc
        return cls(schema_id, arrow_type, wrapped, parsed, compile_program(_plain_uuids(schema), wrapped))

    @property
    def record_name(self) -> str | None:
        """The full name of the schema's top-level record (None: not a record), as the record
        subject strategies name a subject."""
        return str(self.parsed["name"]) if isinstance(self.parsed, dict) and "name" in self.parsed else None

    def decode(self, payload: bytes) -> Any:
        """One payload's value (a dict of columns), or UndecodableValue."""
        buffer = io.BytesIO(payload)
        try:
            value = fastavro.schemaless_reader(buffer, self.parsed, None)
        except Exception as exc:  # a corrupt payload fails anywhere in fastavro's reader
            raise UndecodableValue(
                f"corrupt Avro payload for schema id {self.schema_id}: {one_line(exc) or type(exc).__name__}",
                self.schema_id,
            ) from exc
        if buffer.tell() != len(payload):
            raise UndecodableValue(
                f"corrupt Avro payload for schema id {self.schema_id}: "
                f"{len(payload) - buffer.tell()} byte(s) left after the value",
                self.schema_id,
            )
        return {VALUE_COLUMN: value} if self.wrapped else value

    def to_arrow(self, values: Sequence[Any]) -> pa.StructArray:
        """Decoded values as one struct column of this schema's type."""
        return pa.array(values, type=self.arrow_type)

    def decode_batch(
        self, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, max_bytes: int = MAX_BATCH_BYTES
    ) -> DecodedBatch:
        """The payloads ``buf[starts[i]:ends[i]]`` as one struct column of those that decode, and
        why each other does not; decoded in halves while they hold more than ``max_bytes``."""
        if len(starts) > 1 and int((ends - starts).sum()) > max_bytes:
            half = len(starts) // 2
            first = self.decode_batch(buf, starts[:half], ends[:half], max_bytes)
            second = self.decode_batch(buf, starts[half:], ends[half:], max_bytes)
            reasons = {**first.reasons, **{half + i: why for i, why in second.reasons.items()}}
            array = pa.concat_arrays([first.array, second.array])
            return DecodedBatch(np.concatenate([first.ok, second.ok]), reasons, array)
        if self.program is not None:
            run = run_program(self.program, self.arrow_type, buf, starts, ends)
            if run.array is not None:
                failed = np.flatnonzero(run.status != OK)
                reasons = {
                    int(i): self._reason(int(run.status[i]), int(run.where[i]), int(run.value[i])) for i in failed
                }
                return DecodedBatch(run.status == OK, reasons, run.array)
        values: list[Any] = []
        reasons = {}
        for i, (start, end) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
            try:
                values.append(self.decode(buf[start:end].tobytes()))
            except UndecodableValue as exc:
                reasons[i] = exc.reason
        ok = np.ones(len(starts), np.bool_)
        ok[list(reasons)] = False
        return DecodedBatch(ok, reasons, self.to_arrow(values))

    def _reason(self, code: int, where: int, value: int) -> str:
        why = ERROR_REASONS[code].format(value=value)
        return f"corrupt Avro payload for schema id {self.schema_id}: {why} (at byte {where})"


@dataclass(frozen=True)
class DecodedBatch:
    """A batch of payloads decoded: which did (``ok``), the struct column of those, in order, and
    the reason each other did not (by its index in the batch)."""

    ok: np.ndarray
    reasons: dict[int, str]
    array: pa.Array


def _is_record(schema: Any, named: Mapping[str, Any]) -> bool:
    if isinstance(schema, dict):
        return schema.get("type") == "record"
    return isinstance(schema, str) and named.get(schema, {}).get("type") == "record"


def _full_name(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _arrow_type(schema: Any, named: dict[str, Any], namespace: str, where: str | None, path: tuple[str, ...]) -> Any:
    """The Arrow type of ``schema``; ``named`` collects named types as they are defined."""
    field_name = where or "the value"
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise UnsupportedSchemaError(
                f"field {field_name}: a union of {len(branches)} non-null types has no column type "
                "(only a union of null and one type maps)"
            )
        return _arrow_type(branches[0], named, namespace, where, path)
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        full = _full_name(schema, namespace)
        if full in path or schema in path:
            raise UnsupportedSchemaError(f"field {field_name}: the recursive type {schema!r} has no column type")
        definition = named.get(full) or named.get(schema)
        if definition is None:
            raise UnsupportedSchemaError(f"field {field_name}: unknown type {schema!r}")
        return definition["arrow"]
    if not isinstance(schema, dict) or "type" not in schema:
        raise UnsupportedSchemaError(f"field {field_name}: {schema!r} is not an Avro schema")
    kind = schema["type"]
    logical = schema.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(schema.get("precision", 0)), int(schema.get("scale", 0))
        if not 0 < precision <= MAX_DECIMAL_PRECISION or not 0 <= scale <= precision:
            raise UnsupportedSchemaError(f"field {field_name}: decimal({precision}, {scale}) does not fit a column")
        arrow: Any = pa.decimal128(precision, scale)
        if kind == "fixed":
            _define(schema, named, namespace, arrow)
        return arrow
    if isinstance(kind, str) and (kind, logical) in _LOGICAL:
        return _LOGICAL[(kind, logical)]
    if kind in ("record", "error"):
        return _record_type(schema, named, namespace, path)
    if kind == "enum":
        return _define(schema, named, namespace, pa.string())
    if kind == "fixed":
        return _define(schema, named, namespace, pa.binary(int(schema["size"])))
    if kind == "array":
        return pa.list_(_arrow_type(schema["items"], named, namespace, f"{field_name}[]", path))
    if kind == "map":
        return pa.map_(pa.string(), _arrow_type(schema["values"], named, namespace, f"{field_name}{{}}", path))
    return _arrow_type(kind, named, namespace, where, path)  # {"type": "long"} and the like


def _define(schema: Mapping[str, Any], named: dict[str, Any], namespace: str, arrow: Any) -> Any:
    full = _full_name(str(schema["name"]), str(schema.get("namespace", namespace)))
    named[full] = {"type": schema["type"], "arrow": arrow}
    named.setdefault(str(schema["name"]), named[full])
    return arrow


def _record_type(schema: Mapping[str, Any], named: dict[str, Any], namespace: str, path: tuple[str, ...]) -> Any:
    name = str(schema.get("name", ""))
    inner = str(schema.get("namespace", namespace if "." not in name else name.rsplit(".", 1)[0]))
    full = _full_name(name, inner)
    fields = []
    for f in schema.get("fields", ()):
        nullable = isinstance(f["type"], list) and "null" in f["type"]
        arrow = _arrow_type(f["type"], named, inner, str(f["name"]), (*path, full, name))
        metadata = {DEFAULT_METADATA: b"true"} if "default" in f else None
        fields.append(pa.field(str(f["name"]), arrow, nullable=nullable, metadata=metadata))
    struct = pa.struct(fields)
    named[full] = {"type": "record", "arrow": struct}
    named.setdefault(name, named[full])
    return struct


def _plain_uuids(schema: Any) -> Any:
    """The schema with ``uuid`` logical types read as their strings (the column is a string)."""
    if isinstance(schema, list):
        return [_plain_uuids(s) for s in schema]
    if isinstance(schema, dict):
        plain = {k: _plain_uuids(v) for k, v in schema.items() if not (k == "logicalType" and v == "uuid")}
        return plain
    return schema


def decode_all(columns: AvroColumns, payloads: Iterable[bytes]) -> tuple[list[Any], list[tuple[int, str]]]:
    """The values of ``payloads`` in order, and (index, reason) of each that could not be decoded."""
    values: list[Any] = []
    failed: list[tuple[int, str]] = []
    for i, payload in enumerate(payloads):
        try:
            values.append(columns.decode(payload))
        except UndecodableValue as exc:
            failed.append((i, exc.reason))
    return values, failed
