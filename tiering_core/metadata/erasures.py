"""The audit trail of erasures by record key (``tiering_erasures``, ``tiering erase``): per
erasure and partition, the SHA-256 of each erased key, who asked, when, the segments copied
again without the keys and the records removed; per erasure and export table
(``tiering_table_erasures``), the rows deleted from the table, the data files holding the keys
deleted and the snapshots expired. Per partition it also names the broker's local segments that
still held the keys on the erasing host (``LocalSegments``): the platform cannot change the
broker's files, so the trail says which and when local retention removes them. It never holds a
key: only its digest, so the trail can show that a key was erased without being a copy of it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import Table, func, insert, literal_column, select, union_all, update

from tiering_core.metadata.models import ErasureRow, TableErasureRow
from tiering_core.metadata.transactions import StoreCore

_erasures = ErasureRow.__table__
assert isinstance(_erasures, Table)
ERASURES: Table = _erasures
_table_erasures = TableErasureRow.__table__
assert isinstance(_table_erasures, Table)
TABLE_ERASURES: Table = _table_erasures

#: An erasure of a partition still going (or killed part-way), and one that ended.
STARTED = "started"
FINISHED = "finished"
#: A table's erasure that could not expire a snapshot holding the keys (a tag or a branch holds it).
HELD = "held"


@dataclass(frozen=True)
class SegmentErasure:
    """One segment copied again without the erased keys: the old and the new segment id (None
    while the copy is under way: a run killed then left it so, and its rerun erases it again
    if the switch did not land)."""

    old_segment_id: str
    new_segment_id: str | None
    records_removed: int


@dataclass(frozen=True)
class LocalSegment:
    """A segment of the broker's local log still holding records of the erased keys: by base
    offset and file name, the count of those records, its largest record timestamp (what local
    retention by time measures, -1: none), whether it is the active segment (retention never
    removes it before it rolls) and whether the tier holds its offsets (a tiered topic's local
    segment is removed only once copied; one not copied yet is copied with the keys).
    ``removed_by_time_ms``: its largest timestamp plus the effective ``local.retention.ms``
    (None: never by time, unknown, or the active segment)."""

    base_offset: int
    file_name: str
    records: int
    largest_timestamp_ms: int
    active: bool = False
    copied: bool = True
    removed_by_time_ms: int | None = None


@dataclass(frozen=True)
class LocalSegments:
    """What a partition's local log on the erasing host still held of the keys: ``log_dir`` read
    (None: not checked, ``not_checked`` says why), the segments holding them, and the topic's
    effective ``local.retention.ms`` and ``local.retention.bytes`` then (None: not known here)."""

    log_dir: str | None
    segments: tuple[LocalSegment, ...] = ()
    segments_read: int = 0
    local_retention_ms: int | None = None
    local_retention_bytes: int | None = None
    not_checked: str | None = None
    checked_ms: int = 0

    @property
    def records(self) -> int:
        """The keys' records the local segments still held."""
        return sum(s.records for s in self.segments)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: the store's column, ``--json`` and XCom."""
        return {**asdict(self), "segments": [asdict(s) for s in self.segments], "records": self.records}

    @classmethod
    def from_dict(cls, found: dict[str, Any]) -> LocalSegments:
        """Back from ``to_dict`` (the store's column)."""
        values = {k: v for k, v in found.items() if k not in ("segments", "records")}
        return cls(**values, segments=tuple(LocalSegment(**s) for s in found.get("segments", ())))


@dataclass(frozen=True)
class ErasureRecord:
    """One partition's part of an erasure (``erasure_id`` names the request across partitions)."""

    erasure_id: str
    topic: str
    topic_id: str
    partition: int
    key_sha256: tuple[str, ...]
    requested_by: str
    started_ms: int
    segments: tuple[SegmentErasure, ...] = ()
    segments_read: int = 0
    outcome: str = STARTED
    finished_ms: int | None = None
    #: The broker's local segments still holding the keys (None: not looked at).
    local_segments: LocalSegments | None = None

    @property
    def records_removed(self) -> int:
        """Of the segments switched (a copy under way is not counted)."""
        return sum(s.records_removed for s in self.segments if s.new_segment_id is not None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, for ``erase --status --json``."""
        local = None if self.local_segments is None else self.local_segments.to_dict()
        found = {**asdict(self), "key_sha256": list(self.key_sha256), "records_removed": self.records_removed}
        return {**found, "local_segments": local}


@dataclass(frozen=True)
class TableErasureRecord:
    """One export table's part of an erasure: the table by name and Iceberg UUID, what was
    deleted and expired, and ``pending``: the files to delete once the expiry landed (emptied when
    they are deleted, by this run or by the next after a kill)."""

    erasure_id: str
    topic: str
    table: str
    table_uuid: str
    started_ms: int
    rows_deleted: int = 0
    data_files_deleted: int = 0
    snapshots_expired: int = 0
    pending: tuple[str, ...] = ()
    outcome: str = STARTED
    finished_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, for ``erase --status --json`` (the pending files by count)."""
        found = asdict(self)
        found["pending"] = len(self.pending)
        return found


@dataclass(frozen=True)
class TableErasureFigures:
    """A topic's erasures from its export tables: how many tables' erasures, the rows they deleted
    and the snapshots they expired."""

    topic: str
    erasures: int
    rows_deleted: int
    snapshots_expired: int


@dataclass(frozen=True)
class ErasureFigures:
    """A topic's erasures of one outcome: how many partitions' erasures, and the records they removed."""

    topic: str
    outcome: str
    erasures: int
    records_removed: int


@dataclass(frozen=True)
class ErasureTotals:
    """The audit trail's figures: the partitions' erasures per topic and outcome, the export
    tables' per topic."""

    partitions: tuple[ErasureFigures, ...] = ()
    tables: tuple[TableErasureFigures, ...] = ()


class ErasureStore(StoreCore):
    """Recording erasures as they go and reading them back (module docstring)."""

    def record_erasure(self, record: ErasureRecord) -> None:
        """Add or update ``record``'s row (one per erasure id, topic id and partition)."""
        values = {
            "topic": record.topic,
            "key_sha256": json.dumps(list(record.key_sha256)),
            "requested_by": record.requested_by,
            "segments": json.dumps([[s.old_segment_id, s.new_segment_id, s.records_removed] for s in record.segments]),
            "records_removed": record.records_removed,
            "segments_read": record.segments_read,
            "outcome": record.outcome,
            "started_ms": record.started_ms,
            "finished_ms": record.finished_ms,
            "local_segments": None if record.local_segments is None else json.dumps(record.local_segments.to_dict()),
        }
        e = ERASURES.c
        where = (e.erasure_id == record.erasure_id, e.topic_id == record.topic_id, e.partition == record.partition)
        with self._write() as conn:
            if conn.execute(select(e.id).where(*where)).first() is None:
                key = {"erasure_id": record.erasure_id, "topic_id": record.topic_id, "partition": record.partition}
                conn.execute(insert(ERASURES), {**key, **values})
            else:
                conn.execute(update(ERASURES).where(*where).values(**values))

    def erasure_figures(self, topic: str | None = None) -> ErasureTotals:
        """Per topic and outcome, the partitions' erasures and the records removed; per topic, the
        export tables' erasures, the rows deleted and the snapshots expired (one statement, the two
        trails' groups in a union: metrics)."""
        e, t = ERASURES.c, TABLE_ERASURES.c
        partitions = select(
            literal_column("'partition'"),
            e.topic,
            e.outcome,
            func.count(),
            func.coalesce(func.sum(e.records_removed), 0),
            literal_column("0"),
        ).group_by(e.topic, e.outcome)
        tables = select(
            literal_column("'table'"),
            t.topic,
            literal_column("''"),
            func.count(),
            func.coalesce(func.sum(t.rows_deleted), 0),
            func.coalesce(func.sum(t.snapshots_expired), 0),
        ).group_by(t.topic)
        if topic is not None:
            partitions, tables = partitions.where(e.topic == topic), tables.where(t.topic == topic)
        with self._read() as conn:
            rows = sorted(conn.execute(union_all(partitions, tables)).all(), key=lambda r: (str(r[1]), str(r[2])))
        return ErasureTotals(
            tuple(ErasureFigures(str(tp), str(o), int(n), int(a)) for k, tp, o, n, a, _ in rows if k == "partition"),
            tuple(TableErasureFigures(str(tp), int(n), int(a), int(b)) for k, tp, _, n, a, b in rows if k == "table"),
        )

    def erasures(self, topic: str | None = None, limit: int = 1000) -> list[ErasureRecord]:
        """The newest ``limit`` erasures (of ``topic``), newest first."""
        e = ERASURES.c
        query = select(ERASURES).order_by(e.started_ms.desc(), e.id.desc()).limit(limit)
        if topic is not None:
            query = query.where(e.topic == topic)
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [
            ErasureRecord(
                row.erasure_id,
                row.topic,
                row.topic_id,
                row.partition,
                tuple(json.loads(row.key_sha256)),
                row.requested_by,
                row.started_ms,
                tuple(
                    SegmentErasure(str(s[0]), None if s[1] is None else str(s[1]), int(s[2]))
                    for s in json.loads(row.segments)
                ),
                row.segments_read,
                row.outcome,
                row.finished_ms,
                None if row.local_segments is None else LocalSegments.from_dict(json.loads(row.local_segments)),
            )
            for row in rows
        ]

    def record_table_erasure(self, record: TableErasureRecord) -> None:
        """Add or update ``record``'s row (one per erasure id and table UUID)."""
        values = {
            "topic": record.topic,
            "table_name": record.table,
            "rows_deleted": record.rows_deleted,
            "data_files_deleted": record.data_files_deleted,
            "snapshots_expired": record.snapshots_expired,
            "pending": json.dumps(list(record.pending)),
            "outcome": record.outcome,
            "started_ms": record.started_ms,
            "finished_ms": record.finished_ms,
        }
        t = TABLE_ERASURES.c
        where = (t.erasure_id == record.erasure_id, t.table_uuid == record.table_uuid)
        with self._write() as conn:
            if conn.execute(select(t.id).where(*where)).first() is None:
                key = {"erasure_id": record.erasure_id, "table_uuid": record.table_uuid}
                conn.execute(insert(TABLE_ERASURES), {**key, **values})
            else:
                conn.execute(update(TABLE_ERASURES).where(*where).values(**values))

    def table_erasures(
        self, topic: str | None = None, *, table_uuid: str | None = None, limit: int = 1000
    ) -> list[TableErasureRecord]:
        """The newest ``limit`` table erasures (of ``topic``, of the table ``table_uuid``), newest first."""
        t = TABLE_ERASURES.c
        query = select(TABLE_ERASURES).order_by(t.started_ms.desc(), t.id.desc()).limit(limit)
        if topic is not None:
            query = query.where(t.topic == topic)
        if table_uuid is not None:
            query = query.where(t.table_uuid == table_uuid)
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [
            TableErasureRecord(
                row.erasure_id,
                row.topic,
                row.table_name,
                row.table_uuid,
                row.started_ms,
                row.rows_deleted,
                row.data_files_deleted,
                row.snapshots_expired,
                tuple(str(p) for p in json.loads(row.pending)),
                row.outcome,
                row.finished_ms,
            )
            for row in rows
        ]
