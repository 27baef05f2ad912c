"""The data files of a typed table's segment (``export.typed``): each record's value decoded with
the registry schema its wire-format header names, into the table's columns, and what cannot be
decoded into the dead-letter table's files, each record in exactly one of them.

The segment is read as for any table (``write.segment_days``: groups split by day); a group that
brings a writer schema the table's columns do not hold yet merges it (``ValueColumns.with_schema``)
and the day files open from then on have the wider columns (the files written before keep theirs:
a file lacking an optional column, or holding an int where the table has a long, reads through).
A schema that cannot merge fails the segment with a ``SegmentSchemaError``, its files deleted: the
export stops there. The ids merged are handed back, for the commit to evolve the table with.
Avro values (and keys) are decoded on the thread that reads the segment ahead of the writer
(``typed_decode``: they need not the table's columns), so the decode and the Parquet writes overlap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from tiering_core.config.export_topics import AVRO, BYTES
from tiering_core.engine.read_ahead import read_ahead
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.errors import CorruptLogError
from tiering_core.export.avro import UnsupportedSchemaError
from tiering_core.export.plan import ExportSegment
from tiering_core.export.registry import RegistryEndpoint, SchemaRegistryError
from tiering_core.export.typed import (
    DEAD_LETTER_SCHEMA,
    KEY,
    KEY_FIELDS_COLUMN,
    KEY_SCHEMA_ID_COLUMN,
    SCHEMA_ID_COLUMN,
    VALUE,
    SchemaChangeError,
    SubjectStrategy,
    TypedColumns,
    ValueSchemas,
    typed_columns,
)
from tiering_core.export.typed_decode import Decoded, decode_part
from tiering_core.export.write import (
    READ_AHEAD_GROUPS,
    DayFiles,
    ExportAttempt,
    SegmentExportError,
    delete_files,
    segment_days,
)
from tiering_core.kafka.arrow import GroupBounds
from tiering_core.storage.chunks import ChunkError
from tiering_core.storage.errors import ManifestError, RemoteObjectNotFoundError
from tiering_core.storage.layout import ObjectKind

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem

    from tiering_core.storage.remote import RemoteStorage


class SegmentSchemaError(SegmentExportError):
    """A segment holding a value schema the table cannot take: the topic's export stops."""


@dataclass(frozen=True)
class TypedWrite:
    """What a typed segment's task needs (picklable): the registry, the value schema ids the
    table's columns merge when the export planned, the dead-letter table's attempt, the values'
    and keys' formats (``export.topics.T.value``, ``.key``: ``bytes`` is not decoded), the key
    schema ids the table's ``key_fields`` merge, the subjects checked and the Protobuf messages
    named (``.value_message``, ``.key_message``)."""

    endpoint: RegistryEndpoint
    schema_ids: tuple[int, ...]
    dead_letters: ExportAttempt
    value_format: str = AVRO
    key_format: str = BYTES
    key_schema_ids: tuple[int, ...] = ()
    subjects: SubjectStrategy | None = None
    messages: tuple[str | None, str | None] = (None, None)

    def __repr__(self) -> str:  # the endpoint's password, the attempt's FileIO credentials
        return (
            f"TypedWrite(registry={self.endpoint.shown!r}, schema_ids={self.schema_ids!r}, "
            f"value_format={self.value_format!r}, key_format={self.key_format!r}, "
            f"key_schema_ids={self.key_schema_ids!r}, subjects={self.subjects!r}, messages={self.messages!r})"
        )

    def columns(self) -> tuple[ValueSchemas | None, ValueSchemas | None, TypedColumns]:
        """The value's and the key's schemas (None: as bytes), and the columns as planned."""
        formats = (self.value_format, self.key_format)
        return typed_columns(self.endpoint, formats, self.schema_ids, self.key_schema_ids, self.subjects, self.messages)


@dataclass(frozen=True)
class TypedFiles:
    """A typed segment's files: the table's and the dead letters', their rows, and the value
    schema ids the table's columns must merge to hold its files."""

    files: list[str]
    dead_letter_files: list[str] = field(default_factory=list)
    rows: int = 0
    dead_letters: int = 0
    schema_ids: tuple[int, ...] = ()
    key_schema_ids: tuple[int, ...] = ()


def _typed_rows(part: pa.RecordBatch, decoded: Decoded, columns: TypedColumns) -> pa.RecordBatch:
    rows = part if len(decoded.good) == part.num_rows else part.take(pa.array(decoded.good, pa.int64()))
    by_name = {name: rows.column(name) for name in rows.schema.names}
    if columns.value is not None:
        values = decoded.value_array(columns.value.value_type)
        by_name[SCHEMA_ID_COLUMN] = pa.array(decoded.ids, pa.int32())
        for f, child in zip(columns.value.value_type, values.flatten(), strict=True):
            by_name[f.name] = child
    if columns.key is not None and columns.key.schema_ids:
        by_name[KEY_SCHEMA_ID_COLUMN] = pa.array(decoded.key_ids, pa.int32())
        by_name[KEY_FIELDS_COLUMN] = decoded.key_array(columns.key.value_type)
    schema = columns.schema
    return pa.RecordBatch.from_arrays([by_name[f.name] for f in schema], schema=schema)


def _dead_rows(part: pa.RecordBatch, decoded: Decoded) -> pa.RecordBatch:
    rows = part.take(pa.array(decoded.bad, pa.int64()))
    arrays = [
        *rows.columns,
        pa.array(decoded.reasons, pa.string()),
        pa.array(decoded.bad_ids, pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=DEAD_LETTER_SCHEMA)


class _DeadLetterFiles:
    """The segment's dead letters: day files (the dead-letter table is partitioned as the table)
    under the dead-letter table's attempt, the directory made at the first one."""

    def __init__(self, attempt: ExportAttempt, segment: ExportSegment) -> None:
        self.attempt = attempt
        self.fs: FileSystem
        self.fs, root = attempt.filesystem()
        self.directory = f"{root}/partition={segment.partition}"
        self.days = DayFiles(self.fs, self.directory, segment.segment_id, schema=DEAD_LETTER_SCHEMA)
        self.rows = 0

    def write(self, day: int, rows: pa.RecordBatch) -> None:
        if self.rows == 0:
            self.fs.create_dir(self.directory, recursive=True)
        self.days.write(day, rows)
        self.rows += rows.num_rows

    def close(self) -> list[str]:
        self.days.close()
        return [self.attempt.url(p) for p in self.days.paths]

    def abandon(self) -> None:
        self.days.abandon()


class _TableFiles:
    """The segment's files of the table: day files of the current columns, new ones (another
    name) once the columns widen."""

    def __init__(self, fs: FileSystem, directory: str, segment_id: str, columns: TypedColumns) -> None:
        self.fs, self.directory, self.segment_id = fs, directory, segment_id
        self.columns = columns
        self.generation = 0
        self.closed: list[str] = []
        self.days = DayFiles(fs, directory, segment_id, schema=columns.schema)

    def widen(self, columns: TypedColumns) -> None:
        if columns.schema.equals(self.columns.schema):
            self.columns = columns
            return
        self.days.close()
        if self.days.paths:  # files of the narrower columns stay; the wider ones get other names
            self.closed.extend(self.days.paths)
            self.generation += 1
        self.columns = columns
        name = f"{self.segment_id}-v{self.generation}" if self.generation else self.segment_id
        self.days = DayFiles(self.fs, self.directory, name, schema=columns.schema)

    @property
    def paths(self) -> list[str]:
        return [*self.closed, *self.days.paths]

    def abandon(self) -> None:
        self.days.abandon()
        delete_files(self.fs, self.closed)


def write_typed_segment_files(
    storage: RemoteStorage,
    segment: ExportSegment,
    attempt: ExportAttempt,
    typed: TypedWrite,
    *,
    bounds: GroupBounds = GroupBounds(),
    on_batch: Callable[[pa.RecordBatch], None] | None = None,
) -> TypedFiles:
    """The segment's records as the typed table's data files under ``attempt`` and its dead
    letters under ``typed.dead_letters``. A corrupt batch, a registry that cannot be asked, or
    (``SegmentSchemaError``) a schema the table cannot take fails the segment, its files deleted."""
    fs, root = attempt.filesystem()
    directory = f"{root}/partition={segment.partition}"
    fs.create_dir(directory, recursive=True)
    next_offset = segment.first_offset
    where = Path(storage.describe(segment_ref(segment.segment).key(ObjectKind.LOG, storage.prefix)))
    dead = _DeadLetterFiles(typed.dead_letters, segment)
    files: _TableFiles | None = None
    rows = 0
    try:
        values, keys, planned = typed.columns()
        files = _TableFiles(fs, directory, segment.segment_id, planned)
        # Avro parts decode without the table's columns: on the read-ahead thread, beside the writer
        ahead = values is not None and values.value_format == AVRO

        def groups() -> Iterator[tuple[pa.RecordBatch, list[tuple[int, pa.RecordBatch, Decoded | None]]]]:
            for batch, parts in segment_days(storage, segment, where, bounds):
                yield batch, [(d, p, decode_part(p, values, keys, planned) if ahead else None) for d, p in parts]

        for batch, parts in read_ahead(groups, READ_AHEAD_GROUPS, thread_name="export-decode"):
            for day, part, early in parts:
                decoded = early or decode_part(part, values, keys, files.columns)
                files.widen(_merged(files.columns, decoded, values, keys))
                if decoded.chunks and files.columns.value is not None:
                    wanted = files.columns.value.value_type
                    if decoded.value_type is None or not decoded.value_type.equals(wanted):
                        # a schema all of whose values were dead letters: built for the columns the rows need
                        decoded = decode_part(part, values, keys, files.columns, wanted)
                if decoded.good:
                    files.days.write(day, _typed_rows(part, decoded, files.columns))
                    rows += len(decoded.good)
                if decoded.bad:
                    dead.write(day, _dead_rows(part, decoded))
            if on_batch is not None:
                on_batch(batch)
            if batch.num_rows:
                next_offset = int(batch.column("offset")[-1].as_py()) + 1
        files.days.close()
        dead_files = dead.close()
    except (SchemaChangeError, UnsupportedSchemaError) as exc:
        _abandon(files, dead)
        raise SegmentSchemaError(segment, next_offset, str(exc)) from exc
    except (
        CorruptLogError,
        RemoteObjectNotFoundError,
        ManifestError,
        ChunkError,
        SchemaRegistryError,
        pa.ArrowInvalid,
        pa.ArrowTypeError,
    ) as exc:
        _abandon(files, dead)
        raise SegmentExportError(segment, next_offset, str(exc)) from exc
    except BaseException:
        _abandon(files, dead)
        raise
    ids = files.columns.ids
    return TypedFiles([attempt.url(p) for p in files.paths], dead_files, rows, dead.rows, ids(VALUE), ids(KEY))


def _merged(
    columns: TypedColumns, decoded: Decoded, values: ValueSchemas | None, keys: ValueSchemas | None
) -> TypedColumns:
    value, key = columns.value, columns.key
    if value is not None and values is not None:
        for schema_id in dict.fromkeys(decoded.ids):  # new ids in the order the records bring them
            value = value.with_schema(values.columns(schema_id))
    if key is not None and keys is not None:
        for key_id in dict.fromkeys(i for i in decoded.key_ids if i is not None):
            key = key.with_schema(keys.columns(key_id))
    return TypedColumns(value, key)


def _abandon(files: _TableFiles | None, dead: _DeadLetterFiles) -> None:
    if files is not None:
        files.abandon()
    dead.abandon()
