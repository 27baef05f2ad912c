"""The one transaction helper of the metadata store: every write locks its partition row first.

A write transaction first locks the partition row (PostgreSQL ``SELECT ... FOR UPDATE``; SQLite
``BEGIN IMMEDIATE``) and checks it is the partition's topic by name as well as by id (a topic id
names one topic for its whole life: another name is refused), then reads the database clock and
checks the writer's lease token and expiry against it, so a fenced writer lands nothing (and a
lease that ran out while waiting for the lock is expired). Reads are plain transactions, so a
write is visible to the next query (read-your-writes, across processes too). An export table's
lease row is locked and checked the same way (``refuse_stale``, the one fencing rule). Each concept
of the store (segments, partitions, leases, lineage and observations) builds on ``StoreCore``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from tiering_core.config.metadata import DatabaseTimeouts, safe_url
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.engine import describe_driver_error
from tiering_core.metadata.errors import FencedError, MetadataStoreError, check_topic_name
from tiering_core.metadata.models import registered_partition
from tiering_core.metadata.queries import Statements
from tiering_core.metadata.values import Lease


def now_ms() -> int:
    return int(time.time() * 1000)


def tip_params(tip: TopicIdPartition) -> dict[str, Any]:
    return {"tid": tip.topic_id, "part": tip.partition}


def tip_of(row: Any) -> TopicIdPartition:
    return TopicIdPartition(row.topic_id, TopicPartition(row.topic, row.partition))


@dataclass(slots=True)
class LockedPartition:
    """The columns of a locked partition row that writes need (``queries.LOCKED_COLUMNS``), and
    the database clock (ms) read after the lock was taken."""

    id: int
    topic: str
    delete_state: str | None
    dropped: bool
    lease_holder: str | None
    lease_token: int
    lease_expires_ms: int
    fencing_counter: int
    remote_log_start_offset: int | None
    finish_counter: int
    db_now: int

    @property
    def removal(self) -> str | None:
        """How far the partition's removal went ("removed" once dropped), None while it is live:
        a removed or being-removed partition is never copied to again."""
        return "removed" if self.dropped else self.delete_state


@dataclass(slots=True)
class LockedTable:
    """An export table's locked row (``queries.LOCKED_TABLE_COLUMNS``) and the database clock (ms)
    read after the lock was taken."""

    catalog: str
    table: str
    lease_holder: str | None
    lease_token: int
    lease_expires_ms: int
    fencing_counter: int
    db_now: int


def refuse_stale(subject: str, row: LockedPartition | LockedTable, token: int, holder: str) -> None:
    """FencedError unless ``token`` of ``holder`` is the locked row's current, unexpired lease
    (the one fencing rule of partitions and export tables alike; ``subject`` names the row)."""
    if row.lease_token != token:
        raise FencedError(
            f"{subject}: lease token {token} of {holder} is fenced "
            f"(current token {row.lease_token} held by {row.lease_holder})"
        )
    if row.lease_holder is None:
        raise FencedError(f"{subject}: lease token {token} of {holder} was released")
    if row.lease_holder != holder:
        raise FencedError(f"{subject}: lease token {token} is held by {row.lease_holder}, not {holder}")
    if row.lease_expires_ms <= row.db_now:
        raise FencedError(
            f"{subject}: lease token {token} of {holder} expired {row.db_now - row.lease_expires_ms} ms ago"
        )


class StoreCore:
    """Transactions, the database clock and the locked partition row, shared by every concept."""

    url: str
    timeouts: DatabaseTimeouts
    engine: Engine
    _writer: Engine
    _pg: bool
    _q: Statements
    _driver_error: type[Exception]

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except DBAPIError as exc:
            reason = describe_driver_error(exc.orig, self.timeouts)
            raise MetadataStoreError(f"metadata store {safe_url(self.url)}: {reason}") from exc
        except self._driver_error as exc:  # from a DriverQuery, which bypasses SQLAlchemy
            reason = describe_driver_error(exc, self.timeouts)
            raise MetadataStoreError(f"metadata store {safe_url(self.url)}: {reason}") from exc

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """One write transaction (SQLite: holds the write lock from BEGIN)."""
        with self._guard(), self._writer.begin() as conn:
            yield conn

    @contextmanager
    def _fenced_write(
        self, lease: Lease, tip: TopicIdPartition | None = None
    ) -> Iterator[tuple[Connection, LockedPartition]]:
        """A write transaction holding the partition row locked, if ``lease`` is its current,
        unexpired lease (FencedError otherwise; also if ``tip`` is another partition's)."""
        if tip is not None and tip != lease.topic_id_partition:
            raise FencedError(f"the lease of {lease.topic_id_partition} cannot write {tip}")
        with self._write() as conn:
            yield conn, self._fenced(conn, lease)

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """A read transaction."""
        with self._guard(), self.engine.connect() as conn:
            yield conn

    def _db_now(self, conn: Connection) -> int:
        """The database clock (ms) inside ``conn``'s transaction (SQLite: this host's clock)."""
        return int(conn.execute(self._q.clock).scalar_one()) if self._pg else now_ms()

    def _clock(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` plus this host's clock for SQLite (PostgreSQL reads its own clock)."""
        if not self._pg:
            params["now"] = now_ms()
        return params

    def _lock(self, conn: Connection, tip: TopicIdPartition) -> LockedPartition | None:
        """The partition row, locked until the transaction ends, with the clock read after the lock.

        On PostgreSQL the clock is a second statement: one inside the locking SELECT is read
        before the lock wait, so a lease that expired while waiting would pass and a new expiry
        would come out short by the wait. SQLite's write lock is taken at BEGIN, before this.
        """
        row = conn.execute(self._q.lock, tip_params(tip)).first()
        if row is None:
            return None
        check_topic_name(tip.topic_id, row.topic, tip.topic)
        db_now = int(conn.execute(self._q.clock).scalar_one()) if self._pg else now_ms()
        return LockedPartition(**row._asdict(), db_now=db_now)

    def _ensure(self, conn: Connection, tip: TopicIdPartition) -> LockedPartition:
        """The locked partition row, registered first if the store does not know it yet."""
        row = self._lock(conn, tip)
        if row is not None:
            return row
        conn.execute(self._q.insert_partition, registered_partition(tip, now_ms()))
        row = self._lock(conn, tip)
        if row is None:
            raise MetadataStoreError(f"{tip}: could not register the partition")
        return row

    def _fenced(self, conn: Connection, lease: Lease) -> LockedPartition:
        """The locked partition row if ``lease`` is its current, unexpired lease; else FencedError."""
        tip = lease.topic_id_partition
        row = self._lock(conn, tip)
        if row is None:
            raise FencedError(f"{tip}: partition unknown to the metadata store; acquire a lease first")
        refuse_stale(str(tip), row, lease.token, lease.holder)
        return row

    def _lock_table(self, conn: Connection, catalog: str, table: str) -> LockedTable | None:
        """An export table's row, locked until the transaction ends, with the clock read after
        the lock (as ``_lock`` does for a partition)."""
        row = conn.execute(self._q.lock_table, {"cat": catalog, "tbl": table}).first()
        if row is None:
            return None
        db_now = int(conn.execute(self._q.clock).scalar_one()) if self._pg else now_ms()
        return LockedTable(catalog, table, **row._asdict(), db_now=db_now)

    def _ensure_table(self, conn: Connection, catalog: str, table: str) -> LockedTable:
        """The locked export table row, made first if the store does not know the table yet."""
        row = self._lock_table(conn, catalog, table)
        if row is not None:
            return row
        now = now_ms()
        conn.execute(
            self._q.insert_table,
            {
                "catalog": catalog,
                "table_name": table,
                "lease_holder": None,
                "lease_token": 0,
                "lease_expires_ms": 0,
                "fencing_counter": 0,
                "created_ms": now,
                "updated_ms": now,
            },
        )
        row = self._lock_table(conn, catalog, table)
        if row is None:
            raise MetadataStoreError(f"export table {catalog}.{table}: could not register it")
        return row

    def _update_table(self, conn: Connection, row: LockedTable, **values: Any) -> None:
        """Update the locked export table row, and ``row`` with it."""
        conn.execute(self._q.update_table, {"cat": row.catalog, "tbl": row.table, "updated_ms": row.db_now, **values})
        for name, value in values.items():
            setattr(row, name, value)

    def _update_partition(self, conn: Connection, row: LockedPartition, **values: Any) -> None:
        """Update the locked row, and ``row`` with it (later steps of the transaction see the change)."""
        conn.execute(self._q.update_partition, {"pid": row.id, "updated_ms": row.db_now, **values})
        for name, value in values.items():
            if name in LockedPartition.__dataclass_fields__:
                setattr(row, name, value)

    def _history(
        self,
        conn: Connection,
        partition: LockedPartition,
        lease: Lease,
        to_state: str,
        *,
        segment_id: str | None = None,
        from_state: str | None = None,
    ) -> None:
        """One row of the append-only state history, stamped with the lease and the database clock."""
        conn.execute(
            self._q.history,
            {
                "partition_id": partition.id,
                "segment_id": segment_id,
                "from_state": from_state,
                "to_state": to_state,
                "at_ms": partition.db_now,
                "token": lease.token,
                "run_id": lease.run_id,
            },
        )
