"""What a rebuild finds about one index: byte comparison names the first differing byte, an absent
transaction index is an empty one, an absent offset or time index is missing; an offset or time
index a broker wrote differently but validly is fine (said so), one a lookup would be misled by is
damaged, and the transaction index is always compared byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiering_core.events.rebuild import IndexStatus
from tiering_core.kafka.index import OFFSET_ENTRY
from tiering_core.kafka.index_rebuild import rebuild_indexes
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.partition_log import LogSegment, PartitionLog
from tiering_core.kafka.topic import TopicPartition
from tiering_core.runs.rebuild.findings import compare_index, judge_index
from tiering_core.storage.layout import ObjectKind

OFFSET, TIME, TXN = ObjectKind.OFFSET_INDEX, ObjectKind.TIME_INDEX, ObjectKind.TRANSACTION_INDEX
INTERVAL = 300


@pytest.fixture()
def closed_segment(tmp_path: Path) -> LogSegment:
    """A closed segment of a real partition log with several offset and time index entries."""
    clock = iter(range(1_700_000_000_000, 1_700_000_100_000, 7))
    writer = PartitionWriter(
        tmp_path / "kafka-logs",
        TopicPartition("orders", 0),
        segment_bytes=6000,
        index_interval_bytes=INTERVAL,
        clock=lambda: next(clock),
    )
    writer.append_records(120, value_size=40, per_batch=4)
    first = PartitionLog(writer.path).segments[0]
    assert first.log_path.stat().st_size > 4 * INTERVAL
    return first


def test_equal_bytes_are_ok_with_both_sizes() -> None:
    finding = compare_index(OFFSET, b"\x00\x01\x02\x03", b"\x00\x01\x02\x03")
    assert (finding.status, finding.stored_bytes, finding.rebuilt_bytes, finding.detail) == (IndexStatus.OK, 4, 4, None)


@pytest.mark.parametrize("at", [0, 5, 15])
def test_differing_bytes_name_the_first_difference(at: int) -> None:
    rebuilt = bytes(range(16))
    stored = bytearray(rebuilt)
    stored[at] ^= 0xFF
    stored[15] ^= 0x01 if at != 15 else 0  # a later difference does not hide the first
    finding = compare_index(TXN, bytes(stored), rebuilt)
    assert finding.status == IndexStatus.DIFFERED
    assert finding.detail == f"16 bytes stored, 16 rebuilt, first difference at byte {at}"


def test_a_stored_index_cut_short_differs_where_it_ends() -> None:
    rebuilt = bytes(range(1, 25))
    finding = compare_index(OFFSET, rebuilt[:16], rebuilt)
    assert (finding.status, finding.stored_bytes, finding.rebuilt_bytes) == (IndexStatus.DIFFERED, 16, 24)
    assert finding.detail is not None and finding.detail.endswith("first difference at byte 16")


def test_an_absent_transaction_index_is_an_empty_one() -> None:
    assert compare_index(TXN, None, b"").status == IndexStatus.OK
    missing = compare_index(TXN, None, bytes(34))  # an aborted transaction the rebuild finds
    assert (missing.status, missing.stored_bytes, missing.rebuilt_bytes) == (IndexStatus.MISSING, None, 34)


@pytest.mark.parametrize("kind", [OFFSET, TIME])
def test_an_absent_offset_or_time_index_is_missing_even_when_empty(kind: ObjectKind) -> None:
    finding = compare_index(kind, None, b"")
    assert (finding.status, finding.detail) == (IndexStatus.MISSING, "not stored")


def test_the_brokers_own_indexes_are_ok(closed_segment: LogSegment) -> None:
    rebuilt = rebuild_indexes(closed_segment.log_path, closed_segment.base_offset, index_interval_bytes=INTERVAL)
    for kind, stored, again in (
        (OFFSET, closed_segment.index_path.read_bytes(), rebuilt.offset_index),
        (TIME, closed_segment.time_index_path.read_bytes(), rebuilt.time_index),
    ):
        finding = judge_index(kind, stored, again, closed_segment.log_path, closed_segment.base_offset)
        assert (finding.status, finding.detail) == (IndexStatus.OK, None)
        assert finding.stored_bytes == finding.rebuilt_bytes == len(stored)


def test_a_sparser_offset_index_is_ok_and_said_equivalent(closed_segment: LogSegment) -> None:
    """A broker restarted mid-segment writes its next entry later than a rebuild does: every
    lookup still finds the right batch."""
    rebuilt = rebuild_indexes(closed_segment.log_path, closed_segment.base_offset, index_interval_bytes=INTERVAL)
    entries = len(rebuilt.offset_index) // OFFSET_ENTRY.size
    assert entries >= 3
    size = OFFSET_ENTRY.size
    sparser = rebuilt.offset_index[:size] + rebuilt.offset_index[2 * size :]  # the second entry left out
    finding = judge_index(OFFSET, sparser, rebuilt.offset_index, closed_segment.log_path, closed_segment.base_offset)
    assert finding.status == IndexStatus.OK
    assert finding.detail is not None and finding.detail.startswith("equivalent: ")
    assert (finding.stored_bytes, finding.rebuilt_bytes) == (len(sparser), len(rebuilt.offset_index))


def test_an_entry_pointing_inside_a_batch_is_damage(closed_segment: LogSegment) -> None:
    rebuilt = rebuild_indexes(closed_segment.log_path, closed_segment.base_offset, index_interval_bytes=INTERVAL)
    relative, position = OFFSET_ENTRY.unpack_from(rebuilt.offset_index, OFFSET_ENTRY.size)
    damaged = bytearray(rebuilt.offset_index)
    OFFSET_ENTRY.pack_into(damaged, OFFSET_ENTRY.size, relative, position + 3)
    finding = judge_index(
        OFFSET, bytes(damaged), rebuilt.offset_index, closed_segment.log_path, closed_segment.base_offset
    )
    assert finding.status == IndexStatus.DIFFERED
    detail = finding.detail or ""
    assert f"at byte {OFFSET_ENTRY.size}" in detail and "entry 1" in detail, detail
    assert f"position {position + 3}" in detail and "equivalent" not in detail, detail


def test_a_transaction_index_is_judged_byte_for_byte(closed_segment: LogSegment) -> None:
    finding = judge_index(TXN, bytes(34), bytes(33) + b"\x01", closed_segment.log_path, closed_segment.base_offset)
    assert finding.status == IndexStatus.DIFFERED
    assert finding.detail == "34 bytes stored, 34 rebuilt, first difference at byte 33"
    absent = judge_index(OFFSET, None, b"\x00" * 8, closed_segment.log_path, closed_segment.base_offset)
    assert absent.status == IndexStatus.MISSING
