"""Leases and fencing (docs/kafka-rules.md section 4; docs/architecture.md, holding a partition):
one writer per partition, and a stale one lands nothing.

A lease is the right to write one partition's metadata until it expires by the database clock.
Every acquired lease takes the partition's next fencing token, which only ever grows; every
write checks its lease's token against the current one while holding the partition row locked
(``StoreCore._fenced``), so a writer whose lease expired or was taken over is refused.

An unexpired lease blocks every other holder, with one exception: a later try of the same
scheduled task instance (``TaskAttempt``: same DAG, run, task and map index) takes over the lease
its previous try left, at once. That try ended (killed, or judged gone) before the scheduler
started the retry, so waiting for its lease to expire would only fail the retry too; the
takeover's new token fences the previous try should it still be writing somewhere.

An Iceberg table the export writes has a lease of its own by the same rules (``TableLease``, a
row of ``tiering_export_tables``): one export of a table at a time, whichever runs it (the
command, the Spark app, a retry of the same task taking over); docs/export.md says how its token
fences an export's commits and attempts.
"""

from __future__ import annotations

import logging

from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.errors import FencedError, LeaseHeldError, check_topic_name
from tiering_core.metadata.transactions import LockedPartition, LockedTable, StoreCore, refuse_stale, tip_params
from tiering_core.metadata.values import Lease, TableLease, TaskAttempt

log = logging.getLogger(__name__)

#: The store's column widths of an export table's catalog name and ``namespace.name``.
MAX_CATALOG_CHARS = 255
MAX_TABLE_CHARS = 1024


def grant(
    subject: str,
    row: LockedPartition | LockedTable,
    holder: str,
    attempt: TaskAttempt | None,
    ttl_ms: int,
) -> tuple[int, int]:
    """The fencing token and expiry of a lease newly granted to ``holder`` over the locked ``row``.

    LeaseHeldError while another lease (even one of the same holder name) is unexpired, unless
    ``attempt`` (a scheduled task's try, whose name ``holder`` must be) is a later try of the task
    instance holding it: a retry takes over its killed previous try's lease."""
    kind = holder.partition(":")[0]
    if attempt is not None and holder != attempt.holder(kind):
        raise ValueError(f"lease holder {holder!r} is not the name of {attempt} ({attempt.holder(kind)!r})")
    unexpired = row.lease_holder is not None and row.lease_expires_ms > row.db_now
    if unexpired and not (attempt is not None and attempt.takes_over(str(row.lease_holder), kind)):
        raise LeaseHeldError(
            f"{subject}: lease held by {row.lease_holder} (token {row.lease_token}) until "
            f"{row.lease_expires_ms} ms since the epoch, {row.lease_expires_ms - row.db_now} ms from now"
        )
    if unexpired:
        log.warning(
            "%s: %s takes over the lease of its previous try %s (token %s)",
            subject,
            holder,
            row.lease_holder,
            row.lease_token,
        )
    return row.fencing_counter + 1, row.db_now + ttl_ms


class LeaseStore(StoreCore):
    """Acquiring, renewing and releasing partition leases and export table leases."""

    lease_ms: int

    def _ttl(self, ttl_ms: int | None) -> int:
        ttl = self.lease_ms if ttl_ms is None else ttl_ms
        if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
            raise ValueError(f"lease time to live must be a positive number of milliseconds, not {ttl!r}")
        return ttl

    def acquire_lease(
        self,
        tip: TopicIdPartition,
        holder: str,
        *,
        ttl_ms: int | None = None,
        run_id: str | None = None,
        attempt: TaskAttempt | None = None,
    ) -> Lease:
        """Take the partition's lease with the next fencing token (tokens only ever grow).

        Raises LeaseHeldError while another lease (even one of the same holder name) is unexpired,
        unless ``attempt`` (a scheduled task's try, whose name ``holder`` must be) is a later try
        of the task instance holding it: a retry takes over its killed previous try's lease.
        """
        ttl = self._ttl(ttl_ms)
        with self._write() as conn:
            row = self._ensure(conn, tip)
            token, expires = grant(str(tip), row, holder, attempt, ttl)
            self._update_partition(
                conn, row, fencing_counter=token, lease_token=token, lease_holder=holder, lease_expires_ms=expires
            )
        return Lease(tip, holder, token, expires, run_id)

    def renew_lease(self, lease: Lease, *, ttl_ms: int | None = None) -> Lease:
        """Extend a current, unexpired lease (FencedError otherwise); same token."""
        ttl = self._ttl(ttl_ms)
        with self._fenced_write(lease) as (conn, row):
            expires = row.db_now + ttl
            self._update_partition(conn, row, lease_expires_ms=expires)
        return Lease(lease.topic_id_partition, lease.holder, lease.token, expires, lease.run_id)

    def release_lease(self, lease: Lease) -> None:
        """Give the lease up now (also after it expired, if nobody took it); FencedError if superseded."""
        with self._write() as conn:
            row = self._lock(conn, lease.topic_id_partition)
            if row is None or row.lease_token != lease.token or row.lease_holder not in (None, lease.holder):
                raise FencedError(f"{lease.topic_id_partition}: lease token {lease.token} is no longer current")
            self._update_partition(conn, row, lease_holder=None, lease_expires_ms=0)

    def release_lease_if_current(self, lease: Lease) -> bool:
        """``release_lease`` at the end of a run: False, and nothing to give up, when a newer run
        has taken the partition meanwhile (the run's own writes were fenced already)."""
        try:
            self.release_lease(lease)
        except FencedError:
            return False
        return True

    def current_lease(self, tip: TopicIdPartition) -> Lease | None:
        """The partition's unexpired lease (its run may still be writing), or None."""
        with self._read() as conn:
            row = conn.execute(self._q.lease, self._clock(tip_params(tip))).first()
        if row is not None:
            check_topic_name(tip.topic_id, row.topic, tip.topic)
        if row is None or row.lease_holder is None or row.lease_expires_ms <= row.db_now:
            return None
        return Lease(tip, row.lease_holder, row.lease_token, row.lease_expires_ms)

    def latest_lease_token(self, tip: TopicIdPartition) -> tuple[int, str | None] | None:
        """The partition's current fencing token and its holder (None once released), expired or
        not: a token past a run's own says a newer run took the partition, even if that run has
        since let its lease lapse. None for a partition the store does not know."""
        with self._read() as conn:
            row = conn.execute(self._q.lease, self._clock(tip_params(tip))).first()
        return None if row is None else (int(row.lease_token), row.lease_holder)

    def is_lease_active(self, tip: TopicIdPartition) -> bool:
        """True while some run holds an unexpired lease (a COPY_SEGMENT_STARTED may be in flight)."""
        return self.current_lease(tip) is not None

    # --- export tables ------------------------------------------------------------------------

    @staticmethod
    def _table_key(catalog: str, table: str) -> dict[str, str]:
        if not catalog or len(catalog) > MAX_CATALOG_CHARS:
            raise ValueError(f"export catalog name must have 1 to {MAX_CATALOG_CHARS} characters, not {len(catalog)}")
        if not table or len(table) > MAX_TABLE_CHARS:
            raise ValueError(f"export table name must have 1 to {MAX_TABLE_CHARS} characters, not {len(table)}")
        return {"cat": catalog, "tbl": table}

    def acquire_table_lease(
        self,
        catalog: str,
        table: str,
        holder: str,
        *,
        ttl_ms: int | None = None,
        run_id: str | None = None,
        attempt: TaskAttempt | None = None,
    ) -> TableLease:
        """Take the export lease of ``catalog``'s ``table`` (``namespace.name``) with the table's
        next fencing token, by ``acquire_lease``'s rules (LeaseHeldError while another export
        holds it, a later try of the same task instance taking over at once)."""
        ttl = self._ttl(ttl_ms)
        self._table_key(catalog, table)
        with self._write() as conn:
            row = self._ensure_table(conn, catalog, table)
            token, expires = grant(f"{catalog}.{table}", row, holder, attempt, ttl)
            self._update_table(
                conn, row, fencing_counter=token, lease_token=token, lease_holder=holder, lease_expires_ms=expires
            )
        return TableLease(catalog, table, holder, token, expires, run_id)

    def renew_table_lease(self, lease: TableLease, *, ttl_ms: int | None = None) -> TableLease:
        """Extend a current, unexpired table lease (FencedError otherwise); same token. Also the
        check an export makes just before it commits: the lease is still its own."""
        ttl = self._ttl(ttl_ms)
        with self._write() as conn:
            row = self._lock_table(conn, lease.catalog, lease.table)
            if row is None:
                raise FencedError(f"{lease.subject}: table unknown to the metadata store; acquire a lease first")
            refuse_stale(lease.subject, row, lease.token, lease.holder)
            expires = row.db_now + ttl
            self._update_table(conn, row, lease_expires_ms=expires)
        return TableLease(lease.catalog, lease.table, lease.holder, lease.token, expires, lease.run_id)

    def release_table_lease(self, lease: TableLease) -> None:
        """Give the table lease up now (also after it expired, if nobody took it); FencedError if
        superseded."""
        with self._write() as conn:
            row = self._lock_table(conn, lease.catalog, lease.table)
            if row is None or row.lease_token != lease.token or row.lease_holder not in (None, lease.holder):
                raise FencedError(f"{lease.subject}: lease token {lease.token} is no longer current")
            self._update_table(conn, row, lease_holder=None, lease_expires_ms=0)

    def release_table_lease_if_current(self, lease: TableLease) -> bool:
        """``release_table_lease`` at the end of an export: False when a newer one took the table."""
        try:
            self.release_table_lease(lease)
        except FencedError:
            return False
        return True

    def current_table_lease(self, catalog: str, table: str) -> TableLease | None:
        """The table's unexpired export lease (its export may still be writing), or None."""
        with self._read() as conn:
            row = conn.execute(self._q.table_lease, self._clock(self._table_key(catalog, table))).first()
        if row is None or row.lease_holder is None or row.lease_expires_ms <= row.db_now:
            return None
        return TableLease(catalog, table, row.lease_holder, row.lease_token, row.lease_expires_ms)

    def latest_table_lease_token(self, catalog: str, table: str) -> tuple[int, str | None] | None:
        """The table's current fencing token and its holder (None once released), expired or not;
        None for a table the store does not know (``latest_lease_token`` of a table)."""
        with self._read() as conn:
            row = conn.execute(self._q.table_lease, self._clock(self._table_key(catalog, table))).first()
        return None if row is None else (int(row.lease_token), row.lease_holder)
