"""Producer snapshots: Kafka's byte layout, CRC over bytes 6..end, and damage named by file and byte."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.crc import crc32c
from tiering_core.kafka.producer_snapshot import (
    ProducerStateEntry,
    encode_producer_snapshot,
    open_transactions,
    parse_producer_snapshot,
    read_producer_snapshot,
    snapshot_file_name,
    snapshot_offset,
)

ENTRIES = [
    ProducerStateEntry(5, 1, 9, 100, 2, 12345, 3, -1),
    ProducerStateEntry(2**40, 0, 0, 101, 0, 9, -1, 101),
]


def test_layout_is_kafkas(tmp_path: Path) -> None:
    data = encode_producer_snapshot(ENTRIES)
    assert len(data) == 10 + 46 * len(ENTRIES)
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 2) and crc == crc32c(data[6:])
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (5, 1, 9, 100, 2, 12345, 3, -1)
    path = tmp_path / snapshot_file_name(102)
    assert path.name == "00000000000000000102.snapshot" and snapshot_offset(path.name) == 102
    assert snapshot_offset("00000000000000000102.snapshot.deleted") is None
    path.write_bytes(data)
    assert read_producer_snapshot(path) == ENTRIES
    assert open_transactions(ENTRIES) == {2**40: 101}
    assert parse_producer_snapshot(encode_producer_snapshot([])) == []


def _corrupt(tmp_path: Path, data: bytes) -> CorruptLogError:
    path = tmp_path / "00000000000000000102.snapshot"
    path.write_bytes(data)
    with pytest.raises(CorruptLogError) as err:
        read_producer_snapshot(path)
    assert err.value.path == path and str(path) in str(err.value)
    return err.value


def test_bad_crc(tmp_path: Path) -> None:
    data = bytearray(encode_producer_snapshot(ENTRIES))
    data[-1] ^= 1
    err = _corrupt(tmp_path, bytes(data))
    assert "CRC mismatch: stored" in err.reason and err.position == 2


def test_wrong_version_short_file_and_count(tmp_path: Path) -> None:
    data = encode_producer_snapshot(ENTRIES)
    assert "version 2" in _corrupt(tmp_path, struct.pack(">h", 2) + data[2:]).reason
    assert "shorter than its 10-byte header" in _corrupt(tmp_path, data[:7]).reason
    body = struct.pack(">i", 3) + data[10:]  # count says 3, two entries follow (CRC made valid)
    err = _corrupt(tmp_path, struct.pack(">hI", 1, crc32c(body)) + body)
    assert "count 3 does not match" in err.reason and err.position == 6
