"""Leases and fencing (KAFKA_SEMANTICS 4): one writer per partition, and a stale one lands nothing.

A lease is the right to write one partition's metadata until it expires by the database clock.
Every acquired lease takes the partition's next fencing token, which only ever grows; every
write checks its lease's token against the current one while holding the partition row locked
(``StoreCore._fenced``), so a writer whose lease expired or was taken over is refused.

An unexpired lease blocks every other holder, with one exception: a later try of the same
scheduled task instance (``TaskAttempt``: same DAG, run, task and map index) takes over the lease
its previous try left, at once. That try ended (killed, or judged gone) before the scheduler
started the retry, so waiting for its lease to expire would only fail the retry too; the
takeover's new token fences the previous try should it still be writing somewhere.
"""

from __future__ import annotations

import logging

from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.errors import FencedError, LeaseHeldError, check_topic_name
from tiering_core.metadata.transactions import StoreCore, tip_params
from tiering_core.metadata.values import Lease, TaskAttempt

log = logging.getLogger(__name__)


class LeaseStore(StoreCore):
    """Acquiring, renewing and releasing partition leases."""

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
        kind = holder.partition(":")[0]
        if attempt is not None and holder != attempt.holder(kind):
            raise ValueError(f"lease holder {holder!r} is not the name of {attempt} ({attempt.holder(kind)!r})")
        with self._write() as conn:
            row = self._ensure(conn, tip)
            if (
                row.lease_holder is not None
                and row.lease_expires_ms > row.db_now
                and not (attempt is not None and attempt.takes_over(row.lease_holder, kind))
            ):
                raise LeaseHeldError(
                    f"{tip}: lease held by {row.lease_holder} (token {row.lease_token}) until "
                    f"{row.lease_expires_ms} ms since the epoch, {row.lease_expires_ms - row.db_now} ms from now"
                )
            if row.lease_holder is not None and row.lease_expires_ms > row.db_now:
                log.warning(
                    "%s: %s takes over the lease of its previous try %s (token %s)",
                    tip,
                    holder,
                    row.lease_holder,
                    row.lease_token,
                )
            token = row.fencing_counter + 1
            expires = row.db_now + ttl
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
