"""read_committed's rule (``tiering_core/kafka/isolation.py``): a transactional batch is dropped
iff an aborted transaction of its producer covers its offset, the aborted transactions read from
the ``.txnindex`` files of a segment and the later ones, no further than Kafka's stop rule.
Over segments our writer lays out as a broker does (reads across segments and tiers:
tests/read/test_isolation.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.index import AbortedTxn
from tiering_core.kafka.isolation import AbortedTransactions, IsolationLevel, local_aborted_txns
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.topic import TopicPartition


def ranges(found: set[AbortedTxn]) -> set[tuple[int, int, int]]:
    return {(t.producer_id, t.first_offset, t.last_offset) for t in found}


def test_a_batch_is_aborted_only_inside_an_aborted_transaction_of_its_producer() -> None:
    assert not AbortedTransactions()
    aborted = AbortedTransactions([AbortedTxn(7, 10, 20, 10), AbortedTxn(7, 40, 45, 40), AbortedTxn(8, 0, 5, 0)])
    assert aborted
    assert [aborted.aborts(7, offset) for offset in (9, 10, 15, 20, 21, 40, 45, 46)] == [
        False,
        True,
        True,
        True,  # the marker's own offset closes the range
        False,
        True,
        True,
        False,
    ]
    assert not aborted.aborts(9, 15)  # another producer's batch at the same offsets: committed or open
    assert aborted.aborts(8, 5) and not aborted.aborts(8, 6)
    assert IsolationLevel("read_committed") is IsolationLevel.READ_COMMITTED
    assert IsolationLevel.READ_UNCOMMITTED.value == "read_uncommitted"  # Kafka's default


def test_the_aborted_transactions_of_a_read_come_from_this_segment_s_txn_index_and_later_ones(tmp_path: Path) -> None:
    w = PartitionWriter(tmp_path, TopicPartition("orders", 0))
    w.begin_transaction(7)
    w.append([(None, b"a"), (None, b"b")], producer_id=7)  # 0..1
    w.append([(None, b"plain")])  # 2
    first_abort = w.abort(7)  # 3
    w.roll()  # [0..3]
    w.append([(None, b"plain")])  # 4
    w.roll()  # [4..4]: no aborts, no .txnindex
    w.begin_transaction(8)
    w.append([(None, b"c")], producer_id=8)  # 5
    second_abort = w.abort(8)  # 6
    w.roll()  # [5..6]
    indexes = [w.path / f"{base:020d}.txnindex" for base in (0, 4, 5)]
    assert not indexes[1].exists()  # a segment without aborts: skipped, not an error
    both = {(7, 0, first_abort), (8, 5, second_abort)}
    assert ranges(local_aborted_txns(indexes, 0, 7)) == both
    assert ranges(local_aborted_txns(indexes[1:], 4, 7)) == {(8, 5, second_abort)}
    assert ranges(local_aborted_txns(indexes, 4, 7)) == {(8, 5, second_abort)}  # 7's ended below the fetch
    # Kafka's stop rule: 7's marker was written when the LSO reached 4 (no transaction open below
    # it), so no later marker can abort anything below 4 and the files after it are not read (a
    # damaged one would be an error if they were).
    damaged = w.path / "00000000000000000099.txnindex"
    damaged.write_bytes(b"\x00" * 10)
    assert ranges(local_aborted_txns([indexes[0], damaged], 0, 4)) == {(7, 0, first_abort)}
    with pytest.raises(CorruptLogError, match="transaction index"):
        local_aborted_txns([indexes[0], damaged], 0, 5)
