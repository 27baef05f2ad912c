"""The Iceberg table a topic is exported to: its catalog, name, schema, partitioning and order,
and what its snapshots say was exported.

The schema is the Arrow decoder's (``tiering_core.kafka.arrow.SCHEMA``) with timestamps in
Iceberg's microseconds, clamped to the years 0001-9999 a table can partition by, then the
record's topic id and its timestamp as Kafka holds it (any int64 of milliseconds); the table is
partitioned by identity(partition) and day(timestamp) and sorted by offset. Each export commit's
snapshot summary names the segments it holds (``tiering.segments``) and carries the exported
offset ranges so far, per topic id and partition (``tiering.exported-by-topic-id``), in the same
atomic commit as the data. Walking the current snapshot's ancestry back to the last export commit
(``read_ancestry``) finds what is exported, so a snapshot of another writer (a row delete, a
compaction) or a schema change loses nothing; when snapshot expiry removed every export commit
from the ancestry, ``export.progress`` reads the metadata store's record of them instead.

Tables written before topic ids (ranges keyed by partition alone, ``tiering.exported``; no
``topic_id`` and ``timestamp_ms`` columns) are read as they are and migrated in place on first use
by an export (``migrate_table``: the two columns added by schema evolution; the next commit
carries the ranges forward by topic id). pyiceberg is imported here only, and only when a table
is used.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tiering_core.config.export import (
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
from tiering_core.metadata.values import ExportCommit
from tiering_core.tier.offsets import OffsetRange, merge_offset_ranges

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from tiering_core.config import PlatformConfig
    from tiering_core.kafka.topic import TopicIdPartition
    from tiering_core.metadata.store import RemoteLogMetadataStore

#: Snapshot summary keys an export commit writes.
SEGMENTS_PROPERTY = "tiering.segments"
EXPORTED_PROPERTY = "tiering.exported-by-topic-id"
TOPIC_PROPERTY = "tiering.topic"
ISOLATION_PROPERTY = "tiering.isolation"
LEASE_PROPERTY = "tiering.lease-token"
#: The ranges by partition alone, as commits wrote them before topic ids (read, never written).
LEGACY_EXPORTED_PROPERTY = "tiering.exported"
#: The topic id of legacy ranges no listed segment accounts for (their snapshots expired): held
#: as exported for every topic id of the partition, as the table meant when it was written.
ANY_TOPIC_ID = "*"

#: The columns added after the decoder's: the record's topic id, and its timestamp as Kafka holds
#: it (``timestamp`` is clamped to what a table can partition by). Optional: rows written before
#: the columns existed read null.
TOPIC_ID_COLUMN = "topic_id"
RAW_TIMESTAMP_COLUMN = "timestamp_ms"
#: The records' timestamps ``timestamp`` can hold: 0001-01-01T00:00:00.000Z to
#: 9999-12-31T23:59:59.999Z, the dates a day partition value can be (Kafka takes any int64).
MIN_TIMESTAMP_MS = -62_135_596_800_000
MAX_TIMESTAMP_MS = 253_402_300_799_999

#: The data files' Arrow schema: the decoder's, with Iceberg's timestamp precision (microseconds),
#: then the added columns.
DATA_SCHEMA = pa.schema(
    [
        *(
            pa.field(f.name, pa.timestamp("us", tz="UTC"), nullable=f.nullable) if f.name == "timestamp" else f
            for f in SCHEMA
        ),
        pa.field(TOPIC_ID_COLUMN, pa.string()),
        pa.field(RAW_TIMESTAMP_COLUMN, pa.int64()),
    ]
)
ADDED_COLUMNS = (TOPIC_ID_COLUMN, RAW_TIMESTAMP_COLUMN)


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
    """``table`` (``NAMESPACE.NAME``) when given, else ``<namespace>.<export.topics.T.table or T>``."""
    return (
        TableName.parse(table) if table is not None else TableName(config.namespace, config.topic(topic).table or topic)
    )


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
        return pyiceberg_load_catalog(export_config(config).catalog_name, **catalog_properties(config))
    except ExportError:
        raise
    except Exception as exc:  # pyiceberg and the database drivers raise many kinds
        raise ExportError(f"cannot open the export catalog: {one_line(exc)}") from exc


def open_table(
    catalog: Catalog, name: TableName, *, create: bool = True, columns: pa.Schema = DATA_SCHEMA
) -> Table | None:
    """The table, created on first use with ``columns`` (the export's), partitioning and sort order
    (None when it does not exist and ``create`` is false)."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.table.sorting import SortField, SortOrder
    from pyiceberg.transforms import DayTransform, IdentityTransform

    from tiering_core.export.schema import iceberg_schema

    try:
        return catalog.load_table(name.identifier)
    except NoSuchTableError:
        if not create:
            return None
    except Exception as exc:
        raise ExportError(f"cannot load the table {name}: {one_line(exc)}") from exc
    schema = iceberg_schema(columns)
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


def migrate_table(table: Table) -> Table:
    """The table with the columns a table written before them lacks (``ADDED_COLUMNS``, optional:
    its rows read null), added by schema evolution; nothing else changes, no data is rewritten.
    An export calls it on first use, holding the table's lease."""
    from pyiceberg.types import LongType, StringType

    missing = [name for name in ADDED_COLUMNS if name not in {f.name for f in table.schema().fields}]
    if not missing:
        return table
    docs = {
        TOPIC_ID_COLUMN: "the topic id of the record's partition",
        RAW_TIMESTAMP_COLUMN: "the record's timestamp as Kafka holds it, in ms since the epoch",
    }
    try:
        with table.update_schema() as update:
            for name in missing:
                update.add_column(name, StringType() if name == TOPIC_ID_COLUMN else LongType(), doc=docs[name])
    except Exception as exc:  # a conflicting change, the catalog gone: one line naming the table
        raise ExportError(
            f"cannot add {', '.join(missing)} to the table {'.'.join(table.name())}: {one_line(exc)}"
        ) from exc
    table.refresh()
    return table


@dataclass(frozen=True)
class ExportedSegment:
    """A segment an export commit holds: its topic id (None in commits written before topic
    ids), partition, id and offset range."""

    topic_id: str | None
    partition: int
    segment_id: str
    start_offset: int
    end_offset: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic_id": self.topic_id,
            "partition": self.partition,
            "segment_id": self.segment_id,
            "start": self.start_offset,
            "end": self.end_offset,
        }

    @staticmethod
    def list_json(segments: Iterable[ExportedSegment]) -> str:
        """Segments as a commit's summary lists them (``tiering.segments``)."""
        return json.dumps([s.to_dict() for s in segments], separators=(",", ":"))

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> ExportedSegment:
        topic_id = raw.get("topic_id")
        return cls(
            None if topic_id is None else str(topic_id),
            int(raw["partition"]),
            str(raw["segment_id"]),
            int(raw["start"]),
            int(raw["end"]),
        )


#: Of segment ids, the topic ids the metadata store knows them under (``store_topic_ids``).
TopicIdsOf = Callable[[Sequence[str]], Mapping[str, str]]


@dataclass(frozen=True)
class ExportedRanges:
    """The offset ranges a table holds, per topic id and partition (merged, in offset order).
    ``ANY_TOPIC_ID``'s ranges count for every topic id of their partition."""

    by_topic_id: Mapping[str, Mapping[int, tuple[OffsetRange, ...]]] = field(default_factory=dict)

    def of(self, topic_id: str, partition: int) -> tuple[OffsetRange, ...]:
        """The partition's ranges exported from ``topic_id`` (the unattributed ones included)."""
        ranges = self.by_topic_id.get(topic_id, {}).get(partition, ())
        unattributed = self.by_topic_id.get(ANY_TOPIC_ID, {}).get(partition, ()) if topic_id != ANY_TOPIC_ID else ()
        if not unattributed:
            return tuple(ranges)
        return tuple(merge_offset_ranges([(r.start, r.end) for r in (*ranges, *unattributed)]))

    def holds(self, tip: TopicIdPartition, start_offset: int, end_offset: int) -> bool:
        """Whether [start_offset, end_offset] of ``tip`` lies within one exported range (an
        index-repair copy of an exported segment holds the same offsets under a new id)."""
        return any(r.start <= start_offset and end_offset <= r.end for r in self.of(tip.topic_id, tip.partition))

    def with_segments(self, segments: Iterable[ExportedSegment]) -> ExportedRanges:
        """These ranges with the segments' offsets added (under their topic ids), merged."""
        pairs: dict[str, dict[int, list[tuple[int, int]]]] = {}
        for topic_id, partitions in self.by_topic_id.items():
            for partition, ranges in partitions.items():
                pairs.setdefault(topic_id, {}).setdefault(partition, []).extend((r.start, r.end) for r in ranges)
        for s in segments:
            topic_id = ANY_TOPIC_ID if s.topic_id is None else s.topic_id
            pairs.setdefault(topic_id, {}).setdefault(s.partition, []).append((s.start_offset, s.end_offset))
        return ExportedRanges(
            {
                topic_id: {p: tuple(merge_offset_ranges(ranges)) for p, ranges in sorted(partitions.items())}
                for topic_id, partitions in sorted(pairs.items())
            }
        )

    def up_to(self, topic_id: str | None, partition: int) -> int | None:
        """The highest offset exported of ``topic_id``'s partition (the end of its last range);
        ``topic_id`` None (not known): of the one topic id the table holds for it, if one."""
        if topic_id is None:
            held = [t for t in self.topic_ids(partition) if t != ANY_TOPIC_ID]
            topic_id = held[0] if len(held) == 1 else ANY_TOPIC_ID
        ranges = self.of(topic_id, partition)
        return ranges[-1].end if ranges else None

    def topic_ids(self, partition: int) -> list[str]:
        """The topic ids the table holds ranges of for ``partition``."""
        return sorted(t for t, partitions in self.by_topic_id.items() if partitions.get(partition))

    def to_json(self) -> str:
        return json.dumps(
            {
                topic_id: {str(p): [r.as_list() for r in ranges] for p, ranges in sorted(partitions.items())}
                for topic_id, partitions in sorted(self.by_topic_id.items())
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, raw: str) -> ExportedRanges:
        doc = json.loads(raw)
        return cls(
            {
                str(topic_id): {
                    int(p): tuple(OffsetRange(int(s), int(e)) for s, e in ranges) for p, ranges in parts.items()
                }
                for topic_id, parts in doc.items()
            }
        )


def store_topic_ids(store: RemoteLogMetadataStore) -> TopicIdsOf:
    """Segment ids to the topic ids the metadata store knows them under (any state; a segment
    whose metadata is gone, its partition removed, is left out)."""

    def topic_ids(segment_ids: Sequence[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for segment_id in segment_ids:
            try:
                parsed = uuid.UUID(segment_id)
            except ValueError:
                continue
            segment = store.get_segment(parsed)
            if segment is not None:
                found[segment_id] = segment.topic_id_partition.topic_id
        return found

    return topic_ids


def _summary(snapshot: Any) -> Mapping[str, str]:
    return snapshot.summary.additional_properties if snapshot.summary is not None else {}


def _legacy_ranges(snapshots: list[Any], topic_ids_of: TopicIdsOf | None) -> ExportedRanges:
    """The ranges of a table written before topic ids, from its latest export commit on
    (``snapshots``, newest first): each listed segment under the topic id the metadata store knows
    it by; a listed segment the store no longer knows is left out (its partition was removed, so
    it is never planned again); a range no listed segment accounts for (its snapshots expired) is
    ``ANY_TOPIC_ID``'s, as the table meant it when it was written."""
    legacy = json.loads(_summary(snapshots[0])[LEGACY_EXPORTED_PROPERTY])
    if topic_ids_of is None:
        return ExportedRanges().with_segments(
            ExportedSegment(None, int(p), "", int(start), int(end))
            for p, ranges in legacy.items()
            for start, end in ranges
        )
    listed = [
        ExportedSegment.of(item)
        for snapshot in snapshots
        if SEGMENTS_PROPERTY in _summary(snapshot)
        for item in json.loads(_summary(snapshot)[SEGMENTS_PROPERTY])
    ]
    known = dict(topic_ids_of([s.segment_id for s in listed])) if listed else {}
    attributed = [
        ExportedSegment(known[s.segment_id], s.partition, s.segment_id, s.start_offset, s.end_offset)
        for s in listed
        if s.segment_id in known
    ]
    covered = ExportedRanges().with_segments(listed)  # every listed segment, known or not
    unaccounted: list[ExportedSegment] = []
    for partition, ranges in legacy.items():
        listed_ranges = covered.by_topic_id.get(ANY_TOPIC_ID, {}).get(int(partition), ())
        for start, end in ranges:
            for piece_start, piece_end in _uncovered(int(start), int(end), listed_ranges):
                unaccounted.append(ExportedSegment(None, int(partition), "", piece_start, piece_end))
    return ExportedRanges().with_segments([*attributed, *unaccounted])


def _uncovered(start: int, end: int, covered: Iterable[OffsetRange]) -> list[tuple[int, int]]:
    """The parts of [start, end] outside the ``covered`` ranges (sorted, merged)."""
    pieces: list[tuple[int, int]] = []
    at = start
    for r in covered:
        if r.end < at or r.start > end:
            continue
        if r.start > at:
            pieces.append((at, r.start - 1))
        at = max(at, r.end + 1)
    if at <= end:
        pieces.append((at, end))
    return pieces


@dataclass(frozen=True)
class Ancestry:
    """What walking back from the table's current snapshot found: the last export commit
    (``commit``, None when the ancestry holds none) and the ranges it carried forward, or else
    where the walk ended (``end``: the oldest snapshot reached, the table's first one or one whose
    parent is no longer in the table; None when the table has no current snapshot)."""

    ranges: ExportedRanges
    commit: Any = None
    end: Any = None


def read_ancestry(table: Table, topic_ids_of: TopicIdsOf | None = None) -> Ancestry:
    """The current snapshot's ancestry, newest first, up to the last export commit only (another
    writer's snapshots after it change nothing). A table written before topic ids is read by
    ``_legacy_ranges`` (``topic_ids_of``: the metadata store's word on its segments; without it,
    every legacy range is ``ANY_TOPIC_ID``'s)."""
    from pyiceberg.table.snapshots import ancestors_of

    end = None
    ancestry = iter(ancestors_of(table.current_snapshot(), table.metadata))
    for snapshot in ancestry:
        summary = _summary(snapshot)
        if EXPORTED_PROPERTY in summary:
            return Ancestry(ExportedRanges.from_json(summary[EXPORTED_PROPERTY]), commit=snapshot)
        if LEGACY_EXPORTED_PROPERTY in summary:
            return Ancestry(_legacy_ranges([snapshot, *ancestry], topic_ids_of), commit=snapshot)
        end = snapshot
    return Ancestry(ExportedRanges(), end=end)


def exported_ranges(table: Table | None, topic_ids_of: TopicIdsOf | None = None) -> ExportedRanges:
    """What the table's ancestry alone says it holds (``read_ancestry``): the ranges the last
    export commit in it carried forward. An export reads more than this (``export.progress``)."""
    return ExportedRanges() if table is None else read_ancestry(table, topic_ids_of).ranges


def snapshot_position(snapshot: Any) -> tuple[int, int]:
    """A snapshot's place in its table's history: its sequence number (every commit of a
    format-2 table takes the next one), then its timestamp (all a format-1 table has)."""
    return (int(snapshot.sequence_number or 0), int(snapshot.timestamp_ms))


def export_commit_of(table: Table, snapshot: Any, ranges: ExportedRanges) -> ExportCommit:
    """An export commit of ``table`` as the metadata store records it: ``snapshot`` and the
    ranges its summary carries."""
    sequence_number, timestamp_ms = snapshot_position(snapshot)
    return ExportCommit(
        str(table.metadata.table_uuid), int(snapshot.snapshot_id), sequence_number, timestamp_ms, ranges.to_json()
    )


def exported_segments(table: Table) -> list[ExportedSegment]:
    """Every segment the table's snapshots say they hold (oldest first)."""
    found: list[ExportedSegment] = []
    for snapshot in table.snapshots():
        raw = _summary(snapshot).get(SEGMENTS_PROPERTY)
        if raw is not None:
            found.extend(ExportedSegment.of(item) for item in json.loads(raw))
    return found
