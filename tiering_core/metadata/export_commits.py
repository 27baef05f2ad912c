"""The export commits an export landed, recorded once the catalog confirmed them
(``tiering_export_commits``): per Iceberg table UUID and snapshot id, the commit's place in the
table's history and the exported ranges its summary carries.

A table's own snapshots say what it holds until snapshot expiry removes every export commit from
them; then this record is what is left (docs/export.md, "Exactly once"). A commit is recorded
under the table's export lease, fenced by the one rule (``refuse_stale``) on the lease's row
locked in the same transaction, so an export that lost the table records nothing; recording the
same snapshot again changes nothing (an export records the last export commit of the ancestry
when it takes the table, in case the one that landed it could not).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from sqlalchemy import BigInteger, Dialect, Table, and_, bindparam, or_, select
from sqlalchemy.dialects import postgresql, sqlite

from tiering_core.metadata.errors import FencedError
from tiering_core.metadata.models import ExportCommitRow
from tiering_core.metadata.transactions import StoreCore, refuse_stale
from tiering_core.metadata.values import ExportCommit, TableLease

_commits = ExportCommitRow.__table__
assert isinstance(_commits, Table)
COMMITS: Table = _commits

#: A commit row as read back into an ``ExportCommit``.
READ_COLUMNS = ("table_uuid", "snapshot_id", "sequence_number", "timestamp_ms", "exported")


class ExportCommitStatements:
    """The export commit statements for one dialect, built once per store."""

    def __init__(self, dialect: Dialect) -> None:
        dialect_insert = postgresql.insert if dialect.name == "postgresql" else sqlite.insert
        c = COMMITS.c
        # RETURNING says whether the row was made (a row count is not reliable for an upsert).
        self.record = (
            dialect_insert(COMMITS)
            .on_conflict_do_nothing(index_elements=["table_uuid", "snapshot_id"])
            .returning(c.snapshot_id)
        )
        columns = [c[name] for name in READ_COLUMNS]
        self.by_snapshot = select(*columns).where(
            c.table_uuid == bindparam("uuid"), c.snapshot_id == bindparam("snapshot_id")
        )
        newest_first = (c.sequence_number.desc(), c.timestamp_ms.desc(), c.snapshot_id.desc())
        self.latest = select(*columns).where(c.table_uuid == bindparam("uuid")).order_by(*newest_first).limit(1)
        seq, ts = bindparam("seq", type_=BigInteger), bindparam("ts", type_=BigInteger)
        before = or_(c.sequence_number < seq, and_(c.sequence_number == seq, c.timestamp_ms < ts))
        self.latest_before = (
            select(*columns).where(c.table_uuid == bindparam("uuid"), before).order_by(*newest_first).limit(1)
        )


def _commit_of(row: Any) -> ExportCommit:
    return ExportCommit(str(row[0]), int(row[1]), int(row[2]), int(row[3]), str(row[4]))


class ExportCommitStore(StoreCore):
    """Recording an export's confirmed commits and reading them back (module docstring)."""

    @cached_property
    def _xq(self) -> ExportCommitStatements:
        return ExportCommitStatements(self.engine.dialect)

    def record_export_commit(self, lease: TableLease, commit: ExportCommit) -> bool:
        """Record ``commit`` of the table ``lease`` holds, if ``lease`` is still the table's
        current, unexpired export lease (``FencedError`` otherwise, and nothing is recorded).
        False when the snapshot was recorded already (the first record stands)."""
        with self._write() as conn:
            row = self._lock_table(conn, lease.catalog, lease.table)
            if row is None:
                raise FencedError(f"{lease.subject}: table unknown to the metadata store; acquire a lease first")
            refuse_stale(lease.subject, row, lease.token, lease.holder)
            made = conn.execute(
                self._xq.record,
                {
                    "table_uuid": commit.table_uuid,
                    "snapshot_id": commit.snapshot_id,
                    "catalog": lease.catalog,
                    "table_name": lease.table,
                    "sequence_number": commit.sequence_number,
                    "timestamp_ms": commit.timestamp_ms,
                    "exported": commit.exported,
                    "lease_token": lease.token,
                    "recorded_ms": row.db_now,
                },
            ).first()
        return made is not None

    def export_commit(self, table_uuid: str, snapshot_id: int) -> ExportCommit | None:
        """The recorded commit of ``snapshot_id`` to the table ``table_uuid``, or None."""
        with self._read() as conn:
            row = conn.execute(self._xq.by_snapshot, {"uuid": table_uuid, "snapshot_id": snapshot_id}).first()
        return None if row is None else _commit_of(row)

    def latest_export_commit(self, table_uuid: str, *, before: tuple[int, int] | None = None) -> ExportCommit | None:
        """The table's newest recorded commit (by its place in the table's history), or the
        newest placed before ``before`` (a sequence number and timestamp); None when none is."""
        with self._read() as conn:
            if before is None:
                row = conn.execute(self._xq.latest, {"uuid": table_uuid}).first()
            else:
                params = {"uuid": table_uuid, "seq": before[0], "ts": before[1]}
                row = conn.execute(self._xq.latest_before, params).first()
        return None if row is None else _commit_of(row)
