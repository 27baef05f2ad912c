"""Keeping a partition's lease alive while a run does long work (uploads, downloads, scans).

A lease expires so that a killed run cannot block its partition forever; a live run must
therefore renew it well before it expires, also while a single large segment is being
uploaded. ``LeaseHeartbeat`` renews from a background thread at a third of the lease's time
to live and remembers why it stopped if the lease was lost (fenced by a newer run, or expired
because the process stalled).
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType
from typing import TYPE_CHECKING

from tiering_core.metadata.errors import FencedError

if TYPE_CHECKING:
    from tiering_core.metadata.store import Lease, RemoteLogMetadataStore

log = logging.getLogger(__name__)

MIN_RENEW_INTERVAL_S = 0.05  # floor for the very short leases of tests: no busy loop


def renew_interval(lease_ms: int) -> float:
    """Seconds between renewals of a lease living ``lease_ms``: a third of it, so a missed or
    slow renewal still leaves time for the next one before the lease expires."""
    return max(lease_ms / 3000.0, MIN_RENEW_INTERVAL_S)


class LeaseHeartbeat:
    """Renew ``lease`` every ``interval_s`` seconds (default: a third of the store's lease time)
    until the ``with`` block ends. Transient store errors are logged and retried at the next beat;
    a ``FencedError`` stops the beat and is kept in ``lost``."""

    def __init__(self, store: RemoteLogMetadataStore, lease: Lease, *, interval_s: float | None = None) -> None:
        self._store = store
        self._lease = lease
        self._interval = interval_s if interval_s is not None else renew_interval(store.lease_ms)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.lost: str | None = None
        self.beats = 0

    @property
    def lease(self) -> Lease:
        """The latest renewed lease (same token as the one given)."""
        with self._lock:
            return self._lease

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                renewed = self._store.renew_lease(self.lease)
            except FencedError as exc:
                with self._lock:
                    self.lost = str(exc)
                log.warning("%s: lease lost while working: %s", self._lease.topic_id_partition.topic_partition, exc)
                return
            except Exception as exc:  # a transient database error: the next beat tries again
                tp = self._lease.topic_id_partition.topic_partition
                log.warning("%s: could not renew the lease (will retry): %s", tp, exc)
                continue
            with self._lock:
                self._lease = renewed
                self.beats += 1

    def __enter__(self) -> LeaseHeartbeat:
        self._thread = threading.Thread(
            target=self._run, name=f"lease-heartbeat-{self._lease.topic_id_partition}", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
