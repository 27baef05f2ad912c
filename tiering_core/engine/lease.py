"""Holding a partition: the one way a run takes, keeps and gives up a partition's lease (and an
export takes, keeps and gives up its table's, by the same idiom).

KIP-405 lets one writer at a time change a partition's remote log metadata; here that writer is
the run holding the partition's lease, and every metadata write carries its fencing token. A
lease expires so that a killed run cannot block its partition forever (and a retry of the same
scheduled task, its ``TaskAttempt``, takes over its killed try's lease at once); a live run must
therefore renew it well before it expires, also while a single large segment is being
uploaded. ``held_partition`` acquires the lease, renews it from a background thread at a third
of its time to live, and releases it when the block ends. A run asks one question before it
writes, ``held.holds``; ``held.lost`` says why not (fenced by a newer run, or expired because
the process stalled). ``held_table`` does the same for an Iceberg table the export writes
(docs/export.md: one export of a table at a time).
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Generic, TypeVar

from tiering_core.errors import TieringError
from tiering_core.metadata.errors import FencedError

if TYPE_CHECKING:
    from tiering_core.kafka.topic import TopicIdPartition
    from tiering_core.metadata.store import Lease, RemoteLogMetadataStore, TableLease, TaskAttempt

log = logging.getLogger(__name__)

MIN_RENEW_INTERVAL_S = 0.05  # floor for the very short leases of tests: no busy loop

L = TypeVar("L", "Lease", "TableLease")


def renew_interval(lease_ms: int) -> float:
    """Seconds between renewals of a lease living ``lease_ms``: a third of it, so a missed or
    slow renewal still leaves time for the next one before the lease expires."""
    return max(lease_ms / 3000.0, MIN_RENEW_INTERVAL_S)


class HeldLease(ABC, Generic[L]):
    """A lease while a run holds it (a partition's or a table's: the subclasses say which).

    ``lease`` is the latest renewal (same token as the one acquired). Transient store errors
    while renewing are logged and retried at the next beat; a ``FencedError`` ends the hold and
    is kept in ``lost``.
    """

    noun = "lease"

    def __init__(self, store: RemoteLogMetadataStore, lease: L) -> None:
        self._store = store
        self._lease: L = lease
        self._interval = renew_interval(store.lease_ms)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._released = False
        self.lost: str | None = None
        self.beats = 0

    @property
    @abstractmethod
    def subject(self) -> str:
        """What the lease holds, as messages name it."""

    @abstractmethod
    def _renewed(self, lease: L) -> L:
        """The lease renewed in the store (raises ``FencedError`` once it is not ours)."""

    @abstractmethod
    def _give_up(self, lease: L) -> None:
        """Release the lease in the store, if it is still ours."""

    @abstractmethod
    def _latest(self) -> tuple[int, str | None] | None:
        """The newest token and holder the store has for what the lease holds."""

    @property
    def lease(self) -> L:
        with self._lock:
            return self._lease

    @property
    def holds(self) -> bool:
        """Still holds the lease: not released, never fenced, never expired under the run."""
        with self._lock:
            return not self._released and self.lost is None

    def lose(self, reason: object) -> None:
        """A write or renewal was fenced: the run holds the lease no more (first reason kept)."""
        with self._lock:
            if self.lost is None:
                self.lost = str(reason)

    def require(self) -> L:
        """The lease, or ``FencedError`` when the run no longer holds it."""
        with self._lock:
            if self._released or self.lost is not None:
                raise FencedError(f"{self.subject}: the run no longer holds the {self.noun}: {self.lost}")
            return self._lease

    def renew(self) -> bool:
        """Renew now (after a step that took long, or to be sure of the lease just before an act
        the store cannot fence itself); False when the lease is gone."""
        if not self.holds:
            return False
        try:
            renewed = self._renewed(self.lease)
        except FencedError as exc:
            self.lose(exc)
            return False
        with self._lock:
            self._lease = renewed
        return True

    def newer_holder(self) -> str | None:
        """Who took the lease after this run (None when the lease merely expired, or on a store
        error). Judged by the fencing token, which only grows: a newer run that has since released
        its lease, or let it lapse, still fenced this one."""
        try:
            latest = self._latest()
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
                renewed = self._renewed(self.lease)
            except FencedError as exc:
                self.lose(exc)
                log.warning("%s: lease lost while working: %s", self.subject, exc)
                return
            except Exception as exc:  # a transient database error: the next beat tries again
                log.warning("%s: could not renew the lease (will retry): %s", self.subject, exc)
                continue
            with self._lock:
                self._lease = renewed
                self.beats += 1

    def _start_heartbeat(self) -> None:
        self._thread = threading.Thread(target=self._beat, name=f"lease-heartbeat-{self.subject}", daemon=True)
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
            self._give_up(self._lease)
        except TieringError as exc:  # the run's outcome stands; the lease expires on its own
            log.warning("%s: could not release the lease: %s", self.subject, exc)


class HeldPartition(HeldLease["Lease"]):
    """A partition's lease while a run holds it."""

    noun = "partition"

    @property
    def tip(self) -> TopicIdPartition:
        return self._lease.topic_id_partition

    @property
    def subject(self) -> str:
        return str(self.tip.topic_partition)

    def _renewed(self, lease: Lease) -> Lease:
        return self._store.renew_lease(lease)

    def _give_up(self, lease: Lease) -> None:
        self._store.release_lease_if_current(lease)

    def _latest(self) -> tuple[int, str | None] | None:
        return self._store.latest_lease_token(self.tip)


class HeldTable(HeldLease["TableLease"]):
    """An export table's lease while an export holds it."""

    noun = "table"

    @property
    def subject(self) -> str:
        return self._lease.table

    def _renewed(self, lease: TableLease) -> TableLease:
        return self._store.renew_table_lease(lease)

    def _give_up(self, lease: TableLease) -> None:
        self._store.release_table_lease_if_current(lease)

    def _latest(self) -> tuple[int, str | None] | None:
        return self._store.latest_table_lease_token(self._lease.catalog, self._lease.table)


H = TypeVar("H", HeldPartition, HeldTable)


@contextmanager
def _holding(held: H, heartbeat: bool) -> Iterator[H]:
    try:
        if heartbeat:
            held._start_heartbeat()
        yield held
    finally:
        held._release()


def _holder(holder: str, attempt: TaskAttempt | None) -> str:
    """``holder`` (``<kind>:<run id>``), or for a scheduled task's try its task instance's name."""
    return holder if attempt is None else attempt.holder(holder.partition(":")[0])


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
    holder = _holder(holder, attempt)
    held = HeldPartition(store, store.acquire_lease(tip, holder=holder, run_id=run_id, attempt=attempt))
    with _holding(held, heartbeat) as holding:
        yield holding


@contextmanager
def held_table(
    store: RemoteLogMetadataStore,
    catalog: str,
    table: str,
    *,
    holder: str,
    run_id: str | None = None,
    attempt: TaskAttempt | None = None,
) -> Iterator[HeldTable]:
    """Hold the export table ``table`` (``namespace.name``) of ``catalog`` for the block, as
    ``held_partition`` holds a partition (``LeaseHeldError`` while another export holds it)."""
    holder = _holder(holder, attempt)
    lease = store.acquire_table_lease(catalog, table, holder, run_id=run_id, attempt=attempt)
    with _holding(HeldTable(store, lease), heartbeat=True) as held:
        yield held
