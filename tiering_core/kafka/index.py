"""Offset, time and transaction indexes: codecs, lookups, and rebuild from a ``.log``.

The rebuild follows a broker's ``LogSegment.append`` exactly, so rebuilt files are byte for
byte what the broker wrote: an index entry is added when more than ``index.interval.bytes``
were appended since the last one (counted before the current batch), mapping the batch's last
offset to its start position; the time index gets (max timestamp so far, its offset) at the
same cadence when the timestamp grew, and once more when the segment rolls.
"""

from __future__ import annotations

import mmap
import os
import struct
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import ATTR_CONTROL, ATTR_TRANSACTIONAL, HEADER_SIZE, RecordBatchHeader, parse_header
from tiering_core.kafka.records import ControlRecordType, decode_control_record, decode_records

DEFAULT_INDEX_INTERVAL_BYTES = 4096
NO_TIMESTAMP = -1
TXN_INDEX_VERSION = 0
OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
TXN_ENTRY = struct.Struct(">hqqqq")
# baseOffset, batchLength, leaderEpoch, magic, (crc skipped), attributes, lastOffsetDelta,
# (baseTimestamp skipped), maxTimestamp, producerId
_REBUILD_FIELDS = struct.Struct(">qiib4xhi8xqq")
_SMALL_BATCH = 8 * 1024  # after a batch smaller than this, read the next headers through a window
_SMALL_BATCH_WINDOW = 64 * 1024


@dataclass(frozen=True)
class OffsetIndexEntry:
    """An absolute offset and the byte position of the batch that holds it (or an earlier one)."""

    offset: int
    position: int


@dataclass(frozen=True)
class TimeIndexEntry:
    """The largest timestamp seen so far in the segment and the (batch last) offset carrying it."""

    timestamp: int
    offset: int


@dataclass(frozen=True)
class AbortedTxn:
    """One ``.txnindex`` entry: an aborted transaction's range and the LSO when its marker was written."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


# --- codecs ----------------------------------------------------------------------------------


def encode_offset_index(entries: Sequence[OffsetIndexEntry], base_offset: int) -> bytes:
    return b"".join(OFFSET_ENTRY.pack(e.offset - base_offset, e.position) for e in entries)


def encode_time_index(entries: Sequence[TimeIndexEntry], base_offset: int) -> bytes:
    return b"".join(TIME_ENTRY.pack(e.timestamp, e.offset - base_offset) for e in entries)


def encode_txn_index(entries: Sequence[AbortedTxn]) -> bytes:
    return b"".join(
        TXN_ENTRY.pack(TXN_INDEX_VERSION, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
        for e in entries
    )


def _check_size(data: bytes, entry_size: int, path: Path, what: str) -> None:
    if len(data) % entry_size:
        raise CorruptLogError(
            path,
            len(data) - len(data) % entry_size,
            f"{what} size {len(data)} is not a multiple of its {entry_size}-byte entries",
        )


def parse_offset_index(data: bytes, base_offset: int, path: Path = Path("<memory>")) -> list[OffsetIndexEntry]:
    """Entries up to the first all-zero one (the pre-allocated tail of an active segment).

    No real entry is all zero: the first batch of a segment never gets an entry, so no entry
    has position 0. Entries must grow strictly in offset and position, as the broker appends them.
    """
    _check_size(data, OFFSET_ENTRY.size, path, "offset index")
    entries: list[OffsetIndexEntry] = []
    last_offset, last_position = -1, -1
    for i, (rel, position) in enumerate(OFFSET_ENTRY.iter_unpack(data)):
        if rel == 0 and position == 0:
            break
        if rel < 0 or position < 0:
            raise CorruptLogError(
                path, i * OFFSET_ENTRY.size, f"offset index entry ({rel}, {position}) has a negative field"
            )
        offset = base_offset + rel
        if offset <= last_offset or position <= last_position:
            raise CorruptLogError(
                path,
                i * OFFSET_ENTRY.size,
                f"offset index entry (offset {offset}, position {position}) does not follow "
                f"(offset {last_offset}, position {last_position}): entries go backwards",
            )
        entries.append(OffsetIndexEntry(offset, position))
        last_offset, last_position = offset, position
    return entries


def parse_time_index(data: bytes, base_offset: int, path: Path = Path("<memory>")) -> list[TimeIndexEntry]:
    """Entries up to the zero-filled tail; timestamps and offsets never go backwards.

    An all-zero entry after the first is always the tail (a later entry has a larger timestamp
    and a later offset). The first entry is all zero only for a record stamped 0 ms at the
    base offset; it counts as real only when a non-zero entry follows, otherwise the index is
    read as empty, which looks up the same position (the segment's start) anyway.
    """
    _check_size(data, TIME_ENTRY.size, path, "time index")
    entries: list[TimeIndexEntry] = []
    last_ts, last_offset = -1, -1
    for i, (ts, rel) in enumerate(TIME_ENTRY.iter_unpack(data)):
        if ts == 0 and rel == 0:
            if i > 0 or len(data) < 2 * TIME_ENTRY.size or TIME_ENTRY.unpack_from(data, TIME_ENTRY.size) == (0, 0):
                break
        if rel < 0:
            raise CorruptLogError(path, i * TIME_ENTRY.size, f"time index entry ({ts}, {rel}) has a negative offset")
        offset = base_offset + rel
        if entries and (ts < last_ts or offset < last_offset):
            raise CorruptLogError(
                path,
                i * TIME_ENTRY.size,
                f"time index entry (timestamp {ts}, offset {offset}) does not follow "
                f"(timestamp {last_ts}, offset {last_offset}): entries go backwards",
            )
        entries.append(TimeIndexEntry(ts, offset))
        last_ts, last_offset = ts, offset
    return entries


def parse_txn_index(data: bytes, path: Path = Path("<memory>")) -> list[AbortedTxn]:
    """Aborted transactions in the order their markers were appended (no pre-allocation here)."""
    _check_size(data, TXN_ENTRY.size, path, "transaction index")
    entries = []
    for i, (version, pid, first, last, lso) in enumerate(TXN_ENTRY.iter_unpack(data)):
        if version != TXN_INDEX_VERSION:
            raise CorruptLogError(path, i * TXN_ENTRY.size, f"transaction index entry version {version} (expected 0)")
        if first > last:
            raise CorruptLogError(
                path,
                i * TXN_ENTRY.size,
                f"aborted transaction of producer {pid} has first offset {first} > last {last}",
            )
        entries.append(AbortedTxn(pid, first, last, lso))
    return entries


def read_offset_index(path: Path, base_offset: int) -> list[OffsetIndexEntry]:
    return parse_offset_index(Path(path).read_bytes(), base_offset, Path(path))


def read_time_index(path: Path, base_offset: int) -> list[TimeIndexEntry]:
    return parse_time_index(Path(path).read_bytes(), base_offset, Path(path))


def read_txn_index(path: Path) -> list[AbortedTxn]:
    return parse_txn_index(Path(path).read_bytes(), Path(path))


def lookup_offset(entries: Sequence[OffsetIndexEntry], base_offset: int, target: int) -> OffsetIndexEntry:
    """Kafka's ``OffsetIndex.lookup``: the greatest entry with offset <= target, else (base, 0).

    The batch holding ``target`` starts at or after the returned position.
    """
    i = bisect_right(entries, target, key=lambda e: e.offset)
    return entries[i - 1] if i else OffsetIndexEntry(base_offset, 0)


def lookup_timestamp(entries: Sequence[TimeIndexEntry], base_offset: int, target: int) -> TimeIndexEntry:
    """Kafka's ``TimeIndex.lookup``: the greatest entry with timestamp <= target, else (-1, base).

    A search for the first record with timestamp >= target starts at the offset returned
    (looked up in the offset index); records before it all have smaller timestamps.
    """
    i = bisect_right(entries, target, key=lambda e: e.timestamp)
    return entries[i - 1] if i else TimeIndexEntry(NO_TIMESTAMP, base_offset)


def aborted_transactions_in(entries: Sequence[AbortedTxn], fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
    """Kafka's ``TransactionIndex.collectAbortedTxns``: those overlapping [fetch_offset, upper_offset)."""
    return [e for e in entries if e.last_offset >= fetch_offset and e.first_offset < upper_offset]


# --- rebuild ---------------------------------------------------------------------------------


@dataclass
class IndexBuilder:
    """The broker's per-segment index bookkeeping, shared by the writer and the rebuild."""

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


def end_transaction_marker(
    mm: bytes | memoryview | mmap.mmap, header: RecordBatchHeader, path: Path
) -> ControlRecordType:
    """The type of the commit/abort marker in a transactional control batch (decodes one record)."""
    records = decode_records(
        header, bytes(mm[header.position + HEADER_SIZE : header.position + header.size_in_bytes]), path
    )
    try:
        if len(records) != 1:
            raise ValueError(f"holds {len(records)} records, not one")
        marker = decode_control_record(records[0]).type
        if marker not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            raise ValueError(f"is a {marker.name} record, not a transaction marker")
    except ValueError as exc:
        raise CorruptLogError(
            path, header.position, f"transactional control batch at offset {header.base_offset} {exc}"
        ) from None
    return marker


def _parse_at(data: bytes, position: int, path: Path, file_size: int) -> RecordBatchHeader:
    """Full header checks on bytes read from ``position`` (errors name that position)."""
    try:
        return replace(parse_header(data, 0, path, file_size - position), position=position)
    except CorruptLogError as exc:
        raise CorruptLogError(path, position + exc.position, exc.reason) from None


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
    """Rebuild a segment's three indexes by walking its batch headers, byte for byte as the broker wrote them.

    Only headers are read, except the one record of each commit/abort marker. ``is_active``
    leaves out the final time-index entry a roll adds. ``open_txn_first_offsets`` is the
    producer state at the segment's base (producer id -> first offset of its open transaction,
    e.g. from the producer snapshot named by the base offset): a transaction begun in an earlier
    segment and aborted in this one needs it for its first offset and for the LSO of other
    producers' aborts. Damage raises ``CorruptLogError`` (no CRC check: see ``verify_log_crc``).
    """
    builder = IndexBuilder(base_offset, index_interval_bytes)
    ongoing = dict(open_txn_first_offsets or {})
    path = Path(log_path)
    size = path.stat().st_size
    if size == 0:
        return RebuiltIndexes(b"", b"", b"", ongoing)
    interval = index_interval_bytes
    offsets = builder.offset_entries
    times = builder.time_entries
    # A lean loop that reads only headers (pread: cheaper than faulting in mmap pages on every
    # batch) through a small window, so runs of small batches cost one read; a malformed batch
    # is handed to the full parser for a precise error.
    fd = os.open(path, os.O_RDONLY)
    try:
        pread = os.pread
        unpack = _REBUILD_FIELDS.unpack_from
        window, window_start = b"", 0
        position = 0
        since_last = 0
        max_ts, max_ts_offset = -1, -1
        batch_size = 0
        while position < size:
            at = position - window_start
            if at + HEADER_SIZE > len(window):
                want = _SMALL_BATCH_WINDOW if batch_size < _SMALL_BATCH else HEADER_SIZE
                window, window_start, at = pread(fd, want, position), position, 0
                if len(window) < HEADER_SIZE:
                    _parse_at(window, position, path, size)
            base, length, _epoch, magic, attributes, last_delta, batch_max_ts, producer_id = unpack(window, at)
            batch_size = 12 + length
            if magic != 2 or length < HEADER_SIZE - 12 or position + batch_size > size:
                _parse_at(window[at:], position, path, size)
            last = base + last_delta
            if batch_max_ts > max_ts:
                max_ts, max_ts_offset = batch_max_ts, last
            if since_last > interval:
                offsets.append(OffsetIndexEntry(last, position))
                if max_ts > (times[-1].timestamp if times else NO_TIMESTAMP):
                    times.append(TimeIndexEntry(max_ts, max_ts_offset))
                since_last = 0
            since_last += batch_size
            if attributes & ATTR_TRANSACTIONAL:
                if attributes & ATTR_CONTROL:
                    data = pread(fd, batch_size, position)
                    header = _parse_at(data, position, path, size)
                    try:
                        marker = end_transaction_marker(data, replace(header, position=0), path)
                    except CorruptLogError as exc:
                        raise CorruptLogError(path, position, exc.reason) from None
                    entry = complete_txn(ongoing, producer_id, base, marker == ControlRecordType.ABORT)
                    if entry is not None:
                        builder.aborted.append(entry)
                else:
                    ongoing.setdefault(producer_id, base)
            position += batch_size
        builder.bytes_since_last_entry = since_last
        builder.max_timestamp_so_far, builder.offset_of_max_timestamp = max_ts, max_ts_offset
    finally:
        os.close(fd)
    if not is_active:
        builder.on_roll()
    return RebuiltIndexes(builder.offset_index_bytes(), builder.time_index_bytes(), builder.txn_index_bytes(), ongoing)
