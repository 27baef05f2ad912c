"""The batch-header walk: fields, valid prefixes, and every kind of damage named by file and byte."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from kafka.record import MemoryRecords

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import (
    CODEC_GZIP,
    CODEC_ZSTD,
    HEADER_SIZE,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    iter_batch_headers,
    scan_log,
    verify_log_crc,
)
from tiering_core.kafka.records import ControlRecordType, RecordSpec, encode_batch, encode_control_batch


def _write_log(path: Path, batches: int = 5, per_batch: int = 4) -> list[bytes]:
    out = []
    offset = 0
    for b in range(batches):
        specs = [RecordSpec(b"k%d" % (offset + i), b"v" * (20 + b), 1000 + offset + i) for i in range(per_batch)]
        out.append(encode_batch(specs, base_offset=offset, partition_leader_epoch=b // 2, codec=CODEC_GZIP * (b % 2)))
        offset += per_batch
    path.write_bytes(b"".join(out))
    return out


def test_header_fields_agree_with_kafka_python(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    data = encode_batch(
        [RecordSpec(b"a", b"1", 500), RecordSpec(None, b"2", 400), RecordSpec(b"c", None, 900)],
        base_offset=77,
        partition_leader_epoch=4,
        codec=CODEC_ZSTD,
        producer_id=1234,
        producer_epoch=3,
        base_sequence=10,
        transactional=True,
    ) + encode_control_batch(
        ControlRecordType.COMMIT,
        base_offset=80,
        partition_leader_epoch=4,
        producer_id=1234,
        producer_epoch=3,
        coordinator_epoch=9,
        timestamp=950,
    )
    log.write_bytes(data)
    ours = list(iter_batch_headers(log, verify_crc=True))
    theirs = MemoryRecords(data)
    for header in ours:
        batch = theirs.next_batch()
        assert (header.base_offset, header.last_offset, header.partition_leader_epoch) == (
            batch.base_offset,
            batch.last_offset,
            batch.leader_epoch,
        )
        assert (header.crc, header.attributes, header.base_timestamp, header.max_timestamp) == (
            batch.crc,
            batch.attributes,
            batch.first_timestamp,
            batch.max_timestamp,
        )
        assert (header.producer_id, header.producer_epoch, header.base_sequence, header.records_count) == (
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            batch.records_count,
        )
        assert (header.is_transactional, header.is_control, header.codec, header.size_in_bytes) == (
            batch.is_transactional,
            batch.is_control_batch,
            batch.compression_type,
            batch.size_in_bytes,
        )
    first, marker = ours
    assert (first.position, marker.position) == (0, first.size_in_bytes)
    assert first.base_timestamp == 500 and first.max_timestamp == 900  # base = first record, not the minimum
    assert first.next_offset == 80 and first.has_producer_id and first.timestamp_type == TIMESTAMP_CREATE_TIME
    assert marker.is_control and marker.base_sequence == -1 and marker.codec == 0


def test_log_append_time_attribute(tmp_path: Path) -> None:
    data = encode_batch(
        [RecordSpec(b"a", b"1", 5)], base_offset=0, partition_leader_epoch=0, log_append_time=True, max_timestamp=99
    )
    log = tmp_path / "x.log"
    log.write_bytes(data)
    (header,) = iter_batch_headers(log)
    assert header.is_log_append_time and header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    assert header.max_timestamp == 99 and not header.has_producer_id


def test_start_position_and_empty_file(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    batches = _write_log(log)
    start = len(batches[0]) + len(batches[1])
    assert [h.base_offset for h in iter_batch_headers(log, start)] == [8, 12, 16]
    empty = tmp_path / "00000000000000000020.log"
    empty.write_bytes(b"")
    assert list(iter_batch_headers(empty)) == [] and verify_log_crc(empty) == 0
    scan = scan_log(empty)
    assert scan.headers == [] and scan.valid_bytes == 0 and scan.error is None and scan.next_offset is None


def test_verify_log_crc_counts_every_byte(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    _write_log(log, batches=30)
    assert verify_log_crc(log) == log.stat().st_size
    scan = scan_log(log)
    assert scan.error is None and scan.valid_bytes == log.stat().st_size and scan.next_offset == 120


def _damaged(tmp_path: Path, edit) -> tuple[Path, list[int]]:  # type: ignore[no-untyped-def]
    log = tmp_path / "00000000000000000000.log"
    batches = _write_log(log)
    positions = [sum(len(b) for b in batches[:i]) for i in range(len(batches))]
    data = bytearray(log.read_bytes())
    edit(data, positions)
    log.write_bytes(bytes(data))
    return log, positions


def _assert_fails_everywhere(log: Path, position: int, reason: str, valid_batches: int) -> None:
    with pytest.raises(CorruptLogError, match=reason) as err:
        list(iter_batch_headers(log, verify_crc=True))
    assert err.value.path == log and err.value.position == position
    assert f"{log}: at byte {position}: " in str(err.value)
    with pytest.raises(CorruptLogError, match=reason) as err:
        verify_log_crc(log)
    assert err.value.position == position
    scan = scan_log(log)
    assert scan.error is not None and scan.error.position == position and len(scan.headers) == valid_batches
    assert scan.valid_bytes == position
    lenient = list(iter_batch_headers(log, verify_crc=True, strict=False))
    assert lenient == scan.headers


def test_truncated_last_batch_keeps_the_valid_prefix(tmp_path: Path) -> None:
    log, positions = _damaged(tmp_path, lambda data, _p: data.__delitem__(slice(len(data) - 7, None)))
    _assert_fails_everywhere(log, positions[-1], "beyond the end of the file", 4)
    assert scan_log(log).next_offset == 16


def test_truncated_inside_the_header(tmp_path: Path) -> None:
    log, positions = _damaged(tmp_path, lambda data, p: data.__delitem__(slice(p[-1] + 30, None)))
    _assert_fails_everywhere(log, positions[-1], f"header needs {HEADER_SIZE} bytes, 30 left", 4)
    log, positions = _damaged(tmp_path, lambda data, p: data.__delitem__(slice(p[-1] + 5, None)))
    _assert_fails_everywhere(log, positions[-1], "5 trailing byte", 4)


def test_crc_mismatch_names_stored_and_computed(tmp_path: Path) -> None:
    def flip(data: bytearray, p: list[int]) -> None:
        data[p[2] + 70] ^= 0xFF

    log, positions = _damaged(tmp_path, flip)
    _assert_fails_everywhere(log, positions[2], "CRC mismatch in batch at offset 8: stored 0x[0-9a-f]{8}, computed", 2)
    assert len(list(iter_batch_headers(log))) == 5  # without verification the walk does not look at record bytes


def test_unknown_magic(tmp_path: Path) -> None:
    log, positions = _damaged(tmp_path, lambda data, p: data.__setitem__(p[1] + 16, 1))
    _assert_fails_everywhere(log, positions[1], "unknown magic 1", 1)


def test_batch_length_beyond_the_file_end(tmp_path: Path) -> None:
    def edit(data: bytearray, p: list[int]) -> None:
        data[p[3] + 8 : p[3] + 12] = struct.pack(">i", 10**6)

    log, positions = _damaged(tmp_path, edit)
    _assert_fails_everywhere(log, positions[3], "batch length 1000000 runs .* beyond the end of the file", 3)


@pytest.mark.parametrize("length", [-5, 0, 48])
def test_too_small_batch_length(tmp_path: Path, length: int) -> None:
    def edit(data: bytearray, p: list[int]) -> None:
        data[p[2] + 8 : p[2] + 12] = struct.pack(">i", length)

    log, positions = _damaged(tmp_path, edit)
    _assert_fails_everywhere(log, positions[2], f"batch length {length} is smaller than a v2 batch header", 2)
