"""The Iceberg table a topic is exported to: its catalog, name, schema, partitioning and order,
and what its snapshots say was exported.

The schema is the Arrow decoder's (``tiering_core.kafka.arrow.SCHEMA``) with timestamps in
Iceberg's microseconds; the table is partitioned by identity(partition) and day(timestamp) and
sorted by offset. Each export commit's snapshot summary names the segments it holds
(``tiering.segments``) and carries the partitions' exported offset ranges so far
(``tiering.exported``): what is exported is read from the table itself, in the same atomic
commit as the data, so no other store can disagree with it. pyiceberg is imported here only,
and only when a table is used.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tiering_core.config.export import (
    CATALOG_NAME,
    PY_IO_IMPL,
    PYARROW_FILE_IO,
    S3_ACCESS_KEY_ID,
    S3_ENDPOINT,
    S3_PATH_STYLE_ACCESS,
    S3_REGION,
    S3_SECRET_ACCESS_KEY,
    S3_SESSION_TOKEN,
    ExportConfig,
)
from tiering_core.errors import ExportError, one_line
from tiering_core.kafka.arrow import SCHEMA
from tiering_core.tier.view import OffsetRange, merge_offset_ranges

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from tiering_core.config import PlatformConfig

#: Snapshot summary keys an export commit writes.
SEGMENTS_PROPERTY = "tiering.segments"
EXPORTED_PROPERTY = "tiering.exported"
TOPIC_PROPERTY = "tiering.topic"
ISOLATION_PROPERTY = "tiering.isolation"

#: The data files' Arrow schema: the decoder's, with Iceberg's timestamp precision (microseconds).
DATA_SCHEMA = pa.schema(
    [
        pa.field(f.name, pa.timestamp("us", tz="UTC"), nullable=f.nullable) if f.name == "timestamp" else f
        for f in SCHEMA
    ]
)


@dataclass(frozen=True)
class TableName:
    """An Iceberg table identifier: ``namespace`` and ``name`` (a topic name may hold dots, so the
    identifier is always the pair, never a dotted string)."""

    namespace: str
    name: str

    @property
    def identifier(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def __str__(self) -> str:
        return f"{self.namespace}.{self.name}"

    @classmethod
    def parse(cls, text: str) -> TableName:
        """``NAMESPACE.NAME`` as ``--table`` gives it: the namespace up to the first dot."""
        namespace, dot, name = text.partition(".")
        if not dot or not namespace or not name:
            raise ExportError(f"--table: {text!r} is not NAMESPACE.NAME")
        return cls(namespace, name)


def table_name(config: ExportConfig, topic: str, table: str | None = None) -> TableName:
    """``table`` (``NAMESPACE.NAME``) when given, else ``<namespace>.<topic>``."""
    return TableName.parse(table) if table is not None else TableName(config.namespace, topic)


def export_config(config: PlatformConfig) -> ExportConfig:
    if config.export is None:
        raise ExportError("no export section in the config: add export.catalog (see docs/export.md)")
    return config.export


def catalog_properties(config: PlatformConfig) -> dict[str, str]:
    """The catalog's properties as the ``export`` section gives them, with what it leaves out of
    an S3 warehouse taken from the ``remote`` section and the AWS chain."""
    props = dict(export_config(config).catalog)
    props.setdefault(PY_IO_IMPL, PYARROW_FILE_IO)
    warehouse = props.get("warehouse", "")
    if warehouse.startswith(("s3://", "s3a://")):
        remote = config.remote
        if remote.endpoint_url is not None:
            props.setdefault(S3_ENDPOINT, remote.endpoint_url)
            props.setdefault(S3_PATH_STYLE_ACCESS, "true")
        if remote.region is not None:
            props.setdefault(S3_REGION, remote.region)
        if S3_ACCESS_KEY_ID not in props:
            props.update(_aws_chain_credentials(props.get(S3_REGION)))
    return props


def _aws_chain_credentials(region: str | None) -> dict[str, str]:
    """The credentials the tier's own S3 client would use (boto3's chain), if any."""
    import boto3

    found: dict[str, str] = {}
    session = boto3.Session()
    credentials = session.get_credentials()
    if credentials is not None:
        frozen = credentials.get_frozen_credentials()
        found[S3_ACCESS_KEY_ID] = str(frozen.access_key)
        found[S3_SECRET_ACCESS_KEY] = str(frozen.secret_key)
        if frozen.token:
            found[S3_SESSION_TOKEN] = frozen.token
    if region is None and session.region_name:
        found[S3_REGION] = session.region_name
    return found


def load_catalog(config: PlatformConfig) -> Catalog:
    """The export's catalog; an unreachable one is an ``ExportError`` in one line."""
    from pyiceberg.catalog import load_catalog as pyiceberg_load_catalog

    try:
        return pyiceberg_load_catalog(CATALOG_NAME, **catalog_properties(config))
    except ExportError:
        raise
    except Exception as exc:  # pyiceberg and the database drivers raise many kinds
        raise ExportError(f"cannot open the export catalog: {one_line(exc)}") from exc


def iceberg_schema() -> Any:
    """``DATA_SCHEMA`` as an Iceberg schema (field ids assigned in order)."""
    from pyiceberg.io.pyarrow import pyarrow_to_schema
    from pyiceberg.table.name_mapping import MappedField, NameMapping

    next_id = iter(range(1, 1000))

    def mapped(arrow_field: pa.Field) -> MappedField:
        field_id = next(next_id)
        children: list[MappedField] = []
        type_ = arrow_field.type
        if pa.types.is_list(type_):
            children = [mapped(pa.field("element", type_.value_type, nullable=type_.value_field.nullable))]
        elif pa.types.is_struct(type_):
            children = [mapped(type_.field(i)) for i in range(type_.num_fields)]
        return MappedField.model_validate({"field-id": field_id, "names": [arrow_field.name], "fields": children})

    fields = [mapped(f) for f in DATA_SCHEMA]
    return pyarrow_to_schema(DATA_SCHEMA, name_mapping=NameMapping(fields))


def open_table(catalog: Catalog, name: TableName, *, create: bool = True) -> Table | None:
    """The table, created on first use with the export's schema, partitioning and sort order
    (None when it does not exist and ``create`` is false)."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.table.sorting import SortField, SortOrder
    from pyiceberg.transforms import DayTransform, IdentityTransform

    try:
        return catalog.load_table(name.identifier)
    except NoSuchTableError:
        if not create:
            return None
    except Exception as exc:
        raise ExportError(f"cannot load the table {name}: {one_line(exc)}") from exc
    schema = iceberg_schema()
    spec = PartitionSpec(
        PartitionField(schema.find_field("partition").field_id, 1000, IdentityTransform(), "partition"),
        PartitionField(schema.find_field("timestamp").field_id, 1001, DayTransform(), "timestamp_day"),
    )
    order = SortOrder(SortField(source_id=schema.find_field("offset").field_id, transform=IdentityTransform()))
    try:
        catalog.create_namespace(name.namespace)
    except NamespaceAlreadyExistsError:
        pass
    except Exception as exc:
        raise ExportError(f"cannot create the namespace {name.namespace}: {one_line(exc)}") from exc
    try:
        return catalog.create_table(name.identifier, schema=schema, partition_spec=spec, sort_order=order)
    except TableAlreadyExistsError:  # another export created it meanwhile
        return catalog.load_table(name.identifier)
    except Exception as exc:  # the catalog or the warehouse refused: one line naming it
        raise ExportError(f"cannot create the table {name}: {one_line(exc)}") from exc


@dataclass(frozen=True)
class ExportedSegment:
    """A segment an export commit holds: its partition, id and offset range."""

    partition: int
    segment_id: str
    start_offset: int
    end_offset: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "segment_id": self.segment_id,
            "start": self.start_offset,
            "end": self.end_offset,
        }

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> ExportedSegment:
        return cls(int(raw["partition"]), str(raw["segment_id"]), int(raw["start"]), int(raw["end"]))


def exported_ranges(table: Table | None) -> dict[int, list[OffsetRange]]:
    """The offset ranges each partition's committed segments cover, from the current snapshot's
    summary (each export commit carries the ranges so far forward)."""
    if table is None:
        return {}
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return {}
    raw = snapshot.summary.additional_properties.get(EXPORTED_PROPERTY)
    if raw is None:
        return {}
    return {int(p): [OffsetRange(s, e) for s, e in ranges] for p, ranges in json.loads(raw).items()}


def exported_segments(table: Table) -> list[ExportedSegment]:
    """Every segment the table's snapshots say they hold (oldest first)."""
    found: list[ExportedSegment] = []
    for snapshot in table.snapshots():
        raw = snapshot.summary.additional_properties.get(SEGMENTS_PROPERTY) if snapshot.summary else None
        if raw is not None:
            found.extend(ExportedSegment.of(item) for item in json.loads(raw))
    return found


def is_exported(ranges: Mapping[int, list[OffsetRange]], partition: int, start_offset: int, end_offset: int) -> bool:
    """Whether [start_offset, end_offset] of ``partition`` lies within one exported range (an
    index-repair copy of an exported segment holds the same offsets under a new id)."""
    return any(r.start <= start_offset and end_offset <= r.end for r in ranges.get(partition, ()))


def with_segments(
    ranges: Mapping[int, list[OffsetRange]], segments: list[ExportedSegment]
) -> dict[int, list[OffsetRange]]:
    """``ranges`` with the segments' offsets added, merged."""
    merged: dict[int, list[OffsetRange]] = {}
    partitions = set(ranges) | {s.partition for s in segments}
    for partition in partitions:
        pairs = [(r.start, r.end) for r in ranges.get(partition, ())]
        pairs += [(s.start_offset, s.end_offset) for s in segments if s.partition == partition]
        merged[partition] = merge_offset_ranges(pairs)
    return merged


def exported_up_to(table: Table | None) -> dict[int, int]:
    """Per partition, the highest exported offset (the end of its last exported range)."""
    return {p: ranges[-1].end for p, ranges in exported_ranges(table).items() if ranges}


def ranges_json(ranges: Mapping[int, list[OffsetRange]]) -> str:
    return json.dumps({str(p): [r.as_list() for r in rs] for p, rs in sorted(ranges.items())}, separators=(",", ":"))


def exported_offsets(config: PlatformConfig, topics: Iterable[str]) -> dict[tuple[str, int], int]:
    """``status``'s view: per (topic, partition), the highest offset the topic's table holds
    (one catalog load and one table load per topic, no data read). Empty when no ``export``
    section is configured; a topic without a table has no entry."""
    if config.export is None:
        return {}
    catalog = load_catalog(config)
    found: dict[tuple[str, int], int] = {}
    for topic in sorted(set(topics)):
        try:
            table = open_table(catalog, table_name(config.export, topic), create=False)
        except Exception as exc:
            raise ExportError(f"cannot read the export table of {topic}: {one_line(exc)}") from exc
        for partition, offset in exported_up_to(table).items():
            found[(topic, partition)] = offset
    return found
