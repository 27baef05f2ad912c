"""Producer state snapshots ``<offset:020d>.snapshot``: every producer's state before ``offset``.

Format of Kafka's ``ProducerStateManager``: ``version:i16=1, crc:u32, count:i32`` then 46-byte
entries; the CRC-32C covers everything from byte 6 (the count) to the end. The snapshot named
by a segment's base offset is the producer state a reader of that segment starts from; its
``current_txn_first_offset`` values are the transactions still open there.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.crc import crc32c
from tiering_core.kafka.files import SNAPSHOT_READ_LIMIT, read_regular

SNAPSHOT_VERSION = 1
SNAPSHOT_SUFFIX = ".snapshot"
NO_TXN = -1
_HEADER = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_START = 6
_FILE_NAME = re.compile(r"^(\d{20})\.snapshot$")


@dataclass(frozen=True)
class ProducerStateEntry:
    """One producer's state: its last batch and the transaction it has open, if any."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int  # last offset - first offset of the producer's last batch
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1: no open transaction

    @property
    def has_open_transaction(self) -> bool:
        return self.current_txn_first_offset >= 0


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offset(name: str) -> int | None:
    """The offset a snapshot file name stands for; None if it is not ``<offset:020d>.snapshot``."""
    match = _FILE_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


def encode_producer_snapshot(entries: Sequence[ProducerStateEntry]) -> bytes:
    body = struct.pack(">i", len(entries)) + b"".join(
        _ENTRY.pack(
            e.producer_id,
            e.producer_epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        for e in entries
    )
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(body)) + body


def parse_producer_snapshot(data: bytes, path: Path | str = Path("<memory>")) -> list[ProducerStateEntry]:
    """Entries of a snapshot; a wrong version, CRC or size raises ``CorruptLogError`` naming the byte."""
    path = Path(path)
    if len(data) < _HEADER.size:
        raise CorruptLogError(
            path, 0, f"producer snapshot is {len(data)} bytes, shorter than its {_HEADER.size}-byte header"
        )
    version, crc, count = _HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptLogError(path, 0, f"producer snapshot version {version} (expected {SNAPSHOT_VERSION})")
    computed = crc32c(memoryview(data)[_CRC_START:])
    if computed != crc:
        raise CorruptLogError(
            path, 2, f"producer snapshot CRC mismatch: stored {crc:#010x}, computed {computed:#010x} over bytes 6..end"
        )
    if count < 0 or len(data) != _HEADER.size + count * _ENTRY.size:
        raise CorruptLogError(
            path,
            _CRC_START,
            f"producer snapshot count {count} does not match its {len(data)} bytes ({_ENTRY.size} per entry)",
        )
    return [ProducerStateEntry(*fields) for fields in _ENTRY.iter_unpack(memoryview(data)[_HEADER.size :])]


def read_producer_snapshot(path: Path) -> list[ProducerStateEntry]:
    return parse_producer_snapshot(read_regular(Path(path), SNAPSHOT_READ_LIMIT, "producer snapshot"), Path(path))


def open_transactions(entries: Sequence[ProducerStateEntry]) -> dict[int, int]:
    """Producer id -> first offset of its open transaction (the input ``rebuild_indexes`` wants)."""
    return {e.producer_id: e.current_txn_first_offset for e in entries if e.has_open_transaction}
