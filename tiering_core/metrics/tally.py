"""A run's counts of its acts on one partition: reported as they happen, stored once at the end.

Each act (a segment copy started, finished or failed; a deletion; a read) is reported to the
current sink at once (``sink.emit``, the one idiom) and added to the run's counts in memory.
``tallied`` adds the counts to the store's counters (``metadata.counters``) once, when the run
ends, also when it fails: one statement per partition and run, never one per segment. A store that
cannot take them does not fail the run (a copy that succeeded stays a success), but the loss is
logged as a warning naming the partition.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from tiering_core.metadata.values import NO_BROKER, PartitionCounters
from tiering_core.metrics import names
from tiering_core.metrics.names import COUNTER_FIELDS, MetricSpec
from tiering_core.metrics.sink import emit

if TYPE_CHECKING:
    from tiering_core.kafka.topic import TopicIdPartition
    from tiering_core.metadata.store import RemoteLogMetadataStore, TaskAttempt

log = logging.getLogger(__name__)


class Tally:
    """The counts of one run on one partition (on ``broker_id``, None: on no broker). Safe to
    count from the threads of parallel uploads."""

    def __init__(self, tip: TopicIdPartition, broker_id: int | None = None, attempt: TaskAttempt | None = None) -> None:
        self.tip = tip
        self.broker_id = broker_id
        self.attempt = attempt
        self.counts = PartitionCounters()
        self.copied = False
        self._lock = threading.Lock()

    def count(self, spec: MetricSpec, value: int = 1) -> None:
        """One act of ``spec`` (``value``: bytes, or how many): reported now, stored at the end."""
        name = COUNTER_FIELDS[spec]
        emit(spec, value, self.tip.topic, self.tip.partition, self.broker_id)
        with self._lock:
            setattr(self.counts, name, getattr(self.counts, name) + value)

    @contextmanager
    def request(self, requests: MetricSpec, errors: MetricSpec) -> Iterator[None]:
        """One act in the block: counted in ``requests``, and in ``errors`` when it raises."""
        self.count(requests)
        try:
            yield
        except Exception:
            self.count(errors)
            raise

    def copy_finished(self, size_bytes: int) -> None:
        """A segment copy finished: its bytes (segment and indexes), and the last copy's time."""
        self.count(names.REMOTE_COPY_BYTES, size_bytes)
        with self._lock:
            self.copied = True

    @property
    def acted(self) -> bool:
        with self._lock:
            return self.copied or self.counts != PartitionCounters()

    def store(self, store: RemoteLogMetadataStore) -> None:
        """Add the counts to the store (nothing when the run did nothing); never raises for the
        store's trouble, logs it. Counts are cleared once stored, so storing again adds nothing."""
        if not self.acted:
            return
        with self._lock:
            counts, copied = self.counts, self.copied
            self.counts, self.copied = PartitionCounters(), False
        broker = NO_BROKER if self.broker_id is None else self.broker_id
        try:
            store.add_counts(self.tip, counts, broker_id=broker, copied=copied, attempt=self.attempt)
        except Exception as exc:  # the run's outcome stands; its counts are lost, said here
            log.warning("%s: could not record the run's counters in the metadata store (%s): %s", self.tip, counts, exc)


@contextmanager
def tallied(
    store: RemoteLogMetadataStore,
    tip: TopicIdPartition,
    *,
    broker_id: int | None = None,
    attempt: TaskAttempt | None = None,
) -> Iterator[Tally]:
    """A run's tally of ``tip``, stored when the block ends (also when it raises)."""
    tally = Tally(tip, broker_id, attempt)
    try:
        yield tally
    finally:
        tally.store(store)
