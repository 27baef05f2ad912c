"""Offset, time and transaction indexes: codecs, Kafka's lookups, and rebuilds equal to the written files."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import LogFile, iter_batch_headers
from tiering_core.kafka.index import (
    AbortedTxn,
    OffsetIndexEntry,
    TimeIndexEntry,
    aborted_transactions_in,
    encode_offset_index,
    encode_time_index,
    encode_txn_index,
    lookup_offset,
    lookup_timestamp,
    parse_offset_index,
    parse_time_index,
    parse_txn_index,
    read_offset_index,
    read_time_index,
    read_txn_index,
)
from tiering_core.kafka.index_rebuild import decode_end_transaction_marker, rebuild_indexes
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


def test_active_index_reads_stop_at_the_zero_tail(make_writer) -> None:
    w = make_writer(index_interval_bytes=100, preallocate_index_bytes=4096)
    w.append_records(50, value_size=50)
    w.flush()
    seg = PartitionLog(w.path).active_segment
    assert seg.index_path.stat().st_size == 4096 and seg.time_index_path.stat().st_size == 4092
    entries = read_offset_index(seg.index_path, seg.base_offset)
    assert entries and all(e.position > 0 for e in entries)
    assert encode_offset_index(entries, seg.base_offset) == seg.index_path.read_bytes()[: 8 * len(entries)]
    times = read_time_index(seg.time_index_path, seg.base_offset)
    assert times and encode_time_index(times, seg.base_offset) == seg.time_index_path.read_bytes()[: 12 * len(times)]


def test_time_index_first_entry_may_be_all_zero_only_before_a_real_one() -> None:
    real = encode_time_index([TimeIndexEntry(0, 100), TimeIndexEntry(50, 103)], 100)
    assert parse_time_index(real + bytes(24), 100) == [TimeIndexEntry(0, 100), TimeIndexEntry(50, 103)]
    assert parse_time_index(bytes(36), 100) == []
    assert parse_time_index(b"", 100) == []
    assert lookup_timestamp([], 100, 0) == lookup_timestamp([TimeIndexEntry(0, 100)], 100, -5)


def test_offset_lookup_is_kafkas_floor_on_a_real_segment(make_writer) -> None:
    w = make_writer(segment_bytes=10**9, index_interval_bytes=700)
    w.append_records(400, value_size=40, per_batch=7)
    w.roll()
    seg = PartitionLog(w.path).segments[0]
    entries = read_offset_index(seg.index_path, seg.base_offset)
    headers = list(iter_batch_headers(seg.log_path))
    assert len(entries) > 5
    for target in range(0, 400, 3):
        found = lookup_offset(entries, seg.base_offset, target)
        holder = next(h for h in headers if h.last_offset >= target)
        assert found.position <= holder.position  # the scan from here finds the batch
        assert found == max((e for e in entries if e.offset <= target), key=lambda e: e.offset, default=None) or (
            found == OffsetIndexEntry(0, 0)
        )


def test_lookups() -> None:
    entries = [OffsetIndexEntry(110, 400), OffsetIndexEntry(150, 900)]
    assert lookup_offset(entries, 100, 105) == OffsetIndexEntry(100, 0)
    assert lookup_offset(entries, 100, 110) == OffsetIndexEntry(110, 400)
    assert lookup_offset(entries, 100, 149) == OffsetIndexEntry(110, 400)
    assert lookup_offset(entries, 100, 10_000) == OffsetIndexEntry(150, 900)
    assert lookup_offset([], 100, 10_000) == OffsetIndexEntry(100, 0)
    times = [TimeIndexEntry(1000, 105), TimeIndexEntry(2000, 130), TimeIndexEntry(2500, 131)]
    assert lookup_timestamp(times, 100, 999) == TimeIndexEntry(-1, 100)
    assert lookup_timestamp(times, 100, 1000) == TimeIndexEntry(1000, 105)
    assert lookup_timestamp(times, 100, 2499) == TimeIndexEntry(2000, 130)
    assert lookup_timestamp(times, 100, 10**13) == TimeIndexEntry(2500, 131)
    txns = [AbortedTxn(1, 10, 20, 21), AbortedTxn(2, 30, 40, 41)]
    assert aborted_transactions_in(txns, 20, 30) == [txns[0]]
    assert aborted_transactions_in(txns, 21, 31) == [txns[1]]
    assert aborted_transactions_in(txns, 0, 100) == txns


def test_codecs_round_trip() -> None:
    offsets = [OffsetIndexEntry(1005, 4200), OffsetIndexEntry(1010, 9000)]
    assert parse_offset_index(encode_offset_index(offsets, 1000), 1000) == offsets
    assert encode_offset_index(offsets, 1000) == struct.pack(">iiii", 5, 4200, 10, 9000)
    times = [TimeIndexEntry(1_700_000_000_000, 1005)]
    assert encode_time_index(times, 1000) == struct.pack(">qi", 1_700_000_000_000, 5)
    txns = [AbortedTxn(7, 3, 9, 10)]
    assert encode_txn_index(txns) == struct.pack(">hqqqq", 0, 7, 3, 9, 10)
    assert parse_txn_index(encode_txn_index(txns)) == txns


@pytest.mark.parametrize(
    ("parse", "data", "reason", "position"),
    [
        (parse_offset_index, b"\0" * 9, "size 9 is not a multiple of its 8-byte entries", 8),
        (parse_offset_index, struct.pack(">iiii", 5, 80, 3, 90), "entries go backwards", 8),
        (parse_offset_index, struct.pack(">iiii", 5, 80, 6, 80), "entries go backwards", 8),
        (parse_offset_index, struct.pack(">ii", -4, 80), "negative", 0),
        (parse_time_index, b"\0" * 13, "not a multiple of its 12-byte entries", 12),
        (parse_time_index, struct.pack(">qiqi", 50, 1, 40, 2), "entries go backwards", 12),
        (parse_time_index, struct.pack(">qiqi", 50, 3, 60, 2), "entries go backwards", 12),
        (parse_txn_index, b"\0" * 35, "not a multiple of its 34-byte entries", 34),
        (parse_txn_index, struct.pack(">hqqqq", 1, 7, 3, 9, 10), "version 1", 0),
        (
            parse_txn_index,
            struct.pack(">hqqqq", 0, 7, 3, 9, 10) * 2 + struct.pack(">hqqqq", 0, 7, 9, 3, 10),
            "first offset 9 > last 3",
            68,
        ),
    ],
)
def test_malformed_index_names_file_and_position(
    tmp_path: Path, parse, data: bytes, reason: str, position: int
) -> None:
    path = tmp_path / "00000000000000000000.index"
    with pytest.raises(CorruptLogError, match=reason) as err:
        parse(data, 0, path) if parse is not parse_txn_index else parse(data, path)
    assert err.value.path == path and err.value.position == position
    assert f"{path}: at byte {position}" in str(err.value)


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


def test_rebuild_reports_damage_and_bad_markers(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    good = encode_batch(
        [RecordSpec(b"a", b"1", 5)],
        base_offset=0,
        partition_leader_epoch=0,
        producer_id=4,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
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
    good = encode_batch(
        [RecordSpec(b"a", b"1", 5)],
        base_offset=0,
        partition_leader_epoch=0,
        producer_id=4,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
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
