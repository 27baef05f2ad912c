"""A typed table's part (one day's rows of a group) decoded: each record's value (and key) with
the registry schema its wire-format header names, into the table's columns, or a dead letter
saying why not. Avro values are decoded column at a time, a batch per writer schema
(``AvroColumns.decode_batch``), and merged into the table's columns without a Python object per
value; values of other formats are decoded value by value and built into Arrow as they come.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np
import pyarrow as pa

from tiering_core.config.export_topics import AVRO
from tiering_core.export.avro import AvroColumns
from tiering_core.export.registry import UndecodableValue, WireColumn, WireFrames, WireValue
from tiering_core.export.schema import typed_array
from tiering_core.export.typed import (
    KEY,
    VALUE,
    SchemaChangeError,
    TypedColumns,
    ValueSchemas,
    WriterSchema,
    conformed,
)

#: Values decoded before they are built into Arrow. A whole part's values held as dicts survive
#: young collections into the old generation, which Python's collector walks again and again: as
#: much again as decoding them; at 512 few survive (as fast as with the collector off).
ARROW_CHUNK = 512


@dataclass
class Decoded:
    """One day's rows of a group, decoded: the values and their schema ids, and the dead letters.
    With ``value_type`` the values are built into Arrow every ``ARROW_CHUNK`` (``chunks``, what is
    left in ``values``), else kept as Python values for the caller's type."""

    value_type: pa.StructType | None = None
    good: list[int] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    chunks: list[pa.Array] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    keys: list[Any] = field(default_factory=list)
    key_ids: list[int | None] = field(default_factory=list)
    bad: list[int] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    bad_ids: list[int | None] = field(default_factory=list)
    #: Avro values decoded column at a time: each writer schema's struct column and the
    #: positions of its rows among ``good`` (None: the values are in ``values`` and ``chunks``).
    columnar: list[tuple[np.ndarray, pa.Array]] | None = None
    #: Avro keys decoded column at a time, as ``columnar`` (a row none covers: a null key).
    key_columnar: list[tuple[np.ndarray, pa.Array]] | None = None

    def dead(self, row: int, why: UndecodableValue) -> None:
        self.bad.append(row)
        self.reasons.append(why.reason)
        self.bad_ids.append(why.schema_id)

    def flush(self) -> None:
        """The values so far built into Arrow (``value_type`` set)."""
        assert self.value_type is not None
        self.chunks.append(typed_array(self.values, self.value_type))
        self.values = []

    def value_array(self, value_type: pa.StructType) -> pa.Array:
        """The values as one array of ``value_type`` (the table's columns)."""
        if self.columnar is not None:
            return _in_order(self.columnar, value_type, len(self.good))
        if self.value_type is None or not self.value_type.equals(value_type):
            assert not self.chunks, "values built into Arrow for other columns"
            return typed_array(self.values, value_type)
        chunks = [*self.chunks, typed_array(self.values, value_type)]
        return chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)

    def key_array(self, key_type: pa.StructType) -> pa.Array:
        """The keys' fields as one array of ``key_type`` (the table's ``key_fields``)."""
        if self.key_columnar is not None:
            return _in_order(self.key_columnar, key_type, len(self.good))
        return typed_array(self.keys, key_type)


def _in_order(columns: list[tuple[np.ndarray, pa.Array]], type_: pa.StructType, rows: int) -> pa.Array:
    """The writer schemas' columns as one of ``type_``, each row at its position (null where
    none is)."""
    arrays = [conformed(array, type_) for _, array in columns]
    positions = [p for p, _ in columns]
    covered = sum(len(p) for p in positions)  # the positions are distinct: all there when as many
    missing = np.setdiff1d(np.arange(rows), np.concatenate(positions)) if covered < rows else np.arange(0)
    if len(missing):
        arrays.append(pa.nulls(len(missing), type_))
        positions.append(missing)
    if len(arrays) == 1:
        return arrays[0]
    order = np.argsort(np.concatenate(positions), kind="stable")
    return pa.concat_arrays(arrays).take(pa.array(order))


class _Writers:
    """A side's (value or key) writer schemas by id, each checked once per part, and their
    decoders (one that raises the ``UndecodableValue`` for a schema refused)."""

    def __init__(self, schemas: ValueSchemas) -> None:
        self.schemas = schemas
        self.known: dict[int, WriterSchema | UndecodableValue] = {}
        self.decoders: dict[int, Callable[[bytes], Any]] = {}

    def __call__(self, schema_id: int) -> WriterSchema | UndecodableValue:
        writer = self.known.get(schema_id)
        if writer is None:
            try:
                writer = self.known[schema_id] = self.schemas.checked(schema_id)
            except UndecodableValue as exc:
                writer = self.known[schema_id] = exc
        return writer

    def decoder(self, schema_id: int) -> Callable[[bytes], Any]:
        decode = self.decoders.get(schema_id)
        if decode is None:
            writer = self(schema_id)
            decode = self.decoders[schema_id] = (
                _refuse(writer) if isinstance(writer, UndecodableValue) else writer.decode
            )
        return decode


def _refuse(refused: UndecodableValue) -> Callable[[bytes], Any]:
    def decode(_payload: bytes) -> Any:
        raise refused

    return decode


def _decoded(
    column: pa.Array, writers: _Writers, side: str, frames: WireFrames, skip: Sequence[bool] = ()
) -> Iterator[Any]:
    """Each value of ``column`` as (its fields, its schema id), None for a null key (not a dead
    letter) or a row ``skip`` names, or the ``UndecodableValue`` saying why not. The wire headers
    are split for the whole column at once and each schema id is checked once, so a value costs
    its decode alone."""
    decoders = writers.decoders
    for i, (schema_id, payload) in enumerate(zip(frames.schema_ids, frames.payloads, strict=True)):
        if skip and skip[i]:
            yield None
            continue
        try:
            if schema_id is None or payload is None:
                raw = column[i].as_py()
                if raw is None and side == KEY:
                    yield None
                    continue
                WireValue.parse(raw)  # refused: raises why
                raise AssertionError("WireFrames refused a value WireValue reads")
            decode = decoders.get(schema_id) or writers.decoder(schema_id)
            yield decode(payload), schema_id
        except UndecodableValue as exc:
            yield UndecodableValue(f"the key: {exc.reason}", exc.schema_id) if side == KEY else exc


def _value_type(
    columns: TypedColumns, writers: _Writers, frames: WireFrames, skip: Sequence[bool]
) -> pa.StructType | None:
    """The value columns once every writer schema the part's rows (but those ``skip`` names) name
    is merged: those of its rows when each of them decodes (else the caller builds the values
    again, for the narrower columns of the rows that did); None when they do not merge (the
    values stay Python values)."""
    merged = columns.value
    if merged is None:
        return None
    rows = zip(frames.schema_ids, skip or repeat(False), strict=False)
    for schema_id in dict.fromkeys(i for i, skipped in rows if i is not None and not skipped):
        writer = writers(schema_id)
        if not isinstance(writer, UndecodableValue):
            try:
                merged = merged.with_schema(writer)
            except SchemaChangeError:
                return None
    return merged.value_type


def decode_part(
    part: pa.RecordBatch,
    values: ValueSchemas | None,
    keys: ValueSchemas | None,
    columns: TypedColumns,
    value_type: pa.StructType | None = None,
) -> Decoded:
    """The part's rows decoded, its values built into Arrow as they come for ``value_type`` (by
    default the columns with every schema the part names merged); Avro values column at a time."""
    if values is not None and values.value_format == AVRO:
        return _decode_avro(part, values, keys)
    rows = range(part.num_rows)
    raw_keys: list[Any] = [None for _ in rows]
    if keys is not None:
        key_column = part.column("key")
        raw_keys = list(_decoded(key_column, _Writers(keys), KEY, WireFrames.of(key_column)))
    bad_keys = [isinstance(k, UndecodableValue) for k in raw_keys] if keys is not None else []
    raw_values: Iterator[Any] = iter([(None, 0) for _ in rows])
    decoded = Decoded()
    if values is not None:
        value_column, writers = part.column("value"), _Writers(values)
        frames = WireFrames.of(value_column)
        decoded.value_type = value_type or _value_type(columns, writers, frames, bad_keys)
        raw_values = _decoded(value_column, writers, VALUE, frames, bad_keys)
    chunk = ARROW_CHUNK if decoded.value_type is not None else part.num_rows + 1
    good, ids, key_values, key_ids = decoded.good, decoded.ids, decoded.keys, decoded.key_ids
    if keys is None:  # the common case, without a key's column per row
        for i, value_row in enumerate(raw_values):
            if value_row.__class__ is not tuple:
                decoded.dead(i, value_row)
                continue
            good.append(i)
            decoded.values.append(value_row[0])
            if len(decoded.values) >= chunk:
                decoded.flush()
            ids.append(value_row[1])
        key_values.extend(None for _ in good)
        key_ids.extend(None for _ in good)
        return decoded
    for i, key_row, value_row in zip(rows, raw_keys, raw_values, strict=True):
        failed = key_row if isinstance(key_row, UndecodableValue) else value_row
        if failed.__class__ is not tuple:  # a key's or a value's UndecodableValue
            decoded.dead(i, failed)
            continue
        key, key_id = key_row if key_row is not None else (None, None)
        good.append(i)
        decoded.values.append(value_row[0])
        if len(decoded.values) >= chunk:
            decoded.flush()
        ids.append(value_row[1])
        key_values.append(key)
        key_ids.append(key_id)
    return decoded


@dataclass(frozen=True)
class _AvroSide:
    """A part's values (or keys) decoded a batch per writer schema: each row's schema id, the
    rows decoded, why each other did not (a null key is neither), and each writer schema's
    column with the rows it holds."""

    schema_ids: np.ndarray
    ok: np.ndarray
    dead: dict[int, UndecodableValue]
    columns: list[tuple[np.ndarray, pa.Array]]


def _avro_side(column: pa.Array, writers: _Writers, side: str, skip: np.ndarray) -> _AvroSide:
    """``column`` decoded but the rows ``skip`` names."""
    wire = WireColumn.of(column)
    ok = (wire.schema_ids >= 0) & ~skip
    dead: dict[int, UndecodableValue] = {}
    for i in np.flatnonzero((wire.schema_ids < 0) & ~skip).tolist():
        raw = column[i].as_py()
        if raw is None and side == KEY:
            continue
        try:
            WireValue.parse(raw)
            raise AssertionError("WireColumn refused a value WireValue reads")
        except UndecodableValue as exc:
            dead[i] = exc
    columns = []
    named, first = np.unique(wire.schema_ids[ok], return_index=True)
    for schema_id in named[np.argsort(first)].tolist():  # in the order the rows bring them
        rows = np.flatnonzero(ok & (wire.schema_ids == schema_id))
        writer = writers(schema_id)
        if isinstance(writer, UndecodableValue):  # refused: every row of the id says why
            dead.update((i, writer) for i in rows.tolist())
            ok[rows] = False
            continue
        assert isinstance(writer, AvroColumns), "an Avro topic's writer schemas are Avro's"
        batch = writer.decode_batch(wire.data, wire.starts[rows], wire.ends[rows])
        dead.update((int(rows[j]), UndecodableValue(why, schema_id)) for j, why in batch.reasons.items())
        ok[rows[~batch.ok]] = False
        columns.append((rows[batch.ok], batch.array))
    if side == KEY:
        dead = {i: UndecodableValue(f"the key: {exc.reason}", exc.schema_id) for i, exc in dead.items()}
    return _AvroSide(wire.schema_ids, ok, dead, columns)


def _decode_avro(part: pa.RecordBatch, values: ValueSchemas, keys: ValueSchemas | None) -> Decoded:
    """The part's rows decoded, the Avro values (and Avro keys) of each writer schema in one
    batch, into its columns (``Decoded.columnar``): no Python object per value."""
    n = part.num_rows
    bad_keys = np.zeros(n, np.bool_)
    raw_keys: list[Any] = []
    key_side = None
    if keys is not None and keys.value_format == AVRO:
        key_side = _avro_side(part.column("key"), _Writers(keys), KEY, bad_keys)
        bad_keys[list(key_side.dead)] = True
    elif keys is not None:
        key_column = part.column("key")
        raw_keys = list(_decoded(key_column, _Writers(keys), KEY, WireFrames.of(key_column)))
        bad_keys[[i for i, k in enumerate(raw_keys) if isinstance(k, UndecodableValue)]] = True
    value_side = _avro_side(part.column("value"), _Writers(values), VALUE, bad_keys)
    dead = {i: raw_keys[i] for i in np.flatnonzero(bad_keys).tolist()} if raw_keys else {}
    dead.update(value_side.dead)
    good = np.flatnonzero(value_side.ok)
    decoded = Decoded(columnar=[(np.searchsorted(good, rows), array) for rows, array in value_side.columns])
    decoded.good = good.tolist()
    decoded.ids = value_side.schema_ids[good].tolist()
    if key_side is not None:
        dead.update(key_side.dead)
        kept = [(rows, array, np.isin(rows, good)) for rows, array in key_side.columns]
        decoded.key_columnar = [(np.searchsorted(good, r[k]), a.filter(pa.array(k))) for r, a, k in kept]
        ids, known = key_side.schema_ids[good].tolist(), key_side.ok[good].tolist()
        decoded.key_ids = [i if ok else None for i, ok in zip(ids, known, strict=True)]
    elif keys is None:
        decoded.keys = [None] * len(good)
        decoded.key_ids = [None] * len(good)
    else:
        pairs = [raw_keys[i] or (None, None) for i in decoded.good]
        decoded.keys, decoded.key_ids = [k for k, _ in pairs], [i for _, i in pairs]
    for i in sorted(dead):
        decoded.dead(i, dead[i])
    return decoded
