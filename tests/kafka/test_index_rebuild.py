"""Rebuilding a segment's indexes from its ``.log`` as a broker's ``LogSegment.append`` writes them:
equal to the writer's files byte for byte, the transaction index from the markers and the producer
state at the segment's base, and damage or a bad marker named at its batch."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import LogFile, iter_batch_headers
from tiering_core.kafka.index import (
    AbortedTxn,
    OffsetIndexEntry,
    TimeIndexEntry,
    parse_offset_index,
    parse_time_index,
    parse_txn_index,
    read_time_index,
    read_txn_index,
)
from tiering_core.kafka.index_rebuild import (
    IndexBuilder,
    complete_txn,
    decode_end_transaction_marker,
    rebuild_indexes,
)
from tiering_core.kafka.partition_log import PartitionLog
from tiering_core.kafka.records import ControlRecordType, RecordSpec, encode_batch, encode_control_batch


def _assert_rebuilds_equal_files(log: PartitionLog, interval: int) -> None:
    ongoing: dict[int, int] = {}
    for segment in log.segments:
        active = segment == log.active_segment
        rebuilt = rebuild_indexes(
            segment.log_path,
            segment.base_offset,
            index_interval_bytes=interval,
            is_active=active,
            open_txn_first_offsets=ongoing,
        )
        ongoing = rebuilt.open_transactions
        offset_index = segment.index_path.read_bytes()
        time_index = segment.time_index_path.read_bytes()
        if active:  # pre-allocated, zero-filled tail
            assert not offset_index[len(rebuilt.offset_index) :].strip(b"\0")
            assert not time_index[len(rebuilt.time_index) :].strip(b"\0")
            offset_index = offset_index[: len(rebuilt.offset_index)]
            time_index = time_index[: len(rebuilt.time_index)]
        assert offset_index == rebuilt.offset_index, segment
        assert time_index == rebuilt.time_index, segment
        stored_txn = segment.txn_index_path.read_bytes() if segment.txn_index_path else b""
        assert stored_txn == rebuilt.txn_index, segment


@pytest.mark.parametrize("interval", [0, 1, 512, 4096, 1 << 20])
def test_rebuilt_indexes_equal_the_written_ones(make_writer, interval: int) -> None:
    w = make_writer(segment_bytes=4000, index_interval_bytes=interval)
    for i in range(12):
        w.append_records(40, value_size=30, per_batch=5, key_prefix=f"r{i}")
        w.append([(b"t", b"x")], producer_id=9, transactional=True)
        w.append_records(3, value_size=10)
        if i % 2:
            w.abort(9)
        else:
            w.commit(9)
    w.set_high_watermark()
    log = PartitionLog(w.path)
    assert len(log.segments) > 3
    _assert_rebuilds_equal_files(log, interval)
    aborted = [a for s in log.segments if s.txn_index_path for a in read_txn_index(s.txn_index_path)]
    assert len(aborted) == 6
    assert all(a.first_offset < a.last_offset < a.last_stable_offset for a in aborted)


def test_rebuild_with_timestamps_going_back_and_forth(make_writer) -> None:
    w = make_writer(segment_bytes=3000, index_interval_bytes=300)
    stamps = [5000, 4000, 9000, 9000, 100, 12000, 11000, 12001, 3, 20000] * 6
    for i, ts in enumerate(stamps):
        w.append([RecordSpec(b"k%d" % i, b"v" * 90, ts), RecordSpec(b"j", b"w", ts - 50)])
    w.set_high_watermark()
    log = PartitionLog(w.path)
    assert len(log.segments) > 2
    _assert_rebuilds_equal_files(log, 300)
    for segment in log.closed_segments:
        times = read_time_index(segment.time_index_path, segment.base_offset)
        headers = list(iter_batch_headers(segment.log_path))
        true_max = max(h.max_timestamp for h in headers)
        # The roll entry: the segment's max timestamp and the last offset of the first batch carrying it.
        assert times[-1] == TimeIndexEntry(
            true_max, next(h.last_offset for h in headers if h.max_timestamp == true_max)
        )
        assert [t.timestamp for t in times] == sorted({t.timestamp for t in times})


def test_a_transaction_begun_in_an_earlier_segment_needs_the_producer_state(make_writer) -> None:
    w = make_writer(segment_bytes=10**9, index_interval_bytes=100)
    first, _ = w.append([(b"a", b"1")], producer_id=1, transactional=True)
    w.append_records(5)
    w.roll()
    other, _ = w.append([(b"b", b"2")], producer_id=2, transactional=True)
    marker = w.abort(1)
    marker2 = w.abort(2)
    w.set_high_watermark()
    log = PartitionLog(w.path)
    second = log.segments[1]
    assert read_txn_index(second.txn_index_path) == [
        AbortedTxn(1, first, marker, other),  # producer 2's transaction was still open: LSO = its first offset
        AbortedTxn(2, other, marker2, marker2 + 1),
    ]
    good = rebuild_indexes(second.log_path, second.base_offset, is_active=True, open_txn_first_offsets={1: first})
    assert good.txn_index == second.txn_index_path.read_bytes() and good.open_transactions == {}
    blind = parse_txn_index(rebuild_indexes(second.log_path, second.base_offset, is_active=True).txn_index)
    assert blind[0] == AbortedTxn(1, marker, marker, other)  # without it, Kafka too starts the txn at the marker


def test_missing_index_is_rebuildable(make_writer) -> None:
    w = make_writer(segment_bytes=5000, index_interval_bytes=256)
    w.append_records(200, value_size=40)
    w.set_high_watermark()
    seg = PartitionLog(w.path).segments[0]
    original = (seg.index_path.read_bytes(), seg.time_index_path.read_bytes())
    seg.index_path.unlink()
    seg.time_index_path.unlink()
    assert not PartitionLog(w.path).segments[0].has_index
    rebuilt = rebuild_indexes(seg.log_path, seg.base_offset, index_interval_bytes=256)
    assert (rebuilt.offset_index, rebuilt.time_index) == original and original[0]


def transactional_batch() -> bytes:
    """One transactional record at offset 0 of producer 4, before a marker at offset 1."""
    return encode_batch(
        [RecordSpec(b"a", b"1", 5)],
        base_offset=0,
        partition_leader_epoch=0,
        producer_id=4,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )


def test_rebuild_reports_damage_and_bad_markers(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    good = transactional_batch()
    leader_change = encode_control_batch(
        ControlRecordType.LEADER_CHANGE,
        base_offset=1,
        partition_leader_epoch=0,
        producer_id=4,
        producer_epoch=0,
        coordinator_epoch=0,
        timestamp=6,
    )
    log.write_bytes(good + leader_change)
    with pytest.raises(CorruptLogError, match="LEADER_CHANGE record, not a transaction marker") as err:
        rebuild_indexes(log, 0)
    assert err.value.position == len(good)
    log.write_bytes(good + good[:40])
    with pytest.raises(CorruptLogError, match="header needs 61 bytes") as err:
        rebuild_indexes(log, 0)
    assert err.value.position == len(good)
    empty = tmp_path / "00000000000000000009.log"
    empty.write_bytes(b"")
    assert rebuild_indexes(empty, 9).offset_index == b""


def test_a_marker_is_decoded_from_its_batch_bytes_and_named_at_its_position(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    good = transactional_batch()
    markers = {
        kind: encode_control_batch(
            kind,
            base_offset=1,
            partition_leader_epoch=0,
            producer_id=4,
            producer_epoch=0,
            coordinator_epoch=3,
            timestamp=6,
        )
        for kind in (ControlRecordType.COMMIT, ControlRecordType.LEADER_CHANGE)
    }
    log.write_bytes(good + markers[ControlRecordType.COMMIT])
    (header,) = list(iter_batch_headers(log, len(good)))
    with LogFile(log) as log_file:
        marker = decode_end_transaction_marker(log_file.batch_bytes(header), header, log)
    assert (marker.type, marker.coordinator_epoch) == (ControlRecordType.COMMIT, 3)
    log.write_bytes(good + markers[ControlRecordType.LEADER_CHANGE])
    (header,) = list(iter_batch_headers(log, len(good)))
    with LogFile(log) as log_file, pytest.raises(CorruptLogError, match="not a transaction marker") as err:
        decode_end_transaction_marker(log_file.batch_bytes(header), header, log)
    assert err.value.path == log and err.value.position == len(good)


# --- the rule itself, on hand-made batches ----------------------------------------------------------


def batch(offset: int, stamps: list[int], value: bytes = b"0123456789") -> bytes:
    return encode_batch([RecordSpec(b"k", value, ts) for ts in stamps], base_offset=offset, partition_leader_epoch=0)


def test_the_writer_s_builder_and_a_rebuild_apply_the_same_rule(tmp_path: Path) -> None:
    """Entries come when more than the interval was appended before a batch, at its last offset and
    start; the time index when the largest timestamp grew, and once more at the roll."""
    parts = [batch(50, [10]), batch(51, [30, 20]), batch(53, [25]), batch(54, [40]), batch(55, [35]), batch(56, [5])]
    log = tmp_path / "00000000000000000050.log"
    log.write_bytes(b"".join(parts))
    interval = len(parts[0])  # more than one batch's bytes: an entry every second batch
    positions = [sum(len(p) for p in parts[:i]) for i in range(len(parts))]
    rebuilt = rebuild_indexes(log, 50, index_interval_bytes=interval)
    expected_offsets = [OffsetIndexEntry(53, positions[2]), OffsetIndexEntry(55, positions[4])]
    assert parse_offset_index(rebuilt.offset_index, 50) == expected_offsets
    expected_times = [TimeIndexEntry(30, 52), TimeIndexEntry(40, 54)]
    assert parse_time_index(rebuilt.time_index, 50) == expected_times  # no new largest at the roll
    builder = IndexBuilder(50, index_interval_bytes=interval)
    for header in iter_batch_headers(log):
        builder.on_batch(header)
    builder.on_roll()
    assert (builder.offset_index_bytes(), builder.time_index_bytes()) == (rebuilt.offset_index, rebuilt.time_index)
    assert builder.txn_index_bytes() == rebuilt.txn_index == b""
    log.write_bytes(b"".join(parts[:5]) + batch(57, [90]))  # 57 comes one batch after an entry: none
    closed = rebuild_indexes(log, 50, index_interval_bytes=interval)
    active = rebuild_indexes(log, 50, index_interval_bytes=interval, is_active=True)
    assert parse_time_index(closed.time_index, 50) == [*expected_times, TimeIndexEntry(90, 57)]  # the roll's entry
    assert parse_time_index(active.time_index, 50) == expected_times


def test_an_aborted_transaction_s_last_stable_offset_is_the_earliest_other_open_one() -> None:
    ongoing = {7: 10, 8: 4, 9: 12}
    assert complete_txn(ongoing, 7, 20, aborted=True) == AbortedTxn(7, 10, 20, 4)
    assert ongoing == {8: 4, 9: 12}
    assert complete_txn(ongoing, 8, 21, aborted=False) is None and ongoing == {9: 12}
    assert complete_txn(ongoing, 9, 22, aborted=True) == AbortedTxn(9, 12, 22, 23)
    assert complete_txn({}, 5, 30, aborted=True) == AbortedTxn(5, 30, 30, 31)  # begun before what we know


def test_offsets_outside_the_segment_or_out_of_order_are_named_at_their_batch(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    first = batch(0, [1])
    log.write_bytes(first + batch(2**31 + 5, [2]))
    with pytest.raises(CorruptLogError, match=r"batch last offset 2147483653 is outside the segment's range") as err:
        rebuild_indexes(log, 0, index_interval_bytes=0)
    assert err.value.position == len(first)
    log.write_bytes(first + batch(9, [2]) + batch(3, [3]))
    with pytest.raises(
        CorruptLogError, match="batch last offset 3 does not follow the previous indexed offset 9"
    ) as err:
        rebuild_indexes(log, 0, index_interval_bytes=0)
    assert err.value.position == 2 * len(first)
