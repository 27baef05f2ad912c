"""The store's SQL, built once per dialect with bind parameters.

Building a SQLAlchemy statement and its cache key costs far more than running a small indexed
query on SQLite, so the statements on the hot paths (fencing, segment writes, lookups, listing)
are built here once and executed with parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Dialect,
    Select,
    Table,
    Text,
    bindparam,
    cast,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import literal_column

from tiering_core.metadata.models import (
    Base,
    DeleteRecordsRow,
    EpochHighestRow,
    ExportTableRow,
    GapRow,
    HistoryRow,
    LineageRow,
    PartitionRow,
    SegmentEpochRow,
    SegmentRow,
)
from tiering_core.metadata.values import DELETE_RECORDS_APPLIED


def _table(model: type[Base]) -> Table:
    table = model.__table__
    assert isinstance(table, Table)
    return table


P = _table(PartitionRow)
S = _table(SegmentRow)
E = _table(SegmentEpochRow)
H = _table(EpochHighestRow)
L = _table(LineageRow)
D = _table(DeleteRecordsRow)
G = _table(GapRow)
HI = _table(HistoryRow)
X = _table(ExportTableRow)

# A DeleteRecords applied through the platform (a literal: a DriverQuery binds only named values).
IS_APPLIED = D.c.source == literal_column(f"'{DELETE_RECORDS_APPLIED}'")
# Exactly the partial index's condition, as literals, so the planners use ix_segments_live.
LIVE = S.c.state != literal_column("'DELETE_SEGMENT_FINISHED'")
IS_FINISHED = S.c.state == literal_column("'COPY_SEGMENT_FINISHED'")

# A segment row as decoded into RemoteLogSegmentMetadata (JSON columns as their text) ...
SEGMENT_COLUMNS = (
    S.c.segment_id,
    S.c.partition_id,
    S.c.start_offset,
    S.c.end_offset,
    S.c.max_timestamp,
    S.c.size_bytes,
    S.c.state,
    cast(S.c.leader_epochs, Text).label("leader_epochs"),
    S.c.writer_token,
    S.c.event_time,
    cast(S.c.custom_metadata, Text).label("custom_metadata"),
)
# A listed segment: SEGMENT_COLUMNS but the partition and the custom metadata (read when first
# asked for), all of them in SQLite's listing index.
LISTING_COLUMNS = (
    S.c.segment_id,
    S.c.start_offset,
    S.c.end_offset,
    S.c.max_timestamp,
    S.c.size_bytes,
    S.c.state,
    cast(S.c.leader_epochs, Text).label("leader_epochs"),
    S.c.writer_token,
    S.c.event_time,
)

# The partition row's columns a write needs: transactions.LockedPartition's fields but the clock.
LOCKED_COLUMNS = (
    "id",
    "topic",
    "delete_state",
    "dropped",
    "lease_holder",
    "lease_token",
    "lease_expires_ms",
    "fencing_counter",
    "remote_log_start_offset",
    "finish_counter",
)

# The export table row's columns a lease change needs: transactions.LockedTable's fields but the clock.
LOCKED_TABLE_COLUMNS = ("lease_holder", "lease_token", "lease_expires_ms", "fencing_counter")

WHERE_TIP = (P.c.topic_id == bindparam("tid"), P.c.partition == bindparam("part"))
WHERE_TABLE = (X.c.catalog == bindparam("cat"), X.c.table_name == bindparam("tbl"))
PARTITION_ID = select(P.c.id).where(*WHERE_TIP).scalar_subquery()


class DriverQuery:
    """A SELECT compiled once for one dialect and run on the DBAPI cursor of a connection's
    transaction, returning plain tuples: for a listing of a thousand segments SQLAlchemy's row
    objects cost about a third of reading them."""

    def __init__(self, statement: Select[Any], dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        self.sql = str(compiled)
        self.names = tuple(compiled.positiontup or ()) if compiled.positional else None

    def rows(self, conn: Connection, params: dict[str, Any]) -> list[Any]:
        """The result rows (driver exceptions are the DBAPI's own, not SQLAlchemy's)."""
        args: Any = tuple(params[name] for name in self.names) if self.names is not None else params
        cursor = conn.connection.cursor()
        try:
            cursor.execute(self.sql, args)
            return list(cursor.fetchall())
        finally:
            cursor.close()


class Statements:
    """Prebuilt statements for one dialect (PostgreSQL or SQLite)."""

    def __init__(self, dialect: Dialect) -> None:
        postgres = dialect.name == "postgresql"
        self.postgres = postgres
        # The database clock (ms): PostgreSQL's own, so leases agree across hosts; SQLite's
        # callers pass their clock (the file is local, so it is the same machine's).
        self.now: ColumnElement[int] = (
            cast(func.floor(func.extract("epoch", func.clock_timestamp()) * 1000), BigInteger)
            if postgres
            else bindparam("now", type_=BigInteger)
        )
        dialect_insert: Callable[[Table], Any] = postgresql.insert if postgres else sqlite.insert
        greatest: Callable[..., Any] = func.greatest if postgres else func.max  # SQLite's two-argument max() is scalar
        self.build_leases(dialect_insert)
        self.build_segments(dialect)
        self.build_epochs(dialect_insert, greatest)
        self.build_gaps(dialect_insert)

    def build_leases(self, dialect_insert: Callable[[Table], Any]) -> None:
        """A partition's and an export table's row, locked for a lease change or a write."""
        # The partition row, locked. The clock is read by a separate statement once the lock is
        # held (``clock``): a clock read inside this statement is taken before it waits for the
        # lock, so a lease that expired during the wait would still pass.
        self.lock = select(*(P.c[name] for name in LOCKED_COLUMNS)).where(*WHERE_TIP).with_for_update(of=P)
        self.clock = select(self.now)
        self.insert_partition = dialect_insert(P).on_conflict_do_nothing(index_elements=["topic_id", "partition"])
        self.update_partition = update(P).where(P.c.id == bindparam("pid"))
        self.lease = select(
            P.c.topic, P.c.lease_holder, P.c.lease_token, P.c.lease_expires_ms, self.now.label("db_now")
        ).where(*WHERE_TIP)
        self.history = insert(HI)
        # An export table's lease, as a partition's: the row locked, then the clock.
        self.lock_table = select(*(X.c[name] for name in LOCKED_TABLE_COLUMNS)).where(*WHERE_TABLE).with_for_update()
        self.insert_table = dialect_insert(X).on_conflict_do_nothing(index_elements=["catalog", "table_name"])
        self.update_table = update(X).where(*WHERE_TABLE)
        self.table_lease = select(
            X.c.lease_holder, X.c.lease_token, X.c.lease_expires_ms, self.now.label("db_now")
        ).where(*WHERE_TABLE)

    def build_segments(self, dialect: Dialect) -> None:
        """Segment rows: written, looked up, listed and counted; a partition's lineage."""
        self.insert_segment = insert(S)
        self.segment_by_id = select(*SEGMENT_COLUMNS).where(S.c.segment_id == bindparam("sid"))
        self.update_segment = update(S).where(S.c.segment_id == bindparam("sid"))
        self.segment_with_partition = (
            select(*SEGMENT_COLUMNS, P.c.topic_id, P.c.topic, P.c.partition)
            .join(P, P.c.id == S.c.partition_id)
            .where(S.c.segment_id == bindparam("sid"))
        )
        self.custom_by_ids = select(S.c.segment_id, cast(S.c.custom_metadata, Text)).where(
            S.c.segment_id.in_(bindparam("ids", expanding=True))
        )
        self.live_segment_count = select(func.count()).where(S.c.partition_id == bindparam("pid"), LIVE)
        self.lineage_of = (
            select(L.c.epoch, L.c.start_offset).where(L.c.partition_id == bindparam("pid")).order_by(L.c.epoch)
        )
        self.delete_lineage = delete(L).where(L.c.partition_id == bindparam("pid"))
        self.insert_lineage = insert(L)

        # Ties on start offset and event time go by segment id, the same on both backends: the
        # canonical lowercase UUID text sorts as the UUID's number in C and in ICU/glibc locales.
        order = (S.c.start_offset, S.c.event_time, S.c.segment_id)
        self.live_listing = DriverQuery(
            select(*LISTING_COLUMNS).where(S.c.partition_id == PARTITION_ID, LIVE).order_by(*order), dialect
        )
        self.all_listing = DriverQuery(
            select(*LISTING_COLUMNS).where(S.c.partition_id == PARTITION_ID).order_by(*order), dialect
        )
        # Figures over a partition's live segments, from the index of live segments.
        self.segment_totals = select(func.count(), func.coalesce(func.sum(S.c.size_bytes), 0)).where(
            S.c.partition_id == PARTITION_ID, LIVE, S.c.state.in_(bindparam("states", expanding=True))
        )

    def build_epochs(self, dialect_insert: Callable[[Table], Any], greatest: Callable[..., Any]) -> None:
        """The finished ranges per leader epoch: the highest copied offset and the segment serving an offset."""
        self.insert_epoch_ranges = insert(E)
        self.delete_epoch_ranges = delete(E).where(E.c.segment_id == bindparam("sid"))
        upsert: Any = dialect_insert(H)
        self.raise_epoch_highest = upsert.on_conflict_do_update(
            index_elements=["partition_id", "epoch"],
            set_={
                "highest_offset": greatest(H.c.highest_offset, upsert.excluded.highest_offset),
                "max_span": greatest(H.c.max_span, upsert.excluded.max_span),
            },
        )
        self.highest_offset = (
            select(H.c.highest_offset)
            .join(P, P.c.id == H.c.partition_id)
            .where(*WHERE_TIP, H.c.epoch == bindparam("epoch"))
        )
        # The epochs with finished data in [lowest, upto], newest first (the primary key's order).
        self.epochs_highest_down_from = (
            select(H.c.epoch, H.c.highest_offset)
            .where(
                H.c.partition_id == PARTITION_ID,
                H.c.epoch <= bindparam("upto"),
                H.c.epoch >= bindparam("lowest"),
            )
            .order_by(H.c.epoch.desc())
            .limit(bindparam("n"))
        )
        # The latest finished range of the epoch holding the offset. Ranges starting more than the
        # epoch's widest range below the offset cannot hold it, so the index scan stays short.
        offset = bindparam("offset", type_=BigInteger)
        covering = (
            select(E.c.segment_id)
            .join(P, P.c.id == E.c.partition_id)
            .join(H, (H.c.partition_id == P.c.id) & (H.c.epoch == bindparam("epoch")))
            .where(
                *WHERE_TIP,
                E.c.epoch == bindparam("epoch"),
                E.c.start_offset <= offset,
                E.c.start_offset >= offset - H.c.max_span,
                E.c.end_offset >= offset,
            )
            .order_by(E.c.finish_seq.desc())
            .limit(1)
            .scalar_subquery()
        )
        self.segment_for = select(*SEGMENT_COLUMNS).where(S.c.segment_id == covering, IS_FINISHED)

    def build_gaps(self, dialect_insert: Callable[[Table], Any]) -> None:
        """Tiering gaps, and the highest DeleteRecords applied through the platform."""
        self.insert_gap = dialect_insert(G).on_conflict_do_nothing(
            index_elements=["partition_id", "start_offset", "end_offset"]
        )
        # One gap, RETURNING whether it was added (a row count is not reliable for an upsert).
        self.add_gap = self.insert_gap.returning(G.c.id)
        # The gaps a new log start (``start``) cuts through, first detected first, and every gap
        # starting below it.
        self.gaps_across = (
            select(G.c.end_offset, G.c.detected_ms)
            .where(
                G.c.partition_id == bindparam("pid"),
                G.c.start_offset < bindparam("start"),
                G.c.end_offset >= bindparam("start"),
            )
            .order_by(G.c.detected_ms, G.c.id)
        )
        self.delete_gaps_below = delete(G).where(
            G.c.partition_id == bindparam("pid"), G.c.start_offset < bindparam("start")
        )
        self.highest_delete_records = select(func.max(D.c.before_offset)).where(
            D.c.partition_id == bindparam("pid"), IS_APPLIED
        )
