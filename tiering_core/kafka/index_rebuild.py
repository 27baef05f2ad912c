"""Rebuilding a segment's offset, time and transaction indexes from its ``.log``.

The rebuild follows a broker's ``LogSegment.append`` (and ``LogSegment.recover``, which runs
the same rule): an index entry is added when more than ``index.interval.bytes`` were appended
since the last one (counted before the current batch), mapping the batch's last offset to its
start position; the time index gets (max timestamp so far, its offset) at the same cadence when
the timestamp grew, and once more when the segment rolls. So a rebuild is byte for byte what a
broker writes while it appends a segment's batches one by one in a single run, and what the
platform uploads when it rebuilds an index itself.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    HEADER_ONLY_FROM,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    READ_CHUNK,
    Buffer,
    LogFile,
    RecordBatchHeader,
    parse_header_at,
)
from tiering_core.kafka.compression import MAX_DECOMPRESSED_CONTROL_BATCH_BYTES
from tiering_core.kafka.index import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    MAX_RELATIVE_OFFSET,
    NO_TIMESTAMP,
    TIME_ENTRY,
    AbortedTxn,
    OffsetIndexEntry,
    TimeIndexEntry,
    encode_offset_index,
    encode_time_index,
    encode_txn_index,
)
from tiering_core.kafka.records import ControlRecord, ControlRecordType, decode_control_record, decode_records

# baseOffset, batchLength, (leaderEpoch skipped), magic, (crc skipped), attributes, lastOffsetDelta,
# (baseTimestamp skipped), maxTimestamp, producerId
_REBUILD_FIELDS = struct.Struct(">qi4xb4xhi8xqq")


@dataclass
class IndexBuilder:
    """The broker's per-segment index bookkeeping, kept by the writer as it appends.

    ``rebuild_indexes`` applies the same ``LogSegment.append`` rule in its own loop, written out
    for speed; the writer's files and a rebuild of the same ``.log`` are equal byte for byte.
    """

    base_offset: int
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    offset_entries: list[OffsetIndexEntry] = field(default_factory=list)
    time_entries: list[TimeIndexEntry] = field(default_factory=list)
    aborted: list[AbortedTxn] = field(default_factory=list)
    bytes_since_last_entry: int = 0
    max_timestamp_so_far: int = -1
    offset_of_max_timestamp: int = -1

    def on_batch(self, header: RecordBatchHeader) -> None:
        """``LogSegment.append`` for one batch: update the max timestamp, then maybe index it."""
        if header.max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        if self.bytes_since_last_entry > self.index_interval_bytes:
            self.offset_entries.append(OffsetIndexEntry(header.last_offset, header.position))
            self._maybe_append_time(self.max_timestamp_so_far, self.offset_of_max_timestamp)
            self.bytes_since_last_entry = 0
        self.bytes_since_last_entry += header.size_in_bytes

    def _maybe_append_time(self, timestamp: int, offset: int) -> None:
        last_ts = self.time_entries[-1].timestamp if self.time_entries else NO_TIMESTAMP
        if timestamp > last_ts:
            self.time_entries.append(TimeIndexEntry(timestamp, offset))

    def on_roll(self) -> None:
        """Closing the segment appends the final (max timestamp so far, its offset) entry if it is new."""
        self._maybe_append_time(self.max_timestamp_so_far, self.offset_of_max_timestamp)

    def offset_index_bytes(self) -> bytes:
        return encode_offset_index(self.offset_entries, self.base_offset)

    def time_index_bytes(self) -> bytes:
        return encode_time_index(self.time_entries, self.base_offset)

    def txn_index_bytes(self) -> bytes:
        return encode_txn_index(self.aborted)


def complete_txn(ongoing: dict[int, int], producer_id: int, marker_offset: int, aborted: bool) -> AbortedTxn | None:
    """End ``producer_id``'s transaction at its marker; an abort yields its ``.txnindex`` entry.

    As Kafka's ``ProducerStateManager``: the transaction's first offset is the producer's open
    transaction (the marker's own offset if none is known), and the entry's last stable offset
    is ``lastStableOffset(completedTxn)``: the first offset of the earliest transaction of
    *another* producer still open when the marker is appended, else the marker's offset + 1.
    ``ongoing`` (producer id -> first offset of its open transaction) is updated in place.
    """
    first = ongoing.pop(producer_id, marker_offset)
    if not aborted:
        return None
    lso = min(ongoing.values()) if ongoing else marker_offset + 1
    return AbortedTxn(producer_id, first, marker_offset, lso)


def decode_end_transaction_marker(data: Buffer, header: RecordBatchHeader, path: Path) -> ControlRecord:
    """The commit/abort marker (type and coordinator epoch) in a transactional control batch.

    ``data`` holds the batch from its byte 0 (e.g. ``LogFile.batch_bytes``); only its one record
    is decoded. Anything but one ABORT or COMMIT record is a ``CorruptLogError`` naming the
    batch at ``header.position``, where it sits in its file.
    """
    records = decode_records(
        header, bytes(data[HEADER_SIZE : header.size_in_bytes]), path, MAX_DECOMPRESSED_CONTROL_BATCH_BYTES
    )
    try:
        if len(records) != 1:
            raise ValueError(f"holds {len(records)} records, not one")
        marker = decode_control_record(records[0])
        if marker.type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            raise ValueError(f"is a {marker.type.name} record, not a transaction marker")
    except ValueError as exc:
        raise CorruptLogError(
            path, header.position, f"transactional control batch at offset {header.base_offset} {exc}"
        ) from None
    return marker


def read_end_transaction_marker(log: LogFile, header: RecordBatchHeader) -> ControlRecord:
    """Read and decode the marker batch ``header`` describes from an open ``.log``."""
    return decode_end_transaction_marker(log.batch_bytes(header), header, log.path)


@dataclass(frozen=True)
class RebuiltIndexes:
    """A segment's index files as the broker writes them, and the open transactions at its end."""

    offset_index: bytes
    time_index: bytes
    txn_index: bytes
    open_transactions: dict[int, int]


def rebuild_indexes(
    log_path: Path,
    base_offset: int,
    *,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    is_active: bool = False,
    open_txn_first_offsets: Mapping[int, int] | None = None,
) -> RebuiltIndexes:
    """Rebuild a segment's three indexes by walking its batch headers, byte for byte as the broker writes them.

    Only headers are read, except the one record of each commit/abort marker. ``is_active``
    leaves out the final time-index entry a roll adds. ``open_txn_first_offsets`` is the
    producer state at the segment's base (producer id -> first offset of its open transaction,
    e.g. from the producer snapshot named by the base offset): a transaction begun in an earlier
    segment and aborted in this one needs it for its first offset and for the LSO of other
    producers' aborts. Damage raises ``CorruptLogError`` (no CRC check: see ``verify_log_crc``).

    The loop is written out for speed (it is the cost of every index check): between large
    batches only each 61-byte header is read, between small ones a chunk at a time; entries are
    packed as they are found. The file is read by ``pread`` (see ``batch``: never mmap).
    """
    with LogFile(Path(log_path)) as log:
        try:
            return _rebuild(log, base_offset, index_interval_bytes, is_active, dict(open_txn_first_offsets or {}))
        except CorruptLogError as exc:
            raise log.explain(exc) from None


def _rebuild(log: LogFile, base_offset: int, interval: int, is_active: bool, ongoing: dict[int, int]) -> RebuiltIndexes:
    """The loop of ``rebuild_indexes`` over an open ``.log``."""
    aborted: list[AbortedTxn] = []
    offset_fields: list[int] = []  # relative offset, position, relative offset, ...: packed at the end
    time_index = bytearray()
    add_offset_field = offset_fields.append
    pack_time = TIME_ENTRY.pack
    max_ts, max_ts_offset = -1, -1
    path, size = log.path, log.size
    unpack = _REBUILD_FIELDS.unpack_from
    pread, preadv = os.pread, os.preadv
    fd = log.fd
    buf = bytearray(READ_CHUNK)
    view = memoryview(buf)
    window: bytes | bytearray = buf
    window_start = window_len = 0
    position = since_last = batch_size = 0
    last_indexed, last_time = base_offset - 1, NO_TIMESTAMP
    highest = base_offset + MAX_RELATIVE_OFFSET
    min_length = HEADER_SIZE - LOG_OVERHEAD
    while position < size:
        at = position - window_start
        if at + HEADER_SIZE > window_len:
            if batch_size >= HEADER_ONLY_FROM:
                window = pread(fd, HEADER_SIZE, position)
                window_len = len(window)
            else:
                window = buf
                window_len = preadv(fd, [view[: min(READ_CHUNK, size - position)]], position)
            window_start, at = position, 0
            if window_len < HEADER_SIZE:  # the file ends (or was cut) inside this header
                parse_header_at(window, 0, path, position, position + window_len)
        base, length, magic, attributes, last_delta, batch_max_ts, producer_id = unpack(window, at)
        batch_size = LOG_OVERHEAD + length
        if magic != MAGIC_V2 or length < min_length or position + batch_size > size:
            parse_header_at(window, at, path, position, size)  # raises, naming the problem
        last = base + last_delta
        if batch_max_ts > max_ts:
            max_ts, max_ts_offset = batch_max_ts, last
        if since_last > interval:
            if not last_indexed < last <= highest:
                raise _offset_out_of_order(path, position, base_offset, last, last_indexed)
            add_offset_field(last - base_offset)
            add_offset_field(position)
            last_indexed = last
            if max_ts > last_time:
                time_index += pack_time(max_ts, max_ts_offset - base_offset)
                last_time = max_ts
            since_last = 0
        since_last += batch_size
        if attributes & ATTR_TRANSACTIONAL:
            if attributes & ATTR_CONTROL:
                header = parse_header_at(window, at, path, position, size)
                marker = read_end_transaction_marker(log, header)
                entry = complete_txn(ongoing, producer_id, base, marker.type == ControlRecordType.ABORT)
                if entry is not None:
                    aborted.append(entry)
            else:
                ongoing.setdefault(producer_id, base)
        position += batch_size
    if not is_active and max_ts > last_time:  # the roll's final entry
        if not base_offset <= max_ts_offset <= base_offset + MAX_RELATIVE_OFFSET:
            raise _offset_out_of_order(path, 0, base_offset, max_ts_offset, base_offset - 1)
        time_index += pack_time(max_ts, max_ts_offset - base_offset)
    offset_index = struct.pack(f">{len(offset_fields)}i", *offset_fields)
    return RebuiltIndexes(offset_index, bytes(time_index), encode_txn_index(aborted), ongoing)


def _offset_out_of_order(path: Path, position: int, base_offset: int, offset: int, previous: int) -> CorruptLogError:
    if offset <= previous:
        reason = f"batch last offset {offset} does not follow the previous indexed offset {previous}"
    else:
        reason = f"batch last offset {offset} is outside the segment's range [{base_offset}, {base_offset} + 2^31 - 1]"
    return CorruptLogError(path, position, reason)
