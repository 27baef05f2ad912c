"""Producer state as Kafka's ``ProducerStateManager`` keeps it: one entry per producer id.

The broker snapshots this state at every segment roll (``<offset>.snapshot``). Replaying batch
headers onto an earlier snapshot gives the state at any later offset, which is how the writer
restarts after a truncation and how a copy rebuilds a snapshot the broker no longer has. The
rules are ``ProducerAppendInfo``'s: a data batch sets the producer's last sequence, offset,
offset delta and timestamp and may open a transaction; a commit/abort marker records the
coordinator epoch and the marker's timestamp and closes it; a higher producer epoch restarts
the sequence.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tiering_core.kafka.batch import RecordBatchHeader
from tiering_core.kafka.index import AbortedTxn
from tiering_core.kafka.index_rebuild import complete_txn
from tiering_core.kafka.producer_snapshot import ProducerStateEntry
from tiering_core.kafka.records import NO_SEQUENCE, ControlRecord, ControlRecordType


@dataclass
class ProducerState:
    """One producer's entry while it is being built (a mutable ``ProducerStateEntry``)."""

    producer_id: int
    epoch: int
    last_sequence: int = NO_SEQUENCE
    last_offset: int = -1
    offset_delta: int = 0
    timestamp: int = -1
    coordinator_epoch: int = -1
    txn_first_offset: int = -1

    @classmethod
    def of(cls, entry: ProducerStateEntry) -> ProducerState:
        return cls(
            entry.producer_id,
            entry.producer_epoch,
            entry.last_sequence,
            entry.last_offset,
            entry.offset_delta,
            entry.timestamp,
            entry.coordinator_epoch,
            entry.current_txn_first_offset,
        )

    def entry(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.epoch,
            self.last_sequence,
            self.last_offset,
            self.offset_delta,
            self.timestamp,
            self.coordinator_epoch,
            self.txn_first_offset,
        )


class ProducerStateTracker:
    """Every producer's state and the partition's open transactions, advanced batch by batch."""

    def __init__(self, entries: Iterable[ProducerStateEntry] = ()) -> None:
        self.producers: dict[int, ProducerState] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        for entry in entries:
            self.producers[entry.producer_id] = ProducerState.of(entry)
            if entry.has_open_transaction:
                self.ongoing[entry.producer_id] = entry.current_txn_first_offset

    def producer(self, producer_id: int, producer_epoch: int) -> ProducerState:
        """The producer's state, created on first sight; a newer epoch restarts its sequence."""
        state = self.producers.get(producer_id)
        if state is None:
            state = self.producers[producer_id] = ProducerState(producer_id, max(producer_epoch, 0))
        elif producer_epoch > state.epoch:  # a producer restart or fencing: sequences restart
            state.epoch = producer_epoch
            state.last_sequence = NO_SEQUENCE
        return state

    def next_batch(self, producer_id: int, producer_epoch: int) -> tuple[int, int]:
        """(epoch, base sequence) of the producer's next batch, without creating its state: a
        broker holds no entry for a producer until a batch of it is appended (a snapshot taken at
        a roll just before a new producer's first batch does not name it)."""
        state = self.producers.get(producer_id)
        if state is None:
            return max(producer_epoch, 0), 0
        if producer_epoch > state.epoch:
            return producer_epoch, 0
        return state.epoch, state.last_sequence + 1

    def on_data_batch(self, header: RecordBatchHeader) -> None:
        """``ProducerAppendInfo.append`` for a data batch (batches without a producer id are ignored)."""
        if not header.has_producer_id:
            return
        state = self.producer(header.producer_id, header.producer_epoch)
        state.last_sequence = header.base_sequence + header.last_offset_delta if header.base_sequence >= 0 else -1
        state.last_offset = header.last_offset
        state.offset_delta = header.last_offset_delta
        state.timestamp = header.max_timestamp
        if header.is_transactional and state.txn_first_offset < 0:
            state.txn_first_offset = header.base_offset
            self.ongoing[header.producer_id] = header.base_offset

    def on_end_marker(self, header: RecordBatchHeader, marker: ControlRecord) -> AbortedTxn | None:
        """``appendEndTxnMarker``: closes the producer's transaction; an abort returns its ``.txnindex`` entry."""
        state = self.producer(header.producer_id, header.producer_epoch)
        state.coordinator_epoch = marker.coordinator_epoch
        state.timestamp = header.max_timestamp
        state.txn_first_offset = -1
        return complete_txn(
            self.ongoing, header.producer_id, header.base_offset, marker.type == ControlRecordType.ABORT
        )

    def snapshot_entries(self) -> list[ProducerStateEntry]:
        """The entries a snapshot taken now holds, by producer id."""
        return [p.entry() for p in sorted(self.producers.values(), key=lambda p: p.producer_id)]
