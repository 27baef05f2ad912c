"""A consumer's isolation level, and which batches read_committed drops.

As a Kafka consumer with ``isolation.level=read_committed``: a transactional batch of producer P
at offset x is dropped iff an aborted transaction (P, first <= x <= last) exists, where the
aborted transactions come from the ``.txnindex`` entries (each written with its ABORT marker,
``last`` being the marker's offset) of the segment holding the batch and of later ones. Control
batches (the markers themselves) are never returned, at either level; read_uncommitted returns
every data batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum
from pathlib import Path

from tiering_core.kafka.index import AbortedTxn, collect_aborted_txns, read_txn_index


class IsolationLevel(StrEnum):
    """A consumer's ``isolation.level``: Kafka's default reads aborted transactions too."""

    READ_UNCOMMITTED = "read_uncommitted"
    READ_COMMITTED = "read_committed"


class AbortedTransactions:
    """The aborted transactions a read must skip, by producer id, and the rule that applies them."""

    def __init__(self, aborted: Iterable[AbortedTxn] = ()) -> None:
        self.by_producer: dict[int, list[AbortedTxn]] = {}
        for txn in aborted:
            self.by_producer.setdefault(txn.producer_id, []).append(txn)

    def __bool__(self) -> bool:
        return bool(self.by_producer)

    def aborts(self, producer_id: int, base_offset: int) -> bool:
        """Whether the transactional data batch of ``producer_id`` at ``base_offset`` was aborted."""
        return any(t.first_offset <= base_offset <= t.last_offset for t in self.by_producer.get(producer_id, ()))


def local_aborted_txns(txn_index_paths: Sequence[Path], fetch_offset: int, upper_offset: int) -> set[AbortedTxn]:
    """The aborted transactions overlapping [fetch_offset, upper_offset) in the ``.txnindex``
    files of a segment and the ones after it (in offset order; a missing file is a segment
    without aborts), read no further than Kafka's stop rule (``collect_aborted_txns``)."""
    found: set[AbortedTxn] = set()
    for path in txn_index_paths:
        try:
            entries = read_txn_index(path)
        except FileNotFoundError:
            continue
        result = collect_aborted_txns(entries, fetch_offset, upper_offset)
        found.update(result.aborted)
        if result.is_complete:
            break
    return found
