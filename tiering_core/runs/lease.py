"""Holding a partition: the one way a run takes, keeps and gives up a partition's lease.

KIP-405 lets one writer at a time change a partition's remote log metadata; here that writer is
the run holding the partition's lease, and every metadata write carries its fencing token. A
lease expires so that a killed run cannot block its partition forever (and a retry of the same
scheduled task, its ``TaskAttempt``, takes over its killed try's lease at once); a live run must
therefore renew it well before it expires, also while a single large segment is being
uploaded. ``held_partition`` acquires the lease, renews it from a background thread at a third
of its time to live, and releases it when the block ends. A run asks one question before it
writes, ``held.holds``; ``held.lost`` says why not (fenced by a newer run, or expired because
the process stalled).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from tiering_core.errors import TieringError
from tiering_core.metadata.errors import FencedError

if TYPE_CHECKING:
    from tiering_core.kafka.topic import TopicIdPartition
    from tiering_core.metadata.store import Lease, RemoteLogMetadataStore, TaskAttempt

log = logging.getLogger(__name__)

MIN_RENEW_INTERVAL_S = 0.05  # floor for the very short leases of tests: no busy loop


def renew_interval(lease_ms: int) -> float:
    """Seconds between renewals of a lease living ``lease_ms``: a third of it, so a missed or
    slow renewal still leaves time for the next one before the lease expires."""
    return max(lease_ms / 3000.0, MIN_RENEW_INTERVAL_S)


class HeldPartition:
    """A partition's lease while a run holds it.

    ``lease`` is the latest renewal (same token as the one acquired). Transient store errors
    while renewing are logged and retried at the next beat; a ``FencedError`` ends the hold and
    is kept in ``lost``.
    """

    def __init__(self, store: RemoteLogMetadataStore, lease: Lease) -> None:
        self._store = store
        self._lease = lease
        self._interval = renew_interval(store.lease_ms)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._released = False
        self.lost: str | None = None
        self.beats = 0

    @property
    def tip(self) -> TopicIdPartition:
        return self._lease.topic_id_partition

    @property
    def lease(self) -> Lease:
        with self._lock:
            return self._lease

    @property
    def holds(self) -> bool:
        """Still holds the partition: not released, never fenced, never expired under the run."""
        with self._lock:
            return not self._released and self.lost is None

    def lose(self, reason: object) -> None:
        """A write or renewal was fenced: the run holds the partition no more (first reason kept)."""
        with self._lock:
            if self.lost is None:
                self.lost = str(reason)

    def require(self) -> Lease:
        """The lease, or ``FencedError`` when the run no longer holds the partition."""
        with self._lock:
            if self._released or self.lost is not None:
                raise FencedError(f"{self.tip.topic_partition}: the run no longer holds the partition: {self.lost}")
            return self._lease

    def renew(self) -> bool:
        """Renew now (after a step that took long); False when the lease is gone."""
        if not self.holds:
            return False
        try:
            renewed = self._store.renew_lease(self.lease)
        except FencedError as exc:
            self.lose(exc)
            return False
        with self._lock:
            self._lease = renewed
        return True

    def newer_holder(self) -> str | None:
        """Who took the partition after this run (None when the lease merely expired, or on a
        store error). Judged by the fencing token, which only grows: a newer run that has since
        released its lease, or let it lapse, still fenced this one."""
        try:
            latest = self._store.latest_lease_token(self.tip)
        except TieringError:
            return None
        if latest is None or latest[0] == self._lease.token:
            return None
        token, holder = latest
        return holder if holder is not None else f"a newer run (token {token}, since released)"

    def _beat(self) -> None:
        while not self._stop.wait(self._interval):
            if not self.holds:
                return
            try:
                renewed = self._store.renew_lease(self.lease)
            except FencedError as exc:
                self.lose(exc)
                log.warning("%s: lease lost while working: %s", self.tip.topic_partition, exc)
                return
            except Exception as exc:  # a transient database error: the next beat tries again
                log.warning("%s: could not renew the lease (will retry): %s", self.tip.topic_partition, exc)
                continue
            with self._lock:
                self._lease = renewed
                self.beats += 1

    def _start_heartbeat(self) -> None:
        self._thread = threading.Thread(target=self._beat, name=f"lease-heartbeat-{self.tip}", daemon=True)
        self._thread.start()

    def _release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._released:
                return
            self._released = True
        try:
            self._store.release_lease_if_current(self._lease)
        except TieringError as exc:  # the run's outcome stands; the lease expires on its own
            log.warning("%s: could not release the lease: %s", self.tip.topic_partition, exc)


@contextmanager
def held_partition(
    store: RemoteLogMetadataStore,
    tip: TopicIdPartition,
    *,
    holder: str,
    run_id: str | None = None,
    heartbeat: bool = True,
    attempt: TaskAttempt | None = None,
) -> Iterator[HeldPartition]:
    """Hold ``tip`` for the block: acquire its lease (``LeaseHeldError`` when another run holds
    it), renew it in the background (unless ``heartbeat`` is False, for a single short write) and
    release it at the end, also when the block raises.

    ``holder`` is ``<kind>:<run id>``; a scheduled task's try (``attempt``) is named after its
    task instance instead, and takes over its previous try's lease at once."""
    if attempt is not None:
        holder = attempt.holder(holder.partition(":")[0])
    held = HeldPartition(store, store.acquire_lease(tip, holder=holder, run_id=run_id, attempt=attempt))
    try:
        if heartbeat:
            held._start_heartbeat()
        yield held
    finally:
        held._release()
