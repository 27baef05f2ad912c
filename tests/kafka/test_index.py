"""Offset, time and transaction indexes: codecs, Kafka's lookups, and what the writer's files hold
(their rebuild from the ``.log``: test_index_rebuild.py)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import iter_batch_headers
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
)
from tiering_core.kafka.partition_log import PartitionLog


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
